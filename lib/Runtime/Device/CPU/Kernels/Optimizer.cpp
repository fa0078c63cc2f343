//===- Optimizer.cpp - CPU kernels: an optimizer's fused update ------------===//
//
// adamw_update: torch.optim.AdamW's single-tensor step of one parameter in
// one pass over the parameter, its gradient and its two moments (the
// elementwise form reads and writes them about twenty times). The
// arithmetic is the elementwise form's, in f32 and in the same order, so
// both give the same bits.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Kernel.h"

#include "KernelSupport.h"
#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu;

namespace {

float scalarOf(const KernelContext &ctx, size_t input, const char *name) {
  const Tensor &t = ctx.inputs[input];
  if (t.numel() != 1 || t.dtype != DType::F32)
    fail(ctx, std::string(name) + " must be an f32 scalar");
  return *t.as<const float>();
}

struct AdamWScalars {
  float b1, ob1, b2, ob2, eps, decay, correction2, stepSize, gradScale;
};

/// Elements [first, last), in blocks: a block's elements are loaded
/// into locals, updated there (a loop that vectorizes: nothing aliases
/// it) and stored. An output may be its input (the state updated in
/// place): each element is read before it is written.
void update(int64_t first, int64_t last, const float *W, const float *G, const float *M,
            const float *V, float *W2, float *M2, float *V2, const AdamWScalars &scalars) {
  constexpr int64_t kBlock = 64;
  const AdamWScalars s = scalars;
  for (int64_t at = first; at < last; at += kBlock) {
    const int64_t n = std::min(kBlock, last - at);
    float w[kBlock], g[kBlock], m[kBlock], v[kBlock];
    std::memcpy(w, W + at, size_t(n) * sizeof(float));
    std::memcpy(g, G + at, size_t(n) * sizeof(float));
    std::memcpy(m, M + at, size_t(n) * sizeof(float));
    std::memcpy(v, V + at, size_t(n) * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
      float gi = g[i] * s.gradScale;
      float wi = w[i] * s.decay;
      float mi = m[i] * s.b1 + gi * s.ob1;
      float vi = v[i] * s.b2 + (gi * gi) * s.ob2;
      float denom = std::sqrt(vi) / s.correction2 + s.eps;
      m[i] = mi;
      v[i] = vi;
      w[i] = wi - s.stepSize * (mi / denom);
    }
    std::memcpy(W2 + at, w, size_t(n) * sizeof(float));
    std::memcpy(M2 + at, m, size_t(n) * sizeof(float));
    std::memcpy(V2 + at, v, size_t(n) * sizeof(float));
  }
}

void adamwUpdateKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 8 || ctx.outputs.size() != 3)
    fail(ctx, "expects 8 inputs (param, grad, exp_avg, exp_avg_sq, lr, step, grad_scale, "
              "finite) and 3 outputs");
  const Tensor &param = ctx.inputs[0];
  int64_t n = param.numel();
  for (size_t i = 0; i < 4; ++i)
    if (ctx.inputs[i].dtype != DType::F32 || ctx.inputs[i].numel() != n)
      fail(ctx, "param, grad and the moments must be f32 tensors of one size");
  for (const Tensor &out : ctx.outputs)
    if (out.dtype != DType::F32 || out.numel() != n)
      fail(ctx, "the results must be f32 tensors of the param's size");
  if (ctx.inputs[7].dtype != DType::I1 || ctx.inputs[7].numel() != 1)
    fail(ctx, "finite must be an i1 scalar");
  float lr = scalarOf(ctx, 4, "lr"), step = scalarOf(ctx, 5, "step"),
        gradScale = scalarOf(ctx, 6, "grad_scale");
  bool finite = *ctx.inputs[7].as<const uint8_t>() != 0;
  const float *W = param.as<const float>(), *G = ctx.inputs[1].as<const float>(),
              *M = ctx.inputs[2].as<const float>(), *V = ctx.inputs[3].as<const float>();
  float *W2 = ctx.outputs[0].as<float>(), *M2 = ctx.outputs[1].as<float>(),
        *V2 = ctx.outputs[2].as<float>();
  if (!finite) {
    // The outputs may be the inputs (a training step's state, updated in
    // place).
    std::memmove(W2, W, size_t(n) * sizeof(float));
    std::memmove(M2, M, size_t(n) * sizeof(float));
    std::memmove(V2, V, size_t(n) * sizeof(float));
    return;
  }
  // The constants as the elementwise form has them: f64 values rounded
  // to f32, and the scalar arithmetic in f32.
  double beta1 = ctx.params.getFloat("beta1"), beta2 = ctx.params.getFloat("beta2");
  const float b1 = float(beta1), ob1 = float(1 - beta1), b2 = float(beta2), ob2 = float(1 - beta2);
  const float eps = float(ctx.params.getFloat("eps"));
  const float decay = 1.0f - lr * float(ctx.params.getFloat("weight_decay"));
  const float correction1 = 1.0f - std::pow(b1, step);
  const float correction2 = std::sqrt(1.0f - std::pow(b2, step));
  const float stepSize = lr / correction1;
  parallelFor(ctx, n, kElementwiseGrain, [=](int64_t first, int64_t last) {
    update(first, last, W, G, M, V, W2, M2, V2, {b1, ob1, b2, ob2, eps, decay, correction2,
                                                 stepSize, gradScale});
  });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("adamw_update", adamwUpdateKernel);
