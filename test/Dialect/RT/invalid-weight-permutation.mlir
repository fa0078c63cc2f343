// RUN: shard-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// A permutation lists each buffer dimension's stored dimension once.
func.func @wrong_rank() -> memref<4x8xf32> {
  // expected-error @+1 {{permutation has 3 entries for a buffer of rank 2}}
  %w = rt.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, permutation = array<i64: 2, 1, 0>} : memref<4x8xf32>
  return %w : memref<4x8xf32>
}

// -----

func.func @repeated() -> memref<4x8xf32> {
  // expected-error @+1 {{permutation [1, 1] is not a permutation}}
  %w = rt.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, permutation = array<i64: 1, 1>} : memref<4x8xf32>
  return %w : memref<4x8xf32>
}

// -----

// The slice is checked in the stored order: a [16, 10] weight's columns
// 5..9, loaded transposed as [5, 16].
// CHECK-LABEL: func.func @sliced
// CHECK: permutation = array<i64: 1, 0>
func.func @sliced() -> memref<5x16xf32> attributes {rt.world_size = 2 : i64} {
  %w = rt.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, global_shape = array<i64: 16, 10>, starts = [array<i64: 0, 0>, array<i64: 0, 5>], permutation = array<i64: 1, 0>} : memref<5x16xf32>
  return %w : memref<5x16xf32>
}

// -----

func.func @slice_outside() -> memref<5x16xf32> attributes {rt.world_size = 2 : i64} {
  // expected-error @+1 {{the slice of rank 1 leaves the global shape in dimension 1}}
  %w = rt.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, global_shape = array<i64: 16, 10>, starts = [array<i64: 0, 0>, array<i64: 0, 6>], permutation = array<i64: 1, 0>} : memref<5x16xf32>
  return %w : memref<5x16xf32>
}
