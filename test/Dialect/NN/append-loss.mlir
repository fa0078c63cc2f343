// RUN: shard-opt %s -split-input-file -nn-append-loss | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-append-loss="kind=mse labels=target" | FileCheck %s --check-prefix=MSE
// RUN: not shard-opt %s -split-input-file -nn-append-loss="labels=x" 2>&1 | FileCheck %s --check-prefix=TAKEN

// Cross-entropy over the last dimension of the first output: a labels
// argument shaped like the logits without their last dimension, the
// label's log-probability picked by a one-hot row, ignored positions
// (-100) counted out, the sum divided by the count of the others; the
// labels carry the range the runtime checks them against.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<2x3xi64> {nn.ignore_value = -100 : i64, nn.name = "labels", nn.valid_range = array<i64: 0, 5>}
// CHECK-SAME: -> (tensor<2x3x5xf32> {nn.name = "logits"}, tensor<f32> {nn.name = "loss"})
// CHECK: %[[LSM:.*]] = nn.log_softmax %arg0 {axis = 2 : i64}
// CHECK: %[[IGN:.*]] = nn.constant dense<-100> : tensor<i64>
// CHECK: nn.equal %arg1, %[[IGN]]
// CHECK: %[[IDS:.*]] = nn.constant dense<[0, 1, 2, 3, 4]> : tensor<5xi64>
// CHECK: nn.reduce_sum {{.*}} {axes = array<i64: 2>, keepdims = false}
// CHECK: %[[LOSS:.*]] = nn.div
// CHECK: return %arg0, %[[LOSS]]
// MSE: %arg1: tensor<2x3x5xf32> {nn.name = "target"}
// MSE: nn.sub %arg0, %arg1
// MSE: nn.constant dense<3.000000e+01> : tensor<f32>
// TAKEN: error: nn-append-loss: the model already has an input named 'x'
module {
  func.func @main(%x: tensor<2x3x5xf32> {nn.name = "x"}) -> (tensor<2x3x5xf32> {nn.name = "logits"}) {
    return %x : tensor<2x3x5xf32>
  }
}
