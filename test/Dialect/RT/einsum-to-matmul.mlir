// RUN: shard-opt %s -split-input-file -rt-einsum-to-matmul | FileCheck %s

// The megatron presets' fused projection: the rank's [K, 3, N] block of
// the weight viewed as [K, 3N], one matmul, its result viewed back. No copy.
// CHECK-LABEL: func.func @projection
// CHECK: %[[W:.*]] = rt.view %arg1 : memref<16x3x8xf32> to memref<16x24xf32>
// CHECK: %[[P:.*]] = rt.alloc : memref<2x5x24xf32>
// CHECK: rt.kernel "matmul" ins(%arg0, %[[W]] : memref<2x5x16xf32>, memref<16x24xf32>) outs(%[[P]] : memref<2x5x24xf32>)
// CHECK: %[[Y:.*]] = rt.view %[[P]] : memref<2x5x24xf32> to memref<2x5x3x8xf32>
// CHECK: return %[[Y]]
// CHECK-NOT: einsum
func.func @projection(%x: memref<2x5x16xf32>, %w: memref<16x3x8xf32>) -> memref<2x5x3x8xf32> {
  %y = rt.alloc : memref<2x5x3x8xf32>
  rt.kernel "einsum" ins(%x, %w : memref<2x5x16xf32>, memref<16x3x8xf32>) outs(%y : memref<2x5x3x8xf32>) {params = {equation = "...a,abc->...bc"}}
  return %y : memref<2x5x3x8xf32>
}

// -----

// Attention scores: the keys transposed to [b, h, d, k], one batched matmul
// whose [b*h, q, k] product is the output already.
// CHECK-LABEL: func.func @scores
// CHECK: rt.kernel "transpose" ins(%arg1 : memref<2x3x7x8xbf16>) outs(%{{.*}} : memref<2x3x8x7xbf16>) {params = {perm = array<i64: 0, 1, 3, 2>}}
// CHECK: rt.kernel "matmul" ins(%{{.*}}, %{{.*}} : memref<6x5x8xbf16>, memref<6x8x7xbf16>) outs(%[[P:.*]] : memref<6x5x7xbf16>)
// CHECK: %[[Y:.*]] = rt.view %[[P]] : memref<6x5x7xbf16> to memref<2x3x5x7xbf16>
// CHECK: return %[[Y]]
// CHECK-NOT: einsum
func.func @scores(%q: memref<2x3x5x8xbf16>, %k: memref<2x3x7x8xbf16>) -> memref<2x3x5x7xbf16> {
  %s = rt.alloc : memref<2x3x5x7xbf16>
  rt.kernel "einsum" ins(%q, %k : memref<2x3x5x8xbf16>, memref<2x3x7x8xbf16>) outs(%s : memref<2x3x5x7xbf16>) {params = {equation = "bhqd,bhkd->bhqk"}}
  return %s : memref<2x3x5x7xbf16>
}

// -----

// The product in [b, m, n] order, transposed into the output's [n, b, m].
// CHECK-LABEL: func.func @output_order
// CHECK: rt.kernel "matmul" ins(%{{.*}}, %{{.*}} : memref<2x3x4xf32>, memref<2x4x5xf32>) outs(%{{.*}} : memref<2x3x5xf32>)
// CHECK: rt.kernel "transpose" ins(%{{.*}} : memref<2x3x5xf32>) outs(%{{.*}} : memref<5x2x3xf32>) {params = {perm = array<i64: 2, 0, 1>}}
// CHECK-NOT: einsum
func.func @output_order(%a: memref<2x3x4xf32>, %b: memref<2x4x5xf32>) -> memref<5x2x3xf32> {
  %y = rt.alloc : memref<5x2x3xf32>
  rt.kernel "einsum" ins(%a, %b : memref<2x3x4xf32>, memref<2x4x5xf32>) outs(%y : memref<5x2x3xf32>) {params = {equation = "bmk,bkn->nbm"}}
  return %y : memref<5x2x3xf32>
}

// -----

// Not matmuls: a label summed within one operand, a diagonal, an integer
// product, f64, three operands. They stay einsums.
// CHECK-LABEL: func.func @stay
// CHECK-COUNT-5: rt.kernel "einsum"
// CHECK-NOT: rt.kernel "matmul"
func.func @stay(%a: memref<3x4xf32>, %b: memref<4x5xf32>, %d: memref<4x4xf32>, %i: memref<3x4xi32>, %j: memref<4x5xi32>, %e: memref<3x4xf64>, %f: memref<4x5xf64>) -> (memref<5xf32>, memref<4xf32>, memref<3x5xi32>, memref<3x5xf64>, memref<3x5xf32>) {
  %s = rt.alloc : memref<5xf32>
  rt.kernel "einsum" ins(%a, %b : memref<3x4xf32>, memref<4x5xf32>) outs(%s : memref<5xf32>) {params = {equation = "ij,jk->k"}}
  %g = rt.alloc : memref<4xf32>
  rt.kernel "einsum" ins(%d, %d : memref<4x4xf32>, memref<4x4xf32>) outs(%g : memref<4xf32>) {params = {equation = "ii,ij->j"}}
  %n = rt.alloc : memref<3x5xi32>
  rt.kernel "einsum" ins(%i, %j : memref<3x4xi32>, memref<4x5xi32>) outs(%n : memref<3x5xi32>) {params = {equation = "ij,jk->ik"}}
  %x = rt.alloc : memref<3x5xf64>
  rt.kernel "einsum" ins(%e, %f : memref<3x4xf64>, memref<4x5xf64>) outs(%x : memref<3x5xf64>) {params = {equation = "ij,jk->ik"}}
  %t = rt.alloc : memref<3x5xf32>
  rt.kernel "einsum" ins(%a, %b, %b : memref<3x4xf32>, memref<4x5xf32>, memref<4x5xf32>) outs(%t : memref<3x5xf32>) {params = {equation = "ij,jk,jk->ik"}}
  return %s, %g, %n, %x, %t : memref<5xf32>, memref<4xf32>, memref<3x5xi32>, memref<3x5xf64>, memref<3x5xf32>
}
