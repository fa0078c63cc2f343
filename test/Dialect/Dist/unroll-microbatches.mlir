// RUN: shard-opt %s -split-input-file -verify-diagnostics -dist-unroll-microbatches | FileCheck %s
// The micro-batch axis of a per-rank program becomes copies of it on one
// rank, run one after another; collectives over the axis become sums,
// concatenations and static slices of the copies.

// A linear layer's training step, data-parallel over dp and split into
// two micro-batches: each copy slices its micro-batch of the rank's batch,
// the weight gradients are summed over the copies and all-reduced over dp
// once; both copies read the one weight; copy 0's forward and backward come before
// copy 1's.
dist.mesh @m ["dp"=2, "microbatch"=2]
// CHECK-LABEL: dist.mesh @m ["dp"=2]
// CHECK-LABEL: func.func @linear
// CHECK: %[[RANK:.*]] = dist.all_slice %arg0 on @m ["dp"] {dim = 0 : i64} : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK: %[[X0:.*]] = nn.slice %[[RANK]] {axes = array<i64: 0>, ends = array<i64: 2>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<4x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[W:.*]] = nn.weight "w"
// CHECK: %[[Y0:.*]] = nn.matmul %[[X0]], %[[W]]
// CHECK: %[[T0:.*]] = nn.transpose %[[X0]]
// CHECK: %[[G0:.*]] = nn.matmul %[[T0]], %[[Y0]]
// CHECK: %[[X1:.*]] = nn.slice %[[RANK]] {axes = array<i64: 0>, ends = array<i64: 4>, starts = array<i64: 2>, steps = array<i64: 1>}
// CHECK: %[[Y1:.*]] = nn.matmul %[[X1]], %[[W]]
// CHECK: %[[T1:.*]] = nn.transpose %[[X1]]
// CHECK: %[[G1:.*]] = nn.matmul %[[T1]], %[[Y1]]
// CHECK: %[[SUM:.*]] = nn.add %[[G0]], %[[G1]] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK: %[[Y:.*]] = nn.concat %[[Y0]], %[[Y1]] {axis = 0 : i64}
// CHECK: %[[R:.*]] = dist.all_reduce %[[SUM]] on @m ["dp"]
// CHECK: %[[WHOLE:.*]] = dist.all_gather %[[Y]] on @m ["dp"] {dim = 0 : i64} : tensor<4x4xf32> -> tensor<8x4xf32>
// CHECK: return %[[WHOLE]], %[[R]]
func.func @linear(%x: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<4x4xf32>) {
  %w = nn.weight "w" {storage = "zeros"} : tensor<4x4xf32>
  %xs = dist.all_slice %x on @m ["dp", "microbatch"] {dim = 0 : i64} : tensor<8x4xf32> -> tensor<2x4xf32>
  %y = nn.matmul %xs, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %xt = nn.transpose %xs {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %g = nn.matmul %xt, %y : (tensor<4x2xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  %r = dist.all_reduce %g on @m ["dp", "microbatch"] : tensor<4x4xf32> -> tensor<4x4xf32>
  %whole = dist.all_gather %y on @m ["dp", "microbatch"] {dim = 0 : i64} : tensor<2x4xf32> -> tensor<8x4xf32>
  return %whole, %r : tensor<8x4xf32>, tensor<4x4xf32>
}

// -----

// The axis first in a collective's list: the copies' blocks are the outer
// ones. reduce_scatter sums the copies, gives each copy its block and
// scatters it over the other axes; a max over copies stays a max.
dist.mesh @m ["tp"=2, "microbatch"=2]
// CHECK-LABEL: dist.mesh @m ["tp"=2]
// CHECK-LABEL: func.func @outer
// CHECK: %[[A0:.*]] = nn.slice %arg0 {axes = array<i64: 0>, ends = array<i64: 8>, starts = array<i64: 0>
// CHECK: %[[S0:.*]] = dist.all_slice %[[A0]] on @m ["tp"] {dim = 0 : i64} : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK: %[[A1:.*]] = nn.slice %arg0 {axes = array<i64: 0>, ends = array<i64: 16>, starts = array<i64: 8>
// CHECK: %[[S1:.*]] = dist.all_slice %[[A1]] on @m ["tp"] {dim = 0 : i64}
// CHECK: %[[T:.*]] = nn.add %[[S0]], %[[S1]]
// CHECK: %[[B0:.*]] = nn.slice %[[T]] {axes = array<i64: 0>, ends = array<i64: 2>, starts = array<i64: 0>
// CHECK: %[[R0:.*]] = dist.reduce_scatter %[[B0]] on @m ["tp"] {dim = 0 : i64} : tensor<2x4xf32> -> tensor<1x4xf32>
// CHECK: %[[G0:.*]] = dist.all_gather %[[R0]] on @m ["tp"] {dim = 0 : i64} : tensor<1x4xf32> -> tensor<2x4xf32>
// CHECK: %[[M:.*]] = nn.max %[[S0]], %[[S1]]
// CHECK: %[[B1:.*]] = nn.slice %[[T]] {axes = array<i64: 0>, ends = array<i64: 4>, starts = array<i64: 2>
// CHECK: %[[R1:.*]] = dist.reduce_scatter %[[B1]] on @m ["tp"]
// CHECK: %[[G1:.*]] = dist.all_gather %[[R1]] on @m ["tp"]
// CHECK: %[[G:.*]] = nn.concat %[[G0]], %[[G1]] {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// CHECK: %[[MAX:.*]] = dist.all_reduce %[[M]] on @m ["tp"] {reduction = "max"}
// CHECK: return %[[MAX]], %[[G]]
func.func @outer(%x: tensor<16x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %xs = dist.all_slice %x on @m ["microbatch", "tp"] {dim = 0 : i64} : tensor<16x4xf32> -> tensor<4x4xf32>
  %m = dist.all_reduce %xs on @m ["microbatch", "tp"] {reduction = "max"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %rs = dist.reduce_scatter %xs on @m ["microbatch", "tp"] {dim = 0 : i64} : tensor<4x4xf32> -> tensor<1x4xf32>
  %g = dist.all_gather %rs on @m ["microbatch", "tp"] {dim = 0 : i64} : tensor<1x4xf32> -> tensor<4x4xf32>
  return %m, %g : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Weights split over other axes keep coordinate 0's slice per rank.
dist.mesh @m ["tp"=2, "microbatch"=2]
// CHECK-LABEL: func.func @slices
// CHECK: nn.weight "w" {{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 2>]{{.*}} : tensor<4x2xf32>
func.func @slices(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %w = nn.weight "w" {storage = "zeros", global_shape = array<i64: 4, 4>, starts = [array<i64: 0, 0>, array<i64: 0, 0>, array<i64: 0, 2>, array<i64: 0, 2>]} : tensor<4x2xf32>
  %xs = dist.all_slice %x on @m ["microbatch"] {dim = 0 : i64} : tensor<4x4xf32> -> tensor<2x4xf32>
  %y = nn.matmul %xs, %w : (tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<2x2xf32>
  %g = dist.all_gather %y on @m ["microbatch"] {dim = 0 : i64} : tensor<2x2xf32> -> tensor<4x2xf32>
  %r = dist.all_gather %g on @m ["tp"] {dim = 1 : i64} : tensor<4x2xf32> -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}

// -----

// A micro-batch axis alone: the mesh goes.
// CHECK-NOT: dist.mesh
// CHECK-LABEL: func.func @alone
// CHECK: nn.concat
// CHECK-NOT: dist.
dist.mesh @m ["microbatch"=2]
func.func @alone(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %xs = dist.all_slice %x on @m ["microbatch"] {dim = 0 : i64} : tensor<4x4xf32> -> tensor<2x4xf32>
  %y = nn.relu %xs : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %g = dist.all_gather %y on @m ["microbatch"] {dim = 0 : i64} : tensor<2x4xf32> -> tensor<4x4xf32>
  return %g : tensor<4x4xf32>
}

// -----

dist.mesh @m ["microbatch"=2]
func.func @moved(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %xs = dist.all_slice %x on @m ["microbatch"] {dim = 0 : i64} : tensor<4x4xf32> -> tensor<2x4xf32>
  // expected-error @+1 {{over the micro-batch axis 'microbatch' cannot be unrolled}}
  %t = dist.all_to_all %xs on @m ["microbatch"] {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<2x4xf32> -> tensor<4x2xf32>
  %g = dist.all_gather %t on @m ["microbatch"] {dim = 1 : i64} : tensor<4x2xf32> -> tensor<4x4xf32>
  return %g : tensor<4x4xf32>
}

// -----

dist.mesh @m ["microbatch"=2]
func.func @split_weight(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{is split over the micro-batch axis 'microbatch'}}
  %w = nn.weight "w" {storage = "zeros", global_shape = array<i64: 4, 4>, starts = [array<i64: 0, 0>, array<i64: 2, 0>]} : tensor<2x4xf32>
  %g = dist.all_gather %w on @m ["microbatch"] {dim = 0 : i64} : tensor<2x4xf32> -> tensor<4x4xf32>
  return %g : tensor<4x4xf32>
}

// -----

dist.mesh @m ["microbatch"=2]
func.func @varying_result(%x: tensor<4x4xf32>) -> tensor<2x4xf32> {
  %xs = dist.all_slice %x on @m ["microbatch"] {dim = 0 : i64} : tensor<4x4xf32> -> tensor<2x4xf32>
  // expected-error @+1 {{result 0 differs between micro-batches}}
  return %xs : tensor<2x4xf32>
}
