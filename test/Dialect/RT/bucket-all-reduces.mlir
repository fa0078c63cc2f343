// RUN: shard-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(rt-bucket-all-reduces))' | FileCheck %s
// RUN: shard-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(rt-bucket-all-reduces{bucket-bytes=40}))' | FileCheck %s --check-prefix=SMALL

// Three gradients' all-reduces, the first one's result read (through a
// view) only at the end: one bucket, concatenated, reduced once, split
// back into the outputs. With 40-byte buckets the third (32 bytes) starts
// a bucket of its own after the first two (16 + 24 bytes).
// CHECK-LABEL: func.func @grads
// CHECK: %[[V:.*]] = rt.view %[[B:.*]] : memref<2x2xf32> to memref<4xf32>
// CHECK: %[[BUCKET:.*]] = rt.alloc : memref<18xf32>
// CHECK: rt.kernel "concat" ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<4xf32>, memref<6xf32>, memref<8xf32>) outs(%[[BUCKET]] : memref<18xf32>) {params = {axis = 0 : i64}}
// CHECK-NEXT: rt.all_reduce ins(%[[BUCKET]] : memref<18xf32>) outs(%[[BUCKET]] : memref<18xf32>) {groups = [array<i64: 0, 1>]}
// CHECK: rt.kernel "split" ins(%[[BUCKET]] : memref<18xf32>) outs(%{{.*}}, %{{.*}}, %{{.*}} : memref<4xf32>, memref<6xf32>, memref<8xf32>) {params = {axis = 0 : i64, sizes = array<i64: 4, 6, 8>}}
// CHECK-NOT: rt.all_reduce
// CHECK: rt.kernel "neg" ins(%[[V]] : memref<4xf32>)
// SMALL-LABEL: func.func @grads
// SMALL: rt.alloc : memref<10xf32>
// SMALL: rt.all_reduce ins(%{{.*}} : memref<10xf32>)
// SMALL: rt.all_reduce ins(%{{.*}} : memref<8xf32>)
func.func @grads(%x: memref<4xf32>, %y: memref<6xf32>, %z: memref<8xf32>) -> memref<4xf32>
    attributes {rt.world_size = 2 : i64} {
  %a = rt.alloc : memref<2x2xf32>
  %xv = rt.view %x : memref<4xf32> to memref<2x2xf32>
  rt.all_reduce ins(%xv : memref<2x2xf32>) outs(%a : memref<2x2xf32>) {groups = [array<i64: 0, 1>]}
  %v = rt.view %a : memref<2x2xf32> to memref<4xf32>
  %b = rt.alloc : memref<6xf32>
  rt.all_reduce ins(%y : memref<6xf32>) outs(%b : memref<6xf32>) {groups = [array<i64: 0, 1>]}
  %c = rt.alloc : memref<8xf32>
  rt.all_reduce ins(%z : memref<8xf32>) outs(%c : memref<8xf32>) {groups = [array<i64: 0, 1>]}
  %d = rt.alloc : memref<4xf32>
  rt.kernel "neg" ins(%v : memref<4xf32>) outs(%d : memref<4xf32>)
  return %d : memref<4xf32>
}

// -----

// A reader of the first result before the second all-reduce: the first
// stays alone (a bucket of one), as do different reductions.
// CHECK-LABEL: func.func @read_early
// CHECK-NOT: concat
// CHECK: rt.all_reduce ins(%arg0
// CHECK: rt.kernel "neg"
// CHECK: rt.all_reduce ins(%arg1
// CHECK: rt.all_reduce ins(%arg2
func.func @read_early(%x: memref<4xf32>, %y: memref<4xf32>, %z: memref<4xf32>) -> memref<4xf32>
    attributes {rt.world_size = 2 : i64} {
  %a = rt.alloc : memref<4xf32>
  rt.all_reduce ins(%x : memref<4xf32>) outs(%a : memref<4xf32>) {groups = [array<i64: 0, 1>]}
  %d = rt.alloc : memref<4xf32>
  rt.kernel "neg" ins(%a : memref<4xf32>) outs(%d : memref<4xf32>)
  %b = rt.alloc : memref<4xf32>
  rt.all_reduce ins(%y : memref<4xf32>) outs(%b : memref<4xf32>) {groups = [array<i64: 0, 1>]}
  %c = rt.alloc : memref<4xf32>
  rt.all_reduce ins(%z : memref<4xf32>) outs(%c : memref<4xf32>) {groups = [array<i64: 0, 1>], reduction = "max"}
  %e = rt.alloc : memref<4xf32>
  rt.kernel "add" ins(%b, %c : memref<4xf32>, memref<4xf32>) outs(%e : memref<4xf32>)
  return %e : memref<4xf32>
}

// -----

// The rest of the backward runs between a bucket's all-reduce and its
// split: the bucket is reduced where its last member was, the split waits
// for the first op that touches a member's buffer (on CUDA the all-reduce
// is on the communication stream; the kernels in between overlap it).
// CHECK-LABEL: func.func @overlap
// CHECK: rt.kernel "concat"
// CHECK-NEXT: rt.all_reduce ins(%[[BUCKET:.*]] : memref<8xf32>) outs(%[[BUCKET]] : memref<8xf32>)
// CHECK-NEXT: %[[E:.*]] = rt.alloc : memref<4xf32>
// CHECK-NEXT: rt.kernel "exp" ins(%arg2 : memref<4xf32>) outs(%[[E]] : memref<4xf32>)
// CHECK-NEXT: %[[T:.*]] = rt.alloc : memref<4xf32>
// CHECK-NEXT: rt.kernel "tanh" ins(%[[E]] : memref<4xf32>) outs(%[[T]] : memref<4xf32>)
// CHECK-NEXT: %[[S:.*]] = rt.alloc : memref<4xf32>
// CHECK-NEXT: rt.kernel "split" ins(%[[BUCKET]] : memref<8xf32>)
// CHECK-NEXT: rt.kernel "add"
func.func @overlap(%x: memref<4xf32>, %y: memref<4xf32>, %w: memref<4xf32>) -> memref<4xf32>
    attributes {rt.world_size = 2 : i64} {
  %a = rt.alloc : memref<4xf32>
  rt.all_reduce ins(%x : memref<4xf32>) outs(%a : memref<4xf32>) {groups = [array<i64: 0, 1>]}
  %b = rt.alloc : memref<4xf32>
  rt.all_reduce ins(%y : memref<4xf32>) outs(%b : memref<4xf32>) {groups = [array<i64: 0, 1>]}
  %e = rt.alloc : memref<4xf32>
  rt.kernel "exp" ins(%w : memref<4xf32>) outs(%e : memref<4xf32>)
  %t = rt.alloc : memref<4xf32>
  rt.kernel "tanh" ins(%e : memref<4xf32>) outs(%t : memref<4xf32>)
  %s = rt.alloc : memref<4xf32>
  rt.kernel "add" ins(%a, %b : memref<4xf32>, memref<4xf32>) outs(%s : memref<4xf32>)
  return %s : memref<4xf32>
}
