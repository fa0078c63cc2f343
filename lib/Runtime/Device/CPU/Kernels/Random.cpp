//===- Random.cpp - CPU kernels that draw random numbers ------------------===//
//
// training_dropout: a mask from uniform draws in [0, 1), those of numpy's
// legacy generator (NumpyRandom.h). ONNX's reference implementation draws
// the same way, so a seeded program gives the same mask here, there, and on
// every run. keyed_dropout: a mask from Philox4x32-10 keyed by the seed and
// counted by (element / 4, step, the dropout's number), so that a rank draws its block of
// the tensor as the whole tensor's draws, and each step anew.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Kernel.h"
#include "shardflow/Runtime/Format/NumpyRandom.h"

#include "KernelSupport.h"
#include "Parallel.h"

#include <array>
#include <cmath>
#include <string>
#include <vector>

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

/// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as
/// easy as 1, 2, 3", SC'11): four 32-bit words of counter, two of key.
std::array<uint32_t, 4> philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         uint32_t(p0)};
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  return c;
}

template <typename T> void keyedDropoutTyped(const KernelContext &ctx) {
  const Tensor &x = ctx.inputs[0], &y = ctx.outputs[0];
  const int64_t dims = x.rank();
  const float ratio = float(ctx.params.getFloat("ratio"));
  const uint64_t seed = uint64_t(ctx.params.getInt("seed"));
  const uint32_t node = uint32_t(ctx.params.getInt("dropout_id"));
  float stepValue = *ctx.inputs[1].as<const float>();
  if (!(stepValue >= 0) || stepValue != std::floor(stepValue) || stepValue > 4294967295.0f)
    fail(ctx, "step " + std::to_string(stepValue) + " is no step number");
  const uint32_t step = uint32_t(stepValue);
  // Where this rank's block lies in the whole tensor.
  std::vector<int64_t> global = x.shape, start(size_t(dims), 0);
  if (ctx.params.has("global_shape")) {
    global = ctx.params.getInts("global_shape");
    if (int64_t(global.size()) != dims)
      fail(ctx, "global_shape must have the input's rank");
    if (ctx.params.has("starts")) {
      std::vector<int64_t> starts = ctx.params.getInts("starts");
      if (int64_t(starts.size()) < (ctx.rank + 1) * dims)
        fail(ctx, "starts has no block for rank " + std::to_string(ctx.rank));
      start.assign(starts.begin() + ctx.rank * dims, starts.begin() + (ctx.rank + 1) * dims);
    }
    for (int64_t d = 0; d < dims; ++d)
      if (start[size_t(d)] < 0 || start[size_t(d)] + x.shape[size_t(d)] > global[size_t(d)])
        fail(ctx, "this rank's block reaches past global_shape");
  }
  std::vector<int64_t> globalStride(size_t(dims), 1);
  for (int64_t d = dims - 2; d >= 0; --d)
    globalStride[size_t(d)] = globalStride[size_t(d + 1)] * global[size_t(d + 1)];
  const int64_t width = dims ? x.shape.back() : 1;
  const int64_t rows = width ? x.numel() / width : 0;
  const T scale = T(1) / (T(1) - T(ratio));
  const T *xd = x.as<const T>();
  T *yd = y.as<T>();
  const std::array<uint32_t, 2> key{uint32_t(seed), uint32_t(seed >> 32)};
  parallelForRows(ctx, rows, width, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) {
      // The row's first element's global index.
      int64_t rest = row, at = 0;
      for (int64_t d = dims - 2; d >= 0; --d) {
        int64_t local = rest % x.shape[size_t(d)];
        rest /= x.shape[size_t(d)];
        at += (local + start[size_t(d)]) * globalStride[size_t(d)];
      }
      if (dims)
        at += start[size_t(dims - 1)];
      for (int64_t i = 0; i < width; ++i) {
        uint64_t e = uint64_t(at + i), block = e / 4;
        std::array<uint32_t, 4> words =
            philox({uint32_t(block), uint32_t(block >> 32), step, node}, key);
        float u = float(words[e % 4] >> 8) * (1.0f / 16777216.0f);
        int64_t n = row * width + i;
        yd[n] = u >= ratio ? xd[n] * scale : T(0);
      }
    }
  });
}

void keyedDropoutKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    fail(ctx, "expects 2 inputs (input, step) and 1 output");
  const Tensor &x = ctx.inputs[0];
  if (ctx.outputs[0].shape != x.shape || ctx.outputs[0].dtype != x.dtype)
    fail(ctx, "the result must have the input's shape and type");
  if (ctx.inputs[1].numel() != 1 || ctx.inputs[1].dtype != DType::F32)
    fail(ctx, "step must be an f32 scalar");
  double ratio = ctx.params.getFloat("ratio");
  if (!(ratio >= 0.0 && ratio < 1.0))
    fail(ctx, "ratio " + std::to_string(ratio) + " is outside [0, 1)");
  dispatchFloat(ctx, x.dtype,
                [](auto t, const KernelContext &c) { keyedDropoutTyped<decltype(t)>(c); });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("training_dropout", trainingDropoutKernel);
SHARDFLOW_REGISTER_KERNEL("keyed_dropout", keyedDropoutKernel);
