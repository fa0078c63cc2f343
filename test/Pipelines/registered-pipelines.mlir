// The compile pipeline as registered pass pipelines: shardflow-compile runs
// every phase up to compile-to, shardflow-<phase> one phase alone; both
// take shard-opt's compile flags as options.
// RUN: shard-opt %s --pass-pipeline='builtin.module(shardflow-compile{target=cpu compile-to=partitioned mesh="tp=2" strategy=megatron dtype=bf16})' | FileCheck %s --check-prefix=PARTITIONED
// RUN: shard-opt %s --pass-pipeline='builtin.module(shardflow-nn{target=cpu},shardflow-sharded{mesh="tp=2" strategy=megatron},shardflow-partitioned{sharding=true dtype=bf16})' | FileCheck %s --check-prefix=PARTITIONED
// RUN: shard-opt %s --pass-pipeline='builtin.module(shardflow-nn{target=cpu})' | FileCheck %s --check-prefix=NN
// RUN: shard-opt %s --pass-pipeline='builtin.module(shardflow-nn)' | FileCheck %s --check-prefix=NONE
// RUN: shard-opt %s --pass-pipeline='builtin.module(shardflow-compile{target=cpu compile-to=rt})' | FileCheck %s --check-prefix=RT
// RUN: shard-opt %s --pass-pipeline='builtin.module(shardflow-compile{target=cuda raise-gelu=false cuda-disable=gemm-epilogues})' | FileCheck %s --check-prefix=GPU
// RUN: not shard-opt %s --pass-pipeline='builtin.module(shardflow-compile{compile-to=rt})' 2>&1 | FileCheck %s --check-prefix=NO-TARGET
// RUN: not shard-opt %s --pass-pipeline='builtin.module(shardflow-compile{compile-to=lowered})' 2>&1 | FileCheck %s --check-prefix=PHASE
// RUN: not shard-opt %s --pass-pipeline='builtin.module(shardflow-compile{target=cuda cuda-disable=tiling})' 2>&1 | FileCheck %s --check-prefix=FEATURE

// PARTITIONED: nn.gelu
// PARTITIONED: dist.all_reduce %{{.*}} on @mesh ["tp"] : tensor<4x8xbf16>
// PARTITIONED-NOT: dist.sharding

// NN: nn.gelu
// NN-NOT: dist.
// NONE: nn.tanh

// RT: rt.peak_bytes
// RT: rt.kernel "gelu"

// Without the epilogue pass the bias add is generated, fused with the
// written-out GELU.
// GPU: rt.kernel "matmul" ins(%arg0, %{{.*}} : memref<4x8xf32>, memref<8x16xf32>)
// GPU: rt.launch @shardflow_kernels::@k0_add_mul_pow_mul_add_mul_tanh_add_mul
// GPU-NOT: epilogue

// NO-TARGET: error: --compile-to rt needs --target cpu or cuda
// PHASE: error: compile-to takes import, nn, train, sharded, partitioned, stages, rt, gpu, artifact, got 'lowered'
// FEATURE: error: --cuda-disable takes vector-accesses, packed-qkv, gemm-epilogues, gemm-residuals, gemm-padding and sibling-fusion, got 'tiling'

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
