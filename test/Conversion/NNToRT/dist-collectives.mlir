// Per-rank dist collectives lower to rt collectives whose groups are the
// mesh's groups along the op's axes (member k: index k along the axes, the
// first axis major), dist.all_slice to rt.local_slice with each rank's start,
// and the function runs on a world of the mesh's size. Meshes are dropped.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt | FileCheck %s --implicit-check-not=dist.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -rt-plan-memory | FileCheck %s --check-prefix=PLAN

// On ["dp"=2, "tp"=2] rank = 2 * dp + tp: ["tp"] pairs ranks that share dp,
// ["dp"] ranks that share tp, and ["tp", "dp"] orders the world by
// (tp, dp).
// CHECK-LABEL: func.func @reduce_2x2(%arg0: memref<4x8xf32> {nn.name = "x"}) -> (memref<4x8xf32> {nn.name = "y"}) attributes {rt.world_size = 4 : i64}
// CHECK: %[[A:.*]] = rt.alloc : memref<4x8xf32>
// CHECK: rt.all_reduce ins(%arg0 : memref<4x8xf32>) outs(%[[A]] : memref<4x8xf32>) {groups = [array<i64: 0, 1>, array<i64: 2, 3>]}
// CHECK: %[[B:.*]] = rt.alloc : memref<4x8xf32>
// CHECK: rt.all_reduce ins(%[[A]] : memref<4x8xf32>) outs(%[[B]] : memref<4x8xf32>) {groups = [array<i64: 0, 2>, array<i64: 1, 3>], reduction = "max"}
// CHECK: %[[C:.*]] = rt.alloc : memref<4x8xf32>
// CHECK: rt.all_reduce ins(%[[B]] : memref<4x8xf32>) outs(%[[C]] : memref<4x8xf32>) {groups = [array<i64: 0, 1, 2, 3>], reduction = "min"}
// CHECK: %[[D:.*]] = rt.alloc : memref<4x8xf32>
// CHECK: rt.all_reduce ins(%[[C]] : memref<4x8xf32>) outs(%[[D]] : memref<4x8xf32>) {groups = [array<i64: 0, 2, 1, 3>], reduction = "prod"}
// CHECK: return %[[D]] : memref<4x8xf32>
// PLAN-LABEL: func.func @reduce_2x2
// PLAN-SAME: rt.peak_bytes = 256 : i64, rt.world_size = 4 : i64
dist.mesh @mesh ["dp"=2, "tp"=2]
func.func @reduce_2x2(%x: tensor<4x8xf32> {nn.name = "x"}) -> (tensor<4x8xf32> {nn.name = "y"}) {
  %a = dist.all_reduce %x on @mesh ["tp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  %b = dist.all_reduce %a on @mesh ["dp"] {reduction = "max"} : tensor<4x8xf32> -> tensor<4x8xf32>
  %c = dist.all_reduce %b on @mesh ["dp", "tp"] {reduction = "min"} : tensor<4x8xf32> -> tensor<4x8xf32>
  %d = dist.all_reduce %c on @mesh ["tp", "dp"] {reduction = "prod"} : tensor<4x8xf32> -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @gather_scatter_2x2
// CHECK-SAME: attributes {rt.world_size = 4 : i64}
// CHECK: %[[G0:.*]] = rt.alloc : memref<4x8xf32>
// CHECK: rt.all_gather ins(%arg0 : memref<2x8xf32>) outs(%[[G0]] : memref<4x8xf32>) {dim = 0 : i64, groups = [array<i64: 0, 1>, array<i64: 2, 3>]}
// CHECK: %[[G1:.*]] = rt.alloc : memref<4x16xf32>
// CHECK: rt.all_gather ins(%[[G0]] : memref<4x8xf32>) outs(%[[G1]] : memref<4x16xf32>) {dim = 1 : i64, groups = [array<i64: 0, 2>, array<i64: 1, 3>]}
// CHECK: %[[G2:.*]] = rt.alloc : memref<16x16xf32>
// CHECK: rt.all_gather ins(%[[G1]] : memref<4x16xf32>) outs(%[[G2]] : memref<16x16xf32>) {dim = 0 : i64, groups = [array<i64: 0, 2, 1, 3>]}
// CHECK: %[[S0:.*]] = rt.alloc : memref<16x4xf32>
// CHECK: rt.reduce_scatter ins(%[[G2]] : memref<16x16xf32>) outs(%[[S0]] : memref<16x4xf32>) {dim = 1 : i64, groups = [array<i64: 0, 1, 2, 3>]}
// CHECK: %[[S1:.*]] = rt.alloc : memref<8x4xf32>
// CHECK: rt.reduce_scatter ins(%[[S0]] : memref<16x4xf32>) outs(%[[S1]] : memref<8x4xf32>) {dim = 0 : i64, groups = [array<i64: 0, 2>, array<i64: 1, 3>], reduction = "max"}
// CHECK: %[[T0:.*]] = rt.alloc : memref<4x8xf32>
// CHECK: rt.all_to_all ins(%[[S1]] : memref<8x4xf32>) outs(%[[T0]] : memref<4x8xf32>) {concat_dim = 1 : i64, groups = [array<i64: 0, 1>, array<i64: 2, 3>], split_dim = 0 : i64}
// CHECK: %[[T1:.*]] = rt.alloc : memref<16x2xf32>
// CHECK: rt.all_to_all ins(%[[T0]] : memref<4x8xf32>) outs(%[[T1]] : memref<16x2xf32>) {concat_dim = 0 : i64, groups = [array<i64: 0, 2, 1, 3>], split_dim = 1 : i64}
// CHECK: return %[[T1]] : memref<16x2xf32>
dist.mesh @mesh ["dp"=2, "tp"=2]
func.func @gather_scatter_2x2(%x: tensor<2x8xf32>) -> tensor<16x2xf32> {
  %g0 = dist.all_gather %x on @mesh ["tp"] {dim = 0 : i64} : tensor<2x8xf32> -> tensor<4x8xf32>
  %g1 = dist.all_gather %g0 on @mesh ["dp"] {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x16xf32>
  %g2 = dist.all_gather %g1 on @mesh ["tp", "dp"] {dim = 0 : i64} : tensor<4x16xf32> -> tensor<16x16xf32>
  %s0 = dist.reduce_scatter %g2 on @mesh ["dp", "tp"] {dim = 1 : i64} : tensor<16x16xf32> -> tensor<16x4xf32>
  %s1 = dist.reduce_scatter %s0 on @mesh ["dp"] {dim = 0 : i64, reduction = "max"} : tensor<16x4xf32> -> tensor<8x4xf32>
  %t0 = dist.all_to_all %s1 on @mesh ["tp"] {split_dim = 0 : i64, concat_dim = 1 : i64} : tensor<8x4xf32> -> tensor<4x8xf32>
  %t1 = dist.all_to_all %t0 on @mesh ["tp", "dp"] {split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<4x8xf32> -> tensor<16x2xf32>
  return %t1 : tensor<16x2xf32>
}

// -----

// all_slice: rank r keeps block indexAlong(r, axes) of `dim`, the block
// all_gather over the same axes would put there. Rank r = 2 * dp + tp, so
// along ["dp", "tp"] rank r is member r, along ["tp", "dp"] member 2 * tp + dp.
// CHECK-LABEL: func.func @slice_2x2
// CHECK: %[[A:.*]] = rt.alloc : memref<4x8x6xf32>
// CHECK: rt.local_slice ins(%arg0 : memref<8x8x6xf32>) outs(%[[A]] : memref<4x8x6xf32>) {starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 0>, array<i64: 4, 0, 0>, array<i64: 4, 0, 0>]}
// CHECK: %[[B:.*]] = rt.alloc : memref<4x4x6xf32>
// CHECK: rt.local_slice ins(%[[A]] : memref<4x8x6xf32>) outs(%[[B]] : memref<4x4x6xf32>) {starts = [array<i64: 0, 0, 0>, array<i64: 0, 4, 0>, array<i64: 0, 0, 0>, array<i64: 0, 4, 0>]}
// CHECK: %[[C:.*]] = rt.alloc : memref<8x2x6xf32>
// CHECK: rt.local_slice ins(%arg0 : memref<8x8x6xf32>) outs(%[[C]] : memref<8x2x6xf32>) {starts = [array<i64: 0, 0, 0>, array<i64: 0, 2, 0>, array<i64: 0, 4, 0>, array<i64: 0, 6, 0>]}
// CHECK: %[[D:.*]] = rt.alloc : memref<2x8x6xf32>
// CHECK: rt.local_slice ins(%arg0 : memref<8x8x6xf32>) outs(%[[D]] : memref<2x8x6xf32>) {starts = [array<i64: 0, 0, 0>, array<i64: 4, 0, 0>, array<i64: 2, 0, 0>, array<i64: 6, 0, 0>]}
// CHECK: %[[E:.*]] = rt.alloc : memref<8x8x3xf32>
// CHECK: rt.local_slice ins(%arg0 : memref<8x8x6xf32>) outs(%[[E]] : memref<8x8x3xf32>) {starts = [array<i64: 0, 0, 0>, array<i64: 0, 0, 3>, array<i64: 0, 0, 0>, array<i64: 0, 0, 3>]}
// CHECK: return %[[B]], %[[C]], %[[D]], %[[E]]
dist.mesh @mesh ["dp"=2, "tp"=2]
func.func @slice_2x2(%x: tensor<8x8x6xf32>) -> (tensor<4x4x6xf32>, tensor<8x2x6xf32>, tensor<2x8x6xf32>, tensor<8x8x3xf32>) {
  %a = dist.all_slice %x on @mesh ["dp"] {dim = 0 : i64} : tensor<8x8x6xf32> -> tensor<4x8x6xf32>
  %b = dist.all_slice %a on @mesh ["tp"] {dim = 1 : i64} : tensor<4x8x6xf32> -> tensor<4x4x6xf32>
  %c = dist.all_slice %x on @mesh ["dp", "tp"] {dim = 1 : i64} : tensor<8x8x6xf32> -> tensor<8x2x6xf32>
  %d = dist.all_slice %x on @mesh ["tp", "dp"] {dim = 0 : i64} : tensor<8x8x6xf32> -> tensor<2x8x6xf32>
  %e = dist.all_slice %x on @mesh ["tp"] {dim = 2 : i64} : tensor<8x8x6xf32> -> tensor<8x8x3xf32>
  return %b, %c, %d, %e : tensor<4x4x6xf32>, tensor<8x2x6xf32>, tensor<2x8x6xf32>, tensor<8x8x3xf32>
}

// -----

// Point to point: the same rank tables. A recv that leaves some rank
// without a sender zero-fills its buffer first (dist.recv gives that rank
// zeros; rt.recv would leave the arena's stale bytes); a recv on every rank
// needs no fill. A permute's idle ranks are zeroed by rt.collective_permute.
// CHECK-LABEL: func.func @point_to_point_2x2
// CHECK: %[[P:.*]] = rt.alloc : memref<2x3xi64>
// CHECK: rt.collective_permute ins(%arg0 : memref<2x3xi64>) outs(%[[P]] : memref<2x3xi64>) {pairs = [array<i64: 0, 1>, array<i64: 1, 3>, array<i64: 3, 2>]}
// CHECK: rt.send %[[P]] {peers = array<i64: 2, 3, -1, -1>} : memref<2x3xi64>
// CHECK: %[[R:.*]] = rt.alloc : memref<2x3xi64>
// CHECK-NEXT: rt.kernel "constant_of_shape" outs(%[[R]] : memref<2x3xi64>) {params = {value = 0 : i64}}
// CHECK-NEXT: rt.recv %[[R]] {peers = array<i64: -1, -1, 0, 1>} : memref<2x3xi64>
// CHECK: rt.send %[[P]] {peers = array<i64: 1, 0, 3, 2>} : memref<2x3xi64>
// CHECK: %[[Q:.*]] = rt.alloc : memref<2x3xi64>
// CHECK-NEXT: rt.recv %[[Q]] {peers = array<i64: 1, 0, 3, 2>} : memref<2x3xi64>
// CHECK: return %[[R]], %[[Q]]
dist.mesh @mesh ["dp"=2, "tp"=2]
func.func @point_to_point_2x2(%x: tensor<2x3xi64>) -> (tensor<2x3xi64>, tensor<2x3xi64>) {
  %p = dist.collective_permute %x on @mesh {pairs = [array<i64: 0, 1>, array<i64: 1, 3>, array<i64: 3, 2>]} : tensor<2x3xi64>
  dist.send %p on @mesh {peers = array<i64: 2, 3, -1, -1>} : tensor<2x3xi64>
  %r = dist.recv on @mesh {peers = array<i64: -1, -1, 0, 1>} : tensor<2x3xi64>
  dist.send %p on @mesh {peers = array<i64: 1, 0, 3, 2>} : tensor<2x3xi64>
  %q = dist.recv on @mesh {peers = array<i64: 1, 0, 3, 2>} : tensor<2x3xi64>
  return %r, %q : tensor<2x3xi64>, tensor<2x3xi64>
}

// -----

// A 1-D mesh: one group of every rank; sharded weights keep their per-rank
// starts, and nn ops between the collectives become kernels.
// CHECK-LABEL: func.func @mesh_1d
// CHECK-SAME: attributes {rt.world_size = 4 : i64}
// CHECK: %[[W:.*]] = rt.weight "w" {file = "w.bin", global_shape = array<i64: 16, 4>, offset = 0 : i64, starts = [array<i64: 0, 0>, array<i64: 4, 0>, array<i64: 8, 0>, array<i64: 12, 0>], storage = "external"} : memref<4x4xf32>
// CHECK: %[[XS:.*]] = rt.alloc : memref<2x4xf32>
// CHECK: rt.local_slice ins(%arg0 : memref<2x16xf32>) outs(%[[XS]] : memref<2x4xf32>) {starts = [array<i64: 0, 0>, array<i64: 0, 4>, array<i64: 0, 8>, array<i64: 0, 12>]}
// CHECK: %[[MM:.*]] = rt.alloc : memref<2x4xf32>
// CHECK: rt.kernel "matmul" ins(%[[XS]], %[[W]] : memref<2x4xf32>, memref<4x4xf32>) outs(%[[MM]] : memref<2x4xf32>)
// CHECK: %[[S:.*]] = rt.alloc : memref<2x4xf32>
// CHECK: rt.all_reduce ins(%[[MM]] : memref<2x4xf32>) outs(%[[S]] : memref<2x4xf32>) {groups = [array<i64: 0, 1, 2, 3>]}
// The layout annotation left on an op is no kernel parameter.
// CHECK: %[[R:.*]] = rt.alloc : memref<2x4xf32>
// CHECK: rt.kernel "relu" ins(%[[S]] : memref<2x4xf32>) outs(%[[R]] : memref<2x4xf32>){{$}}
// CHECK: %[[G:.*]] = rt.alloc : memref<8x4xf32>
// CHECK: rt.all_gather ins(%[[R]] : memref<2x4xf32>) outs(%[[G]] : memref<8x4xf32>) {dim = 0 : i64, groups = [array<i64: 0, 1, 2, 3>]}
dist.mesh @world ["x"=4]
func.func @mesh_1d(%x: tensor<2x16xf32>) -> tensor<8x4xf32> {
  %w = nn.weight "w" {storage = "external", file = "w.bin", offset = 0 : i64, global_shape = array<i64: 16, 4>, starts = [array<i64: 0, 0>, array<i64: 4, 0>, array<i64: 8, 0>, array<i64: 12, 0>]} : tensor<4x4xf32>
  %xs = dist.all_slice %x on @world ["x"] {dim = 1 : i64} : tensor<2x16xf32> -> tensor<2x4xf32>
  %mm = nn.matmul %xs, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %s = dist.all_reduce %mm on @world ["x"] : tensor<2x4xf32> -> tensor<2x4xf32>
  %r = nn.relu %s {dist.shardings = [#dist.sharding<@world, [{}, {}]>]} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %g = dist.all_gather %r on @world ["x"] {dim = 0 : i64} : tensor<2x4xf32> -> tensor<8x4xf32>
  return %g : tensor<8x4xf32>
}

// -----

// A 3-D mesh ["a"=2, "b"=3, "c"=2]: rank = 6a + 2b + c.
// CHECK-LABEL: func.func @mesh_3d
// CHECK-SAME: attributes {rt.world_size = 12 : i64}
// CHECK: rt.all_reduce {{.*}} {groups = [array<i64: 0, 2, 4>, array<i64: 1, 3, 5>, array<i64: 6, 8, 10>, array<i64: 7, 9, 11>]}
// CHECK: rt.all_reduce {{.*}} {groups = [array<i64: 0, 6, 1, 7>, array<i64: 2, 8, 3, 9>, array<i64: 4, 10, 5, 11>]}
// CHECK: rt.all_reduce {{.*}} {groups = [array<i64: 0, 1, 6, 7>, array<i64: 2, 3, 8, 9>, array<i64: 4, 5, 10, 11>]}
// CHECK: rt.all_gather {{.*}} {dim = 0 : i64, groups = [array<i64: 0, 6>, array<i64: 1, 7>, array<i64: 2, 8>, array<i64: 3, 9>, array<i64: 4, 10>, array<i64: 5, 11>]}
// CHECK: rt.all_gather {{.*}} {dim = 1 : i64, groups = [array<i64: 0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11>]}
// The slice over "b" of a dimension of 6: rank r keeps rows 2 * b(r).
// CHECK: rt.local_slice {{.*}} {starts = [array<i64: 0, 0>, array<i64: 0, 0>, array<i64: 2, 0>, array<i64: 2, 0>, array<i64: 4, 0>, array<i64: 4, 0>, array<i64: 0, 0>, array<i64: 0, 0>, array<i64: 2, 0>, array<i64: 2, 0>, array<i64: 4, 0>, array<i64: 4, 0>]}
dist.mesh @mesh ["a"=2, "b"=3, "c"=2]
func.func @mesh_3d(%x: tensor<6x4xf32>) -> (tensor<12x48xf32>, tensor<2x4xf32>) {
  %r1 = dist.all_reduce %x on @mesh ["b"] : tensor<6x4xf32> -> tensor<6x4xf32>
  %r2 = dist.all_reduce %r1 on @mesh ["c", "a"] : tensor<6x4xf32> -> tensor<6x4xf32>
  %r3 = dist.all_reduce %r2 on @mesh ["a", "c"] : tensor<6x4xf32> -> tensor<6x4xf32>
  %g1 = dist.all_gather %r3 on @mesh ["a"] {dim = 0 : i64} : tensor<6x4xf32> -> tensor<12x4xf32>
  %g2 = dist.all_gather %g1 on @mesh ["a", "c", "b"] {dim = 1 : i64} : tensor<12x4xf32> -> tensor<12x48xf32>
  %s = dist.all_slice %r3 on @mesh ["b"] {dim = 0 : i64} : tensor<6x4xf32> -> tensor<2x4xf32>
  return %g2, %s : tensor<12x48xf32>, tensor<2x4xf32>
}

// -----

// Two meshes of the same size share the world; both are dropped. A world
// size already on the function must agree with them.
// CHECK-LABEL: func.func @two_meshes
// CHECK-SAME: attributes {rt.world_size = 4 : i64}
// CHECK: rt.all_reduce {{.*}} {groups = [array<i64: 0, 1>, array<i64: 2, 3>]}
// CHECK: rt.all_reduce {{.*}} {groups = [array<i64: 0, 1, 2, 3>]}
dist.mesh @grid ["dp"=2, "tp"=2]
dist.mesh @line ["x"=4]
func.func @two_meshes(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rt.world_size = 4 : i64} {
  %a = dist.all_reduce %x on @grid ["tp"] : tensor<4xf32> -> tensor<4xf32>
  %b = dist.all_reduce %a on @line ["x"] : tensor<4xf32> -> tensor<4xf32>
  return %b : tensor<4xf32>
}
