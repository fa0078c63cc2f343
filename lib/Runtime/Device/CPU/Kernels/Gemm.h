//===- Gemm.h - the CPU kernels' blocked GEMM ------------------*- C++ -*-===//
//
// C[M,N] += A[M,K] * B[K,N] with arbitrary row/column strides for A and B
// (so transposed operands need no copy) and row stride ldc for C. One
// implementation for matmul, gemm and conv: OpenBLAS (one thread per tile
// of C) for f32/f64 when the runtime is built with it, else a blocked
// kernel whose AVX2+FMA build is picked at run time when the CPU has it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CPU_GEMM_H
#define SHARDFLOW_RUNTIME_KERNELS_CPU_GEMM_H

#include <cstdint>
#include <string>

namespace shardflow::runtime::cpu {

/// preferredBlasCore (shardflow/Runtime/Device/CPU/CpuDevice.h): the OpenBLAS core to
/// ask for, or "" (`picked`: the one running).
std::string blasCoreUpgrade(std::string *picked = nullptr);

/// Threads gemmAccumulate may use (the kernels' pool; OpenBLAS itself is
/// kept to one thread).
void setGemmThreads(int threads);

/// Instantiated for float, double, int8..int64 and uint8..uint64. Runs on
/// up to setGemmThreads' threads, in tiles of C fixed by the shape alone,
/// so its result depends only on the operands, never on the thread count.
template <typename T>
void gemmAccumulate(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA,
                    int64_t csA, const T *b, int64_t rsB, int64_t csB, T *c,
                    int64_t ldc);

/// The same on the calling thread only, through the built-in kernel (never
/// OpenBLAS, whose threads would compete with ours): for kernels that issue
/// many small GEMMs from inside parallelFor bodies. Its result depends only
/// on the operands, never on the thread count.
template <typename T>
void gemmAccumulateSerial(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA,
                          int64_t csA, const T *b, int64_t rsB, int64_t csB, T *c,
                          int64_t ldc);

/// The same on the calling thread, through OpenBLAS where it applies (f32
/// and f64 operands whose rows or columns are contiguous; OpenBLAS runs
/// single-threaded) and the built-in kernel otherwise: for kernels that
/// issue many small GEMMs from inside parallelFor bodies (attention's
/// blocks). Its result depends only on the operands.
template <typename T>
void gemmAccumulateOnThread(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA,
                            int64_t csA, const T *b, int64_t rsB, int64_t csB, T *c,
                            int64_t ldc);

} // namespace shardflow::runtime::cpu

#endif // SHARDFLOW_RUNTIME_KERNELS_CPU_GEMM_H
