//===- Reduction.cpp - CPU kernels for reductions, cumsum and topk --------===//
//
// reduce_sum / reduce_mean / reduce_prod accumulate floats in double and
// integers in 64 bits (wrapping to the element type on store); reduce_max
// and reduce_min propagate NaN. arg_max / arg_min return the first (or
// last) index of the extreme value, NaN counted as the most extreme.
// cumsum accumulates the same way. topk orders NaN above every number and
// breaks ties by the lower index, as onnxruntime does.
//
// Threads split the outermost kept dimension (reductions), the outer blocks
// (cumsum, topk): every output is accumulated start to end by one thread in
// the serial order, so results are bitwise the same for any thread count.
// A reduction to a single value, or over the outermost dimension, stays on
// one thread.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseSupport.h"
#include "Parallel.h"

#include <algorithm>
#include <numeric>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu::ew;
using shardflow::runtime::cpu::parallelForRows;

namespace {

/// The accumulator type for sums of compute type C.
template <typename C>
using SumAcc = std::conditional_t<std::is_floating_point_v<C>, double,
                                  std::conditional_t<std::is_signed_v<C>, int64_t, uint64_t>>;

/// Splits `shape` around `axis` into [outer, n, inner].
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit splitAt(std::string_view kernel, const std::vector<int64_t> &shape, int64_t axis) {
  if (axis < 0 && axis >= -int64_t(shape.size()))
    axis += int64_t(shape.size());
  if (axis < 0 || axis >= int64_t(shape.size()))
    throw kernelError(kernel, "axis " + std::to_string(axis) + " is out of range for rank " +
                                  std::to_string(shape.size()));
  AxisSplit s;
  for (int64_t d = 0; d < axis; ++d)
    s.outer *= shape[d];
  s.n = shape[axis];
  for (size_t d = size_t(axis) + 1; d < shape.size(); ++d)
    s.inner *= shape[d];
  return s;
}

//===----------------------------------------------------------------------===//
// reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod
//===----------------------------------------------------------------------===//

enum class ReduceKind { Sum, Mean, Max, Min, Prod };

template <typename T, ReduceKind K>
void reduceImpl(const KernelContext &ctx, const std::vector<bool> &reduced) {
  using C = Compute<T>;
  constexpr bool extremum = K == ReduceKind::Max || K == ReduceKind::Min;
  using Acc = std::conditional_t<extremum, C, SumAcc<C>>;
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  const T *src = in.as<T>();
  T *dst = out.as<T>();
  int64_t outN = out.numel();

  // Merge adjacent dims that are both reduced or both kept, dropping 1s.
  std::vector<int64_t> dims;
  std::vector<bool> red;
  int64_t count = 1; // elements reduced into each output
  for (size_t d = 0; d < in.shape.size(); ++d) {
    if (reduced[d])
      count *= in.shape[d];
    if (in.shape[d] == 1)
      continue;
    if (!dims.empty() && red.back() == reduced[d]) {
      dims.back() *= in.shape[d];
    } else {
      dims.push_back(in.shape[d]);
      red.push_back(reduced[d]);
    }
  }

  Acc init;
  if constexpr (K == ReduceKind::Max)
    init = std::is_floating_point_v<C> ? -std::numeric_limits<C>::infinity()
                                       : std::numeric_limits<C>::lowest();
  else if constexpr (K == ReduceKind::Min)
    init = std::is_floating_point_v<C> ? std::numeric_limits<C>::infinity()
                                       : std::numeric_limits<C>::max();
  else if constexpr (K == ReduceKind::Prod)
    init = Acc(1);
  else
    init = Acc(0);
  std::vector<Acc> acc(size_t(outN), init);

  auto combine = [](Acc a, C x) -> Acc {
    if constexpr (K == ReduceKind::Max)
      return (x > a || x != x) ? x : a;
    else if constexpr (K == ReduceKind::Min)
      return (x < a || x != x) ? x : a;
    else if constexpr (K == ReduceKind::Prod && std::is_integral_v<Acc>)
      return Acc(uint64_t(a) * uint64_t(Acc(x))); // wraps, as on store
    else if constexpr (K == ReduceKind::Prod)
      return Acc(a * Acc(x));
    else
      return Acc(a + Acc(x));
  };
  // Outputs [from, to): the accumulators, stored.
  auto finish = [&](int64_t from, int64_t to) {
    for (int64_t i = from; i < to; ++i) {
      Acc a = acc[size_t(i)];
      if constexpr (K == ReduceKind::Mean) {
        if constexpr (std::is_floating_point_v<Acc>)
          a = a / Acc(count);
        else
          a = count ? Acc(a / Acc(count)) : Acc(0);
      }
      dst[i] = store<T>(C(a));
    }
  };

  if (in.numel() > 0 && !dims.empty()) {
    // Output strides of the merged dims: 0 on reduced ones.
    size_t rank = dims.size();
    std::vector<int64_t> ostride(rank, 0);
    int64_t s = 1;
    for (size_t d = rank; d-- > 0;)
      if (!red[d]) {
        ostride[d] = s;
        s *= dims[d];
      }
    const int64_t inner = dims.back();
    const bool innerReduced = red.back();
    const int64_t sub = in.numel() / dims[0]; // elements per index of dims[0]
    // Accumulates indices [first, last) of the outermost merged dim.
    auto walk = [&](int64_t first, int64_t last) {
      std::vector<int64_t> idx(rank - 1, 0);
      int64_t o = 0;
      if (rank > 1) {
        idx[0] = first;
        o = first * ostride[0];
      }
      for (int64_t i = first * sub, end = last * sub; i < end; i += inner) {
        const T *p = src + i;
        if (innerReduced) {
          Acc a = acc[size_t(o)];
          if constexpr (extremum) {
            if constexpr (std::is_floating_point_v<C>) {
              // Eight partial extrema plus a NaN flag: vectorizes (maxps).
              C part[8];
              std::fill(part, part + 8, init);
              bool nan = false;
              int64_t j = 0;
              for (; j + 8 <= inner; j += 8)
                for (int l = 0; l < 8; ++l) {
                  C x = load(p[j + l]);
                  nan |= x != x;
                  if constexpr (K == ReduceKind::Max)
                    part[l] = x > part[l] ? x : part[l];
                  else
                    part[l] = x < part[l] ? x : part[l];
                }
              for (; j < inner; ++j)
                a = combine(a, load(p[j]));
              for (int l = 0; l < 8; ++l)
                a = combine(a, part[l]);
              if (nan)
                a = std::numeric_limits<C>::quiet_NaN();
            } else {
              for (int64_t j = 0; j < inner; ++j)
                a = combine(a, load(p[j]));
            }
          } else if constexpr (K == ReduceKind::Prod) {
            for (int64_t j = 0; j < inner; ++j)
              a = combine(a, load(p[j]));
          } else {
            // Eight independent partial sums: no loop-carried latency chain.
            Acc part[8] = {};
            int64_t j = 0;
            for (; j + 8 <= inner; j += 8)
              for (int l = 0; l < 8; ++l)
                part[l] = Acc(part[l] + Acc(load(p[j + l])));
            for (; j < inner; ++j)
              part[0] = Acc(part[0] + Acc(load(p[j])));
            for (int l = 0; l < 8; ++l)
              a = Acc(a + part[l]);
          }
          acc[size_t(o)] = a;
        } else {
          Acc *q = acc.data() + o;
          for (int64_t j = 0; j < inner; ++j)
            q[j] = combine(q[j], load(p[j]));
        }
        for (size_t d = rank - 1; d-- > 0;) {
          if (++idx[d] < dims[d]) {
            o += ostride[d];
            break;
          }
          o -= ostride[d] * (dims[d] - 1);
          idx[d] = 0;
        }
      }
    };
    if (rank > 1 && !red[0]) {
      // Each index of the outermost (kept) dim owns ostride[0] outputs.
      parallelForRows(ctx, dims[0], sub, [&](int64_t first, int64_t last) {
        walk(first, last);
        finish(first * ostride[0], last * ostride[0]);
      });
      return;
    }
    walk(0, dims[0]);
  } else if (in.numel() > 0) {
    // Every dim is 1: one element per output.
    for (int64_t i = 0; i < outN; ++i)
      acc[size_t(i)] = combine(acc[size_t(i)], load(src[i]));
  }
  finish(0, outN);
}

template <ReduceKind K> void reduceKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.dtype != out.dtype)
    throw kernelError(ctx.kernel, "result element type differs from the input's");
  std::vector<int64_t> axes = ctx.params.getInts("axes");
  bool keepdims = ctx.params.getBool("keepdims", true);
  std::vector<bool> reduced(in.shape.size(), false);
  for (int64_t a : axes) {
    if (a < 0 || a >= in.rank())
      throw kernelError(ctx.kernel, "axis " + std::to_string(a) + " is out of range for rank " +
                                        std::to_string(in.rank()));
    reduced[size_t(a)] = true;
  }
  std::vector<int64_t> expect;
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (!reduced[d])
      expect.push_back(in.shape[d]);
    else if (keepdims)
      expect.push_back(1);
  if (expect != out.shape)
    throw kernelError(ctx.kernel, "result shape " + shapeList(out.shape) + " should be " +
                                      shapeList(expect));
  // Booleans are bytes 0/1: their max is a logical or, and the empty max is
  // false (the smallest value), exactly what the uint8 reduction gives.
  // Their min is a logical and; the empty min (255, uint8's largest) is
  // true.
  if (in.dtype == DType::I1 && (K == ReduceKind::Max || K == ReduceKind::Min)) {
    reduceImpl<uint8_t, K>(ctx, reduced);
    if (K == ReduceKind::Min)
      for (uint8_t *b = out.as<uint8_t>(), *e = b + out.numel(); b != e; ++b)
        *b = *b != 0;
    return;
  }
  dispatchNumeric(in.dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduceImpl<T, K>(ctx, reduced);
  });
}

void reduceSumKernel(const KernelContext &ctx) { reduceKernel<ReduceKind::Sum>(ctx); }
void reduceMeanKernel(const KernelContext &ctx) { reduceKernel<ReduceKind::Mean>(ctx); }
void reduceMaxKernel(const KernelContext &ctx) { reduceKernel<ReduceKind::Max>(ctx); }
void reduceMinKernel(const KernelContext &ctx) { reduceKernel<ReduceKind::Min>(ctx); }
void reduceProdKernel(const KernelContext &ctx) { reduceKernel<ReduceKind::Prod>(ctx); }

//===----------------------------------------------------------------------===//
// arg_max, arg_min
//===----------------------------------------------------------------------===//

template <typename T, bool Max>
void argReduceImpl(const KernelContext &ctx, AxisSplit s, bool last) {
  using C = Compute<T>;
  const T *src = ctx.inputs[0].as<T>();
  int64_t *dst = ctx.outputs[0].as<int64_t>();
  // "x replaces the best so far": more extreme, or (with select_last_index)
  // as extreme; a NaN is more extreme than any number, and the first NaN
  // stays.
  auto better = [&](C x, C best) {
    if constexpr (std::is_floating_point_v<C>) {
      if (best != best)
        return false;
      if (x != x)
        return true;
    }
    if (last && x == best)
      return true;
    return Max ? x > best : x < best;
  };
  parallelForRows(ctx, s.outer, s.n * s.inner, [&](int64_t first, int64_t end) {
    for (int64_t o = first; o < end; ++o)
      for (int64_t j = 0; j < s.inner; ++j) {
        const T *p = src + o * s.n * s.inner + j;
        C best = load(p[0]);
        int64_t at = 0;
        for (int64_t i = 1; i < s.n; ++i) {
          C x = load(p[i * s.inner]);
          if (better(x, best)) {
            best = x;
            at = i;
          }
        }
        dst[o * s.inner + j] = at;
      }
  });
}

template <bool Max> void argReduceKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (out.dtype != DType::I64)
    throw kernelError(ctx.kernel, "the result must be i64");
  if (in.rank() == 0)
    throw kernelError(ctx.kernel, "input must have rank >= 1");
  int64_t axis = ctx.params.getInt("axis");
  AxisSplit s = splitAt(ctx.kernel, in.shape, axis);
  if (s.n == 0)
    throw kernelError(ctx.kernel, "the axis is empty");
  if (out.numel() != s.outer * s.inner)
    throw kernelError(ctx.kernel, "result shape " + shapeList(out.shape) + " does not match " +
                                      "the input's without the axis");
  bool last = ctx.params.getBool("select_last_index", false);
  if (in.dtype == DType::I1)
    return argReduceImpl<uint8_t, Max>(ctx, s, last);
  dispatchNumeric(in.dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    argReduceImpl<T, Max>(ctx, s, last);
  });
}
void argMaxKernel(const KernelContext &ctx) { argReduceKernel<true>(ctx); }
void argMinKernel(const KernelContext &ctx) { argReduceKernel<false>(ctx); }

//===----------------------------------------------------------------------===//
// cumsum
//===----------------------------------------------------------------------===//

template <typename T> void cumsumImpl(const KernelContext &ctx, AxisSplit s, bool exclusive,
                                      bool reverse) {
  using C = Compute<T>;
  using Acc = SumAcc<C>;
  const T *src = ctx.inputs[0].as<T>();
  T *dst = ctx.outputs[0].as<T>();
  parallelForRows(ctx, s.outer, s.n * s.inner, [&](int64_t first, int64_t last) {
    std::vector<Acc> acc(size_t(s.inner));
    for (int64_t o = first; o < last; ++o) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      const T *p = src + o * s.n * s.inner;
      T *q = dst + o * s.n * s.inner;
      for (int64_t k = 0; k < s.n; ++k) {
        int64_t i = reverse ? s.n - 1 - k : k;
        const T *row = p + i * s.inner;
        T *orow = q + i * s.inner;
        if (exclusive) {
          for (int64_t j = 0; j < s.inner; ++j) {
            orow[j] = store<T>(C(acc[size_t(j)]));
            acc[size_t(j)] = Acc(acc[size_t(j)] + Acc(load(row[j])));
          }
        } else {
          for (int64_t j = 0; j < s.inner; ++j) {
            acc[size_t(j)] = Acc(acc[size_t(j)] + Acc(load(row[j])));
            orow[j] = store<T>(C(acc[size_t(j)]));
          }
        }
      }
    }
  });
}

void cumsumKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.dtype != out.dtype || in.shape != out.shape)
    throw kernelError(ctx.kernel, "result type differs from the input's");
  if (in.rank() == 0)
    throw kernelError(ctx.kernel, "input must have rank >= 1");
  AxisSplit s = splitAt(ctx.kernel, in.shape, ctx.params.getInt("axis"));
  bool exclusive = ctx.params.getBool("exclusive", false);
  bool reverse = ctx.params.getBool("reverse", false);
  dispatchNumeric(in.dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cumsumImpl<T>(ctx, s, exclusive, reverse);
  });
}

//===----------------------------------------------------------------------===//
// topk
//===----------------------------------------------------------------------===//

/// Strict weak order "a before b": larger (or smaller) value first, NaN
/// counted above every number, equal values by lower index.
template <typename C> struct TopKOrder {
  bool largest;
  const C *v;
  bool operator()(int64_t a, int64_t b) const {
    C x = v[a], y = v[b];
    bool xn = x != x, yn = y != y;
    if (xn || yn) {
      if (xn && yn)
        return a < b;
      return largest ? xn : yn; // NaN is the largest
    }
    if (x != y)
      return largest ? x > y : x < y;
    return a < b;
  }
};

template <typename T> void topkImpl(const KernelContext &ctx, AxisSplit s, int64_t k, bool largest) {
  using C = Compute<T>;
  const T *src = ctx.inputs[0].as<T>();
  T *vals = ctx.outputs[0].as<T>();
  int64_t *idxs = ctx.outputs[1].as<int64_t>();
  parallelForRows(ctx, s.outer, s.n * s.inner, [&](int64_t first, int64_t last) {
    std::vector<C> v(size_t(s.n));
    std::vector<int64_t> order(size_t(s.n));
    TopKOrder<C> cmp{largest, v.data()};
    for (int64_t o = first; o < last; ++o)
      for (int64_t j = 0; j < s.inner; ++j) {
        const T *p = src + o * s.n * s.inner + j;
        for (int64_t i = 0; i < s.n; ++i)
          v[size_t(i)] = load(p[i * s.inner]);
        // Always sorted: also a valid answer for sorted = false.
        if (k > 0 && k <= 16 && k * 8 <= s.n) {
          // Small k: keep the best k in order; most elements fail the first
          // comparison with the current k-th.
          int64_t m = 0;
          for (int64_t i = 0; i < s.n; ++i) {
            if (m == k && !cmp(i, order[size_t(k - 1)]))
              continue;
            int64_t pos = m < k ? m++ : k - 1;
            while (pos > 0 && cmp(i, order[size_t(pos - 1)])) {
              order[size_t(pos)] = order[size_t(pos - 1)];
              --pos;
            }
            order[size_t(pos)] = i;
          }
        } else if (k < s.n) {
          std::iota(order.begin(), order.end(), int64_t(0));
          std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
        } else {
          std::iota(order.begin(), order.end(), int64_t(0));
          std::sort(order.begin(), order.end(), cmp);
        }
        T *ov = vals + o * k * s.inner + j;
        int64_t *oi = idxs + o * k * s.inner + j;
        for (int64_t i = 0; i < k; ++i) {
          ov[i * s.inner] = p[order[size_t(i)] * s.inner];
          oi[i * s.inner] = order[size_t(i)];
        }
      }
  });
}

void topkKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 2);
  const Tensor &in = ctx.inputs[0], &vals = ctx.outputs[0], &idxs = ctx.outputs[1];
  if (in.rank() == 0)
    throw kernelError(ctx.kernel, "input must have rank >= 1");
  int64_t axis = ctx.params.getInt("axis", -1);
  if (axis < 0)
    axis += in.rank();
  AxisSplit s = splitAt(ctx.kernel, in.shape, axis);
  int64_t k = ctx.params.getInt("k");
  if (k < 0 || k > s.n)
    throw kernelError(ctx.kernel, "k = " + std::to_string(k) + " is out of range for axis size " +
                                      std::to_string(s.n));
  std::vector<int64_t> expect = in.shape;
  expect[size_t(axis)] = k;
  if (vals.shape != expect || idxs.shape != expect)
    throw kernelError(ctx.kernel, "result shapes should be " + shapeList(expect));
  if (vals.dtype != in.dtype || idxs.dtype != DType::I64)
    throw kernelError(ctx.kernel, "results must be the input's element type and i64");
  bool largest = ctx.params.getBool("largest", true);
  dispatchNumeric(in.dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    topkImpl<T>(ctx, s, k, largest);
  });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("reduce_sum", reduceSumKernel);
SHARDFLOW_REGISTER_KERNEL("reduce_mean", reduceMeanKernel);
SHARDFLOW_REGISTER_KERNEL("reduce_max", reduceMaxKernel);
SHARDFLOW_REGISTER_KERNEL("reduce_min", reduceMinKernel);
SHARDFLOW_REGISTER_KERNEL("reduce_prod", reduceProdKernel);
SHARDFLOW_REGISTER_KERNEL("arg_max", argMaxKernel);
SHARDFLOW_REGISTER_KERNEL("arg_min", argMinKernel);
SHARDFLOW_REGISTER_KERNEL("cumsum", cumsumKernel);
SHARDFLOW_REGISTER_KERNEL("topk", topkKernel);
