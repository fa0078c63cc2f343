// RUN: split-file %s %t
// RUN: shard-opt %t/lm.mlir --mesh tp=4 --strategy megatron | FileCheck %s
// RUN: shard-opt %t/lm.mlir --mesh tp=4 --strategy megatron --target cpu -o - | FileCheck %s --check-prefix=RT
// RUN: shard-opt %t/lm.mlir --mesh tp=4 --strategy megatron --shard wte=_,_ --shard lm_head=_,_ | FileCheck %s --check-prefix=USER
// RUN: shard-opt %t/others.mlir --mesh tp=4 --strategy megatron | FileCheck %s --check-prefix=OTHERS
// RUN: shard-opt %t/tokens.mlir --mesh tp=4 --strategy megatron | FileCheck %s --check-prefix=TOKENS
// RUN: shard-opt %t/padded.mlir --mesh tp=4 --strategy megatron | FileCheck %s --check-prefix=PADDED
// RUN: shard-opt %t/padded.mlir --mesh tp=4 --strategy megatron --target cpu -o - | FileCheck %s --check-prefix=PADDED-RT
// RUN: shard-opt %t/padded.mlir --mesh tp=4 --strategy megatron --shard wte=_,_ --shard lm_head=_,_ | FileCheck %s --check-prefix=PADDED-USER

// Megatron's vocabulary parallelism: the token embedding table and the
// output projection onto the vocabulary are split by vocabulary entries.
// Each rank looks the (global) ids up in its block of rows, zeros for the
// others, and an all_reduce sums the blocks; the logits are gathered.

// CHECK-LABEL: func.func @main
// CHECK: nn.weight "wte" {{.*}}global_shape = array<i64: 64, 16>{{.*}}starts = [array<i64: 0, 0>, array<i64: 16, 0>, array<i64: 32, 0>, array<i64: 48, 0>]{{.*}} : tensor<16x16xf32>
// CHECK: nn.weight "lm_head" {{.*}}global_shape = array<i64: 16, 64>{{.*}} : tensor<16x16xf32>
// CHECK: %[[E:.*]] = nn.gather %{{.*}}, %arg0 {axis_size = 64 : i64, axis_starts = array<i64: 0, 16, 32, 48>} : (tensor<16x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
// CHECK-NEXT: dist.all_reduce %[[E]] on @mesh ["tp"] : tensor<2x4x16xf32> -> tensor<2x4x16xf32>
// The position table is looked up by a range: it stays whole.
// CHECK: nn.gather %{{.*}}, %{{.*}} : (tensor<32x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
// CHECK: %[[L:.*]] = nn.matmul {{.*}} : (tensor<2x4x16xf32>, tensor<16x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: dist.all_gather %[[L]] on @mesh ["tp"] {dim = 2 : i64} : tensor<2x4x16xf32> -> tensor<2x4x64xf32>

// The runtime kernel gets the global size and each rank's start.
// RT: kernel gather {{.*}}axis_size=i:64 axis_starts=is:0,16,32,48

// --shard seeds outrank the preset: both stay whole.
// USER-NOT: axis_starts
// USER-NOT: dist.all_reduce
// USER-NOT: dist.all_gather
// USER: return

//--- lm.mlir
func.func @main(%ids: tensor<2x4xi64> {nn.name = "ids"}) -> tensor<2x4x64xf32> {
  %wte = nn.weight "wte" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<64x16xf32>
  %wpe = nn.weight "wpe" {storage = "external", file = "m.data", offset = 4096 : i64} : tensor<32x16xf32>
  %head = nn.weight "lm_head" {storage = "external", file = "m.data", offset = 6144 : i64} : tensor<16x64xf32>
  %e = nn.gather %wte, %ids : (tensor<64x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
  %pos = nn.range {start = 0.0 : f64, limit = 4.0 : f64, delta = 1.0 : f64} : tensor<4xi64>
  %p = nn.gather %wpe, %pos : (tensor<32x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
  %h = nn.add %e, %p : (tensor<2x4x16xf32>, tensor<4x16xf32>) -> tensor<2x4x16xf32>
  %l = nn.matmul %h, %head : (tensor<2x4x16xf32>, tensor<16x64xf32>) -> tensor<2x4x64xf32>
  return %l : tensor<2x4x64xf32>
}

//--- others.mlir
// Not vocabularies: a token-type table (2 rows) and a classifier head
// (8 -> 4) stay whole.
// OTHERS-LABEL: func.func @not_vocabularies
// OTHERS: nn.weight "types" {{.*}} : tensor<2x8xf32>
// OTHERS: nn.weight "classifier" {{.*}} : tensor<8x4xf32>
// OTHERS-NOT: dist.
// OTHERS: return

func.func @not_vocabularies(%t: tensor<2x4xi64> {nn.name = "t"}) -> tensor<2x4x4xf32> {
  %types = nn.weight "types" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<2x8xf32>
  %head = nn.weight "classifier" {storage = "external", file = "m.data", offset = 4096 : i64} : tensor<8x4xf32>
  %a = nn.gather %types, %t : (tensor<2x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = nn.matmul %a, %head : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> tensor<2x4x4xf32>
  return %l : tensor<2x4x4xf32>
}

//--- tokens.mlir
// 32 tokens against 16 features: gathering [32, 64] logits would move more
// than the [16, 64] weight's split saves, so the projection stays whole
// (the embedding is still split).
// TOKENS: nn.weight "wte" {{.*}} : tensor<16x16xf32>
// TOKENS: nn.weight "lm_head" {{.*}} : tensor<16x64xf32>
// TOKENS-NOT: global_shape
// TOKENS: nn.matmul {{.*}} : (tensor<4x8x16xf32>, tensor<16x64xf32>) -> tensor<4x8x64xf32>
// TOKENS-NOT: dist.all_gather

func.func @main(%ids: tensor<4x8xi64> {nn.name = "ids"}) -> tensor<4x8x64xf32> {
  %wte = nn.weight "wte" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<64x16xf32>
  %head = nn.weight "lm_head" {storage = "external", file = "m.data", offset = 4096 : i64} : tensor<16x64xf32>
  %e = nn.gather %wte, %ids : (tensor<64x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
  %l = nn.matmul %e, %head : (tensor<4x8x16xf32>, tensor<16x64xf32>) -> tensor<4x8x64xf32>
  return %l : tensor<4x8x64xf32>
}

//--- padded.mlir
// A vocabulary of 66 entries, which 4 ranks do not divide, is zero-padded
// to 68 (blocks of 17; blocks rounded up to 24 would leave the last rank
// no real entry). The embedding's lookups still address 66 rows; the
// projection's logits are gathered at the padded width and sliced back.
// PADDED: nn.weight "wte" {{.*}}global_shape = array<i64: 66, 16>{{.*}}starts = [array<i64: 0, 0>, array<i64: 17, 0>, array<i64: 34, 0>, array<i64: 51, 0>]{{.*}}stored_shape = array<i64: 66, 16>} : tensor<17x16xf32>
// PADDED: nn.weight "lm_head" {{.*}}global_shape = array<i64: 16, 66>{{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 17>, array<i64: 0, 34>, array<i64: 0, 51>]{{.*}}stored_shape = array<i64: 16, 66>} : tensor<16x17xf32>
// PADDED: nn.gather %{{.*}}, %arg0 {axis_size = 66 : i64, axis_starts = array<i64: 0, 17, 34, 51>} : (tensor<17x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
// PADDED-NEXT: dist.all_reduce
// PADDED: %[[L:.*]] = nn.matmul {{.*}} : (tensor<2x4x16xf32>, tensor<16x17xf32>) -> tensor<2x4x17xf32>
// PADDED-NEXT: %[[G:.*]] = dist.all_gather %[[L]] on @mesh ["tp"] {dim = 2 : i64} : tensor<2x4x17xf32> -> tensor<2x4x68xf32>
// PADDED-NEXT: nn.slice %[[G]] {axes = array<i64: 2>, ends = array<i64: 66>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x4x68xf32>) -> tensor<2x4x66xf32>

// The artifact marks both weights padded=zeros: the last rank's block
// reaches past the stored tensor.
// PADDED-RT: weight f32 17x16 name=wte {{.*}}global=66x16 starts=0,0;17,0;34,0;51,0 padded=zeros
// PADDED-RT: weight f32 16x17 name=lm_head {{.*}}global=16x66 starts=0,0;0,17;0,34;0,51 padded=zeros

// Kept whole by --shard seeds: not padded either.
// PADDED-USER-NOT: stored_shape
// PADDED-USER-NOT: nn.slice
// PADDED-USER: return

func.func @main(%ids: tensor<2x4xi64> {nn.name = "ids"}) -> tensor<2x4x66xf32> {
  %wte = nn.weight "wte" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<66x16xf32>
  %head = nn.weight "lm_head" {storage = "external", file = "m.data", offset = 8192 : i64} : tensor<16x66xf32>
  %e = nn.gather %wte, %ids : (tensor<66x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
  %l = nn.matmul %e, %head : (tensor<2x4x16xf32>, tensor<16x66xf32>) -> tensor<2x4x66xf32>
  return %l : tensor<2x4x66xf32>
}
