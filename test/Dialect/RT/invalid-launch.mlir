// RUN: shard-opt %s -split-input-file -verify-diagnostics

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) {
    // expected-error @+1 {{grid and block need three sizes each (x, y, z)}}
    rt.launch @kernels::@k grid [1, 1] block [32, 1, 1] ins(%x : memref<4xf32>) outs(%y : memref<4xf32>)
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>, %b: memref<4xf32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) {
    // expected-error @+1 {{a block has at most 1024 threads}}
    rt.launch @kernels::@k grid [1, 1, 1] block [64, 32, 1] ins(%x : memref<4xf32>) outs(%y : memref<4xf32>)
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>, %b: memref<4xf32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) {
    // expected-error @+1 {{'@kernels::@missing' is not a gpu.func kernel}}
    rt.launch @kernels::@missing grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xf32>) outs(%y : memref<4xf32>)
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>, %b: memref<4xf32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) {
    // expected-error @+1 {{kernel '@kernels::@k' takes 1 arguments, the launch passes 2}}
    rt.launch @kernels::@k grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xf32>) outs(%y : memref<4xf32>)
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>, %y: memref<4xf16>) {
    // expected-error @+1 {{buffer #1 of type 'memref<4xf16>' does not match kernel argument type 'memref<4xf32>'}}
    rt.launch @kernels::@k grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xf32>) outs(%y : memref<4xf16>)
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>, %b: memref<4xf32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>) {
    // expected-error @+1 {{reads and writes the same buffer}}
    rt.launch @kernels::@k grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xf32>) outs(%x : memref<4xf32>)
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>, %b: memref<4xf32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) {
    // expected-error @+1 {{kernel '@kernels::@k' takes 2 arguments, the launch passes 3 (its buffers and the status word)}}
    rt.launch @kernels::@k grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xf32>) outs(%y : memref<4xf32>) {checks}
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>, %b: memref<4xf32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) {
    // expected-error @+1 {{names checking nodes but does not check its data}}
    rt.launch @kernels::@k grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xf32>) outs(%y : memref<4xf32>) {checking_nodes = ["a", "b"]}
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>, %b: memref<4xf32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) {
    // expected-error @+1 {{kernel '@kernels::@k' must take its status word last, as memref<2xi64>}}
    rt.launch @kernels::@k grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xf32>) outs(%y : memref<4xf32>) {checks}
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xf32>, %b: memref<4xf32>, %s: memref<2xi32>) kernel { gpu.return }
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xui8>, %y: memref<4xui8>) {
    // expected-error @+1 {{buffer #0 of type 'memref<4xui8>' does not match kernel argument type 'memref<4xui8>' (unsigned buffers are passed as signless integers: 'i8')}}
    rt.launch @kernels::@k grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xui8>) outs(%y : memref<4xui8>)
    return
  }
  gpu.module @kernels {
    gpu.func @k(%a: memref<4xui8>, %b: memref<4xui8>) kernel { gpu.return }
  }
}
