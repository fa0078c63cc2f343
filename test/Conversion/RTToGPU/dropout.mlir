// Training dropout on CUDA: the mask depends on the seed and the shape
// only, so it is drawn at compile time (numpy's legacy generator:
// `np.random.seed(3); np.random.uniform(0, 1, (2, 4)) >= 0.5` gives the
// mask below) into a constant; the mask output is a copy of it and the
// result a masked scale by 1 / (1 - ratio).
// RUN: shard-opt %s -convert-nn-to-rt -convert-rt-to-gpu | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[MASK:.*]] = rt.constant dense<{{\[}}[true, true, false, true], [true, true, false, false]]> : tensor<2x4xi1> : memref<2x4xi1>
// CHECK: rt.launch @shardflow_kernels::@k0_identity {{.*}} ins(%[[MASK]] : memref<2x4xi1>)
// CHECK: rt.launch @shardflow_kernels::@k1_masked_scale {{.*}} ins(%{{.*}}, %[[MASK]] : memref<2x4xf32>, memref<2x4xi1>)
// CHECK: gpu.func @k1_masked_scale
// CHECK: %[[X:.*]] = memref.load %{{.*}} : memref<8xf32>
// CHECK: %[[KEEP:.*]] = memref.load %{{.*}} : memref<8xi1>
// CHECK: %[[S:.*]] = arith.mulf %[[X]], %{{.*}} : f32
// CHECK: arith.select %[[KEEP]], %[[S]], %{{.*}} : f32
func.func @main(%x: tensor<2x4xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"}, tensor<2x4xi1> {nn.name = "m"}) {
  %y, %m = nn.training_dropout %x {ratio = 0.5 : f32, seed = 3 : i64} : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xi1>)
  return %y, %m : tensor<2x4xf32>, tensor<2x4xi1>
}
