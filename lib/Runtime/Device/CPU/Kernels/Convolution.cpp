//===- Convolution.cpp - CPU kernels: conv and pooling ---------------------===//
//
// conv (1-D to 3-D, groups, strides, pads, dilations, bias) as im2col plus
// a GEMM per image and group; max_pool (with or without indices),
// average_pool and global_average_pool as direct window loops. Every window
// runs as a 3-D one whose missing leading dimensions have size 1. f16 and
// bf16 run through f32.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Kernel.h"

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

/// The window geometry of a 1-D, 2-D or 3-D conv/pool, as 3-D: missing
/// leading spatial dimensions have size 1, kernel 1, stride 1 and no pads.
struct Window {
  int64_t n = 0, c = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1};
  int64_t pad0[3] = {0, 0, 0}, pad1[3] = {0, 0, 0};
  int64_t inPlane() const { return in[0] * in[1] * in[2]; }
  int64_t outPlane() const { return out[0] * out[1] * out[2]; }
  int64_t kernelSize() const { return k[0] * k[1] * k[2]; }
  /// The input coordinate of output `o` and kernel tap `t` in dimension `d`.
  int64_t at(int d, int64_t o, int64_t t) const {
    return o * stride[d] - pad0[d] + t * dil[d];
  }
};

Window window(const KernelContext &ctx, const Tensor &x, const Tensor &y,
              const std::vector<int64_t> &kernel) {
  int64_t spatial = x.rank() - 2;
  if (spatial < 1 || spatial > 3)
    fail(ctx, "only 1-D, 2-D and 3-D windows are supported, got " +
                  std::to_string(spatial) + " spatial dimensions");
  if (y.rank() != x.rank())
    fail(ctx, "result rank differs from the input's");
  std::vector<int64_t> strides = ctx.params.getInts("strides", {}),
                       pads = ctx.params.getInts("pads", {}),
                       dilations = ctx.params.getInts("dilations", {});
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
  for (int64_t i = 0; i < spatial; ++i) {
    size_t d = size_t(3 - spatial + i), si = size_t(i);
    g.in[d] = x.shape[2 + si];
    g.out[d] = y.shape[2 + si];
    g.k[d] = kernel[si];
    g.stride[d] = strides[si];
    g.dil[d] = dilations[si];
    g.pad0[d] = pads[si];
    g.pad1[d] = pads[size_t(spatial) + si];
  }
  return g;
}

//===----------------------------------------------------------------------===//
// conv
//===----------------------------------------------------------------------===//

/// Lays out the [C*kd*kh*kw, od*oh*ow] patch matrix of one image and group.
template <typename T>
void im2col(const Window &g, int64_t channels, const T *xin, T *dst) {
  int64_t inPlane = g.inPlane();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t a = 0; a < g.k[0]; ++a)
      for (int64_t i = 0; i < g.k[1]; ++i)
        for (int64_t j = 0; j < g.k[2]; ++j) {
          const T *src = xin + c * inPlane;
          for (int64_t od = 0; od < g.out[0]; ++od) {
            int64_t id = g.at(0, od, a);
            for (int64_t oh = 0; oh < g.out[1]; ++oh, dst += g.out[2]) {
              int64_t ih = g.at(1, oh, i);
              if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
                std::fill(dst, dst + g.out[2], T(0));
                continue;
              }
              const T *row = src + (id * g.in[1] + ih) * g.in[2];
              for (int64_t ow = 0; ow < g.out[2]; ++ow) {
                int64_t iw = g.at(2, ow, j);
                dst[ow] = (iw >= 0 && iw < g.in[2]) ? row[iw] : T(0);
              }
            }
          }
        }
}

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
  int64_t mg = m / group, kdim = cg * g.kernelSize(), plane = g.outPlane(),
          inPlane = g.inPlane();
  bool direct = g.kernelSize() == 1 && plane == inPlane;
  for (int d = 0; d < 3; ++d)
    direct = direct && g.stride[d] == 1 && g.pad0[d] == 0 && g.pad1[d] == 0;
  std::unique_ptr<T[]> col(direct ? nullptr : new T[size_t(std::max<int64_t>(kdim * plane, 1))]);
  const T *xd = x.as<const T>(), *wd = wt.as<const T>();
  const T *bd = bias ? bias->as<const T>() : nullptr;
  T *yd = y.as<T>();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t gr = 0; gr < group; ++gr) {
      const T *xin = xd + (n * g.c + gr * cg) * inPlane;
      const T *cols = xin;
      if (!direct) {
        im2col(g, cg, xin, col.get());
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

/// Max pooling; with `indices`, also the flat input index of each
/// window's first maximum (row-major, or column-major over the spatial
/// dimensions with `storage_order` 1).
template <typename T> void maxPoolTyped(const KernelContext &ctx) {
  const Tensor &x = ctx.inputs[0], &y = ctx.outputs[0];
  Window g = window(ctx, x, y, ctx.params.getInts("kernel_shape", {}));
  int64_t *indices = nullptr;
  bool columnMajor = false;
  if (ctx.outputs.size() == 2) {
    const Tensor &ind = ctx.outputs[1];
    if (ind.dtype != DType::I64 || ind.shape != y.shape)
      fail(ctx, "indices must be i64 with the result's shape");
    indices = ind.as<int64_t>();
    columnMajor = ctx.params.getInt("storage_order", 0) == 1;
  }
  T lowest = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
  const T *xd = x.as<const T>();
  T *yd = y.as<T>();
  int64_t inPlane = g.inPlane();
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T *src = xd + p * inPlane;
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          T best = lowest;
          int64_t bd = -1, bh = -1, bw = -1;
          for (int64_t a = 0; a < g.k[0] && best == best; ++a) {
            int64_t id = g.at(0, od, a);
            if (id < 0 || id >= g.in[0])
              continue;
            for (int64_t i = 0; i < g.k[1] && best == best; ++i) {
              int64_t ih = g.at(1, oh, i);
              if (ih < 0 || ih >= g.in[1])
                continue;
              const T *row = src + (id * g.in[1] + ih) * g.in[2];
              for (int64_t j = 0; j < g.k[2]; ++j) {
                int64_t iw = g.at(2, ow, j);
                if (iw < 0 || iw >= g.in[2])
                  continue;
                T v = row[iw];
                // NaN propagates, as in ONNX Runtime's max; the first
                // maximum wins, as in ONNX's reference.
                if (v > best || v != v || bw < 0) {
                  best = v;
                  bd = id, bh = ih, bw = iw;
                }
                if (best != best)
                  break;
              }
            }
          }
          *yd++ = best;
          if (indices) {
            int64_t flat = columnMajor ? bd * g.in[1] * g.in[2] + bw * g.in[1] + bh
                                       : (bd * g.in[1] + bh) * g.in[2] + bw;
            *indices++ = bw < 0 ? -1 : p * inPlane + flat;
          }
        }
  }
}

void maxPoolKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.empty() || ctx.outputs.size() > 2)
    fail(ctx, "expects 1 input and 1 or 2 outputs");
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

void maxPoolWithIndicesKernel(const KernelContext &ctx) {
  if (ctx.outputs.size() != 2)
    fail(ctx, "expects 2 outputs (values and indices)");
  maxPoolKernel(ctx);
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
  Window g = window(ctx, x, y, ctx.params.getInts("kernel_shape", {}));
  bool includePad = ctx.params.getBool("count_include_pad", false);
  const T *xd = x.as<const T>();
  T *yd = y.as<T>();
  // Divisors per output position and dimension: with count_include_pad the
  // window counts pads but never the part past the end of the padded input.
  std::vector<int64_t> div[3];
  for (int d = 0; d < 3; ++d) {
    div[d].resize(size_t(g.out[d]));
    for (int64_t o = 0; o < g.out[d]; ++o) {
      int64_t s = g.at(d, o, 0);
      div[d][size_t(o)] = includePad
                              ? countIn(s, g.k[d], g.dil[d], -g.pad0[d], g.in[d] + g.pad1[d])
                              : countIn(s, g.k[d], g.dil[d], 0, g.in[d]);
    }
  }
  int64_t inPlane = g.inPlane();
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T *src = xd + p * inPlane;
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          T sum = 0;
          for (int64_t a = 0; a < g.k[0]; ++a) {
            int64_t id = g.at(0, od, a);
            if (id < 0 || id >= g.in[0])
              continue;
            for (int64_t i = 0; i < g.k[1]; ++i) {
              int64_t ih = g.at(1, oh, i);
              if (ih < 0 || ih >= g.in[1])
                continue;
              const T *row = src + (id * g.in[1] + ih) * g.in[2];
              for (int64_t j = 0; j < g.k[2]; ++j) {
                int64_t iw = g.at(2, ow, j);
                if (iw >= 0 && iw < g.in[2])
                  sum += row[iw];
              }
            }
          }
          int64_t n = div[0][size_t(od)] * div[1][size_t(oh)] * div[2][size_t(ow)];
          *yd++ = n > 0 ? sum / T(n) : T(0);
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
SHARDFLOW_REGISTER_KERNEL("max_pool_with_indices", maxPoolWithIndicesKernel);
SHARDFLOW_REGISTER_KERNEL("average_pool", averagePoolKernel);
SHARDFLOW_REGISTER_KERNEL("global_average_pool", globalAveragePoolKernel);
