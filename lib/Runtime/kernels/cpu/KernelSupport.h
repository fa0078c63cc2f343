//===- KernelSupport.h - helpers shared by the CPU kernels ----*- C++ -*-===//
//
// Error reporting, f16/bf16 conversion (round to nearest even) and running a
// half-precision kernel through f32: written once for every kernel file.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CPU_KERNELSUPPORT_H
#define SHARDFLOW_RUNTIME_KERNELS_CPU_KERNELSUPPORT_H

#include "shardflow/Runtime/Kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime::cpu {

[[noreturn]] inline void fail(const KernelContext &ctx, const std::string &what) {
  throw RuntimeError(std::string(ctx.kernel) + ": " + what);
}

inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {
      exp = 113;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u)
    return sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0);
  if (a >= 0x477ff000u)
    return sign | 0x7c00;
  if (a < 0x38800000u) {
    float af;
    std::memcpy(&af, &a, 4);
    return sign | uint16_t(std::nearbyint(af * 16777216.0f));
  }
  return sign | uint16_t((a + 0xc8000fffu + ((a >> 13) & 1)) >> 13);
}

inline float bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((x >> 16) | 0x40);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

inline bool isHalf(DType t) { return t == DType::F16 || t == DType::BF16; }

/// Runs `fn` on a copy of the context whose f16/bf16 tensors are f32, then
/// converts the f32 results back.
template <typename Fn> void runAsF32(const KernelContext &ctx, Fn &&fn) {
  std::vector<std::unique_ptr<float[]>> buffers;
  auto widen = [&](const Tensor &t, bool copy) {
    if (!isHalf(t.dtype))
      return t;
    int64_t n = t.numel();
    buffers.emplace_back(new float[size_t(std::max<int64_t>(n, 1))]);
    float *f = buffers.back().get();
    const uint16_t *h = t.as<const uint16_t>();
    if (copy)
      for (int64_t i = 0; i < n; ++i)
        f[i] = t.dtype == DType::F16 ? halfToFloat(h[i]) : bf16ToFloat(h[i]);
    return Tensor{f, DType::F32, t.shape};
  };
  std::vector<Tensor> ins, outs;
  for (const Tensor &t : ctx.inputs)
    ins.push_back(widen(t, true));
  for (const Tensor &t : ctx.outputs)
    outs.push_back(widen(t, false));
  KernelContext sub{ctx.kernel, ins, outs, ctx.params, ctx.threads};
  fn(sub);
  for (size_t o = 0; o < outs.size(); ++o) {
    const Tensor &t = ctx.outputs[o];
    if (!isHalf(t.dtype))
      continue;
    const float *f = outs[o].as<const float>();
    uint16_t *h = t.as<uint16_t>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      h[i] = t.dtype == DType::F16 ? floatToHalf(f[i]) : floatToBf16(f[i]);
  }
}

} // namespace shardflow::runtime::cpu

#endif // SHARDFLOW_RUNTIME_KERNELS_CPU_KERNELSUPPORT_H
