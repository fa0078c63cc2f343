// A half-precision product that is only cast to f32, where no kernel
// reads the cast, is written as f32 by the matmul itself. The epilogue
// fusion runs first, as in cuda-codegen-pipeline.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-fuse-gemm-epilogues -cuda-fuse-gemm-output-casts -convert-rt-to-gpu | FileCheck %s

// A bf16 product that is only cast to f32 and returned (the logits of a
// --dtype bf16 program) is written as f32 by the matmul itself; its
// buffer is allocated before the matmul, which stays in place.
// CHECK-LABEL: func.func @cast_to_f32
// CHECK: %[[Y:.*]] = rt.alloc : memref<2x4x16xf32>
// CHECK-NEXT: rt.kernel "matmul" ins(%arg0, %arg1 : memref<2x4x8xbf16>, memref<8x16xbf16>) outs(%[[Y]] : memref<2x4x16xf32>)
// CHECK-NOT: rt.launch
// CHECK: return %[[Y]]
func.func @cast_to_f32(%x: tensor<2x4x8xbf16>, %w: tensor<8x16xbf16>) -> tensor<2x4x16xf32> {
  %m = nn.matmul %x, %w : (tensor<2x4x8xbf16>, tensor<8x16xbf16>) -> tensor<2x4x16xbf16>
  %c = nn.cast %m {to = f32} : (tensor<2x4x16xbf16>) -> tensor<2x4x16xf32>
  return %c : tensor<2x4x16xf32>
}

// -----

// Not folded: the cast's result feeds a generated kernel (the cast fuses
// into it, which then reads the narrower product), the product has another
// reader, the cast narrows, or the matmul has an epilogue.
// CHECK-LABEL: func.func @cast_not_folded
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1 : memref<4x8xf16>, memref<8x16xf16>) outs(%{{.*}} : memref<4x16xf16>)
// CHECK: rt.launch @shardflow_kernels::@k{{[0-9]+}}_cast_softmax
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1 : memref<4x8xf16>, memref<8x16xf16>) outs(%{{.*}} : memref<4x16xf16>)
// CHECK: rt.launch @shardflow_kernels::@k{{[0-9]+}}_cast
// CHECK: rt.kernel "matmul" ins(%arg2, %arg3 : memref<4x8xf32>, memref<8x16xf32>) outs(%{{.*}} : memref<4x16xf32>)
// CHECK: rt.launch @shardflow_kernels::@k{{[0-9]+}}_cast
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1, %arg4 : memref<4x8xf16>, memref<8x16xf16>, memref<16xf16>) outs(%{{.*}} : memref<4x16xf16>) {params = {epilogue = "bias"}}
// CHECK: rt.launch @shardflow_kernels::@k{{[0-9]+}}_cast
func.func @cast_not_folded(%x: tensor<4x8xf16>, %w: tensor<8x16xf16>, %x32: tensor<4x8xf32>, %w32: tensor<8x16xf32>, %b: tensor<16xf16>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf16>, tensor<4x16xf16>, tensor<4x16xf32>) {
  %m = nn.matmul %x, %w : (tensor<4x8xf16>, tensor<8x16xf16>) -> tensor<4x16xf16>
  %c = nn.cast %m {to = f32} : (tensor<4x16xf16>) -> tensor<4x16xf32>
  %s = nn.softmax %c {axis = -1 : i64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %m2 = nn.matmul %x, %w : (tensor<4x8xf16>, tensor<8x16xf16>) -> tensor<4x16xf16>
  %c2 = nn.cast %m2 {to = f32} : (tensor<4x16xf16>) -> tensor<4x16xf32>
  %m3 = nn.matmul %x32, %w32 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %c3 = nn.cast %m3 {to = f16} : (tensor<4x16xf32>) -> tensor<4x16xf16>
  %m4 = nn.matmul %x, %w : (tensor<4x8xf16>, tensor<8x16xf16>) -> tensor<4x16xf16>
  %a4 = nn.add %m4, %b : (tensor<4x16xf16>, tensor<16xf16>) -> tensor<4x16xf16>
  %c4 = nn.cast %a4 {to = f32} : (tensor<4x16xf16>) -> tensor<4x16xf32>
  return %s, %c2, %m2, %c3, %c4 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf16>, tensor<4x16xf16>, tensor<4x16xf32>
}
