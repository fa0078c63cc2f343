// A matmul followed by a bias add over its last dimension (and then a tanh
// gelu or a relu) becomes one matmul with cuBLASLt's epilogue; anything
// else stays as it was. The matmul moves to the add (or the activation);
// a collective in between that may write one of the matmul's operands (it
// reduces in place) stops that, one that touches other buffers does not.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-fuse-gemm-epilogues -convert-rt-to-gpu | FileCheck %s
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu | FileCheck %s --check-prefix=OFF

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

// CHECK-LABEL: func.func @collective_writes_the_input
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1 : memref<4x8xf32>, memref<8x16xf32>) outs(%[[P:.*]] : memref<4x16xf32>)
// CHECK-NEXT: rt.all_reduce ins(%arg0 : memref<4x8xf32>) outs(%arg0 : memref<4x8xf32>)
// CHECK-NOT: epilogue
// CHECK: rt.launch @shardflow_kernels::@k0_add
func.func @collective_writes_the_input(%x: memref<4x8xf32>, %w: memref<8x16xf32>, %b: memref<16xf32>) -> memref<4x16xf32> attributes {rt.world_size = 2 : i64} {
  %p = rt.alloc : memref<4x16xf32>
  rt.kernel "matmul" ins(%x, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%p : memref<4x16xf32>)
  rt.all_reduce ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) {groups = [array<i64: 0, 1>]}
  %y = rt.alloc : memref<4x16xf32>
  rt.kernel "add" ins(%p, %b : memref<4x16xf32>, memref<16xf32>) outs(%y : memref<4x16xf32>)
  return %y : memref<4x16xf32>
}

// -----

// CHECK-LABEL: func.func @collective_elsewhere
// CHECK: rt.all_reduce ins(%arg3 : memref<4xf32>) outs(%arg3 : memref<4xf32>)
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1, %arg2 : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%{{.*}} : memref<4x16xf32>) {params = {epilogue = "bias"}}
// CHECK-NOT: rt.launch
func.func @collective_elsewhere(%x: memref<4x8xf32>, %w: memref<8x16xf32>, %b: memref<16xf32>, %z: memref<4xf32>) -> memref<4x16xf32> attributes {rt.world_size = 2 : i64} {
  %p = rt.alloc : memref<4x16xf32>
  rt.kernel "matmul" ins(%x, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%p : memref<4x16xf32>)
  rt.all_reduce ins(%z : memref<4xf32>) outs(%z : memref<4xf32>) {groups = [array<i64: 0, 1>]}
  %y = rt.alloc : memref<4x16xf32>
  rt.kernel "add" ins(%p, %b : memref<4x16xf32>, memref<16xf32>) outs(%y : memref<4x16xf32>)
  return %y : memref<4x16xf32>
}
