// A scatter_nd becomes a copy of its data (identity, fused like any
// elementwise kernel) and scatter_nd_updates, which writes the updates
// into the copy in place.
// RUN: shard-opt %s -convert-nn-to-rt -cuda-split-scatters -convert-rt-to-gpu | FileCheck %s
// RUN: shard-opt %s -convert-nn-to-rt -cuda-split-scatters | FileCheck %s --check-prefix=RT

// The copy fuses with the exp that makes the data; the updates follow, in
// place, one thread per slice element, index tuples in order.
// RT-LABEL: func.func @main
// RT: rt.kernel "exp"
// RT-NEXT: %[[OUT:.*]] = rt.alloc : memref<4x3xf32>
// RT-NEXT: rt.kernel "identity" ins(%{{.*}} : memref<4x3xf32>) outs(%[[OUT]] : memref<4x3xf32>)
// RT-NEXT: rt.kernel "scatter_nd_updates" ins(%arg1, %arg2 : memref<2x1xi64>, memref<2x3xf32>) outs(%[[OUT]] : memref<4x3xf32>) {params = {reduction = "add"}}
// RT-NOT: "scatter_nd"
// CHECK-LABEL: func.func @main
// CHECK: %[[OUT:.*]] = rt.alloc : memref<4x3xf32>
// CHECK: rt.launch @shardflow_kernels::@k0_exp_identity {{.*}} outs(%[[OUT]] : memref<4x3xf32>)
// CHECK: rt.launch @shardflow_kernels::@k1_scatter_nd_updates {{.*}} outs(%[[OUT]] : memref<4x3xf32>) {checks}
// CHECK: gpu.func @k1_scatter_nd_updates
// CHECK: scf.for %{{.*}} = %c0 to %c2 step %c1 {
// CHECK: arith.addf
func.func @main(%x: tensor<4x3xf32> {nn.name = "x"}, %i: tensor<2x1xi64> {nn.name = "i"}, %u: tensor<2x3xf32> {nn.name = "u"}) -> (tensor<4x3xf32> {nn.name = "y"}) {
  %e = nn.exp %x : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %s = nn.scatter_nd %e, %i, %u {reduction = "add"} : (tensor<4x3xf32>, tensor<2x1xi64>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %s : tensor<4x3xf32>
}
