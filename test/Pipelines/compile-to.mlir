// shard-opt --compile-to=PHASE stops the compile after a phase and prints
// what it leaves: a two-layer perceptron with a written-out tanh GELU,
// compiled for tp=2 with the megatron preset in bf16.
// RUN: shard-opt %s --target cpu --mesh tp=2 --strategy megatron --dtype bf16 --compile-to=import | FileCheck %s --check-prefix=IMPORT
// RUN: shard-opt %s --target cpu --mesh tp=2 --strategy megatron --dtype bf16 --compile-to=nn | FileCheck %s --check-prefix=NN
// RUN: shard-opt %s --target cpu --mesh tp=2 --strategy megatron --dtype bf16 --compile-to=train | FileCheck %s --check-prefix=NN
// RUN: shard-opt %s --target cpu --mesh tp=2 --strategy megatron --dtype bf16 --compile-to=sharded | FileCheck %s --check-prefix=SHARDED
// RUN: shard-opt %s --target cpu --mesh tp=2 --strategy megatron --dtype bf16 --compile-to=partitioned | FileCheck %s --check-prefix=PARTITIONED
// RUN: shard-opt %s --target cpu --mesh tp=2 --strategy megatron --dtype bf16 --compile-to=stages | FileCheck %s --check-prefix=PARTITIONED
// RUN: shard-opt %s --target cpu --mesh tp=2 --strategy megatron --dtype bf16 --compile-to=rt | FileCheck %s --check-prefix=RT
// RUN: shard-opt %s --target cuda --compile-to=rt | FileCheck %s --check-prefix=CUDA-RT
// RUN: shard-opt %s --target cuda --compile-to=gpu | FileCheck %s --check-prefix=GPU
// Without a target, the last phase is the one the options ask for:
// RUN: shard-opt %s --mesh tp=2 --strategy megatron | FileCheck %s --check-prefix=DEFAULT
// RUN: shard-opt %s | FileCheck %s --check-prefix=IMPORT

// IMPORT-NOT: dist.
// IMPORT: nn.tanh
// IMPORT-NOT: nn.gelu

// The GELU is one op; nothing is sharded yet (train is reserved: no passes).
// NN-NOT: dist.
// NN: nn.gelu %{{.*}} {approximate = "tanh"}
// NN-NOT: nn.tanh

// Every value has its sharding; no collective and no local shape yet.
// SHARDED: dist.mesh @mesh ["tp"=2]
// SHARDED: nn.weight "fc1.w" {dist.shardings = [#dist.sharding<@mesh, [{}, {"tp"}]>]
// SHARDED: nn.weight "fc2.w" {dist.shardings = [#dist.sharding<@mesh, [{"tp"}, {}]>]
// SHARDED-NOT: dist.all_reduce
// SHARDED-NOT: bf16

// The per-rank program: weight slices, the row-parallel product's sum, the
// compute type (stages is reserved: no passes).
// PARTITIONED: nn.weight "fc1.w" {{{.*}}global_shape = array<i64: 8, 16>{{.*}}} : tensor<8x8xf32>
// PARTITIONED: nn.matmul {{.*}} -> tensor<4x8xbf16>
// PARTITIONED: dist.all_reduce %{{.*}} on @mesh ["tp"] : tensor<4x8xbf16>
// PARTITIONED-NOT: dist.sharding

// Buffers planned in the arena, kernels, collectives over rank groups.
// RT: attributes {rt.peak_bytes = {{[0-9]+}} : i64, rt.world_size = 2 : i64}
// RT: rt.kernel "matmul"
// RT: rt.all_reduce ins({{.*}}) {groups = [array<i64: 0, 1>]}
// RT-NOT: nn.

// On CUDA the rt phase stops before code generation: no plan yet.
// CUDA-RT-NOT: rt.peak_bytes
// CUDA-RT: rt.kernel "add"
// CUDA-RT-NOT: gpu.module

// The bias and GELU in the GEMM's epilogue, the softmax generated.
// GPU: rt.peak_bytes
// GPU: rt.kernel "matmul" {{.*}} {params = {epilogue = "gelu_bias"}}
// GPU: rt.launch @shardflow_kernels::@k0_softmax
// GPU: gpu.module @shardflow_kernels

// DEFAULT: dist.all_reduce
// DEFAULT-NOT: rt.

func.func @main(%x: tensor<4x8xf32> {nn.name = "x"}) -> (tensor<4x8xf32> {nn.name = "y"}) {
  %w1 = nn.weight "fc1.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 512 : i64} : tensor<8x16xf32>
  %b1 = nn.weight "fc1.b" {storage = "external", file = "m.data", offset = 512 : i64, size = 64 : i64} : tensor<16xf32>
  %w2 = nn.weight "fc2.w" {storage = "external", file = "m.data", offset = 576 : i64, size = 512 : i64} : tensor<16x8xf32>
  %h = nn.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %hb = nn.add %h, %b1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %hx = nn.mul %half, %hb : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %three = nn.constant dense<3.0> : tensor<f32>
  %cube = nn.pow %hb, %three : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %k = nn.constant dense<4.471500e-02> : tensor<f32>
  %kc = nn.mul %k, %cube : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %inner = nn.add %hb, %kc : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c = nn.constant dense<0.797884583> : tensor<f32>
  %arg = nn.mul %c, %inner : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %t = nn.tanh %arg : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %o = nn.add %one, %t : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %g = nn.mul %hx, %o : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = nn.matmul %g, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %y = nn.softmax %p {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
