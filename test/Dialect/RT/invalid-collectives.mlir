// Collectives and sliced weights check their rank tables against the world
// (rt.world_size on the function) and their shapes against the group size.
// RUN: shard-opt %s -split-input-file -verify-diagnostics

func.func @rank_outside_world(%a: memref<4xf32>, %b: memref<4xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{groups names rank 2, outside the world of 2 (rt.world_size on the function)}}
  rt.all_reduce ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {groups = [array<i64: 0, 2>]}
  return
}

// -----

func.func @no_world_size(%a: memref<4xf32>, %b: memref<4xf32>) {
  // expected-error @+1 {{groups names rank 1, outside the world of 1}}
  rt.all_reduce ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {groups = [array<i64: 0, 1>]}
  return
}

// -----

func.func @rank_twice(%a: memref<4xf32>, %b: memref<4xf32>) attributes {rt.world_size = 4 : i64} {
  // expected-error @+1 {{rank 1 appears in groups twice}}
  rt.all_reduce ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {groups = [array<i64: 0, 1>, array<i64: 1, 2>]}
  return
}

// -----

func.func @unequal_groups(%a: memref<4xf32>, %b: memref<4xf32>) attributes {rt.world_size = 4 : i64} {
  // expected-error @+1 {{groups must have equal sizes, got 2 and 1}}
  rt.all_reduce ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {groups = [array<i64: 0, 1>, array<i64: 2>]}
  return
}

// -----

func.func @bad_reduction(%a: memref<4xf32>, %b: memref<4xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{reduction must be sum, prod, max or min, got 'mean'}}
  rt.all_reduce ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {groups = [array<i64: 0, 1>], reduction = "mean"}
  return
}

// -----

func.func @gather_shape(%a: memref<2x3xf32>, %b: memref<2x6xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{output shape must be [4, 3]}}
  rt.all_gather ins(%a : memref<2x3xf32>) outs(%b : memref<2x6xf32>) {dim = 0 : i64, groups = [array<i64: 0, 1>]}
  return
}

// -----

func.func @gather_dim(%a: memref<2x3xf32>, %b: memref<4x3xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{dim 2 is out of range for rank 2}}
  rt.all_gather ins(%a : memref<2x3xf32>) outs(%b : memref<4x3xf32>) {dim = 2 : i64, groups = [array<i64: 0, 1>]}
  return
}

// -----

func.func @scatter_uneven(%a: memref<3x4xf32>, %b: memref<1x4xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{dimension 0 of size 3 does not split into 2 pieces}}
  rt.reduce_scatter ins(%a : memref<3x4xf32>) outs(%b : memref<1x4xf32>) {dim = 0 : i64, groups = [array<i64: 0, 1>]}
  return
}

// -----

func.func @all_to_all_shape(%a: memref<4x3xf32>, %b: memref<4x3xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{output shape must be [2, 6]}}
  rt.all_to_all ins(%a : memref<4x3xf32>) outs(%b : memref<4x3xf32>) {split_dim = 0 : i64, concat_dim = 1 : i64, groups = [array<i64: 0, 1>]}
  return
}

// -----

func.func @permute_twice(%a: memref<4xf32>, %b: memref<4xf32>) attributes {rt.world_size = 3 : i64} {
  // expected-error @+1 {{a rank sends or receives twice}}
  rt.collective_permute ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {pairs = [array<i64: 0, 1>, array<i64: 2, 1>]}
  return
}

// -----

func.func @send_self(%a: memref<4xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{rank 1 names itself as its peer}}
  rt.send %a {peers = array<i64: 1, 1>} : memref<4xf32>
  return
}

// -----

func.func @recv_table(%a: memref<4xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{peers needs one entry per rank (2), got 1}}
  rt.recv %a {peers = array<i64: 1>} : memref<4xf32>
  return
}

// -----

func.func @weight_starts(%a: memref<4xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{starts has 1 entries for a world of 2 ranks}}
  %w = rt.weight "w" {storage = "external", file = "w.bin", global_shape = array<i64: 8>, starts = [array<i64: 0>]} : memref<4xf32>
  return
}

// -----

func.func @weight_outside(%a: memref<4xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{the slice of rank 1 leaves the global shape in dimension 0}}
  %w = rt.weight "w" {storage = "external", file = "w.bin", global_shape = array<i64: 8>, starts = [array<i64: 0>, array<i64: 5>]} : memref<4xf32>
  return
}

// -----

func.func @weight_half_sliced(%a: memref<4xf32>) attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{a sliced weight needs both global_shape and starts}}
  %w = rt.weight "w" {storage = "external", file = "w.bin", global_shape = array<i64: 8>} : memref<4xf32>
  return
}

// -----

func.func @write_weight(%a: memref<4xf32>) attributes {rt.world_size = 2 : i64} {
  %w = rt.weight "w" {storage = "external", file = "w.bin"} : memref<4xf32>
  // expected-error @+1 {{writes a read-only weight or constant}}
  rt.all_reduce ins(%w : memref<4xf32>) outs(%w : memref<4xf32>) {groups = [array<i64: 0, 1>]}
  return
}
