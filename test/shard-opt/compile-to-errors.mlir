// --compile-to takes a phase the other options can reach; each refusal
// names the flag and what it needs.
// RUN: not shard-opt %s --compile-to=rt 2>&1 | FileCheck %s --check-prefix=RT
// RUN: not shard-opt %s --target cpu --compile-to=gpu 2>&1 | FileCheck %s --check-prefix=GPU
// RUN: not shard-opt %s --compile-to=lowered 2>&1 | FileCheck %s --check-prefix=PHASE
// RUN: not shard-opt %s --target cpu --cuda-disable gemm-padding 2>&1 | FileCheck %s --check-prefix=CUDA
// RUN: not shard-opt %s --target cuda --cuda-disable tiling 2>&1 | FileCheck %s --check-prefix=FEATURE
// RUN: not shard-opt %s --report 2>&1 | FileCheck %s --check-prefix=REPORT

// RT: shard-opt: --compile-to rt needs --target cpu or cuda
// GPU: shard-opt: --compile-to gpu needs --target cuda (the CPU target generates no GPU code)
// PHASE: shard-opt: --compile-to takes import, nn, train, sharded, partitioned, stages, rt, gpu, artifact, got 'lowered'
// CUDA: shard-opt: --cuda-arch, --cuda-path, --cuda-disable and --dump-ptx need --target cuda
// FEATURE: shard-opt: --cuda-disable takes vector-accesses, packed-qkv, gemm-epilogues, gemm-residuals, gemm-padding and sibling-fusion, got 'tiling'
// REPORT: shard-opt: --report needs --target (it reports on the compiled per-rank program)
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
