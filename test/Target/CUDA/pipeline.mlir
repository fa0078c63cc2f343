// cuda-codegen-pipeline: rt-einsum-to-matmul, the cuda-* rewrites in
// order, then convert-rt-to-gpu. What needs several of them: an einsum
// that is a batched matmul, and a fused QKV projection with a bias, whose
// pieces the attention reads in place while the bias add rides on the one
// GEMM.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-codegen-pipeline | FileCheck %s

// A float einsum that is a batched matmul: the second operand is
// transposed to [b, h, d, k], the product is already in the output order.
// CHECK-LABEL: func.func @main
// CHECK: rt.kernel "transpose" ins(%arg1 : memref<2x3x7x8xf32>) outs({{.*}} : memref<2x3x8x7xf32>) {params = {perm = array<i64: 0, 1, 3, 2>}}
// CHECK: rt.kernel "matmul" ins({{.*}} : memref<6x5x8xf32>, memref<6x8x7xf32>) outs({{.*}} : memref<6x5x7xf32>)
// CHECK-NOT: einsum
func.func @main(%q: tensor<2x3x5x8xf32> {nn.name = "q"}, %k: tensor<2x3x7x8xf32> {nn.name = "k"}) -> (tensor<2x3x5x7xf32> {nn.name = "s"}) {
  %s = nn.einsum %q, %k {equation = "bhqd,bhkd->bhqk"} : (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>) -> tensor<2x3x5x7xf32>
  return %s : tensor<2x3x5x7xf32>
}

// -----

// The bias add rides on the one GEMM.
// CHECK-LABEL: func.func @fused_qkv
// CHECK: %[[F:.*]] = rt.alloc : memref<2x3x16xf32>
// CHECK-NEXT: rt.kernel "matmul" ins(%arg0, %arg1, %arg2 : {{.*}}) outs(%[[F]] : memref<2x3x16xf32>) {params = {epilogue = "bias"}}
// CHECK-NOT: "split"
// CHECK: rt.kernel "attention" ins(%[[F]], %[[F]], %[[F]] : memref<2x3x16xf32>, memref<2x3x16xf32>, memref<2x3x16xf32>)
// CHECK-SAME: packed_qkv = array<i64: 8, 4, 4>
func.func @fused_qkv(%x: tensor<2x3x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x3x8xf32> {
  %m = nn.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
  %a = nn.add %m, %b : (tensor<2x3x16xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
  %q, %k, %v = nn.split %a {axis = 2 : i64, sizes = array<i64: 8, 4, 4>} : (tensor<2x3x16xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  %y = nn.attention %q, %k, %v {q_num_heads = 4 : i64, kv_num_heads = 2 : i64, is_causal = true} : (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}
