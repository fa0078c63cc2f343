//===- KernelSupport.h - helpers shared by the CPU kernels ----*- C++ -*-===//
//
// Error reporting, the f16/bf16 conversions, running a half-precision kernel
// through f32, element-type dispatch and list parameters: written once for
// every kernel file.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CPU_KERNELSUPPORT_H
#define SHARDFLOW_RUNTIME_KERNELS_CPU_KERNELSUPPORT_H

#include "shardflow/Runtime/Format/Kernel.h"

#include "ElementwiseSupport.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime::cpu {

// One f16/bf16 conversion for every kernel: the branch-free ones in
// ElementwiseSupport.h (round to nearest even; NaN stays NaN).
using ew::bf16ToFloat;
using ew::floatToBf16;
using ew::floatToHalf;
using ew::halfToFloat;

[[noreturn]] inline void fail(const KernelContext &ctx, const std::string &what) {
  throw RuntimeError(std::string(ctx.kernel) + ": " + what);
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

/// Calls fn(T{}, ctx) for f32 and f64; f16/bf16 through f32.
template <typename Fn> inline void dispatchFloat(const KernelContext &ctx, DType t, Fn &&fn) {
  switch (t) {
  case DType::F32: return fn(float{}, ctx);
  case DType::F64: return fn(double{}, ctx);
  case DType::F16:
  case DType::BF16:
    return runAsF32(ctx, [&](const KernelContext &sub) { fn(float{}, sub); });
  default: break;
  }
  fail(ctx, std::string("unsupported element type ") + dtypeName(t));
}

} // namespace shardflow::runtime::cpu

#endif // SHARDFLOW_RUNTIME_KERNELS_CPU_KERNELSUPPORT_H
