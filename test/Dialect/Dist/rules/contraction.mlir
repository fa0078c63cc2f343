// Contractions: the summed dims are Reduction factors; batch and free dims
// Parallel. Convolutions split batch and, without groups, the channels.
// RUN: shard-opt %s -test-dist-sharding-rules -split-input-file -verify-diagnostics

func.func @matmul(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) {
  // expected-remark @below {{([i, j], [j, k]) -> ([i, k]) {i=4, j=8 reduction, k=2}}}
  %0 = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  return
}

// -----

// 1-D operands: the promoted dim does not exist, so it has no factor.
func.func @matmul_vectors(%a: tensor<2x4xf32>, %v: tensor<4xf32>, %b: tensor<3x4x5xf32>) {
  // expected-remark @below {{([i, j], [j]) -> ([i]) {i=2, j=4 reduction}}}
  %0 = nn.matmul %a, %v : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2xf32>
  // expected-remark @below {{([i], [j, i, k]) -> ([j, k]) {i=4 reduction, j=3, k=5}}}
  %1 = nn.matmul %v, %b : (tensor<4xf32>, tensor<3x4x5xf32>) -> tensor<3x5xf32>
  // expected-remark @below {{([i], [i]) -> ([]) {i=4 reduction}}}
  %2 = nn.matmul %v, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  return
}

// -----

// Batch dims broadcast right-aligned: lhs's size-1 batch dim has no factor,
// and rhs has no dim for the leading batch dim.
func.func @matmul_batch(%a: tensor<2x1x4x8xf32>, %b: tensor<3x8x5xf32>) {
  // expected-remark @below {{([i, 1, j, k], [l, k, m]) -> ([i, l, j, m]) {i=2, j=4, k=8 reduction, l=3, m=5}}}
  %0 = nn.matmul %a, %b : (tensor<2x1x4x8xf32>, tensor<3x8x5xf32>) -> tensor<2x3x4x5xf32>
  return
}

// -----

// C broadcasts to [M, N]. Each rank holding part of K would add all of
// beta * C to its partial product, so with C the contraction stays whole.
func.func @gemm(%a: tensor<2x4xf32>, %bt: tensor<3x4xf32>, %at: tensor<4x2xf32>, %b: tensor<4x3xf32>, %c: tensor<3xf32>, %c2: tensor<1x3xf32>, %c3: tensor<2x1xf32>) {
  // expected-remark @below {{([i, j], [k, j]) -> ([i, k]) {i=2, j=4 reduction, k=3}}}
  %0 = nn.gemm %a, %bt {trans_b = true} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [j, k], [1, k]) -> ([i, k]) {i=2, j=4 reduction, k=3}}}
  %4 = nn.gemm %a, %b, %c2 {beta = 0.0 : f32} : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [i, k], [k]) -> ([j, k]) {i=4 need_replication, j=2, k=3}}}
  %1 = nn.gemm %at, %b, %c {trans_a = true} : (tensor<4x2xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [j, k], [1, k]) -> ([i, k]) {i=2, j=4 need_replication, k=3}}}
  %2 = nn.gemm %a, %b, %c2 : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [k, i], [j, 1]) -> ([j, k]) {i=4 need_replication, j=2, k=3}}}
  %3 = nn.gemm %at, %bt, %c3 {trans_a = true, trans_b = true} : (tensor<4x2xf32>, tensor<3x4xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @einsum(%q: tensor<2x4x8x16xf32>, %a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-remark @below {{([i, j, k, l], [i, j, m, l]) -> ([i, j, k, m]) {i=2, j=4, k=8, l=16 reduction, m=8}}}
  %0 = nn.einsum %q, %q {equation = "bhid,bhjd->bhij"} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
  // Implicit output: the labels used once, sorted.
  // expected-remark @below {{([i, j], [j, k]) -> ([i, k]) {i=2, j=3 reduction, k=4}}}
  %1 = nn.einsum %a, %b {equation = "ij,jk"} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  // A label missing from the output of a single operand is summed too.
  // expected-remark @below {{([i, j]) -> ([j]) {i=2 reduction, j=3}}}
  %2 = nn.einsum %a {equation = "ij->j"} : (tensor<2x3xf32>) -> tensor<3xf32>
  return
}

// -----

// The ellipsis dims broadcast right-aligned across the inputs; a size-1
// ellipsis dim stretched by another input has no factor.
func.func @einsum_ellipsis(%a: tensor<5x1x2x3xf32>, %b: tensor<4x3x6xf32>, %c: tensor<2x3x4xf32>) {
  // expected-remark @below {{([i, 1, j, k], [l, k, m]) -> ([i, l, j, m]) {i=5, j=2, k=3 reduction, l=4, m=6}}}
  %0 = nn.einsum %a, %b {equation = "...ij,...jk->...ik"} : (tensor<5x1x2x3xf32>, tensor<4x3x6xf32>) -> tensor<5x4x2x6xf32>
  // Ellipsis dims left out of the output are summed.
  // expected-remark @below {{([i, j, k]) -> ([k]) {i=2 reduction, j=3 reduction, k=4}}}
  %1 = nn.einsum %c {equation = "...i->i"} : (tensor<2x3x4xf32>) -> tensor<4xf32>
  return
}

// -----

// A label repeated in one term takes a diagonal: it stays whole.
func.func @einsum_diagonal(%a: tensor<3x3xf32>, %b: tensor<3x3x2xf32>) {
  // expected-remark @below {{([1, 1]) -> ([]) {}}}
  %0 = nn.einsum %a {equation = "ii->"} : (tensor<3x3xf32>) -> tensor<f32>
  // expected-remark @below {{([1, 1, i]) -> ([1, i]) {i=2}}}
  %1 = nn.einsum %b {equation = "iij->ij"} : (tensor<3x3x2xf32>) -> tensor<3x2xf32>
  return
}

// -----

// Without groups: batch and output channels Parallel, input channels
// Reduction (need replication with a bias, which every rank would add);
// spatial and kernel dims whole.
func.func @conv(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf32>, %bias: tensor<6xf32>, %x3: tensor<1x2x5x6x7xf32>, %w3: tensor<4x2x2x3x3xf32>) {
  // expected-remark @below {{([i, j, 1, 1], [k, j, 1, 1], [k]) -> ([i, k, 1, 1]) {i=2, j=4 need_replication, k=6}}}
  %0 = nn.conv %x, %w, %bias {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<6xf32>) -> tensor<2x6x6x6xf32>
  // expected-remark @below {{([i, j, 1, 1, 1], [k, j, 1, 1, 1]) -> ([i, k, 1, 1, 1]) {i=1, j=2 reduction, k=4}}}
  %1 = nn.conv %x3, %w3 {strides = array<i64: 1, 2, 2>, pads = array<i64: 0, 0, 0, 0, 0, 0>, dilations = array<i64: 1, 1, 1>} : (tensor<1x2x5x6x7xf32>, tensor<4x2x2x3x3xf32>) -> tensor<1x4x4x2x3xf32>
  return
}

// -----

// With groups an output channel reads its own group's input channels: the
// channel dims stay whole.
func.func @conv_groups(%x: tensor<1x4x8x8xf32>, %w: tensor<8x2x3x3xf32>, %bias: tensor<8xf32>) {
  // expected-remark @below {{([i, 1, 1, 1], [1, 1, 1, 1], [1]) -> ([i, 1, 1, 1]) {i=1}}}
  %0 = nn.conv %x, %w, %bias {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<1x4x8x8xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32>
  return
}

// -----

// Pooling: batch and channels split, windows need whole spatial dims. The
// indices of max_pool_with_indices are flat positions in the whole input.
func.func @pooling(%x: tensor<2x4x8x8xf32>) {
  // expected-remark @below {{([i, j, 1, 1]) -> ([i, j, 1, 1]) {i=2, j=4}}}
  %0 = nn.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x4x4xf32>
  // expected-remark @below {{([i, j, 1, 1]) -> ([i, j, 1, 1]) {i=2, j=4}}}
  %1 = nn.average_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 3, 3>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : (tensor<2x4x8x8xf32>) -> tensor<2x4x3x3xf32>
  // expected-remark @below {{([i, j, 1, 1]) -> ([i, j, 1, 1]) {i=2, j=4}}}
  %2 = nn.global_average_pool %x : (tensor<2x4x8x8xf32>) -> tensor<2x4x1x1xf32>
  // expected-remark @below {{([1, 1, 1, 1]) -> ([1, 1, 1, 1], [1, 1, 1, 1]) {}}}
  %3:2 = nn.max_pool_with_indices %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>) -> (tensor<2x4x4x4xf32>, tensor<2x4x4x4xi64>)
  return
}
