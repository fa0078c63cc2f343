// RUN: shard-opt %s -split-input-file -nn-find-layers | FileCheck %s

// Three layers of an MLP (matmul, bias, relu), the first reading the input
// itself, then a head: three blocks of five ops (the weight, the embedded
// bias and three activations), each block carrying one value to the next.
// The program is left as it is.
// CHECK-LABEL: module attributes {nn.layers = {blocks = 3 : i64, epilogue_ops = 2 : i64, prologue_ops = 0 : i64, stacks = [{blocks = 3 : i64, carried = 1 : i64, ops_per_block = 5 : i64, shared = 0 : i64, weights = {{\[}}["l0.w", "l0.b"], ["l1.w", "l1.b"], ["l2.w", "l2.b"]]}]}}
// CHECK-COUNT-3: nn.relu
// CHECK: return
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x2xf32> {
  %w0 = nn.weight "l0.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m0 = nn.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b0 = nn.constant dense<1.0> : tensor<8xf32> loc("l0.b")
  %a0 = nn.add %m0, %b0 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r0 = nn.relu %a0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1 = nn.weight "l1.w" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m1 = nn.matmul %r0, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b1 = nn.constant dense<2.0> : tensor<8xf32> loc("l1.b")
  %a1 = nn.add %m1, %b1 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %a1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = nn.weight "l2.w" {storage = "external", file = "m.data", offset = 512 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m2 = nn.matmul %r1, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b2 = nn.constant dense<3.0> : tensor<8xf32> loc("l2.b")
  %a2 = nn.add %m2, %b2 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r2 = nn.relu %a2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %wh = nn.weight "head.w" {storage = "external", file = "m.data", offset = 768 : i64, size = 64 : i64} : tensor<8x2xf32>
  %y = nn.matmul %r2, %wh : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  return %y : tensor<4x2xf32>
}

// -----

// No two consecutive layers alike (the second is wider): no blocks, every
// op in the prologue.
// CHECK-LABEL: module attributes {nn.layers = {blocks = 0 : i64, epilogue_ops = 0 : i64, prologue_ops = 6 : i64, stacks = []}}
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w0 = nn.weight "l0.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 512 : i64} : tensor<8x16xf32>
  %m0 = nn.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %r0 = nn.relu %m0 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %w1 = nn.weight "l1.w" {storage = "external", file = "m.data", offset = 512 : i64, size = 512 : i64} : tensor<16x8xf32>
  %m1 = nn.matmul %r0, %w1 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %m1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r1 : tensor<4x8xf32>
}

// -----

// Look-alikes side by side are no layers: the query, key and value
// projections read one input and each its own weight, but none reads
// another's result.
// CHECK-LABEL: module attributes {nn.layers = {blocks = 0 : i64
func.func @main(%x: tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32> {
  %wq = nn.weight "q.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %q = nn.matmul %x, %wq : (tensor<2x1x4x8xf32>, tensor<8x8xf32>) -> tensor<2x1x4x8xf32>
  %qr = nn.relu %q : (tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  %wk = nn.weight "k.w" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %k = nn.matmul %x, %wk : (tensor<2x1x4x8xf32>, tensor<8x8xf32>) -> tensor<2x1x4x8xf32>
  %kr = nn.relu %k : (tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  %wv = nn.weight "v.w" {storage = "external", file = "m.data", offset = 512 : i64, size = 256 : i64} : tensor<8x8xf32>
  %v = nn.matmul %x, %wv : (tensor<2x1x4x8xf32>, tensor<8x8xf32>) -> tensor<2x1x4x8xf32>
  %vr = nn.relu %v : (tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  %a = nn.attention %qr, %kr, %vr {scale = 1.0 : f32} : (tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  return %a : tensor<2x1x4x8xf32>
}

// -----

// Three residual layers, h + where(keep, relu(h W^T), 0), written out of
// order as exporters do: the weights first, the third layer's, then the
// first's; the second layer's transpose of its weight and the third
// layer's constant before the first layer; the second layer's constant
// between the first layer's matmul and relu. Each block holds its weight,
// transpose, matmul, relu, constant, where and add; the mask computed from
// the integer input is shared by all three, the residual stream carried.
// CHECK-LABEL: module attributes {nn.layers = {blocks = 3 : i64, epilogue_ops = 0 : i64, prologue_ops = 2 : i64, stacks = [{blocks = 3 : i64, carried = 1 : i64, ops_per_block = 7 : i64, shared = 1 : i64, weights = {{\[}}["w0"], ["w1"], ["w2"]]}]}}
func.func @main(%x: tensor<4x8xf32>, %m: tensor<4x8xi64>) -> tensor<4x8xf32> {
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 512 : i64, size = 256 : i64} : tensor<8x8xf32>
  %w0 = nn.weight "w0" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %t1 = nn.transpose %w1 {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %keep = nn.cast %m {to = i1} : (tensor<4x8xi64>) -> tensor<4x8xi1>
  %z2 = nn.constant dense<0.0> : tensor<f32>
  %h0 = nn.add %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t0 = nn.transpose %w0 {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %p0 = nn.matmul %h0, %t0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %z1 = nn.constant dense<0.0> : tensor<f32>
  %r0 = nn.relu %p0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z0 = nn.constant dense<0.0> : tensor<f32>
  %g0 = nn.where %keep, %r0, %z0 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %h1 = nn.add %h0, %g0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %p1 = nn.matmul %h1, %t1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %p1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %g1 = nn.where %keep, %r1, %z1 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %h2 = nn.add %h1, %g1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t2 = nn.transpose %w2 {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %p2 = nn.matmul %h2, %t2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r2 = nn.relu %p2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %g2 = nn.where %keep, %r2, %z2 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %h3 = nn.add %h2, %g2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %h3 : tensor<4x8xf32>
}
