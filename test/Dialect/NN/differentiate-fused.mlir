// RUN: shard-opt %s -split-input-file -nn-differentiate="wrt=all fused=normalization" | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-differentiate="wrt=all fused=all" | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-differentiate="wrt=all fused=gelu" | FileCheck %s --check-prefix=COMPOSED
// RUN: shard-opt %s -split-input-file -nn-differentiate="wrt=all fused=cross-entropy" | FileCheck %s --check-prefix=CE
// RUN: not shard-opt %s -split-input-file -nn-differentiate="fused=norms" 2>&1 | FileCheck %s --check-prefix=BAD

// fused=normalization: a layer norm's backward is nn.normalization_grad
// for the input and nn.normalization_scale_grad for the scale (kept
// apart: a schedule may run the weights' part later), the bias a row sum;
// no reductions of the composed form.
// CHECK-LABEL: func.func @main
// CHECK: %[[S:.*]] = nn.weight "s"
// CHECK: nn.layer_normalization %arg0, %[[S]], %{{[^ ]*}} :
// CHECK-NOT: nn.reduce_mean
// CHECK: %[[GS:.*]] = nn.normalization_scale_grad %arg0, %[[G:[^ ]*]] : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<8xf32>
// CHECK: nn.reduce_sum %[[G]] {axes = array<i64: 0, 1>} : (tensor<2x3x8xf32>) -> tensor<1x1x8xf32>
// CHECK: %[[GX:.*]] = nn.normalization_grad %arg0, %[[S]], %[[G]] : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
// CHECK: return %{{.*}}, %[[GS]], %{{.*}}, %[[GX]]
// COMPOSED-LABEL: func.func @main
// COMPOSED-NOT: normalization_grad
// COMPOSED: nn.reduce_mean
// BAD: error: nn-differentiate: fused takes attention, gelu, normalization, cross-entropy or all, got 'norms'
module {
  func.func @main(%x: tensor<2x3x8xf32> {nn.name = "x"}) -> (tensor<f32> {nn.name = "loss"}) {
    %s = nn.weight "s" {file = "w.bin", offset = 0 : i64, storage = "external"} : tensor<8xf32>
    %b = nn.weight "b" {file = "w.bin", offset = 32 : i64, storage = "external"} : tensor<8xf32>
    %y = nn.layer_normalization %x, %s, %b {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
    %t = nn.tanh %y : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %l = nn.reduce_sum %t {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// RMS norm over the last two dims with a scale broadcast to them: the
// scale's cotangent is shaped like the normalized dims, then summed to
// the scale's shape.
// CHECK-LABEL: func.func @main
// CHECK: %[[GS:.*]] = nn.normalization_scale_grad %arg0, %{{[^ ]*}} {axis = 1 : i64, epsilon = 9.99999997E-7 : f32, rms = true} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<3x8xf32>
// CHECK: nn.reduce_sum %[[GS]] {axes = array<i64: 0>} : (tensor<3x8xf32>) -> tensor<1x8xf32>
// CHECK: nn.normalization_grad %arg0, %{{.*}} {axis = 1 : i64, epsilon = 9.99999997E-7 : f32, rms = true} : (tensor<2x3x8xf32>, tensor<1x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
module {
  func.func @main(%x: tensor<2x3x8xf32> {nn.name = "x"}) -> (tensor<f32> {nn.name = "loss"}) {
    %s = nn.weight "s" {file = "w.bin", offset = 0 : i64, storage = "external"} : tensor<1x8xf32>
    %y = nn.rms_normalization %x, %s {axis = 1 : i64, epsilon = 1.0e-6 : f32} : (tensor<2x3x8xf32>, tensor<1x8xf32>) -> tensor<2x3x8xf32>
    %t = nn.tanh %y : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
    %l = nn.reduce_sum %t {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Cross-entropy's row maximum (nn.stop_gradient, from nn-append-loss)
// passes no cotangent: the backward of the log-softmax is the sum and the
// exp's alone, with no max's backward (its equal, count and share) over
// the logits; the mark is gone after differentiation.
// CHECK-LABEL: func.func @main
// CHECK: nn.reduce_max %{{.*}} {axes = array<i64: 1>} :
// CHECK: %[[LOSS:.*]] = nn.div
// CHECK-NOT: nn.reduce_max
// CHECK-NOT: nn.stop_gradient
// CHECK: %[[DW:.*]] = nn.matmul
// CHECK: return
module {
  func.func @main(%x: tensor<4x16xf32> {nn.name = "x"}, %labels: tensor<4xi64> {nn.name = "labels"}) -> (tensor<f32> {nn.name = "loss"}) {
    %w = nn.weight "w" {file = "w.bin", offset = 0 : i64, storage = "external"} : tensor<16x32xf32>
    %y = nn.matmul %x, %w : (tensor<4x16xf32>, tensor<16x32xf32>) -> tensor<4x32xf32>
    %m = nn.reduce_max %y {axes = array<i64: 1>, nn.stop_gradient} : (tensor<4x32xf32>) -> tensor<4x1xf32>
    %s = nn.sub %y, %m : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
    %e = nn.exp %s : (tensor<4x32xf32>) -> tensor<4x32xf32>
    %z = nn.reduce_sum %e {axes = array<i64: 1>, keepdims = true} : (tensor<4x32xf32>) -> tensor<4x1xf32>
    %lz = nn.log %z : (tensor<4x1xf32>) -> tensor<4x1xf32>
    %l = nn.sub %s, %lz : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
    %t = nn.reduce_sum %l {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x32xf32>) -> tensor<f32>
    %c = nn.constant dense<128.0> : tensor<f32>
    %loss = nn.div %t, %c : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// fused=cross-entropy: the logits' cotangent is one
// nn.softmax_cross_entropy_grad from the saved log-sum-exp (nothing flows
// to the lse or the max); the forward op is then expanded to its parts:
// the label's logit as a sum over the classes of the logits where the
// class is the label, the row's term masked by whether it counts. Composed, the
// cotangent is the softmax's exp minus the one-hot.
// CE-LABEL: func.func @main(%arg0: tensor<2x3x5xf32> {nn.name = "x"}, %arg1: tensor<2x3xi64>
// CE: %[[LSE:.*]] = nn.add
// CE: %[[IDS:.*]] = nn.constant dense<[0, 1, 2, 3, 4]> : tensor<5xi64>
// CE: %[[HIT:.*]] = nn.equal %{{.*}}, %[[IDS]] : (tensor<2x3x1xi64>, tensor<5xi64>) -> tensor<2x3x5xi1>
// CE: %[[PICKED:.*]] = nn.where %[[HIT]], %arg0, %{{.*}} : (tensor<2x3x5xi1>, tensor<2x3x5xf32>, tensor<f32>) -> tensor<2x3x5xf32>
// CE: nn.reduce_sum %[[PICKED]] {axes = array<i64: 2>, keepdims = false}
// CE-NOT: nn.softmax_cross_entropy %
// CE: nn.reduce_sum %{{.*}} {axes = array<i64: 0, 1>, keepdims = false}
// CE: %[[COLUMN:.*]] = nn.reshape %arg1 : (tensor<2x3xi64>) -> tensor<2x3x1xi64>
// CE: %[[DY:.*]] = nn.reshape %{{.*}} : (tensor<2x3xf32>) -> tensor<2x3x1xf32>
// CE: %[[G:.*]] = nn.softmax_cross_entropy_grad %arg0, %[[LSE]], %[[COLUMN]], %[[IDS]], %[[DY]] {ignore_index = 7 : i64} : (tensor<2x3x5xf32>, tensor<2x3x1xf32>, tensor<2x3x1xi64>, tensor<5xi64>, tensor<2x3x1xf32>) -> tensor<2x3x5xf32>
// CE-NOT: nn.exp
// CE: return %{{.*}}, %[[G]]
// COMPOSED-LABEL: func.func @main(%arg0: tensor<2x3x5xf32> {nn.name = "x"}, %arg1: tensor<2x3xi64>
// COMPOSED-NOT: softmax_cross_entropy
// COMPOSED: nn.reduce_sum %{{.*}} {axes = array<i64: 0, 1>, keepdims = false}
// COMPOSED: %[[P:.*]] = nn.exp %{{.*}} : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
// COMPOSED: nn.sub %[[P]], %{{.*}} : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
// COMPOSED-NOT: softmax_cross_entropy
module {
  func.func @main(%x: tensor<2x3x5xf32> {nn.name = "x"}, %labels: tensor<2x3xi64> {nn.name = "labels"}) -> (tensor<f32> {nn.name = "loss"}) {
    %m = nn.reduce_max %x {axes = array<i64: 2>, keepdims = true} : (tensor<2x3x5xf32>) -> tensor<2x3x1xf32>
    %d = nn.sub %x, %m : (tensor<2x3x5xf32>, tensor<2x3x1xf32>) -> tensor<2x3x5xf32>
    %e = nn.exp %d : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
    %s = nn.reduce_sum %e {axes = array<i64: 2>, keepdims = true} : (tensor<2x3x5xf32>) -> tensor<2x3x1xf32>
    %ls = nn.log %s : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
    %lse = nn.add %ls, %m : (tensor<2x3x1xf32>, tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
    %ids = nn.constant dense<[0, 1, 2, 3, 4]> : tensor<5xi64>
    %r = nn.softmax_cross_entropy %x, %lse, %labels, %ids {ignore_index = 7 : i64} : (tensor<2x3x5xf32>, tensor<2x3x1xf32>, tensor<2x3xi64>, tensor<5xi64>) -> tensor<2x3xf32>
    %l = nn.reduce_sum %r {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
