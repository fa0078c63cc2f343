// RUN: split-file %s %t
// RUN: shard-opt %t/parallel.mlir --mesh tp=2 --strategy megatron | FileCheck %s
// RUN: shard-opt %t/parallel.mlir --mesh dp=2,tp=4 --strategy megatron | FileCheck %s --check-prefix=TP4
// RUN: shard-opt %t/parallel.mlir --mesh tp=2 --strategy megatron --target cpu -o - | FileCheck %s --check-prefix=RT
// RUN: shard-opt %t/order.mlir --mesh tp=2 --strategy megatron | FileCheck %s --check-prefix=ORDER
// RUN: shard-opt %t/reused.mlir --mesh tp=2 --strategy megatron | FileCheck %s --check-prefix=REUSED
// RUN: shard-opt %t/linear.mlir --mesh tp=2 --strategy megatron | FileCheck %s --check-prefix=LINEAR
// RUN: shard-opt %t/product.mlir --mesh tp=2 --strategy megatron | FileCheck %s --check-prefix=PRODUCT
// RUN: shard-opt %t/parallel.mlir --mesh tp=2 --strategy megatron --explain-sharding -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// Partial sums that meet in an add are reduced once (dist-insert-reshards):
// a parallel residual block's two row-parallel outputs stay partial up to
// the add that joins them, and one all_reduce follows it. Each whole
// operand added on the way (a bias, the residual) is scaled by 1/n, so the
// n ranks' pieces still sum to the right value.

// CHECK-LABEL: func.func @main
// CHECK: %[[O1:.*]] = nn.matmul {{.*}} -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[H:.*]] = nn.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[B2:.*]] = nn.mul %{{.*}}, %[[H]] : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK-NEXT: %[[A1:.*]] = nn.add %[[O1]], %[[B2]]
// CHECK: %[[O3:.*]] = nn.matmul {{.*}} -> tensor<2x4x8xf32>
// CHECK: %[[B4:.*]] = nn.mul
// CHECK-NEXT: %[[A3:.*]] = nn.add %[[O3]], %[[B4]]
// CHECK-NEXT: %[[S:.*]] = nn.add %[[A1]], %[[A3]]
// CHECK-NEXT: %[[R:.*]] = dist.all_reduce %[[S]] on @mesh ["tp"]
// CHECK-NEXT: nn.add %arg0, %[[R]]
// CHECK-NOT: dist.all_reduce
// CHECK: return

// Four ranks share each sum: a quarter of each bias; the batch split over
// dp is kept through the adds.
// TP4-LABEL: func.func @main
// TP4: nn.constant dense<2.500000e-01> : tensor<f32>
// TP4: %[[S:.*]] = nn.add %{{.*}}, %{{.*}} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// TP4-NEXT: dist.all_reduce %[[S]] on @mesh ["tp"] : tensor<1x4x8xf32>
// TP4-NOT: dist.all_reduce
// TP4: return

// In the artifact the products fold into the biases' loads (scale=): no
// kernel multiplies.
// RT: buffer {{[0-9]+}} weight f32 8 name=b2 {{.*}} scale=0.5
// RT: buffer {{[0-9]+}} weight f32 8 name=b4 {{.*}} scale=0.5
// RT-NOT: kernel mul
// RT-COUNT-1: collective all_reduce
// RT-NOT: collective all_reduce

// The residual added first: it is scaled too, and a sub works as an add.
// ORDER-LABEL: func.func @residual_first
// ORDER: %[[X:.*]] = nn.mul %arg0, %{{.*}} : (tensor<2x4x8xf32>, tensor<f32>)
// ORDER-NEXT: %[[S:.*]] = nn.add %[[X]], %{{.*}}
// ORDER-NEXT: %[[D:.*]] = nn.sub %[[S]], %{{.*}}
// ORDER-NEXT: dist.all_reduce %[[D]] on @mesh ["tp"]
// ORDER-NOT: dist.all_reduce
// ORDER: return

// A partial sum that is also used elsewhere is reduced where it is made,
// as is the other branch: nothing is scaled.
// REUSED-LABEL: func.func @reused
// REUSED-NOT: nn.mul
// REUSED: dist.all_reduce
// REUSED-NEXT: nn.add
// REUSED: dist.all_reduce
// REUSED-NEXT: nn.add
// REUSED-NOT: dist.all_reduce
// REUSED-NOT: nn.mul
// REUSED: return

// Ops linear in a partial sum pass it on: a product by a whole value (not
// scaled: it multiplies), a dropout, a negation.
// LINEAR-LABEL: func.func @linear
// LINEAR-NOT: dist.all_reduce
// LINEAR-NOT: nn.constant
// LINEAR: nn.mul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<8xf32>)
// LINEAR: nn.dropout
// LINEAR-NEXT: nn.neg
// LINEAR-NEXT: %[[S:.*]] = nn.add
// LINEAR-NEXT: dist.all_reduce %[[S]] on @mesh ["tp"]
// LINEAR-NOT: dist.all_reduce
// LINEAR: return

// A product of two partial sums is not their sum's: both are reduced first.
// PRODUCT-LABEL: func.func @product
// PRODUCT: dist.all_reduce
// PRODUCT: dist.all_reduce
// PRODUCT: nn.mul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// PRODUCT-NOT: dist.all_reduce
// PRODUCT: return

// --explain-sharding says where partial sums meet and what was chosen: one
// all_reduce of 256 bytes sent per rank instead of two.
// EXPLAIN: parallel.mlir:16:8: remark: partial sums over ["tp"] of 2 ops meet at nn.add loc({{.*}}parallel.mlir":16:8): reduced together after it (256 bytes sent per rank instead of 512)
// EXPLAIN-DAG: parallel.mlir:10:9: note: partial sum made by nn.matmul
// EXPLAIN-DAG: parallel.mlir:14:9: note: partial sum made by nn.matmul

//--- parallel.mlir
func.func @main(%x: tensor<2x4x8xf32> {nn.name = "x"}) -> tensor<2x4x8xf32> {
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<8x32xf32>
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 1024 : i64} : tensor<32x8xf32>
  %b2 = nn.weight "b2" {storage = "external", file = "m.data", offset = 2048 : i64} : tensor<8xf32>
  %w3 = nn.weight "w3" {storage = "external", file = "m.data", offset = 3072 : i64} : tensor<8x32xf32>
  %w4 = nn.weight "w4" {storage = "external", file = "m.data", offset = 4096 : i64} : tensor<32x8xf32>
  %b4 = nn.weight "b4" {storage = "external", file = "m.data", offset = 5120 : i64} : tensor<8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g1 = nn.relu %h1 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o1 = nn.matmul %g1, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %a1 = nn.add %o1, %b2 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h3 = nn.matmul %x, %w3 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g3 = nn.relu %h3 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o3 = nn.matmul %g3, %w4 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %a3 = nn.add %o3, %b4 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %s = nn.add %a1, %a3 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y = nn.add %x, %s : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

//--- order.mlir
func.func @residual_first(%x: tensor<2x4x8xf32> {nn.name = "x"}) -> tensor<2x4x8xf32> {
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<8x32xf32>
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 1024 : i64} : tensor<32x8xf32>
  %b2 = nn.weight "b2" {storage = "external", file = "m.data", offset = 2048 : i64} : tensor<8xf32>
  %w3 = nn.weight "w3" {storage = "external", file = "m.data", offset = 3072 : i64} : tensor<8x32xf32>
  %w4 = nn.weight "w4" {storage = "external", file = "m.data", offset = 4096 : i64} : tensor<32x8xf32>
  %b4 = nn.weight "b4" {storage = "external", file = "m.data", offset = 5120 : i64} : tensor<8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g1 = nn.relu %h1 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o1 = nn.matmul %g1, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %a1 = nn.add %o1, %b2 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h3 = nn.matmul %x, %w3 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g3 = nn.relu %h3 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o3 = nn.matmul %g3, %w4 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %a3 = nn.add %o3, %b4 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %s = nn.add %x, %a1 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y = nn.sub %s, %a3 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

//--- reused.mlir
func.func @reused(%x: tensor<2x4x8xf32> {nn.name = "x"}) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<8x32xf32>
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 1024 : i64} : tensor<32x8xf32>
  %b2 = nn.weight "b2" {storage = "external", file = "m.data", offset = 2048 : i64} : tensor<8xf32>
  %w3 = nn.weight "w3" {storage = "external", file = "m.data", offset = 3072 : i64} : tensor<8x32xf32>
  %w4 = nn.weight "w4" {storage = "external", file = "m.data", offset = 4096 : i64} : tensor<32x8xf32>
  %b4 = nn.weight "b4" {storage = "external", file = "m.data", offset = 5120 : i64} : tensor<8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g1 = nn.relu %h1 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o1 = nn.matmul %g1, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %a1 = nn.add %o1, %b2 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h3 = nn.matmul %x, %w3 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g3 = nn.relu %h3 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o3 = nn.matmul %g3, %w4 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %a3 = nn.add %o3, %b4 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %s = nn.add %a1, %a3 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y = nn.add %x, %s : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y, %a1 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

//--- linear.mlir
func.func @linear(%x: tensor<2x4x8xf32> {nn.name = "x"}) -> tensor<2x4x8xf32> {
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<8x32xf32>
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 1024 : i64} : tensor<32x8xf32>
  %s2 = nn.weight "s2" {storage = "external", file = "m.data", offset = 2048 : i64} : tensor<8xf32>
  %w3 = nn.weight "w3" {storage = "external", file = "m.data", offset = 3072 : i64} : tensor<8x32xf32>
  %w4 = nn.weight "w4" {storage = "external", file = "m.data", offset = 4096 : i64} : tensor<32x8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g1 = nn.relu %h1 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o1 = nn.matmul %g1, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %m1 = nn.mul %o1, %s2 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h3 = nn.matmul %x, %w3 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g3 = nn.relu %h3 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o3 = nn.matmul %g3, %w4 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %d3 = nn.dropout %o3 {ratio = 0.1 : f32} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %n3 = nn.neg %d3 : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %s = nn.add %m1, %n3 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y = nn.add %x, %s : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

//--- product.mlir
func.func @product(%x: tensor<2x4x8xf32> {nn.name = "x"}) -> tensor<2x4x8xf32> {
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<8x32xf32>
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 1024 : i64} : tensor<32x8xf32>
  %s2 = nn.weight "s2" {storage = "external", file = "m.data", offset = 2048 : i64} : tensor<8xf32>
  %w3 = nn.weight "w3" {storage = "external", file = "m.data", offset = 3072 : i64} : tensor<8x32xf32>
  %w4 = nn.weight "w4" {storage = "external", file = "m.data", offset = 4096 : i64} : tensor<32x8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g1 = nn.relu %h1 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o1 = nn.matmul %g1, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %m1 = nn.mul %o1, %s2 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h3 = nn.matmul %x, %w3 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %g3 = nn.relu %h3 : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %o3 = nn.matmul %g3, %w4 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
  %d3 = nn.dropout %o3 {ratio = 0.1 : f32} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %n3 = nn.neg %d3 : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %s = nn.mul %m1, %n3 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y = nn.add %x, %s : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
