//===- AttentionCommon.cuh - what both attention kernels share -*- CUDA -*-===//
//
// Element conversions and the one definition of which scores a query row
// sees, so that the SIMT and the tensor-core kernel agree with each other
// and with the CPU kernel (lib/Runtime/Device/CPU/Kernels/Attention.cpp): scale
// (folded into Q at load), then softcap, then the causal bound and the
// mask; a key that is masked scores -inf whatever its dot product.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CUDA_ATTENTIONCOMMON_CUH
#define SHARDFLOW_RUNTIME_KERNELS_CUDA_ATTENTIONCOMMON_CUH

#include "DeviceKernelArgs.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// A kernel's dynamic shared memory (on the host, the emulated block's).
#ifdef SHARDFLOW_CUDA_HOST_EMULATION
#include "HostEmulation.h"
#define SF_DYNAMIC_SHARED(T, name)                                                                \
  T *name = static_cast<T *>(::shardflow::emulation::dynamicShared())
#else
#define SF_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif

#include <cstdint>

namespace shardflow::runtime::cuda::device {

__device__ __forceinline__ float toFloat(float x) { return x; }
__device__ __forceinline__ float toFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T fromFloat(float x);
template <> __device__ __forceinline__ float fromFloat<float>(float x) { return x; }
template <> __device__ __forceinline__ __half fromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

constexpr float kNegInf = -__builtin_huge_valf();

/// The final score of query `row` against key `col` from its scaled dot
/// product `x`, or -inf where the key is not visible. The caller has
/// checked row < sq and col < skv (a mask read needs both in range).
template <typename T, typename Args>
__device__ __forceinline__ float scoreOf(const Args &a, const uint8_t *maskRowB,
                                         const T *maskRowF, int row, int col, float x) {
  if (a.causal && col > row)
    return kNegInf;
  if (a.softcap > 0.f)
    x = a.softcap * tanhf(x / a.softcap);
  if (a.maskKind == kMaskBool) {
    if (!maskRowB[int64_t(col) * a.maskStride[3]])
      return kNegInf;
  } else if (a.maskKind == kMaskAdd) {
    float bias = toFloat(maskRowF[int64_t(col) * a.maskStride[3]]);
    // -inf bias masks the key even when x is +inf (the CPU kernel's rule).
    if (bias == kNegInf)
      return kNegInf;
    x += bias;
  }
  return x;
}

} // namespace shardflow::runtime::cuda::device

#endif // SHARDFLOW_RUNTIME_KERNELS_CUDA_ATTENTIONCOMMON_CUH
