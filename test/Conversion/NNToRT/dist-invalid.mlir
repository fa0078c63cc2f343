// convert-nn-to-rt takes partitioned programs only, on one world.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -verify-diagnostics

dist.mesh @mesh ["dp"=2, "tp"=2]
func.func @unpartitioned_reshard(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dist.reshard' op belongs to a global (unpartitioned) program; partition it first (dist-partition) before convert-nn-to-rt}}
  %y = dist.reshard %x <@mesh, [{"dp"}, {}]> : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

dist.mesh @mesh ["dp"=2, "tp"=2]
func.func @unpartitioned_constraint(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dist.constraint' op belongs to a global (unpartitioned) program; partition it first (dist-partition)}}
  %y = dist.constraint %x <@mesh, [{}, {"tp"}]> : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

dist.mesh @a ["dp"=2, "tp"=2]
// expected-error @+1 {{'dist.mesh' op has 8 ranks but dist.mesh @a has 4; the meshes of one program must have the same number of ranks}}
dist.mesh @b ["x"=8]
func.func @meshes_of_different_sizes(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = dist.all_reduce %x on @a ["tp"] : tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

dist.mesh @mesh ["dp"=2, "tp"=2]
// expected-error @+1 {{'func.func' op has rt.world_size = 8 but its dist.mesh has 4 ranks}}
func.func @world_size_disagrees(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rt.world_size = 8 : i64} {
  %y = dist.all_reduce %x on @mesh ["tp"] : tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}
