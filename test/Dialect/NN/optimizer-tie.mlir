// RUN: shard-opt %s -nn-differentiate=loss=loss -nn-optimizer="optimizer=sgd lr=0.5 tie=head=emb" | FileCheck %s
// RUN: not shard-opt %s -nn-differentiate=loss=loss -nn-optimizer="tie=head=nope" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not shard-opt %s -nn-differentiate=loss=loss -nn-optimizer="tie=head=emb,emb=head" 2>&1 | FileCheck %s --check-prefix=TWICE

// A tied pair (an embedding [4x3] and a head holding it transposed [3x4]):
// the head's gradient, transposed, joins the embedding's; the embedding
// trains; the head's new value is the new embedding transposed.
// CHECK: module attributes {nn.training = {frozen = {}, held = {}, tied = {head = "emb^T"}, trained = {emb = 12 : i64}}}
// CHECK: %[[EMB:.*]] = nn.weight "emb"
// CHECK: %[[HEAD:.*]] = nn.weight "head"
// CHECK: %[[GHEAD:.*]] = nn.matmul %{{.*}}, %{{.*}} : (tensor<3x2xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[GEMB:.*]] = nn.matmul %{{.*}}, %{{.*}} : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// CHECK: %[[T:.*]] = nn.transpose %[[GHEAD]] {perm = array<i64: 1, 0>}
// CHECK: %[[SUM:.*]] = nn.add %[[GEMB]], %[[T]]
// CHECK: %[[STEP:.*]] = nn.mul %{{.*}}, %[[SUM]] : (tensor<f32>
// CHECK: %[[NEW:.*]] = nn.sub %[[EMB]], %[[STEP]]
// CHECK: %[[KEPT:.*]] = nn.where %{{.*}}, %[[NEW]], %[[EMB]]
// CHECK: %[[NEWHEAD:.*]] = nn.transpose %[[NEW]] {perm = array<i64: 1, 0>}
// CHECK: %[[KEPTHEAD:.*]] = nn.where %{{.*}}, %[[NEWHEAD]], %[[HEAD]]
// CHECK: return {{.*}}, %[[KEPT]], %[[KEPTHEAD]], %{{.*}} :
// UNKNOWN: error: nn-optimizer: tie 'head=nope': 'nope' is no float initializer the loss is differentiated against
// TWICE: error: nn-optimizer: tie 'emb=head': an initializer is tied twice, or a copy is another's source
module {
  func.func @main(%x: tensor<2x4xf32> {nn.name = "x"}) -> (tensor<f32> {nn.name = "loss"}) {
    %e = nn.weight "emb" {storage = "protobuf"} : tensor<4x3xf32>
    %h = nn.weight "head" {storage = "protobuf"} : tensor<3x4xf32>
    %a = nn.matmul %x, %e : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %b = nn.matmul %a, %h : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    %s = nn.reduce_sum %b {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
