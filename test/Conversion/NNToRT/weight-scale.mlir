// A product of a float weight (or of its folded cast) by a scalar constant
// folds into the rt.weight, which the runtime multiplies at load (`scale`,
// in f64, rounded once): a bias each of n ranks adds 1/n of, in a parallel
// block's partial sums (test/Dialect/Dist/partial-sums.mlir).
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt | FileCheck %s

// CHECK-LABEL: func.func @folded
// CHECK-NOT: rt.constant
// CHECK-NOT: rt.kernel "mul"
// CHECK: %[[B:.*]] = rt.weight "b" {file = "m.data", offset = 0 : i64, scale = 5.000000e-01 : f64, size = 32 : i64, storage = "external"} : memref<8xf32>
// CHECK: rt.kernel "add" ins(%{{.*}}, %[[B]] : memref<2x8xf32>, memref<8xf32>)
// CHECK: %[[C:.*]] = rt.weight "c" {{{.*}}scale = -2.500000e-01 : f64{{.*}}source_type = f32{{.*}}} : memref<8xbf16>
// CHECK-NOT: rt.weight
// CHECK-NOT: rt.kernel "mul"
// CHECK: rt.kernel "add" ins(%{{.*}}, %[[C]] : memref<2x8xbf16>, memref<8xbf16>)
func.func @folded(%x: tensor<2x8xf32>, %y: tensor<2x8xbf16>) -> (tensor<2x8xf32>, tensor<2x8xbf16>) {
  %b = nn.weight "b" {storage = "external", file = "m.data", offset = 0 : i64, size = 32 : i64} : tensor<8xf32>
  %h = nn.constant dense<5.000000e-01> : tensor<f32>
  %bh = nn.mul %b, %h : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %s = nn.add %x, %bh : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %c = nn.weight "c" {storage = "external", file = "m.data", offset = 32 : i64, size = 32 : i64} : tensor<8xf32>
  %cl = nn.cast %c {to = bf16} : (tensor<8xf32>) -> tensor<8xbf16>
  %q = nn.constant dense<-2.500000e-01> : tensor<bf16>
  %cq = nn.mul %q, %cl : (tensor<bf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %t = nn.add %y, %cq : (tensor<2x8xbf16>, tensor<8xbf16>) -> tensor<2x8xbf16>
  return %s, %t : tensor<2x8xf32>, tensor<2x8xbf16>
}

// -----

// Not folded: a product that broadcasts the weight, one by a constant that
// is not a scalar, and one of an integer weight stay kernels; a weight also
// read unscaled keeps its own buffer.
// CHECK-LABEL: func.func @kept
// CHECK-DAG: %[[W:.*]] = rt.weight "w" {{{.*}}storage = "external"} : memref<8xf32>
// CHECK-DAG: rt.weight "w" {{{.*}}scale = 2.000000e+00 : f64{{.*}}} : memref<8xf32>
// CHECK-DAG: rt.kernel "mul" ins(%[[W]], %{{.*}} : memref<8xf32>, memref<2x8xf32>)
// CHECK-DAG: rt.kernel "mul" ins(%[[W]], %{{.*}} : memref<8xf32>, memref<8xf32>)
// CHECK-DAG: rt.kernel "mul" ins(%{{.*}}, %{{.*}} : memref<8xi64>, memref<i64>)
func.func @kept() -> (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xi64>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 32 : i64} : tensor<8xf32>
  %wide = nn.constant dense<2.000000e+00> : tensor<2x8xf32>
  %a = nn.mul %w, %wide : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %v = nn.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>
  %b = nn.mul %w, %v : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %c = nn.mul %w, %two : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %i = nn.weight "i" {storage = "external", file = "m.data", offset = 64 : i64, size = 64 : i64} : tensor<8xi64>
  %k = nn.constant dense<3> : tensor<i64>
  %d = nn.mul %i, %k : (tensor<8xi64>, tensor<i64>) -> tensor<8xi64>
  return %a, %b, %c, %w, %d : tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xi64>
}
