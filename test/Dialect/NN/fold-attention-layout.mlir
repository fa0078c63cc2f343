// RUN: shard-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(nn-fold-attention-layout))' | FileCheck %s

// Q, K and V split from [B, S, H*D] and transposed to [B, H, S, D]; the
// result transposed back and merged: attention reads and writes the 3-D
// tensors, and the head transposes disappear.
// CHECK-LABEL: func.func @gpt2_heads
// CHECK-NOT: nn.transpose
// CHECK: %[[A:.*]] = nn.attention %arg0, %arg1, %arg2 {is_causal = true, kv_num_heads = 2 : i64, q_num_heads = 4 : i64, scale = 2.500000e-01 : f32} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
// CHECK: %[[V:.*]] = nn.reshape %[[A]] : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>
// CHECK: %[[M:.*]] = nn.reshape %[[V]] : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
// CHECK: return %[[M]]
func.func @gpt2_heads(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) -> tensor<2x8x64xf32> {
  %q4 = nn.reshape %q : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %k4 = nn.reshape %k : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %kt = nn.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %v4 = nn.reshape %v : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %vt = nn.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %a = nn.attention %qt, %kt, %vt {is_causal = true, scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %m = nn.reshape %at : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  return %m : tensor<2x8x64xf32>
}

// -----

// The result is also read in [B, H, S, D] form: nothing changes.
// CHECK-LABEL: func.func @result_used_as_is
// CHECK: nn.transpose
// CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} : (tensor<1x2x4x8xf32>
// CHECK: nn.transpose
func.func @result_used_as_is(%q: tensor<1x4x16xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x2x4x8xf32>) {
  %q4 = nn.reshape %q : (tensor<1x4x16xf32>) -> tensor<1x4x2x8xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
  %a = nn.attention %qt, %qt, %qt : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x8xf32>) -> tensor<1x4x2x8xf32>
  return %at, %a : tensor<1x4x2x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// K comes from another permutation: nothing changes.
// CHECK-LABEL: func.func @other_layout
// CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} : (tensor<1x2x4x8xf32>
func.func @other_layout(%q: tensor<1x4x16xf32>, %k: tensor<1x2x4x8xf32>) -> tensor<1x4x2x8xf32> {
  %q4 = nn.reshape %q : (tensor<1x4x16xf32>) -> tensor<1x4x2x8xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
  %a = nn.attention %qt, %k, %qt : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x8xf32>) -> tensor<1x4x2x8xf32>
  return %at : tensor<1x4x2x8xf32>
}

// -----

// Llama: the rotary embedding between the head transpose and the attention
// is rebuilt in its 3-D form (num_heads), so no transpose is left.
// CHECK-LABEL: func.func @rotary
// CHECK-NOT: nn.transpose
// CHECK: %[[Q:.*]] = nn.rotary_embedding %arg0, %arg3, %arg4, %arg5 {num_heads = 4 : i64} : (tensor<1x8x64xf32>
// CHECK: %[[K:.*]] = nn.rotary_embedding %arg1, %arg3, %arg4, %arg5 {num_heads = 2 : i64} : (tensor<1x8x32xf32>
// CHECK: nn.attention %[[Q]], %[[K]], %arg2 {is_causal = true, kv_num_heads = 2 : i64, q_num_heads = 4 : i64}
// CHECK-NOT: nn.transpose
func.func @rotary(%q: tensor<1x8x64xf32>, %k: tensor<1x8x32xf32>, %v: tensor<1x8x32xf32>, %cos: tensor<16x8xf32>, %sin: tensor<16x8xf32>, %pos: tensor<1x8xi64>) -> tensor<1x8x64xf32> {
  %q4 = nn.reshape %q : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %qr = nn.rotary_embedding %qt, %cos, %sin, %pos : (tensor<1x4x8x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<1x8xi64>) -> tensor<1x4x8x16xf32>
  %k4 = nn.reshape %k : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  %kt = nn.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %kr = nn.rotary_embedding %kt, %cos, %sin, %pos : (tensor<1x2x8x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<1x8xi64>) -> tensor<1x2x8x16xf32>
  %v4 = nn.reshape %v : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  %vt = nn.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %a = nn.attention %qr, %kr, %vt {is_causal = true} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  %m = nn.reshape %at : (tensor<1x8x4x16xf32>) -> tensor<1x8x64xf32>
  return %m : tensor<1x8x64xf32>
}

// -----

// The rotation written out (q * cos + rotate_half(q) * sin, cos and sin
// [B, 1, S, D]) is rebuilt on the [B, S, H, D] split, cos and sin viewed as
// [B, S, 1, D]: the attention reads the 3-D tensors, no transpose is left.
// CHECK-LABEL: func.func @written_rotary
// CHECK-NOT: nn.transpose
// CHECK: %[[Q4:.*]] = nn.reshape %arg0 : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
// CHECK: %[[C:.*]] = nn.reshape %arg3 : (tensor<1x1x8x16xf32>) -> tensor<1x8x1x16xf32>
// CHECK: %[[QC:.*]] = nn.mul %[[Q4]], %[[C]] : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>) -> tensor<1x8x4x16xf32>
// CHECK: %[[S:.*]] = nn.reshape %arg4 : (tensor<1x1x8x16xf32>) -> tensor<1x8x1x16xf32>
// CHECK: %[[QH:.*]] = nn.rotate_half %[[Q4]]
// CHECK: %[[QS:.*]] = nn.mul %[[QH]], %[[S]]
// CHECK: %[[QR:.*]] = nn.add %[[QC]], %[[QS]]
// CHECK: %[[Q:.*]] = nn.reshape %[[QR]] : (tensor<1x8x4x16xf32>) -> tensor<1x8x64xf32>
// CHECK: nn.attention %[[Q]], %{{.*}}, %arg2 {is_causal = true, kv_num_heads = 2 : i64, q_num_heads = 4 : i64}
// CHECK-NOT: nn.transpose
// CHECK-NOT: tensor<1x4x8x16xf32>
func.func @written_rotary(%q: tensor<1x8x64xf32>, %k: tensor<1x8x32xf32>, %v: tensor<1x8x32xf32>, %cos: tensor<1x1x8x16xf32>, %sin: tensor<1x1x8x16xf32>) -> tensor<1x8x64xf32> {
  %q4 = nn.reshape %q : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %qc = nn.mul %qt, %cos : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  %qh = nn.rotate_half %qt : (tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  %qs = nn.mul %sin, %qh : (tensor<1x1x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  %qr = nn.add %qc, %qs : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  %k4 = nn.reshape %k : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  %kt = nn.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %kc = nn.mul %kt, %cos : (tensor<1x2x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x2x8x16xf32>
  %kh = nn.rotate_half %kt : (tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %ks = nn.mul %kh, %sin : (tensor<1x2x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x2x8x16xf32>
  %kr = nn.add %ks, %kc : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %v4 = nn.reshape %v : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  %vt = nn.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %a = nn.attention %qr, %kr, %vt {is_causal = true} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  %m = nn.reshape %at : (tensor<1x8x4x16xf32>) -> tensor<1x8x64xf32>
  return %m : tensor<1x8x64xf32>
}

// -----

// A written-out rotation whose cos varies per head is not rebuilt: the
// layout stays.
// CHECK-LABEL: func.func @per_head_cos
// CHECK: nn.transpose
// CHECK: nn.attention %{{.*}} : (tensor<1x2x8x16xf32>
func.func @per_head_cos(%q: tensor<1x8x32xf32>, %v: tensor<1x8x32xf32>, %cos: tensor<1x2x8x16xf32>, %sin: tensor<1x1x8x16xf32>) -> tensor<1x8x32xf32> {
  %q4 = nn.reshape %q : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %qc = nn.mul %qt, %cos : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %qh = nn.rotate_half %qt : (tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %qs = nn.mul %qh, %sin : (tensor<1x2x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x2x8x16xf32>
  %qr = nn.add %qc, %qs : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %v4 = nn.reshape %v : (tensor<1x8x32xf32>) -> tensor<1x8x2x16xf32>
  %vt = nn.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %a = nn.attention %qr, %vt, %vt : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x16xf32>) -> tensor<1x8x2x16xf32>
  %m = nn.reshape %at : (tensor<1x8x2x16xf32>) -> tensor<1x8x32xf32>
  return %m : tensor<1x8x32xf32>
}

// -----

// A training step's backward: nn.attention_grad reads the forward's split
// and transposed Q, K and V, its saved log-sum-exp, and the result's
// cotangent split and transposed too; its cotangents go back through the
// inverse transpose. Both fold (the log-sum-exp is the same in either
// layout), and every head transpose goes.
// CHECK-LABEL: func.func @backward
// CHECK-NOT: nn.transpose
// CHECK: %[[Y:[^,]*]], %[[LSE:[^ ]*]] = nn.attention %arg0, %arg1, %arg2 {is_causal = true, kv_num_heads = 2 : i64, q_num_heads = 4 : i64, save_lse = true} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x4x8xf32>)
// CHECK: %[[DQ3:[^,]*]], %[[DK3:[^,]*]], %[[DV3:[^ ]*]] = nn.attention_grad %arg0, %arg1, %arg2, %arg3, %[[LSE]] {is_causal = true, kv_num_heads = 2 : i64, q_num_heads = 4 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>, tensor<2x4x8xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>)
// CHECK: %[[DQ:.*]] = nn.reshape %[[DQ3]] : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>
// CHECK: %[[DK:.*]] = nn.reshape %[[DK3]] : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
// CHECK: %[[DV:.*]] = nn.reshape %[[DV3]] : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
// CHECK-NOT: nn.transpose
// CHECK: return %{{.*}}, %[[DQ]], %[[DK]], %[[DV]]
func.func @backward(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %dy: tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>) {
  %q4 = nn.reshape %q : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %k4 = nn.reshape %k : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %kt = nn.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %v4 = nn.reshape %v : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %vt = nn.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %a, %lse = nn.attention %qt, %kt, %vt {is_causal = true, save_lse = true} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  %at = nn.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %m = nn.reshape %at : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %dy4 = nn.reshape %dy : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>
  %dyt = nn.transpose %dy4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %dq, %dk, %dv = nn.attention_grad %qt, %kt, %vt, %dyt, %lse {is_causal = true} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
  %dqt = nn.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %dkt = nn.transpose %dk {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x16xf32>) -> tensor<2x8x2x16xf32>
  %dvt = nn.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x16xf32>) -> tensor<2x8x2x16xf32>
  return %m, %dqt, %dkt, %dvt : tensor<2x8x64xf32>, tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
}

// -----

// A cotangent also read in [B, H, S, D] form: the backward stays 4-D.
// CHECK-LABEL: func.func @backward_cotangent_used_as_is
// CHECK: nn.attention_grad %{{.*}} : (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8xf32>)
func.func @backward_cotangent_used_as_is(%q: tensor<2x8x32xf32>, %dy: tensor<2x8x32xf32>, %lse: tensor<2x2x8xf32>) -> (tensor<2x2x8x16xf32>, tensor<2x8x2x16xf32>) {
  %q4 = nn.reshape %q : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %dy4 = nn.reshape %dy : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %dyt = nn.transpose %dy4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %dq, %dk, %dv = nn.attention_grad %qt, %qt, %qt, %dyt, %lse : (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8xf32>) -> (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
  %dkt = nn.transpose %dk {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x16xf32>) -> tensor<2x8x2x16xf32>
  return %dq, %dkt : tensor<2x2x8x16xf32>, tensor<2x8x2x16xf32>
}

// -----

// The dynamo exporter splits the cotangent's heads straight from
// [B*S, H*D]: the backward reads its [B, S, H*D] view.
// CHECK-LABEL: func.func @backward_from_rows
// CHECK: %[[FLAT:.*]] = nn.reshape %arg1 : (tensor<16x32xf32>) -> tensor<2x8x32xf32>
// CHECK: nn.attention_grad %arg0, %arg0, %arg0, %[[FLAT]], %arg2 {kv_num_heads = 2 : i64, q_num_heads = 2 : i64}
// CHECK-NOT: nn.transpose
func.func @backward_from_rows(%q: tensor<2x8x32xf32>, %dy: tensor<16x32xf32>, %lse: tensor<2x2x8xf32>) -> (tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>) {
  %q4 = nn.reshape %q : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %qt = nn.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %dy4 = nn.reshape %dy : (tensor<16x32xf32>) -> tensor<2x8x2x16xf32>
  %dyt = nn.transpose %dy4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %dq, %dk, %dv = nn.attention_grad %qt, %qt, %qt, %dyt, %lse : (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8xf32>) -> (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
  %dqt = nn.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x16xf32>) -> tensor<2x8x2x16xf32>
  %dkt = nn.transpose %dk {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x16xf32>) -> tensor<2x8x2x16xf32>
  %dvt = nn.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x16xf32>) -> tensor<2x8x2x16xf32>
  return %dqt, %dkt, %dvt : tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>
}
