// rt.local_slice: one start list per rank of the world, each block inside
// the input, the input's element type and rank.
// RUN: shard-opt %s -split-input-file -verify-diagnostics

func.func @ok(%a: memref<4x6xf32>, %b: memref<2x3xf32>) attributes {rt.world_size = 2 : i64} {
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%b : memref<2x3xf32>) {starts = [array<i64: 0, 0>, array<i64: 2, 3>]}
  return
}

// -----

func.func @starts_per_rank(%a: memref<4x6xf32>, %b: memref<2x6xf32>) attributes {rt.world_size = 4 : i64} {
  // expected-error @+1 {{starts has 2 entries for a world of 4 ranks (rt.world_size on the function)}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%b : memref<2x6xf32>) {starts = [array<i64: 0, 0>, array<i64: 2, 0>]}
  return
}

// -----

func.func @no_world_size(%a: memref<4x6xf32>, %b: memref<2x6xf32>) {
  // expected-error @+1 {{starts has 2 entries for a world of 1 ranks}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%b : memref<2x6xf32>) {starts = [array<i64: 0, 0>, array<i64: 2, 0>]}
  return
}

// -----

func.func @start_length(%a: memref<4x6xf32>, %b: memref<2x6xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{the start of rank 1 has 1 entries, expected 2}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%b : memref<2x6xf32>) {starts = [array<i64: 0, 0>, array<i64: 2>]}
  return
}

// -----

func.func @block_outside(%a: memref<4x6xf32>, %b: memref<2x3xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{the block of rank 1 leaves the input in dimension 1 (start 4, size 3, input size 6)}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%b : memref<2x3xf32>) {starts = [array<i64: 0, 0>, array<i64: 2, 4>]}
  return
}

// -----

func.func @negative_start(%a: memref<4x6xf32>, %b: memref<2x3xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{the block of rank 0 leaves the input in dimension 0 (start -1, size 2, input size 4)}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%b : memref<2x3xf32>) {starts = [array<i64: -1, 0>, array<i64: 2, 3>]}
  return
}

// -----

func.func @element_type(%a: memref<4x6xf32>, %b: memref<2x6xf16>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{input and output element types differ}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%b : memref<2x6xf16>) {starts = [array<i64: 0, 0>, array<i64: 2, 0>]}
  return
}

// -----

func.func @rank(%a: memref<4x6xf32>, %b: memref<24xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{input has rank 2 but output has rank 1}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%b : memref<24xf32>) {starts = [array<i64: 0>, array<i64: 0>]}
  return
}

// -----

func.func @same_buffer(%a: memref<4x6xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{reads and writes the same buffer}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%a : memref<4x6xf32>) {starts = [array<i64: 0, 0>, array<i64: 0, 0>]}
  return
}

// -----

func.func @writes_weight(%a: memref<4x6xf32>) attributes {rt.world_size = 2 : i64} {
  %w = rt.weight "w" {storage = "external", file = "w.bin", offset = 0 : i64} : memref<2x6xf32>
  // expected-error @+1 {{writes a read-only weight or constant}}
  rt.local_slice ins(%a : memref<4x6xf32>) outs(%w : memref<2x6xf32>) {starts = [array<i64: 0, 0>, array<i64: 2, 0>]}
  return
}
