// RUN: not shard-opt %s -convert-nn-to-rt -convert-rt-to-gpu 2>&1 | FileCheck %s

// CHECK: error: 'rt.kernel' op kernel 'cumsum' has no CUDA implementation yet
func.func @main(%x: tensor<2x3xf32> {nn.name = "x"}) -> (tensor<2x3xf32> {nn.name = "y"}) {
  %c = nn.cumsum %x {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %c : tensor<2x3xf32>
}
