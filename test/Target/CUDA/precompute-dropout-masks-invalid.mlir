// The mask is drawn at compile time: a ratio outside [0, 1) and a mask of
// more than 2^24 elements (one byte each in the artifact) are refused.
// RUN: shard-opt %s -split-input-file -verify-diagnostics -cuda-precompute-dropout-masks

func.func @ratio_one(%x: memref<2x4xf32>) -> (memref<2x4xf32>, memref<2x4xi1>) {
  %y = rt.alloc : memref<2x4xf32>
  %m = rt.alloc : memref<2x4xi1>
  // expected-error @+1 {{training_dropout ratio 1.000000e+00 is outside [0, 1)}}
  rt.kernel "training_dropout" ins(%x : memref<2x4xf32>) outs(%y, %m : memref<2x4xf32>, memref<2x4xi1>) {params = {ratio = 1.0 : f32, seed = 3 : i64}}
  return %y, %m : memref<2x4xf32>, memref<2x4xi1>
}

// -----

func.func @too_large(%x: memref<4097x4097xf32>) -> (memref<4097x4097xf32>, memref<4097x4097xi1>) {
  %y = rt.alloc : memref<4097x4097xf32>
  %m = rt.alloc : memref<4097x4097xi1>
  // expected-error @+1 {{training_dropout of 16785409 elements: the CUDA target draws the mask at compile time, for at most 16777216 elements; compile with --target cpu}}
  rt.kernel "training_dropout" ins(%x : memref<4097x4097xf32>) outs(%y, %m : memref<4097x4097xf32>, memref<4097x4097xi1>) {params = {ratio = 0.1 : f32, seed = 3 : i64}}
  return %y, %m : memref<4097x4097xf32>, memref<4097x4097xi1>
}
