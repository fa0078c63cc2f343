//===- Attention.cpp - CPU kernels: attention and rotary_embedding ---------===//
//
// attention (ONNX opset 23, no KV cache): one query row at a time, scores
// for that row only, softmax over keys, then the weighted sum of values.
// rotary_embedding (opset 23): halves or interleaved pairs, optional
// position_ids, partial rotation. f16 and bf16 run through f32.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Kernel.h"

#include "KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//


/// Where the rows of a [B, H, S, D] operand lie, for 4-D tensors or for
/// 3-D [B, S, H * D] ones: element (b, h, s, d) is at b*sb + h*sh + s*ss + d.
struct Heads {
  int64_t batch = 0, heads = 0, seq = 0, dim = 0;
  int64_t sb = 0, sh = 0, ss = 0;
};

Heads headsOf(const KernelContext &ctx, const Tensor &t, int64_t numHeads, const char *what) {
  Heads h;
  if (t.rank() == 4) {
    h.batch = t.shape[0];
    h.heads = t.shape[1];
    h.seq = t.shape[2];
    h.dim = t.shape[3];
    h.ss = h.dim;
    h.sh = h.seq * h.dim;
    h.sb = h.heads * h.sh;
  } else if (t.rank() == 3) {
    if (numHeads <= 0 || t.shape[2] % numHeads)
      fail(ctx, std::string("3-D ") + what + " needs a head count dividing its hidden size " +
                    std::to_string(t.shape[2]));
    h.batch = t.shape[0];
    h.heads = numHeads;
    h.seq = t.shape[1];
    h.dim = t.shape[2] / numHeads;
    h.sh = h.dim;
    h.ss = t.shape[2];
    h.sb = h.seq * h.ss;
  } else {
    fail(ctx, std::string(what) + " must be 3-D or 4-D");
  }
  return h;
}

//===----------------------------------------------------------------------===//
// attention
//===----------------------------------------------------------------------===//

template <typename T> void attentionTyped(const KernelContext &ctx) {
  const Tensor &qt = ctx.inputs[0], &kt = ctx.inputs[1], &vt = ctx.inputs[2],
               &yt = ctx.outputs[0];
  const Tensor *mask = ctx.inputs.size() > 3 ? &ctx.inputs[3] : nullptr;
  int64_t qHeads = ctx.params.getInt("q_num_heads", 0);
  int64_t kvHeads = ctx.params.getInt("kv_num_heads", 0);
  Heads q = headsOf(ctx, qt, qHeads, "query"), k = headsOf(ctx, kt, kvHeads, "key"),
        v = headsOf(ctx, vt, kvHeads, "value");
  if (qt.rank() != kt.rank() || qt.rank() != vt.rank())
    fail(ctx, "query, key and value must all be 3-D or all 4-D");
  if (k.batch != q.batch || v.batch != q.batch || k.dim != q.dim || v.heads != k.heads ||
      v.seq != k.seq)
    fail(ctx, "query, key and value shapes disagree");
  if (k.heads < 1 || q.heads % k.heads)
    fail(ctx, "query heads " + std::to_string(q.heads) + " must be a multiple of key heads " +
                  std::to_string(k.heads));
  // The result has the query's layout with the value's head size.
  Heads y = q;
  y.dim = v.dim;
  if (yt.rank() == 4) {
    y.ss = y.dim;
    y.sh = y.seq * y.dim;
    y.sb = y.heads * y.sh;
  } else {
    y.sh = y.dim;
    y.ss = y.heads * y.dim;
    y.sb = y.seq * y.ss;
  }
  if (yt.numel() != y.batch * y.heads * y.seq * y.dim)
    fail(ctx, "result has the wrong number of elements");
  int64_t B = q.batch, Hq = q.heads, Sq = q.seq, Skv = k.seq, D = q.dim, Dv = v.dim;
  int64_t group = Hq / k.heads;
  double scale = ctx.params.has("scale") ? ctx.params.getFloat("scale")
                                         : 1.0 / std::sqrt(double(D));
  double softcap = ctx.params.getFloat("softcap", 0.0);
  bool causal = ctx.params.getBool("is_causal", false);

  // The mask broadcasts (right-aligned) to [B, Hq, Sq, Skv].
  int64_t mStride[4] = {0, 0, 0, 0};
  bool boolMask = false;
  if (mask) {
    if (mask->rank() > 4)
      fail(ctx, "mask rank must be at most 4");
    if (mask->dtype == DType::I1)
      boolMask = true;
    else if (mask->dtype != qt.dtype)
      fail(ctx, "mask must be i1 or have the query's element type");
    int64_t full[4] = {B, Hq, Sq, Skv};
    int64_t acc = 1;
    for (int64_t d = mask->rank() - 1, f = 3; d >= 0; --d, --f) {
      int64_t n = mask->shape[size_t(d)];
      if (n != 1 && n != full[f])
        fail(ctx, "mask dimension " + std::to_string(d) + " of size " + std::to_string(n) +
                      " does not broadcast to " + std::to_string(full[f]));
      mStride[f] = n == 1 ? 0 : acc;
      acc *= n;
    }
  }
  const T *Q = qt.as<const T>(), *K = kt.as<const T>(), *V = vt.as<const T>();
  T *Y = yt.as<T>();
  const T *Mf = mask && !boolMask ? mask->as<const T>() : nullptr;
  const uint8_t *Mb = mask && boolMask ? mask->as<const uint8_t>() : nullptr;
  const T negInf = -std::numeric_limits<T>::infinity();
  std::vector<T> score(static_cast<size_t>(Skv)), bias(static_cast<size_t>(Skv));
  std::vector<T> acc(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t kvh = h / group;
      const T *Kh = K + b * k.sb + kvh * k.sh;
      const T *Vh = V + b * v.sb + kvh * v.sh;
      for (int64_t i = 0; i < Sq; ++i) {
        const T *qi = Q + b * q.sb + h * q.sh + i * q.ss;
        T *yi = Y + b * y.sb + h * y.sh + i * y.ss;
        // The additive bias of this row: causal and mask.
        bool anyAllowed = false;
        int64_t mRow = b * mStride[0] + h * mStride[1] + i * mStride[2];
        for (int64_t j = 0; j < Skv; ++j) {
          T bj = 0;
          if (causal && j > i)
            bj = negInf;
          if (Mb && !Mb[mRow + j * mStride[3]])
            bj = negInf;
          else if (Mf)
            bj += Mf[mRow + j * mStride[3]];
          bias[size_t(j)] = bj;
          anyAllowed |= bj != negInf;
        }
        if (!anyAllowed) {
          for (int64_t d = 0; d < Dv; ++d)
            yi[d] = T(0);
          continue;
        }
        T best = negInf;
        for (int64_t j = 0; j < Skv; ++j) {
          T s = 0;
          if (bias[size_t(j)] != negInf) {
            const T *kj = Kh + j * k.ss;
            T dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += qi[d] * kj[d];
            s = T(dot * scale);
            if (softcap > 0)
              s = T(softcap * std::tanh(s / softcap));
          }
          s += bias[size_t(j)];
          score[size_t(j)] = s;
          best = std::max(best, s);
        }
        std::fill(acc.begin(), acc.end(), T(0));
        T sum = 0;
        for (int64_t j = 0; j < Skv; ++j) {
          if (score[size_t(j)] == negInf)
            continue;
          T p = std::exp(score[size_t(j)] - best);
          sum += p;
          const T *vj = Vh + j * v.ss;
          for (int64_t d = 0; d < Dv; ++d)
            acc[size_t(d)] += p * vj[d];
        }
        T inv = T(1) / sum;
        for (int64_t d = 0; d < Dv; ++d)
          yi[d] = acc[size_t(d)] * inv;
      }
    }
}

void attentionKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() < 3 || ctx.inputs.size() > 4 || ctx.outputs.empty())
    fail(ctx, "expects 3 or 4 inputs and 1 output");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { attentionTyped<decltype(t)>(c); });
}

//===----------------------------------------------------------------------===//
// rotary_embedding
//===----------------------------------------------------------------------===//

template <typename T> void rotaryTyped(const KernelContext &ctx) {
  const Tensor &xt = ctx.inputs[0], &cosT = ctx.inputs[1], &sinT = ctx.inputs[2],
               &yt = ctx.outputs[0];
  const Tensor *pos = ctx.inputs.size() > 3 ? &ctx.inputs[3] : nullptr;
  Heads x = headsOf(ctx, xt, ctx.params.getInt("num_heads", 0), "input");
  int64_t rot = ctx.params.getInt("rotary_embedding_dim", 0);
  if (rot == 0)
    rot = x.dim;
  if (rot < 0 || rot > x.dim || rot % 2)
    fail(ctx, "rotary_embedding_dim " + std::to_string(rot) +
                  " must be even and at most the head size " + std::to_string(x.dim));
  bool interleaved = ctx.params.getBool("interleaved", false);
  int64_t half = rot / 2;
  if (cosT.numel() != sinT.numel() || cosT.shape.empty() || cosT.shape.back() != half)
    fail(ctx, "the caches must be [..., " + std::to_string(half) + "] and agree");
  int64_t positions = cosT.numel() / std::max<int64_t>(half, 1);
  if (!pos && positions != x.batch * x.seq)
    fail(ctx, "without position_ids the caches must be [batch, seq, rotary_dim / 2]");
  if (pos && pos->numel() != x.batch * x.seq)
    fail(ctx, "position_ids must be [batch, seq]");
  const T *X = xt.as<const T>(), *C = cosT.as<const T>(), *S = sinT.as<const T>();
  T *Y = yt.as<T>();
  for (int64_t b = 0; b < x.batch; ++b)
    for (int64_t s = 0; s < x.seq; ++s) {
      int64_t p = b * x.seq + s;
      if (pos) {
        p = pos->dtype == DType::I64 ? pos->as<const int64_t>()[b * x.seq + s]
                                     : int64_t(pos->as<const int32_t>()[b * x.seq + s]);
        if (p < 0 || p >= positions)
          fail(ctx, "position id " + std::to_string(p) + " is out of range for a cache of " +
                        std::to_string(positions) + " positions");
      }
      const T *c = C + p * half, *sn = S + p * half;
      for (int64_t h = 0; h < x.heads; ++h) {
        int64_t off = b * x.sb + h * x.sh + s * x.ss;
        const T *xi = X + off;
        T *yi = Y + off;
        if (interleaved) {
          for (int64_t d = 0; d < half; ++d) {
            T x1 = xi[2 * d], x2 = xi[2 * d + 1];
            yi[2 * d] = c[d] * x1 - sn[d] * x2;
            yi[2 * d + 1] = sn[d] * x1 + c[d] * x2;
          }
        } else {
          for (int64_t d = 0; d < half; ++d) {
            T x1 = xi[d], x2 = xi[d + half];
            yi[d] = c[d] * x1 - sn[d] * x2;
            yi[d + half] = sn[d] * x1 + c[d] * x2;
          }
        }
        for (int64_t d = rot; d < x.dim; ++d)
          yi[d] = xi[d];
      }
    }
}

void rotaryEmbeddingKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() < 3 || ctx.inputs.size() > 4 || ctx.outputs.size() != 1)
    fail(ctx, "expects 3 or 4 inputs and 1 output");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { rotaryTyped<decltype(t)>(c); });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("attention", attentionKernel);
SHARDFLOW_REGISTER_KERNEL("rotary_embedding", rotaryEmbeddingKernel);
