// RUN: not shard-opt %s -split-input-file -nn-differentiate=loss=loss -nn-optimizer 2>&1 | FileCheck %s

// Nothing depends on a weight: nothing to train.
// CHECK: error: nn-optimizer: no initializer's gradient depends on the loss: nothing to train
module {
  func.func @main(%x: tensor<2xf32> {nn.name = "x"}) -> (tensor<f32> {nn.name = "loss"}) {
    %a = nn.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : (tensor<2xf32>) -> tensor<f32>
    return %a : tensor<f32>
  }
}

// -----

// The optimizer's state would take an initializer's name.
// CHECK: error: nn-optimizer: the optimizer state 'w.exp_avg' has the name of an initializer
module {
  func.func @main(%x: tensor<2xf32> {nn.name = "x"}) -> (tensor<f32> {nn.name = "loss"}) {
    %w = nn.weight "w" {storage = "protobuf"} : tensor<2xf32>
    %m = nn.weight "w.exp_avg" {storage = "protobuf"} : tensor<2xf32>
    %p = nn.mul %x, %w : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %q = nn.mul %p, %m : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %a = nn.reduce_sum %q {axes = array<i64: 0>, keepdims = false} : (tensor<2xf32>) -> tensor<f32>
    return %a : tensor<f32>
  }
}

// -----

// Weights train in f32.
// CHECK: error: nn-optimizer: initializer 'h' is 'f16'; weights train in f32
module {
  func.func @main(%x: tensor<2xf16> {nn.name = "x"}) -> (tensor<f16> {nn.name = "loss"}) {
    %w = nn.weight "h" {storage = "protobuf"} : tensor<2xf16>
    %p = nn.mul %x, %w : (tensor<2xf16>, tensor<2xf16>) -> tensor<2xf16>
    %a = nn.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : (tensor<2xf16>) -> tensor<f16>
    return %a : tensor<f16>
  }
}
