// RUN: shard-opt %s -split-input-file -verify-diagnostics

func.func @view_count(%a: memref<6xf32>) {
  // expected-error @+1 {{cannot view 'memref<6xf32>' as 'memref<2x2xf32>': element type and count must stay the same}}
  %v = rt.view %a : memref<6xf32> to memref<2x2xf32>
  return
}

// -----

func.func @kernel_in_place(%a: memref<6xf32>) {
  // expected-error @+1 {{kernel 'relu' reads and writes the same buffer}}
  rt.kernel "relu" ins(%a : memref<6xf32>) outs(%a : memref<6xf32>)
  return
}

// -----

func.func @constant_type() {
  // expected-error @+1 {{value of type 'tensor<2xf32>' does not match the buffer 'memref<3xf32>'}}
  %c = rt.constant dense<[1.0, 2.0]> : tensor<2xf32> : memref<3xf32>
  return
}

// -----

func.func @dynamic(%a: memref<?xf32>) {
  // expected-error @+1 {{must be statically shaped memref}}
  %v = rt.view %a : memref<?xf32> to memref<4xf32>
  return
}

// -----

// Kernels and their parameters are those of the kernel signature table.
func.func @unknown_kernel(%x: memref<4xf32>) {
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{'rt.kernel' op calls kernel 'nonzero', which the kernel table lacks (RTKernels.td)}}
  rt.kernel "nonzero" ins(%x : memref<4xf32>) outs(%y : memref<4xf32>)
  return
}

// -----

func.func @unknown_param(%x: memref<4xf32>) {
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{'rt.kernel' op kernel 'softmax' has no parameter 'axes'}}
  rt.kernel "softmax" ins(%x : memref<4xf32>) outs(%y : memref<4xf32>) {params = {axes = array<i64: 0>}}
  return
}

// -----

func.func @param_type(%x: memref<4xf32>) {
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{'rt.kernel' op parameter 'axis' of kernel 'softmax' must be int, got "0"}}
  rt.kernel "softmax" ins(%x : memref<4xf32>) outs(%y : memref<4xf32>) {params = {axis = "0"}}
  return
}
