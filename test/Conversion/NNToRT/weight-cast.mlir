// Mixed precision: an nn.cast between float types of an nn.weight folds
// into the rt.weight, which keeps the file's element type as source_type
// (the runtime converts at load). test/Target/artifact-source-dtype.mlir
// checks the artifact form.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt | FileCheck %s

// CHECK-LABEL: func.func @folded
// CHECK: %[[W:.*]] = rt.weight "fc.w" {file = "m.data", offset = 0 : i64, size = 128 : i64, source_type = f32, storage = "external"} : memref<8x4xbf16>
// CHECK-NOT: rt.weight
// CHECK-NOT: rt.kernel "cast" ins(%[[W]]
// CHECK: rt.kernel "matmul" ins(%{{.*}}, %[[W]] : memref<2x8xbf16>, memref<8x4xbf16>)
func.func @folded(%x: tensor<2x8xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"}) {
  %xl = nn.cast %x {to = bf16} : (tensor<2x8xf32>) -> tensor<2x8xbf16>
  %w = nn.weight "fc.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 128 : i64} : tensor<8x4xf32>
  %wl = nn.cast %w {to = bf16} : (tensor<8x4xf32>) -> tensor<8x4xbf16>
  %mm = nn.matmul %xl, %wl : (tensor<2x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4xbf16>
  %y = nn.cast %mm {to = f32} : (tensor<2x4xbf16>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// A weight also read in f32 keeps its f32 buffer beside the converted one;
// a sliced weight keeps its slice table (which describes the f32 file).
dist.mesh @mesh ["tp"=2]
// CHECK-LABEL: func.func @both_and_sliced
// CHECK-DAG: rt.weight "w" {{{.*}}storage = "external"} : memref<8x4xf32>
// CHECK-DAG: rt.weight "w" {{{.*}}source_type = f32{{.*}}} : memref<8x4xf16>
// CHECK-DAG: rt.weight "s" {{{.*}}global_shape = array<i64: 8, 4>, {{.*}}source_type = f32, starts = [array<i64: 0, 0>, array<i64: 4, 0>]{{.*}}} : memref<4x4xf16>
func.func @both_and_sliced(%x: tensor<2x8xf32>, %y: tensor<2x4xf16>) -> (tensor<2x4xf32>, tensor<2x4xf16>, tensor<4x4xf16>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 128 : i64} : tensor<8x4xf32>
  %a = nn.matmul %x, %w : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %wl = nn.cast %w {to = f16} : (tensor<8x4xf32>) -> tensor<8x4xf16>
  %xl = nn.cast %x {to = f16} : (tensor<2x8xf32>) -> tensor<2x8xf16>
  %b = nn.matmul %xl, %wl : (tensor<2x8xf16>, tensor<8x4xf16>) -> tensor<2x4xf16>
  %s = nn.weight "s" {storage = "external", file = "m.data", offset = 128 : i64, size = 128 : i64, global_shape = array<i64: 8, 4>, starts = [array<i64: 0, 0>, array<i64: 4, 0>]} : tensor<4x4xf32>
  %sl = nn.cast %s {to = f16} : (tensor<4x4xf32>) -> tensor<4x4xf16>
  return %a, %b, %sl : tensor<2x4xf32>, tensor<2x4xf16>, tensor<4x4xf16>
}

// -----

// An integer weight cast to float is not a conversion the loader does: the
// cast stays a kernel.
// CHECK-LABEL: func.func @integer_weight
// CHECK: %[[W:.*]] = rt.weight "ids" {{.*}} : memref<300xi64>
// CHECK: rt.kernel "cast" ins(%[[W]] : memref<300xi64>)
func.func @integer_weight() -> tensor<300xf32> {
  %w = nn.weight "ids" {storage = "external", file = "m.data", offset = 0 : i64, size = 2400 : i64} : tensor<300xi64>
  %c = nn.cast %w {to = f32} : (tensor<300xi64>) -> tensor<300xf32>
  return %c : tensor<300xf32>
}
