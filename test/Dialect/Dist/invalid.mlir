// RUN: shard-opt %s -split-input-file -verify-diagnostics

// expected-error @below {{names axis "a" twice}}
dist.mesh @m ["a"=2, "a"=2]

// -----

// expected-error @below {{axis "a" has size 0; sizes must be positive}}
dist.mesh @m ["a"=0]

// -----

dist.mesh @m ["dp"=2, "tp"=2]
func.func @unknown_axis(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @below {{unknown mesh axis "pp" in dimension 0 (mesh @m has ["dp", "tp"])}}
  %0 = dist.constraint %x <@m, [{"pp"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
func.func @axis_twice(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @below {{mesh axis "tp" is used twice in one sharding}}
  %0 = dist.constraint %x <@m, [{"tp"}, {"dp", "tp"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
func.func @unreduced_twice(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @below {{mesh axis "tp" is used twice in one sharding}}
  %0 = dist.reshard %x <@m, [{"tp"}, {}], unreduced = ["tp"]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

dist.mesh @m ["tp"=4]
func.func @uneven(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{dimension 0 of size 6 cannot be split evenly over 4 ranks}}
  %0 = dist.constraint %x <@m, [{"tp"}, {}]> : tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @rank_mismatch(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{sharding has 1 dimensions but the tensor 'tensor<6x8xf32>' has 2}}
  %0 = dist.constraint %x <@m, [{"tp"}]> : tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @no_mesh(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{no dist.mesh named @other}}
  %0 = dist.constraint %x <@other, [{"tp"}, {}]> : tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @bad_op_sharding(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{dimension 1 of size 3 cannot be split evenly over 2 ranks}}
  %0 = nn.relu %x {dist.shardings = [#dist.sharding<@m, [{}, {"tp"}]>]} : (tensor<6x8xf32>) -> tensor<6x3xf32>
  return %x : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @shardings_count(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{'dist.shardings' needs one #dist.sharding per result (1)}}
  %0 = nn.relu %x {dist.shardings = []} : (tensor<6x8xf32>) -> tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
func.func @gather_shape(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{expects result type 'tensor<4x16xf32>', got 'tensor<4x8xf32>'}}
  %0 = dist.all_gather %x on @m ["tp"] {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
func.func @gather_axis(%x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  // expected-error @below {{names unknown mesh axis "pp"}}
  %0 = dist.all_gather %x on @m ["pp"] {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
func.func @gather_axis_twice(%x: tensor<4x8xf32>) -> tensor<4x32xf32> {
  // expected-error @below {{names mesh axis "tp" twice}}
  %0 = dist.all_gather %x on @m ["tp", "tp"] {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

dist.mesh @m ["tp"=4]
func.func @slice_uneven(%x: tensor<6x8xf32>) -> tensor<1x8xf32> {
  // expected-error @below {{dimension 0 of size 6 cannot be split evenly over 4 ranks}}
  %0 = dist.all_slice %x on @m ["tp"] {dim = 0 : i64} : tensor<6x8xf32> -> tensor<1x8xf32>
  return %0 : tensor<1x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @dim_range(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{dimension 2 is out of range for rank 2}}
  %0 = dist.reduce_scatter %x on @m ["tp"] {dim = 2 : i64} : tensor<6x8xf32> -> tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @reduction(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{reduction must be sum, prod, max or min, not 'avg'}}
  %0 = dist.all_reduce %x on @m ["tp"] {reduction = "avg"} : tensor<6x8xf32> -> tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @a2a_same(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{split_dim and concat_dim must differ}}
  %0 = dist.all_to_all %x on @m ["tp"] {split_dim = 1 : i64, concat_dim = 1 : i64} : tensor<6x8xf32> -> tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=4]
func.func @permute(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{rank 1 receives twice}}
  %0 = dist.collective_permute %x on @m {pairs = [array<i64: 0, 1>, array<i64: 2, 1>]} : tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @send(%x: tensor<6x8xf32>) {
  // expected-error @below {{needs one peer per rank of the mesh (2), got 3}}
  dist.send %x on @m {peers = array<i64: 1, 0, -1>} : tensor<6x8xf32>
  return
}

// -----

dist.mesh @m ["tp"=2]
func.func @recv(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{rank 0 has peer 0; peers are other ranks of the mesh or -1}}
  %0 = dist.recv on @m {peers = array<i64: 0, 0>} : tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=4]
// expected-error @below {{dimension 0 of size 6 cannot be split evenly over 4 ranks}}
func.func @arg_uneven(%x: tensor<6x8xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>}) -> tensor<6x8xf32> {
  return %x : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
// expected-error @below {{unknown mesh axis "dp" in dimension 1}}
func.func @result_axis(%x: tensor<6x8xf32>) -> (tensor<6x8xf32> {dist.sharding = #dist.sharding<@m, [{}, {"dp"}]>}) {
  return %x : tensor<6x8xf32>
}

// -----

dist.mesh @m ["tp"=2]
func.func @sharding_on_op(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
  // expected-error @below {{'dist.sharding' belongs on function arguments and results; ops carry 'dist.shardings'}}
  %0 = nn.relu %x {dist.sharding = #dist.sharding<@m, [{}, {}]>} : (tensor<6x8xf32>) -> tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}
