// RUN: shard-opt %s -split-input-file -nn-differentiate=wrt=inputs | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-differentiate | FileCheck %s --check-prefix=WEIGHTS
// RUN: not shard-opt %s -split-input-file -nn-differentiate="wrt=inputs loss=nope" 2>&1 | FileCheck %s --check-prefix=NOLOSS

// The gradients of a scalar loss as new results named grad:<name>: the
// softmax's (its NaN probabilities, of a row of -inf, as zeros), the
// tanh's and the matmul's rules in reverse order, each operand's
// cotangent on its own (dX = G W^T, dW = X^T G).
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f64> {nn.name = "loss"}, tensor<2x3xf64> {nn.name = "grad:x"}, tensor<3x4xf64> {nn.name = "grad:w"})
// CHECK: %[[Y:.*]] = nn.matmul %arg0, %arg1
// CHECK: %[[T:.*]] = nn.tanh %[[Y]]
// CHECK: %[[S:.*]] = nn.softmax %[[T]]
// CHECK: %[[ONE:.*]] = nn.constant dense<1.000000e+00> : tensor<f64>
// CHECK: %[[GS:.*]] = nn.expand
// CHECK: %[[NUM:.*]] = nn.equal %[[S]], %[[S]]
// CHECK: %[[YS:.*]] = nn.where %[[NUM]], %[[S]]
// CHECK: %[[DOT:.*]] = nn.reduce_sum {{.*}} {axes = array<i64: 1>}
// CHECK: %[[GT:.*]] = nn.mul %[[YS]], {{.*}}
// CHECK: %[[GY:.*]] = nn.mul %[[GT]], {{.*}}
// CHECK: %[[WT:.*]] = nn.transpose %arg1 {perm = array<i64: 1, 0>}
// CHECK: %[[GX:.*]] = nn.matmul %[[GY]], %[[WT]]
// CHECK: %[[XT:.*]] = nn.transpose %arg0 {perm = array<i64: 1, 0>}
// CHECK: %[[GW:.*]] = nn.matmul %[[XT]], %[[GY]]
// CHECK: return %{{.*}}, %[[GX]], %[[GW]]
// NOLOSS: error: nn-differentiate: @main has no result named 'nope'
module {
  func.func @main(%x: tensor<2x3xf64> {nn.name = "x"}, %w: tensor<3x4xf64> {nn.name = "w"}) -> (tensor<f64> {nn.name = "loss"}) {
    %y = nn.matmul %x, %w : (tensor<2x3xf64>, tensor<3x4xf64>) -> tensor<2x4xf64>
    %t = nn.tanh %y : (tensor<2x4xf64>) -> tensor<2x4xf64>
    %s = nn.softmax %t {axis = 1 : i64} : (tensor<2x4xf64>) -> tensor<2x4xf64>
    %l = nn.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf64>) -> tensor<f64>
    return %l : tensor<f64>
  }
}

// -----

// wrt=weights: one gradient per initializer, the uses of one initializer
// summed; an input gets none, a weight the loss does not read gets zeros.
// WEIGHTS: func.func @main({{.*}}) -> (tensor<f32> {nn.name = "loss"}, tensor<4xf32> {nn.name = "grad:b"}, tensor<4xf32> {nn.name = "grad:unused"})
// WEIGHTS: %[[B1:.*]] = nn.weight "b"
// WEIGHTS: %[[B2:.*]] = nn.weight "b"
// WEIGHTS: nn.expand
// WEIGHTS: %[[G:.*]] = nn.add %{{.*}}, %{{.*}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// WEIGHTS: %[[Z:.*]] = nn.constant dense<0.000000e+00> : tensor<4xf32>
// WEIGHTS: return %{{.*}}, %[[G]], %[[Z]]
module {
  func.func @main(%x: tensor<4xf32> {nn.name = "x"}) -> (tensor<f32> {nn.name = "loss"}) {
    %b1 = nn.weight "b" {file = "w.bin", offset = 0 : i64, storage = "external"} : tensor<4xf32>
    %b2 = nn.weight "b" {file = "w.bin", offset = 0 : i64, storage = "external"} : tensor<4xf32>
    %u = nn.weight "unused" {file = "w.bin", offset = 16 : i64, storage = "external"} : tensor<4xf32>
    %p = nn.mul %x, %b1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %q = nn.add %p, %b2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %l = nn.reduce_sum %q {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
