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
