// RUN: not shard-opt %s -nn-keyed-dropout 2>&1 | FileCheck %s

// A training-mode dropout whose mask the graph reads cannot take a new
// mask every step.
// CHECK: error: 'nn.training_dropout' op nn-keyed-dropout: the mask of a training-mode Dropout is read
module {
  func.func @main(%x: tensor<2x3xf32> {nn.name = "x"}) -> (tensor<2x3xf32> {nn.name = "y"}, tensor<2x3xi1> {nn.name = "m"}) {
    %b, %m = nn.training_dropout %x {ratio = 0.25 : f32, seed = 3 : i64} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
    return %b, %m : tensor<2x3xf32>, tensor<2x3xi1>
  }
}
