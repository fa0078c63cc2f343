// RUN: shard-opt %s --mesh dp=2,tp=2 --strategy megatron | FileCheck %s

// onnxruntime-genai's grouped-query qkv_proj: one [64, 128] weight packing
// 4 query heads (64 columns) and 2 key and 2 value heads (32 each), its
// result sliced into q, k and v. Each slice becomes a product by its own
// block of the weight, split by heads like a column-parallel layer: each
// rank's block starts inside the packed weight, past the pieces before it.

// CHECK-DAG: nn.weight "qkv" {{.*}}global_shape = array<i64: 64, 128>{{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 32>, array<i64: 0, 0>, array<i64: 0, 32>]{{.*}} : tensor<64x32xf32>
// CHECK-DAG: nn.weight "qkv" {{.*}}global_shape = array<i64: 64, 128>{{.*}}starts = [array<i64: 0, 64>, array<i64: 0, 80>, array<i64: 0, 64>, array<i64: 0, 80>]{{.*}} : tensor<64x16xf32>
// CHECK-DAG: nn.weight "qkv" {{.*}}global_shape = array<i64: 64, 128>{{.*}}starts = [array<i64: 0, 96>, array<i64: 0, 112>, array<i64: 0, 96>, array<i64: 0, 112>]{{.*}} : tensor<64x16xf32>
// CHECK: nn.attention {{.*}} : (tensor<1x2x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x2x8x16xf32>
// CHECK: nn.weight "o" {{.*}}global_shape = array<i64: 64, 64>{{.*}}starts = [array<i64: 0, 0>, array<i64: 32, 0>, array<i64: 0, 0>, array<i64: 32, 0>]{{.*}} : tensor<32x64xf32>
// CHECK: dist.all_reduce {{.*}} on @mesh ["tp"]
// CHECK-NOT: on @mesh ["tp"]

module {
  func.func @main(%x: tensor<2x8x64xf32> {nn.name = "x"}) -> (tensor<2x8x64xf32> {nn.name = "y"}) {
    %w = nn.weight "qkv" {file = "w.bin", offset = 0 : i64, storage = "external"} : tensor<64x128xf32>
    %p = nn.matmul %x, %w : (tensor<2x8x64xf32>, tensor<64x128xf32>) -> tensor<2x8x128xf32>
    %q = nn.slice %p {axes = array<i64: 2>, ends = array<i64: 64>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x8x128xf32>) -> tensor<2x8x64xf32>
    %k = nn.slice %p {axes = array<i64: 2>, ends = array<i64: 96>, starts = array<i64: 64>, steps = array<i64: 1>} : (tensor<2x8x128xf32>) -> tensor<2x8x32xf32>
    %v = nn.slice %p {axes = array<i64: 2>, ends = array<i64: 128>, starts = array<i64: 96>, steps = array<i64: 1>} : (tensor<2x8x128xf32>) -> tensor<2x8x32xf32>
    %q4 = nn.reshape %q : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>
    %qh = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
    %k4 = nn.reshape %k : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
    %kh = nn.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
    %v4 = nn.reshape %v : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
    %vh = nn.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
    %a = nn.attention %qh, %kh, %vh {is_causal = true, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
    %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
    %ar = nn.reshape %at : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
    %o = nn.weight "o" {file = "w.bin", offset = 32768 : i64, storage = "external"} : tensor<64x64xf32>
    %y = nn.matmul %ar, %o : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
    return %y : tensor<2x8x64xf32>
  }
}
