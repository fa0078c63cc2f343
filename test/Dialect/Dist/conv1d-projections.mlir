// RUN: shard-opt %s --mesh tp=2 --strategy megatron --compile-to partitioned | FileCheck %s
// RUN: shard-opt %s --mesh tp=2 --strategy megatron --compile-to sharded | FileCheck %s --check-prefix=VIEW

// GPT-2's Conv1D as the exporters write it: rows merged ([B*S, D]), one
// Gemm with the bias, rows split back, and for c_attn a Split into q, k
// and v. Megatron's collectives and nothing else: the packed weight and
// its embedded bias are viewed as [D, 3, D] and [3, D] and split by heads,
// and the row-parallel c_proj's bias is added once, after the all-reduce
// of its product (a Gemm that kept the bias would need its inputs whole).

// VIEW: nn.weight "c_attn.weight" {{.*}}nn.model_shape = array<i64: 16, 48>{{.*}} : tensor<16x3x16xf32>
// VIEW: nn.constant {{.*}}nn.model_shape = array<i64: 48>{{.*}} : tensor<3x16xf32>

// CHECK-NOT: dist.all_gather
// CHECK: nn.weight "c_attn.weight" {{.*}}starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 8>]{{.*}} : tensor<16x3x8xf32>
// CHECK: nn.einsum {{.*}}equation = "...a,abc->...bc"{{.*}} -> tensor<8x3x8xf32>
// CHECK: nn.weight "c_proj.weight" {{.*}}starts = [array<i64: 0, 0>, array<i64: 8, 0>]{{.*}} : tensor<8x16xf32>
// CHECK: %[[P:.*]] = nn.matmul {{.*}} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[R:.*]] = dist.all_reduce %[[P]] on @mesh ["tp"]
// CHECK: nn.add %[[R]], %{{.*}} : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
// CHECK-NOT: dist.all_gather

module {
  func.func @main(%x: tensor<2x4x16xf32> {nn.name = "x"}) -> (tensor<2x4x16xf32> {nn.name = "y"}) {
    %rows = nn.reshape %x : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    %w = nn.weight "c_attn.weight" {file = "w.bin", offset = 0 : i64, storage = "external"} : tensor<16x48xf32>
    %b = nn.constant dense<0.5> : tensor<48xf32> loc("c_attn.bias"(unknown))
    %p = nn.gemm %rows, %w, %b : (tensor<8x16xf32>, tensor<16x48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
    %p3 = nn.reshape %p : (tensor<8x48xf32>) -> tensor<2x4x48xf32>
    %qkv:3 = nn.split %p3 {axis = 2 : i64, sizes = array<i64: 16, 16, 16>} : (tensor<2x4x48xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>)
    %q4 = nn.reshape %qkv#0 : (tensor<2x4x16xf32>) -> tensor<2x4x2x8xf32>
    %qh = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x8xf32>) -> tensor<2x2x4x8xf32>
    %k4 = nn.reshape %qkv#1 : (tensor<2x4x16xf32>) -> tensor<2x4x2x8xf32>
    %kh = nn.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x8xf32>) -> tensor<2x2x4x8xf32>
    %v4 = nn.reshape %qkv#2 : (tensor<2x4x16xf32>) -> tensor<2x4x2x8xf32>
    %vh = nn.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x8xf32>) -> tensor<2x2x4x8xf32>
    %a = nn.attention %qh, %kh, %vh {is_causal = true, scale = 3.535530e-01 : f32} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
    %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x8xf32>) -> tensor<2x4x2x8xf32>
    %ar = nn.reshape %at : (tensor<2x4x2x8xf32>) -> tensor<8x16xf32>
    %o = nn.weight "c_proj.weight" {file = "w.bin", offset = 3072 : i64, storage = "external"} : tensor<16x16xf32>
    %ob = nn.weight "c_proj.bias" {file = "w.bin", offset = 4096 : i64, storage = "external"} : tensor<16xf32>
    %y = nn.gemm %ar, %o, %ob : (tensor<8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    %y3 = nn.reshape %y : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
    return %y3 : tensor<2x4x16xf32>
  }
}
