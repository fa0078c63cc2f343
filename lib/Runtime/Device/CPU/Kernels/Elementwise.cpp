//===- Elementwise.cpp - CPU kernels for elementwise arithmetic -----------===//
//
// add, sub, mul, min and max with ONNX multidirectional broadcasting.
// f16/bf16 compute in float and round to nearest even on store. Integer
// arithmetic wraps (computed unsigned). div and pow are in
// DivisionPower.cpp; the comparisons, unary math and cast in
// Comparison.cpp, UnaryMath.cpp and Cast.cpp.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseLoops.h"

#include <type_traits>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu::ew;

namespace {

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
template <template <typename> class Op> void arith(const KernelContext &ctx) {
  DType t = binaryOperandType(ctx);
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

} // namespace

SHARDFLOW_REGISTER_KERNEL("add", addKernel);
SHARDFLOW_REGISTER_KERNEL("sub", subKernel);
SHARDFLOW_REGISTER_KERNEL("mul", mulKernel);
SHARDFLOW_REGISTER_KERNEL("min", minKernel);
SHARDFLOW_REGISTER_KERNEL("max", maxKernel);
