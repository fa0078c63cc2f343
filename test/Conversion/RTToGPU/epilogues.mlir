// A matmul followed by a bias add over its last dimension (and then a tanh
// gelu or a relu) becomes one matmul with cuBLASLt's epilogue; anything
// else stays as it was.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu | FileCheck %s
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu=gemm-epilogues=false | FileCheck %s --check-prefix=OFF

// CHECK-LABEL: func.func @gelu_tanh
// CHECK: %[[Y:.*]] = rt.alloc : memref<4x16xbf16>
// CHECK-NEXT: rt.kernel "matmul" ins(%arg0, %arg1, %arg2 : memref<4x8xbf16>, memref<8x16xbf16>, memref<16xbf16>) outs(%[[Y]] : memref<4x16xbf16>) {params = {epilogue = "gelu_bias"}}
// CHECK-NEXT: return %[[Y]]
// OFF-LABEL: func.func @gelu_tanh
// OFF: rt.kernel "matmul" ins(%arg0, %arg1 :
// OFF: rt.launch @shardflow_kernels::@k0_add_gelu
func.func @gelu_tanh(%x: tensor<4x8xbf16>, %w: tensor<8x16xbf16>, %b: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %m = nn.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xbf16>
  %a = nn.add %m, %b : (tensor<4x16xbf16>, tensor<16xbf16>) -> tensor<4x16xbf16>
  %g = nn.gelu %a {approximate = "tanh"} : (tensor<4x16xbf16>) -> tensor<4x16xbf16>
  return %g : tensor<4x16xbf16>
}

// -----

// The exact (erf) gelu is not cuBLASLt's: only the bias folds; the bias
// comes first in the add, and the product is batched.
// CHECK-LABEL: func.func @gelu_erf
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1, %arg2 : memref<2x4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%{{.*}} : memref<2x4x16xf32>) {params = {epilogue = "bias"}}
// CHECK: rt.launch @shardflow_kernels::@k0_gelu
func.func @gelu_erf(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x4x16xf32> {
  %m = nn.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %a = nn.add %b, %m : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %g = nn.gelu %a : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %g : tensor<2x4x16xf32>
}

// -----

// CHECK-LABEL: func.func @relu
// CHECK: rt.kernel "matmul" {{.*}} {params = {epilogue = "relu_bias"}}
// CHECK-NOT: rt.launch
func.func @relu(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a = nn.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %r = nn.relu %a : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// The product is read twice, or the addend is not a bias over the last
// dimension: no epilogue.
// CHECK-LABEL: func.func @no_epilogue
// CHECK-NOT: epilogue
func.func @no_epilogue(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %c: tensor<4x1xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a = nn.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %m2 = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a2 = nn.add %m2, %c : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %a, %m, %a2 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

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
