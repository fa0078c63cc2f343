// RUN: shard-opt %s -split-input-file -dist-split-stages="ranks=2 microbatches=2" | FileCheck %s
// RUN: shard-opt %s -split-input-file -dist-split-stages="ranks=2 microbatches=2 split=layers:1" | FileCheck %s --check-prefix=SPLIT
// RUN: shard-opt %s -split-input-file -dist-split-stages="ranks=2 microbatches=2 schedule=interleaved-1f1b" | FileCheck %s --check-prefix=INTER

// Four residual layers h + where(keep, relu(h W), 0) after an embedding
// x E, and a head h E^T reading the same weight (tied). Two stages of two
// layers: the first stage sends the residual stream; the second takes the
// token mask itself and computes `keep` again, and reads the tied weight
// itself.
// CHECK: module attributes {dist.pipeline = {actions = ["0F0,0F1", "1F0,1F1"], microbatches = 2 : i64, ranks = 2 : i64, schedule = "1f1b", stage_ranks = array<i64: 0, 1>}
// CHECK-LABEL: func.func @stage_0(
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32> {nn.name = "x"}, %[[M:.*]]: tensor<4x8xi64> {nn.name = "m"})
// CHECK-SAME: -> (tensor<4x8xf32> {dist.to = array<i64: 1>, dist.transfer = 0 : i64, nn.name = "transfer:0"})
// CHECK-SAME: attributes {dist.estimated_bytes = 4.464000e+03 : f64, dist.estimated_flops = 1.760000e+03 : f64, dist.estimated_seconds = {{.*}} : f64, dist.layers = array<i64: 0, 2>, dist.pp_rank = 0 : i64, dist.stage = 0 : i64}
// CHECK: nn.weight "emb"
// CHECK-COUNT-2: nn.relu
// CHECK-NOT: nn.relu
// CHECK: return
// CHECK-LABEL: func.func @stage_1(
// CHECK-SAME: %[[M1:.*]]: tensor<4x8xi64> {nn.name = "m"}, %[[H:.*]]: tensor<4x8xf32> {dist.from = 0 : i64, dist.transfer = 0 : i64, nn.name = "transfer:0"})
// CHECK-SAME: -> (tensor<4x8xf32> {nn.name = "y"})
// CHECK-SAME: attributes {dist.estimated_bytes = 4.976000e+03 : f64, dist.estimated_flops = 1.760000e+03 : f64, dist.estimated_seconds = {{.*}} : f64, dist.layers = array<i64: 2, 4>, dist.pp_rank = 1 : i64, dist.stage = 1 : i64}
// CHECK-DAG: nn.weight "emb"
// CHECK-DAG: nn.cast %[[M1]]
// CHECK-COUNT-2: nn.relu
// CHECK: nn.transpose
// CHECK: nn.matmul
// CHECK-NOT: @main

// SPLIT-LABEL: func.func @stage_0(
// SPLIT-COUNT-1: nn.relu
// SPLIT-NOT: nn.relu
// SPLIT-LABEL: func.func @stage_1(
// SPLIT-COUNT-3: nn.relu

// Interleaved: four stages of a layer each, stage s on rank s mod 2.
// INTER: dist.pipeline = {actions = ["0F0,0F1,2F0,2F1", "1F0,1F1,3F0,3F1"], microbatches = 2 : i64, ranks = 2 : i64, schedule = "interleaved-1f1b", stage_ranks = array<i64: 0, 1, 0, 1>}
// INTER: func.func @stage_1({{.*}}{dist.from = 0 : i64, dist.transfer = 0 : i64, nn.name = "transfer:0"}) -> (tensor<4x8xf32> {dist.to = array<i64: 2>, dist.transfer = 1 : i64, nn.name = "transfer:1"}) attributes {{{.*}}dist.layers = array<i64: 1, 2>, dist.pp_rank = 1 : i64, dist.stage = 1 : i64}
// INTER: func.func @stage_3({{.*}}{dist.from = 2 : i64, dist.transfer = 2 : i64, nn.name = "transfer:2"}) -> (tensor<4x8xf32> {nn.name = "y"}) attributes {{{.*}}dist.layers = array<i64: 3, 4>, dist.pp_rank = 1 : i64, dist.stage = 3 : i64}
func.func @main(%x: tensor<4x8xf32> {nn.name = "x"}, %m: tensor<4x8xi64> {nn.name = "m"}) -> (tensor<4x8xf32> {nn.name = "y"}) {
  %we = nn.weight "emb" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %h0 = nn.matmul %x, %we : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %keep = nn.cast %m {to = i1} : (tensor<4x8xi64>) -> tensor<4x8xi1>
  %w0 = nn.weight "w0" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p0 = nn.matmul %h0, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r0 = nn.relu %p0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z0 = nn.constant dense<0.0> : tensor<f32>
  %g0 = nn.where %keep, %r0, %z0 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %h1 = nn.add %h0, %g0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 512 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p1 = nn.matmul %h1, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %p1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z1 = nn.constant dense<0.0> : tensor<f32>
  %g1 = nn.where %keep, %r1, %z1 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %h2 = nn.add %h1, %g1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 768 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p2 = nn.matmul %h2, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r2 = nn.relu %p2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z2 = nn.constant dense<0.0> : tensor<f32>
  %g2 = nn.where %keep, %r2, %z2 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %h3 = nn.add %h2, %g2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w3 = nn.weight "w3" {storage = "external", file = "m.data", offset = 1024 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p3 = nn.matmul %h3, %w3 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r3 = nn.relu %p3 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z3 = nn.constant dense<0.0> : tensor<f32>
  %g3 = nn.where %keep, %r3, %z3 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %h4 = nn.add %h3, %g3 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %et = nn.transpose %we {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %y = nn.matmul %h4, %et : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A head much slower than a layer (a projection to 1024 classes): the
// stages are balanced by estimated time, so the last stage, which holds
// the head, gets one layer and the first three.
// CHECK-LABEL: func.func @stage_0(
// CHECK-COUNT-3: nn.relu
// CHECK-NOT: nn.relu
// CHECK-LABEL: func.func @stage_1(
// CHECK-COUNT-1: nn.relu
// CHECK-NOT: nn.relu
// CHECK: nn.weight "head"
func.func @main(%x: tensor<4x8xf32> {nn.name = "x"}) -> (tensor<4x1024xf32> {nn.name = "y"}) {
  %w0 = nn.weight "w0" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p0 = nn.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r0 = nn.relu %p0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %h1 = nn.add %x, %r0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p1 = nn.matmul %h1, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %p1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %h2 = nn.add %h1, %r1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 512 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p2 = nn.matmul %h2, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r2 = nn.relu %p2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %h3 = nn.add %h2, %r2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w3 = nn.weight "w3" {storage = "external", file = "m.data", offset = 768 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p3 = nn.matmul %h3, %w3 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r3 = nn.relu %p3 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %h4 = nn.add %h3, %r3 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %wh = nn.weight "head" {storage = "external", file = "m.data", offset = 1024 : i64, size = 32768 : i64} : tensor<8x1024xf32>
  %y = nn.matmul %h4, %wh : (tensor<4x8xf32>, tensor<8x1024xf32>) -> tensor<4x1024xf32>
  return %y : tensor<4x1024xf32>
}
