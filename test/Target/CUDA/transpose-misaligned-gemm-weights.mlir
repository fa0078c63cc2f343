// A 2-D GEMM weight [K, N] whose rows are not 16-byte aligned while its
// columns would be is loaded transposed (permutation = [1, 0]) and read
// with trans_b; any other weight keeps its layout. The epilogue and output
// cast fusions run first, as in cuda-codegen-pipeline.
// (pad-misaligned-gemm-results.mlir: the misaligned logits of the first
// case are padded too, by default.)
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-fuse-gemm-epilogues -cuda-fuse-gemm-output-casts -cuda-transpose-misaligned-gemm-weights | FileCheck %s

// GPT-2's vocabulary projection: 50257 bf16 columns (100514 bytes a row),
// 64 rows of it; the f32 cast of the product folds into the GEMM too.
// CHECK-LABEL: func.func @vocabulary
// CHECK: %[[W:.*]] = rt.weight "lm_head" {{{.*}}permutation = array<i64: 1, 0>{{.*}}} : memref<50257x64xbf16>
// CHECK: rt.kernel "matmul" ins(%arg0, %[[W]] : memref<2x8x64xbf16>, memref<50257x64xbf16>) outs(%{{.*}} : memref<2x8x50257xf32>) {params = {trans_b = true}}
func.func @vocabulary(%x: tensor<2x8x64xbf16>) -> tensor<2x8x50257xf32> {
  %w = nn.weight "lm_head" {storage = "external", file = "m.data", offset = 0 : i64, size = 6432896 : i64} : tensor<64x50257xbf16>
  %m = nn.matmul %x, %w : (tensor<2x8x64xbf16>, tensor<64x50257xbf16>) -> tensor<2x8x50257xbf16>
  %c = nn.cast %m {to = f32} : (tensor<2x8x50257xbf16>) -> tensor<2x8x50257xf32>
  return %c : tensor<2x8x50257xf32>
}

// -----

// Two GEMMs share the weight (one with a bias epilogue, which keeps its
// epilogue); a sliced f32 weight converted to f16 at load keeps its
// global shape and starts in the file's order.
// CHECK-LABEL: func.func @shared_and_sliced
// CHECK: %[[W:.*]] = rt.weight "w" {{{.*}}permutation = array<i64: 1, 0>{{.*}}} : memref<5x8xf32>
// CHECK: rt.kernel "matmul" ins(%arg0, %[[W]] : memref<4x8xf32>, memref<5x8xf32>) outs(%{{.*}} : memref<4x5xf32>) {params = {trans_b = true}}
// CHECK: rt.kernel "matmul" ins(%arg0, %[[W]], %arg1 : memref<4x8xf32>, memref<5x8xf32>, memref<5xf32>) outs(%{{.*}} : memref<4x5xf32>) {params = {epilogue = "bias", trans_b = true}}
// CHECK: %[[S:.*]] = rt.weight "s" {{{.*}}global_shape = array<i64: 16, 10>, {{.*}}permutation = array<i64: 1, 0>, {{.*}}source_type = f32, starts = [array<i64: 0, 5>]{{.*}}} : memref<5x16xf16>
// CHECK: rt.kernel "matmul" ins(%arg2, %[[S]] : memref<4x16xf16>, memref<5x16xf16>) outs(%{{.*}} : memref<4x5xf16>) {params = {trans_b = true}}
func.func @shared_and_sliced(%x: tensor<4x8xf32>, %b: tensor<5xf32>, %h: tensor<4x16xf16>) -> (tensor<4x5xf32>, tensor<4x5xf32>, tensor<4x5xf16>) {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 160 : i64} : tensor<8x5xf32>
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  %m2 = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  %a = nn.add %m2, %b : (tensor<4x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  %s = nn.weight "s" {storage = "external", file = "m.data", offset = 256 : i64, size = 640 : i64, global_shape = array<i64: 16, 10>, starts = [array<i64: 0, 5>]} : tensor<16x5xf32>
  %s16 = nn.cast %s {to = f16} : (tensor<16x5xf32>) -> tensor<16x5xf16>
  %m3 = nn.matmul %h, %s16 : (tensor<4x16xf16>, tensor<16x5xf16>) -> tensor<4x5xf16>
  return %m, %a, %m3 : tensor<4x5xf32>, tensor<4x5xf32>, tensor<4x5xf16>
}

// -----

// Kept: aligned rows (8 f32 = 32 bytes); rows and columns both misaligned
// (nothing to gain); a weight another kernel reads too; a weight as the
// first operand; a 3-D weight.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: permutation
// CHECK-NOT: trans_b
// CHECK: return
func.func @kept(%x: tensor<4x8xf32>, %x3: tensor<4x3xf32>, %y: tensor<5x4xf32>, %z: tensor<2x4x8xf32>) -> (tensor<4x8xf32>, tensor<4x5xf32>, tensor<4x5xf32>, tensor<8x5xf32>, tensor<5x8xf32>, tensor<2x4x5xf32>) {
  %aligned = nn.weight "aligned" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m0 = nn.matmul %x, %aligned : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %both = nn.weight "both" {storage = "external", file = "m.data", offset = 256 : i64, size = 60 : i64} : tensor<3x5xf32>
  %m1 = nn.matmul %x3, %both : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  %shared = nn.weight "shared" {storage = "external", file = "m.data", offset = 512 : i64, size = 160 : i64} : tensor<8x5xf32>
  %m2 = nn.matmul %x, %shared : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  %r = nn.relu %shared : (tensor<8x5xf32>) -> tensor<8x5xf32>
  %first = nn.weight "first" {storage = "external", file = "m.data", offset = 1024 : i64, size = 80 : i64} : tensor<5x4xf32>
  %m3 = nn.matmul %first, %x : (tensor<5x4xf32>, tensor<4x8xf32>) -> tensor<5x8xf32>
  %w3 = nn.weight "three" {storage = "external", file = "m.data", offset = 2048 : i64, size = 320 : i64} : tensor<2x8x5xf32>
  %m4 = nn.matmul %z, %w3 : (tensor<2x4x8xf32>, tensor<2x8x5xf32>) -> tensor<2x4x5xf32>
  return %m0, %m1, %m2, %r, %m3, %m4 : tensor<4x8xf32>, tensor<4x5xf32>, tensor<4x5xf32>, tensor<8x5xf32>, tensor<5x8xf32>, tensor<2x4x5xf32>
}

// -----

// An ONNX Transpose of a [N, K] initializer is loaded transposed by
// convert-nn-to-rt; with misaligned N, this pass takes it back to the
// stored order and reads it with trans_b.
// CHECK-LABEL: func.func @transposed_initializer
// CHECK: %[[W:.*]] = rt.weight "emb" {file = "m.data", offset = 0 : i64, size = 6432896 : i64, storage = "external"} : memref<50257x64xbf16>
// CHECK: rt.kernel "matmul" ins(%arg0, %[[W]] : memref<16x64xbf16>, memref<50257x64xbf16>) outs(%{{.*}} : memref<16x50257xbf16>) {params = {trans_b = true}}
func.func @transposed_initializer(%x: tensor<16x64xbf16>) -> tensor<16x50257xbf16> {
  %w = nn.weight "emb" {storage = "external", file = "m.data", offset = 0 : i64, size = 6432896 : i64} : tensor<50257x64xbf16>
  %t = nn.transpose %w {perm = array<i64: 1, 0>} : (tensor<50257x64xbf16>) -> tensor<64x50257xbf16>
  %y = nn.matmul %x, %t : (tensor<16x64xbf16>, tensor<64x50257xbf16>) -> tensor<16x50257xbf16>
  return %y : tensor<16x50257xbf16>
}
