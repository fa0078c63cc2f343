// RUN: shard-opt %s -split-input-file -nn-raise-rotate-half | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-raise-rotate-half=explain=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// Hugging Face's rotate_half as torch exports it: x[..., :h] and
// x[..., h:] (an INT64_MAX end), -x2, Concat(-x2, x1). The copies go.
// CHECK-LABEL: func.func @slices
// CHECK: %[[R:.*]] = nn.rotate_half %arg0 : (tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32>
// CHECK-NOT: nn.slice
// CHECK-NOT: nn.neg
// CHECK-NOT: nn.concat
// CHECK: nn.mul %[[R]], %arg1
// EXPLAIN: remark: raised to nn.rotate_half: last dimension 8
func.func @slices(%x: tensor<1x2x3x8xf32>, %sin: tensor<1x1x3x8xf32>) -> tensor<1x2x3x8xf32> {
  %x1 = nn.slice %x {starts = array<i64: 0>, ends = array<i64: 4>, axes = array<i64: -1>, steps = array<i64: 1>} : (tensor<1x2x3x8xf32>) -> tensor<1x2x3x4xf32>
  %x2 = nn.slice %x {starts = array<i64: 4>, ends = array<i64: 9223372036854775807>, axes = array<i64: -1>, steps = array<i64: 1>} : (tensor<1x2x3x8xf32>) -> tensor<1x2x3x4xf32>
  %n = nn.neg %x2 : (tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %r = nn.concat %n, %x1 {axis = -1 : i64} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x8xf32>
  %y = nn.mul %r, %sin : (tensor<1x2x3x8xf32>, tensor<1x1x3x8xf32>) -> tensor<1x2x3x8xf32>
  return %y : tensor<1x2x3x8xf32>
}

// -----

// One Split into the halves; the second half is also read elsewhere, so
// the split stays for it.
// CHECK-LABEL: func.func @split
// CHECK: %[[H:.*]]:2 = nn.split %arg0
// CHECK: %[[R:.*]] = nn.rotate_half %arg0 : (tensor<6x4xbf16>) -> tensor<6x4xbf16>
// CHECK-NOT: nn.concat
// CHECK: return %[[R]], %[[H]]#1
// EXPLAIN: remark: raised to nn.rotate_half: last dimension 4
func.func @split(%x: tensor<6x4xbf16>) -> (tensor<6x4xbf16>, tensor<6x2xbf16>) {
  %h:2 = nn.split %x {axis = 1 : i64, sizes = array<i64: 2, 2>} : (tensor<6x4xbf16>) -> (tensor<6x2xbf16>, tensor<6x2xbf16>)
  %n = nn.neg %h#1 : (tensor<6x2xbf16>) -> tensor<6x2xbf16>
  %r = nn.concat %n, %h#0 {axis = 1 : i64} : (tensor<6x2xbf16>, tensor<6x2xbf16>) -> tensor<6x4xbf16>
  return %r, %h#1 : tensor<6x4xbf16>, tensor<6x2xbf16>
}

// -----

// Not a rotate_half: the halves in the other order; halves of two
// different tensors; a slice that starts one element off.
// CHECK-LABEL: func.func @others
// CHECK-NOT: nn.rotate_half
// CHECK-COUNT-3: nn.concat
// EXPLAIN-NOT: remark
func.func @others(%x: tensor<2x8xf32>, %z: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %x1 = nn.slice %x {starts = array<i64: 0>, ends = array<i64: 4>, axes = array<i64: 1>, steps = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %x2 = nn.slice %x {starts = array<i64: 4>, ends = array<i64: 8>, axes = array<i64: 1>, steps = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = nn.neg %x2 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %a = nn.concat %x1, %n {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %z1 = nn.slice %z {starts = array<i64: 0>, ends = array<i64: 4>, axes = array<i64: 1>, steps = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %b = nn.concat %n, %z1 {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %x3 = nn.slice %x {starts = array<i64: 3>, ends = array<i64: 7>, axes = array<i64: 1>, steps = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %m = nn.neg %x3 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %c = nn.concat %m, %x1 {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  return %a, %b, %c : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}
