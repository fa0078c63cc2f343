// RUN: shard-opt %s -split-input-file -convert-nn-to-rt | FileCheck %s

// nn.adamw_update writes the weight and its moments in place when nothing
// reads their old values after it: no copy into the state at the end.
// CHECK-LABEL: func.func @main
// CHECK: %[[W:.*]] = rt.weight "w" {{.*}}writable
// CHECK: %[[M:.*]] = rt.weight "w.exp_avg" {{.*}}writable
// CHECK: %[[V:.*]] = rt.weight "w.exp_avg_sq" {{.*}}writable
// CHECK: rt.kernel "adamw_update" ins(%[[W]], %{{.*}}, %[[M]], %[[V]], {{.*}}) outs(%[[W]], %[[M]], %[[V]] :
// CHECK-NOT: "identity"
// CHECK: return
module {
  func.func @main(%g: tensor<4xf32> {nn.name = "g"}) -> (tensor<4xf32> {nn.name = "w", nn.state = "w"}, tensor<4xf32> {nn.name = "w.exp_avg", nn.state = "w.exp_avg"}, tensor<4xf32> {nn.name = "w.exp_avg_sq", nn.state = "w.exp_avg_sq"}) {
    %w = nn.weight "w" {storage = "protobuf", size = 16 : i64} : tensor<4xf32>
    %m = nn.weight "w.exp_avg" {storage = "zeros"} : tensor<4xf32>
    %v = nn.weight "w.exp_avg_sq" {storage = "zeros"} : tensor<4xf32>
    %lr = nn.constant dense<1.0e-3> : tensor<f32>
    %t = nn.constant dense<1.0> : tensor<f32>
    %ok = nn.constant dense<true> : tensor<i1>
    %w2, %m2, %v2 = nn.adamw_update %w, %g, %m, %v, %lr, %t, %t, %ok {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    return %w2, %m2, %v2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  }
}

// -----

// The old weight is read after the update, through a view of it: the
// update writes a fresh buffer, and the copy into the state stays; the
// moments, which nothing else reads, are still updated in place.
// CHECK-LABEL: func.func @main
// CHECK: %[[W:.*]] = rt.weight "w" {{.*}}writable
// CHECK: %[[M:.*]] = rt.weight "w.exp_avg" {{.*}}writable
// CHECK: %[[V:.*]] = rt.weight "w.exp_avg_sq" {{.*}}writable
// CHECK: %[[NEW:.*]] = rt.alloc : memref<4xf32>
// CHECK: rt.kernel "adamw_update" ins(%[[W]], %{{.*}}, %[[M]], %[[V]], {{.*}}) outs(%[[NEW]], %[[M]], %[[V]] :
// CHECK: rt.kernel "exp" ins(%{{.*}} : memref<2x2xf32>)
// CHECK: rt.kernel "identity" ins(%[[NEW]] : memref<4xf32>) outs(%[[W]] : memref<4xf32>)
// CHECK-NOT: "identity"
module {
  func.func @main(%g: tensor<4xf32> {nn.name = "g"}) -> (tensor<4xf32> {nn.name = "w", nn.state = "w"}, tensor<4xf32> {nn.name = "w.exp_avg", nn.state = "w.exp_avg"}, tensor<4xf32> {nn.name = "w.exp_avg_sq", nn.state = "w.exp_avg_sq"}, tensor<2x2xf32> {nn.name = "late"}) {
    %w = nn.weight "w" {storage = "protobuf", size = 16 : i64} : tensor<4xf32>
    %m = nn.weight "w.exp_avg" {storage = "zeros"} : tensor<4xf32>
    %v = nn.weight "w.exp_avg_sq" {storage = "zeros"} : tensor<4xf32>
    %r = nn.reshape %w : (tensor<4xf32>) -> tensor<2x2xf32>
    %lr = nn.constant dense<1.0e-3> : tensor<f32>
    %t = nn.constant dense<1.0> : tensor<f32>
    %ok = nn.constant dense<true> : tensor<i1>
    %w2, %m2, %v2 = nn.adamw_update %w, %g, %m, %v, %lr, %t, %t, %ok {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    %late = nn.exp %r : (tensor<2x2xf32>) -> tensor<2x2xf32>
    return %w2, %m2, %v2, %late : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x2xf32>
  }
}
