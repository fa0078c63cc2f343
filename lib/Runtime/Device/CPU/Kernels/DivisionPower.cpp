//===- DivisionPower.cpp - CPU kernels for div, mod and pow ---------------===//
//
// div, mod and pow with ONNX multidirectional broadcasting: integer division
// truncates toward zero and division (or modulo) by zero is an error; mod
// takes the sign of the dividend with fmod (C's fmod and %), of the divisor
// without (Python's %); integer powers are exact and wrap. f16/bf16 compute in float and round to nearest even
// on store.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseLoops.h"

#include <cmath>
#include <string_view>
#include <vector>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu::ew;

namespace {

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

void divKernel(const KernelContext &ctx) {
  DType t = binaryOperandType(ctx);
  dispatchNumeric(t, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    if constexpr (std::is_integral_v<C>)
      binaryLoop<T, T, T>(ctx, IntDivOp<C>{ctx.kernel});
    else
      binaryLoop<T, T, T>(ctx, FloatDivOp<C>{});
  });
}

template <typename C> struct FloatModOp {
  C operator()(C a, C b) const { return std::fmod(a, b); }
};
template <typename C> struct IntModOp {
  std::string_view kernel;
  bool fmod;
  C operator()(C a, C b) const {
    if (b == 0)
      throw kernelError(kernel, "integer modulo by zero");
    if constexpr (std::is_signed_v<C>) {
      if (b == C(-1))
        return 0; // avoids INT_MIN % -1
      C r = C(a % b);
      if (!fmod && r != 0 && ((r < 0) != (b < 0)))
        r = C(r + b);
      return r;
    } else {
      return C(a % b);
    }
  }
};

void modKernel(const KernelContext &ctx) {
  DType t = binaryOperandType(ctx);
  bool fmod = ctx.params.getBool("fmod", false);
  dispatchNumeric(t, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    if constexpr (std::is_integral_v<C>) {
      binaryLoop<T, T, T>(ctx, IntModOp<C>{ctx.kernel, fmod});
    } else {
      if (!fmod)
        throw kernelError(ctx.kernel, "a float remainder needs fmod");
      binaryLoop<T, T, T>(ctx, FloatModOp<C>{});
    }
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

} // namespace

SHARDFLOW_REGISTER_KERNEL("div", divKernel);
SHARDFLOW_REGISTER_KERNEL("mod", modKernel);
SHARDFLOW_REGISTER_KERNEL("pow", powKernel);
