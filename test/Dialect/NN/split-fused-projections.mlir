// RUN: shard-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(nn-split-fused-projections))' | FileCheck %s

// A fused QKV projection (weight [K, 3N], bias [3N]) split along its last
// dimension: one matmul and bias add per piece, on column slices of the
// weight and of the bias; the split is gone.
// CHECK-LABEL: func.func @fused_qkv
// CHECK-NOT: nn.split
// CHECK: %[[W0:.*]] = nn.weight "qkv.w" {file = "m.data", global_shape = array<i64: 8, 12>, offset = 0 : i64, size = 384 : i64, starts = [array<i64: 0, 0>], storage = "external"} : tensor<8x4xf32>
// CHECK: %[[M0:.*]] = nn.matmul %arg0, %[[W0]]
// CHECK: %[[B0:.*]] = nn.weight "qkv.b" {{.*}}global_shape = array<i64: 12>{{.*}}starts = [array<i64: 0>]{{.*}} : tensor<4xf32>
// CHECK: %[[A0:.*]] = nn.add %[[M0]], %[[B0]]
// CHECK: nn.weight "qkv.w" {{.*}}starts = [array<i64: 0, 4>]
// CHECK: nn.weight "qkv.w" {{.*}}starts = [array<i64: 0, 8>]
// CHECK: return %[[A0]]
func.func @fused_qkv(%x: tensor<2x3x8xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %w = nn.weight "qkv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 384 : i64} : tensor<8x12xf32>
  %b = nn.weight "qkv.b" {storage = "external", file = "m.data", offset = 384 : i64, size = 48 : i64} : tensor<12xf32>
  %m = nn.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x12xf32>) -> tensor<2x3x12xf32>
  %a = nn.add %m, %b : (tensor<2x3x12xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  %q, %k, %v = nn.split %a {axis = 2 : i64, sizes = array<i64: 4, 4, 4>} : (tensor<2x3x12xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  return %q, %k, %v : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// -----

// Mixed precision (weight behind a cast) and a constant bias of uneven pieces.
// CHECK-LABEL: func.func @cast_and_constant
// CHECK-NOT: nn.split
// CHECK: %[[W:.*]] = nn.weight "w" {{.*}} : tensor<8x2xf32>
// CHECK: nn.cast %[[W]] {to = bf16}
// CHECK: nn.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xbf16>
// CHECK: nn.constant dense<[3.000000e+00, 4.000000e+00, 5.000000e+00]> : tensor<3xbf16>
func.func @cast_and_constant(%x: tensor<3x8xbf16>) -> (tensor<3x2xbf16>, tensor<3x3xbf16>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 160 : i64} : tensor<8x5xf32>
  %wc = nn.cast %w {to = bf16} : (tensor<8x5xf32>) -> tensor<8x5xbf16>
  %b = nn.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xbf16>
  %m = nn.matmul %x, %wc : (tensor<3x8xbf16>, tensor<8x5xbf16>) -> tensor<3x5xbf16>
  %a = nn.add %b, %m : (tensor<5xbf16>, tensor<3x5xbf16>) -> tensor<3x5xbf16>
  %p, %q = nn.split %a {axis = 1 : i64, sizes = array<i64: 2, 3>} : (tensor<3x5xbf16>) -> (tensor<3x2xbf16>, tensor<3x3xbf16>)
  return %p, %q : tensor<3x2xbf16>, tensor<3x3xbf16>
}

// -----

// The product is read elsewhere too, or the split is not along the last
// dimension: nothing changes.
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-2: nn.split
func.func @left_alone(%x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %p, %q = nn.split %m {axis = 1 : i64, sizes = array<i64: 4, 4>} : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m2 = nn.matmul %x, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r, %s = nn.split %m2 {axis = 0 : i64, sizes = array<i64: 2, 2>} : (tensor<4x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>)
  return %p, %q, %m, %r, %s : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// A program with a mesh keeps its split (weight slices there are per rank).
// CHECK-LABEL: func.func @with_mesh
// CHECK: nn.split
dist.mesh @mesh ["tp" = 2]
func.func @with_mesh(%x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %p, %q = nn.split %m {axis = 1 : i64, sizes = array<i64: 4, 4>} : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  return %p, %q : tensor<4x4xf32>, tensor<4x4xf32>
}
