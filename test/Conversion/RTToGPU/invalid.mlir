// RUN: not shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu 2>&1 | FileCheck %s

// CHECK: error: 'rt.kernel' op kernel 'cumsum' has no CUDA implementation yet
func.func @main(%x: tensor<2x3xf32> {nn.name = "x"}) -> (tensor<2x3xf32> {nn.name = "y"}) {
  %c = nn.cumsum %x {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %c : tensor<2x3xf32>
}

// -----

// A reduction over axes that are not one contiguous block has no row form.
// CHECK: error: 'rt.kernel' op kernel 'reduce_sum' has no CUDA implementation yet
func.func @main(%x: tensor<2x3x4xf32> {nn.name = "x"}) -> (tensor<1x3x1xf32> {nn.name = "y"}) {
  %r = nn.reduce_sum %x {axes = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  return %r : tensor<1x3x1xf32>
}
