// Folders turn the shape arithmetic exporters emit into constants.
// RUN: shard-opt %s -canonicalize -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @shape_gather_concat
// CHECK-NOT: nn.shape
// CHECK-NOT: nn.gather
// CHECK-NOT: nn.concat
// CHECK: %[[C:.*]] = nn.constant dense<[2, 8, 4, -1]> : tensor<4xi64>
// CHECK: return %[[C]]
func.func @shape_gather_concat(%x: tensor<2x8x64xf32>) -> tensor<4xi64> {
  %s = nn.shape %x : (tensor<2x8x64xf32>) -> tensor<3xi64>
  %i0 = nn.constant dense<0> : tensor<i64>
  %i1 = nn.constant dense<1> : tensor<i64>
  %b = nn.gather %s, %i0 : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %t = nn.gather %s, %i1 : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %bu = nn.unsqueeze %b {axes = array<i64: 0>} : (tensor<i64>) -> tensor<1xi64>
  %tu = nn.unsqueeze %t {axes = array<i64: 0>} : (tensor<i64>) -> tensor<1xi64>
  %rest = nn.constant dense<[4, -1]> : tensor<2xi64>
  %c = nn.concat %bu, %tu, %rest {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<2xi64>) -> tensor<4xi64>
  return %c : tensor<4xi64>
}

// -----

// CHECK-LABEL: func.func @int_arithmetic
// CHECK-DAG: nn.constant dense<[7, -3, 6]> : tensor<3xi64>
// CHECK-DAG: nn.constant dense<[true, false, true]> : tensor<3xi1>
// CHECK-DAG: nn.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
func.func @int_arithmetic() -> (tensor<3xi64>, tensor<3xi1>, tensor<2xf32>) {
  %a = nn.constant dense<[6, -6, 5]> : tensor<3xi64>
  %b = nn.constant dense<2> : tensor<i64>
  %one = nn.constant dense<1> : tensor<i64>
  // [3, -3, 2] (division truncates toward zero) + [4, 0, 4] picked by where.
  %q = nn.div %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  %gt = nn.greater %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  %eq = nn.equal %a, %a : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
  %four = nn.constant dense<4> : tensor<i64>
  %zero = nn.constant dense<0> : tensor<i64>
  %sel = nn.where %gt, %four, %zero : (tensor<3xi1>, tensor<i64>, tensor<i64>) -> tensor<3xi64>
  %sum = nn.add %q, %sel : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %lt = nn.less %q, %one : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  %neq = nn.not %lt : (tensor<3xi1>) -> tensor<3xi1>
  %ints = nn.constant dense<[1, 2]> : tensor<2xi64>
  %f = nn.cast %ints {to = f32} : (tensor<2xi64>) -> tensor<2xf32>
  %gt2 = nn.and %gt, %eq : (tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
  return %sum, %gt2, %f : tensor<3xi64>, tensor<3xi1>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @slices_and_reshapes
// CHECK-DAG: nn.constant dense<[4, 2]> : tensor<2xi64>
// CHECK-DAG: nn.constant dense<{{\[}}[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
// CHECK-DAG: nn.constant dense<0.000000e+00> : tensor<2x3xf32>
func.func @slices_and_reshapes() -> (tensor<2xi64>, tensor<2x3xi64>, tensor<2x3xf32>) {
  %a = nn.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi64>
  %s = nn.slice %a {starts = array<i64: -3>, ends = array<i64: 0>, axes = array<i64: 0>, steps = array<i64: -2>} : (tensor<6xi64>) -> tensor<2xi64>
  %r = nn.reshape %a : (tensor<6xi64>) -> tensor<2x3xi64>
  %z = nn.constant_of_shape 0.0 : f32 : tensor<2x3xf32>
  return %s, %r, %z : tensor<2xi64>, tensor<2x3xi64>, tensor<2x3xf32>
}

// -----

// Out-of-range constant indices are not folded (they are a run-time error).
// CHECK-LABEL: func.func @gather_out_of_range
// CHECK: nn.gather
func.func @gather_out_of_range() -> tensor<i64> {
  %a = nn.constant dense<[1, 2, 3]> : tensor<3xi64>
  %i = nn.constant dense<7> : tensor<i64>
  %g = nn.gather %a, %i : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  return %g : tensor<i64>
}
