//===- Attention.cpp - CPU kernels: attention and rotary_embedding ---------===//
//
// attention (ONNX opset 23, no KV cache): blocks of query rows of one
// (batch, head) against every key, with two GEMMs (Q K^T, then P V) around
// a row-wise softmax; the blocks are split across the kernel's threads.
// rotary_embedding (opset 23): halves or interleaved pairs, optional
// position_ids, partial rotation; rotate_half, its written-out form's
// partner [-x2, x1]. f16 and bf16 run through f32.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Kernel.h"
#include "shardflow/Runtime/Format/Layout.h"

#include "Gemm.h"
#include "KernelSupport.h"
#include "Parallel.h"

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


/// A [B, H, S, D] view of a 3-D or 4-D operand (Layout.h).
using Heads = AttentionHeads;

Heads headsOf(const KernelContext &ctx, const Tensor &t, int64_t numHeads, const char *what) {
  Heads h;
  if (std::string problem = attentionHeads(t.shape, numHeads, what, h); !problem.empty())
    fail(ctx, problem);
  return h;
}

//===----------------------------------------------------------------------===//
// attention
//===----------------------------------------------------------------------===//

/// Scores of one block of query rows against all keys stay under this many
/// elements (128 KiB of f32: in L2 with the K and V panels).
constexpr int64_t kScoreBlock = 32768;

/// Query rows per block: the block's scores stay under kScoreBlock; under
/// a causal mask at most kCausalRows, so that a block computes only the
/// keys up to its last row (the blocks' key counts grow in steps of it).
constexpr int64_t kCausalRows = 32;
int64_t rowBlockFor(int64_t keys, bool causal) {
  int64_t rows = std::clamp<int64_t>(kScoreBlock / std::max<int64_t>(keys, 1), 16, 256);
  return causal ? std::min(rows, kCausalRows) : rows;
}

/// Attention for a block of query rows of one (batch, head): the block's
/// scores against every key are one GEMM (Q K^T), the softmax runs row by
/// row over them in place, and the block's output is a second GEMM (P V)
/// straight into Y, scaled by each row's 1 / sum afterwards.
template <typename T> struct AttentionJob {
  Heads q, k, v, y;
  const T *Q, *K, *V;
  T *Y;
  T *Lse;            // each query row's log-sum-exp, [B, Hq, Sq], or null
  const T *Mf;       // additive float mask, or null
  const uint8_t *Mb; // boolean mask (true = attend), or null
  int64_t mStride[4];
  int64_t group;     // query heads per key/value head
  T scale, softcap;  // softcap 0: none
  bool causal;
  int64_t rowBlock;

  /// Query rows [i0, i0 + rowBlock) of head h of batch b. `scores` holds
  /// rowBlock * k.seq elements, `inv` rowBlock.
  void run(int64_t b, int64_t h, int64_t i0, T *scores, T *inv) const {
    const int64_t kvh = h / group, D = q.dim, Dv = v.dim;
    const int64_t rows = std::min(rowBlock, q.seq - i0);
    const T *Qi = Q + b * q.sb + h * q.sh + i0 * q.ss;
    const T *Kh = K + b * k.sb + kvh * k.sh;
    const T *Vh = V + b * v.sb + kvh * v.sh;
    T *Yi = Y + b * y.sb + h * y.sh + i0 * y.ss;
    // Under the causal mask, row i sees keys 0..i: the block's last row
    // bounds the keys worth computing.
    const int64_t keys = causal ? std::min(k.seq, i0 + rows) : k.seq;
    std::fill(scores, scores + rows * keys, T(0));
    // S[r][j] = sum_d Q[i0 + r][d] * K[j][d]: K read transposed in place.
    gemmAccumulateOnThread<T>(rows, keys, D, Qi, q.ss, 1, Kh, 1, k.ss, scores, keys);
    T *lse = Lse ? Lse + (b * q.heads + h) * q.seq + i0 : nullptr;
    for (int64_t r = 0; r < rows; ++r)
      inv[r] = softmaxRow(b, h, i0 + r, scores + r * keys, keys, lse ? lse + r : nullptr);
    for (int64_t r = 0; r < rows; ++r)
      std::fill(Yi + r * y.ss, Yi + r * y.ss + Dv, T(0));
    gemmAccumulateOnThread<T>(rows, Dv, keys, scores, keys, 1, Vh, v.ss, 1, Yi, y.ss);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < Dv; ++d)
        Yi[r * y.ss + d] *= inv[r];
  }

  /// Turns row i's raw dot products s[0..keys) into its scores: scaled,
  /// capped, -inf where masked, 0 past the causal bound. Returns how many
  /// keys the row sees (its causal bound), 0 when every key is masked.
  int64_t scoreRow(int64_t b, int64_t h, int64_t i, T *s, int64_t keys) const {
    const T negInf = -std::numeric_limits<T>::infinity();
    const int64_t allowed = causal ? std::min(keys, i + 1) : keys;
    for (int64_t j = 0; j < allowed; ++j)
      s[j] *= scale;
    if (softcap > T(0))
      for (int64_t j = 0; j < allowed; ++j)
        s[j] = softcap * ew::fastTanh(s[j] / softcap);
    bool any = allowed > 0;
    if (Mb || Mf) {
      // A masked key's score is -inf whatever its dot product.
      const int64_t row = b * mStride[0] + h * mStride[1] + i * mStride[2];
      any = false;
      for (int64_t j = 0; j < allowed; ++j) {
        int64_t at = row + j * mStride[3];
        if (Mb) {
          s[j] = Mb[at] ? s[j] : negInf;
          any |= Mb[at] != 0;
        } else {
          T bias = Mf[at];
          s[j] = bias == negInf ? negInf : s[j] + bias;
          any |= bias != negInf;
        }
      }
    }
    std::fill(s + allowed, s + keys, T(0));
    return any ? allowed : 0;
  }

  /// Turns row i's raw dot products s[0..keys) into unnormalized softmax
  /// weights (0 where masked) and returns 1 / their sum; 0 when every key
  /// is masked, which makes the row's output 0. Writes the row's
  /// log-sum-exp to `lse` when given (-inf for a fully masked row).
  T softmaxRow(int64_t b, int64_t h, int64_t i, T *s, int64_t keys, T *lse = nullptr) const {
    const T negInf = -std::numeric_limits<T>::infinity();
    const int64_t allowed = scoreRow(b, h, i, s, keys);
    if (allowed == 0) {
      std::fill(s, s + keys, T(0));
      if (lse)
        *lse = negInf;
      return T(0);
    }
    T best = negInf;
    for (int64_t j = 0; j < allowed; ++j)
      best = std::max(best, s[j]);
    // Eight partial sums: the exp loop vectorizes.
    T part[8] = {};
    int64_t j = 0;
    for (; j + 8 <= allowed; j += 8)
      for (int l = 0; l < 8; ++l) {
        T x = s[j + l];
        T e = ew::select(x == negInf, T(0), ew::fastExp(x - best));
        s[j + l] = e;
        part[l] += e;
      }
    for (; j < allowed; ++j) {
      T x = s[j];
      T e = ew::select(x == negInf, T(0), ew::fastExp(x - best));
      s[j] = e;
      part[0] += e;
    }
    T sum = 0;
    for (T p : part)
      sum += p;
    if (lse)
      *lse = best + std::log(sum);
    return T(1) / sum;
  }

  /// Row i's probabilities exp(score - lse) from its raw dot products
  /// s[0..keys) and its saved log-sum-exp (0 where masked, and for a fully
  /// masked row, whose lse is -inf).
  void probabilitiesRow(int64_t b, int64_t h, int64_t i, T *s, int64_t keys, T lse) const {
    const T negInf = -std::numeric_limits<T>::infinity();
    const int64_t allowed = scoreRow(b, h, i, s, keys);
    if (allowed == 0 || lse == negInf) {
      std::fill(s, s + keys, T(0));
      return;
    }
    for (int64_t j = 0; j < allowed; ++j) {
      T x = s[j];
      s[j] = ew::select(x == negInf, T(0), ew::fastExp(x - lse));
    }
  }
};

/// The saved log-sum-exp (the forward's second output, the backward's
/// fifth input) must be [B, Hq, Sq], f64 for f64 operands, else f32 (the
/// type the kernel computes in).
template <typename T>
void checkLogSumExp(const KernelContext &ctx, const Tensor &lse, int64_t B, int64_t Hq,
                    int64_t Sq) {
  if (lse.dtype != (std::is_same_v<T, double> ? DType::F64 : DType::F32))
    fail(ctx, "the log-sum-exp must be f64 for f64 operands, else f32");
  if (lse.shape != std::vector<int64_t>{B, Hq, Sq})
    fail(ctx, "the log-sum-exp must be [B, Hq, Sq] = [" + std::to_string(B) + ", " +
                  std::to_string(Hq) + ", " + std::to_string(Sq) + "]");
}

template <typename T> void attentionTyped(const KernelContext &ctx) {
  const Tensor &qt = ctx.inputs[0], &kt = ctx.inputs[1], &vt = ctx.inputs[2],
               &yt = ctx.outputs[0];
  const Tensor *mask = ctx.inputs.size() > 3 ? &ctx.inputs[3] : nullptr;
  const Tensor *lse = ctx.outputs.size() > 1 ? &ctx.outputs[1] : nullptr;
  int64_t qHeads = ctx.params.getInt("q_num_heads", 0);
  int64_t kvHeads = ctx.params.getInt("kv_num_heads", 0);
  AttentionLayout layout;
  if (std::string problem = attentionLayout(qt.shape, kt.shape, vt.shape, yt.shape, qHeads,
                                            kvHeads, layout);
      !problem.empty())
    fail(ctx, problem);
  const Heads &q = layout.q, &k = layout.k, &v = layout.v, &y = layout.y;
  int64_t B = q.batch, Hq = q.heads, Sq = q.seq, Skv = k.seq, D = q.dim;
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
  AttentionJob<T> job;
  job.q = q;
  job.k = k;
  job.v = v;
  job.y = y;
  job.Q = qt.as<const T>();
  job.K = kt.as<const T>();
  job.V = vt.as<const T>();
  job.Y = yt.as<T>();
  job.Lse = nullptr;
  if (lse) {
    checkLogSumExp<T>(ctx, *lse, B, Hq, Sq);
    job.Lse = lse->as<T>();
  }
  job.Mf = mask && !boolMask ? mask->as<const T>() : nullptr;
  job.Mb = mask && boolMask ? mask->as<const uint8_t>() : nullptr;
  std::copy(mStride, mStride + 4, job.mStride);
  job.group = group;
  job.scale = T(scale);
  job.softcap = T(softcap);
  job.causal = causal;
  job.rowBlock = rowBlockFor(Skv, causal);
  // Threads take whole blocks of rows of one (batch, head), whose bounds do
  // not depend on the thread count: each output row is computed the same
  // way for any thread count.
  const int64_t blocks = (Sq + job.rowBlock - 1) / job.rowBlock;
  parallelFor(ctx, B * Hq * blocks, 1, [&](int64_t first, int64_t last) {
    std::vector<T> scores(size_t(std::min(job.rowBlock, Sq) * Skv));
    std::vector<T> inv(size_t(job.rowBlock));
    for (int64_t unit = first; unit < last; ++unit) {
      int64_t bh = unit / blocks;
      job.run(bh / Hq, bh % Hq, unit % blocks * job.rowBlock, scores.data(), inv.data());
    }
  });
}

void attentionKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() < 3 || ctx.inputs.size() > 4 || ctx.outputs.empty() ||
      ctx.outputs.size() > 2)
    fail(ctx, "expects 3 or 4 inputs and 1 or 2 outputs (the result, the log-sum-exp)");
  if (ctx.params.has("packed_qkv"))
    fail(ctx, "packed_qkv (query, key and value read in one fused buffer) is a CUDA "
              "artifact's form; the CPU kernel takes them as separate buffers");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { attentionTyped<decltype(t)>(c); });
}

//===----------------------------------------------------------------------===//
// attention_grad
//===----------------------------------------------------------------------===//

/// The mask's strides broadcast (right-aligned) to [B, Hq, Sq, Skv];
/// `boolMask` tells its kind.
void maskStrides(const KernelContext &ctx, const Tensor &mask, DType element,
                 const int64_t (&full)[4], int64_t (&strides)[4], bool &boolMask) {
  if (mask.rank() > 4)
    fail(ctx, "mask rank must be at most 4");
  boolMask = mask.dtype == DType::I1;
  if (!boolMask && mask.dtype != element)
    fail(ctx, "mask must be i1 or have the query's element type");
  int64_t acc = 1;
  for (int64_t d = mask.rank() - 1, f = 3; d >= 0; --d, --f) {
    int64_t n = mask.shape[size_t(d)];
    if (n != 1 && n != full[f])
      fail(ctx, "mask dimension " + std::to_string(d) + " of size " + std::to_string(n) +
                    " does not broadcast to " + std::to_string(full[f]));
    strides[f] = n == 1 ? 0 : acc;
    acc *= n;
  }
}

/// The backward of one (batch, key/value head): its query heads one after
/// another, each a block of query rows at a time. A block's probabilities
/// are recomputed from its scores against every key and the forward's
/// saved log-sum-exp (AttentionJob::probabilitiesRow); then dP = dY V^T,
/// the softmax's backward dS = P (dP - rowsum(P dP)) (with the softcap's
/// derivative and the scale), dQ = dS K for the block's rows, and
/// dK += dS^T Q, dV += P^T dY, which the unit owns: no two threads write
/// one element, and each element's sums run in one order for any thread
/// count.
template <typename T> struct AttentionGradJob {
  AttentionJob<T> forward; // shapes, operands, mask, scale, softcap
  const T *DY;
  const T *Lse; // the forward's log-sum-exp, [B, Hq, Sq]
  T *DQ, *DK, *DV;

  /// `scores` and `dp` hold rowBlock * k.seq elements, `tanh` too under a
  /// softcap (else null).
  void run(int64_t b, int64_t kvh, T *scores, T *dp, T *tanhs) const {
    const AttentionJob<T> &f = forward;
    const Heads &q = f.q, &k = f.k, &v = f.v, &y = f.y;
    const int64_t D = q.dim, Dv = v.dim;
    const T *Kh = f.K + b * k.sb + kvh * k.sh;
    const T *Vh = f.V + b * v.sb + kvh * v.sh;
    T *dKh = DK + b * k.sb + kvh * k.sh;
    T *dVh = DV + b * v.sb + kvh * v.sh;
    for (int64_t j = 0; j < k.seq; ++j)
      std::fill(dKh + j * k.ss, dKh + j * k.ss + D, T(0));
    for (int64_t j = 0; j < v.seq; ++j)
      std::fill(dVh + j * v.ss, dVh + j * v.ss + Dv, T(0));
    for (int64_t h = kvh * f.group; h < (kvh + 1) * f.group; ++h)
      for (int64_t i0 = 0; i0 < q.seq; i0 += f.rowBlock)
        block(b, h, i0, Kh, Vh, dKh, dVh, scores, dp, tanhs);
  }

  void block(int64_t b, int64_t h, int64_t i0, const T *Kh, const T *Vh, T *dKh, T *dVh,
             T *scores, T *dp, T *tanhs) const {
    const AttentionJob<T> &f = forward;
    const Heads &q = f.q, &k = f.k, &v = f.v, &y = f.y;
    const int64_t D = q.dim, Dv = v.dim;
    const int64_t rows = std::min(f.rowBlock, q.seq - i0);
    const int64_t keys = f.causal ? std::min(k.seq, i0 + rows) : k.seq;
    const T *Qi = f.Q + b * q.sb + h * q.sh + i0 * q.ss;
    const T *dYi = DY + b * y.sb + h * y.sh + i0 * y.ss;
    T *dQi = DQ + b * q.sb + h * q.sh + i0 * q.ss;
    const T *lse = Lse + (b * q.heads + h) * q.seq + i0;
    // P = exp(S - lse): the forward's probabilities of the block's rows,
    // from its saved log-sum-exp.
    std::fill(scores, scores + rows * keys, T(0));
    gemmAccumulateOnThread<T>(rows, keys, D, Qi, q.ss, 1, Kh, 1, k.ss, scores, keys);
    if (tanhs)
      for (int64_t n = 0; n < rows * keys; ++n)
        tanhs[n] = ew::fastTanh(scores[n] * f.scale / f.softcap);
    for (int64_t r = 0; r < rows; ++r)
      f.probabilitiesRow(b, h, i0 + r, scores + r * keys, keys, lse[r]);
    // dP = dY V^T, then dS in its place.
    std::fill(dp, dp + rows * keys, T(0));
    gemmAccumulateOnThread<T>(rows, keys, Dv, dYi, y.ss, 1, Vh, 1, v.ss, dp, keys);
    for (int64_t r = 0; r < rows; ++r) {
      const T *p = scores + r * keys;
      T *g = dp + r * keys;
      T dot = 0;
      for (int64_t j = 0; j < keys; ++j)
        dot += p[j] * g[j];
      for (int64_t j = 0; j < keys; ++j)
        g[j] = p[j] * (g[j] - dot);
      if (tanhs) {
        const T *t = tanhs + r * keys;
        for (int64_t j = 0; j < keys; ++j)
          g[j] *= T(1) - t[j] * t[j];
      }
      for (int64_t j = 0; j < keys; ++j)
        g[j] *= f.scale;
    }
    // dQ = dS K (the block's rows), dK += dS^T Q, dV += P^T dY.
    for (int64_t r = 0; r < rows; ++r)
      std::fill(dQi + r * q.ss, dQi + r * q.ss + D, T(0));
    gemmAccumulateOnThread<T>(rows, D, keys, dp, keys, 1, Kh, k.ss, 1, dQi, q.ss);
    gemmAccumulateOnThread<T>(keys, D, rows, dp, 1, keys, Qi, q.ss, 1, dKh, k.ss);
    gemmAccumulateOnThread<T>(keys, Dv, rows, scores, 1, keys, dYi, y.ss, 1, dVh, v.ss);
  }
};

template <typename T> void attentionGradTyped(const KernelContext &ctx) {
  const Tensor &qt = ctx.inputs[0], &kt = ctx.inputs[1], &vt = ctx.inputs[2],
               &dyt = ctx.inputs[3], &lset = ctx.inputs[4];
  const Tensor *mask = ctx.inputs.size() > 5 ? &ctx.inputs[5] : nullptr;
  const Tensor &dqt = ctx.outputs[0], &dkt = ctx.outputs[1], &dvt = ctx.outputs[2];
  if (dqt.shape != qt.shape || dkt.shape != kt.shape || dvt.shape != vt.shape)
    fail(ctx, "the cotangents must have the shapes of query, key and value");
  AttentionLayout layout;
  if (std::string problem =
          attentionLayout(qt.shape, kt.shape, vt.shape, dyt.shape,
                          ctx.params.getInt("q_num_heads", 0), ctx.params.getInt("kv_num_heads", 0),
                          layout);
      !problem.empty())
    fail(ctx, problem);
  AttentionGradJob<T> job;
  AttentionJob<T> &f = job.forward;
  f.q = layout.q;
  f.k = layout.k;
  f.v = layout.v;
  f.y = layout.y;
  const int64_t B = f.q.batch, Hq = f.q.heads, Hkv = f.k.heads, Sq = f.q.seq, Skv = f.k.seq;
  f.Q = qt.as<const T>();
  f.K = kt.as<const T>();
  f.V = vt.as<const T>();
  f.Y = nullptr;
  f.Lse = nullptr;
  f.Mf = nullptr;
  f.Mb = nullptr;
  std::fill(f.mStride, f.mStride + 4, int64_t(0));
  if (mask) {
    bool boolMask = false;
    maskStrides(ctx, *mask, qt.dtype, {B, Hq, Sq, Skv}, f.mStride, boolMask);
    f.Mf = boolMask ? nullptr : mask->as<const T>();
    f.Mb = boolMask ? mask->as<const uint8_t>() : nullptr;
  }
  f.group = Hq / Hkv;
  f.scale = T(ctx.params.has("scale") ? ctx.params.getFloat("scale")
                                      : 1.0 / std::sqrt(double(f.q.dim)));
  f.softcap = T(ctx.params.getFloat("softcap", 0.0));
  f.causal = ctx.params.getBool("is_causal", false);
  f.rowBlock = rowBlockFor(Skv, f.causal);
  checkLogSumExp<T>(ctx, lset, B, Hq, Sq);
  job.Lse = lset.as<const T>();
  job.DY = dyt.as<const T>();
  job.DQ = dqt.as<T>();
  job.DK = dkt.as<T>();
  job.DV = dvt.as<T>();
  // A unit is one (batch, key/value head): it owns its dK and dV.
  parallelFor(ctx, B * Hkv, 1, [&](int64_t first, int64_t last) {
    size_t block = size_t(std::min(f.rowBlock, Sq) * Skv);
    std::vector<T> scores(block), dp(block), tanhs(f.softcap > T(0) ? block : 0);
    for (int64_t unit = first; unit < last; ++unit)
      job.run(unit / Hkv, unit % Hkv, scores.data(), dp.data(),
              tanhs.empty() ? nullptr : tanhs.data());
  });
}

void attentionGradKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() < 5 || ctx.inputs.size() > 6 || ctx.outputs.size() != 3)
    fail(ctx, "expects 5 or 6 inputs (query, key, value, result_grad, lse, mask) and 3 outputs");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { attentionGradTyped<decltype(t)>(c); });
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
  // (batch, position) pairs are the rows.
  parallelForRows(ctx, x.batch * x.seq, x.heads * x.dim, [&](int64_t first, int64_t last) {
    for (int64_t bs = first; bs < last; ++bs) {
      int64_t b = bs / x.seq, s = bs % x.seq;
      int64_t p = bs;
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
  });
}

void rotaryEmbeddingKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() < 3 || ctx.inputs.size() > 4 || ctx.outputs.size() != 1)
    fail(ctx, "expects 3 or 4 inputs and 1 output");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { rotaryTyped<decltype(t)>(c); });
}

//===----------------------------------------------------------------------===//
// rotate_half: [-x2, x1] over the last dimension's halves
//===----------------------------------------------------------------------===//

template <typename T> void rotateHalfTyped(const KernelContext &ctx) {
  const Tensor &xt = ctx.inputs[0], &yt = ctx.outputs[0];
  if (xt.shape.empty() || xt.shape.back() % 2 || yt.shape != xt.shape)
    fail(ctx, "needs an even last dimension and a result of the input's shape");
  int64_t width = xt.shape.back(), half = width / 2, rows = xt.numel() / std::max<int64_t>(width, 1);
  const T *X = xt.as<const T>();
  T *Y = yt.as<T>();
  parallelForRows(ctx, rows, width, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const T *x = X + r * width;
      T *y = Y + r * width;
      for (int64_t d = 0; d < half; ++d) {
        y[d] = -x[d + half];
        y[d + half] = x[d];
      }
    }
  });
}

void rotateHalfKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    fail(ctx, "expects 1 input and 1 output");
  dispatchFloat(ctx, ctx.inputs[0].dtype,
                [](auto t, const KernelContext &c) { rotateHalfTyped<decltype(t)>(c); });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("attention", attentionKernel);
SHARDFLOW_REGISTER_KERNEL("attention_grad", attentionGradKernel);
SHARDFLOW_REGISTER_KERNEL("rotary_embedding", rotaryEmbeddingKernel);
SHARDFLOW_REGISTER_KERNEL("rotate_half", rotateHalfKernel);
