// RUN: shard-opt %s -nn-keyed-dropout=seed=7 | FileCheck %s

// Each dropout becomes a keyed dropout of its ratio, numbered in program
// order, reading the step counter plus one; a training-mode dropout whose
// mask nothing reads too; ratio 0 is the identity.
// CHECK-LABEL: func.func @main
// CHECK: %[[COUNTER:.*]] = nn.weight "optimizer.step" {storage = "zeros"} : tensor<f32>
// CHECK: %[[ONE:.*]] = nn.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[STEP:.*]] = nn.add %[[COUNTER]], %[[ONE]]
// CHECK: %[[A:.*]] = nn.keyed_dropout %arg0, %[[STEP]] {dropout_id = 0 : i64, ratio = 1.000000e-01 : f32, seed = 7 : i64}
// CHECK: %[[B:.*]] = nn.keyed_dropout %[[A]], %[[STEP]] {dropout_id = 1 : i64, ratio = 2.500000e-01 : f32, seed = 7 : i64}
// CHECK-NOT: dropout
// CHECK: return %[[B]]
module {
  func.func @main(%x: tensor<2x3xf32> {nn.name = "x"}) -> (tensor<2x3xf32> {nn.name = "y"}) {
    %a = nn.dropout %x {ratio = 0.1 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %b, %m = nn.training_dropout %a {ratio = 0.25 : f32, seed = 3 : i64} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
    %c = nn.dropout %b {ratio = 0.0 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    return %c : tensor<2x3xf32>
  }
}
