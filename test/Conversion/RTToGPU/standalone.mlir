// Kernels generated as launches of their own: reductions over separated
// axes, cumsum, gather_elements, topk (k rounds of two block reductions).
// (Target/CUDA: scatter_nd_updates in split-scatters.mlir, an integer
// einsum in lower-non-gemm-matmuls.mlir.)
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu | FileCheck %s

// One thread per output, one loop per run of reduced axes (0 and 2 here),
// integers accumulated in i64 and wrapped to i32 on store.
// CHECK-LABEL: func.func @main
// CHECK: rt.launch @shardflow_kernels::@k0_reduce_sum grid [1, 1, 1] block [256, 1, 1]
// CHECK: gpu.func @k0_reduce_sum(%{{.*}}: memref<24xi32>, %{{.*}}: memref<3xi32>)
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.extsi %{{.*}} : i32 to i64
// CHECK: arith.addi %{{.*}} : i64
// CHECK: arith.trunci %{{.*}} : i64 to i32
func.func @main(%x: tensor<2x3x4xi32> {nn.name = "x"}) -> (tensor<3xi32> {nn.name = "y"}) {
  %r = nn.reduce_sum %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xi32>) -> tensor<3xi32>
  return %r : tensor<3xi32>
}

// -----

// One thread per line along axis 1 (not the last, and short): 2 x 4 lines
// of 3, exclusive.
// CHECK-LABEL: func.func @main
// CHECK: rt.launch @shardflow_kernels::@k0_cumsum grid [1, 1, 1] block [256, 1, 1]
// CHECK: gpu.func @k0_cumsum
// CHECK: arith.cmpi ult, %{{.*}}, %c8
// CHECK: scf.for %{{.*}} = %c0 to %c3 step %c1 iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
// CHECK: %[[NEXT:.*]] = arith.addf %[[ACC]]
// CHECK: memref.store %[[ACC]]
// CHECK: scf.yield %[[NEXT]]
func.func @main(%x: tensor<2x3x4xf32> {nn.name = "x"}) -> (tensor<2x3x4xf32> {nn.name = "y"}) {
  %c = nn.cumsum %x {axis = 1 : i64, exclusive = true} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %c : tensor<2x3x4xf32>
}

// -----

// Lines along the last axis: one block per line (2 blocks of 256), the
// line scanned in 2 tiles, each by doubling in shared memory with a
// barrier between every read and write; exclusive takes the neighbour's
// inclusive sum, reverse walks from the end.
// CHECK-LABEL: func.func @main
// CHECK: rt.launch @shardflow_kernels::@k0_cumsum grid [2, 1, 1] block [256, 1, 1]
// CHECK: gpu.func @k0_cumsum(%{{.*}}: memref<600xi32>, %{{.*}}: memref<600xi32>) workgroup(%[[T:.*]] : memref<256xi64, #gpu.address_space<workgroup>>)
// CHECK: scf.for %{{.*}} = %c0 to %c2 step %{{.*}} iter_args(%[[CARRY:.*]] = %{{.*}}) -> (i64)
// CHECK: arith.subi %c299
// CHECK: memref.store %{{.*}}, %[[T]][%thread_id_x]
// CHECK-NEXT: gpu.barrier
// CHECK: memref.load %[[T]]
// CHECK-NEXT: gpu.barrier
// CHECK: memref.store %{{.*}}, %[[T]][%thread_id_x]
// CHECK-NEXT: gpu.barrier
// CHECK: arith.addi %[[CARRY]]
// CHECK: memref.load %[[T]][%c255
// CHECK: scf.if
// CHECK: arith.trunci %{{.*}} : i64 to i32
// CHECK: gpu.barrier
// CHECK-NEXT: arith.addi %[[CARRY]]
// CHECK-NEXT: scf.yield
func.func @main(%x: tensor<2x300xi32> {nn.name = "x"}) -> (tensor<2x300xi32> {nn.name = "y"}) {
  %c = nn.cumsum %x {axis = 1 : i64, exclusive = true, reverse = true} : (tensor<2x300xi32>) -> tensor<2x300xi32>
  return %c : tensor<2x300xi32>
}

// -----

// Indices are checked: the kernel takes the status word last and writes it
// when an index (negative ones counted from the end) falls outside [0, 5).
// CHECK-LABEL: func.func @main
// CHECK: rt.launch @shardflow_kernels::@k0_gather_elements {{.*}} {checks}
// CHECK: gpu.func @k0_gather_elements(%{{.*}}: memref<10xf32>, %{{.*}}: memref<6xi64>, %{{.*}}: memref<6xf32>, %[[S:.*]]: memref<2xi64>)
// CHECK: scf.if
// CHECK: memref.store %{{.*}}, %[[S]][%{{.*}}] : memref<2xi64>
func.func @main(%x: tensor<2x5xf32> {nn.name = "x"}, %i: tensor<2x3xi64> {nn.name = "i"}) -> (tensor<2x3xf32> {nn.name = "y"}) {
  %g = nn.gather_elements %x, %i {axis = 1 : i64} : (tensor<2x5xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  return %g : tensor<2x3xf32>
}

// -----

// One block per line (3 lines of 50), 2 rounds: best key, then lowest index.
// CHECK-LABEL: func.func @main
// CHECK: rt.launch @shardflow_kernels::@k0_topk grid [3, 1, 1] block [64, 1, 1]
// CHECK: gpu.func @k0_topk
// CHECK: scf.for %{{.*}} = %c0 to %c2{{(_[0-9]+)?}} step %c1{{(_[0-9]+)?}} iter_args({{.*}}) -> (i32, i32)
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: gpu.all_reduce maxsi
// CHECK: gpu.all_reduce minsi
// CHECK: arith.extsi %{{.*}} : i32 to i64
func.func @main(%x: tensor<3x50xf32> {nn.name = "x"}) -> (tensor<3x2xf32> {nn.name = "v"}, tensor<3x2xi64> {nn.name = "i"}) {
  %v, %i = nn.topk %x {k = 2 : i64} : (tensor<3x50xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
  return %v, %i : tensor<3x2xf32>, tensor<3x2xi64>
}
