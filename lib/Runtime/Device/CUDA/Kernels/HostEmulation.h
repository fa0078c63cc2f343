//===- HostEmulation.h - run the CUDA kernels on the CPU, for tests -*- C++ -*-===//
//
// With SHARDFLOW_CUDA_HOST_EMULATION defined, the .cu files of this folder
// compile as plain C++ and their kernels run on the host: every CUDA
// thread of a block is a fiber (ucontext) on one OS thread, switched only
// at barriers, so a block runs deterministically and fast enough for unit
// tests. What the kernels use from CUDA is provided here, from the PTX
// ISA's definitions:
//
// - threadIdx/blockIdx/blockDim/gridDim, __syncthreads (a block barrier;
//   a barrier that not every thread of the block reaches is reported);
// - __shfl_xor_sync (full warps only);
// - ldmatrix .m8n8.x4 (.trans) and mma.sync .m16n8k16 (f16/bf16 inputs,
//   f32 accumulators), with the fragment layouts of the PTX ISA: lanes
//   exchange their registers, and each lane computes its own outputs;
// - cp.async: a copy is queued per thread and lands in shared memory only
//   at the cp.async.wait_group that retires its group, so a kernel that
//   reads a tile before waiting for it reads the fill pattern instead;
// - dynamic shared memory, filled with 0xa5 before each block.
//
// tools/cuda-kernel-check runs its cases on a GPU, or through this
// emulation with --emulate: the kernels' logic (indexing, fragment layouts,
// barriers, the online softmax) is then checked on any machine.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CUDA_HOSTEMULATION_H
#define SHARDFLOW_RUNTIME_KERNELS_CUDA_HOSTEMULATION_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace shardflow::emulation {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// The running fiber's coordinates (one fiber runs at a time).
extern Dim3 threadIdx, blockIdx, blockDim, gridDim;

/// What each emulated thread runs: the kernel called with its argument.
using Kernel = std::function<void()>;

/// Runs `body` once per thread of every block of `grid` x `block` (x only),
/// block after block, with `sharedBytes` of dynamic shared memory. Throws
/// std::runtime_error when threads of a block wait at different barriers
/// (a __syncthreads some threads skip, a shuffle part of a warp skips).
void launch(unsigned grid, unsigned block, size_t sharedBytes, const Kernel &body);

/// The block's dynamic shared memory.
void *dynamicShared();

void syncThreads();
float shuffleXor(float value, int laneMask);

/// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane 8i + r gives the
/// address of row r of matrix i.
void ldmatrixX4(uint32_t (&r)[4], const void *rowAddress, bool transpose);

/// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32.
void mmaM16N8K16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16);

/// cp.async.cg.shared.global 16 bytes (zeros when !valid), commit_group,
/// wait_group n.
void cpAsync16(void *dst, const void *src, bool valid);
void cpAsyncCommit();
void cpAsyncWait(int pending);

} // namespace shardflow::emulation

// The CUDA spellings the kernels use that the CUDA headers leave out of a
// host compilation (they define __global__, __device__, __shared__ and
// __forceinline__ for it).
#ifndef __launch_bounds__
#define __launch_bounds__(n)
#endif
using shardflow::emulation::blockDim;
using shardflow::emulation::blockIdx;
using shardflow::emulation::gridDim;
using shardflow::emulation::threadIdx;
inline void __syncthreads() { shardflow::emulation::syncThreads(); }
inline float __shfl_xor_sync(unsigned, float v, int laneMask) {
  return shardflow::emulation::shuffleXor(v, laneMask);
}
inline float __expf(float x) { return std::exp(x); }
using std::max;
using std::min;

#endif // SHARDFLOW_RUNTIME_KERNELS_CUDA_HOSTEMULATION_H
