// RUN: not shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu 2>&1 | FileCheck %s

// A sum of booleans has no generated form (the CPU kernel refuses it too).
// CHECK: error: 'rt.kernel' op cannot be generated for CUDA: a reduce_sum of booleans
func.func @main(%x: tensor<2x3xi1> {nn.name = "x"}) -> (tensor<3xi1> {nn.name = "y"}) {
  %r = nn.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xi1>) -> tensor<3xi1>
  return %r : tensor<3xi1>
}
