// RUN: shard-opt %s --mesh dp=2,tp=2 --strategy dp | FileCheck %s --check-prefix=DP
// RUN: shard-opt %s --mesh dp=2,tp=2 --strategy megatron | FileCheck %s --check-prefix=TP
// RUN: shard-opt %s --mesh tp=2 --strategy megatron-sp | FileCheck %s --check-prefix=SP
// RUN: shard-opt %s --mesh tp=4 --shard x=_,tp,_ --strategy megatron | FileCheck %s --check-prefix=USER

// A pre-norm transformer MLP block: layer norm, column-parallel fc1 with
// bias, gelu, row-parallel fc2, residual add.

// DP: dist.all_slice %arg0 on @mesh ["dp"] {dim = 0 : i64} : tensor<4x8x16xf32> -> tensor<2x8x16xf32>
// DP-NOT: on @mesh ["tp"]
// DP: dist.all_gather %{{.*}} on @mesh ["dp"] {dim = 0 : i64} : tensor<2x8x16xf32> -> tensor<4x8x16xf32>

// TP: %[[X:.*]] = dist.all_slice %arg0 on @mesh ["dp"] {dim = 0 : i64}
// TP: nn.weight "fc1.weight" {{.*}}global_shape = array<i64: 16, 64>{{.*}}starts = [array<i64: 0, 0>, array<i64: 0, 32>, array<i64: 0, 0>, array<i64: 0, 32>]{{.*}} : tensor<16x32xf32>
// TP: nn.weight "fc1.bias" {{.*}}global_shape = array<i64: 64>{{.*}} : tensor<32xf32>
// TP: nn.weight "fc2.weight" {{.*}}global_shape = array<i64: 64, 16>{{.*}}starts = [array<i64: 0, 0>, array<i64: 32, 0>, array<i64: 0, 0>, array<i64: 32, 0>]{{.*}} : tensor<32x16xf32>
// TP: nn.gelu {{.*}} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
// TP: %[[P:.*]] = nn.matmul {{.*}} : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
// TP-NEXT: dist.all_reduce %[[P]] on @mesh ["tp"] : tensor<2x8x16xf32> -> tensor<2x8x16xf32>
// TP-NOT: dist.all_reduce

// Sequence parallelism: the norm runs on half the tokens, the sequence is
// gathered before fc1 and the partial sums of fc2 are reduce-scattered.
// SP: nn.layer_normalization {{.*}} : (tensor<4x4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x4x16xf32>
// SP: dist.all_gather %{{.*}} on @mesh ["tp"] {dim = 1 : i64} : tensor<4x4x16xf32> -> tensor<4x8x16xf32>
// SP: %[[P:.*]] = nn.matmul {{.*}} : (tensor<4x8x32xf32>, tensor<32x16xf32>) -> tensor<4x8x16xf32>
// SP-NEXT: dist.reduce_scatter %[[P]] on @mesh ["tp"] {dim = 1 : i64} : tensor<4x8x16xf32> -> tensor<4x4x16xf32>
// SP-NOT: dist.all_reduce

// A user seed outranks the preset: x stays split over the sequence.
// USER: dist.all_slice %arg0 on @mesh ["tp"] {dim = 1 : i64} : tensor<4x8x16xf32> -> tensor<4x2x16xf32>
// USER: nn.layer_normalization {{.*}} : (tensor<4x2x16xf32>

func.func @main(%x: tensor<4x8x16xf32> {nn.name = "x"}) -> tensor<4x8x16xf32> {
  %g = nn.weight "ln.scale" {storage = "external", file = "m.data", offset = 0 : i64} : tensor<16xf32>
  %b = nn.weight "ln.bias" {storage = "external", file = "m.data", offset = 64 : i64} : tensor<16xf32>
  %w1 = nn.weight "fc1.weight" {storage = "external", file = "m.data", offset = 128 : i64} : tensor<16x64xf32>
  %b1 = nn.weight "fc1.bias" {storage = "external", file = "m.data", offset = 4224 : i64} : tensor<64xf32>
  %w2 = nn.weight "fc2.weight" {storage = "external", file = "m.data", offset = 4480 : i64} : tensor<64x16xf32>
  %n = nn.layer_normalization %x, %g, %b {axis = 2 : i64} : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %h = nn.matmul %n, %w1 : (tensor<4x8x16xf32>, tensor<16x64xf32>) -> tensor<4x8x64xf32>
  %hb = nn.add %h, %b1 : (tensor<4x8x64xf32>, tensor<64xf32>) -> tensor<4x8x64xf32>
  %a = nn.gelu %hb : (tensor<4x8x64xf32>) -> tensor<4x8x64xf32>
  %y = nn.matmul %a, %w2 : (tensor<4x8x64xf32>, tensor<64x16xf32>) -> tensor<4x8x16xf32>
  %r = nn.add %x, %y : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %r : tensor<4x8x16xf32>
}
