// Attention and rotary embedding: batch, heads, the query positions (unless
// causal) and the value features split; softmax's key positions and the
// query/key features stay whole. Query head h * g + r reads kv head h, so
// the query head dim is the compound (Hkv, g).
// RUN: shard-opt %s -test-dist-sharding-rules -split-input-file -verify-diagnostics

// Multi-head, not causal, 2-D mask broadcast over batch and heads.
func.func @attention_mha(%q: tensor<2x4x8x16xf32>, %mask: tensor<8x8xi1>) {
  // expected-remark @below {{([i, j*k, l, m], [i, j, n, m], [i, j, n, o], [l, n]) -> ([i, j*k, l, o]) {i=2, j=4, k=1, l=8, m=16 need_replication, n=8 need_replication, o=16}}}
  %0 = nn.attention %q, %q, %q, %mask {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<8x8xi1>) -> tensor<2x4x8x16xf32>
  return
}

// -----

// Grouped-query and causal: the query positions need replication.
func.func @attention_gqa_causal(%q: tensor<2x4x8x16xf32>, %kv: tensor<2x2x8x16xf32>) {
  // expected-remark @below {{([i, j*k, l, m], [i, j, n, m], [i, j, n, o]) -> ([i, j*k, l, o]) {i=2, j=2, k=2, l=8 need_replication, m=16 need_replication, n=8 need_replication, o=16}}}
  %0 = nn.attention %q, %kv, %kv {is_causal = true} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  return
}

// -----

// Different key and value feature sizes and sequence lengths; a 4-D mask
// broadcast over the heads, and one with every dim.
func.func @attention_gqa_mask(%q: tensor<2x8x5x16xf32>, %k: tensor<2x2x6x16xf32>, %v: tensor<2x2x6x32xf32>, %m: tensor<2x1x5x6xf32>, %full: tensor<2x8x5x6xi1>) {
  // expected-remark @below {{([i, j*k, l, m], [i, j, n, m], [i, j, n, o], [i, 1, l, n]) -> ([i, j*k, l, o]) {i=2, j=2, k=4, l=5, m=16 need_replication, n=6 need_replication, o=32}}}
  %0 = nn.attention %q, %k, %v, %m : (tensor<2x8x5x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x32xf32>, tensor<2x1x5x6xf32>) -> tensor<2x8x5x32xf32>
  // expected-remark @below {{([i, j*k, l, m], [i, j, n, m], [i, j, n, o], [i, j*k, l, n]) -> ([i, j*k, l, o]) {i=2, j=2, k=4, l=5, m=16 need_replication, n=6 need_replication, o=32}}}
  %1 = nn.attention %q, %k, %v, %full : (tensor<2x8x5x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x32xf32>, tensor<2x8x5x6xi1>) -> tensor<2x8x5x32xf32>
  return
}

// -----

// 3-D [B, S, H * D]: the hidden dim is the compound (Hkv, g, D) for the
// query, (Hkv, D) for the key, (Hkv, Dv) for the value, (Hkv, g, Dv) for
// the result.
func.func @attention_3d(%q: tensor<2x5x128xf32>, %kv: tensor<2x6x64xf32>, %mask: tensor<5x6xi1>) {
  // expected-remark @below {{([i, j, k*l*m], [i, n, k*m], [i, n, k*o]) -> ([i, j, k*l*o]) {i=2, j=5, k=4, l=2, m=16 need_replication, n=6 need_replication, o=16}}}
  %0 = nn.attention %q, %kv, %kv {q_num_heads = 8 : i64, kv_num_heads = 4 : i64} : (tensor<2x5x128xf32>, tensor<2x6x64xf32>, tensor<2x6x64xf32>) -> tensor<2x5x128xf32>
  // expected-remark @below {{([i, j, k*l*m], [i, n, k*m], [i, n, k*o], [j, n]) -> ([i, j, k*l*o]) {i=2, j=5 need_replication, k=4, l=2, m=16 need_replication, n=6 need_replication, o=16}}}
  %1 = nn.attention %q, %kv, %kv, %mask {q_num_heads = 8 : i64, kv_num_heads = 4 : i64, is_causal = true} : (tensor<2x5x128xf32>, tensor<2x6x64xf32>, tensor<2x6x64xf32>, tensor<5x6xi1>) -> tensor<2x5x128xf32>
  return
}

// -----

// With position_ids the caches are indexed at global positions and stay
// whole; without, they are laid out [B, S, R/2] like the input.
func.func @rotary_embedding(%x: tensor<2x4x8x16xf32>, %cos: tensor<32x8xf32>, %pos: tensor<2x8xi64>, %bcos: tensor<2x8x8xf32>, %half: tensor<2x8x4xf32>) {
  // expected-remark @below {{([i, j, k, l], [1, 1], [1, 1], [i, k]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=16 need_replication}}}
  %0 = nn.rotary_embedding %x, %cos, %cos, %pos : (tensor<2x4x8x16xf32>, tensor<32x8xf32>, tensor<32x8xf32>, tensor<2x8xi64>) -> tensor<2x4x8x16xf32>
  // expected-remark @below {{([i, j, k, l], [i, k, 1], [i, k, 1]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=16 need_replication}}}
  %1 = nn.rotary_embedding %x, %bcos, %bcos {interleaved = true} : (tensor<2x4x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x4x8x16xf32>
  // expected-remark @below {{([i, j, k, l], [i, k, 1], [i, k, 1]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=16 need_replication}}}
  %2 = nn.rotary_embedding %x, %half, %half {rotary_embedding_dim = 8 : i64} : (tensor<2x4x8x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x4x8x16xf32>
  return
}

// -----

// 3-D [B, S, H * D]: the hidden dim is the compound (H, D).
func.func @rotary_embedding_3d(%x: tensor<2x8x64xf32>, %cos: tensor<2x8x8xf32>, %table: tensor<32x8xf32>, %pos: tensor<2x8xi32>) {
  // expected-remark @below {{([i, j, k*l], [i, j, 1], [i, j, 1]) -> ([i, j, k*l]) {i=2, j=8, k=4, l=16 need_replication}}}
  %0 = nn.rotary_embedding %x, %cos, %cos {num_heads = 4 : i64} : (tensor<2x8x64xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x64xf32>
  // expected-remark @below {{([i, j, k*l], [1, 1], [1, 1], [i, j]) -> ([i, j, k*l]) {i=2, j=8, k=4, l=16 need_replication}}}
  %1 = nn.rotary_embedding %x, %table, %table, %pos {num_heads = 4 : i64} : (tensor<2x8x64xf32>, tensor<32x8xf32>, tensor<32x8xf32>, tensor<2x8xi32>) -> tensor<2x8x64xf32>
  return
}
