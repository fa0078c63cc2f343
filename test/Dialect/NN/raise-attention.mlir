// RUN: shard-opt %s -split-input-file -nn-raise-attention | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-raise-attention=explain=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// GPT-2: K^T from the exporter's transpose, division by sqrt(D), a causal
// mask built by trilu on a constant and cast to bool, fill = f32 lowest.
// CHECK-LABEL: func.func @gpt2_causal
// CHECK: %[[K:.*]] = nn.transpose %arg1 {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[A:.*]] = nn.attention %arg0, %[[K]], %arg2 {is_causal = true, scale = 2.500000e-01 : f32}
// CHECK-SAME: -> tensor<1x2x4x16xf32>
// CHECK-NOT: nn.softmax
// CHECK-NOT: nn.matmul
// CHECK-NOT: nn.trilu
// CHECK: return %[[A]]
// EXPLAIN: remark: raised to nn.attention: scale 2.500000e-01, causal
func.func @gpt2_causal(%q: tensor<1x2x4x16xf32>, %kr: tensor<1x4x2x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32> {
  %ones = nn.constant dense<1.0> : tensor<4x4xf32>
  %tri = nn.trilu %ones {upper = false} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %mask = nn.cast %tri {to = i1} : (tensor<4x4xf32>) -> tensor<4x4xi1>
  %fill = nn.constant dense<-3.40282347E+38> : tensor<f32>
  %c = nn.constant dense<4.0> : tensor<f32>
  %kt = nn.transpose %kr {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x2x16xf32>) -> tensor<1x2x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %d = nn.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %m = nn.where %mask, %d, %fill : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// A stored boolean lower triangle, K^T as transpose(K, [0, 1, 3, 2]): the
// key is K itself; the scale multiplies from the left.
// CHECK-LABEL: func.func @constant_causal
// CHECK-NOT: nn.transpose
// CHECK: nn.attention %arg0, %arg1, %arg2 {is_causal = true, scale = 1.250000e-01 : f32}
// CHECK-NOT: nn.softmax
func.func @constant_causal(%q: tensor<2x2x3x4xf32>, %k: tensor<2x2x3x4xf32>, %v: tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32> {
  %mask = nn.constant dense<[[[[true, false, false], [true, true, false], [true, true, true]]]]> : tensor<1x1x3x3xi1>
  %fill = nn.constant dense<0xFF800000> : tensor<f32>
  %c = nn.constant dense<0.125> : tensor<1xf32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x3x4xf32>) -> tensor<2x2x4x3xf32>
  %s = nn.matmul %q, %kt : (tensor<2x2x3x4xf32>, tensor<2x2x4x3xf32>) -> tensor<2x2x3x3xf32>
  %d = nn.mul %c, %s : (tensor<1xf32>, tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %m = nn.where %mask, %d, %fill : (tensor<1x1x3x3xi1>, tensor<2x2x3x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %o = nn.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32>
  return %o : tensor<2x2x3x4xf32>
}

// -----

// masked_fill: where(drop, -inf, s) with drop = triu(ones, k = 1), and K
// given pre-transposed ([B, H, D, S]): the key is its transpose.
// CHECK-LABEL: func.func @masked_fill_causal
// CHECK: %[[K:.*]] = nn.transpose %arg1 {perm = array<i64: 0, 1, 3, 2>}
// CHECK: nn.attention %arg0, %[[K]], %arg2 {is_causal = true, scale = 1.000000e+00 : f32}
func.func @masked_fill_causal(%q: tensor<1x1x4x8xf32>, %kt: tensor<1x1x8x4xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %ones = nn.constant dense<1> : tensor<4x4xi64>
  %tri = nn.trilu %ones {upper = true, k = 1 : i64} : (tensor<4x4xi64>) -> tensor<4x4xi64>
  %drop = nn.cast %tri {to = i1} : (tensor<4x4xi64>) -> tensor<4x4xi1>
  %fill = nn.constant dense<0xFF800000> : tensor<f32>
  %s = nn.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %m = nn.where %drop, %fill, %s : (tensor<4x4xi1>, tensor<f32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// An additive causal mask: 0 on and below the diagonal, -inf above.
// CHECK-LABEL: func.func @additive_causal
// CHECK: nn.attention %arg0, %arg1, %arg2 {is_causal = true, scale = 5.000000e-01 : f32}
// CHECK-NOT: nn.add
func.func @additive_causal(%q: tensor<1x1x3x4xf32>, %k: tensor<1x1x3x4xf32>, %v: tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32> {
  %bias = nn.constant dense<[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>
  %c = nn.constant dense<2.0> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x3x4xf32>) -> tensor<1x1x4x3xf32>
  %s = nn.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %d = nn.div %s, %c : (tensor<1x1x3x3xf32>, tensor<f32>) -> tensor<1x1x3x3xf32>
  %m = nn.add %d, %bias : (tensor<1x1x3x3xf32>, tensor<3x3xf32>) -> tensor<1x1x3x3xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// BERT: an additive mask computed from an input, [B, 1, 1, S], becomes the
// float mask operand; an inference dropout after the softmax goes too.
// CHECK-LABEL: func.func @bert_padding_mask
// CHECK: %[[M:.*]] = nn.mul
// CHECK: nn.attention %arg0, %arg1, %arg2, %[[M]] {scale = 2.500000e-01 : f32}
// CHECK-NOT: nn.dropout
func.func @bert_padding_mask(%q: tensor<2x2x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %am: tensor<2x1x1x4xf32>) -> tensor<2x2x4x16xf32> {
  %one = nn.constant dense<1.0> : tensor<f32>
  %big = nn.constant dense<-10000.0> : tensor<f32>
  %inv = nn.sub %one, %am : (tensor<f32>, tensor<2x1x1x4xf32>) -> tensor<2x1x1x4xf32>
  %bias = nn.mul %inv, %big : (tensor<2x1x1x4xf32>, tensor<f32>) -> tensor<2x1x1x4xf32>
  %c = nn.constant dense<4.0> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x4x16xf32>) -> tensor<2x2x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<2x2x4x16xf32>, tensor<2x2x16x4xf32>) -> tensor<2x2x4x4xf32>
  %d = nn.div %s, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %m = nn.add %d, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %r = nn.dropout %p {ratio = 1.000000e-01 : f32} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = nn.matmul %r, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  return %o : tensor<2x2x4x16xf32>
}

// -----

// T5 as the dynamo exporter writes it: no scale, K^T by one transpose of
// [B, S, H, D], the position bias [1, H, S, S] added, then the padding
// mask [B, 1, S, S]: the float mask is their sum.
// CHECK-LABEL: func.func @two_additive_terms
// CHECK: %[[K:.*]] = nn.transpose %arg1 {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[M:.*]] = nn.add %arg3, %arg4 : (tensor<1x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
// CHECK: nn.attention %arg0, %[[K]], %arg2, %[[M]] {scale = 1.000000e+00 : f32}
// CHECK-NOT: nn.softmax
func.func @two_additive_terms(%q: tensor<2x2x4x16xf32>, %k: tensor<2x4x2x16xf32>, %v: tensor<2x2x4x16xf32>, %pb: tensor<1x2x4x4xf32>, %mask: tensor<2x1x4x4xf32>) -> tensor<2x2x4x16xf32> {
  %kt = nn.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x2x16xf32>) -> tensor<2x2x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<2x2x4x16xf32>, tensor<2x2x16x4xf32>) -> tensor<2x2x4x4xf32>
  %b = nn.add %s, %pb : (tensor<2x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %m = nn.add %b, %mask : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  return %o : tensor<2x2x4x16xf32>
}

// -----

// The mask as the add's first operand, itself a mul: the scores are found
// on the other side.
// CHECK-LABEL: func.func @mask_first
// CHECK: %[[M:.*]] = nn.mul %arg3
// CHECK: nn.attention %arg0, %arg1, %arg2, %[[M]] {scale = 1.250000e-01 : f32}
func.func @mask_first(%q: tensor<2x2x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %am: tensor<2x1x1x4xf32>) -> tensor<2x2x4x16xf32> {
  %big = nn.constant dense<-10000.0> : tensor<f32>
  %bias = nn.mul %am, %big : (tensor<2x1x1x4xf32>, tensor<f32>) -> tensor<2x1x1x4xf32>
  %c = nn.constant dense<0.125> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x4x16xf32>) -> tensor<2x2x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<2x2x4x16xf32>, tensor<2x2x16x4xf32>) -> tensor<2x2x4x4xf32>
  %d = nn.mul %s, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %m = nn.add %bias, %d : (tensor<2x1x1x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  return %o : tensor<2x2x4x16xf32>
}

// -----

// A boolean mask input with fill -inf is the boolean mask operand; with a
// finite fill it becomes the additive mask where(keep, 0, fill), which
// treats a fully masked row as the original chain does.
// CHECK-LABEL: func.func @bool_mask_input
// CHECK: nn.attention %arg0, %arg1, %arg2, %arg3 {scale = 1.000000e+00 : f32} : {{.*}}tensor<2x1x1x4xi1>
// CHECK-LABEL: func.func @bool_mask_lowest_fill
// CHECK-DAG: %[[FILL:.*]] = nn.constant dense<-3.40282347E+38> : tensor<f32>
// CHECK-DAG: %[[ZERO:.*]] = nn.constant dense<0.000000e+00> : tensor<f32>
// CHECK: %[[M:.*]] = nn.where %arg3, %[[ZERO]], %[[FILL]] : (tensor<2x1x1x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x4xf32>
// CHECK: nn.attention %arg0, %arg1, %arg2, %[[M]] {scale = 1.000000e+00 : f32}
func.func @bool_mask_input(%q: tensor<2x1x4x8xf32>, %k: tensor<2x1x4x8xf32>, %v: tensor<2x1x4x8xf32>, %keep: tensor<2x1x1x4xi1>) -> tensor<2x1x4x8xf32> {
  %fill = nn.constant dense<0xFF800000> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x1x4x8xf32>) -> tensor<2x1x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<2x1x4x8xf32>, tensor<2x1x8x4xf32>) -> tensor<2x1x4x4xf32>
  %m = nn.where %keep, %s, %fill : (tensor<2x1x1x4xi1>, tensor<2x1x4x4xf32>, tensor<f32>) -> tensor<2x1x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<2x1x4x4xf32>) -> tensor<2x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<2x1x4x4xf32>, tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  return %o : tensor<2x1x4x8xf32>
}
func.func @bool_mask_lowest_fill(%q: tensor<2x1x4x8xf32>, %k: tensor<2x1x4x8xf32>, %v: tensor<2x1x4x8xf32>, %keep: tensor<2x1x1x4xi1>) -> tensor<2x1x4x8xf32> {
  %fill = nn.constant dense<-3.40282347E+38> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x1x4x8xf32>) -> tensor<2x1x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<2x1x4x8xf32>, tensor<2x1x8x4xf32>) -> tensor<2x1x4x4xf32>
  %m = nn.where %keep, %s, %fill : (tensor<2x1x1x4xi1>, tensor<2x1x4x4xf32>, tensor<f32>) -> tensor<2x1x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<2x1x4x4xf32>) -> tensor<2x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<2x1x4x4xf32>, tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  return %o : tensor<2x1x4x8xf32>
}

// -----

// Grouped-query attention: K and V have 2 heads, repeated to the query's
// 4 (repeat_kv: unsqueeze, expand, reshape); the repeats disappear.
// CHECK-LABEL: func.func @grouped_query
// CHECK-NOT: nn.expand
// CHECK: nn.attention %arg0, %arg1, %arg2 {is_causal = true, scale = 0.353553385 : f32} : (tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x4x4x8xf32>
// CHECK-NOT: nn.expand
// EXPLAIN: remark: raised to nn.attention: scale 3.535534e-01, causal, 2 query heads per key/value head
func.func @grouped_query(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x4x4x8xf32> {
  %k1 = nn.unsqueeze %k {axes = array<i64: 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x1x4x8xf32>
  %k2 = nn.expand %k1 : (tensor<1x2x1x4x8xf32>) -> tensor<1x2x2x4x8xf32>
  %k3 = nn.reshape %k2 : (tensor<1x2x2x4x8xf32>) -> tensor<1x4x4x8xf32>
  %v1 = nn.unsqueeze %v {axes = array<i64: 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x1x4x8xf32>
  %v2 = nn.expand %v1 : (tensor<1x2x1x4x8xf32>) -> tensor<1x2x2x4x8xf32>
  %v3 = nn.reshape %v2 : (tensor<1x2x2x4x8xf32>) -> tensor<1x4x4x8xf32>
  %ones = nn.constant dense<true> : tensor<4x4xi1>
  %mask = nn.trilu %ones {upper = false} : (tensor<4x4xi1>) -> tensor<4x4xi1>
  %fill = nn.constant dense<0xFF800000> : tensor<f32>
  %c = nn.constant dense<0.353553385> : tensor<f32>
  %kt = nn.transpose %k3 {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x4x8xf32>) -> tensor<1x4x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x4x4x8xf32>, tensor<1x4x8x4xf32>) -> tensor<1x4x4x4xf32>
  %d = nn.mul %s, %c : (tensor<1x4x4x4xf32>, tensor<f32>) -> tensor<1x4x4x4xf32>
  %m = nn.where %mask, %d, %fill : (tensor<4x4xi1>, tensor<1x4x4x4xf32>, tensor<f32>) -> tensor<1x4x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %o = nn.matmul %p, %v3 : (tensor<1x4x4x4xf32>, tensor<1x4x4x8xf32>) -> tensor<1x4x4x8xf32>
  return %o : tensor<1x4x4x8xf32>
}

// -----

// Soft-capping (Gemma 2): cap * tanh(scores / cap) after the scale.
// CHECK-LABEL: func.func @softcap
// CHECK: nn.attention %arg0, %arg1, %arg2 {scale = 2.500000e-01 : f32, softcap = 3.000000e+01 : f32}
// CHECK-NOT: nn.tanh
func.func @softcap(%q: tensor<1x1x4x16xf32>, %k: tensor<1x1x4x16xf32>, %v: tensor<1x1x4x16xf32>) -> tensor<1x1x4x16xf32> {
  %c = nn.constant dense<0.25> : tensor<f32>
  %cap = nn.constant dense<30.0> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4x16xf32>) -> tensor<1x1x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x1x4x16xf32>, tensor<1x1x16x4xf32>) -> tensor<1x1x4x4xf32>
  %d = nn.mul %s, %c : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %x = nn.div %d, %cap : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %t = nn.tanh %x : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %y = nn.mul %t, %cap : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %p = nn.softmax %y {axis = 3 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x16xf32>) -> tensor<1x1x4x16xf32>
  return %o : tensor<1x1x4x16xf32>
}

// -----

// Negative: a per-head scale is not a splat constant.
// CHECK-LABEL: func.func @wrong_scale
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
// EXPLAIN: remark: not raised to nn.attention: the scores are scaled by a value that is not a splat constant
func.func @wrong_scale(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %c = nn.constant dense<[[[[0.5]], [[0.25]]]]> : tensor<1x2x1x1xf32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %d = nn.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<1x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %d {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative for causality: trilu with k = 1 also keeps the first
// superdiagonal. It is not causal, so the constant stays a boolean mask.
// CHECK-LABEL: func.func @not_causal_constant
// CHECK: %[[MASK:.*]] = nn.trilu
// CHECK: nn.attention %arg0, %arg1, %arg2, %[[MASK]] {scale = 1.000000e+00 : f32}
// CHECK-NOT: is_causal
func.func @not_causal_constant(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %ones = nn.constant dense<true> : tensor<4x4xi1>
  %mask = nn.trilu %ones {upper = false, k = 1 : i64} : (tensor<4x4xi1>) -> tensor<4x4xi1>
  %fill = nn.constant dense<0xFF800000> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4x8xf32>) -> tensor<1x1x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %m = nn.where %mask, %s, %fill : (tensor<4x4xi1>, tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Negative: a where-mask filling -1e4 is not exact as nn.attention (a
// masked score would not vanish in a fully masked row): not raised.
// CHECK-LABEL: func.func @finite_fill
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
// EXPLAIN: remark: not raised to nn.attention: the where-mask fills -1.000000e+04, which is neither -inf nor at most -1e30
func.func @finite_fill(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %ones = nn.constant dense<true> : tensor<4x4xi1>
  %mask = nn.trilu %ones {upper = false} : (tensor<4x4xi1>) -> tensor<4x4xi1>
  %fill = nn.constant dense<-10000.0> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4x8xf32>) -> tensor<1x1x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %m = nn.where %mask, %s, %fill : (tensor<4x4xi1>, tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Negative: the scaled scores are also returned.
// CHECK-LABEL: func.func @extra_user
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
// EXPLAIN: remark: not raised to nn.attention: the softmax's input has other users
func.func @extra_user(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>) {
  %c = nn.constant dense<0.5> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4x8xf32>) -> tensor<1x1x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %d = nn.mul %s, %c : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %p = nn.softmax %d {axis = 3 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o, %d : tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>
}

// -----

// Negative: the raw scores feed a second consumer before the scale.
// CHECK-LABEL: func.func @extra_user_of_scores
// CHECK-NOT: nn.attention
// EXPLAIN: remark: not raised to nn.attention: the scores matmul has other users
func.func @extra_user_of_scores(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>) {
  %c = nn.constant dense<0.5> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4x8xf32>) -> tensor<1x1x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %d = nn.mul %s, %c : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %p = nn.softmax %d {axis = 3 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %e = nn.exp %s : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  return %o, %e : tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>
}

// -----

// Negative: softmax over the query axis.
// CHECK-LABEL: func.func @softmax_other_axis
// CHECK-NOT: nn.attention
// CHECK: nn.softmax {{.*}}axis = 2
// EXPLAIN: remark: not raised to nn.attention: the softmax is not over the last axis (the keys)
func.func @softmax_other_axis(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4x8xf32>) -> tensor<1x1x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x4x4xf32>
  %p = nn.softmax %s {axis = 2 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Negative: K repeated per group but V not: no grouped-query form, and the
// repeated key's 4 heads are used as they are.
// CHECK-LABEL: func.func @only_key_repeated
// CHECK: nn.expand
// CHECK: nn.attention {{.*}} : (tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>)
func.func @only_key_repeated(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x4x4x8xf32>) -> tensor<1x4x4x8xf32> {
  %k1 = nn.unsqueeze %k {axes = array<i64: 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x1x4x8xf32>
  %k2 = nn.expand %k1 : (tensor<1x2x1x4x8xf32>) -> tensor<1x2x2x4x8xf32>
  %k3 = nn.reshape %k2 : (tensor<1x2x2x4x8xf32>) -> tensor<1x4x4x8xf32>
  %kt = nn.transpose %k3 {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x4x8xf32>) -> tensor<1x4x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x4x4x8xf32>, tensor<1x4x8x4xf32>) -> tensor<1x4x4x4xf32>
  %p = nn.softmax %s {axis = 3 : i64} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x4x4x4xf32>, tensor<1x4x4x8xf32>) -> tensor<1x4x4x8xf32>
  return %o : tensor<1x4x4x8xf32>
}

// -----

// Negative: one query head broadcast against two key heads has no
// nn.attention form (query heads must be a multiple of key heads).
// CHECK-LABEL: func.func @query_broadcasts_heads
// CHECK-NOT: nn.attention
// EXPLAIN: remark: not raised to nn.attention: the query broadcasts its batch or heads against the key
func.func @query_broadcasts_heads(%q: tensor<1x1x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x1x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// PyTorch's scaled_dot_product_attention as both exporters write it: Q and
// K^T each scaled by the square root of the scale (here 1/sqrt(sqrt(16)) =
// 0.5 each, 0.25 in all), a data-dependent additive mask where(keep, 0,
// -inf), and the NaN guard where(isnan(p), 0, p) after the softmax, isnan
// imported as not(equal(p, p)). A NaN leaves the softmax only for a fully
// masked row, which nn.attention makes zeros: the guard is its semantics.
// CHECK-LABEL: func.func @sdpa_export
// CHECK: %[[M:.*]] = nn.where %arg3
// CHECK: %[[A:.*]] = nn.attention %arg0, %arg1, %arg2, %[[M]] {scale = 2.500000e-01 : f32}
// CHECK-NOT: nn.softmax
// CHECK-NOT: nn.equal
// CHECK-NOT: nn.not
// CHECK: return %[[A]]
// EXPLAIN: remark: raised to nn.attention: scale 2.500000e-01, float mask
func.func @sdpa_export(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>, %keep: tensor<1x1x4x4xi1>) -> tensor<1x2x4x16xf32> {
  %half = nn.constant dense<0.5> : tensor<f32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %bias = nn.where %keep, %zero, %ninf : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x4x4xf32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %qs = nn.mul %q, %half : (tensor<1x2x4x16xf32>, tensor<f32>) -> tensor<1x2x4x16xf32>
  %ks = nn.mul %kt, %half : (tensor<1x2x16x4xf32>, tensor<f32>) -> tensor<1x2x16x4xf32>
  %s = nn.matmul %qs, %ks : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.add %s, %bias : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %m {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %eq = nn.equal %p, %p : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xi1>
  %nan = nn.not %eq : (tensor<1x2x4x4xi1>) -> tensor<1x2x4x4xi1>
  %g = nn.where %nan, %zero, %p : (tensor<1x2x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %g, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// The dynamo exporter's K^T: K [B, H, S, D] reshaped to [B*H, S, D],
// transposed and reshaped to [B, H, D, S]: the key is K itself.
// CHECK-LABEL: func.func @dynamo_key
// CHECK-NOT: nn.transpose
// CHECK: nn.attention %arg0, %arg1, %arg2 {scale = 2.500000e-01 : f32}
// EXPLAIN: remark: raised to nn.attention: scale 2.500000e-01, no mask
func.func @dynamo_key(%q: tensor<2x2x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32> {
  %c = nn.constant dense<0.25> : tensor<f32>
  %k3 = nn.reshape %k : (tensor<2x2x4x16xf32>) -> tensor<4x4x16xf32>
  %t = nn.transpose %k3 {perm = array<i64: 0, 2, 1>} : (tensor<4x4x16xf32>) -> tensor<4x16x4xf32>
  %kt = nn.reshape %t : (tensor<4x16x4xf32>) -> tensor<2x2x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<2x2x4x16xf32>, tensor<2x2x16x4xf32>) -> tensor<2x2x4x4xf32>
  %d = nn.mul %s, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %p = nn.softmax %d {axis = 3 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  return %o : tensor<2x2x4x16xf32>
}

// -----

// A guard that reads something else than the probabilities is not one.
// CHECK-LABEL: func.func @not_a_guard
// CHECK: nn.softmax
// EXPLAIN: remark: not raised to nn.attention: the probabilities are not the left operand of a matmul
func.func @not_a_guard(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>, %other: tensor<1x2x4x4xi1>) -> tensor<1x2x4x16xf32> {
  %zero = nn.constant dense<0.0> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %g = nn.where %other, %zero, %p : (tensor<1x2x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %g, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}
