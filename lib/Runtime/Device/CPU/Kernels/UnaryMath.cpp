//===- UnaryMath.cpp - CPU kernels for unary elementwise ops --------------===//
//
// sqrt, exp, log, tanh, sigmoid, erf, reciprocal, relu, neg, abs, not,
// identity and inference dropout (copies), leaky_relu, gelu (and its
// derivative times a cotangent, gelu_grad) and clip.
// f16/bf16 compute in float and round to nearest even on store.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseLoops.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu::ew;

namespace {

//===----------------------------------------------------------------------===//
// Unary ops
//===----------------------------------------------------------------------===//

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
// libm's: rotary tables are folded at compile time by these kernels, so a
// table is bit for bit what the runtime would compute.
void cosKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return std::cos(x); }; });
}
void sinKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return std::sin(x); }; });
}
void floorKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return std::floor(x); }; });
}
void ceilKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return std::ceil(x); }; });
}
// Halves to even (the default rounding mode).
void roundKernel(const KernelContext &ctx) {
  floatUnary(ctx, [](auto z) { return [](decltype(z) x) { return std::nearbyint(x); }; });
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

/// gelu_grad: result_grad * gelu'(input), one pass over both (the
/// composed derivative's arithmetic, in the compute type).
void geluGradKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  if (ctx.inputs[0].shape != ctx.inputs[1].shape || ctx.inputs[0].dtype != ctx.inputs[1].dtype)
    throw kernelError(ctx.kernel, "input and result_grad must have one shape and type");
  std::string approx = ctx.params.getString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    throw kernelError(ctx.kernel, "approximate must be \"none\" or \"tanh\", got \"" +
                                      approx + "\"");
  bool tanhForm = approx == "tanh";
  dispatchFloat(ctx.inputs[0].dtype, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    if (tanhForm) {
      binaryLoop<T, T, T>(ctx, [](C x, C dy) {
        const C k = C(0.044715), s = C(0.79788456080286535588);
        C x2 = x * x;
        C th = fastTanh(s * (x + k * (x2 * x)));
        C left = C(0.5) * (C(1) + th);
        C du = s * (C(1) + C(3 * 0.044715) * x2);
        return dy * (left + (C(0.5) * x) * ((C(1) - th * th) * du));
      });
    } else {
      binaryLoop<T, T, T>(ctx, [](C x, C dy) {
        C cdf = C(0.5) * (C(1) + fastErf(x * C(0.70710678118654752440)));
        C pdf = C(0.39894228040143267794) * fastExp(C(-0.5) * (x * x));
        return dy * (cdf + x * pdf);
      });
    }
  });
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

} // namespace

SHARDFLOW_REGISTER_KERNEL("sqrt", sqrtKernel);
SHARDFLOW_REGISTER_KERNEL("exp", expKernel);
SHARDFLOW_REGISTER_KERNEL("log", logKernel);
SHARDFLOW_REGISTER_KERNEL("tanh", tanhKernel);
SHARDFLOW_REGISTER_KERNEL("sigmoid", sigmoidKernel);
SHARDFLOW_REGISTER_KERNEL("erf", erfKernel);
SHARDFLOW_REGISTER_KERNEL("cos", cosKernel);
SHARDFLOW_REGISTER_KERNEL("sin", sinKernel);
SHARDFLOW_REGISTER_KERNEL("floor", floorKernel);
SHARDFLOW_REGISTER_KERNEL("ceil", ceilKernel);
SHARDFLOW_REGISTER_KERNEL("round", roundKernel);
SHARDFLOW_REGISTER_KERNEL("reciprocal", reciprocalKernel);
SHARDFLOW_REGISTER_KERNEL("relu", reluKernel);
SHARDFLOW_REGISTER_KERNEL("neg", negKernel);
SHARDFLOW_REGISTER_KERNEL("abs", absKernel);
SHARDFLOW_REGISTER_KERNEL("not", notKernel);
SHARDFLOW_REGISTER_KERNEL("identity", identityKernel);
SHARDFLOW_REGISTER_KERNEL("dropout", dropoutKernel);
SHARDFLOW_REGISTER_KERNEL("leaky_relu", leakyReluKernel);
SHARDFLOW_REGISTER_KERNEL("gelu", geluKernel);
SHARDFLOW_REGISTER_KERNEL("gelu_grad", geluGradKernel);
SHARDFLOW_REGISTER_KERNEL("clip", clipKernel);
