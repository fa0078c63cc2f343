// RUN: shard-opt %s -split-input-file -dist-partition | FileCheck %s
// Each dist.reshard becomes the cheapest collectives. The function takes
// whole inputs (each rank keeps its piece: all_slice) and returns whole
// results (all_gather); the CHECK lines follow the reshard in between.

dist.mesh @m ["tp"=4]
// CHECK-LABEL: func.func @gather_1d
// CHECK: %[[IN:.*]] = dist.all_slice %arg0 on @m ["tp"] {dim = 0 : i64} : tensor<8x16xf32> -> tensor<2x16xf32>
// CHECK-NEXT: %[[G:.*]] = dist.all_gather %[[IN]] on @m ["tp"] {dim = 0 : i64} : tensor<2x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: return %[[G]]
func.func @gather_1d(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>})
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@m, [{}, {}]>}) {
  %0 = dist.reshard %x <@m, [{}, {}]> : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

dist.mesh @m ["tp"=4]
// Moving a split between dimensions is one all_to_all.
// CHECK-LABEL: func.func @move_1d
// CHECK: %[[IN:.*]] = dist.all_slice %arg0 on @m ["tp"] {dim = 0 : i64}
// CHECK-NEXT: %[[A:.*]] = dist.all_to_all %[[IN]] on @m ["tp"] {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<2x16xf32> -> tensor<8x4xf32>
// CHECK-NEXT: dist.all_gather %[[A]] on @m ["tp"] {dim = 1 : i64} : tensor<8x4xf32> -> tensor<8x16xf32>
func.func @move_1d(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>})
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@m, [{}, {"tp"}]>}) {
  %0 = dist.reshard %x <@m, [{}, {"tp"}]> : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

dist.mesh @m ["tp"=2]
// Replicated to split: each rank keeps its piece, no communication.
// CHECK-LABEL: func.func @slice_1d
// CHECK-NEXT: %[[S:.*]] = dist.all_slice %arg0 on @m ["tp"] {dim = 1 : i64} : tensor<8x16xf32> -> tensor<8x8xf32>
// CHECK-NEXT: dist.all_gather %[[S]]
func.func @slice_1d(%x: tensor<8x16xf32>)
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@m, [{}, {"tp"}]>}) {
  %0 = dist.reshard %x <@m, [{}, {"tp"}]> : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

dist.mesh @m ["tp"=2]
// Partial sums: all_reduce to replicated, reduce_scatter to split.
// CHECK-LABEL: func.func @partial_1d
// CHECK: %[[P:.*]] = nn.matmul {{.*}} : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[R:.*]] = dist.all_reduce %[[P]] on @m ["tp"] : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[S:.*]] = dist.reduce_scatter %[[P]] on @m ["tp"] {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x4xf32>
func.func @partial_1d(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<@m, [{}, {"tp"}]>},
                      %w: tensor<8x8xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>})
    -> (tensor<4x8xf32> {dist.sharding = #dist.sharding<@m, [{}, {}]>},
        tensor<4x8xf32> {dist.sharding = #dist.sharding<@m, [{}, {"tp"}]>}) {
  %p = nn.matmul %x, %w {dist.shardings = [#dist.sharding<@m, [{}, {}], unreduced = ["tp"]>]} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = dist.reshard %p <@m, [{}, {}]> : tensor<4x8xf32>
  %s = dist.reshard %p <@m, [{}, {"tp"}]> : tensor<4x8xf32>
  return %r, %s : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=4]
// 2-D mesh: gather only the minor axis of a dimension split over two.
// CHECK-LABEL: func.func @gather_minor_2d
// CHECK: %[[IN:.*]] = dist.all_slice %arg0 on @m ["dp", "tp"] {dim = 0 : i64} : tensor<16x8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %[[G:.*]] = dist.all_gather %[[IN]] on @m ["tp"] {dim = 0 : i64} : tensor<2x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT: dist.all_gather %[[G]] on @m ["dp"] {dim = 0 : i64} : tensor<8x8xf32> -> tensor<16x8xf32>
func.func @gather_minor_2d(%x: tensor<16x8xf32> {dist.sharding = #dist.sharding<@m, [{"dp", "tp"}, {}]>})
    -> (tensor<16x8xf32> {dist.sharding = #dist.sharding<@m, [{"dp"}, {}]>}) {
  %0 = dist.reshard %x <@m, [{"dp"}, {}]> : tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
// 2-D mesh: swap which axis splits which dimension. The destination's
// split is gathered first, then one all_to_all moves "dp", and "tp" is
// sliced back: only the "tp" split moves twice. (An all_to_all over both
// axes at once would move less; the planner does not emit it yet.)
// CHECK-LABEL: func.func @swap_2d
// CHECK: %[[IN:.*]] = dist.all_slice %{{.*}} on @m ["tp"] {dim = 1 : i64} : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[A:.*]] = dist.all_gather %[[IN]] on @m ["tp"] {dim = 1 : i64} : tensor<2x4xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %[[B:.*]] = dist.all_to_all %[[A]] on @m ["dp"] {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<2x8xf32> -> tensor<4x4xf32>
// CHECK-NEXT: dist.all_slice %[[B]] on @m ["tp"] {dim = 0 : i64} : tensor<4x4xf32> -> tensor<2x4xf32>
func.func @swap_2d(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<@m, [{"dp"}, {"tp"}]>})
    -> (tensor<4x8xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {"dp"}]>}) {
  %0 = dist.reshard %x <@m, [{"tp"}, {"dp"}]> : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
// 2-D mesh: partial over both axes, one scattered into dim 0, one summed.
// CHECK-LABEL: func.func @partial_2d
// CHECK: %[[RS:.*]] = dist.reduce_scatter %{{.*}} on @m ["dp"] {dim = 0 : i64} : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %[[AR:.*]] = dist.all_reduce %[[RS]] on @m ["tp"] : tensor<2x8xf32> -> tensor<2x8xf32>
func.func @partial_2d(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<@m, [{}, {"dp", "tp"}]>},
                      %w: tensor<8x8xf32> {dist.sharding = #dist.sharding<@m, [{"dp", "tp"}, {}]>})
    -> (tensor<4x8xf32> {dist.sharding = #dist.sharding<@m, [{"dp"}, {}]>}) {
  %p = nn.matmul %x, %w {dist.shardings = [#dist.sharding<@m, [{}, {}], unreduced = ["dp", "tp"]>]} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = dist.reshard %p <@m, [{"dp"}, {}]> : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

dist.mesh @m ["a"=2, "b"=2, "c"=2]
// 3-D mesh: keep the common prefix, move "c", gather "b", add "a".
// CHECK-LABEL: func.func @mixed_3d
// CHECK: %[[IN:.*]] = dist.all_slice %arg0 on @m ["b", "c"] {dim = 0 : i64} : tensor<8x8x8xf32> -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[A:.*]] = dist.all_to_all %[[IN]] on @m ["c"] {concat_dim = 0 : i64, split_dim = 2 : i64} : tensor<2x8x8xf32> -> tensor<4x8x4xf32>
// CHECK-NEXT: %[[G:.*]] = dist.all_gather %[[A]] on @m ["b"] {dim = 0 : i64} : tensor<4x8x4xf32> -> tensor<8x8x4xf32>
// CHECK-NEXT: %[[S:.*]] = dist.all_slice %[[G]] on @m ["a"] {dim = 1 : i64} : tensor<8x8x4xf32> -> tensor<8x4x4xf32>
func.func @mixed_3d(%x: tensor<8x8x8xf32> {dist.sharding = #dist.sharding<@m, [{"b", "c"}, {}, {}]>})
    -> (tensor<8x8x8xf32> {dist.sharding = #dist.sharding<@m, [{}, {"a"}, {"c"}]>}) {
  %0 = dist.reshard %x <@m, [{}, {"a"}, {"c"}]> : tensor<8x8x8xf32>
  return %0 : tensor<8x8x8xf32>
}

// -----

dist.mesh @m ["a"=2, "b"=2, "c"=2]
// 3-D mesh: a dimension split over all three axes, gathered at once.
// CHECK-LABEL: func.func @all_axes_3d
// CHECK: %[[IN:.*]] = dist.all_slice %arg0 on @m ["c", "a", "b"] {dim = 1 : i64} : tensor<2x16xf32> -> tensor<2x2xf32>
// CHECK-NEXT: dist.all_gather %[[IN]] on @m ["c", "a", "b"] {dim = 1 : i64} : tensor<2x2xf32> -> tensor<2x16xf32>
func.func @all_axes_3d(%x: tensor<2x16xf32> {dist.sharding = #dist.sharding<@m, [{}, {"c", "a", "b"}]>})
    -> (tensor<2x16xf32> {dist.sharding = #dist.sharding<@m, [{}, {}]>}) {
  %0 = dist.reshard %x <@m, [{}, {}]> : tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
// A cycle of splits over three dimensions: two all_to_alls, nothing gathered.
// CHECK-LABEL: func.func @cycle_2d
// CHECK: %[[IN:.*]] = dist.all_slice %{{.*}} on @m ["tp"] {dim = 2 : i64} : tensor<4x4x4xf32> -> tensor<4x4x2xf32>
// CHECK-NEXT: %[[A:.*]] = dist.all_to_all %[[IN]] on @m ["tp"] {concat_dim = 2 : i64, split_dim = 0 : i64} : tensor<4x4x2xf32> -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[B:.*]] = dist.all_to_all %[[A]] on @m ["dp"] {concat_dim = 1 : i64, split_dim = 2 : i64} : tensor<2x4x4xf32> -> tensor<2x8x2xf32>
// CHECK-NEXT: dist.all_gather %[[B]] on @m ["tp"] {dim = 0 : i64}
func.func @cycle_2d(%x: tensor<4x8x4xf32> {dist.sharding = #dist.sharding<@m, [{}, {"dp"}, {"tp"}]>})
    -> (tensor<4x8x4xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}, {"dp"}]>}) {
  %0 = dist.reshard %x <@m, [{"tp"}, {}, {"dp"}]> : tensor<4x8x4xf32>
  return %0 : tensor<4x8x4xf32>
}
