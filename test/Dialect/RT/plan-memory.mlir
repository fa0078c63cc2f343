// RUN: shard-opt %s -rt-plan-memory -split-input-file | FileCheck %s

// A chain: each buffer dies once the next kernel has read it, so the plan
// ping-pongs between two slots.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: attributes {rt.peak_bytes = 8192 : i64}
// CHECK: rt.alloc {offset = 0 : i64}
// CHECK: rt.alloc {offset = 4096 : i64}
// CHECK: rt.alloc {offset = 0 : i64}
// CHECK: rt.alloc {offset = 4096 : i64}
func.func @chain(%x: memref<1024xf32>) -> memref<1024xf32> {
  %a = rt.alloc : memref<1024xf32>
  rt.kernel "relu" ins(%x : memref<1024xf32>) outs(%a : memref<1024xf32>)
  %b = rt.alloc : memref<1024xf32>
  rt.kernel "exp" ins(%a : memref<1024xf32>) outs(%b : memref<1024xf32>)
  %c = rt.alloc : memref<1024xf32>
  rt.kernel "tanh" ins(%b : memref<1024xf32>) outs(%c : memref<1024xf32>)
  %d = rt.alloc : memref<1024xf32>
  rt.kernel "neg" ins(%c : memref<1024xf32>) outs(%d : memref<1024xf32>)
  return %d : memref<1024xf32>
}

// -----

// A view keeps its source alive until the view's last use; a residual
// connection keeps %a alive across the block.
// CHECK-LABEL: func.func @views_and_residuals
// CHECK-SAME: attributes {rt.peak_bytes = 12288 : i64}
// CHECK: %[[A:.*]] = rt.alloc {offset = 0 : i64}
// CHECK: %[[B:.*]] = rt.alloc {offset = 4096 : i64}
// CHECK: %[[C:.*]] = rt.alloc {offset = 8192 : i64}
// CHECK: %[[D:.*]] = rt.alloc {offset = 4096 : i64}
func.func @views_and_residuals(%x: memref<1024xf32>) -> memref<1024xf32> {
  %a = rt.alloc : memref<1024xf32>
  rt.kernel "relu" ins(%x : memref<1024xf32>) outs(%a : memref<1024xf32>)
  %b = rt.alloc : memref<1024xf32>
  rt.kernel "exp" ins(%a : memref<1024xf32>) outs(%b : memref<1024xf32>)
  %bv = rt.view %b : memref<1024xf32> to memref<32x32xf32>
  %c = rt.alloc : memref<32x32xf32>
  rt.kernel "softmax" ins(%bv : memref<32x32xf32>) outs(%c : memref<32x32xf32>) {params = {axis = 1 : i64}}
  %cv = rt.view %c : memref<32x32xf32> to memref<1024xf32>
  %d = rt.alloc : memref<1024xf32>
  rt.kernel "add" ins(%cv, %a : memref<1024xf32>, memref<1024xf32>) outs(%d : memref<1024xf32>)
  return %d : memref<1024xf32>
}

// -----

// Returned buffers live to the end; sizes differ and alignment is 64 bytes.
// CHECK-LABEL: func.func @returned_and_aligned
// CHECK-SAME: attributes {rt.peak_bytes = 192 : i64}
// CHECK: rt.alloc {offset = 0 : i64} : memref<3xf32>
// CHECK: rt.alloc {offset = 64 : i64} : memref<5xf32>
// CHECK: rt.alloc {offset = 128 : i64} : memref<2xf32>
func.func @returned_and_aligned(%x: memref<3xf32>) -> (memref<3xf32>, memref<2xf32>) {
  %a = rt.alloc : memref<3xf32>
  rt.kernel "relu" ins(%x : memref<3xf32>) outs(%a : memref<3xf32>)
  %b = rt.alloc : memref<5xf32>
  rt.kernel "pad" ins(%a : memref<3xf32>) outs(%b : memref<5xf32>) {params = {pads = array<i64: 1, 1>}}
  %c = rt.alloc : memref<2xf32>
  rt.kernel "slice" ins(%b : memref<5xf32>) outs(%c : memref<2xf32>)
  return %a, %c : memref<3xf32>, memref<2xf32>
}
