// The constant evaluator: an op whose operands are all constants is
// computed by the CPU kernel of the same name (the semantics shard-run
// has), through the nn dialect's fold interface. What it refuses stays an
// op: results over 1 MiB, random ops, inputs a kernel rejects.
// RUN: shard-opt %s -canonicalize -split-input-file | FileCheck %s

// A causal frontier made from shapes, as exporters write it: two ranges
// and a comparison fold to a boolean constant.
// CHECK-LABEL: func.func @causal_frontier
// CHECK-NOT: nn.range
// CHECK-NOT: nn.greater
// CHECK: %[[M:.*]] = nn.constant dense<{{\[\[}}true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
// CHECK: return %[[M]]
func.func @causal_frontier() -> tensor<3x3xi1> {
  %rows = nn.range {start = 0.0 : f64, limit = 3.0 : f64, delta = 1.0 : f64} : tensor<3xi64>
  %cols = nn.range {start = 0.0 : f64, limit = 3.0 : f64, delta = 1.0 : f64} : tensor<3xi64>
  %r = nn.unsqueeze %rows {axes = array<i64: 1>} : (tensor<3xi64>) -> tensor<3x1xi64>
  %above = nn.greater %cols, %r : (tensor<3xi64>, tensor<3x1xi64>) -> tensor<3x3xi1>
  %m = nn.not %above : (tensor<3x3xi1>) -> tensor<3x3xi1>
  return %m : tensor<3x3xi1>
}

// -----

// Float math folds with the kernels' arithmetic: a rotary-style table.
// CHECK-LABEL: func.func @float_math
// CHECK-NOT: nn.exp
// CHECK-NOT: nn.mul
// CHECK: nn.constant dense<[1.000000e+00, 2.71828175, 7.3890562]> : tensor<3xf32>
func.func @float_math() -> tensor<3xf32> {
  %p = nn.constant dense<[0.0, 0.5, 1.0]> : tensor<3xf32>
  %two = nn.constant dense<2.0> : tensor<f32>
  %x = nn.mul %p, %two : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  %e = nn.exp %x : (tensor<3xf32>) -> tensor<3xf32>
  return %e : tensor<3xf32>
}

// -----

// The size policy: a result of more than 1 MiB (here 2.4 MB of i64) is
// left to run time, and so is everything computed from it.
// CHECK-LABEL: func.func @over_the_limit
// CHECK: nn.range
// CHECK: nn.add
func.func @over_the_limit() -> tensor<300000xi64> {
  %r = nn.range {start = 0.0 : f64, limit = 300000.0 : f64, delta = 1.0 : f64} : tensor<300000xi64>
  %one = nn.constant dense<1> : tensor<i64>
  %s = nn.add %r, %one : (tensor<300000xi64>, tensor<i64>) -> tensor<300000xi64>
  return %s : tensor<300000xi64>
}

// -----

// Random draws are never folded, constant input or not.
// CHECK-LABEL: func.func @random
// CHECK: nn.training_dropout
func.func @random() -> tensor<4xf32> {
  %x = nn.constant dense<1.0> : tensor<4xf32>
  %y, %m = nn.training_dropout %x {ratio = 0.5 : f32, seed = 3 : i64} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>)
  return %y : tensor<4xf32>
}

// -----

// An input the kernel rejects is left for shard-run to report.
// CHECK-LABEL: func.func @division_by_zero
// CHECK: nn.div
func.func @division_by_zero() -> tensor<2xi64> {
  %a = nn.constant dense<[4, 5]> : tensor<2xi64>
  %z = nn.constant dense<[1, 0]> : tensor<2xi64>
  %q = nn.div %a, %z : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %q : tensor<2xi64>
}
