//===- ElementwiseSupport.h - helpers shared by the CPU kernels -*- C++ -*-===//
//
// Private to lib/Runtime/Device/CPU/Kernels, in namespace
// shardflow::runtime::cpu::ew (so that its names never collide with other
// kernel files' helpers). It holds:
//
//  1. Storage types for the element types C++ has no arithmetic type for
//     (Half, BFloat16, Bool), with `load`/`store` converting to and from
//     the type kernels compute in (`Compute<T>`: float for Half and
//     BFloat16, bool for Bool, T itself otherwise). Rounding to f16/bf16 is
//     to nearest, ties to even.
//  2. Dispatch from a runtime DType to a template: `dispatchFloat`,
//     `dispatchInteger`, `dispatchNumeric` (float + integer) and
//     `dispatchAny` (numeric + Bool) call `f(Tag<T>{})` with the storage
//     type T, or throw a RuntimeError naming the kernel.
//  3. ONNX multidirectional broadcasting: `broadcastShapes` and
//     `BroadcastLoop<N>`, which walks N operands against an output shape in
//     contiguous inner runs after merging dimensions that are contiguous in
//     every operand (equal shapes become one run; a scalar operand has
//     stride 0).
//  4. Branch-free float math (`fastExp`, `fastTanh`, `fastErf`, within about
//     2 ulp) and `select`, which keep the kernels' loops vectorizable under
//     the default -O3 flags.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CPU_ELEMENTWISESUPPORT_H
#define SHARDFLOW_RUNTIME_KERNELS_CPU_ELEMENTWISESUPPORT_H

#include "shardflow/Runtime/Format/Kernel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace shardflow::runtime::cpu::ew {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

/// A RuntimeError whose message starts with "kernel 'name': ".
inline RuntimeError kernelError(std::string_view kernel, const std::string &msg) {
  return RuntimeError("kernel '" + std::string(kernel) + "': " + msg);
}


/// Throws unless the kernel got exactly `numIn` inputs (or between `numIn`
/// and `maxIn` when given) and `numOut` outputs.
inline void expectArity(const KernelContext &ctx, size_t numIn, size_t numOut,
                        size_t maxIn = 0) {
  size_t hi = maxIn ? maxIn : numIn;
  if (ctx.inputs.size() < numIn || ctx.inputs.size() > hi)
    throw kernelError(ctx.kernel, "expects " + std::to_string(numIn) +
                                      (hi != numIn ? "-" + std::to_string(hi) : "") +
                                      " inputs, got " + std::to_string(ctx.inputs.size()));
  if (ctx.outputs.size() != numOut)
    throw kernelError(ctx.kernel, "expects " + std::to_string(numOut) +
                                      " outputs, got " + std::to_string(ctx.outputs.size()));
}

//===----------------------------------------------------------------------===//
// 16-bit floats and booleans
//===----------------------------------------------------------------------===//

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
/// i1: one byte holding 0 or 1 (any nonzero byte reads as true).
struct Bool {
  uint8_t byte;
};

/// The math and conversion helpers are small and must inline into the
/// kernels' loops for those to vectorize.
#ifndef SHARDFLOW_CPU_INLINE
#define SHARDFLOW_CPU_INLINE inline __attribute__((always_inline))
#endif
/// On a function that holds a hot loop: inline everything it calls (the
/// per-element lambdas included), so the loop can vectorize.
#ifndef SHARDFLOW_CPU_FLATTEN
#define SHARDFLOW_CPU_FLATTEN __attribute__((flatten))
#endif

SHARDFLOW_CPU_INLINE uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
SHARDFLOW_CPU_INLINE float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// c ? a : b without a branch. With -ftrapping-math (the default) GCC will
/// not if-convert a float `?:` whose arms compute, which stops
/// vectorization; a bit mask does not have that problem.
SHARDFLOW_CPU_INLINE uint32_t selectu(bool c, uint32_t a, uint32_t b) {
  uint32_t m = uint32_t(0) - uint32_t(c);
  return (a & m) | (b & ~m);
}
SHARDFLOW_CPU_INLINE float selectf(bool c, float a, float b) {
  return bitsFloat(selectu(c, floatBits(a), floatBits(b)));
}
SHARDFLOW_CPU_INLINE double selectf(bool c, double a, double b) {
  uint64_t m = uint64_t(0) - uint64_t(c), ua, ub;
  std::memcpy(&ua, &a, 8);
  std::memcpy(&ub, &b, 8);
  ua = (ua & m) | (ub & ~m);
  std::memcpy(&a, &ua, 8);
  return a;
}

// The conversions are branch-free so that loops over them vectorize.

SHARDFLOW_CPU_INLINE float halfToFloat(uint16_t h) {
  // Exponent and mantissa moved into float position, then rebiased by a
  // multiplication with 2^112 (which also normalizes subnormals).
  float f = bitsFloat(uint32_t(h & 0x7fffu) << 13) * 5.192296858534828e+33f;
  uint32_t u = floatBits(f);
  u |= selectu(f >= 65536.0f, 0x7f800000u, 0u); // inf / nan: all-ones exponent
  return bitsFloat(u | (uint32_t(h & 0x8000u) << 16));
}

/// Round to nearest even; NaN stays NaN (quiet), overflow gives inf.
SHARDFLOW_CPU_INLINE uint16_t floatToHalf(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  // Below 2^-14 (subnormal or zero): adding 0.5 aligns the 10 result bits
  // at the bottom of the mantissa and the FPU's round-to-nearest-even
  // rounds them.
  uint32_t sub = floatBits(bitsFloat(u) + 0.5f) - 0x3f000000u;
  // Normal: rebias the exponent (-112 << 23) and round to nearest even.
  uint32_t norm = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
  uint32_t infNan = selectu(u > 0x7f800000u, 0x7e00u, 0x7c00u);
  uint32_t r = selectu(u >= 0x47800000u, infNan, selectu(u < 0x38800000u, sub, norm));
  return uint16_t(sign | r);
}

SHARDFLOW_CPU_INLINE float bf16ToFloat(uint16_t b) { return bitsFloat(uint32_t(b) << 16); }

SHARDFLOW_CPU_INLINE uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x40u); // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

//===----------------------------------------------------------------------===//
// Float math that vectorizes
//===----------------------------------------------------------------------===//
//
// exp, tanh and erf for float written as branch-free arithmetic (no libm
// call), so that loops over them vectorize; each is within about 2 ulp of
// the correctly rounded result. The double overloads call libm.

/// selectf for floats, a plain `?:` for other types.
template <typename C> SHARDFLOW_CPU_INLINE C select(bool c, C a, C b) {
  if constexpr (std::is_floating_point_v<C>)
    return selectf(c, a, b);
  else
    return c ? a : b;
}

SHARDFLOW_CPU_INLINE float pow2i(int32_t n) { return bitsFloat(uint32_t(n + 127) << 23); } // n in [-126, 127]

/// exp(x): Cephes' expf polynomial after reduction by ln 2. Overflow gives
/// inf, results below the smallest subnormal 0; NaN propagates.
SHARDFLOW_CPU_INLINE float fastExp(float x) {
  // NaN goes through the polynomial as 0 (converting it to an integer is
  // undefined) and comes back at the end.
  float xc = selectf(x < -104.0f, -104.0f, selectf(x > 88.75f, 88.75f, selectf(x != x, 0.0f, x)));
  float fn = xc * 1.44269504088896341f;
  int32_t n = int32_t(fn + selectf(fn >= 0.0f, 0.5f, -0.5f));
  float nf = float(n);
  float r = (xc - nf * 0.693359375f) + nf * 2.12194440e-4f;
  float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * z + r + 1.0f;
  // Scale by 2^n in two steps so that n in [-150, 128] stays representable.
  int32_t n1 = n / 2;
  y = y * pow2i(n1) * pow2i(n - n1);
  y = selectf(x > 88.72283905f, std::numeric_limits<float>::infinity(), y);
  return selectf(x != x, x, y);
}
SHARDFLOW_CPU_INLINE double fastExp(double x) { return std::exp(x); }

/// tanh(x): Cephes' tanhf: an odd polynomial below 0.625, else
/// 1 - 2 / (exp(2|x|) + 1).
SHARDFLOW_CPU_INLINE float fastTanh(float x) {
  float ax = std::fabs(x);
  float e = fastExp(2.0f * selectf(ax > 9.0f, 9.0f, ax));
  float big = 1.0f - 2.0f / (e + 1.0f);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = p * z * ax + ax;
  float r = selectf(ax > 0.625f, big, small);
  return selectf(x < 0.0f, -r, r);
}
SHARDFLOW_CPU_INLINE double fastTanh(double x) { return std::tanh(x); }

/// erf(x): x + x P(x^2) below 0.921875, else 1 - exp(R(|x|) - x^2) with R
/// approximating log(erfc(t)) + t^2 (weighted least-squares fits); the
/// result rounds to 1 beyond 4.
SHARDFLOW_CPU_INLINE float fastErf(float x) {
  float ax = std::fabs(x);
  float s = x * x;
  float p = 8.4110638726e-05f;
  p = p * s - 8.1537908484e-04f;
  p = p * s + 5.2021769509e-03f;
  p = p * s - 2.6859957714e-02f;
  p = p * s + 1.1283708439e-01f;
  p = p * s - 3.7612634944e-01f;
  p = p * s + 1.2837916690e-01f;
  float small = x + x * p;
  float t = selectf(ax > 4.0f, 4.0f, ax);
  float u = t - 2.4609375f;
  float q = -2.1380550136e-05f;
  q = q * u + 6.9335400434e-05f;
  q = q * u - 4.4299066659e-04f;
  q = q * u + 2.2548378122e-03f;
  q = q * u - 1.1197931800e-02f;
  q = q * u + 5.7399853113e-02f;
  q = q * u - 3.5711445479e-01f;
  q = q * u - 1.5429524702e+00f;
  float big = 1.0f - fastExp(q - t * t);
  float r = selectf(ax > 0.921875f, selectf(x < 0.0f, -big, big), small);
  return selectf(x != x, x, r);
}
SHARDFLOW_CPU_INLINE double fastErf(double x) { return std::erf(x); }

//===----------------------------------------------------------------------===//
// Compute types, load and store
//===----------------------------------------------------------------------===//

template <typename T> struct ComputeOf {
  using type = T;
};
template <> struct ComputeOf<Half> {
  using type = float;
};
template <> struct ComputeOf<BFloat16> {
  using type = float;
};
template <> struct ComputeOf<Bool> {
  using type = bool;
};
/// The type a kernel computes in for storage type T.
template <typename T> using Compute = typename ComputeOf<T>::type;

template <typename T> SHARDFLOW_CPU_INLINE Compute<T> load(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return halfToFloat(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bf16ToFloat(v.bits);
  else if constexpr (std::is_same_v<T, Bool>)
    return v.byte != 0;
  else
    return v;
}

template <typename T> SHARDFLOW_CPU_INLINE T store(Compute<T> v) {
  if constexpr (std::is_same_v<T, Half>)
    return Half{floatToHalf(v)};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{floatToBf16(v)};
  else if constexpr (std::is_same_v<T, Bool>)
    return Bool{uint8_t(v ? 1 : 0)};
  else
    return v;
}

template <typename T>
inline constexpr bool isFloatStorage =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Converts a double to integer type I, truncating toward zero, without
/// undefined behaviour. Out-of-range values and NaN follow what numpy's
/// astype and onnxruntime give on x86-64: the conversion goes through int32
/// (to i8, i16, ui8, ui16, i32) or int64 (to ui32, i64, ui64), whose
/// out-of-range result is its minimum, and narrower types keep the low
/// bits (ui64 at or above 2^64 gives 0; ui32 beyond int64 may differ).
template <typename I> inline I truncToInt(double v) {
  static_assert(std::is_integral_v<I>);
  if constexpr (std::is_same_v<I, uint64_t>) {
    if (v >= 9223372036854775808.0)
      return v < 18446744073709551616.0 ? uint64_t(v) : 0;
    return uint64_t(truncToInt<int64_t>(v));
  } else if constexpr (sizeof(I) == 8 || std::is_same_v<I, uint32_t>) {
    bool ok = v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    return I(ok ? int64_t(v) : std::numeric_limits<int64_t>::min());
  } else {
    bool ok = v > -2147483649.0 && v < 2147483648.0;
    return I(ok ? int32_t(v) : std::numeric_limits<int32_t>::min());
  }
}

/// Converts one element between any two storage types with ONNX Cast
/// semantics: to Bool is "nonzero"; float to integer truncates toward zero
/// (see truncToInt); to f16/bf16 rounds to nearest even (f64 through f32).
template <typename To, typename From> SHARDFLOW_CPU_INLINE To convertElement(From x) {
  auto v = load(x);
  using CF = decltype(v);
  if constexpr (std::is_same_v<To, Bool>) {
    return Bool{uint8_t(v != CF(0) ? 1 : 0)};
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return store<To>(float(v));
  } else if constexpr (std::is_floating_point_v<To>) {
    return To(v);
  } else if constexpr (std::is_floating_point_v<CF>) {
    return truncToInt<To>(double(v));
  } else {
    return To(v);
  }
}

//===----------------------------------------------------------------------===//
// Dtype dispatch
//===----------------------------------------------------------------------===//

template <typename T> struct Tag {
  using type = T;
};

inline RuntimeError unsupportedType(std::string_view kernel, DType t) {
  return kernelError(kernel, std::string("unsupported element type ") + dtypeName(t));
}

template <typename F> inline bool dispatchFloatImpl(DType t, F &&f) {
  switch (t) {
  case DType::F32: f(Tag<float>{}); return true;
  case DType::F64: f(Tag<double>{}); return true;
  case DType::F16: f(Tag<Half>{}); return true;
  case DType::BF16: f(Tag<BFloat16>{}); return true;
  default: return false;
  }
}

template <typename F> inline bool dispatchIntegerImpl(DType t, F &&f) {
  switch (t) {
  case DType::I8: f(Tag<int8_t>{}); return true;
  case DType::I16: f(Tag<int16_t>{}); return true;
  case DType::I32: f(Tag<int32_t>{}); return true;
  case DType::I64: f(Tag<int64_t>{}); return true;
  case DType::U8: f(Tag<uint8_t>{}); return true;
  case DType::U16: f(Tag<uint16_t>{}); return true;
  case DType::U32: f(Tag<uint32_t>{}); return true;
  case DType::U64: f(Tag<uint64_t>{}); return true;
  default: return false;
  }
}

/// f16, bf16, f32, f64.
template <typename F> inline void dispatchFloat(DType t, std::string_view kernel, F &&f) {
  if (!dispatchFloatImpl(t, f))
    throw unsupportedType(kernel, t);
}
/// Signed and unsigned integers of 8 to 64 bits (not i1).
template <typename F> inline void dispatchInteger(DType t, std::string_view kernel, F &&f) {
  if (!dispatchIntegerImpl(t, f))
    throw unsupportedType(kernel, t);
}
/// Floats and integers (not i1).
template <typename F> inline void dispatchNumeric(DType t, std::string_view kernel, F &&f) {
  if (!dispatchFloatImpl(t, f) && !dispatchIntegerImpl(t, f))
    throw unsupportedType(kernel, t);
}
/// Every element type; i1 as Bool.
template <typename F> inline void dispatchAny(DType t, std::string_view kernel, F &&f) {
  if (t == DType::I1) {
    f(Tag<Bool>{});
    return;
  }
  dispatchNumeric(t, kernel, f);
}

/// Reads any float tensor into a vector of C (float or double).
template <typename C> inline std::vector<C> readAs(const Tensor &t, std::string_view kernel) {
  std::vector<C> out(size_t(t.numel()));
  dispatchNumeric(t.dtype, kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *p = t.as<T>();
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = C(load(p[i]));
  });
  return out;
}

//===----------------------------------------------------------------------===//
// Broadcasting
//===----------------------------------------------------------------------===//

/// ONNX multidirectional broadcast of `a` and `b`, or a RuntimeError.
inline std::vector<int64_t> broadcastShapes(std::string_view kernel,
                                            const std::vector<int64_t> &a,
                                            const std::vector<int64_t> &b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw kernelError(kernel, "shapes " + shapeList(a) + " and " + shapeList(b) +
                                    " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// Element strides of a contiguous tensor of shape `in` read as shape `out`
/// (right-aligned): 0 on broadcast dimensions. `in` must broadcast to `out`.
inline std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &in,
                                             const std::vector<int64_t> &out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    strides[o] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  return strides;
}

/// True if `in` broadcasts to `out` without changing it.
inline bool broadcastsTo(const std::vector<int64_t> &in, const std::vector<int64_t> &out) {
  if (in.size() > out.size())
    return false;
  for (size_t k = 0; k < in.size(); ++k) {
    int64_t d = in[in.size() - 1 - k];
    if (d != 1 && d != out[out.size() - 1 - k])
      return false;
  }
  return true;
}

/// Walks an output of shape `out` and N operands read through broadcasting.
/// After construction, `forEach(fn)` calls
///   fn(int64_t outOffset, const std::array<int64_t, N> &inOffsets,
///      int64_t count)
/// once per contiguous inner run of `count` output elements; within a run
/// operand i advances by `innerStride[i]` (0 or 1) per element. Dimensions
/// of size 1 are dropped and adjacent dimensions that are contiguous in all
/// operands merged, so equal shapes give a single run.
template <size_t N> class BroadcastLoop {
public:
  BroadcastLoop(const std::vector<int64_t> &out, const std::array<std::vector<int64_t>, N> &ins) {
    std::array<std::vector<int64_t>, N> full;
    for (size_t i = 0; i < N; ++i)
      full[i] = broadcastStrides(ins[i], out);
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] == 1)
        continue;
      bool merge = !dims.empty();
      for (size_t i = 0; merge && i < N; ++i)
        merge = strides[i].back() == full[i][d] * out[d];
      if (merge) {
        dims.back() *= out[d];
        for (size_t i = 0; i < N; ++i)
          strides[i].back() = full[i][d];
      } else {
        dims.push_back(out[d]);
        for (size_t i = 0; i < N; ++i)
          strides[i].push_back(full[i][d]);
      }
    }
    total = 1;
    for (int64_t d : out)
      total *= d;
    for (size_t i = 0; i < N; ++i)
      innerStride[i] = dims.empty() ? 0 : strides[i].back();
  }

  template <typename F> void forEach(F &&fn) const { forEachIn(0, total, fn); }

  /// forEach over output elements [begin, end) only: the runs at either
  /// end are cut to the bounds. This is how the kernels split a broadcast
  /// loop across threads; each element sees the same operands either way.
  template <typename F> void forEachIn(int64_t begin, int64_t end, F &&fn) const {
    begin = std::max<int64_t>(begin, 0);
    end = std::min(end, total);
    if (begin >= end)
      return;
    std::array<int64_t, N> off{};
    if (dims.empty()) {
      fn(int64_t(0), off, int64_t(1));
      return;
    }
    size_t outer = dims.size() - 1;
    int64_t inner = dims.back();
    // The outer index of the run that holds `begin`, and operand offsets.
    std::vector<int64_t> idx(outer, 0);
    for (int64_t run = begin / inner, d = int64_t(outer) - 1; d >= 0; --d) {
      idx[size_t(d)] = run % dims[size_t(d)];
      run /= dims[size_t(d)];
      for (size_t i = 0; i < N; ++i)
        off[i] += idx[size_t(d)] * strides[i][size_t(d)];
    }
    for (int64_t o = begin - begin % inner; o < end; o += inner) {
      int64_t from = std::max(o, begin) - o, to = std::min(o + inner, end) - o;
      if (from == 0) {
        fn(o, off, to);
      } else {
        std::array<int64_t, N> at = off;
        for (size_t i = 0; i < N; ++i)
          at[i] += from * innerStride[i];
        fn(o + from, at, to - from);
      }
      // Advance the outer index, updating operand offsets incrementally.
      for (size_t d = outer; d-- > 0;) {
        if (++idx[d] < dims[d]) {
          for (size_t i = 0; i < N; ++i)
            off[i] += strides[i][d];
          break;
        }
        for (size_t i = 0; i < N; ++i)
          off[i] -= strides[i][d] * (dims[d] - 1);
        idx[d] = 0;
      }
    }
  }

  /// The number of output elements.
  int64_t size() const { return total; }

  std::array<int64_t, N> innerStride{};

private:
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, N> strides;
  int64_t total = 0;
};

} // namespace shardflow::runtime::cpu::ew

#endif // SHARDFLOW_RUNTIME_KERNELS_CPU_ELEMENTWISESUPPORT_H
