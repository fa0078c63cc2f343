// convert-rt-to-gpu only groups and emits: a kernel that one of the CUDA
// rt rewrites turns into kernels it handles (cuda-codegen-pipeline runs
// them first) is refused, with a note naming that rewrite.
// RUN: shard-opt %s -split-input-file -verify-diagnostics -convert-rt-to-gpu

func.func @conv(%x: memref<1x4x8x8xf32>, %w: memref<6x4x3x3xf32>) -> memref<1x6x6x6xf32> {
  %y = rt.alloc : memref<1x6x6x6xf32>
  // expected-error @+2 {{kernel 'conv' has no CUDA implementation yet (neither generated code nor a runtime kernel); compile with --target cpu}}
  // expected-note @+1 {{cuda-lower-convolutions rewrites the 'conv' kernels it can into ones that have one; cuda-codegen-pipeline runs it before convert-rt-to-gpu}}
  rt.kernel "conv" ins(%x, %w : memref<1x4x8x8xf32>, memref<6x4x3x3xf32>) outs(%y : memref<1x6x6x6xf32>)
  return %y : memref<1x6x6x6xf32>
}

// -----

func.func @scatter_nd(%x: memref<4x3xf32>, %i: memref<2x1xi64>, %u: memref<2x3xf32>) -> memref<4x3xf32> {
  %y = rt.alloc : memref<4x3xf32>
  // expected-error @+2 {{kernel 'scatter_nd' has no CUDA implementation yet}}
  // expected-note @+1 {{cuda-split-scatters rewrites the 'scatter_nd' kernels it can}}
  rt.kernel "scatter_nd" ins(%x, %i, %u : memref<4x3xf32>, memref<2x1xi64>, memref<2x3xf32>) outs(%y : memref<4x3xf32>)
  return %y : memref<4x3xf32>
}

// -----

func.func @training_dropout(%x: memref<2x4xf32>) -> (memref<2x4xf32>, memref<2x4xi1>) {
  %y = rt.alloc : memref<2x4xf32>
  %m = rt.alloc : memref<2x4xi1>
  // expected-error @+2 {{kernel 'training_dropout' has no CUDA implementation yet}}
  // expected-note @+1 {{cuda-precompute-dropout-masks rewrites the 'training_dropout' kernels it can}}
  rt.kernel "training_dropout" ins(%x : memref<2x4xf32>) outs(%y, %m : memref<2x4xf32>, memref<2x4xi1>) {params = {ratio = 0.5 : f32, seed = 3 : i64}}
  return %y, %m : memref<2x4xf32>, memref<2x4xi1>
}

// -----

func.func @integer_matmul(%a: memref<3x4xi64>, %b: memref<4x5xi64>) -> memref<3x5xi64> {
  %c = rt.alloc : memref<3x5xi64>
  // expected-error @+2 {{kernel 'matmul' of 'i64' has no CUDA implementation (cuBLASLt multiplies f32, f16 and bf16)}}
  // expected-note @+1 {{cuda-lower-non-gemm-matmuls makes it an einsum, which has one; cuda-codegen-pipeline runs it before convert-rt-to-gpu}}
  rt.kernel "matmul" ins(%a, %b : memref<3x4xi64>, memref<4x5xi64>) outs(%c : memref<3x5xi64>)
  return %c : memref<3x5xi64>
}

// -----

// A kernel no rewrite handles (the table gives `shape` no CUDA
// implementation: it folds at import): the error alone.
func.func @unknown(%x: memref<4xf32>) -> memref<1xi64> {
  %y = rt.alloc : memref<1xi64>
  // expected-error @+1 {{kernel 'shape' has no CUDA implementation yet (neither generated code nor a runtime kernel); compile with --target cpu}}
  rt.kernel "shape" ins(%x : memref<4xf32>) outs(%y : memref<1xi64>)
  return %y : memref<1xi64>
}
