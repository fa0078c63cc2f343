// RUN: shard-opt %s -split-input-file -rt-fold-transposes-into-matmuls | FileCheck %s

// A linear layer's backward: dX = dY W^T and dW = X^T dY read W and X in
// place; the copies go.
// CHECK-LABEL: func.func @linear_backward
// CHECK-NOT: "transpose"
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1 : memref<8x4xf32>, memref<6x4xf32>) outs(%{{.*}} : memref<8x6xf32>) {params = {trans_b = true}}
// CHECK: rt.kernel "matmul" ins(%arg2, %arg0 : memref<8x6xf32>, memref<8x4xf32>) outs(%{{.*}} : memref<6x4xf32>) {params = {trans_a = true}}
// CHECK-NOT: "transpose"
func.func @linear_backward(%dy: memref<8x4xf32>, %w: memref<6x4xf32>, %x: memref<8x6xf32>) -> (memref<8x6xf32>, memref<6x4xf32>) {
  %wt = rt.alloc : memref<4x6xf32>
  rt.kernel "transpose" ins(%w : memref<6x4xf32>) outs(%wt : memref<4x6xf32>) {params = {perm = array<i64: 1, 0>}}
  %dx = rt.alloc : memref<8x6xf32>
  rt.kernel "matmul" ins(%dy, %wt : memref<8x4xf32>, memref<4x6xf32>) outs(%dx : memref<8x6xf32>)
  %xt = rt.alloc : memref<6x8xf32>
  rt.kernel "transpose" ins(%x : memref<8x6xf32>) outs(%xt : memref<6x8xf32>) {params = {perm = array<i64: 1, 0>}}
  %dw = rt.alloc : memref<6x4xf32>
  rt.kernel "matmul" ins(%xt, %dy : memref<6x8xf32>, memref<8x4xf32>) outs(%dw : memref<6x4xf32>)
  return %dx, %dw : memref<8x6xf32>, memref<6x4xf32>
}

// -----

// Batched (attention's P^T dO) and a gemm's flag flipped; a transpose that
// something else reads too stays for that reader.
// CHECK-LABEL: func.func @batched_and_gemm
// CHECK: rt.kernel "transpose" ins(%arg0
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1 : memref<2x3x5x7xf32>, memref<2x3x5x4xf32>) outs(%{{.*}} : memref<2x3x7x4xf32>) {params = {trans_a = true}}
// CHECK: rt.kernel "gemm" ins(%arg2, %arg3 : memref<4x6xf32>, memref<4x5xf32>) outs(%{{.*}} : memref<6x5xf32>) {params = {trans_a = false, trans_b = false}}
// CHECK: rt.kernel "exp" ins(%[[T:.*]] :
func.func @batched_and_gemm(%p: memref<2x3x5x7xf32>, %do: memref<2x3x5x4xf32>, %a: memref<4x6xf32>, %b: memref<4x5xf32>) -> (memref<2x3x7x4xf32>, memref<6x5xf32>, memref<2x3x7x5xf32>) {
  %pt = rt.alloc : memref<2x3x7x5xf32>
  rt.kernel "transpose" ins(%p : memref<2x3x5x7xf32>) outs(%pt : memref<2x3x7x5xf32>) {params = {perm = array<i64: 0, 1, 3, 2>}}
  %dv = rt.alloc : memref<2x3x7x4xf32>
  rt.kernel "matmul" ins(%pt, %do : memref<2x3x7x5xf32>, memref<2x3x5x4xf32>) outs(%dv : memref<2x3x7x4xf32>)
  %at = rt.alloc : memref<6x4xf32>
  rt.kernel "transpose" ins(%a : memref<4x6xf32>) outs(%at : memref<6x4xf32>) {params = {perm = array<i64: 1, 0>}}
  %c = rt.alloc : memref<6x5xf32>
  rt.kernel "gemm" ins(%at, %b : memref<6x4xf32>, memref<4x5xf32>) outs(%c : memref<6x5xf32>) {params = {trans_a = true, trans_b = false}}
  %e = rt.alloc : memref<2x3x7x5xf32>
  rt.kernel "exp" ins(%pt : memref<2x3x7x5xf32>) outs(%e : memref<2x3x7x5xf32>)
  return %dv, %c, %e : memref<2x3x7x4xf32>, memref<6x5xf32>, memref<2x3x7x5xf32>
}

// -----

// The transposed buffer is written between the transpose and the matmul
// (an optimizer's update of a weight): the copy is what the matmul must
// read, so it stays; so does a permutation that is not the last two
// dimensions swapped.
// CHECK-LABEL: func.func @kept
// CHECK: rt.kernel "transpose" ins(%arg0 : memref<4x6xf32>)
// CHECK: rt.kernel "matmul" ins(%arg1, %{{.*}} : memref<8x6xf32>, memref<6x4xf32>) outs
// CHECK-NOT: trans_b
// CHECK: rt.kernel "transpose" ins(%arg2 : memref<2x3x4xf32>) outs(%{{.*}} : memref<3x2x4xf32>)
func.func @kept(%w: memref<4x6xf32>, %x: memref<8x6xf32>, %y: memref<2x3x4xf32>, %z: memref<3x4x5xf32>, %arg4: memref<4x6xf32>) -> (memref<8x4xf32>, memref<3x2x5xf32>) {
  %wt = rt.alloc : memref<6x4xf32>
  rt.kernel "transpose" ins(%w : memref<4x6xf32>) outs(%wt : memref<6x4xf32>) {params = {perm = array<i64: 1, 0>}}
  rt.kernel "exp" ins(%arg4 : memref<4x6xf32>) outs(%w : memref<4x6xf32>)
  %o = rt.alloc : memref<8x4xf32>
  rt.kernel "matmul" ins(%x, %wt : memref<8x6xf32>, memref<6x4xf32>) outs(%o : memref<8x4xf32>)
  %yt = rt.alloc : memref<3x2x4xf32>
  rt.kernel "transpose" ins(%y : memref<2x3x4xf32>) outs(%yt : memref<3x2x4xf32>) {params = {perm = array<i64: 1, 0, 2>}}
  %r = rt.alloc : memref<3x2x5xf32>
  rt.kernel "matmul" ins(%yt, %z : memref<3x2x4xf32>, memref<3x4x5xf32>) outs(%r : memref<3x2x5xf32>)
  return %o, %r : memref<8x4xf32>, memref<3x2x5xf32>
}
