// Reshape-like ops factorize the two shapes by their prefix products;
// size-1 dims have no factor.
// RUN: shard-opt %s -test-dist-sharding-rules -split-input-file -verify-diagnostics

func.func @reshape_merge_split(%x: tensor<2x3x4xf32>, %y: tensor<2x6xf32>, %h: tensor<2x8x64xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([i*j, k]) {i=2, j=3, k=4}}}
  %0 = nn.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // The prefix products 2, 4, 12 form a divisibility chain: factors 2, 2, 3.
  // expected-remark @below {{([i, j*k]) -> ([i*j, k]) {i=2, j=2, k=3}}}
  %1 = nn.reshape %y : (tensor<2x6xf32>) -> tensor<4x3xf32>
  // Splitting heads: [B, S, H * D] -> [B, S, H, D].
  // expected-remark @below {{([i, j, k*l]) -> ([i, j, k, l]) {i=2, j=8, k=4, l=16}}}
  %2 = nn.reshape %h : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>
  // expected-remark @below {{([i, j, k, l]) -> ([i, j, k*l]) {i=2, j=8, k=4, l=16}}}
  %3 = nn.reshape %2 : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// No divisibility chain: the common major part (gcd 2 of 6 and 4) is still
// shared; the rest of each side up to the next common boundary is split its
// own way and needs replication. Dims after that boundary share again.
func.func @reshape_no_chain(%x: tensor<6x4x5xf32>, %y: tensor<3x2xf32>) {
  // expected-remark @below {{([i*j, k, l]) -> ([i*m, n, l]) {i=2, j=3 need_replication, k=4 need_replication, l=5, m=2 need_replication, n=6 need_replication}}}
  %0 = nn.reshape %x : (tensor<6x4x5xf32>) -> tensor<4x6x5xf32>
  // expected-remark @below {{([i, j]) -> ([k, l]) {i=3 need_replication, j=2 need_replication, k=2 need_replication, l=3 need_replication}}}
  %1 = nn.reshape %y : (tensor<3x2xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @reshape_unit_and_empty(%x: tensor<2x1x3xf32>, %o: tensor<1x1xf32>, %e: tensor<0x3xf32>) {
  // expected-remark @below {{([i, 1, j]) -> ([1, i*j]) {i=2, j=3}}}
  %0 = nn.reshape %x : (tensor<2x1x3xf32>) -> tensor<1x6xf32>
  // expected-remark @below {{([1, 1]) -> ([1, 1, 1]) {}}}
  %1 = nn.reshape %o : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
  // expected-remark @below {{([1, 1]) -> ([1, 1]) {}}}
  %2 = nn.reshape %e : (tensor<0x3xf32>) -> tensor<3x0xf32>
  return
}

// -----

func.func @flatten_squeeze_unsqueeze(%x: tensor<2x3x4xf32>, %y: tensor<2x3xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([i*j, k]) {i=2, j=3, k=4}}}
  %0 = nn.flatten %x {axis = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // expected-remark @below {{([i, j]) -> ([1, i*j]) {i=2, j=3}}}
  %1 = nn.flatten %y {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<1x6xf32>
  // expected-remark @below {{([i, j, k]) -> ([i, 1, j, k]) {i=2, j=3, k=4}}}
  %2 = nn.unsqueeze %x {axes = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x3x4xf32>
  // expected-remark @below {{([i, 1, j, k]) -> ([i, j, k]) {i=2, j=3, k=4}}}
  %3 = nn.squeeze %2 {axes = array<i64: 1>} : (tensor<2x1x3x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

// Expand: input dims that broadcast have no factor.
func.func @expand(%x: tensor<2x3x4xf32>, %y: tensor<3x1xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([l, i, j, k]) {i=2, j=3, k=4, l=5}}}
  %0 = nn.expand %x : (tensor<2x3x4xf32>) -> tensor<5x2x3x4xf32>
  // expected-remark @below {{([i, 1]) -> ([j, i, k]) {i=3, j=2, k=4}}}
  %1 = nn.expand %y : (tensor<3x1xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @transpose(%x: tensor<2x3x4xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([k, i, j]) {i=2, j=3, k=4}}}
  %0 = nn.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  return
}
