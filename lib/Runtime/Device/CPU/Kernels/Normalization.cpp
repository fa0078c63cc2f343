//===- Normalization.cpp - CPU kernels for softmax and normalizations -----===//
//
// softmax / log_softmax subtract the maximum along the axis before exp.
// layer_normalization and rms_normalization accumulate row statistics in
// double (two passes for the variance); batch_normalization applies the
// per-channel affine map. normalization_grad and normalization_scale_grad
// (the layer and RMS norms' backward) recompute a row's statistics as the
// forward does; softmax_cross_entropy_grad is the loss's backward from the
// saved log-sum-exp. f16/bf16 compute in float.
//
// Rows (and batch normalization's channel planes) are split across the
// kernel's threads; each row is computed start to end by one thread, so
// results are bitwise the same for any thread count.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseSupport.h"
#include "Parallel.h"

#include <algorithm>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu::ew;
using shardflow::runtime::cpu::parallelForRows;

namespace {

void expectSameType(const KernelContext &ctx) {
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.shape != out.shape)
    throw kernelError(ctx.kernel, "result shape " + shapeList(out.shape) +
                                      " differs from the input shape " + shapeList(in.shape));
  if (in.dtype != out.dtype)
    throw kernelError(ctx.kernel, "result element type differs from the input's");
}

int64_t normalizeAxis(const KernelContext &ctx, int64_t axis, int64_t rank) {
  if (axis < 0 && axis >= -rank)
    axis += rank;
  if (axis < 0 || axis >= rank)
    throw kernelError(ctx.kernel, "axis " + std::to_string(axis) + " is out of range for rank " +
                                      std::to_string(rank));
  return axis;
}

/// Sum of p[0..n) in double, with eight partial sums so that the loop has
/// no single loop-carried dependency.
template <typename C> double sumDouble(const C *p, int64_t n) {
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      part[l] += double(p[i + l]);
  for (; i < n; ++i)
    part[0] += double(p[i]);
  double s = 0;
  for (double v : part)
    s += v;
  return s;
}

/// Sum of (p[i] - m)^2 in double.
template <typename C> double sumSquaredDev(const C *p, int64_t n, double m) {
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      double d = double(p[i + l]) - m;
      part[l] += d * d;
    }
  for (; i < n; ++i) {
    double d = double(p[i]) - m;
    part[0] += d * d;
  }
  double s = 0;
  for (double v : part)
    s += v;
  return s;
}

/// The maximum of p[0..n) (NaN is skipped; exp of NaN then yields NaN).
template <typename C> C rowMax(const C *p, int64_t n) {
  C part[8];
  std::fill(part, part + 8, -std::numeric_limits<C>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      part[l] = p[i + l] > part[l] ? p[i + l] : part[l];
  for (; i < n; ++i)
    part[0] = p[i] > part[0] ? p[i] : part[0];
  C m = part[0];
  for (int l = 1; l < 8; ++l)
    m = part[l] > m ? part[l] : m;
  return m;
}

/// Loads n elements of storage type T into compute type C.
template <typename T, typename C> void loadRow(const T *src, C *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = C(load(src[i]));
}
template <typename T, typename C> void storeRow(const C *src, T *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = store<T>(Compute<T>(src[i]));
}

//===----------------------------------------------------------------------===//
// softmax, log_softmax
//===----------------------------------------------------------------------===//

/// Softmax over contiguous rows [first, last) of n elements.
template <typename T, bool Log>
void softmaxRows(const T *src, T *dst, int64_t first, int64_t last, int64_t n) {
  using C = Compute<T>;
  std::vector<C> buf(static_cast<size_t>(n)), e(static_cast<size_t>(n));
  C *x = buf.data();
  for (int64_t o = first; o < last; ++o) {
    loadRow(src + o * n, x, n);
    C m = rowMax(x, n);
    for (int64_t i = 0; i < n; ++i)
      e[i] = fastExp(x[i] - m);
    double sum = sumDouble(e.data(), n);
    if constexpr (Log) {
      C ls = C(std::log(sum));
      for (int64_t i = 0; i < n; ++i)
        x[i] = (x[i] - m) - ls;
    } else {
      C r = C(1.0 / sum);
      for (int64_t i = 0; i < n; ++i)
        x[i] = e[i] * r;
    }
    storeRow(x, dst + o * n, n);
  }
}

/// Softmax over a strided axis for outer blocks [first, last) of n x inner
/// elements: one accumulator per inner position, so that the inner loops
/// run contiguously.
template <typename T, bool Log>
void softmaxStrided(const T *src, T *dst, int64_t first, int64_t last, int64_t n,
                    int64_t inner) {
  using C = Compute<T>;
  const int64_t block = n * inner;
  std::vector<C> buf(static_cast<size_t>(block)), m(static_cast<size_t>(inner));
  std::vector<double> s(static_cast<size_t>(inner));
  C *x = buf.data();
  for (int64_t o = first; o < last; ++o) {
    loadRow(src + o * block, x, block);
    std::fill(m.begin(), m.end(), -std::numeric_limits<C>::infinity());
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < inner; ++j)
        m[j] = std::max(m[j], x[i * inner + j]);
    if constexpr (Log) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < inner; ++j)
          s[j] += double(fastExp(x[i * inner + j] - m[j]));
      std::vector<C> ls(static_cast<size_t>(inner));
      for (int64_t j = 0; j < inner; ++j)
        ls[j] = C(std::log(s[j]));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < inner; ++j)
          x[i * inner + j] = (x[i * inner + j] - m[j]) - ls[j];
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < inner; ++j) {
          C e = fastExp(x[i * inner + j] - m[j]);
          x[i * inner + j] = e;
          s[j] += double(e);
        }
      for (int64_t j = 0; j < inner; ++j)
        m[j] = C(1.0 / s[j]); // reuse m as the reciprocal sum
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < inner; ++j)
          x[i * inner + j] *= m[j];
    }
    storeRow(x, dst + o * block, block);
  }
}

template <typename T, bool Log>
void softmaxImpl(const KernelContext &ctx, int64_t outer, int64_t n, int64_t inner) {
  const T *src = ctx.inputs[0].as<T>();
  T *dst = ctx.outputs[0].as<T>();
  parallelForRows(ctx, outer, n * inner, [&](int64_t first, int64_t last) {
    if (inner == 1)
      softmaxRows<T, Log>(src, dst, first, last, n);
    else
      softmaxStrided<T, Log>(src, dst, first, last, n, inner);
  });
}

template <bool Log> void softmaxKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  expectSameType(ctx);
  const Tensor &in = ctx.inputs[0];
  if (in.rank() == 0)
    throw kernelError(ctx.kernel, "input must have rank >= 1");
  int64_t axis = normalizeAxis(ctx, ctx.params.getInt("axis", -1), in.rank());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= in.shape[size_t(d)];
  for (int64_t d = axis + 1; d < in.rank(); ++d)
    inner *= in.shape[size_t(d)];
  int64_t n = in.shape[size_t(axis)];
  if (in.numel() == 0)
    return;
  dispatchFloat(in.dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmaxImpl<T, Log>(ctx, outer, n, inner);
  });
}

void softmaxF(const KernelContext &ctx) { softmaxKernel<false>(ctx); }
void logSoftmaxF(const KernelContext &ctx) { softmaxKernel<true>(ctx); }

//===----------------------------------------------------------------------===//
// layer_normalization, rms_normalization
//===----------------------------------------------------------------------===//

/// `t` (scale or bias) read as C and broadcast unidirectionally to `shape`.
template <typename C>
std::vector<C> expandTo(const KernelContext &ctx, const Tensor &t, const char *what,
                        const std::vector<int64_t> &shape) {
  // Leading 1s beyond the normalized rank do not change the broadcast.
  std::vector<int64_t> from = t.shape;
  while (from.size() > shape.size() && from.front() == 1)
    from.erase(from.begin());
  if (!broadcastsTo(from, shape))
    throw kernelError(ctx.kernel, std::string(what) + " shape " + shapeList(t.shape) +
                                      " does not broadcast to the normalized shape " +
                                      shapeList(shape));
  std::vector<C> vals = readAs<C>(t, ctx.kernel);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  if (int64_t(vals.size()) == n)
    return vals;
  std::vector<C> out(static_cast<size_t>(n));
  BroadcastLoop<1> loop(shape, {from});
  const int64_t st = loop.innerStride[0];
  loop.forEach([&](int64_t o, const std::array<int64_t, 1> &in, int64_t cnt) {
    for (int64_t i = 0; i < cnt; ++i)
      out[size_t(o + i)] = vals[size_t(in[0] + i * st)];
  });
  return out;
}

template <typename T, bool RMS>
void normImpl(const KernelContext &ctx, int64_t rows, int64_t n, double eps,
              const std::vector<int64_t> &normShape) {
  using C = Compute<T>;
  const T *src = ctx.inputs[0].as<T>();
  T *dst = ctx.outputs[0].as<T>();
  std::vector<C> scale = expandTo<C>(ctx, ctx.inputs[1], "scale", normShape);
  std::vector<C> bias;
  bool hasBias = !RMS && ctx.inputs.size() > 2;
  if (hasBias)
    bias = expandTo<C>(ctx, ctx.inputs[2], "bias", normShape);
  const C *sc = scale.data(), *bi = bias.data();
  parallelForRows(ctx, rows, n, [&](int64_t first, int64_t last) {
    std::vector<C> row(static_cast<size_t>(n));
    for (int64_t r = first; r < last; ++r) {
      C *x = row.data();
      loadRow(src + r * n, x, n);
      if constexpr (RMS) {
        double ms = sumSquaredDev(x, n, 0.0) / double(n);
        C inv = C(1.0 / std::sqrt(ms + eps));
        for (int64_t i = 0; i < n; ++i)
          x[i] = x[i] * inv * sc[i];
      } else {
        double mean = sumDouble(x, n) / double(n);
        double var = sumSquaredDev(x, n, mean) / double(n);
        C inv = C(1.0 / std::sqrt(var + eps));
        C m = C(mean);
        if (hasBias)
          for (int64_t i = 0; i < n; ++i)
            x[i] = (x[i] - m) * inv * sc[i] + bi[i];
        else
          for (int64_t i = 0; i < n; ++i)
            x[i] = (x[i] - m) * inv * sc[i];
      }
      storeRow(x, dst + r * n, n);
    }
  });
}

template <bool RMS> void normKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1, RMS ? 2 : 3);
  expectSameType(ctx);
  const Tensor &in = ctx.inputs[0];
  if (in.rank() == 0)
    throw kernelError(ctx.kernel, "input must have rank >= 1");
  int64_t axis = normalizeAxis(ctx, ctx.params.getInt("axis", -1), in.rank());
  double eps = ctx.params.getFloat("epsilon", 1e-5);
  std::vector<int64_t> normShape(in.shape.begin() + axis, in.shape.end());
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < axis; ++d)
    rows *= in.shape[size_t(d)];
  for (int64_t d : normShape)
    n *= d;
  if (in.numel() == 0)
    return;
  dispatchFloat(in.dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    normImpl<T, RMS>(ctx, rows, n, eps, normShape);
  });
}

void layerNormKernel(const KernelContext &ctx) { normKernel<false>(ctx); }
void rmsNormKernel(const KernelContext &ctx) { normKernel<true>(ctx); }

//===----------------------------------------------------------------------===//
// softmax_cross_entropy_grad
//===----------------------------------------------------------------------===//

/// (exp(x - lse) - [label == classes[c]]) * dy on rows whose label is not
/// the ignored one, 0 on the others: logits [rows, C], lse, labels and dy
/// [rows, 1], classes [C]. A row per step.
void softmaxCrossEntropyGradKernel(const KernelContext &ctx) {
  expectArity(ctx, 5, 1);
  const Tensor &x = ctx.inputs[0], &lse = ctx.inputs[1], &labels = ctx.inputs[2],
               &classes = ctx.inputs[3], &dy = ctx.inputs[4];
  if (x.rank() == 0)
    throw kernelError(ctx.kernel, "logits must have rank >= 1");
  const int64_t n = x.shape.back(), rows = n ? x.numel() / n : 0;
  std::vector<int64_t> column(x.shape);
  column.back() = 1;
  if (lse.shape != column || dy.shape != column || labels.shape != column)
    throw kernelError(ctx.kernel, "lse, labels and result_grad must be " + shapeList(column) +
                                      " for logits " + shapeList(x.shape));
  if (classes.shape != std::vector<int64_t>{n} || labels.dtype != DType::I64 ||
      classes.dtype != DType::I64)
    throw kernelError(ctx.kernel, "labels and classes must be int64, classes [" +
                                      std::to_string(n) + "]");
  if (lse.dtype != x.dtype || dy.dtype != x.dtype || ctx.outputs[0].dtype != x.dtype ||
      ctx.outputs[0].shape != x.shape)
    throw kernelError(ctx.kernel, "lse, result_grad and the result must have the logits' type");
  const int64_t ignore = ctx.params.getInt("ignore_index", -100);
  const int64_t *label = labels.as<const int64_t>(), *cls = classes.as<const int64_t>();
  dispatchFloat(x.dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    const T *src = x.as<const T>(), *l = lse.as<const T>(), *g = dy.as<const T>();
    T *dst = ctx.outputs[0].as<T>();
    parallelForRows(ctx, rows, 3 * n, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const T *xr = src + r * n;
        T *out = dst + r * n;
        if (label[r] == ignore) {
          for (int64_t c = 0; c < n; ++c)
            out[c] = store<T>(C(0));
          continue;
        }
        C m = C(load(l[r])), d = C(load(g[r]));
        for (int64_t c = 0; c < n; ++c) {
          C p = fastExp(C(load(xr[c])) - m);
          out[c] = store<T>((cls[c] == label[r] ? p - C(1) : p) * d);
        }
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// normalization_grad, normalization_scale_grad (the norms' backward)
//===----------------------------------------------------------------------===//

/// The statistics of a row as the forward kernel computes them: the mean
/// (0 for RMS) and r = 1 / sqrt(var + eps), in double.
template <typename C, bool RMS> std::pair<double, double> rowStats(const C *x, int64_t n,
                                                                   double eps) {
  double mean = RMS ? 0.0 : sumDouble(x, n) / double(n);
  double var = sumSquaredDev(x, n, mean) / double(n);
  return {mean, 1.0 / std::sqrt(var + eps)};
}

/// The shape checks and row geometry both backward kernels share.
struct NormGradGeometry {
  int64_t rows = 1, n = 1;
  std::vector<int64_t> normShape;
};
NormGradGeometry normGradGeometry(const KernelContext &ctx) {
  const Tensor &x = ctx.inputs[0], &dy = ctx.inputs.back();
  if (x.rank() == 0)
    throw kernelError(ctx.kernel, "input must have rank >= 1");
  if (dy.shape != x.shape || dy.dtype != x.dtype)
    throw kernelError(ctx.kernel, "result_grad " + shapeList(dy.shape) +
                                      " must have the input's shape " + shapeList(x.shape) +
                                      " and type");
  if (ctx.outputs[0].dtype != x.dtype)
    throw kernelError(ctx.kernel, "result element type differs from the input's");
  int64_t axis = normalizeAxis(ctx, ctx.params.getInt("axis", -1), x.rank());
  NormGradGeometry g;
  g.normShape.assign(x.shape.begin() + axis, x.shape.end());
  for (int64_t d = 0; d < axis; ++d)
    g.rows *= x.shape[size_t(d)];
  for (int64_t d : g.normShape)
    g.n *= d;
  return g;
}

/// dx = r (g - mean(g) - xhat mean(g xhat)), g = dy * scale; RMS has no
/// mean(g) term. One row per step, each by one thread.
template <typename T, bool RMS>
void normGradImpl(const KernelContext &ctx, const NormGradGeometry &geo, double eps) {
  using C = Compute<T>;
  const int64_t n = geo.n;
  const T *src = ctx.inputs[0].as<T>(), *dsrc = ctx.inputs[2].as<T>();
  T *dst = ctx.outputs[0].as<T>();
  std::vector<C> scale = expandTo<C>(ctx, ctx.inputs[1], "scale", geo.normShape);
  const C *sc = scale.data();
  parallelForRows(ctx, geo.rows, 4 * n, [&](int64_t first, int64_t last) {
    std::vector<C> xrow(static_cast<size_t>(n)), grow(static_cast<size_t>(n));
    C *x = xrow.data(), *g = grow.data();
    for (int64_t r = first; r < last; ++r) {
      loadRow(src + r * n, x, n);
      loadRow(dsrc + r * n, g, n);
      auto [mean, inv] = rowStats<C, RMS>(x, n, eps);
      C m = C(mean), rc = C(inv);
      double sumG = 0, sumGX = 0;
      for (int64_t i = 0; i < n; ++i) {
        g[i] *= sc[i];
        x[i] = (x[i] - m) * rc; // xhat
        sumG += double(g[i]);
        sumGX += double(g[i]) * double(x[i]);
      }
      C meanG = RMS ? C(0) : C(sumG / double(n)), meanGX = C(sumGX / double(n));
      for (int64_t i = 0; i < n; ++i)
        x[i] = rc * (g[i] - meanG - x[i] * meanGX);
      storeRow(x, dst + r * n, n);
    }
  });
}

template <bool RMS> void normGradKernel(const KernelContext &ctx) {
  expectArity(ctx, 3, 1);
  NormGradGeometry geo = normGradGeometry(ctx);
  if (ctx.outputs[0].shape != ctx.inputs[0].shape)
    throw kernelError(ctx.kernel, "result shape " + shapeList(ctx.outputs[0].shape) +
                                      " differs from the input shape " +
                                      shapeList(ctx.inputs[0].shape));
  if (ctx.inputs[0].numel() == 0)
    return;
  double eps = ctx.params.getFloat("epsilon", 1e-5);
  dispatchFloat(ctx.inputs[0].dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    normGradImpl<T, RMS>(ctx, geo, eps);
  });
}

void normalizationGradKernel(const KernelContext &ctx) {
  if (ctx.params.getBool("rms", false))
    normGradKernel<true>(ctx);
  else
    normGradKernel<false>(ctx);
}

/// The rows of one partial sum of the scale's cotangent: a function of the
/// row count only, so the sums (partials added in order) are the same for
/// any thread count.
int64_t scaleGradChunk(int64_t rows) { return std::max<int64_t>(32, (rows + 127) / 128); }

/// scale_grad[i] = sum over rows of dy * xhat, in double per chunk of rows,
/// the chunks then added in order.
template <typename T, bool RMS>
void normScaleGradImpl(const KernelContext &ctx, const NormGradGeometry &geo, double eps) {
  using C = Compute<T>;
  const int64_t n = geo.n, chunk = scaleGradChunk(geo.rows);
  const int64_t chunks = (geo.rows + chunk - 1) / chunk;
  const T *src = ctx.inputs[0].as<T>(), *dsrc = ctx.inputs[1].as<T>();
  std::vector<double> partial(static_cast<size_t>(chunks * n), 0.0);
  parallelForRows(ctx, chunks, 3 * n * chunk, [&](int64_t first, int64_t last) {
    std::vector<C> xrow(static_cast<size_t>(n)), grow(static_cast<size_t>(n));
    C *x = xrow.data(), *g = grow.data();
    for (int64_t c = first; c < last; ++c) {
      double *acc = partial.data() + c * n;
      for (int64_t r = c * chunk; r < std::min(geo.rows, (c + 1) * chunk); ++r) {
        loadRow(src + r * n, x, n);
        loadRow(dsrc + r * n, g, n);
        auto [mean, inv] = rowStats<C, RMS>(x, n, eps);
        C m = C(mean), rc = C(inv);
        for (int64_t i = 0; i < n; ++i)
          acc[i] += double(g[i] * ((x[i] - m) * rc));
      }
    }
  });
  T *dst = ctx.outputs[0].as<T>();
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c)
      s += partial[size_t(c * n + i)];
    dst[i] = store<T>(C(s));
  }
}

template <bool RMS> void normScaleGradKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  NormGradGeometry geo = normGradGeometry(ctx);
  if (ctx.outputs[0].shape != geo.normShape)
    throw kernelError(ctx.kernel, "result shape " + shapeList(ctx.outputs[0].shape) +
                                      " differs from the normalized shape " +
                                      shapeList(geo.normShape));
  double eps = ctx.params.getFloat("epsilon", 1e-5);
  dispatchFloat(ctx.inputs[0].dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    normScaleGradImpl<T, RMS>(ctx, geo, eps);
  });
}

void normalizationScaleGradKernel(const KernelContext &ctx) {
  if (ctx.params.getBool("rms", false))
    normScaleGradKernel<true>(ctx);
  else
    normScaleGradKernel<false>(ctx);
}

//===----------------------------------------------------------------------===//
// batch_normalization (inference)
//===----------------------------------------------------------------------===//

template <typename T>
void batchNormImpl(const KernelContext &ctx, int64_t batch, int64_t channels, int64_t spatial,
                   double eps) {
  using C = Compute<T>;
  const char *names[4] = {"scale", "bias", "mean", "variance"};
  std::vector<double> p[4];
  for (int i = 0; i < 4; ++i) {
    const Tensor &t = ctx.inputs[size_t(i + 1)];
    if (t.numel() != channels)
      throw kernelError(ctx.kernel, std::string(names[i]) + " has " + std::to_string(t.numel()) +
                                        " elements but the input has " +
                                        std::to_string(channels) + " channels");
    p[i] = readAs<double>(t, ctx.kernel);
  }
  // y = (x - mean) * (scale / sqrt(var + eps)) + bias
  const size_t nc = static_cast<size_t>(channels);
  std::vector<C> a(nc), mean(nc), bias(nc);
  for (int64_t c = 0; c < channels; ++c) {
    a[size_t(c)] = C(p[0][size_t(c)] / std::sqrt(p[3][size_t(c)] + eps));
    bias[size_t(c)] = C(p[1][size_t(c)]);
    mean[size_t(c)] = C(p[2][size_t(c)]);
  }
  const T *src = ctx.inputs[0].as<T>();
  T *dst = ctx.outputs[0].as<T>();
  parallelForRows(ctx, batch * channels, spatial, [&](int64_t first, int64_t last) {
    for (int64_t plane = first; plane < last; ++plane) {
      int64_t c = plane % channels;
      const T *x = src + plane * spatial;
      T *y = dst + plane * spatial;
      C ac = a[size_t(c)], mc = mean[size_t(c)], bc = bias[size_t(c)];
      for (int64_t i = 0; i < spatial; ++i)
        y[i] = store<T>((load(x[i]) - mc) * ac + bc);
    }
  });
}

void batchNormKernel(const KernelContext &ctx) {
  expectArity(ctx, 5, 1);
  expectSameType(ctx);
  const Tensor &in = ctx.inputs[0];
  if (in.rank() < 2)
    throw kernelError(ctx.kernel, "input must have rank >= 2 ([N, C, ...])");
  double eps = ctx.params.getFloat("epsilon", 1e-5);
  int64_t batch = in.shape[0], channels = in.shape[1], spatial = 1;
  for (size_t d = 2; d < in.shape.size(); ++d)
    spatial *= in.shape[d];
  dispatchFloat(in.dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    batchNormImpl<T>(ctx, batch, channels, spatial, eps);
  });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("softmax", softmaxF);
SHARDFLOW_REGISTER_KERNEL("log_softmax", logSoftmaxF);
SHARDFLOW_REGISTER_KERNEL("layer_normalization", layerNormKernel);
SHARDFLOW_REGISTER_KERNEL("rms_normalization", rmsNormKernel);
SHARDFLOW_REGISTER_KERNEL("batch_normalization", batchNormKernel);
SHARDFLOW_REGISTER_KERNEL("normalization_grad", normalizationGradKernel);
SHARDFLOW_REGISTER_KERNEL("softmax_cross_entropy_grad", softmaxCrossEntropyGradKernel);
SHARDFLOW_REGISTER_KERNEL("normalization_scale_grad", normalizationScaleGradKernel);
