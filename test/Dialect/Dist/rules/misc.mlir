// Data movement: dims whose bounds or positions are global have no factor
// (or need replication); the others split.
// RUN: shard-opt %s -test-dist-sharding-rules -split-input-file -verify-diagnostics

func.func @concat_split(%x: tensor<2x3x4xf32>, %y: tensor<2x5x4xf32>) {
  // expected-remark @below {{([i, 1, j], [i, 1, j]) -> ([i, 1, j]) {i=2, j=4}}}
  %0 = nn.concat %x, %y {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x8x4xf32>
  // expected-remark @below {{([i, j, 1]) -> ([i, j, 1], [i, j, 1]) {i=2, j=3}}}
  %1:2 = nn.split %x {axis = 2 : i64, sizes = array<i64: 1, 3>} : (tensor<2x3x4xf32>) -> (tensor<2x3x1xf32>, tensor<2x3x3xf32>)
  // expected-remark @below {{([1, i, j]) -> ([1, i, j], [1, i, j]) {i=3, j=4}}}
  %2:2 = nn.split %x {axis = -3 : i64, sizes = array<i64: 1, 1>} : (tensor<2x3x4xf32>) -> (tensor<1x3x4xf32>, tensor<1x3x4xf32>)
  return
}

// -----

// A listed axis taken whole in order (step 1, every element) still splits.
func.func @slice_pad(%x: tensor<2x3x4xf32>) {
  // expected-remark @below {{([i, j, 1]) -> ([i, j, 1]) {i=2, j=3}}}
  %0 = nn.slice %x {starts = array<i64: -1>, ends = array<i64: -9223372036854775807>, axes = array<i64: 2>, steps = array<i64: -2>} : (tensor<2x3x4xf32>) -> tensor<2x3x2xf32>
  // expected-remark @below {{([i, 1, j]) -> ([i, 1, j]) {i=2, j=4}}}
  %1 = nn.slice %x {starts = array<i64: 0, 1>, ends = array<i64: 9223372036854775807, 3>, axes = array<i64: 0, 1>, steps = array<i64: 1, 1>} : (tensor<2x3x4xf32>) -> tensor<2x2x4xf32>
  // Reversal keeps the size but not the positions.
  // expected-remark @below {{([1, i, j]) -> ([1, i, j]) {i=3, j=4}}}
  %2 = nn.slice %x {starts = array<i64: -1>, ends = array<i64: -9223372036854775807>, axes = array<i64: 0>, steps = array<i64: -1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // expected-remark @below {{([i, 1, j]) -> ([i, 1, j]) {i=2, j=4}}}
  %3 = nn.pad %x {pads = array<i64: 0, 1, 0, 0, 1, 0>, mode = "reflect"} : (tensor<2x3x4xf32>) -> tensor<2x5x4xf32>
  // expected-remark @below {{([i, j, 1]) -> ([i, j, 1]) {i=2, j=3}}}
  %4 = nn.pad %x {pads = array<i64: 0, 0, 0, 0, 0, -1>} : (tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  return
}

// -----

// Gather's axis is a reduction factor: a rank holding a block of the table
// (a vocabulary-parallel embedding) reads zeros for the rows it lacks, and
// the ranks' results sum to the gather. The indices split freely. An i1
// table has no sum: its axis stays whole.
func.func @gather(%x: tensor<2x3x4xf32>, %i: tensor<5xi64>, %t: tensor<10x4xf32>, %i2: tensor<2x3xi32>, %b: tensor<6x2xi1>) {
  // expected-remark @below {{([i, j, k], [l]) -> ([i, l, k]) {i=2, j=3 reduction, k=4, l=5}}}
  %0 = nn.gather %x, %i {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<5xi64>) -> tensor<2x5x4xf32>
  // expected-remark @below {{([i, j], [k, l]) -> ([k, l, j]) {i=10 reduction, j=4, k=2, l=3}}}
  %1 = nn.gather %t, %i2 : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  // expected-remark @below {{([1, i], [j]) -> ([j, i]) {i=2, j=5}}}
  %2 = nn.gather %b, %i : (tensor<6x2xi1>, tensor<5xi64>) -> tensor<5x2xi1>
  return
}

// -----

// Outside the axis, dims split only where input and indices agree in size.
func.func @gather_elements(%x: tensor<2x3x4xf32>, %i: tensor<2x3x4xi64>, %j: tensor<1x5x4xi64>) {
  // expected-remark @below {{([i, 1, j], [i, 1, j]) -> ([i, 1, j]) {i=2, j=4}}}
  %0 = nn.gather_elements %x, %i {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xi64>) -> tensor<2x3x4xf32>
  // expected-remark @below {{([1, 1, i], [1, 1, i]) -> ([1, 1, i]) {i=4}}}
  %1 = nn.gather_elements %x, %j {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<1x5x4xi64>) -> tensor<1x5x4xf32>
  return
}

// -----

// Only the trailing slice dims, copied whole per update, split.
func.func @scatter_nd(%x: tensor<2x3x4xf32>, %idx: tensor<2x1xi64>, %upd: tensor<2x3x4xf32>, %idx2: tensor<5x2xi64>, %upd2: tensor<5x4xf32>) {
  // expected-remark @below {{([1, i, j], [1, 1], [1, i, j]) -> ([1, i, j]) {i=3, j=4}}}
  %0 = nn.scatter_nd %x, %idx, %upd {reduction = "add"} : (tensor<2x3x4xf32>, tensor<2x1xi64>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // expected-remark @below {{([1, 1, i], [1, 1], [1, i]) -> ([1, 1, i]) {i=4}}}
  %1 = nn.scatter_nd %x, %idx2, %upd2 : (tensor<2x3x4xf32>, tensor<5x2xi64>, tensor<5x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

// The triangle is cut at global row and column positions.
func.func @trilu(%x: tensor<2x3x4xf32>) {
  // expected-remark @below {{([i, j, k]) -> ([i, j, k]) {i=2, j=3 need_replication, k=4 need_replication}}}
  %0 = nn.trilu %x {upper = false, k = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return
}
