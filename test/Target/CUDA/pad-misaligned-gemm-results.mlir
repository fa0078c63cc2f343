// A plain GEMM of a 2-D weight whose result rows are not 16-byte aligned
// writes a result padded to aligned rows (a multiple of 64 columns, 8 below
// 1024), the weight read at the padded width (zero_padded: a slice of the
// stored tensor that may reach past it). A result the function returns is
// returned padded, its rt.columns saying how much of each row is the
// output; any other gets a slice that copies the real columns out.
// Without the pass the result stays as it is. The rewrites before it in
// cuda-codegen-pipeline run first (the f32 cast and the transposed weight
// of the first case, the bias epilogue of the last).
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-fuse-gemm-epilogues -cuda-fuse-gemm-output-casts -cuda-transpose-misaligned-gemm-weights -cuda-pad-misaligned-gemm-results | FileCheck %s
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-fuse-gemm-epilogues -cuda-fuse-gemm-output-casts -cuda-transpose-misaligned-gemm-weights | FileCheck %s --check-prefix=OFF

// GPT-2's vocabulary projection with f32 logits: 50257 columns (201028
// bytes a row) become 50304; the weight, stored [64, 50257] and loaded
// transposed, is read as its [64, 50304] block from the origin.
// The logits are returned: no slice, the padded buffer is the result.
// CHECK-LABEL: func.func @vocabulary
// CHECK-SAME: -> (memref<2x8x50304xf32> {rt.columns = 50257 : i64})
// CHECK: %[[W:.*]] = rt.weight "lm_head" {{{.*}}global_shape = array<i64: 64, 50257>, {{.*}}permutation = array<i64: 1, 0>, {{.*}}starts = [array<i64: 0, 0>], {{.*}}zero_padded} : memref<50304x64xbf16>
// CHECK-NOT: rt.alloc : memref<2x8x50257xf32>
// CHECK: %[[P:.*]] = rt.alloc : memref<2x8x50304xf32>
// CHECK: rt.kernel "matmul" ins(%arg0, %[[W]] : memref<2x8x64xbf16>, memref<50304x64xbf16>) outs(%[[P]] : memref<2x8x50304xf32>) {params = {trans_b = true}}
// CHECK-NOT: "slice"
// CHECK: return %[[P]]
// OFF-LABEL: func.func @vocabulary
// OFF-SAME: -> memref<2x8x50257xf32>
// OFF: rt.weight "lm_head" {{{.*}}permutation = array<i64: 1, 0>{{.*}}} : memref<50257x64xbf16>
// OFF-NOT: zero_padded
// OFF: rt.kernel "matmul" {{.*}} outs(%{{.*}} : memref<2x8x50257xf32>) {params = {trans_b = true}}
// OFF-NOT: "slice"
func.func @vocabulary(%x: tensor<2x8x64xbf16>) -> tensor<2x8x50257xf32> {
  %w = nn.weight "lm_head" {storage = "external", file = "m.data", offset = 0 : i64, size = 6432896 : i64} : tensor<64x50257xbf16>
  %m = nn.matmul %x, %w : (tensor<2x8x64xbf16>, tensor<64x50257xbf16>) -> tensor<2x8x50257xbf16>
  %c = nn.cast %m {to = f32} : (tensor<2x8x50257xbf16>) -> tensor<2x8x50257xf32>
  return %c : tensor<2x8x50257xf32>
}

// -----

// A vocabulary split over two ranks: each rank's [64, 25129] block (the
// stored tensor padded to 50258 columns) is read 25152 wide. Rank 0's
// extra columns are rank 1's first ones: they only make result columns
// that the slice leaves out (a relu reads the product, so it is packed by
// a slice). A weight whose result rows are misaligned but whose rows are
// not (K misaligned too) is padded in its own layout; its product is
// returned, padded, as the second result.
// CHECK-LABEL: func.func @sharded
// CHECK-SAME: -> (memref<8x25129xbf16>, memref<8x1008xf32> {rt.columns = 1001 : i64})
// CHECK: %[[W:.*]] = rt.weight "lm_head" {{{.*}}global_shape = array<i64: 64, 50257>, {{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 25129>], {{.*}}zero_padded} : memref<25152x64xbf16>
// CHECK: rt.kernel "matmul" {{.*}} outs(%[[P:.*]] : memref<8x25152xbf16>) {params = {trans_b = true}}
// CHECK: rt.kernel "slice" ins(%[[P]] : memref<8x25152xbf16>) outs(%{{.*}} : memref<8x25129xbf16>) {params = {axes = array<i64: 1>, ends = array<i64: 25129>, starts = array<i64: 0>, steps = array<i64: 1>}}
// CHECK: %[[V:.*]] = rt.weight "odd" {{{.*}}global_shape = array<i64: 3, 1001>, {{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 0>], {{.*}}zero_padded} : memref<3x1008xf32>
// CHECK: rt.kernel "matmul" ins(%arg1, %[[V]] : memref<8x3xf32>, memref<3x1008xf32>) outs(%[[Q:.*]] : memref<8x1008xf32>)
// CHECK-NOT: params
// CHECK: return %{{.*}}, %[[Q]] : memref<8x25129xbf16>, memref<8x1008xf32>
func.func @sharded(%x: tensor<8x64xbf16>, %z: tensor<8x3xf32>) -> (tensor<8x25129xbf16>, tensor<8x1001xf32>) attributes {rt.world_size = 2 : i64} {
  %w = nn.weight "lm_head" {storage = "external", file = "m.data", offset = 0 : i64, size = 6432896 : i64, global_shape = array<i64: 64, 50257>, starts = [array<i64: 0, 0>, array<i64: 0, 25129>], stored_shape = array<i64: 64, 50257>} : tensor<64x25129xbf16>
  %m = nn.matmul %x, %w : (tensor<8x64xbf16>, tensor<64x25129xbf16>) -> tensor<8x25129xbf16>
  %mr = nn.relu %m : (tensor<8x25129xbf16>) -> tensor<8x25129xbf16>
  %v = nn.weight "odd" {storage = "external", file = "m.data", offset = 0 : i64, size = 12012 : i64} : tensor<3x1001xf32>
  %n = nn.matmul %z, %v : (tensor<8x3xf32>, tensor<3x1001xf32>) -> tensor<8x1001xf32>
  return %mr, %n : tensor<8x25129xbf16>, tensor<8x1001xf32>
}

// -----

// Left as they are: aligned result rows, fewer than 64 columns, a bias
// epilogue (the bias would need padding too), a weight another op reads.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: zero_padded
// CHECK-NOT: "slice"
// CHECK: return
func.func @kept(%x: tensor<8x64xf32>, %b: tensor<101xf32>) -> (tensor<8x1000xf32>, tensor<8x63xf32>, tensor<8x101xf32>, tensor<8x101xf32>, tensor<64x101xf32>) {
  %a = nn.weight "aligned" {storage = "external", file = "m.data", offset = 0 : i64, size = 256000 : i64} : tensor<64x1000xf32>
  %m1 = nn.matmul %x, %a : (tensor<8x64xf32>, tensor<64x1000xf32>) -> tensor<8x1000xf32>
  %s = nn.weight "small" {storage = "external", file = "m.data", offset = 0 : i64, size = 16128 : i64} : tensor<64x63xf32>
  %m2 = nn.matmul %x, %s : (tensor<8x64xf32>, tensor<64x63xf32>) -> tensor<8x63xf32>
  %w = nn.weight "biased" {storage = "external", file = "m.data", offset = 0 : i64, size = 25856 : i64} : tensor<64x101xf32>
  %m3 = nn.matmul %x, %w : (tensor<8x64xf32>, tensor<64x101xf32>) -> tensor<8x101xf32>
  %m4 = nn.add %m3, %b : (tensor<8x101xf32>, tensor<101xf32>) -> tensor<8x101xf32>
  %u = nn.weight "used" {storage = "external", file = "m.data", offset = 0 : i64, size = 25856 : i64} : tensor<64x101xf32>
  %m5 = nn.matmul %x, %u : (tensor<8x64xf32>, tensor<64x101xf32>) -> tensor<8x101xf32>
  %r = nn.relu %u : (tensor<64x101xf32>) -> tensor<64x101xf32>
  return %m1, %m2, %m4, %m5, %r : tensor<8x1000xf32>, tensor<8x63xf32>, tensor<8x101xf32>, tensor<8x101xf32>, tensor<64x101xf32>
}
