//===- Convolution.cpp - CPU kernels: conv and pooling ---------------------===//
//
// conv (1-D and 2-D, groups, strides, pads, dilations, bias) as im2col plus
// a blocked GEMM per image and group; max_pool, average_pool and
// global_average_pool as direct window loops. 1-D windows run as 2-D ones
// with a height of 1. f16 and bf16 run through f32.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Kernel.h"

#include "KernelSupport.h"
#include "Gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//




/// The window geometry of a 1-D or 2-D conv/pool, as 2-D.
struct Window {
  int64_t n = 0, c = 0, h = 1, w = 1;     // input
  int64_t oh = 1, ow = 1;                 // output
  int64_t kh = 1, kw = 1;                 // kernel
  int64_t sh = 1, sw = 1;                 // strides
  int64_t ph0 = 0, pw0 = 0, ph1 = 0, pw1 = 0;
  int64_t dh = 1, dw = 1;
};

Window window(const KernelContext &ctx, const Tensor &x, const Tensor &y,
              const std::vector<int64_t> &kernel) {
  int64_t spatial = x.rank() - 2;
  if (spatial < 1 || spatial > 2)
    fail(ctx, "only 1-D and 2-D windows are supported, got " + std::to_string(spatial) +
                  " spatial dimensions");
  if (y.rank() != x.rank())
    fail(ctx, "result rank differs from the input's");
  std::vector<int64_t> strides = intList(ctx.params, "strides"),
                       pads = intList(ctx.params, "pads"),
                       dilations = intList(ctx.params, "dilations");
  if (strides.empty())
    strides.assign(size_t(spatial), 1);
  if (pads.empty())
    pads.assign(size_t(2 * spatial), 0);
  if (dilations.empty())
    dilations.assign(size_t(spatial), 1);
  if (int64_t(kernel.size()) != spatial || int64_t(strides.size()) != spatial ||
      int64_t(dilations.size()) != spatial || int64_t(pads.size()) != 2 * spatial)
    fail(ctx, "kernel, strides and dilations need " + std::to_string(spatial) +
                  " entries and pads " + std::to_string(2 * spatial));
  Window g;
  g.n = x.shape[0];
  g.c = x.shape[1];
  g.w = x.shape.back();
  g.ow = y.shape.back();
  g.kw = kernel.back();
  g.sw = strides.back();
  g.dw = dilations.back();
  g.pw0 = pads[size_t(spatial - 1)];
  g.pw1 = pads[size_t(2 * spatial - 1)];
  if (spatial == 2) {
    g.h = x.shape[2];
    g.oh = y.shape[2];
    g.kh = kernel[0];
    g.sh = strides[0];
    g.dh = dilations[0];
    g.ph0 = pads[0];
    g.ph1 = pads[2];
  }
  return g;
}

//===----------------------------------------------------------------------===//
// conv
//===----------------------------------------------------------------------===//

template <typename T> void convTyped(const KernelContext &ctx) {
  const Tensor &x = ctx.inputs[0], &wt = ctx.inputs[1], &y = ctx.outputs[0];
  const Tensor *bias = ctx.inputs.size() > 2 ? &ctx.inputs[2] : nullptr;
  if (wt.rank() != x.rank())
    fail(ctx, "weight rank differs from the input's");
  std::vector<int64_t> kernel(wt.shape.begin() + 2, wt.shape.end());
  Window g = window(ctx, x, y, kernel);
  int64_t group = ctx.params.getInt("group", 1);
  int64_t m = wt.shape[0], cg = wt.shape[1];
  if (group < 1 || cg * group != g.c || m % group)
    fail(ctx, "group " + std::to_string(group) + " does not fit " + std::to_string(g.c) +
                  " input and " + std::to_string(m) + " output channels");
  if (y.shape[1] != m)
    fail(ctx, "result channels differ from the weight's");
  if (bias && bias->numel() != m)
    fail(ctx, "bias must have " + std::to_string(m) + " elements");
  int64_t mg = m / group, kdim = cg * g.kh * g.kw, plane = g.oh * g.ow, inPlane = g.h * g.w;
  bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph0 == 0 &&
                g.pw0 == 0 && g.ph1 == 0 && g.pw1 == 0 && g.oh == g.h && g.ow == g.w;
  std::unique_ptr<T[]> col(direct ? nullptr : new T[size_t(std::max<int64_t>(kdim * plane, 1))]);
  const T *xd = x.as<const T>(), *wd = wt.as<const T>();
  const T *bd = bias ? bias->as<const T>() : nullptr;
  T *yd = y.as<T>();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t gr = 0; gr < group; ++gr) {
      const T *xin = xd + (n * g.c + gr * cg) * inPlane;
      const T *cols = xin;
      if (!direct) {
        T *dst = col.get();
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j) {
              const T *src = xin + c * inPlane;
              for (int64_t oh = 0; oh < g.oh; ++oh, dst += g.ow) {
                int64_t ih = oh * g.sh - g.ph0 + i * g.dh;
                if (ih < 0 || ih >= g.h) {
                  std::fill(dst, dst + g.ow, T(0));
                  continue;
                }
                const T *row = src + ih * g.w;
                int64_t iw0 = j * g.dw - g.pw0;
                for (int64_t ow = 0; ow < g.ow; ++ow) {
                  int64_t iw = iw0 + ow * g.sw;
                  dst[ow] = (iw >= 0 && iw < g.w) ? row[iw] : T(0);
                }
              }
            }
        cols = col.get();
      }
      T *out = yd + (n * m + gr * mg) * plane;
      for (int64_t o = 0; o < mg; ++o)
        std::fill(out + o * plane, out + (o + 1) * plane, bd ? bd[gr * mg + o] : T(0));
      gemmAccumulate<T>(mg, plane, kdim, wd + gr * mg * kdim, kdim, 1, cols, plane, 1, out,
                        plane);
    }
}

void convKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() < 2 || ctx.inputs.size() > 3 || ctx.outputs.size() != 1)
    fail(ctx, "expects 2 or 3 inputs and 1 output");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { convTyped<decltype(t)>(c); });
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

template <typename T> void maxPoolTyped(const KernelContext &ctx) {
  const Tensor &x = ctx.inputs[0], &y = ctx.outputs[0];
  Window g = window(ctx, x, y, intList(ctx.params, "kernel_shape"));
  T lowest = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
  const T *xd = x.as<const T>();
  T *yd = y.as<T>();
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T *src = xd + p * g.h * g.w;
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        T best = lowest;
        for (int64_t i = 0; i < g.kh; ++i) {
          int64_t ih = oh * g.sh - g.ph0 + i * g.dh;
          if (ih < 0 || ih >= g.h)
            continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            int64_t iw = ow * g.sw - g.pw0 + j * g.dw;
            if (iw < 0 || iw >= g.w)
              continue;
            T v = src[ih * g.w + iw];
            // NaN propagates, as in ONNX Runtime's max.
            if (v > best || v != v)
              best = v;
            if (best != best)
              break;
          }
        }
        *yd++ = best;
      }
  }
}

void maxPoolKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() < 1)
    fail(ctx, "expects 1 input and 1 output");
  switch (ctx.inputs[0].dtype) {
  case DType::I8: return maxPoolTyped<int8_t>(ctx);
  case DType::U8: return maxPoolTyped<uint8_t>(ctx);
  case DType::I16: return maxPoolTyped<int16_t>(ctx);
  case DType::U16: return maxPoolTyped<uint16_t>(ctx);
  case DType::I32: return maxPoolTyped<int32_t>(ctx);
  case DType::U32: return maxPoolTyped<uint32_t>(ctx);
  case DType::I64: return maxPoolTyped<int64_t>(ctx);
  case DType::U64: return maxPoolTyped<uint64_t>(ctx);
  default: break;
  }
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { maxPoolTyped<decltype(t)>(c); });
}

/// Positions k in [0, kernel) with start + k * dilation in [lo, hi).
int64_t countIn(int64_t start, int64_t kernel, int64_t dilation, int64_t lo, int64_t hi) {
  int64_t n = 0;
  for (int64_t k = 0; k < kernel; ++k) {
    int64_t i = start + k * dilation;
    n += i >= lo && i < hi;
  }
  return n;
}

template <typename T> void averagePoolTyped(const KernelContext &ctx) {
  const Tensor &x = ctx.inputs[0], &y = ctx.outputs[0];
  Window g = window(ctx, x, y, intList(ctx.params, "kernel_shape"));
  bool includePad = ctx.params.getBool("count_include_pad", false);
  const T *xd = x.as<const T>();
  T *yd = y.as<T>();
  // Divisors per output row and column: with count_include_pad the window
  // counts pads but never the part past the end of the padded input.
  std::vector<int64_t> divH(size_t(g.oh)), divW(size_t(g.ow));
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    int64_t s = oh * g.sh - g.ph0;
    divH[size_t(oh)] = includePad ? countIn(s, g.kh, g.dh, -g.ph0, g.h + g.ph1)
                                  : countIn(s, g.kh, g.dh, 0, g.h);
  }
  for (int64_t ow = 0; ow < g.ow; ++ow) {
    int64_t s = ow * g.sw - g.pw0;
    divW[size_t(ow)] = includePad ? countIn(s, g.kw, g.dw, -g.pw0, g.w + g.pw1)
                                  : countIn(s, g.kw, g.dw, 0, g.w);
  }
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T *src = xd + p * g.h * g.w;
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        T sum = 0;
        for (int64_t i = 0; i < g.kh; ++i) {
          int64_t ih = oh * g.sh - g.ph0 + i * g.dh;
          if (ih < 0 || ih >= g.h)
            continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            int64_t iw = ow * g.sw - g.pw0 + j * g.dw;
            if (iw >= 0 && iw < g.w)
              sum += src[ih * g.w + iw];
          }
        }
        int64_t div = divH[size_t(oh)] * divW[size_t(ow)];
        *yd++ = div > 0 ? sum / T(div) : T(0);
      }
  }
}

void averagePoolKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    fail(ctx, "expects 1 input and 1 output");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { averagePoolTyped<decltype(t)>(c); });
}

template <typename T> void globalAveragePoolTyped(const KernelContext &ctx) {
  const Tensor &x = ctx.inputs[0], &y = ctx.outputs[0];
  if (x.rank() < 3)
    fail(ctx, "input must have rank >= 3");
  int64_t planes = x.shape[0] * x.shape[1];
  int64_t size = x.numel() / std::max<int64_t>(planes, 1);
  const T *xd = x.as<const T>();
  T *yd = y.as<T>();
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < size; ++i)
      sum += double(xd[p * size + i]);
    yd[p] = T(size ? sum / double(size) : 0.0);
  }
}

void globalAveragePoolKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    fail(ctx, "expects 1 input and 1 output");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { globalAveragePoolTyped<decltype(t)>(c); });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("conv", convKernel);
SHARDFLOW_REGISTER_KERNEL("max_pool", maxPoolKernel);
SHARDFLOW_REGISTER_KERNEL("average_pool", averagePoolKernel);
SHARDFLOW_REGISTER_KERNEL("global_average_pool", globalAveragePoolKernel);
