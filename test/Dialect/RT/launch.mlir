// rt.launch round-trips and checks its grid, block and kernel signature.
// RUN: shard-opt %s -split-input-file | shard-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: rt.launch @kernels::@scale grid [2, 1, 1] block [128, 1, 1] ins(%{{.*}} : memref<2x128xf32>) outs(%{{.*}} : memref<2x128xf32>)
module attributes {gpu.container_module} {
  func.func @main(%x: memref<2x128xf32>, %y: memref<2x128xf32>) {
    rt.launch @kernels::@scale grid [2, 1, 1] block [128, 1, 1] ins(%x : memref<2x128xf32>) outs(%y : memref<2x128xf32>)
    return
  }
  gpu.module @kernels {
    gpu.func @scale(%a: memref<256xf32>, %b: memref<256xf32>) kernel {
      gpu.return
    }
  }
}

// -----

// A launch that checks its data passes its kernel a status word, last;
// one whose kernel fuses several checking operations names their nodes.
// CHECK-LABEL: func.func @main
// CHECK: rt.launch @kernels::@pick grid [1, 1, 1] block [32, 1, 1] ins(%{{.*}}, %{{.*}} : memref<8xf32>, memref<4xi64>) outs(%{{.*}} : memref<4xf32>) {checks}
// CHECK: rt.launch @kernels::@pick {{.*}} {checking_nodes = ["gather_a", "gather_b"], checks}
module attributes {gpu.container_module} {
  func.func @main(%x: memref<8xf32>, %i: memref<4xi64>, %y: memref<4xf32>) {
    rt.launch @kernels::@pick grid [1, 1, 1] block [32, 1, 1] ins(%x, %i : memref<8xf32>, memref<4xi64>) outs(%y : memref<4xf32>) {checks}
    rt.launch @kernels::@pick grid [1, 1, 1] block [32, 1, 1] ins(%x, %i : memref<8xf32>, memref<4xi64>) outs(%y : memref<4xf32>) {checks, checking_nodes = ["gather_a", "gather_b"]}
    return
  }
  gpu.module @kernels {
    gpu.func @pick(%a: memref<8xf32>, %b: memref<4xi64>, %c: memref<4xf32>, %s: memref<2xi64>) kernel {
      gpu.return
    }
  }
}

// -----

// Unsigned buffers go to kernels as the signless integers of their width.
// CHECK-LABEL: func.func @main
// CHECK: rt.launch @kernels::@inc {{.*}} ins(%{{.*}} : memref<4xui16>) outs(%{{.*}} : memref<4xui16>)
module attributes {gpu.container_module} {
  func.func @main(%x: memref<4xui16>, %y: memref<4xui16>) {
    rt.launch @kernels::@inc grid [1, 1, 1] block [32, 1, 1] ins(%x : memref<4xui16>) outs(%y : memref<4xui16>)
    return
  }
  gpu.module @kernels {
    gpu.func @inc(%a: memref<4xi16>, %b: memref<4xi16>) kernel {
      gpu.return
    }
  }
}
