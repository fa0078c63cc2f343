//===- Elementwise.cpp - CPU kernels for elementwise nn ops ---------------===//
//
// Binary arithmetic and comparisons with ONNX multidirectional broadcasting,
// and/where, unary math, clip, cast. f16/bf16 compute in float and round to
// nearest even on store. Integer arithmetic wraps (computed unsigned), and
// integer division truncates toward zero; division by zero is an error.
// Tensors of kElementwiseGrain elements or more are split across the
// kernel's threads in ranges of whole 64-element blocks; every element is
// computed the same way on any thread, so results do not depend on the
// thread count.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseSupport.h"
#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu::ew;
using shardflow::runtime::cpu::kElementwiseGrain;
using shardflow::runtime::cpu::parallelFor;

namespace {

/// Range bounds are multiples of this many elements: whole cache lines for
/// every element type, so threads never write to the same line.
constexpr int64_t kBlock = 64;

/// fn(begin, end) over [0, n), split across threads for large n.
template <typename Fn> void elementwiseFor(const KernelContext &ctx, int64_t n, Fn &&fn) {
  parallelFor(ctx, n, kElementwiseGrain, fn, kBlock);
}

//===----------------------------------------------------------------------===//
// Binary ops
//===----------------------------------------------------------------------===//

/// One contiguous run of `n` results; operand strides are 1 or 0. Four
/// specialized loops that vectorize; `flatten` inlines `op` into them.
template <typename A, typename B, typename O, typename Op>
SHARDFLOW_CPU_FLATTEN void binaryRun(const A *pa, const B *pb, O *po, int64_t n, int64_t sa,
                                     int64_t sb, Op op) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i)
      po[i] = store<O>(op(load(pa[i]), load(pb[i])));
  } else if (sa == 1) {
    auto vb = load(pb[0]);
    for (int64_t i = 0; i < n; ++i)
      po[i] = store<O>(op(load(pa[i]), vb));
  } else if (sb == 1) {
    auto va = load(pa[0]);
    for (int64_t i = 0; i < n; ++i)
      po[i] = store<O>(op(va, load(pb[i])));
  } else {
    O v = store<O>(op(load(pa[0]), load(pb[0])));
    for (int64_t i = 0; i < n; ++i)
      po[i] = v;
  }
}

/// Runs `op(a, b)` over broadcast operands. A and B are storage types; `op`
/// takes and returns compute types; the result is stored as O.
template <typename A, typename B, typename O, typename Op>
void binaryLoop(const KernelContext &ctx, const Tensor &lhs, const Tensor &rhs, Op op) {
  const Tensor &out = ctx.outputs[0];
  auto shape = broadcastShapes(ctx.kernel, lhs.shape, rhs.shape);
  if (shape != out.shape)
    throw kernelError(ctx.kernel, "result shape " + shapeString(out.shape) +
                                      " is not the broadcast shape " + shapeString(shape));
  const A *a = lhs.as<A>();
  const B *b = rhs.as<B>();
  O *o = out.as<O>();
  BroadcastLoop<2> loop(shape, {lhs.shape, rhs.shape});
  const int64_t sa = loop.innerStride[0], sb = loop.innerStride[1];
  elementwiseFor(ctx, loop.size(), [&](int64_t begin, int64_t end) {
    loop.forEachIn(begin, end, [&](int64_t oo, const std::array<int64_t, 2> &in, int64_t n) {
      binaryRun<A, B, O>(a + in[0], b + in[1], o + oo, n, sa, sb, op);
    });
  });
}
template <typename A, typename B, typename O, typename Op>
void binaryLoop(const KernelContext &ctx, Op op) {
  binaryLoop<A, B, O>(ctx, ctx.inputs[0], ctx.inputs[1], op);
}

/// Wrapping integer arithmetic (signed overflow is not undefined here).
template <typename C> struct Wrap {
  // Unsigned and at least as wide as int, so that narrow types do not
  // promote to (overflowing) signed int.
  using U = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
  static C add(C a, C b) { return C(U(a) + U(b)); }
  static C sub(C a, C b) { return C(U(a) - U(b)); }
  static C mul(C a, C b) { return C(U(a) * U(b)); }
  static C neg(C a) { return C(U(0) - U(a)); }
};

template <typename C> struct AddOp {
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return Wrap<C>::add(a, b);
    else
      return a + b;
  }
};
template <typename C> struct SubOp {
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return Wrap<C>::sub(a, b);
    else
      return a - b;
  }
};
template <typename C> struct MulOp {
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return Wrap<C>::mul(a, b);
    else
      return a * b;
  }
};
template <typename C> struct FloatDivOp {
  C operator()(C a, C b) const { return a / b; }
};
template <typename C> struct IntDivOp {
  std::string_view kernel;
  C operator()(C a, C b) const {
    if (b == 0)
      throw kernelError(kernel, "integer division by zero");
    if constexpr (std::is_signed_v<C>)
      if (b == C(-1))
        return Wrap<C>::neg(a); // avoids INT_MIN / -1
    return C(a / b);
  }
};
// NaN propagates, as in numpy and onnxruntime.
template <typename C> struct MinOp {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      return selectf((a < b) | (a != a), a, b);
    else
      return a < b ? a : b;
  }
};
template <typename C> struct MaxOp {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      return selectf((a > b) | (a != a), a, b);
    else
      return a > b ? a : b;
  }
};
template <typename C> struct EqualOp {
  bool operator()(C a, C b) const { return a == b; }
};
template <typename C> struct LessOp {
  bool operator()(C a, C b) const { return a < b; }
};
template <typename C> struct GreaterOp {
  bool operator()(C a, C b) const { return a > b; }
};

/// Integer power by squaring (exact, wrapping) for a non-negative exponent;
/// a negative exponent gives the truncated real result (0 unless |base| = 1).
template <typename C, typename E> C intPow(C base, E e) {
  if constexpr (std::is_signed_v<E>) {
    if (e < 0) {
      if (base == 1)
        return 1;
      if constexpr (std::is_signed_v<C>)
        if (base == C(-1))
          return (e % 2) ? C(-1) : C(1);
      return 0;
    }
  }
  C r = 1;
  while (e) {
    if (e & 1)
      r = Wrap<C>::mul(r, base);
    e >>= 1;
    if (e)
      base = Wrap<C>::mul(base, base);
  }
  return r;
}

template <template <typename> class Op> void arith(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  DType t = ctx.inputs[0].dtype;
  if (ctx.inputs[1].dtype != t || ctx.outputs[0].dtype != t)
    throw kernelError(ctx.kernel, "operand and result element types differ");
  dispatchNumeric(t, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    binaryLoop<T, T, T>(ctx, Op<Compute<T>>{});
  });
}

void addKernel(const KernelContext &ctx) { arith<AddOp>(ctx); }
void subKernel(const KernelContext &ctx) { arith<SubOp>(ctx); }
void mulKernel(const KernelContext &ctx) { arith<MulOp>(ctx); }
void minKernel(const KernelContext &ctx) { arith<MinOp>(ctx); }
void maxKernel(const KernelContext &ctx) { arith<MaxOp>(ctx); }

void divKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  DType t = ctx.inputs[0].dtype;
  if (ctx.inputs[1].dtype != t || ctx.outputs[0].dtype != t)
    throw kernelError(ctx.kernel, "operand and result element types differ");
  dispatchNumeric(t, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    if constexpr (std::is_integral_v<C>)
      binaryLoop<T, T, T>(ctx, IntDivOp<C>{ctx.kernel});
    else
      binaryLoop<T, T, T>(ctx, FloatDivOp<C>{});
  });
}

template <typename C, typename CE> struct PowOp {
  C operator()(C x, CE y) const {
    if constexpr (std::is_integral_v<C> && std::is_integral_v<CE>) {
      return intPow<C>(x, y);
    } else if constexpr (std::is_integral_v<C>) {
      return truncToInt<C>(std::pow(double(x), double(y)));
    } else if constexpr (std::is_same_v<C, float> && !std::is_same_v<CE, double>) {
      if (y == CE(2))
        return x * x;
      return std::pow(x, float(y));
    } else {
      return C(std::pow(double(x), double(y)));
    }
  }
};

/// pow: the result has the base's type; the exponent may have any numeric
/// type (read as double when it differs from the base's).
void powKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  DType t = ctx.inputs[0].dtype;
  if (ctx.outputs[0].dtype != t)
    throw kernelError(ctx.kernel, "result element type differs from the base's");
  const Tensor &exponent = ctx.inputs[1];
  std::vector<double> converted;
  Tensor exp64 = exponent;
  if (exponent.dtype != t) {
    converted = readAs<double>(exponent, ctx.kernel);
    exp64.data = converted.data();
    exp64.dtype = DType::F64;
  }
  dispatchNumeric(t, ctx.kernel, [&](auto baseTag) {
    using T = typename decltype(baseTag)::type;
    using C = Compute<T>;
    if (exponent.dtype == t)
      binaryLoop<T, T, T>(ctx, ctx.inputs[0], exponent, PowOp<C, C>{});
    else
      binaryLoop<T, double, T>(ctx, ctx.inputs[0], exp64, PowOp<C, double>{});
  });
}

template <template <typename> class Op> void compare(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  DType t = ctx.inputs[0].dtype;
  if (ctx.inputs[1].dtype != t)
    throw kernelError(ctx.kernel, "operand element types differ");
  if (ctx.outputs[0].dtype != DType::I1)
    throw kernelError(ctx.kernel, "result must be i1");
  dispatchAny(t, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    binaryLoop<T, T, Bool>(ctx, Op<Compute<T>>{});
  });
}

void equalKernel(const KernelContext &ctx) { compare<EqualOp>(ctx); }
void lessKernel(const KernelContext &ctx) { compare<LessOp>(ctx); }
void greaterKernel(const KernelContext &ctx) { compare<GreaterOp>(ctx); }

void andKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  for (const Tensor *t : {&ctx.inputs[0], &ctx.inputs[1], &ctx.outputs[0]})
    if (t->dtype != DType::I1)
      throw kernelError(ctx.kernel, "operands and result must be i1");
  binaryLoop<Bool, Bool, Bool>(ctx, [](bool a, bool b) { return a && b; });
}

//===----------------------------------------------------------------------===//
// where
//===----------------------------------------------------------------------===//

template <typename U> void whereLoop(const KernelContext &ctx, const std::vector<int64_t> &shape) {
  const Tensor &c = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2];
  const uint8_t *pc = c.as<uint8_t>();
  const U *px = x.as<U>(), *py = y.as<U>();
  U *po = ctx.outputs[0].as<U>();
  BroadcastLoop<3> loop(shape, {c.shape, x.shape, y.shape});
  const auto s = loop.innerStride;
  auto run = [&](int64_t oo, const std::array<int64_t, 3> &in, int64_t n) {
    const uint8_t *cc = pc + in[0];
    const U *xx = px + in[1], *yy = py + in[2];
    U *out = po + oo;
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      // Branch-free select (random conditions would mispredict); vectorizes.
      for (int64_t i = 0; i < n; ++i) {
        U m = U(U(0) - U(cc[i] != 0));
        out[i] = U((xx[i] & m) | (yy[i] & U(~m)));
      }
    } else if (s[0] == 0) {
      const U *src = cc[0] ? xx : yy;
      int64_t st = cc[0] ? s[1] : s[2];
      if (st == 1)
        std::memcpy(out, src, size_t(n) * sizeof(U));
      else
        std::fill(out, out + n, src[0]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        out[i] = cc[i] ? xx[i * s[1]] : yy[i * s[2]];
    }
  };
  elementwiseFor(ctx, loop.size(),
                 [&](int64_t begin, int64_t end) { loop.forEachIn(begin, end, run); });
}

void whereKernel(const KernelContext &ctx) {
  expectArity(ctx, 3, 1);
  const Tensor &c = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2];
  const Tensor &out = ctx.outputs[0];
  if (c.dtype != DType::I1)
    throw kernelError(ctx.kernel, "condition must be i1");
  if (x.dtype != y.dtype || out.dtype != x.dtype)
    throw kernelError(ctx.kernel, "x, y and result element types differ");
  auto shape = broadcastShapes(ctx.kernel, broadcastShapes(ctx.kernel, c.shape, x.shape), y.shape);
  if (shape != out.shape)
    throw kernelError(ctx.kernel, "result shape " + shapeString(out.shape) +
                                      " is not the broadcast shape " + shapeString(shape));
  // Selection moves bytes: dispatch on the element size only.
  switch (dtypeSize(x.dtype)) {
  case 1: whereLoop<uint8_t>(ctx, shape); break;
  case 2: whereLoop<uint16_t>(ctx, shape); break;
  case 4: whereLoop<uint32_t>(ctx, shape); break;
  case 8: whereLoop<uint64_t>(ctx, shape); break;
  default: throw unsupportedType(ctx.kernel, x.dtype);
  }
}

//===----------------------------------------------------------------------===//
// Unary ops
//===----------------------------------------------------------------------===//

void expectSameShape(const KernelContext &ctx) {
  if (ctx.inputs[0].shape != ctx.outputs[0].shape)
    throw kernelError(ctx.kernel, "result shape " + shapeString(ctx.outputs[0].shape) +
                                      " differs from the input shape " +
                                      shapeString(ctx.inputs[0].shape));
  if (ctx.inputs[0].dtype != ctx.outputs[0].dtype)
    throw kernelError(ctx.kernel, "result element type differs from the input's");
}

template <typename T, typename Op>
SHARDFLOW_CPU_FLATTEN void unaryRun(const T *in, T *out, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = store<T>(op(load(in[i])));
}
template <typename T, typename Op> void unaryLoop(const KernelContext &ctx, Op op) {
  const T *in = ctx.inputs[0].as<T>();
  T *out = ctx.outputs[0].as<T>();
  elementwiseFor(ctx, ctx.inputs[0].numel(), [&](int64_t begin, int64_t end) {
    unaryRun<T>(in + begin, out + begin, end - begin, op);
  });
}

/// A unary op on f16/bf16/f32/f64 given as a generic lambda on the compute
/// type (float or double).
template <typename MakeOp> void floatUnary(const KernelContext &ctx, MakeOp makeOp) {
  expectArity(ctx, 1, 1);
  expectSameShape(ctx);
  dispatchFloat(ctx.inputs[0].dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unaryLoop<T>(ctx, makeOp(Compute<T>()));
  });
}

/// The same for every numeric type (integers included).
template <typename MakeOp> void numericUnary(const KernelContext &ctx, MakeOp makeOp) {
  expectArity(ctx, 1, 1);
  expectSameShape(ctx);
  dispatchNumeric(ctx.inputs[0].dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unaryLoop<T>(ctx, makeOp(Compute<T>()));
  });
}

void sqrtKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return std::sqrt(x); }; });
}
void expKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return fastExp(x); }; });
}
void logKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return std::log(x); }; });
}
void tanhKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return fastTanh(x); }; });
}
void erfKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return fastErf(x); }; });
}
void reciprocalKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) {
    using C = decltype(z);
    return [](C x) { return C(1) / x; };
  });
}
void sigmoidKernel(const KernelContext &ctx) {
  // Stable for both signs: exp never overflows.
  floatUnary(ctx, [](auto z) {
    using C = decltype(z);
    return [](C x) {
      C e = fastExp(-std::fabs(x));
      C r = C(1) / (C(1) + e);
      return selectf(x >= C(0), r, e * r);
    };
  });
}

void reluKernel(const KernelContext &ctx) {
  numericUnary(ctx, [](auto z) {
    using C = decltype(z);
    // As onnxruntime: NaN and -0 pass through.
    return [](C x) { return select(x < C(0), C(0), x); };
  });
}
void negKernel(const KernelContext &ctx) {
  numericUnary(ctx, [](auto z) {
    using C = decltype(z);
    return [](C x) -> C {
      if constexpr (std::is_integral_v<C>)
        return Wrap<C>::neg(x);
      else
        return -x;
    };
  });
}
void absKernel(const KernelContext &ctx) {
  numericUnary(ctx, [](auto z) {
    using C = decltype(z);
    return [](C x) -> C {
      if constexpr (std::is_unsigned_v<C>)
        return x;
      else if constexpr (std::is_integral_v<C>)
        return x < 0 ? Wrap<C>::neg(x) : x;
      else
        return std::abs(x);
    };
  });
}

void notKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  expectSameShape(ctx);
  if (ctx.inputs[0].dtype != DType::I1)
    throw unsupportedType(ctx.kernel, ctx.inputs[0].dtype);
  unaryLoop<Bool>(ctx, [](bool x) { return !x; });
}

/// identity and inference-mode dropout: a copy (usually compiled to views).
void copyKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  expectSameShape(ctx);
  if (ctx.outputs[0].data != ctx.inputs[0].data)
    std::memcpy(ctx.outputs[0].data, ctx.inputs[0].data, ctx.inputs[0].bytes());
}
void identityKernel(const KernelContext &ctx) { copyKernel(ctx); }
void dropoutKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  expectSameShape(ctx);
  dispatchFloat(ctx.inputs[0].dtype, ctx.kernel, [](auto) {});
  copyKernel(ctx);
}

void leakyReluKernel(const KernelContext &ctx) {
  double alpha = ctx.params.getFloat("alpha", 0.01);
  floatUnary(ctx, [alpha](auto z) {
    using C = decltype(z);
    C a = C(alpha);
    return [a](C x) { return selectf(x < C(0), a * x, x); };
  });
}

void geluKernel(const KernelContext &ctx) {
  std::string approx = ctx.params.getString("approximate", "none");
  if (approx == "none") {
    floatUnary(ctx, [](auto z) {
      using C = decltype(z);
      return [](C x) { return C(0.5) * x * (C(1) + fastErf(x * C(0.70710678118654752440))); };
    });
  } else if (approx == "tanh") {
    floatUnary(ctx, [](auto z) {
      using C = decltype(z);
      return [](C x) {
        C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
        return C(0.5) * x * (C(1) + fastTanh(inner));
      };
    });
  } else {
    throw kernelError(ctx.kernel, "approximate must be \"none\" or \"tanh\", got \"" + approx +
                                      "\"");
  }
}

/// A clip bound converted to compute type C: saturated for integers.
template <typename C> C clipBound(double v) {
  if constexpr (std::is_integral_v<C>) {
    if (v <= double(std::numeric_limits<C>::lowest()))
      return std::numeric_limits<C>::lowest();
    if (v >= double(std::numeric_limits<C>::max()))
      return std::numeric_limits<C>::max();
    return C(v);
  } else {
    return C(v);
  }
}

void clipKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  expectSameShape(ctx);
  bool hasMin = ctx.params.has("min"), hasMax = ctx.params.has("max");
  double lo = hasMin ? ctx.params.getFloat("min") : 0.0;
  double hi = hasMax ? ctx.params.getFloat("max") : 0.0;
  dispatchNumeric(ctx.inputs[0].dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    // For integers a fractional bound rounds inward (x >= 1.5 is x >= 2).
    C l = hasMin ? clipBound<C>(std::is_integral_v<C> ? std::ceil(lo) : lo)
                 : std::numeric_limits<C>::lowest();
    C h = hasMax ? clipBound<C>(std::is_integral_v<C> ? std::floor(hi) : hi)
                 : std::numeric_limits<C>::max();
    if constexpr (!std::is_integral_v<C>) {
      if (!hasMin)
        l = -std::numeric_limits<C>::infinity();
      if (!hasMax)
        h = std::numeric_limits<C>::infinity();
    }
    unaryLoop<T>(ctx, [l, h](C x) {
      C y = select(x < l, l, x);
      return select(y > h, h, y);
    });
  });
}

//===----------------------------------------------------------------------===//
// cast
//===----------------------------------------------------------------------===//

void castKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.shape != out.shape)
    throw kernelError(ctx.kernel, "result shape " + shapeString(out.shape) +
                                      " differs from the input shape " + shapeString(in.shape));
  if (ctx.params.has("to") && ctx.params.getDType("to") != out.dtype)
    throw kernelError(ctx.kernel, std::string("parameter 'to' is ") +
                                      dtypeName(ctx.params.getDType("to")) +
                                      " but the result is " + dtypeName(out.dtype));
  int64_t n = in.numel();
  if (in.dtype == out.dtype) {
    std::memcpy(out.data, in.data, in.bytes());
    return;
  }
  dispatchAny(in.dtype, ctx.kernel, [&](auto fromTag) {
    using From = typename decltype(fromTag)::type;
    dispatchAny(out.dtype, ctx.kernel, [&](auto toTag) {
      using To = typename decltype(toTag)::type;
      const From *src = in.as<From>();
      To *dst = out.as<To>();
      elementwiseFor(ctx, n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          dst[i] = convertElement<To>(src[i]);
      });
    });
  });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("add", addKernel);
SHARDFLOW_REGISTER_KERNEL("sub", subKernel);
SHARDFLOW_REGISTER_KERNEL("mul", mulKernel);
SHARDFLOW_REGISTER_KERNEL("div", divKernel);
SHARDFLOW_REGISTER_KERNEL("pow", powKernel);
SHARDFLOW_REGISTER_KERNEL("min", minKernel);
SHARDFLOW_REGISTER_KERNEL("max", maxKernel);
SHARDFLOW_REGISTER_KERNEL("equal", equalKernel);
SHARDFLOW_REGISTER_KERNEL("less", lessKernel);
SHARDFLOW_REGISTER_KERNEL("greater", greaterKernel);
SHARDFLOW_REGISTER_KERNEL("and", andKernel);
SHARDFLOW_REGISTER_KERNEL("where", whereKernel);
SHARDFLOW_REGISTER_KERNEL("sqrt", sqrtKernel);
SHARDFLOW_REGISTER_KERNEL("exp", expKernel);
SHARDFLOW_REGISTER_KERNEL("log", logKernel);
SHARDFLOW_REGISTER_KERNEL("tanh", tanhKernel);
SHARDFLOW_REGISTER_KERNEL("sigmoid", sigmoidKernel);
SHARDFLOW_REGISTER_KERNEL("erf", erfKernel);
SHARDFLOW_REGISTER_KERNEL("reciprocal", reciprocalKernel);
SHARDFLOW_REGISTER_KERNEL("relu", reluKernel);
SHARDFLOW_REGISTER_KERNEL("neg", negKernel);
SHARDFLOW_REGISTER_KERNEL("abs", absKernel);
SHARDFLOW_REGISTER_KERNEL("not", notKernel);
SHARDFLOW_REGISTER_KERNEL("identity", identityKernel);
SHARDFLOW_REGISTER_KERNEL("dropout", dropoutKernel);
SHARDFLOW_REGISTER_KERNEL("leaky_relu", leakyReluKernel);
SHARDFLOW_REGISTER_KERNEL("gelu", geluKernel);
SHARDFLOW_REGISTER_KERNEL("clip", clipKernel);
SHARDFLOW_REGISTER_KERNEL("cast", castKernel);
