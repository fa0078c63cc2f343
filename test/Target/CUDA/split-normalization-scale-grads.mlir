// A norm's scale cotangent on CUDA: the forward row kernel with a unit
// scale (xhat), a product with the cotangent, a sum over the row dims.
// After code generation the product is the row kernel's epilogue (xhat is
// never stored) and the sum a launch of its own; the input's cotangent
// is one row kernel.
// RUN: shard-opt %s -convert-nn-to-rt -cuda-split-normalization-scale-grads | FileCheck %s
// RUN: shard-opt %s -convert-nn-to-rt -cuda-split-normalization-scale-grads -convert-rt-to-gpu | FileCheck %s --check-prefix=GPU

// CHECK-LABEL: func.func @main
// CHECK-NOT: normalization_scale_grad
// CHECK: %[[ONES:.*]] = rt.constant dense<1.000000e+00> : tensor<3x8xf32> : memref<3x8xf32>
// CHECK: %[[XHAT:.*]] = rt.alloc : memref<2x3x8xf32>
// CHECK: rt.kernel "rms_normalization" ins(%arg0, %[[ONES]] : {{.*}}) outs(%[[XHAT]] : memref<2x3x8xf32>) {params = {axis = 1 : i64, epsilon = 9.99999997E-7 : f32}}
// CHECK: %[[P:.*]] = rt.alloc : memref<2x3x8xf32>
// CHECK: rt.kernel "mul" ins(%arg1, %[[XHAT]] : {{.*}}) outs(%[[P]] : memref<2x3x8xf32>)
// CHECK: rt.kernel "reduce_sum" ins(%[[P]] : memref<2x3x8xf32>) outs(%{{.*}} : memref<3x8xf32>) {params = {axes = array<i64: 0>, keepdims = false}}
// CHECK: rt.kernel "normalization_grad"
// GPU: rt.launch @shardflow_kernels::@k0_rms_normalization_mul
// GPU: rt.launch @shardflow_kernels::@k1_reduce_sum
// GPU: rt.launch @shardflow_kernels::@k2_normalization_grad
// GPU-NOT: rt.launch
func.func @main(%x: tensor<2x3x8xf32> {nn.name = "x"}, %dy: tensor<2x3x8xf32> {nn.name = "dy"},
                %s: tensor<3x8xf32> {nn.name = "s"})
    -> (tensor<3x8xf32> {nn.name = "ds"}, tensor<2x3x8xf32> {nn.name = "dx"}) {
  %ds = nn.normalization_scale_grad %x, %dy {axis = 1 : i64, epsilon = 1.0e-6 : f32, rms = true} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<3x8xf32>
  %dx = nn.normalization_grad %x, %s, %dy {axis = 1 : i64, epsilon = 1.0e-6 : f32, rms = true} : (tensor<2x3x8xf32>, tensor<3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %ds, %dx : tensor<3x8xf32>, tensor<2x3x8xf32>
}
