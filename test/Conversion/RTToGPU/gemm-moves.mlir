// The epilogue and residual fusions move a matmul to the add that follows
// it. A collective in between that may write one of the matmul's operands
// (it reduces in place) stops them; one that touches other buffers does
// not.
// RUN: shard-opt %s -split-input-file -convert-rt-to-gpu | FileCheck %s

// CHECK-LABEL: func.func @collective_writes_the_input
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1 : memref<4x8xf32>, memref<8x16xf32>) outs(%[[P:.*]] : memref<4x16xf32>)
// CHECK-NEXT: rt.all_reduce ins(%arg0 : memref<4x8xf32>) outs(%arg0 : memref<4x8xf32>)
// CHECK-NOT: epilogue
// CHECK: rt.launch @shardflow_kernels::@k0_add
func.func @collective_writes_the_input(%x: memref<4x8xf32>, %w: memref<8x16xf32>, %b: memref<16xf32>) -> memref<4x16xf32> attributes {rt.world_size = 2 : i64} {
  %p = rt.alloc : memref<4x16xf32>
  rt.kernel "matmul" ins(%x, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%p : memref<4x16xf32>)
  rt.all_reduce ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) {groups = [array<i64: 0, 1>]}
  %y = rt.alloc : memref<4x16xf32>
  rt.kernel "add" ins(%p, %b : memref<4x16xf32>, memref<16xf32>) outs(%y : memref<4x16xf32>)
  return %y : memref<4x16xf32>
}

// -----

// CHECK-LABEL: func.func @collective_elsewhere
// CHECK: rt.all_reduce ins(%arg3 : memref<4xf32>) outs(%arg3 : memref<4xf32>)
// CHECK: rt.kernel "matmul" ins(%arg0, %arg1, %arg2 : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%{{.*}} : memref<4x16xf32>) {params = {epilogue = "bias"}}
// CHECK-NOT: rt.launch
func.func @collective_elsewhere(%x: memref<4x8xf32>, %w: memref<8x16xf32>, %b: memref<16xf32>, %z: memref<4xf32>) -> memref<4x16xf32> attributes {rt.world_size = 2 : i64} {
  %p = rt.alloc : memref<4x16xf32>
  rt.kernel "matmul" ins(%x, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%p : memref<4x16xf32>)
  rt.all_reduce ins(%z : memref<4xf32>) outs(%z : memref<4xf32>) {groups = [array<i64: 0, 1>]}
  %y = rt.alloc : memref<4x16xf32>
  rt.kernel "add" ins(%p, %b : memref<4x16xf32>, memref<16xf32>) outs(%y : memref<4x16xf32>)
  return %y : memref<4x16xf32>
}

// -----

// The residual: the weight is reduced in place in between.
// CHECK-LABEL: func.func @residual_after_a_write
// CHECK-NOT: residual
// CHECK: rt.launch @shardflow_kernels::@k0_add
func.func @residual_after_a_write(%x: memref<4x8xf32>, %w: memref<8x8xf32>, %r: memref<4x8xf32>) -> memref<4x8xf32> attributes {rt.world_size = 2 : i64} {
  %p = rt.alloc : memref<4x8xf32>
  rt.kernel "matmul" ins(%x, %w : memref<4x8xf32>, memref<8x8xf32>) outs(%p : memref<4x8xf32>)
  rt.all_reduce ins(%w : memref<8x8xf32>) outs(%w : memref<8x8xf32>) {groups = [array<i64: 0, 1>]}
  %y = rt.alloc : memref<4x8xf32>
  rt.kernel "add" ins(%p, %r : memref<4x8xf32>, memref<4x8xf32>) outs(%y : memref<4x8xf32>)
  return %y : memref<4x8xf32>
}
