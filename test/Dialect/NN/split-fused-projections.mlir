// RUN: shard-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(nn-split-fused-projections))' | FileCheck %s
// RUN: shard-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(nn-split-fused-projections{attention-in-place=false}))' | FileCheck %s --check-prefix=NOPACK

// A fused QKV projection (weight [K, 3N], bias [3N]) split along its last
// dimension: one matmul and bias add per piece, on column slices of the
// weight and of the bias; the split is gone.
// CHECK-LABEL: func.func @fused_qkv
// CHECK-NOT: nn.split
// CHECK: %[[W0:.*]] = nn.weight "qkv.w" {file = "m.data", global_shape = array<i64: 8, 12>, offset = 0 : i64, size = 384 : i64, starts = [array<i64: 0, 0>], storage = "external"} : tensor<8x4xf32>
// CHECK: %[[B0:.*]] = nn.weight "qkv.b" {{.*}}global_shape = array<i64: 12>{{.*}}starts = [array<i64: 0>]{{.*}} : tensor<4xf32>
// CHECK: %[[M0:.*]] = nn.matmul %arg0, %[[W0]]
// CHECK: %[[A0:.*]] = nn.add %[[M0]], %[[B0]]
// CHECK: nn.weight "qkv.w" {{.*}}starts = [array<i64: 0, 4>]
// CHECK: nn.weight "qkv.w" {{.*}}starts = [array<i64: 0, 8>]
// CHECK: return %[[A0]]
func.func @fused_qkv(%x: tensor<2x3x8xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %w = nn.weight "qkv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 384 : i64} : tensor<8x12xf32>
  %b = nn.weight "qkv.b" {storage = "external", file = "m.data", offset = 384 : i64, size = 48 : i64} : tensor<12xf32>
  %m = nn.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x12xf32>) -> tensor<2x3x12xf32>
  %a = nn.add %m, %b : (tensor<2x3x12xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  %q, %k, %v = nn.split %a {axis = 2 : i64, sizes = array<i64: 4, 4, 4>} : (tensor<2x3x12xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  return %q, %k, %v : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// -----

// Mixed precision (weight behind a cast) and a constant bias of uneven pieces.
// CHECK-LABEL: func.func @cast_and_constant
// CHECK-NOT: nn.split
// CHECK: %[[W:.*]] = nn.weight "w" {{.*}} : tensor<8x2xf32>
// CHECK: nn.cast %[[W]] {to = bf16}
// CHECK: nn.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xbf16>
// CHECK: nn.constant dense<[3.000000e+00, 4.000000e+00, 5.000000e+00]> : tensor<3xbf16>
func.func @cast_and_constant(%x: tensor<3x8xbf16>) -> (tensor<3x2xbf16>, tensor<3x3xbf16>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 160 : i64} : tensor<8x5xf32>
  %wc = nn.cast %w {to = bf16} : (tensor<8x5xf32>) -> tensor<8x5xbf16>
  %b = nn.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xbf16>
  %m = nn.matmul %x, %wc : (tensor<3x8xbf16>, tensor<8x5xbf16>) -> tensor<3x5xbf16>
  %a = nn.add %b, %m : (tensor<5xbf16>, tensor<3x5xbf16>) -> tensor<3x5xbf16>
  %p, %q = nn.split %a {axis = 1 : i64, sizes = array<i64: 2, 3>} : (tensor<3x5xbf16>) -> (tensor<3x2xbf16>, tensor<3x3xbf16>)
  return %p, %q : tensor<3x2xbf16>, tensor<3x3xbf16>
}

// -----

// The product is read elsewhere too, or the split is not along the last
// dimension: nothing changes.
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-2: nn.split
func.func @left_alone(%x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %p, %q = nn.split %m {axis = 1 : i64, sizes = array<i64: 4, 4>} : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m2 = nn.matmul %x, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r, %s = nn.split %m2 {axis = 0 : i64, sizes = array<i64: 2, 2>} : (tensor<4x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>)
  return %p, %q, %m, %r, %s : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// In a program with a mesh the pieces' weight slices carry one start per
// rank: a replicated weight gets the same start on both ranks.
// CHECK-LABEL: func.func @replicated_on_a_mesh
// CHECK-NOT: nn.split
// CHECK: nn.weight "w" {{.*}}global_shape = array<i64: 8, 8>{{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 0>]{{.*}} : tensor<8x4xf32>
// CHECK: nn.weight "w" {{.*}}global_shape = array<i64: 8, 8>{{.*}}starts = [array<i64: 0, 4>, array<i64: 0, 4>]{{.*}} : tensor<8x4xf32>
dist.mesh @mesh ["tp" = 2]
func.func @replicated_on_a_mesh(%x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %p, %q = nn.split %m {axis = 1 : i64, sizes = array<i64: 4, 4>} : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  return %p, %q : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// The megatron presets' form on dp=2, tp=2: the fused weight [8, 3, 8]
// sharded by heads into [8, 3, 4], an einsum, a bias reshaped to [3, 8]
// and sliced per rank, a split into pieces of 1 along the "3" axis and a
// squeeze of each. Piece i reads columns i*8 + 4*t .. +4 of the weight
// viewed as [8, 24] (t: the rank's tp index), and the same range of the
// bias; behind a cast for mixed precision.
// CHECK-LABEL: func.func @megatron_heads
// CHECK-NOT: nn.split
// CHECK-NOT: nn.einsum
// CHECK-NOT: nn.squeeze
// CHECK-NOT: dist.all_slice
// CHECK: %[[W0:.*]] = nn.weight "qkv.w" {{.*}}global_shape = array<i64: 8, 24>{{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 4>, array<i64: 0, 0>, array<i64: 0, 4>]{{.*}} : tensor<8x4xf32>
// CHECK: %[[C0:.*]] = nn.cast %[[W0]] {to = bf16}
// CHECK: %[[B0:.*]] = nn.weight "qkv.b" {{.*}}global_shape = array<i64: 24>{{.*}}starts = [array<i64: 0>, array<i64: 4>, array<i64: 0>, array<i64: 4>]{{.*}} : tensor<4xbf16>
// CHECK: %[[M0:.*]] = nn.matmul %arg0, %[[C0]] : (tensor<2x3x8xbf16>, tensor<8x4xbf16>) -> tensor<2x3x4xbf16>
// CHECK: %[[A0:.*]] = nn.add %[[M0]], %[[B0]]
// CHECK: nn.weight "qkv.w" {{.*}}starts = [array<i64: 0, 8>, array<i64: 0, 12>, array<i64: 0, 8>, array<i64: 0, 12>]
// CHECK: nn.weight "qkv.b" {{.*}}starts = [array<i64: 8>, array<i64: 12>, array<i64: 8>, array<i64: 12>]
// CHECK: nn.weight "qkv.w" {{.*}}starts = [array<i64: 0, 16>, array<i64: 0, 20>, array<i64: 0, 16>, array<i64: 0, 20>]
// CHECK: nn.weight "qkv.b" {{.*}}starts = [array<i64: 16>, array<i64: 20>, array<i64: 16>, array<i64: 20>]
// CHECK: return %[[A0]]
dist.mesh @mesh ["dp" = 2, "tp" = 2]
func.func @megatron_heads(%x: tensor<2x3x8xbf16>) -> (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>, tensor<2x3x4xbf16>) {
  %w = nn.weight "qkv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 768 : i64, global_shape = array<i64: 8, 3, 8>, starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 4>, array<i64: 0, 0, 0>, array<i64: 0, 0, 4>]} : tensor<8x3x4xf32>
  %wc = nn.cast %w {to = bf16} : (tensor<8x3x4xf32>) -> tensor<8x3x4xbf16>
  %b = nn.weight "qkv.b" {storage = "external", file = "m.data", offset = 768 : i64, size = 48 : i64} : tensor<24xbf16>
  %e = nn.einsum %x, %wc {equation = "...a,abc->...bc"} : (tensor<2x3x8xbf16>, tensor<8x3x4xbf16>) -> tensor<2x3x3x4xbf16>
  %br = nn.reshape %b : (tensor<24xbf16>) -> tensor<3x8xbf16>
  %bs = dist.all_slice %br on @mesh ["tp"] {dim = 1 : i64} : tensor<3x8xbf16> -> tensor<3x4xbf16>
  %a = nn.add %e, %bs : (tensor<2x3x3x4xbf16>, tensor<3x4xbf16>) -> tensor<2x3x3x4xbf16>
  %s:3 = nn.split %a {axis = 2 : i64, sizes = array<i64: 1, 1, 1>} : (tensor<2x3x3x4xbf16>) -> (tensor<2x3x1x4xbf16>, tensor<2x3x1x4xbf16>, tensor<2x3x1x4xbf16>)
  %q = nn.squeeze %s#0 {axes = array<i64: 2>} : (tensor<2x3x1x4xbf16>) -> tensor<2x3x4xbf16>
  %k = nn.squeeze %s#1 {axes = array<i64: 2>} : (tensor<2x3x1x4xbf16>) -> tensor<2x3x4xbf16>
  %v = nn.squeeze %s#2 {axes = array<i64: -2>} : (tensor<2x3x1x4xbf16>) -> tensor<2x3x4xbf16>
  return %q, %k, %v : tensor<2x3x4xbf16>, tensor<2x3x4xbf16>, tensor<2x3x4xbf16>
}

// -----

// A small bias embedded as a constant cannot differ per rank: each piece
// keeps an all_slice of its row of the constant.
// CHECK-LABEL: func.func @megatron_constant_bias
// CHECK-NOT: nn.split
// CHECK: nn.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<4xf32>
// CHECK: dist.all_slice {{.*}} : tensor<1x4xf32> -> tensor<1x2xf32>
// CHECK: nn.constant dense<[4.000000e+00, 5.000000e+00, 6.000000e+00, 7.000000e+00]> : tensor<4xf32>
dist.mesh @mesh ["tp" = 2]
func.func @megatron_constant_bias(%x: tensor<3x8xf32>) -> (tensor<3x2xf32>, tensor<3x2xf32>) {
  %w = nn.weight "kv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64, global_shape = array<i64: 8, 2, 4>, starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 2>]} : tensor<8x2x2xf32>
  %b = nn.constant dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]> : tensor<8xf32>
  %e = nn.einsum %x, %w {equation = "...a,abc->...bc"} : (tensor<3x8xf32>, tensor<8x2x2xf32>) -> tensor<3x2x2xf32>
  %br = nn.reshape %b : (tensor<8xf32>) -> tensor<2x4xf32>
  %bs = dist.all_slice %br on @mesh ["tp"] {dim = 1 : i64} : tensor<2x4xf32> -> tensor<2x2xf32>
  %a = nn.add %bs, %e : (tensor<2x2xf32>, tensor<3x2x2xf32>) -> tensor<3x2x2xf32>
  %s:2 = nn.split %a {axis = 1 : i64, sizes = array<i64: 1, 1>} : (tensor<3x2x2xf32>) -> (tensor<3x1x2xf32>, tensor<3x1x2xf32>)
  %k = nn.squeeze %s#0 {axes = array<i64: 1>} : (tensor<3x1x2xf32>) -> tensor<3x2xf32>
  %v = nn.squeeze %s#1 {axes = array<i64: 1>} : (tensor<3x1x2xf32>) -> tensor<3x2xf32>
  return %k, %v : tensor<3x2xf32>, tensor<3x2xf32>
}

// -----

// A piece read by something other than a squeeze of the split axis: the
// split stays.
// CHECK-LABEL: func.func @heads_left_alone
// CHECK: nn.split
dist.mesh @mesh ["tp" = 2]
func.func @heads_left_alone(%x: tensor<3x8xf32>) -> (tensor<3x1x2xf32>, tensor<3x2xf32>) {
  %w = nn.weight "kv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64, global_shape = array<i64: 8, 2, 4>, starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 2>]} : tensor<8x2x2xf32>
  %e = nn.einsum %x, %w {equation = "...a,abc->...bc"} : (tensor<3x8xf32>, tensor<8x2x2xf32>) -> tensor<3x2x2xf32>
  %s:2 = nn.split %e {axis = 1 : i64, sizes = array<i64: 1, 1>} : (tensor<3x2x2xf32>) -> (tensor<3x1x2xf32>, tensor<3x1x2xf32>)
  %v = nn.squeeze %s#1 {axes = array<i64: 1>} : (tensor<3x1x2xf32>) -> tensor<3x2xf32>
  return %s#0, %v : tensor<3x1x2xf32>, tensor<3x2xf32>
}

// -----

// A program with two meshes (whose start tables would be ambiguous): the
// split stays.
// CHECK-LABEL: func.func @two_meshes
// CHECK: nn.split
dist.mesh @mesh ["tp" = 2]
dist.mesh @other ["dp" = 2]
func.func @two_meshes(%x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %p, %q = nn.split %m {axis = 1 : i64, sizes = array<i64: 4, 4>} : (tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  return %p, %q : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// The pieces are exactly the query, key and value of one 3-D attention
// (grouped-query: 4 query heads, 2 key/value heads of 2): the split stays,
// so one matmul computes all three (the CUDA attention reads them in the
// fused result).
// CHECK-LABEL: func.func @qkv_of_one_attention
// CHECK: nn.matmul %arg0, %{{.*}} : (tensor<2x3x8xf32>, tensor<8x16xf32>)
// CHECK: %[[P:.*]]:3 = nn.split
// CHECK: nn.attention %[[P]]#0, %[[P]]#1, %[[P]]#2
// CHECK-NOT: nn.matmul
func.func @qkv_of_one_attention(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %w = nn.weight "qkv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 512 : i64} : tensor<8x16xf32>
  %m = nn.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
  %q, %k, %v = nn.split %m {axis = 2 : i64, sizes = array<i64: 8, 4, 4>} : (tensor<2x3x16xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  %y = nn.attention %q, %k, %v {q_num_heads = 4 : i64, kv_num_heads = 2 : i64} : (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// Pieces in another order (key first), or a piece also read elsewhere: one
// matmul per piece as before.
// CHECK-LABEL: func.func @not_in_place
// CHECK-NOT: nn.split
// CHECK-COUNT-3: nn.matmul
func.func @not_in_place(%x: tensor<2x3x8xf32>) -> tensor<2x3x4xf32> {
  %w = nn.weight "qkv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 384 : i64} : tensor<8x12xf32>
  %m = nn.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x12xf32>) -> tensor<2x3x12xf32>
  %q, %k, %v = nn.split %m {axis = 2 : i64, sizes = array<i64: 4, 4, 4>} : (tensor<2x3x12xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  %y = nn.attention %k, %q, %v {q_num_heads = 2 : i64, kv_num_heads = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}

// -----

// The megatron form whose squeezed pieces are one attention's query, key
// and value: the rank's [8, 3, 4] weight block is laid out like an [8, 12]
// one (and the [3, 4] bias like a [12] one), so one matmul computes all
// three and the split moves to the last axis, where the CUDA attention
// reads the pieces in place. The bias's all_slice becomes the rank's [3, 4]
// block of the weight read as [3, 8] (loaded, not copied per forward).
// With attention-in-place=false, one matmul per piece as for any other
// reader.
// CHECK-LABEL: func.func @megatron_qkv_of_one_attention
// CHECK-NOT: nn.einsum
// CHECK-NOT: dist.all_slice
// CHECK: %[[WC:.*]] = nn.cast %{{.*}} {to = bf16} : (tensor<8x3x4xf32>) -> tensor<8x3x4xbf16>
// CHECK: %[[WF:.*]] = nn.reshape %[[WC]] : (tensor<8x3x4xbf16>) -> tensor<8x12xbf16>
// CHECK: %[[M:.*]] = nn.matmul %arg0, %[[WF]] : (tensor<2x3x8xbf16>, tensor<8x12xbf16>) -> tensor<2x3x12xbf16>
// CHECK: %[[BS:.*]] = nn.weight "qkv.b" {{.*}}global_shape = array<i64: 3, 8>{{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 4>]{{.*}} : tensor<3x4xbf16>
// CHECK: %[[BF:.*]] = nn.reshape %[[BS]] : (tensor<3x4xbf16>) -> tensor<12xbf16>
// CHECK: %[[A:.*]] = nn.add %[[M]], %[[BF]]
// CHECK: %[[P:.*]]:3 = nn.split %[[A]] {axis = 2 : i64, sizes = array<i64: 4, 4, 4>}
// CHECK-NOT: nn.squeeze
// CHECK: nn.attention %[[P]]#0, %[[P]]#1, %[[P]]#2
// NOPACK-LABEL: func.func @megatron_qkv_of_one_attention
// NOPACK-NOT: nn.split
// NOPACK-COUNT-3: nn.matmul {{.*}} -> tensor<2x3x4xbf16>
// NOPACK: nn.attention
dist.mesh @mesh ["tp" = 2]
func.func @megatron_qkv_of_one_attention(%x: tensor<2x3x8xbf16>) -> tensor<2x3x4xbf16> {
  %w = nn.weight "qkv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 768 : i64, global_shape = array<i64: 8, 3, 8>, starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 4>]} : tensor<8x3x4xf32>
  %wc = nn.cast %w {to = bf16} : (tensor<8x3x4xf32>) -> tensor<8x3x4xbf16>
  %b = nn.weight "qkv.b" {storage = "external", file = "m.data", offset = 768 : i64, size = 48 : i64} : tensor<24xbf16>
  %e = nn.einsum %x, %wc {equation = "...a,abc->...bc"} : (tensor<2x3x8xbf16>, tensor<8x3x4xbf16>) -> tensor<2x3x3x4xbf16>
  %br = nn.reshape %b : (tensor<24xbf16>) -> tensor<3x8xbf16>
  %bs = dist.all_slice %br on @mesh ["tp"] {dim = 1 : i64} : tensor<3x8xbf16> -> tensor<3x4xbf16>
  %a = nn.add %bs, %e : (tensor<3x4xbf16>, tensor<2x3x3x4xbf16>) -> tensor<2x3x3x4xbf16>
  %s:3 = nn.split %a {axis = 2 : i64, sizes = array<i64: 1, 1, 1>} : (tensor<2x3x3x4xbf16>) -> (tensor<2x3x1x4xbf16>, tensor<2x3x1x4xbf16>, tensor<2x3x1x4xbf16>)
  %q = nn.squeeze %s#0 {axes = array<i64: 2>} : (tensor<2x3x1x4xbf16>) -> tensor<2x3x4xbf16>
  %k = nn.squeeze %s#1 {axes = array<i64: -2>} : (tensor<2x3x1x4xbf16>) -> tensor<2x3x4xbf16>
  %v = nn.squeeze %s#2 {axes = array<i64: 2>} : (tensor<2x3x1x4xbf16>) -> tensor<2x3x4xbf16>
  %y = nn.attention %q, %k, %v {q_num_heads = 2 : i64, kv_num_heads = 2 : i64} : (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>, tensor<2x3x4xbf16>) -> tensor<2x3x4xbf16>
  return %y : tensor<2x3x4xbf16>
}

// -----

// The squeezed pieces in another order (value and key swapped): one matmul
// per piece.
// CHECK-LABEL: func.func @megatron_qkv_swapped
// CHECK-NOT: nn.split
// CHECK-COUNT-3: nn.matmul
dist.mesh @mesh ["tp" = 2]
func.func @megatron_qkv_swapped(%x: tensor<2x3x8xf32>) -> tensor<2x3x4xf32> {
  %w = nn.weight "qkv.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 768 : i64, global_shape = array<i64: 8, 3, 8>, starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 4>]} : tensor<8x3x4xf32>
  %e = nn.einsum %x, %w {equation = "...a,abc->...bc"} : (tensor<2x3x8xf32>, tensor<8x3x4xf32>) -> tensor<2x3x3x4xf32>
  %s:3 = nn.split %e {axis = 2 : i64, sizes = array<i64: 1, 1, 1>} : (tensor<2x3x3x4xf32>) -> (tensor<2x3x1x4xf32>, tensor<2x3x1x4xf32>, tensor<2x3x1x4xf32>)
  %q = nn.squeeze %s#0 {axes = array<i64: 2>} : (tensor<2x3x1x4xf32>) -> tensor<2x3x4xf32>
  %k = nn.squeeze %s#1 {axes = array<i64: 2>} : (tensor<2x3x1x4xf32>) -> tensor<2x3x4xf32>
  %v = nn.squeeze %s#2 {axes = array<i64: 2>} : (tensor<2x3x1x4xf32>) -> tensor<2x3x4xf32>
  %y = nn.attention %q, %v, %k {q_num_heads = 2 : i64, kv_num_heads = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}
