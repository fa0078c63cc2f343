// Normalizations, softmax, rotate_half, reductions, scans and top-k: the dims an op
// reads whole are NeedReplication, except reduce_sum's, whose partial sums
// add up (Reduction).
// RUN: shard-opt %s -test-dist-sharding-rules -split-input-file -verify-diagnostics

func.func @softmax(%x: tensor<2x4x8xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([i, j, k]) {i=2, j=4 need_replication, k=8}}}
  %0 = nn.softmax %x {axis = 1 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // expected-remark @below {{([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8 need_replication}}}
  %1 = nn.log_softmax %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

// rotate_half: each half of the last dimension reads the other.
func.func @rotate_half(%x: tensor<2x4x8xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8 need_replication}}}
  %0 = nn.rotate_half %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

// The parameters broadcast right-aligned to the normalized dims [axis, rank).
func.func @layer_normalization(%x: tensor<2x4x8xf32>, %s: tensor<8xf32>, %s2: tensor<4x8xf32>, %b2: tensor<1x8xf32>) {
  // expected-remark @below {{([i, j, k], [k], [k]) -> ([i, j, k]) {i=2, j=4, k=8 need_replication}}}
  %0 = nn.layer_normalization %x, %s, %s {epsilon = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // expected-remark @below {{([i, j, k], [j, k], [1, k]) -> ([i, j, k]) {i=2, j=4 need_replication, k=8 need_replication}}}
  %1 = nn.layer_normalization %x, %s2, %b2 {axis = 1 : i64} : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<2x4x8xf32>
  // expected-remark @below {{([i, j, k], [k]) -> ([i, j, k]) {i=2, j=4 need_replication, k=8 need_replication}}}
  %2 = nn.layer_normalization %x, %s {axis = -2 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @rms_normalization(%x: tensor<2x4x8xf32>, %s: tensor<8xf32>) {
  // expected-remark @below {{([i, j, k], [k]) -> ([i, j, k]) {i=2, j=4, k=8 need_replication}}}
  %0 = nn.rms_normalization %x, %s : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

// Inference mode: per-channel affine, every dim splits; the parameters
// follow the channels.
func.func @batch_normalization(%img: tensor<1x3x4x4xf32>, %c: tensor<3xf32>) {
  // expected-remark @below {{([i, j, k, l], [j], [j], [j], [j]) -> ([i, j, k, l]) {i=1, j=3, k=4, l=4}}}
  %0 = nn.batch_normalization %img, %c, %c, %c, %c : (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
  return
}

// -----

// A kept size-1 dim has no factor.
func.func @reduce(%x: tensor<2x3x4xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([i]) {i=2, j=3 reduction, k=4 reduction}}}
  %0 = nn.reduce_sum %x {axes = array<i64: 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2xf32>
  // expected-remark @below {{([i, j, k]) -> ([i, 1, k]) {i=2, j=3 reduction, k=4}}}
  %1 = nn.reduce_sum %x {axes = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
  // expected-remark @below {{([i, j, k]) -> ([i, 1, k]) {i=2, j=3 need_replication, k=4}}}
  %2 = nn.reduce_mean %x {axes = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
  // expected-remark @below {{([i, j, k]) -> ([1, j, k]) {i=2 need_replication, j=3, k=4}}}
  %3 = nn.reduce_max %x {axes = array<i64: 0>} : (tensor<2x3x4xf32>) -> tensor<1x3x4xf32>
  // expected-remark @below {{([i, j, k]) -> ([i, j]) {i=2, j=3, k=4 need_replication}}}
  %4 = nn.reduce_max %x {axes = array<i64: -1>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j, k]) -> ([j]) {i=2 need_replication, j=3, k=4 need_replication}}}
  %5 = nn.reduce_mean %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @cumsum(%x: tensor<2x3x4xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([i, j, k]) {i=2, j=3, k=4 need_replication}}}
  %0 = nn.cumsum %x {axis = 2 : i64, exclusive = true} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // expected-remark @below {{([i, j, k]) -> ([i, j, k]) {i=2 need_replication, j=3, k=4}}}
  %1 = nn.cumsum %x {axis = -3 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

// Both results share the k-sized dim along the axis; the input's axis dim,
// of another size, has no factor.
func.func @topk(%x: tensor<2x3x4xf32>) {
  // expected-remark @below {{([i, j, 1]) -> ([i, j, k], [i, j, k]) {i=2, j=3, k=2 need_replication}}}
  %0:2 = nn.topk %x {k = 2 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi64>)
  // expected-remark @below {{([1, i, j]) -> ([k, i, j], [k, i, j]) {i=3, j=4, k=1 need_replication}}}
  %1:2 = nn.topk %x {k = 1 : i64, axis = 0 : i64} : (tensor<2x3x4xf32>) -> (tensor<1x3x4xf32>, tensor<1x3x4xi64>)
  return
}
