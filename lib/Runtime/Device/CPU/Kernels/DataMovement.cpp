//===- DataMovement.cpp - CPU kernels that move or create data -------------===//
//
// transpose, concat, split, slice, pad, gather, gather_elements, scatter_nd,
// expand, trilu, range, constant_of_shape and shape. Kernels that only move
// elements work on any element type by its size; those that compute values
// (scatter_nd's reductions, range, constants) convert per element type.
// Strided copies (transpose, slice, expand) and gather split their output
// rows across the kernel's threads; each row is copied by one thread.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Kernel.h"
#include "shardflow/Runtime/Format/Layout.h"

#include "KernelSupport.h"
#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//


void expectArity(const KernelContext &ctx, size_t ins, size_t outs) {
  if (ctx.inputs.size() < ins || ctx.outputs.size() < outs)
    fail(ctx, "expects " + std::to_string(ins) + " inputs and " + std::to_string(outs) +
                  " outputs, got " + std::to_string(ctx.inputs.size()) + " and " +
                  std::to_string(ctx.outputs.size()));
}


int64_t product(const std::vector<int64_t> &v, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < std::min(to, v.size()); ++i)
    n *= v[i];
  return n;
}

/// Copies go to threads in ranges of at least this many bytes: below it a
/// worker's wake-up costs more than the copy.
constexpr int64_t kCopyGrainBytes = kElementwiseGrain * 4;

/// fn(begin, end) over `count` copies of `bytes` bytes each.
template <typename Fn>
void forCopies(const KernelContext &ctx, int64_t count, int64_t bytes, Fn &&fn) {
  parallelFor(ctx, count, std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(bytes, 1)),
              fn);
}





/// Calls fn(T{}) with T the C++ type that stores `t` (uint16_t for f16/bf16,
/// bool-as-uint8_t for i1).
template <typename Fn> void dispatchStorage(DType t, Fn &&fn) {
  switch (t) {
  case DType::F32: return fn(float{});
  case DType::F64: return fn(double{});
  case DType::F16:
  case DType::BF16:
  case DType::U16: return fn(uint16_t{});
  case DType::I1:
  case DType::U8: return fn(uint8_t{});
  case DType::I8: return fn(int8_t{});
  case DType::I16: return fn(int16_t{});
  case DType::I32: return fn(int32_t{});
  case DType::I64: return fn(int64_t{});
  case DType::U32: return fn(uint32_t{});
  case DType::U64: return fn(uint64_t{});
  }
}

bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

/// Writes a value (float or integer) as element i of a buffer of type t.
void storeValue(DType t, void *p, int64_t i, double f, int64_t n, bool isInt) {
  switch (t) {
  case DType::F16:
    static_cast<uint16_t *>(p)[i] = floatToHalf(float(isInt ? double(n) : f));
    return;
  case DType::BF16:
    static_cast<uint16_t *>(p)[i] = floatToBf16(float(isInt ? double(n) : f));
    return;
  case DType::I1:
    static_cast<uint8_t *>(p)[i] = isInt ? n != 0 : f != 0;
    return;
  default: break;
  }
  dispatchStorage(t, [&](auto v) {
    using T = decltype(v);
    T *q = static_cast<T *>(p);
    if constexpr (std::is_floating_point_v<T>)
      q[i] = isInt ? T(n) : T(f);
    else
      q[i] = isInt ? T(n) : T(int64_t(f));
  });
}

/// Calls fn(E{}) with an unsigned integer type of the element size.
template <typename Fn> void dispatchSize(const KernelContext &ctx, size_t size, Fn &&fn) {
  switch (size) {
  case 1: return fn(uint8_t{});
  case 2: return fn(uint16_t{});
  case 4: return fn(uint32_t{});
  case 8: return fn(uint64_t{});
  default: fail(ctx, "unsupported element size " + std::to_string(size));
  }
}

/// Drops size-1 dimensions and merges dimensions that are contiguous in the
/// source, so that strided copies run long inner loops.
void coalesce(std::vector<int64_t> &shape, std::vector<int64_t> &strides) {
  std::vector<int64_t> s, t;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1)
      continue;
    if (!s.empty() && t.back() == strides[i] * shape[i]) {
      s.back() *= shape[i];
      t.back() = strides[i];
      continue;
    }
    s.push_back(shape[i]);
    t.push_back(strides[i]);
  }
  shape = std::move(s);
  strides = std::move(t);
}

/// out (contiguous, `shape`) = in[sum idx_d * strides_d] for every index.
template <typename E>
void stridedCopy(const KernelContext &ctx, E *out, const E *in, std::vector<int64_t> shape,
                 std::vector<int64_t> strides) {
  int64_t total = product(shape);
  if (total == 0)
    return;
  coalesce(shape, strides);
  if (shape.empty()) {
    out[0] = in[0];
    return;
  }
  size_t rank = shape.size();
  int64_t inner = shape[rank - 1], step = strides[rank - 1];
  // Output rows [first, last) of `inner` elements each.
  auto copyRows = [&](int64_t first, int64_t last) {
    std::vector<int64_t> idx(rank, 0);
    int64_t off = 0;
    for (int64_t r = first, d = int64_t(rank) - 2; d >= 0; --d) {
      idx[size_t(d)] = r % shape[size_t(d)];
      r /= shape[size_t(d)];
      off += idx[size_t(d)] * strides[size_t(d)];
    }
    E *o = out + first * inner;
    for (int64_t row = first; row < last; ++row) {
      const E *p = in + off;
      if (step == 1)
        std::memcpy(o, p, size_t(inner) * sizeof(E));
      else if (step == 0)
        std::fill(o, o + inner, p[0]);
      else
        for (int64_t j = 0; j < inner; ++j)
          o[j] = p[j * step];
      o += inner;
      for (size_t d = rank - 1; d-- > 0;) {
        off += strides[d];
        if (++idx[d] < shape[d])
          break;
        off -= strides[d] * shape[d];
        idx[d] = 0;
      }
    }
  };
  forCopies(ctx, total / inner, inner * int64_t(sizeof(E)), copyRows);
}

void stridedCopyAny(const KernelContext &ctx, const Tensor &in, int64_t baseOffset,
                    const Tensor &out, const std::vector<int64_t> &strides) {
  dispatchSize(ctx, dtypeSize(in.dtype), [&](auto e) {
    using E = decltype(e);
    stridedCopy(ctx, out.as<E>(), in.as<const E>() + baseOffset, out.shape, strides);
  });
}

/// Reads an index tensor (i32 or i64) as int64 values.
std::vector<int64_t> readIndices(const KernelContext &ctx, const Tensor &t) {
  std::vector<int64_t> v(size_t(t.numel()));
  if (t.dtype == DType::I64)
    std::copy(t.as<const int64_t>(), t.as<const int64_t>() + v.size(), v.begin());
  else if (t.dtype == DType::I32)
    std::copy(t.as<const int32_t>(), t.as<const int32_t>() + v.size(), v.begin());
  else
    fail(ctx, std::string("indices must be i32 or i64, got ") + dtypeName(t.dtype));
  return v;
}

/// Negative indices count from the end; anything else outside [0, size) is
/// an error naming the kernel, the index and the axis size.
int64_t normalizeIndex(const KernelContext &ctx, int64_t i, int64_t size, int64_t axis) {
  int64_t j = i < 0 ? i + size : i;
  if (j < 0 || j >= size)
    fail(ctx, "index " + std::to_string(i) + " is out of range for axis " +
                  std::to_string(axis) + " of size " + std::to_string(size));
  return j;
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

void transposeKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  std::vector<int64_t> perm = ctx.params.getInts("perm", {});
  if (perm.empty())
    for (int64_t i = in.rank(); i-- > 0;)
      perm.push_back(i);
  if (int64_t(perm.size()) != in.rank())
    fail(ctx, "perm has " + std::to_string(perm.size()) + " entries for rank " +
                  std::to_string(in.rank()));
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape), strides;
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= in.rank() || seen[size_t(p)])
      fail(ctx, "perm entry " + std::to_string(p) + " is out of range or repeated");
    seen[size_t(p)] = true;
    strides.push_back(inStrides[size_t(p)]);
  }
  // The copy walks the output's shape with the input's strides: the two
  // must agree, or it reads past the input.
  bool agree = out.rank() == in.rank() && dtypeSize(out.dtype) == dtypeSize(in.dtype);
  for (size_t i = 0; agree && i < perm.size(); ++i)
    agree = out.shape[i] == in.shape[size_t(perm[i])];
  if (!agree)
    fail(ctx, "the result is not the input permuted by perm");
  stridedCopyAny(ctx, in, 0, out, strides);
}

/// Checks that `pieces` concatenated along `axis` make `whole` (concat's
/// inputs and result, split's results and input): the copies below take
/// their sizes from both.
void expectPiecesOf(const KernelContext &ctx, const Tensor &whole,
                    const std::vector<Tensor> &pieces, int64_t axis) {
  if (axis < 0 || axis >= whole.rank())
    fail(ctx, "axis " + std::to_string(axis) + " is out of range for rank " +
                  std::to_string(whole.rank()));
  int64_t sum = 0;
  for (const Tensor &t : pieces) {
    bool fits = t.rank() == whole.rank() && dtypeSize(t.dtype) == dtypeSize(whole.dtype);
    for (size_t d = 0; fits && d < t.shape.size(); ++d)
      fits = int64_t(d) == axis || t.shape[d] == whole.shape[d];
    if (!fits)
      fail(ctx, "a piece's shape or type does not match the whole's outside axis " +
                    std::to_string(axis));
    sum += t.shape[size_t(axis)];
  }
  if (sum != whole.shape[size_t(axis)])
    fail(ctx, "the pieces add up to " + std::to_string(sum) + " along axis " +
                  std::to_string(axis) + ", the whole has " +
                  std::to_string(whole.shape[size_t(axis)]));
}

void concatKernel(const KernelContext &ctx) {
  const Tensor &out = ctx.outputs.at(0);
  int64_t axis = ctx.params.getInt("axis");
  if (axis < 0)
    axis += out.rank();
  expectPiecesOf(ctx, out, ctx.inputs, axis);
  size_t esize = dtypeSize(out.dtype);
  int64_t outer = product(out.shape, 0, size_t(axis));
  int64_t inner = product(out.shape, size_t(axis) + 1);
  char *dst = static_cast<char *>(out.data);
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor &in : ctx.inputs) {
      size_t chunk = size_t(in.shape[size_t(axis)] * inner) * esize;
      std::memcpy(dst, static_cast<const char *>(in.data) + size_t(o) * chunk, chunk);
      dst += chunk;
    }
}

void splitKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0];
  int64_t axis = ctx.params.getInt("axis");
  if (axis < 0)
    axis += in.rank();
  expectPiecesOf(ctx, in, ctx.outputs, axis);
  size_t esize = dtypeSize(in.dtype);
  int64_t outer = product(in.shape, 0, size_t(axis));
  int64_t inner = product(in.shape, size_t(axis) + 1);
  const char *src = static_cast<const char *>(in.data);
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor &out : ctx.outputs) {
      size_t chunk = size_t(out.shape[size_t(axis)] * inner) * esize;
      std::memcpy(static_cast<char *>(out.data) + size_t(o) * chunk, src, chunk);
      src += chunk;
    }
}

/// ONNX Slice on one dimension: the clamped start (see sliceRange in the nn
/// dialect, which gives the result shape).
int64_t sliceStart(int64_t dim, int64_t start, int64_t step) {
  if (dim == 0)
    return 0;
  if (start < 0)
    start += dim;
  return step > 0 ? std::clamp<int64_t>(start, 0, dim) : std::clamp<int64_t>(start, 0, dim - 1);
}

void sliceKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  std::vector<int64_t> starts = ctx.params.getInts("starts", {}), axes = ctx.params.getInts("axes", {}),
                       steps = ctx.params.getInts("steps", {});
  if (starts.size() != axes.size())
    fail(ctx, "starts and axes differ in length");
  if (steps.empty())
    steps.assign(axes.size(), 1);
  std::vector<int64_t> strides = rowMajorStrides(in.shape);
  int64_t base = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = axes[i] < 0 ? axes[i] + in.rank() : axes[i];
    if (axis < 0 || axis >= in.rank())
      fail(ctx, "axis " + std::to_string(axes[i]) + " is out of range");
    if (out.shape[size_t(axis)] == 0)
      return;
    base += sliceStart(in.shape[size_t(axis)], starts[i], steps[i]) * strides[size_t(axis)];
    strides[size_t(axis)] *= steps[i];
  }
  if (out.numel() == 0)
    return;
  stridedCopyAny(ctx, in, base, out, strides);
}

/// Maps an output coordinate of a padded dimension to an input coordinate,
/// or -1 for a constant-filled position.
int64_t padSource(int64_t i, int64_t n, const std::string &mode) {
  if (i >= 0 && i < n)
    return i;
  if (n == 0 || mode == "constant")
    return -1;
  if (mode == "edge")
    return i < 0 ? 0 : n - 1;
  if (mode == "wrap")
    return ((i % n) + n) % n;
  // reflect (without repeating the edge element)
  if (n == 1)
    return 0;
  int64_t period = 2 * (n - 1);
  int64_t j = ((i % period) + period) % period;
  return j < n ? j : period - j;
}

void padKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  std::vector<int64_t> pads = ctx.params.getInts("pads", {});
  std::string mode = ctx.params.getString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    fail(ctx, "unknown mode '" + mode + "'");
  size_t rank = size_t(in.rank());
  if (pads.size() != 2 * rank)
    fail(ctx, "pads needs " + std::to_string(2 * rank) + " entries");
  if (out.numel() == 0)
    return;
  if (in.numel() == 0 && mode != "constant")
    fail(ctx, "cannot pad an empty tensor in mode '" + mode + "'");
  // Per dimension: the input coordinate of every output coordinate.
  std::vector<std::vector<int64_t>> src(rank);
  for (size_t d = 0; d < rank; ++d)
    for (int64_t o = 0; o < out.shape[d]; ++o)
      src[d].push_back(padSource(o - pads[d], in.shape[d], mode));
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  double value = ctx.params.getFloat("value", 0.0);
  dispatchSize(ctx, dtypeSize(in.dtype), [&](auto e) {
    using E = decltype(e);
    alignas(8) unsigned char bytes[8] = {};
    storeValue(in.dtype, bytes, 0, value, 0, false);
    E fill;
    std::memcpy(&fill, bytes, sizeof(E));
    const E *x = in.as<const E>();
    E *y = out.as<E>();
    if (rank == 0) {
      y[0] = x[0];
      return;
    }
    int64_t inner = out.shape[rank - 1];
    const std::vector<int64_t> &last = src[rank - 1];
    std::vector<int64_t> idx(rank, 0);
    for (int64_t o = 0, outer = out.numel() / inner; o < outer; ++o, y += inner) {
      int64_t base = 0;
      bool constantRow = false;
      for (size_t d = 0; d + 1 < rank; ++d) {
        int64_t s = src[d][size_t(idx[d])];
        if (s < 0) {
          constantRow = true;
          break;
        }
        base += s * inStrides[d];
      }
      if (constantRow) {
        std::fill(y, y + inner, fill);
      } else {
        const E *row = x + base;
        for (int64_t j = 0; j < inner; ++j) {
          int64_t s = last[size_t(j)];
          y[j] = s < 0 ? fill : row[s];
        }
      }
      for (size_t d = rank - 1; d-- > 0;) {
        if (++idx[d] < out.shape[d])
          break;
        idx[d] = 0;
      }
    }
  });
}

void gatherKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  const Tensor &in = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t axis = ctx.params.getInt("axis", 0);
  if (axis < 0)
    axis += in.rank();
  int64_t size = in.shape.at(size_t(axis));
  // The indices address `axis_size` rows (fewer than the input's when it
  // is zero-padded); a block of a split axis (vocabulary parallelism)
  // holds rows [start, start + size) of them, the others read as zeros.
  int64_t global = ctx.params.getInt("axis_size", size), start = 0;
  if (ctx.params.has("axis_starts")) {
    std::vector<int64_t> starts = ctx.params.getInts("axis_starts");
    if (ctx.rank < 0 || size_t(ctx.rank) >= starts.size())
      fail(ctx, "axis_starts has " + std::to_string(starts.size()) + " entries, none for rank " +
                    std::to_string(ctx.rank));
    start = starts[size_t(ctx.rank)];
  } else if (global > size) {
    fail(ctx, "axis_size " + std::to_string(global) + " exceeds the input's " +
                  std::to_string(size) + " rows");
  }
  if (global < 1 || start < 0 || start >= global)
    fail(ctx, "rank " + std::to_string(ctx.rank) + "'s block of " + std::to_string(size) +
                  " rows at " + std::to_string(start) + " lies outside the " +
                  std::to_string(global) + " indexed rows");
  std::vector<int64_t> idx = readIndices(ctx, indices);
  for (int64_t &i : idx) {
    i = normalizeIndex(ctx, i, global, axis) - start;
    if (i >= size)
      i = -1;
  }
  size_t esize = dtypeSize(in.dtype);
  int64_t outer = product(in.shape, 0, size_t(axis));
  size_t chunk = size_t(product(in.shape, size_t(axis) + 1)) * esize;
  if (out.bytes() != size_t(outer) * idx.size() * chunk)
    fail(ctx, "the result does not hold one row of the input per index");
  const char *x = static_cast<const char *>(in.data);
  char *y = static_cast<char *>(out.data);
  // Copy c of the outer * |indices| copies is row idx[c % |indices|] of
  // outer block c / |indices| (zeros for a row another rank holds: < 0).
  int64_t perOuter = int64_t(idx.size());
  forCopies(ctx, outer * perOuter, int64_t(chunk), [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      int64_t o = c / perOuter, i = idx[size_t(c % perOuter)];
      if (i < 0)
        std::memset(y + size_t(c) * chunk, 0, chunk);
      else
        std::memcpy(y + size_t(c) * chunk, x + size_t(o * size + i) * chunk, chunk);
    }
  });
}

void gatherElementsKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  const Tensor &in = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t axis = ctx.params.getInt("axis", 0);
  if (axis < 0)
    axis += in.rank();
  size_t rank = size_t(in.rank());
  if (indices.rank() != in.rank())
    fail(ctx, "indices rank differs from the input's");
  std::vector<int64_t> idx = readIndices(ctx, indices);
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  int64_t size = in.shape[size_t(axis)];
  dispatchSize(ctx, dtypeSize(in.dtype), [&](auto e) {
    using E = decltype(e);
    const E *x = in.as<const E>();
    E *y = out.as<E>();
    std::vector<int64_t> pos(rank, 0);
    int64_t base = 0; // offset of pos with the axis coordinate left out
    for (size_t n = 0; n < idx.size(); ++n) {
      int64_t i = normalizeIndex(ctx, idx[n], size, axis);
      y[n] = x[base + i * inStrides[size_t(axis)]];
      for (size_t d = rank; d-- > 0;) {
        if (int64_t(d) != axis)
          base += inStrides[d];
        if (++pos[d] < indices.shape[d])
          break;
        if (int64_t(d) != axis)
          base -= inStrides[d] * indices.shape[d];
        pos[d] = 0;
      }
    }
  });
}

template <typename T> T combine(const std::string &red, T a, T b) {
  if (red == "add")
    return T(a + b);
  if (red == "mul")
    return T(a * b);
  if (red == "max")
    return std::max(a, b);
  return std::min(a, b);
}

void scatterNDKernel(const KernelContext &ctx) {
  expectArity(ctx, 3, 1);
  const Tensor &in = ctx.inputs[0], &indices = ctx.inputs[1], &updates = ctx.inputs[2],
               &out = ctx.outputs[0];
  std::string red = ctx.params.getString("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    fail(ctx, "unknown reduction '" + red + "'");
  std::memcpy(out.data, in.data, in.bytes());
  if (indices.rank() < 1)
    fail(ctx, "indices must have rank >= 1");
  size_t q = size_t(indices.shape.back());
  if (q < 1 || q > size_t(in.rank()))
    fail(ctx, "indices' last dimension is out of range");
  std::vector<int64_t> idx = readIndices(ctx, indices);
  std::vector<int64_t> strides = rowMajorStrides(in.shape);
  int64_t slice = product(in.shape, q);
  int64_t count = q ? int64_t(idx.size() / q) : 0;
  size_t esize = dtypeSize(in.dtype);
  for (int64_t n = 0; n < count; ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < q; ++d)
      off += normalizeIndex(ctx, idx[size_t(n) * q + d], in.shape[d], int64_t(d)) * strides[d];
    char *dst = static_cast<char *>(out.data) + size_t(off) * esize;
    const char *src = static_cast<const char *>(updates.data) + size_t(n * slice) * esize;
    if (red == "none") {
      std::memcpy(dst, src, size_t(slice) * esize);
      continue;
    }
    if (in.dtype == DType::F16 || in.dtype == DType::BF16) {
      bool half = in.dtype == DType::F16;
      auto *d16 = reinterpret_cast<uint16_t *>(dst);
      auto *s16 = reinterpret_cast<const uint16_t *>(src);
      for (int64_t j = 0; j < slice; ++j) {
        float a = half ? halfToFloat(d16[j]) : bf16ToFloat(d16[j]);
        float b = half ? halfToFloat(s16[j]) : bf16ToFloat(s16[j]);
        float r = combine(red, a, b);
        d16[j] = half ? floatToHalf(r) : floatToBf16(r);
      }
      continue;
    }
    if (in.dtype == DType::I1) {
      auto *db = reinterpret_cast<uint8_t *>(dst);
      auto *sb = reinterpret_cast<const uint8_t *>(src);
      for (int64_t j = 0; j < slice; ++j) {
        bool a = db[j], b = sb[j];
        db[j] = (red == "add" || red == "max") ? (a || b) : (a && b);
      }
      continue;
    }
    dispatchStorage(in.dtype, [&](auto v) {
      using T = decltype(v);
      T *dt = reinterpret_cast<T *>(dst);
      const T *st = reinterpret_cast<const T *>(src);
      for (int64_t j = 0; j < slice; ++j)
        dt[j] = combine(red, dt[j], st[j]);
    });
  }
}

void expandKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.rank() > out.rank())
    fail(ctx, "input rank exceeds the result's");
  std::vector<int64_t> strides;
  if (int64_t d = broadcastStrides(in.shape, out.shape, strides); d >= 0)
    fail(ctx, "input dimension " + std::to_string(d) + " does not broadcast");
  stridedCopyAny(ctx, in, 0, out, strides);
}

void triluKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  bool upper = ctx.params.getBool("upper", true);
  int64_t k = ctx.params.getInt("k", 0);
  std::memcpy(out.data, in.data, in.bytes());
  if (in.rank() < 2)
    fail(ctx, "input must have rank >= 2");
  int64_t rows = in.shape[size_t(in.rank() - 2)], cols = in.shape[size_t(in.rank() - 1)];
  if (rows * cols == 0)
    return;
  size_t esize = dtypeSize(in.dtype);
  int64_t mats = in.numel() / (rows * cols);
  char *y = static_cast<char *>(out.data);
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i) {
      char *row = y + size_t((m * rows + i) * cols) * esize;
      // upper keeps j >= i + k; lower keeps j <= i + k.
      int64_t lo = upper ? 0 : std::clamp<int64_t>(i + k + 1, 0, cols);
      int64_t hi = upper ? std::clamp<int64_t>(i + k, 0, cols) : cols;
      if (hi > lo)
        std::memset(row + size_t(lo) * esize, 0, size_t(hi - lo) * esize);
    }
}

void rangeKernel(const KernelContext &ctx) {
  expectArity(ctx, 0, 1);
  const Tensor &out = ctx.outputs[0];
  double start = ctx.params.getFloat("start"), delta = ctx.params.getFloat("delta");
  int64_t n = out.numel();
  if (isFloat(out.dtype)) {
    for (int64_t i = 0; i < n; ++i)
      storeValue(out.dtype, out.data, i, start + double(i) * delta, 0, false);
    return;
  }
  int64_t s = int64_t(start), d = int64_t(delta);
  for (int64_t i = 0; i < n; ++i)
    storeValue(out.dtype, out.data, i, 0, s + i * d, true);
}

void constantOfShapeKernel(const KernelContext &ctx) {
  expectArity(ctx, 0, 1);
  const Tensor &out = ctx.outputs[0];
  double f = 0;
  int64_t n = 0;
  bool isInt = true;
  if (ctx.params.has("value")) {
    const ParamValue &v = ctx.params.all().find("value")->second;
    if (auto *i = std::get_if<int64_t>(&v)) {
      n = *i;
    } else if (auto *d = std::get_if<double>(&v)) {
      f = *d;
      isInt = false;
    } else if (auto *l = std::get_if<std::vector<int64_t>>(&v); l && l->size() == 1) {
      n = (*l)[0];
    } else if (auto *l = std::get_if<std::vector<double>>(&v); l && l->size() == 1) {
      f = (*l)[0];
      isInt = false;
    } else {
      fail(ctx, "parameter 'value' must be a number");
    }
  }
  int64_t count = out.numel();
  if (count == 0)
    return;
  storeValue(out.dtype, out.data, 0, f, n, isInt);
  size_t esize = dtypeSize(out.dtype);
  char *y = static_cast<char *>(out.data);
  for (int64_t i = 1; i < count; ++i)
    std::memcpy(y + size_t(i) * esize, y, esize);
}

void shapeKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  int64_t rank = in.rank();
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
  int64_t start = clamp(ctx.params.getInt("start", 0));
  int64_t end = ctx.params.has("end") ? clamp(ctx.params.getInt("end")) : rank;
  for (int64_t i = start, j = 0; i < end && j < out.numel(); ++i, ++j)
    storeValue(out.dtype, out.data, j, 0, in.shape[size_t(i)], true);
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("transpose", transposeKernel);
SHARDFLOW_REGISTER_KERNEL("concat", concatKernel);
SHARDFLOW_REGISTER_KERNEL("split", splitKernel);
SHARDFLOW_REGISTER_KERNEL("slice", sliceKernel);
SHARDFLOW_REGISTER_KERNEL("pad", padKernel);
SHARDFLOW_REGISTER_KERNEL("gather", gatherKernel);
SHARDFLOW_REGISTER_KERNEL("gather_elements", gatherElementsKernel);
SHARDFLOW_REGISTER_KERNEL("scatter_nd", scatterNDKernel);
SHARDFLOW_REGISTER_KERNEL("expand", expandKernel);
SHARDFLOW_REGISTER_KERNEL("trilu", triluKernel);
SHARDFLOW_REGISTER_KERNEL("range", rangeKernel);
SHARDFLOW_REGISTER_KERNEL("constant_of_shape", constantOfShapeKernel);
SHARDFLOW_REGISTER_KERNEL("shape", shapeKernel);
