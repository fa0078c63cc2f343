// Elementwise ops: every dim is one Parallel factor shared by all tensors;
// under broadcasting a size-1 dim stretched to a larger one has no factor.
// RUN: shard-opt %s -test-dist-sharding-rules -split-input-file -verify-diagnostics

func.func @unary(%a: tensor<2x3xf32>, %c: tensor<2x3xi1>) {
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %0 = nn.sqrt %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %1 = nn.exp %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %2 = nn.log %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %3 = nn.tanh %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %4 = nn.sigmoid %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %5 = nn.erf %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %6 = nn.reciprocal %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %7 = nn.relu %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %8 = nn.neg %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %9 = nn.abs %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %10 = nn.not %c : (tensor<2x3xi1>) -> tensor<2x3xi1>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %11 = nn.identity %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %12 = nn.leaky_relu %a {alpha = 0.2 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %13 = nn.gelu %a {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %14 = nn.clip %a {min = 0.0 : f64, max = 6.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %15 = nn.dropout %a {ratio = 0.1 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j]) -> ([i, j]) {i=2, j=3}}}
  %16 = nn.cast %a {to = bf16} : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  return
}

// -----

// A scalar has no dims, so no factors.
func.func @scalar(%s: tensor<f32>) {
  // expected-remark @below {{([]) -> ([]) {}}}
  %0 = nn.exp %s : (tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @binary(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<2x3xi1>) {
  // expected-remark @below {{([i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %0 = nn.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %1 = nn.sub %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i], [j, i]) -> ([j, i]) {i=3, j=2}}}
  %2 = nn.mul %b, %a : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [i, j]) -> ([i, j]) {i=2, j=3}}}
  %3 = nn.div %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %4 = nn.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %5 = nn.min %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %6 = nn.max %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %7 = nn.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // expected-remark @below {{([i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %8 = nn.less %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // expected-remark @below {{([i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %9 = nn.greater %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // expected-remark @below {{([i, j], [i, j]) -> ([i, j]) {i=2, j=3}}}
  %10 = nn.and %7, %c : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // expected-remark @below {{([i, j], [i, j], [j]) -> ([i, j]) {i=2, j=3}}}
  %11 = nn.where %c, %a, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Size-1 dims stretched by broadcasting have no factor on the side that
// stretches; where both sides are 1 they share a size-1 factor.
func.func @broadcast(%a: tensor<4x1x3xf32>, %b: tensor<5x1xf32>, %c: tensor<1x3xf32>, %s: tensor<f32>, %m: tensor<2x1xi1>, %p: tensor<2x1xf32>) {
  // expected-remark @below {{([i, 1, j], [k, 1]) -> ([i, k, j]) {i=4, j=3, k=5}}}
  %0 = nn.mul %a, %b : (tensor<4x1x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
  // expected-remark @below {{([i, j], [i, j]) -> ([i, j]) {i=1, j=3}}}
  %1 = nn.sub %c, %c : (tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<1x3xf32>
  // expected-remark @below {{([i, j], []) -> ([i, j]) {i=1, j=3}}}
  %2 = nn.div %c, %s : (tensor<1x3xf32>, tensor<f32>) -> tensor<1x3xf32>
  // expected-remark @below {{([i, 1], [1, j], [1, j]) -> ([i, j]) {i=2, j=3}}}
  %3 = nn.where %m, %c, %c : (tensor<2x1xi1>, tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  // expected-remark @below {{([i, 1], [1, j]) -> ([i, j]) {i=2, j=3}}}
  %4 = nn.greater %p, %c : (tensor<2x1xf32>, tensor<1x3xf32>) -> tensor<2x3xi1>
  return
}

// -----

// The mask's random draws follow global row-major positions: nothing splits.
func.func @training_dropout(%x: tensor<2x3xbf16>) {
  // expected-remark @below {{([i, j]) -> ([i, j], [i, j]) {i=2 need_replication, j=3 need_replication}}}
  %0:2 = nn.training_dropout %x {ratio = 0.25 : f32, seed = 3 : i64} : (tensor<2x3xbf16>) -> (tensor<2x3xbf16>, tensor<2x3xi1>)
  return
}

// -----

// Sources have no operands: their result dims split freely, except range's
// values, which are global positions, and shape's, which are global dims.
func.func @sources(%x: tensor<2x3x4xf32>) {
  // expected-remark @below {{() -> ([i]) {i=2}}}
  %0 = nn.constant dense<[1, 2]> : tensor<2xi64>
  // expected-remark @below {{() -> ([]) {}}}
  %1 = nn.constant dense<1.0> : tensor<f32>
  // expected-remark @below {{() -> ([i, j]) {i=4, j=4}}}
  %2 = nn.weight "layer.w" {storage = "external", file = "m.data", offset = 64 : i64, size = 64 : i64} : tensor<4x4xf32>
  // expected-remark @below {{() -> ([i, j]) {i=2, j=3}}}
  %3 = nn.constant_of_shape 1.5 : f32 : tensor<2x3xf32>
  // expected-remark @below {{() -> ([1]) {}}}
  %4 = nn.range {start = 0.0 : f64, limit = 10.0 : f64, delta = 2.0 : f64} : tensor<5xi64>
  // expected-remark @below {{([1, 1, 1]) -> ([1]) {}}}
  %5 = nn.shape %x {start = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2xi64>
  return
}
