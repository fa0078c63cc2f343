// A matmul of a 2-D weight, plain or with the bias epilogue, whose result
// only an add of another buffer of its shape reads (a residual stream)
// takes that buffer as cuBLASLt's C: `residual`, the last input, and the
// matmul writes the sum. The matmul moves to where the add was, unless an
// op in between may write one of its operands. The epilogue fusion runs
// first, as in cuda-codegen-pipeline.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-fuse-gemm-epilogues -cuda-fuse-gemm-residuals -convert-rt-to-gpu | FileCheck %s
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-fuse-gemm-epilogues -convert-rt-to-gpu | FileCheck %s --check-prefix=OFF

// x + (h W + b), with the residual computed after the matmul (an exp of x).
// CHECK-LABEL: func.func @bias_then_residual
// CHECK: %[[P:.*]] = rt.alloc : memref<2x4x16xf32>
// CHECK: rt.kernel "matmul" ins(%arg1, %arg2 : {{.*}}) outs(%[[P]] : {{.*}})
// CHECK: %[[E:.*]] = rt.alloc : memref<2x4x8xf32>
// CHECK: rt.launch @shardflow_kernels::@k0_exp {{.*}} outs(%[[E]] :
// CHECK: %[[Y:.*]] = rt.alloc : memref<2x4x8xf32>
// CHECK-NEXT: rt.kernel "matmul" ins(%[[P]], %arg3, %arg4, %[[E]] : memref<2x4x16xf32>, memref<16x8xf32>, memref<8xf32>, memref<2x4x8xf32>) outs(%[[Y]] : memref<2x4x8xf32>) {params = {epilogue = "bias", residual = true}}
// CHECK-NOT: rt.launch
// CHECK: return %[[Y]]
// OFF-LABEL: func.func @bias_then_residual
// OFF-NOT: residual
// OFF: rt.launch @shardflow_kernels::@k{{[0-9]+}}_add
func.func @bias_then_residual(%x: tensor<2x4x8xf32>, %h: tensor<2x4x8xf32>, %w1: tensor<8x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %p = nn.matmul %h, %w1 : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %e = nn.exp %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %m = nn.matmul %p, %w : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %a = nn.add %m, %b : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %r = nn.add %e, %a : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}

// -----

// A plain matmul (bf16) and its residual.
// CHECK-LABEL: func.func @plain
// CHECK: rt.kernel "matmul" ins(%arg1, %arg2, %arg0 : memref<4x8xbf16>, memref<8x8xbf16>, memref<4x8xbf16>) outs(%{{.*}} : memref<4x8xbf16>) {params = {residual = true}}
// CHECK-NOT: rt.launch
func.func @plain(%x: tensor<4x8xbf16>, %h: tensor<4x8xbf16>, %w: tensor<8x8xbf16>) -> tensor<4x8xbf16> {
  %m = nn.matmul %h, %w : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  %r = nn.add %x, %m : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  return %r : tensor<4x8xbf16>
}

// -----

// Not fused: after a gelu epilogue (cuBLASLt applies the activation after
// adding C), a batched weight (several GEMMs), a broadcast addend.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: residual
// CHECK: rt.kernel "matmul" {{.*}} {params = {epilogue = "gelu_bias"}}
// CHECK-NOT: residual
func.func @not_fused(%x: tensor<4x16xf32>, %h: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %hb: tensor<2x4x8xf32>, %wb: tensor<2x8x16xf32>, %xb: tensor<2x4x16xf32>, %c: tensor<4x1xf32>) -> (tensor<4x16xf32>, tensor<2x4x16xf32>, tensor<4x16xf32>) {
  %m = nn.matmul %h, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a = nn.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = nn.gelu %a {approximate = "tanh"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = nn.add %g, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %mb = nn.matmul %hb, %wb : (tensor<2x4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %rb = nn.add %mb, %xb : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %m2 = nn.matmul %h, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %r2 = nn.add %m2, %c : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %r, %rb, %r2 : tensor<4x16xf32>, tensor<2x4x16xf32>, tensor<4x16xf32>
}

// -----

// The residual: the weight is reduced in place in between.
// CHECK-LABEL: func.func @residual_after_a_write
// CHECK-NOT: residual
// CHECK: rt.launch @shardflow_kernels::@k0_add
func.func @residual_after_a_write(%x: memref<4x8xf32>, %w: memref<8x8xf32>, %r: memref<4x8xf32>) -> memref<4x8xf32> attributes {rt.world_size = 2 : i64} {
  %p = rt.alloc : memref<4x8xf32>
  rt.kernel "matmul" ins(%x, %w : memref<4x8xf32>, memref<8x8xf32>) outs(%p : memref<4x8xf32>)
  rt.all_reduce ins(%w : memref<8x8xf32>) outs(%w : memref<8x8xf32>) {groups = [array<i64: 0, 1>]}
  %y = rt.alloc : memref<4x8xf32>
  rt.kernel "add" ins(%p, %r : memref<4x8xf32>, memref<4x8xf32>) outs(%y : memref<4x8xf32>)
  return %y : memref<4x8xf32>
}
