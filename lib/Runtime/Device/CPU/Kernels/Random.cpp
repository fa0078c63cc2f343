//===- Random.cpp - CPU kernels that draw random numbers ------------------===//
//
// training_dropout: a mask from uniform draws in [0, 1), those of numpy's
// legacy generator (NumpyRandom.h). ONNX's reference implementation draws
// the same way, so a seeded program gives the same mask here, there, and on
// every run.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Kernel.h"
#include "shardflow/Runtime/Format/NumpyRandom.h"

#include "KernelSupport.h"

#include <string>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu;

namespace {

template <typename T> void trainingDropoutTyped(const KernelContext &ctx) {
  const Tensor &x = ctx.inputs[0], &y = ctx.outputs[0], &mask = ctx.outputs[1];
  double ratio = ctx.params.getFloat("ratio");
  std::mt19937 gen = numpyGenerator(ctx.params.getInt("seed", 0));
  // The scale is rounded to the element type first, as the reference does.
  T scale = T(1) / (T(1) - T(float(ratio)));
  const T *xd = x.as<const T>();
  T *yd = y.as<T>();
  uint8_t *md = mask.as<uint8_t>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    bool keep = numpyUniform(gen) >= ratio;
    md[i] = keep;
    yd[i] = keep ? xd[i] * scale : T(0);
  }
}

void trainingDropoutKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 2)
    fail(ctx, "expects 1 input and 2 outputs");
  const Tensor &x = ctx.inputs[0];
  if (ctx.outputs[0].shape != x.shape || ctx.outputs[1].shape != x.shape)
    fail(ctx, "result and mask must have the input's shape");
  if (ctx.outputs[1].dtype != DType::I1)
    fail(ctx, "mask must be i1");
  double ratio = ctx.params.getFloat("ratio");
  if (!(ratio >= 0.0 && ratio < 1.0))
    fail(ctx, "ratio " + std::to_string(ratio) + " is outside [0, 1)");
  dispatchFloat(ctx, x.dtype,
                [](auto t, const KernelContext &c) { trainingDropoutTyped<decltype(t)>(c); });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("training_dropout", trainingDropoutKernel);
