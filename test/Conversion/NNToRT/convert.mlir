// RUN: shard-opt %s -convert-nn-to-rt | FileCheck %s
// RUN: shard-opt %s -convert-nn-to-rt -rt-plan-memory | FileCheck %s --check-prefix=PLAN

// CHECK-LABEL: func.func @main(%arg0: memref<2x8xf32> {nn.name = "x"}) -> (memref<2x4xf32> {nn.name = "y"}, memref<2x2x2xf32> {nn.name = "z"})
// CHECK: %[[W:.*]] = rt.weight "fc.w" {file = "m.data", offset = 0 : i64, size = 128 : i64, storage = "external"} : memref<8x4xf32>
// CHECK: %[[B:.*]] = rt.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32> : memref<4xf32>
// CHECK: %[[MM:.*]] = rt.alloc : memref<2x4xf32>
// CHECK: rt.kernel "matmul" ins(%arg0, %[[W]] : memref<2x8xf32>, memref<8x4xf32>) outs(%[[MM]] : memref<2x4xf32>)
// CHECK: %[[ADD:.*]] = rt.alloc : memref<2x4xf32>
// CHECK: rt.kernel "add" ins(%[[MM]], %[[B]] : memref<2x4xf32>, memref<4xf32>) outs(%[[ADD]] : memref<2x4xf32>)
// CHECK: %[[SM:.*]] = rt.alloc : memref<2x4xf32>
// CHECK: rt.kernel "softmax" ins(%[[ADD]] : memref<2x4xf32>) outs(%[[SM]] : memref<2x4xf32>) {params = {axis = 1 : i64}}
// CHECK: %[[V:.*]] = rt.view %[[SM]] : memref<2x4xf32> to memref<2x2x2xf32>
// CHECK: return %[[SM]], %[[V]]

// The matmul result is dead once the add has read it, so softmax's output
// takes its place.
// PLAN: attributes {rt.peak_bytes = 128 : i64}
// PLAN: rt.alloc {offset = 0 : i64}
// PLAN: rt.alloc {offset = 64 : i64}
// PLAN: rt.alloc {offset = 0 : i64}
func.func @main(%x: tensor<2x8xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"}, tensor<2x2x2xf32> {nn.name = "z"}) {
  %w = nn.weight "fc.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 128 : i64} : tensor<8x4xf32>
  %b = nn.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %mm = nn.matmul %x, %w : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %add = nn.add %mm, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %sm = nn.softmax %add {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %v = nn.reshape %sm : (tensor<2x4xf32>) -> tensor<2x2x2xf32>
  return %sm, %v : tensor<2x4xf32>, tensor<2x2x2xf32>
}
