// RUN: shard-opt %s -split-input-file -dist-propagate | FileCheck %s
// RUN: shard-opt %s -split-input-file -dist-propagate=explain=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

dist.mesh @m ["dp"=2, "tp"=2]
// Forward through elementwise ops and a matmul; the weight's columns split
// the result's columns.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<8x6xf32> {dist.sharding = #dist.sharding<@m, [{"dp"}, {"tp"}]>})
// CHECK: nn.relu {{.*}}dist.shardings = [#dist.sharding<@m, [{"dp"}, {}]>]
// CHECK: nn.matmul {{.*}}dist.shardings = [#dist.sharding<@m, [{"dp"}, {"tp"}]>]
// EXPLAIN: remark: result 0 of nn.matmul {{.*}} is #dist.sharding<@m, [{"dp"}, {"tp"}]>; dim 0 ["dp"] from result 0 of nn.relu {{.*}} dim 0 through nn.matmul {{.*}}; dim 1 ["tp"] from argument 1 dim 1 through nn.matmul
func.func @forward(%x: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"dp"}, {}]>},
                   %w: tensor<4x6xf32> {dist.sharding = #dist.sharding<@m, [{}, {"tp"}]>}) -> tensor<8x6xf32> {
  %0 = nn.relu %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %1 = nn.matmul %0, %w : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  return %1 : tensor<8x6xf32>
}

// -----

dist.mesh @m ["tp"=2]
// Backward: a result annotation splits the operands that feed it.
// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%arg0: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>}
// CHECK: nn.exp {{.*}}dist.shardings = [#dist.sharding<@m, [{"tp"}, {}]>]
func.func @backward(%x: tensor<8x4xf32>) -> (tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>}) {
  %0 = nn.exp %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

dist.mesh @m ["tp"=2]
// A conflict: both operands want "tp", on different factors. The seed with
// the higher priority (lower number) wins; the other dim stays whole.
// CHECK-LABEL: func.func @priority
// CHECK: nn.matmul {{.*}}dist.shardings = [#dist.sharding<@m, [{}, {"tp"}]>]
func.func @priority(%x: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>, dist.priority = 2 : i64},
                    %w: tensor<4x6xf32> {dist.sharding = #dist.sharding<@m, [{}, {"tp"}]>, dist.priority = 1 : i64}) -> tensor<8x6xf32> {
  %0 = nn.matmul %x, %w : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}

// -----

dist.mesh @m ["tp"=2]
// Equal priority: the first operand wins.
// CHECK-LABEL: func.func @first_operand
// CHECK: nn.matmul {{.*}}dist.shardings = [#dist.sharding<@m, [{"tp"}, {}]>]
func.func @first_operand(%x: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>},
                         %w: tensor<4x6xf32> {dist.sharding = #dist.sharding<@m, [{}, {"tp"}]>}) -> tensor<8x6xf32> {
  %0 = nn.matmul %x, %w : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}

// -----

dist.mesh @m ["tp"=2]
// Softmax's axis needs the whole row: a split of it does not propagate.
// CHECK-LABEL: func.func @need_replication
// CHECK: nn.softmax {{.*}}dist.shardings = [#dist.sharding<@m, [{}, {}]>]
func.func @need_replication(%x: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{}, {"tp"}]>}) -> tensor<8x4xf32> {
  %0 = nn.softmax %x {axis = 1 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

dist.mesh @m ["tp"=2]
// A closed, replicated seed on a result is not overwritten.
// CHECK-LABEL: func.func @closed
// CHECK: nn.neg {{.*}}dist.shardings = [#dist.sharding<@m, [{}, {}]>]
func.func @closed(%x: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"tp"}, {}]>}) -> tensor<8x4xf32> {
  %0 = nn.neg %x {dist.shardings = [#dist.sharding<@m, [{}, {}]>]} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

dist.mesh @m ["a"=2, "b"=2, "c"=2]
// 3-D mesh: two axes on one dim, a reshape that splits it keeps the major
// axis on the major factor.
// CHECK-LABEL: func.func @reshape_3d
// CHECK: nn.reshape {{.*}}dist.shardings = [#dist.sharding<@m, [{"c"}, {"a", "b"}, {}]>]
func.func @reshape_3d(%x: tensor<2x32xf32> {dist.sharding = #dist.sharding<@m, [{"c"}, {"a", "b"}]>}) -> tensor<2x8x4xf32> {
  %0 = nn.reshape %x : (tensor<2x32xf32>) -> tensor<2x8x4xf32>
  return %0 : tensor<2x8x4xf32>
}

// -----

dist.mesh @m ["tp"=2]
// A constraint in the middle seeds both sides.
// CHECK-LABEL: func.func @constraint
// CHECK: nn.tanh {{.*}}dist.shardings = [#dist.sharding<@m, [{}, {"tp"}]>]
// CHECK: nn.sigmoid {{.*}}dist.shardings = [#dist.sharding<@m, [{}, {"tp"}]>]
func.func @constraint(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = nn.tanh %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %1 = dist.constraint %0 <@m, [{}, {"tp"}]> : tensor<8x4xf32>
  %2 = nn.sigmoid %1 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %2 : tensor<8x4xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
// A constraint's open dimension takes what propagation gives it (the batch
// split over dp); its closed one stays whole.
// CHECK-LABEL: func.func @constraint_open
// CHECK: dist.constraint %arg0 <@m, [{"dp"}, {}]>
// CHECK: nn.sigmoid {{.*}}dist.shardings = [#dist.sharding<@m, [{"dp"}, {}]>]
func.func @constraint_open(%x: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"dp"}, {"tp"}]>})
    -> tensor<8x4xf32> {
  %0 = dist.constraint %x <@m, [{?}, {}]> : tensor<8x4xf32>
  %1 = nn.sigmoid %0 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %1 : tensor<8x4xf32>
}

// -----

dist.mesh @m ["dp"=2, "tp"=2]
// An open dimension grows: x's {"dp", ?} is extended to y's {"dp", "tp"};
// a closed {"dp"} is not.
// CHECK-LABEL: func.func @open_extends
// CHECK-SAME: (%arg0: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"dp", "tp"}, {}]>}
// CHECK-SAME: %arg2: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"dp"}, {}]>}
// CHECK: nn.add %arg0, %arg1 {dist.shardings = [#dist.sharding<@m, [{"dp", "tp"}, {}]>]}
// CHECK: nn.add %arg2, %arg1 {dist.shardings = [#dist.sharding<@m, [{"dp"}, {}]>]}
// EXPLAIN: remark: argument 0 is #dist.sharding<@m, [{"dp", "tp"}, {}]>; dim 0 ["dp", "tp"] seeded on argument 0, extended from argument 1 dim 0 through nn.add
func.func @open_extends(%x: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"dp", ?}, {}]>},
                        %y: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"dp", "tp"}, {}]>},
                        %z: tensor<8x4xf32> {dist.sharding = #dist.sharding<@m, [{"dp"}, {}]>})
    -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %0 = nn.add %x, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %1 = nn.add %z, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0, %1 : tensor<8x4xf32>, tensor<8x4xf32>
}
