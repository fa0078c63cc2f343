// RUN: shard-opt %s -split-input-file -nn-raise-normalization | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-raise-normalization=explain=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// An opset-13 LayerNorm as torch exports it: the centring mean, pow(d, 2),
// the variance over the same axis, + eps, sqrt, a division, gamma, beta.
// CHECK-LABEL: func.func @layer_norm
// CHECK: %[[Y:.*]] = nn.layer_normalization %arg0, %arg1, %arg2 {axis = 2 : i64, epsilon = 9.99999996E-13 : f32}
// CHECK-NOT: nn.reduce_mean
// CHECK-NOT: nn.sqrt
// CHECK-NOT: nn.constant
// CHECK: return %[[Y]]
// EXPLAIN: remark: raised to nn.layer_normalization: axis 2, epsilon 1.000000e-12, scale, bias
func.func @layer_norm(%x: tensor<2x3x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %m = nn.reduce_mean %x {axes = array<i64: 2>} : (tensor<2x3x8xf32>) -> tensor<2x3x1xf32>
  %d = nn.sub %x, %m : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %two = nn.constant dense<2.0> : tensor<f32>
  %p = nn.pow %d, %two : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %v = nn.reduce_mean %p {axes = array<i64: 2>} : (tensor<2x3x8xf32>) -> tensor<2x3x1xf32>
  %eps = nn.constant dense<1.0e-12> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %s = nn.sqrt %ve : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %n = nn.div %d, %s : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %gn = nn.mul %n, %g : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %y = nn.add %b, %gn : (tensor<8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// Normalized over the last two axes, d * d, no gamma or beta: the scale
// is a constant of ones over [3, 8].
// CHECK-LABEL: func.func @two_axes_no_affine
// CHECK: %[[ONES:.*]] = nn.constant dense<1.000000e+00> : tensor<3x8xf32>
// CHECK: %[[Y:.*]] = nn.layer_normalization %arg0, %[[ONES]] {axis = 1 : i64}
// CHECK: return %[[Y]]
// EXPLAIN: remark: raised to nn.layer_normalization: axis 1, epsilon 1.000000e-05, no scale
func.func @two_axes_no_affine(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %m = nn.reduce_mean %x {axes = array<i64: 1, 2>} : (tensor<2x3x8xf32>) -> tensor<2x1x1xf32>
  %d = nn.sub %x, %m : (tensor<2x3x8xf32>, tensor<2x1x1xf32>) -> tensor<2x3x8xf32>
  %p = nn.mul %d, %d : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %v = nn.reduce_mean %p {axes = array<i64: 1, 2>} : (tensor<2x3x8xf32>) -> tensor<2x1x1xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<1xf32>
  %ve = nn.add %eps, %v : (tensor<1xf32>, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %s = nn.sqrt %ve : (tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %n = nn.div %d, %s : (tensor<2x3x8xf32>, tensor<2x1x1xf32>) -> tensor<2x3x8xf32>
  return %n : tensor<2x3x8xf32>
}

// -----

// Llama's RMSNorm: x * reciprocal(sqrt(mean(x^2) + eps)), then weight * it.
// x keeps its other reader (the residual stream).
// CHECK-LABEL: func.func @rms_norm
// CHECK: %[[Y:.*]] = nn.rms_normalization %arg0, %arg1 {axis = 2 : i64, epsilon = 9.99999997E-7 : f32}
// CHECK-NOT: nn.reciprocal
// CHECK: %[[R:.*]] = nn.add %arg0, %[[Y]]
// CHECK: return %[[R]]
// EXPLAIN: remark: raised to nn.rms_normalization: axis 2, epsilon 1.000000e-06, scale
func.func @rms_norm(%x: tensor<1x4x16xf32>, %w: tensor<16xf32>) -> tensor<1x4x16xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %p = nn.pow %x, %two : (tensor<1x4x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
  %v = nn.reduce_mean %p {axes = array<i64: 2>} : (tensor<1x4x16xf32>) -> tensor<1x4x1xf32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<1x4x1xf32>, tensor<f32>) -> tensor<1x4x1xf32>
  %s = nn.sqrt %ve : (tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %r = nn.reciprocal %s : (tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %n = nn.mul %r, %x : (tensor<1x4x1xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
  %y = nn.mul %w, %n : (tensor<16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
  %res = nn.add %x, %y : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
  return %res : tensor<1x4x16xf32>
}

// -----

// 1 / sqrt as a division of one; a following product whose other operand
// is not over the normalized dimensions ([4, 1]) stays after the norm.
// CHECK-LABEL: func.func @rms_one_over
// CHECK: %[[ONES:.*]] = nn.constant dense<1.000000e+00> : tensor<16xf32>
// CHECK: %[[Y:.*]] = nn.rms_normalization %arg0, %[[ONES]] {axis = 1 : i64
// CHECK: nn.mul %[[Y]], %arg1
func.func @rms_one_over(%x: tensor<4x16xf32>, %t: tensor<4x1xf32>) -> tensor<4x16xf32> {
  %p = nn.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %v = nn.reduce_mean %p {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = nn.sqrt %ve : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %r = nn.div %one, %s : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = nn.mul %x, %r : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %y = nn.mul %n, %t : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: the centred value is also returned (a raised norm would not
// compute it), and a mean over a leading axis is no norm at all.
// CHECK-LABEL: func.func @centred_read_elsewhere
// CHECK-NOT: nn.layer_normalization
// CHECK-NOT: nn.rms_normalization
// CHECK: nn.sqrt
// EXPLAIN: remark: not raised to a normalization: the centred value is read elsewhere
func.func @centred_read_elsewhere(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %m = nn.reduce_mean %x {axes = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = nn.sub %x, %m : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %two = nn.constant dense<2.0> : tensor<f32>
  %p = nn.pow %d, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %v = nn.reduce_mean %p {axes = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = nn.sqrt %ve : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = nn.div %d, %s : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %n, %d : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Not raised: the mean is over the leading axis, and the exponent is 3.
// CHECK-LABEL: func.func @not_norms
// CHECK-NOT: normalization
// EXPLAIN: remark: not raised to a normalization: the mean is not over a trailing block of axes with keepdims
// EXPLAIN: remark: not raised to a normalization: the quotient's numerator is not what is squared
func.func @not_norms(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %p = nn.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %v = nn.reduce_mean %p {axes = array<i64: 0>} : (tensor<2x8xf32>) -> tensor<1x8xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %s = nn.sqrt %ve : (tensor<1x8xf32>) -> tensor<1x8xf32>
  %n = nn.div %x, %s : (tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
  %three = nn.constant dense<3.0> : tensor<f32>
  %c = nn.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %v2 = nn.reduce_mean %c {axes = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %ve2 = nn.add %v2, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s2 = nn.sqrt %ve2 : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n2 = nn.div %x, %s2 : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %n, %n2 : tensor<2x8xf32>, tensor<2x8xf32>
}
