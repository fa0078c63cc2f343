// RUN: shard-opt %s -split-input-file -verify-diagnostics -dist-annotate="mesh=dp=2 strategy=dp microbatches=2" | FileCheck %s
// RUN: shard-opt %s -split-input-file -verify-diagnostics -dist-annotate="microbatches=4" | FileCheck %s --check-prefix=ALONE

// Micro-batches are a last mesh axis; every graph input's batch is split
// over it, inside its data-parallel split. An input of batch 1 is shared.
// CHECK: dist.mesh @mesh ["dp"=2, "microbatch"=2]
// CHECK: func.func @f(%arg0: tensor<8x3xi64> {dist.origin = "--strategy dp (batch), --microbatches", dist.priority = 1 : i64, dist.sharding = #dist.sharding<@mesh, [{"dp", "microbatch"}, {?}]>, nn.name = "ids"}, %arg1: tensor<1x3xi64> {nn.name = "positions"})
// ALONE: dist.mesh @mesh ["microbatch"=4]
// ALONE: func.func @f(%arg0: tensor<8x3xi64> {dist.origin = "--microbatches", dist.priority = 1 : i64, dist.sharding = #dist.sharding<@mesh, [{"microbatch"}, {?}]>, nn.name = "ids"}, %arg1: tensor<1x3xi64> {nn.name = "positions"})
func.func @f(%ids: tensor<8x3xi64> {nn.name = "ids"}, %pos: tensor<1x3xi64> {nn.name = "positions"}) -> tensor<8x3xi64> {
  %0 = nn.add %ids, %pos : (tensor<8x3xi64>, tensor<1x3xi64>) -> tensor<8x3xi64>
  return %0 : tensor<8x3xi64>
}

// -----

// A batch that does not split (dp=2 x 2: "6, 3 per rank of ["dp"], which
// does not split into 2 micro-batches"; alone: "6, which does not split
// into 4").
// expected-error @+1 {{graph input 'ids' has a batch (dimension 0) of 6, }}
func.func @g(%ids: tensor<6x3xi64> {nn.name = "ids"}) -> tensor<6x3xi64> {
  return %ids : tensor<6x3xi64>
}
