// RUN: not shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu 2>&1 | FileCheck %s

// CHECK: error: 'rt.kernel' op kernel 'max_pool_with_indices' has no CUDA implementation yet
func.func @main(%x: tensor<1x1x4x4xf32> {nn.name = "x"}) -> (tensor<1x1x2x2xf32> {nn.name = "y"}, tensor<1x1x2x2xi64> {nn.name = "i"}) {
  %r, %i = nn.max_pool_with_indices %x {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  return %r, %i : tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>
}

// -----

// A sum of booleans has no generated form (the CPU kernel refuses it too).
// CHECK: error: 'rt.kernel' op cannot be generated for CUDA: a reduce_sum of booleans
func.func @main(%x: tensor<2x3xi1> {nn.name = "x"}) -> (tensor<3xi1> {nn.name = "y"}) {
  %r = nn.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xi1>) -> tensor<3xi1>
  return %r : tensor<3xi1>
}
