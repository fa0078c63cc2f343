// Convolution as im2col (generated) and a matmul of the grouped weight view
// with the patch matrix, whose [N, G, M/G, positions] result is the NCHW
// output; the bias is a generated add over the channel dimension.
// RUN: shard-opt %s -convert-nn-to-rt -cuda-lower-convolutions -convert-rt-to-gpu | FileCheck %s
// RUN: shard-opt %s -convert-nn-to-rt -cuda-lower-convolutions | FileCheck %s --check-prefix=RT

// The rewrite itself, before code generation: an im2col and an add kernel.
// RT-LABEL: func.func @main
// RT: rt.kernel "im2col" ins(%arg0 : memref<1x4x8x8xf32>) outs(%{{.*}} : memref<1x2x18x16xf32>) {params = {dilations = array<i64: 1, 1>, group = 2 : i64, kernel_shape = array<i64: 3, 3>, out_spatial = array<i64: 4, 4>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>}}
// RT: rt.kernel "matmul"
// RT: rt.kernel "add"
// RT-NOT: "conv"
// RT-LABEL: func.func @pointwise
// RT-NOT: "conv"

// CHECK-LABEL: func.func @main
// CHECK: %[[COL:.*]] = rt.alloc : memref<1x2x18x16xf32>
// CHECK: rt.launch @shardflow_kernels::@k0_im2col {{.*}} ins(%arg0 : memref<1x4x8x8xf32>) outs(%[[COL]] : memref<1x2x18x16xf32>)
// CHECK: %[[W:.*]] = rt.view %arg1 : memref<6x2x3x3xf32> to memref<2x3x18xf32>
// CHECK: %[[P:.*]] = rt.alloc : memref<1x2x3x16xf32>
// CHECK: rt.kernel "matmul" ins(%[[W]], %[[COL]] : memref<2x3x18xf32>, memref<1x2x18x16xf32>) outs(%[[P]] : memref<1x2x3x16xf32>)
// CHECK: %[[Y:.*]] = rt.view %[[P]] : memref<1x2x3x16xf32> to memref<1x6x4x4xf32>
// CHECK: %[[B:.*]] = rt.view %arg2 : memref<6xf32> to memref<6x1x1xf32>
// CHECK: rt.launch @shardflow_kernels::@k1_add {{.*}} ins(%[[Y]], %[[B]] : memref<1x6x4x4xf32>, memref<6x1x1xf32>)
// CHECK-NOT: rt.kernel "conv"
func.func @main(%x: tensor<1x4x8x8xf32> {nn.name = "x"}, %w: tensor<6x2x3x3xf32> {nn.name = "w"}, %b: tensor<6xf32> {nn.name = "b"}) -> (tensor<1x6x4x4xf32> {nn.name = "y"}) {
  %y = nn.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<1x6x4x4xf32>
  return %y : tensor<1x6x4x4xf32>
}

// A 1x1 window at stride 1 without padding: the input, viewed as the
// [N, G, C/G, positions] patch matrix, goes straight to the matmul.
// CHECK-LABEL: func.func @pointwise
// CHECK-NOT: im2col
// CHECK: %[[X:.*]] = rt.view %arg0 : memref<2x4x5x5xf32> to memref<2x2x2x25xf32>
// CHECK: %[[W:.*]] = rt.view %arg1 : memref<6x2x1x1xf32> to memref<2x3x2xf32>
// CHECK: rt.kernel "matmul" ins(%[[W]], %[[X]] : memref<2x3x2xf32>, memref<2x2x2x25xf32>)
// CHECK-NOT: im2col
// CHECK: return
// The kernels follow the functions.
// CHECK: gpu.func @k0_im2col
// CHECK: arith.cmpi sge
// CHECK: arith.cmpi slt
// CHECK: arith.select
func.func @pointwise(%x: tensor<2x4x5x5xf32> {nn.name = "x"}, %w: tensor<6x2x1x1xf32> {nn.name = "w"}) -> (tensor<2x6x5x5xf32> {nn.name = "y"}) {
  %y = nn.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 3, 3>, group = 2 : i64} : (tensor<2x4x5x5xf32>, tensor<6x2x1x1xf32>) -> tensor<2x6x5x5xf32>
  return %y : tensor<2x6x5x5xf32>
}
