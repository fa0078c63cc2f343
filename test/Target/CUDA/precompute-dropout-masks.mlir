// Training dropout on CUDA: the mask depends on the seed and the shape
// only, so it is drawn at compile time (numpy's legacy generator:
// `np.random.seed(3); np.random.uniform(0, 1, (2, 4)) >= 0.5` gives the
// mask below) into a constant; the mask output is a copy of it and the
// result a masked scale by 1 / (1 - ratio). Neither reads what the other
// writes: one launch runs both (sibling-fusion), the copy in block 0 and
// the masked scale in block 1.
// RUN: shard-opt %s -convert-nn-to-rt -cuda-precompute-dropout-masks -convert-rt-to-gpu | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[MASK:.*]] = rt.constant dense<{{\[}}[true, true, false, true], [true, true, false, false]]> : tensor<2x4xi1> : memref<2x4xi1>
// CHECK: rt.launch @shardflow_kernels::@k0_identity_masked_scale grid [2, 1, 1] {{.*}} ins(%[[MASK]], %arg0 : memref<2x4xi1>, memref<2x4xf32>)
// CHECK-NOT: rt.launch
// CHECK: gpu.func @k0_identity_masked_scale
// CHECK: %[[BID:.*]] = gpu.block_id x
// CHECK: arith.cmpi ult, %[[BID]], %c1
// CHECK: memref.store %{{.*}} : memref<8xi1>
// CHECK: %[[LOCAL:.*]] = arith.subi %[[BID]], %c1
// CHECK: arith.cmpi ult, %[[LOCAL]], %c1
// CHECK: %[[X:.*]] = memref.load %{{.*}} : memref<8xf32>
// CHECK: %[[KEEP:.*]] = memref.load %{{.*}} : memref<8xi1>
// CHECK: %[[S:.*]] = arith.mulf %[[X]], %{{.*}} : f32
// CHECK: arith.select %[[KEEP]], %[[S]], %{{.*}} : f32
func.func @main(%x: tensor<2x4xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"}, tensor<2x4xi1> {nn.name = "m"}) {
  %y, %m = nn.training_dropout %x {ratio = 0.5 : f32, seed = 3 : i64} : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xi1>)
  return %y, %m : tensor<2x4xf32>, tensor<2x4xi1>
}
