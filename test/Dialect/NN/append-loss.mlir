// RUN: shard-opt %s -split-input-file -nn-append-loss | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-append-loss="kind=mse labels=target" | FileCheck %s --check-prefix=MSE
// RUN: not shard-opt %s -split-input-file -nn-append-loss="labels=x" 2>&1 | FileCheck %s --check-prefix=TAKEN
// RUN: shard-opt %s -split-input-file -nn-append-loss="max-blocks=4" | FileCheck %s --check-prefix=BLOCKS

// Cross-entropy over the last dimension of the first output: a labels
// argument shaped like the logits without their last dimension; each
// position's term is an nn.softmax_cross_entropy of the logits, their
// log-sum-exp and the global class ids (its gradient is the fused
// softmax-minus-one-hot); ignored positions (-100) are counted out and the
// sum divided by the count of the others; the labels carry the range the
// runtime checks them against. The log-sum-exp is written out (max, exp,
// sum, log, add), each step shardable along the classes. The max is for
// range only: nn.stop_gradient tells nn-differentiate that no cotangent
// flows through it.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<2x3xi64> {nn.ignore_value = -100 : i64, nn.name = "labels", nn.valid_range = array<i64: 0, 5>}
// CHECK-SAME: -> (tensor<2x3x5xf32> {nn.name = "logits"}, tensor<f32> {nn.name = "loss"})
// CHECK: %[[MAX:.*]] = nn.reduce_max %arg0 {axes = array<i64: 2>, nn.stop_gradient} : (tensor<2x3x5xf32>) -> tensor<2x3x1xf32>
// CHECK: %[[SHIFTED:.*]] = nn.sub %arg0, %[[MAX]]
// CHECK: %[[EXP:.*]] = nn.exp %[[SHIFTED]]
// CHECK: %[[SUM:.*]] = nn.reduce_sum %[[EXP]] {axes = array<i64: 2>}
// CHECK: %[[LOG:.*]] = nn.log %[[SUM]]
// CHECK: %[[LSE:.*]] = nn.add %[[LOG]], %[[MAX]]
// CHECK: %[[IDS:.*]] = nn.constant dense<[0, 1, 2, 3, 4]> : tensor<5xi64>
// CHECK: %[[ROWS:.*]] = nn.softmax_cross_entropy %arg0, %[[LSE]], %arg1, %[[IDS]] :
// CHECK-SAME: (tensor<2x3x5xf32>, tensor<2x3x1xf32>, tensor<2x3xi64>, tensor<5xi64>) -> tensor<2x3xf32>
// CHECK: %[[IGN:.*]] = nn.constant dense<-100> : tensor<i64>
// CHECK: nn.equal %arg1, %[[IGN]]
// CHECK: nn.reduce_sum %[[ROWS]] {axes = array<i64: 0, 1>, keepdims = false}
// CHECK: %[[LOSS:.*]] = nn.div
// CHECK: return %arg0, %[[LOSS]]
// With max-blocks, the row max is the max of block maxima (a vocabulary
// split over ranks stays split; 5 classes do not split into 4 blocks,
// 20 do).
// BLOCKS-LABEL: func.func @main
// BLOCKS: nn.reduce_max %arg0 {axes = array<i64: 2>, nn.stop_gradient} : (tensor<2x3x5xf32>) -> tensor<2x3x1xf32>
// BLOCKS-LABEL: func.func @main
// BLOCKS: %[[B:.*]] = nn.reshape %arg0 : (tensor<2x3x20xf32>) -> tensor<2x3x4x5xf32>
// BLOCKS: %[[BM:.*]] = nn.reduce_max %[[B]] {axes = array<i64: 3>, nn.stop_gradient} : (tensor<2x3x4x5xf32>) -> tensor<2x3x4x1xf32>
// BLOCKS: %[[M:.*]] = nn.reduce_max %[[BM]] {axes = array<i64: 2>, nn.stop_gradient} : (tensor<2x3x4x1xf32>) -> tensor<2x3x1x1xf32>
// BLOCKS: %[[ROW:.*]] = nn.reshape %[[M]] : (tensor<2x3x1x1xf32>) -> tensor<2x3x1xf32>
// BLOCKS: nn.sub %arg0, %[[ROW]]
// MSE: %arg1: tensor<2x3x5xf32> {nn.name = "target"}
// MSE: nn.sub %arg0, %arg1
// MSE: nn.constant dense<3.000000e+01> : tensor<f32>
// TAKEN: error: nn-append-loss: the model already has an input named 'x'
module {
  func.func @main(%x: tensor<2x3x5xf32> {nn.name = "x"}) -> (tensor<2x3x5xf32> {nn.name = "logits"}) {
    return %x : tensor<2x3x5xf32>
  }
}

// -----

module {
  func.func @main(%x: tensor<2x3x20xf32> {nn.name = "x"}) -> (tensor<2x3x20xf32> {nn.name = "logits"}) {
    return %x : tensor<2x3x20xf32>
  }
}
