// An nn.transpose of an nn.weight (or of a float cast of one) folds into
// the rt.weight, which the runtime loads with its dimensions permuted
// (`permutation`): no transpose kernel on every run.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt | FileCheck %s

// CHECK-LABEL: func.func @folded
// CHECK: %[[W:.*]] = rt.weight "w" {file = "m.data", offset = 0 : i64, permutation = array<i64: 1, 0>, size = 96 : i64, storage = "external"} : memref<8x3xf32>
// CHECK-NOT: rt.weight
// CHECK-NOT: rt.kernel "transpose"
// CHECK: rt.kernel "matmul" ins(%arg0, %[[W]] : memref<2x8xf32>, memref<8x3xf32>)
func.func @folded(%x: tensor<2x8xf32>) -> tensor<2x3xf32> {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 96 : i64} : tensor<3x8xf32>
  %t = nn.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x8xf32>) -> tensor<8x3xf32>
  %y = nn.matmul %x, %t : (tensor<2x8xf32>, tensor<8x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Through a mixed-precision cast, on a rank's slice (the slice table
// describes the file's order), in three dimensions.
dist.mesh @mesh ["tp"=2]
// CHECK-LABEL: func.func @cast_sliced
// CHECK: rt.weight "s" {{{.*}}global_shape = array<i64: 2, 4, 6>, {{.*}}permutation = array<i64: 2, 0, 1>, {{.*}}source_type = f32, starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 3>]{{.*}}} : memref<3x2x4xbf16>
// CHECK-NOT: rt.kernel "cast"
// CHECK-NOT: rt.kernel "transpose"
func.func @cast_sliced() -> tensor<3x2x4xbf16> {
  %s = nn.weight "s" {storage = "external", file = "m.data", offset = 0 : i64, size = 192 : i64, global_shape = array<i64: 2, 4, 6>, starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 3>]} : tensor<2x4x3xf32>
  %c = nn.cast %s {to = bf16} : (tensor<2x4x3xf32>) -> tensor<2x4x3xbf16>
  %t = nn.transpose %c {perm = array<i64: 2, 0, 1>} : (tensor<2x4x3xbf16>) -> tensor<3x2x4xbf16>
  return %t : tensor<3x2x4xbf16>
}

// -----

// A weight read both transposed and as stored gets both buffers; an
// identity transpose is the weight itself.
// CHECK-LABEL: func.func @both
// CHECK-DAG: rt.weight "w" {file = "m.data", offset = 0 : i64, size = 96 : i64, storage = "external"} : memref<3x8xf32>
// CHECK-DAG: rt.weight "w" {{{.*}}permutation = array<i64: 1, 0>{{.*}}} : memref<8x3xf32>
// CHECK-DAG: rt.weight "v" {file = "m.data", offset = 96 : i64, size = 96 : i64, storage = "external"} : memref<3x8xf32>
// CHECK-NOT: rt.kernel "transpose"
func.func @both() -> (tensor<3x8xf32>, tensor<8x3xf32>, tensor<3x8xf32>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 96 : i64} : tensor<3x8xf32>
  %t = nn.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x8xf32>) -> tensor<8x3xf32>
  %v = nn.weight "v" {storage = "external", file = "m.data", offset = 96 : i64, size = 96 : i64} : tensor<3x8xf32>
  %i = nn.transpose %v {perm = array<i64: 0, 1>} : (tensor<3x8xf32>) -> tensor<3x8xf32>
  return %w, %t, %i : tensor<3x8xf32>, tensor<8x3xf32>, tensor<3x8xf32>
}
