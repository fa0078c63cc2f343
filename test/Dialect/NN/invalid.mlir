// RUN: shard-opt %s -split-input-file -verify-diagnostics

func.func @add_not_broadcastable(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'nn.add' op operand shapes [2,3] and [4] are not broadcast-compatible}}
  %0 = nn.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @add_wrong_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<3x3xf32> {
  // expected-error @+1 {{'nn.add' op result #0 has type 'tensor<3x3xf32>' but the operands give 'tensor<2x3xf32>'}}
  %0 = nn.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

func.func @add_mixed_elements(%a: tensor<3xf32>, %b: tensor<3xf16>) -> tensor<3xf32> {
  // expected-error @+1 {{operand element types differ: 'f32' vs 'f16'}}
  %0 = nn.add %a, %b : (tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @dynamic_shape(%a: tensor<?x3xf32>) -> tensor<?x3xf32> {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = nn.relu %a : (tensor<?x3xf32>) -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}

// -----

func.func @sqrt_of_integers(%a: tensor<3xi32>) -> tensor<3xi32> {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values}}
  %0 = nn.sqrt %a : (tensor<3xi32>) -> tensor<3xi32>
  return %0 : tensor<3xi32>
}

// -----

func.func @matmul_k_mismatch(%a: tensor<2x4xf32>, %b: tensor<5x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{contraction dimensions differ: lhs [2,4] has 4, rhs [5,3] has 5}}
  %0 = nn.matmul %a, %b : (tensor<2x4xf32>, tensor<5x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @matmul_batch_mismatch(%a: tensor<2x2x4xf32>, %b: tensor<3x4x3xf32>) -> tensor<2x2x3xf32> {
  // expected-error @+1 {{operand shapes [2] and [3] are not broadcast-compatible}}
  %0 = nn.matmul %a, %b : (tensor<2x2x4xf32>, tensor<3x4x3xf32>) -> tensor<2x2x3xf32>
  return %0 : tensor<2x2x3xf32>
}

// -----

func.func @gemm_bad_c(%a: tensor<2x4xf32>, %b: tensor<4x3xf32>, %c: tensor<2x2xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{C shape [2,2] does not broadcast to [2,3]}}
  %0 = nn.gemm %a, %b, %c : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<2x2xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @softmax_axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = nn.softmax %a {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @reshape_count(%a: tensor<2x3xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{cannot reshape [2,3] (6 elements) to [4] (4 elements)}}
  %0 = nn.reshape %a : (tensor<2x3xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @transpose_perm(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{perm [0,0] is not a permutation}}
  %0 = nn.transpose %a {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @squeeze_non_unit(%a: tensor<2x3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{cannot squeeze axis 0 of size 2}}
  %0 = nn.squeeze %a {axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @concat_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{input shapes [2,3] and [2,4] differ outside axis 0}}
  %0 = nn.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @split_sizes(%a: tensor<6xf32>) -> (tensor<2xf32>, tensor<3xf32>) {
  // expected-error @+1 {{split sizes [2,3] do not add up to 6 (axis 0)}}
  %0:2 = nn.split %a {axis = 0 : i64, sizes = array<i64: 2, 3>} : (tensor<6xf32>) -> (tensor<2xf32>, tensor<3xf32>)
  return %0#0, %0#1 : tensor<2xf32>, tensor<3xf32>
}

// -----

func.func @slice_zero_step(%a: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error @+1 {{steps must be non-zero}}
  %0 = nn.slice %a {starts = array<i64: 0>, ends = array<i64: 6>, axes = array<i64: 0>, steps = array<i64: 0>} : (tensor<6xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

func.func @conv_groups(%x: tensor<1x6x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error @+1 {{group 4 must divide the input channels 6 and the output channels 4}}
  %0 = nn.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 4 : i64} : (tensor<1x6x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_4d(%x: tensor<1x1x4x4x4x4xf32>, %w: tensor<1x1x2x2x2x2xf32>) -> tensor<1x1x3x3x3x3xf32> {
  // expected-error @+1 {{only 1-D, 2-D and 3-D windows are supported, got 4 spatial dimensions}}
  %0 = nn.conv %x, %w {strides = array<i64: 1, 1, 1, 1>, pads = array<i64: 0, 0, 0, 0, 0, 0, 0, 0>, dilations = array<i64: 1, 1, 1, 1>} : (tensor<1x1x4x4x4x4xf32>, tensor<1x1x2x2x2x2xf32>) -> tensor<1x1x3x3x3x3xf32>
  return %0 : tensor<1x1x3x3x3x3xf32>
}

// -----

func.func @pool_indices_storage_order(%x: tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xi64> {
  // expected-error @+1 {{storage_order must be 0 or 1}}
  %0, %1 = nn.max_pool_with_indices %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, storage_order = 2 : i64} : (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  return %1 : tensor<1x1x2x2xi64>
}

// -----

func.func @pool_indices_type(%x: tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xi32> {
  // expected-error @+1 {{'nn.max_pool_with_indices' op result #1 must be statically shaped tensor of 64-bit signless integer values}}
  %0, %1 = nn.max_pool_with_indices %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi32>)
  return %1 : tensor<1x1x2x2xi32>
}

// -----

func.func @training_dropout_ratio(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{ratio 1.000000e+00 is outside [0, 1)}}
  %0, %1 = nn.training_dropout %x {ratio = 1.0 : f32, seed = 0 : i64} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  return %0 : tensor<2x3xf32>
}

// -----

func.func @pool_kernel_too_big(%x: tensor<1x1x2x2xf32>) -> tensor<1x1x1x1xf32> {
  // expected-error @+1 {{the window does not fit spatial dimension 0}}
  %0 = nn.max_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x1x2x2xf32>) -> tensor<1x1x1x1xf32>
  return %0 : tensor<1x1x1x1xf32>
}

// -----

func.func @layer_norm_scale(%x: tensor<2x8xf32>, %s: tensor<4xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{scale shape [4] does not broadcast to the normalized shape [8]}}
  %0 = nn.layer_normalization %x, %s : (tensor<2x8xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @batch_norm_channels(%x: tensor<1x3x4x4xf32>, %p: tensor<4xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error @+1 {{scale must have shape [3] (the channel count)}}
  %0 = nn.batch_normalization %x, %p, %p, %p, %p : (tensor<1x3x4x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

func.func @attention_heads(%q: tensor<1x6x4x8xf32>, %k: tensor<1x4x4x8xf32>) -> tensor<1x6x4x8xf32> {
  // expected-error @+1 {{query heads 6 must be a multiple of key/value heads 4}}
  %0 = nn.attention %q, %k, %k : (tensor<1x6x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>) -> tensor<1x6x4x8xf32>
  return %0 : tensor<1x6x4x8xf32>
}

// -----

func.func @attention_3d_needs_heads(%q: tensor<1x4x16xf32>) -> tensor<1x4x16xf32> {
  // expected-error @+1 {{3-D inputs need q_num_heads and kv_num_heads}}
  %0 = nn.attention %q, %q, %q : (tensor<1x4x16xf32>, tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
  return %0 : tensor<1x4x16xf32>
}

// -----

func.func @attention_mask(%q: tensor<1x2x4x8xf32>, %m: tensor<5x5xi1>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{mask shape [5,5] does not broadcast to [batch, q_heads, q_seq, kv_seq] = [1,2,4,4]}}
  %0 = nn.attention %q, %q, %q, %m : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<5x5xi1>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @rotary_odd_dim(%x: tensor<1x2x4x8xf32>, %c: tensor<16x3xf32>, %p: tensor<1x4xi64>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{rotary_embedding_dim 5 must be even and at most the head size 8}}
  %0 = nn.rotary_embedding %x, %c, %c, %p {rotary_embedding_dim = 5 : i64} : (tensor<1x2x4x8xf32>, tensor<16x3xf32>, tensor<16x3xf32>, tensor<1x4xi64>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @rotary_cache(%x: tensor<1x2x4x8xf32>, %c: tensor<16x8xf32>, %p: tensor<1x4xi64>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{with position_ids the caches must be [max_position, 4]}}
  %0 = nn.rotary_embedding %x, %c, %c, %p : (tensor<1x2x4x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<1x4xi64>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @einsum_label_sizes(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{label 'j' has sizes 3 and 4}}
  %0 = nn.einsum %a, %b {equation = "ij,jk->ik"} : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @einsum_unknown_output(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{output label 'k' does not appear in any input}}
  %0 = nn.einsum %a {equation = "ij->k"} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @topk_k(%a: tensor<4xf32>) -> (tensor<5xf32>, tensor<5xi64>) {
  // expected-error @+1 {{k 5 is outside [0, 4]}}
  %0:2 = nn.topk %a {k = 5 : i64} : (tensor<4xf32>) -> (tensor<5xf32>, tensor<5xi64>)
  return %0#0, %0#1 : tensor<5xf32>, tensor<5xi64>
}

// -----

func.func @reduce_repeated_axis(%a: tensor<2x3xf32>) -> tensor<2x1xf32> {
  // expected-error @+1 {{axis -1 is repeated}}
  %0 = nn.reduce_sum %a {axes = array<i64: 1, -1>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  return %0 : tensor<2x1xf32>
}

// -----

func.func @gather_elements_rank(%a: tensor<2x3xf32>, %i: tensor<2xi64>) -> tensor<2xf32> {
  // expected-error @+1 {{indices rank 1 differs from input rank 2}}
  %0 = nn.gather_elements %a, %i : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @scatter_nd_updates(%a: tensor<4x3xf32>, %i: tensor<2x1xi64>, %u: tensor<2x4xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{updates shape [2,4] must be [2,3]}}
  %0 = nn.scatter_nd %a, %i, %u : (tensor<4x3xf32>, tensor<2x1xi64>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @expand_not_broadcast(%a: tensor<3xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{input shape [3] does not broadcast to [2,4]}}
  %0 = nn.expand %a : (tensor<3xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @where_condition(%c: tensor<3xf32>, %a: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = nn.where %c, %a, %a : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @range_length() -> tensor<4xi64> {
  // expected-error @+1 {{result must be 1-D with 5 elements}}
  %0 = nn.range {start = 0.0 : f64, limit = 5.0 : f64, delta = 1.0 : f64} : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @gelu_mode(%a: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{approximate must be "none" or "tanh", got "fast"}}
  %0 = nn.gelu %a {approximate = "fast"} : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @pad_mode(%a: tensor<3xf32>) -> tensor<5xf32> {
  // expected-error @+1 {{mode must be constant, reflect, edge or wrap, got 'mirror'}}
  %0 = nn.pad %a {pads = array<i64: 1, 1>, mode = "mirror"} : (tensor<3xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

func.func @weight_size() -> tensor<4xf32> {
  // expected-error @+1 {{size 12 bytes does not match the 16 bytes of 'tensor<4xf32>'}}
  %0 = nn.weight "w" {storage = "external", file = "w.bin", offset = 0 : i64, size = 12 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @weight_storage() -> tensor<4xf32> {
  // expected-error @+1 {{storage 'external' needs a file and an offset}}
  %0 = nn.weight "w" {storage = "external"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @constant_of_shape_value() -> tensor<2xf32> {
  // expected-error @+1 {{value type 'i64' differs from the result element type 'f32'}}
  %0 = nn.constant_of_shape 1 : i64 : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @rotate_half_odd(%x: tensor<2x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{the last dimension must be even (two halves), not 5}}
  %0 = nn.rotate_half %x : (tensor<2x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @gather_starts_without_size(%t: tensor<4x8xf32>, %i: tensor<3xi64>) -> tensor<3x8xf32> {
  // expected-error @+1 {{axis_starts needs axis_size}}
  %0 = nn.gather %t, %i {axis_starts = array<i64: 0, 4>} : (tensor<4x8xf32>, tensor<3xi64>) -> tensor<3x8xf32>
  return %0 : tensor<3x8xf32>
}

// -----

func.func @gather_block_outside(%t: tensor<4x8xf32>, %i: tensor<3xi64>) -> tensor<3x8xf32> {
  // expected-error @+1 {{axis start 8 lies outside the 8 indexed rows}}
  %0 = nn.gather %t, %i {axis_size = 8 : i64, axis_starts = array<i64: 0, 8>} : (tensor<4x8xf32>, tensor<3xi64>) -> tensor<3x8xf32>
  return %0 : tensor<3x8xf32>
}

// -----

func.func @gather_more_indexed_than_rows(%t: tensor<4x8xf32>, %i: tensor<3xi64>) -> tensor<3x8xf32> {
  // expected-error @+1 {{axis_size 5 exceeds the input's 4 rows}}
  %0 = nn.gather %t, %i {axis_size = 5 : i64} : (tensor<4x8xf32>, tensor<3xi64>) -> tensor<3x8xf32>
  return %0 : tensor<3x8xf32>
}

// -----

func.func @weight_stored_larger(%i: tensor<3xi64>) -> tensor<4x8xf32> {
  // expected-error @+1 {{stored_shape [5, 8] does not fit in 'tensor<4x8xf32>'}}
  %0 = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, stored_shape = array<i64: 5, 8>} : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @weight_padded_size(%i: tensor<3xi64>) -> tensor<4x8xf32> {
  // expected-error @+1 {{size 128 bytes does not match the 96 bytes of its stored shape [3, 8]}}
  %0 = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 128 : i64, stored_shape = array<i64: 3, 8>} : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @cross_entropy_lse_not_a_column(%x: tensor<2x5xf32>, %lse: tensor<2xf32>, %l: tensor<2xi64>, %c: tensor<5xi64>) -> tensor<2xf32> {
  // expected-error @+1 {{'nn.softmax_cross_entropy' op lse must be 'tensor<2x1xf32>', got 'tensor<2xf32>'}}
  %0 = nn.softmax_cross_entropy %x, %lse, %l, %c : (tensor<2x5xf32>, tensor<2xf32>, tensor<2xi64>, tensor<5xi64>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @cross_entropy_grad_labels_not_a_column(%x: tensor<2x5xf32>, %lse: tensor<2x1xf32>, %l: tensor<2xi64>, %c: tensor<5xi64>, %g: tensor<2x1xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{'nn.softmax_cross_entropy_grad' op labels must have shape [2,1], got 'tensor<2xi64>'}}
  %0 = nn.softmax_cross_entropy_grad %x, %lse, %l, %c, %g : (tensor<2x5xf32>, tensor<2x1xf32>, tensor<2xi64>, tensor<5xi64>, tensor<2x1xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @cross_entropy_classes_of_another_width(%x: tensor<2x5xf32>, %lse: tensor<2x1xf32>, %l: tensor<2xi64>, %c: tensor<4xi64>) -> tensor<2xf32> {
  // expected-error @+1 {{'nn.softmax_cross_entropy' op classes must be tensor<5xi64>, got 'tensor<4xi64>'}}
  %0 = nn.softmax_cross_entropy %x, %lse, %l, %c : (tensor<2x5xf32>, tensor<2x1xf32>, tensor<2xi64>, tensor<4xi64>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
