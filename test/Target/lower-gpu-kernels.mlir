// shardflow-lower-gpu-kernels: the generated kernels' lowering to NVVM, as
// the artifact phase runs it before ptxas: bare-pointer arguments, 32-bit
// index arithmetic when every buffer fits (index32, the default), math
// through libdevice.
// RUN: shard-opt %s --pass-pipeline='builtin.module(shardflow-lower-gpu-kernels)' | FileCheck %s
// RUN: shard-opt %s --pass-pipeline='builtin.module(shardflow-lower-gpu-kernels{index32=false})' | FileCheck %s --check-prefix=I64

// CHECK-LABEL: llvm.func @k0_abs(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK-SAME: gpu.kernel
// CHECK-SAME: nvvm.kernel
// CHECK: nvvm.read.ptx.sreg.tid.x : i32
// CHECK: llvm.call @__nv_abs
// CHECK-NOT: gpu.func
// I64: nvvm.read.ptx.sreg.tid.x : i32
// I64: llvm.getelementptr {{.*}} : (!llvm.ptr, i64) -> !llvm.ptr, i32
module attributes {gpu.container_module} {
  gpu.module @shardflow_kernels {
    gpu.func @k0_abs(%in: memref<256xi32>, %out: memref<256xi32>) kernel {
      %t = gpu.thread_id x
      %v = memref.load %in[%t] : memref<256xi32>
      %a = math.absi %v : i32
      memref.store %a, %out[%t] : memref<256xi32>
      gpu.return
    }
  }
}
