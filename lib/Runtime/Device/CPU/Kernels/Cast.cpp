//===- Cast.cpp - the CPU cast kernel -------------------------------------===//
//
// cast between any two element types: floats to integers truncate toward
// zero, f16/bf16 round to nearest even (convertElement in
// ElementwiseSupport.h).
//
//===----------------------------------------------------------------------===//

#include "ElementwiseLoops.h"

#include <cstring>
#include <string>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu::ew;

namespace {

//===----------------------------------------------------------------------===//
// cast
//===----------------------------------------------------------------------===//

void castKernel(const KernelContext &ctx) {
  expectArity(ctx, 1, 1);
  const Tensor &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.shape != out.shape)
    throw kernelError(ctx.kernel, "result shape " + shapeList(out.shape) +
                                      " differs from the input shape " + shapeList(in.shape));
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

SHARDFLOW_REGISTER_KERNEL("cast", castKernel);
