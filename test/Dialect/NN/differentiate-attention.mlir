// RUN: shard-opt %s -nn-differentiate="wrt=all fused=attention" | FileCheck %s
// RUN: shard-opt %s -nn-differentiate="wrt=all fused=gelu" | FileCheck %s --check-prefix=COMPOSED

// fused=attention: the forward is written again with save_lse: its result
// feeds the loss, its log-sum-exp nn.attention_grad, which recomputes the
// probabilities from it. The original
// forward is gone: one attention is left.
// CHECK-LABEL: func.func @main
// CHECK-NOT: nn.attention %
// CHECK: %[[Y:[^,]*]], %[[LSE:[^ ]*]] = nn.attention %arg0, %arg1, %arg2 {is_causal = true, save_lse = true} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x4x6xf32>)
// CHECK-NOT: nn.attention %
// CHECK: nn.tanh %[[Y]]
// CHECK: nn.attention_grad %arg0, %arg1, %arg2, %{{[^,]*}}, %[[LSE]] {is_causal = true} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x4x6xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>)
// CHECK-NOT: nn.attention %
// The composed backward keeps the forward as it was.
// COMPOSED-LABEL: func.func @main
// COMPOSED-NOT: save_lse
// COMPOSED-NOT: attention_grad
// COMPOSED: nn.softmax
module {
  func.func @main(%q: tensor<1x4x6x8xf32> {nn.name = "q"}, %k: tensor<1x2x6x8xf32> {nn.name = "k"},
                  %v: tensor<1x2x6x8xf32> {nn.name = "v"}) -> (tensor<f32> {nn.name = "loss"}) {
    %y = nn.attention %q, %k, %v {is_causal = true} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> tensor<1x4x6x8xf32>
    %t = nn.tanh %y : (tensor<1x4x6x8xf32>) -> tensor<1x4x6x8xf32>
    %l = nn.reduce_sum %t {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x4x6x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
