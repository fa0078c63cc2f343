// RUN: shard-opt %s | shard-opt | FileCheck %s
// Round trip of meshes, shardings and collectives.

// CHECK: dist.mesh @mesh ["dp"=2, "tp"=4]
dist.mesh @mesh ["dp"=2, "tp"=4]

// CHECK-LABEL: func.func @annotations
// CHECK-SAME: dist.sharding = #dist.sharding<@mesh, [{"dp"}, {?}], replicated = ["tp"]>
// CHECK: dist.constraint %{{.*}} <@mesh, [{"dp"}, {"tp", ?}]>
// CHECK: dist.reshard %{{.*}} <@mesh, [{}, {}], unreduced = ["tp"]>
// CHECK: nn.relu {{.*}}dist.shardings = [#dist.sharding<@mesh, [{"dp", "tp"}, {}]>]
func.func @annotations(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {?}], replicated = ["tp"]>}) -> tensor<8x16xf32> {
  %0 = dist.constraint %x <@mesh, [{"dp"}, {"tp", ?}]> : tensor<8x16xf32>
  %1 = dist.reshard %0 <@mesh, [{}, {}], unreduced = ["tp"]> : tensor<8x16xf32>
  %2 = nn.relu %1 {dist.shardings = [#dist.sharding<@mesh, [{"dp", "tp"}, {}]>]} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %2 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @collectives
// CHECK: dist.all_reduce %{{.*}} on @mesh ["tp"] {reduction = "max"} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: dist.all_gather %{{.*}} on @mesh ["dp", "tp"] {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x64xf32>
// CHECK: dist.reduce_scatter %{{.*}} on @mesh ["tp"] {dim = 0 : i64} : tensor<4x8xf32> -> tensor<1x8xf32>
// CHECK: dist.all_to_all %{{.*}} on @mesh ["tp"] {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<4x8xf32> -> tensor<16x2xf32>
// CHECK: dist.all_slice %{{.*}} on @mesh ["dp"] {dim = 0 : i64} : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK: dist.collective_permute %{{.*}} on @mesh {pairs = [array<i64: 0, 1>, array<i64: 1, 0>]} : tensor<4x8xf32>
// CHECK: dist.send %{{.*}} on @mesh {peers = array<i64: 1, -1, -1, -1, -1, -1, -1, -1>} : tensor<4x8xf32>
// CHECK: dist.recv on @mesh {peers = array<i64: -1, 0, -1, -1, -1, -1, -1, -1>} : tensor<4x8xf32>
func.func @collectives(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = dist.all_reduce %x on @mesh ["tp"] {reduction = "max"} : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = dist.all_gather %0 on @mesh ["dp", "tp"] {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x64xf32>
  %2 = dist.reduce_scatter %x on @mesh ["tp"] {dim = 0 : i64} : tensor<4x8xf32> -> tensor<1x8xf32>
  %3 = dist.all_to_all %x on @mesh ["tp"] {split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<4x8xf32> -> tensor<16x2xf32>
  %4 = dist.all_slice %x on @mesh ["dp"] {dim = 0 : i64} : tensor<4x8xf32> -> tensor<2x8xf32>
  %5 = dist.collective_permute %x on @mesh {pairs = [array<i64: 0, 1>, array<i64: 1, 0>]} : tensor<4x8xf32>
  dist.send %x on @mesh {peers = array<i64: 1, -1, -1, -1, -1, -1, -1, -1>} : tensor<4x8xf32>
  %6 = dist.recv on @mesh {peers = array<i64: -1, 0, -1, -1, -1, -1, -1, -1>} : tensor<4x8xf32>
  return %6 : tensor<4x8xf32>
}
