// A split along the last dimension whose three pieces one attention reads
// as its query, key and value (a fused QKV projection that
// nn-split-fused-projections leaves): the attention takes the fused buffer
// three times with `packed_qkv` (the pieces' widths) and the split and its
// buffers disappear. (pipeline.mlir: with a bias, the bias add then rides
// on the one GEMM.)
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-read-attention-inputs-in-place | FileCheck %s

// CHECK-LABEL: func.func @fused_qkv_without_bias
// CHECK: %[[F:.*]] = rt.alloc : memref<2x3x16xf32>
// CHECK-NEXT: rt.kernel "matmul" ins(%arg0, %arg1 : memref<2x3x8xf32>, memref<8x16xf32>) outs(%[[F]] : memref<2x3x16xf32>)
// CHECK-NEXT: rt.alloc : memref<2x3x8xf32>
// CHECK-NEXT: rt.kernel "attention" ins(%[[F]], %[[F]], %[[F]] : memref<2x3x16xf32>, memref<2x3x16xf32>, memref<2x3x16xf32>)
// CHECK-SAME: packed_qkv = array<i64: 8, 4, 4>
func.func @fused_qkv_without_bias(%x: tensor<2x3x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x3x8xf32> {
  %m = nn.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
  %q, %k, %v = nn.split %m {axis = 2 : i64, sizes = array<i64: 8, 4, 4>} : (tensor<2x3x16xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  %y = nn.attention %q, %k, %v {q_num_heads = 4 : i64, kv_num_heads = 2 : i64, is_causal = true} : (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// A piece that is also returned keeps the split.
// CHECK-LABEL: func.func @piece_also_returned
// CHECK: rt.kernel "split"
// CHECK: rt.kernel "attention"
// CHECK-NOT: packed_qkv
func.func @piece_also_returned(%a: tensor<2x3x12xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %q, %k, %v = nn.split %a {axis = 2 : i64, sizes = array<i64: 4, 4, 4>} : (tensor<2x3x12xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  %y = nn.attention %q, %k, %v {q_num_heads = 2 : i64, kv_num_heads = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %y, %v : tensor<2x3x4xf32>, tensor<2x3x4xf32>
}
