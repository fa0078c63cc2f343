// The megatron preset finds column-then-row parallel pairs by following the
// first layer's output through ops that keep its columns apart: every
// elementwise op does (the nn.Elementwise trait), whatever it is; a
// normalization over the features does not.
// RUN: shard-opt %s --mesh tp=2 --strategy megatron | FileCheck %s

// CHECK-LABEL: func.func @abs_between
// CHECK: nn.weight "fc1.w" {{.*}}global_shape = array<i64: 8, 16>{{.*}} : tensor<8x8xf32>
// CHECK: nn.weight "fc2.w" {{.*}}global_shape = array<i64: 16, 8>{{.*}} : tensor<8x8xf32>
// CHECK: nn.abs {{.*}} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[P:.*]] = nn.matmul {{.*}} -> tensor<4x8xf32>
// CHECK-NEXT: dist.all_reduce %[[P]] on @mesh ["tp"]
func.func @abs_between(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w1 = nn.weight "fc1.w" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<8x16xf32>
  %w2 = nn.weight "fc2.w" {storage = "external", file = "m.data", offset = 512 : i64} : tensor<16x8xf32>
  %h = nn.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a = nn.abs %h : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = nn.matmul %a, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @norm_between
// CHECK-NOT: global_shape
// CHECK: nn.layer_normalization
// CHECK-NOT: dist.all_reduce
func.func @norm_between(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w1 = nn.weight "fc1.w" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<8x16xf32>
  %g = nn.weight "ln.g" {storage = "external", file = "m.data", offset = 512 : i64} : tensor<16xf32>
  %w2 = nn.weight "fc2.w" {storage = "external", file = "m.data", offset = 576 : i64} : tensor<16x8xf32>
  %h = nn.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %n = nn.layer_normalization %h, %g {axis = 1 : i64} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %y = nn.matmul %n, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
