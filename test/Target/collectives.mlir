// An SPMD rt program on a world of 4 ranks (a 2x2 mesh: groups {0,1},{2,3}
// along one axis and {0,2},{1,3} along the other) round-trips through the
// parser and exports one `collective` line per op with its rank tables; a
// sliced weight exports its global shape and per-rank starts.
// RUN: shard-opt %s | shard-opt | FileCheck %s --check-prefix=IR
// RUN: shard-opt %s --target cpu -o - | FileCheck %s

// IR: rt.weight "w" {file = "w.bin", global_shape = array<i64: 4, 6>, offset = 0 : i64, starts = [array<i64: 0, 0>, array<i64: 0, 3>, array<i64: 2, 0>, array<i64: 2, 3>], storage = "external"} : memref<2x3xf32>
// IR: rt.all_reduce ins(%{{.*}} : memref<2x3xf32>) outs(%{{.*}} : memref<2x3xf32>) {groups = [array<i64: 0, 1>, array<i64: 2, 3>], reduction = "max"}
// IR: rt.all_gather ins(%{{.*}} : memref<2x3xf32>) outs(%{{.*}} : memref<4x3xf32>) {dim = 0 : i64, groups = [array<i64: 0, 2>, array<i64: 1, 3>]}
// IR: rt.reduce_scatter ins(%{{.*}} : memref<4x3xf32>) outs(%{{.*}} : memref<4x3xf32>) {dim = 1 : i64, groups = [array<i64: 0>, array<i64: 1>, array<i64: 2>, array<i64: 3>]}
// IR: rt.all_to_all ins(%{{.*}} : memref<4x3xf32>) outs(%{{.*}} : memref<2x6xf32>) {concat_dim = 1 : i64, groups = [array<i64: 0, 1>, array<i64: 2, 3>], split_dim = 0 : i64}
// IR: rt.collective_permute ins(%{{.*}} : memref<2x6xf32>) outs(%{{.*}} : memref<2x6xf32>) {pairs = [array<i64: 0, 1>, array<i64: 1, 2>, array<i64: 2, 3>, array<i64: 3, 0>]}
// IR: rt.send %{{.*}} {peers = array<i64: 1, -1, 3, -1>} : memref<2x6xf32>
// IR: rt.recv %{{.*}} {peers = array<i64: -1, 0, -1, 2>} : memref<2x6xf32>

// CHECK: world-size 4
// CHECK: buffer 1 weight f32 2x3 name=w storage=external file=w.bin offset=0 size=24 global=4x6 starts=0,0;0,3;2,0;2,3
// CHECK: collective all_reduce in=1 out={{[0-9]+}} group_size=i:2 groups=is:0,1,2,3 reduction=s:max
// CHECK: collective all_gather in={{[0-9]+}} out={{[0-9]+}} dim=i:0 group_size=i:2 groups=is:0,2,1,3
// CHECK: collective reduce_scatter in={{[0-9]+}} out={{[0-9]+}} dim=i:1 group_size=i:1 groups=is:0,1,2,3 reduction=s:sum
// CHECK: collective all_to_all in={{[0-9]+}} out={{[0-9]+}} concat_dim=i:1 group_size=i:2 groups=is:0,1,2,3 split_dim=i:0
// CHECK: collective collective_permute in={{[0-9]+}} out={{[0-9]+}} pairs=is:0,1,1,2,2,3,3,0
// CHECK: collective send in={{[0-9]+}} out= peers=is:1,-1,3,-1
// CHECK: collective recv in= out={{[0-9]+}} peers=is:-1,0,-1,2

func.func @main(%x: memref<2x3xf32> {nn.name = "x"}) -> (memref<2x6xf32> {nn.name = "y"}) attributes {rt.world_size = 4 : i64} {
  %w = rt.weight "w" {storage = "external", file = "w.bin", offset = 0 : i64, global_shape = array<i64: 4, 6>, starts = [array<i64: 0, 0>, array<i64: 0, 3>, array<i64: 2, 0>, array<i64: 2, 3>]} : memref<2x3xf32>
  %a = rt.alloc : memref<2x3xf32>
  rt.all_reduce ins(%w : memref<2x3xf32>) outs(%a : memref<2x3xf32>) {groups = [array<i64: 0, 1>, array<i64: 2, 3>], reduction = "max"}
  %b = rt.alloc : memref<4x3xf32>
  rt.all_gather ins(%a : memref<2x3xf32>) outs(%b : memref<4x3xf32>) {dim = 0 : i64, groups = [array<i64: 0, 2>, array<i64: 1, 3>]}
  %c = rt.alloc : memref<4x3xf32>
  rt.reduce_scatter ins(%b : memref<4x3xf32>) outs(%c : memref<4x3xf32>) {dim = 1 : i64, groups = [array<i64: 0>, array<i64: 1>, array<i64: 2>, array<i64: 3>]}
  %d = rt.alloc : memref<2x6xf32>
  rt.all_to_all ins(%c : memref<4x3xf32>) outs(%d : memref<2x6xf32>) {split_dim = 0 : i64, concat_dim = 1 : i64, groups = [array<i64: 0, 1>, array<i64: 2, 3>]}
  %e = rt.alloc : memref<2x6xf32>
  rt.collective_permute ins(%d : memref<2x6xf32>) outs(%e : memref<2x6xf32>) {pairs = [array<i64: 0, 1>, array<i64: 1, 2>, array<i64: 2, 3>, array<i64: 3, 0>]}
  rt.send %e {peers = array<i64: 1, -1, 3, -1>} : memref<2x6xf32>
  rt.recv %e {peers = array<i64: -1, 0, -1, 2>} : memref<2x6xf32>
  return %e : memref<2x6xf32>
}
