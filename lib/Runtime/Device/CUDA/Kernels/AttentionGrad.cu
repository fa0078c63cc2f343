//===- AttentionGrad.cu - CUDA attention backward (attention_grad) ---------===//
//
// The cotangents of an attention's query, key and value without the
// Sq x Skv matrix in memory, in two kernels of one warp per row, each lane
// holding head-size elements lane, lane + 32, ... in registers (head sizes
// up to 256), every dot product a warp reduction:
//
// - dq, a warp per query row, two passes over the row's visible keys:
//   D = rowsum(P * dP), then dQ = scale * sum_j dS_j K_j, with
//   P = exp(S - lse) (the forward's saved log-sum-exp), dP = dY V^T,
//   dS = P (dP - D) (times 1 - tanh^2 under a softcap). It writes D to
//   the workspace. (D is not taken as dY . Y: from the same P, each row's
//   dS sums to zero up to rounding, which keeps a key bias's exactly
//   cancelling gradient at rounding level.)
// - dkv, a warp per key row of a key/value head: over the query rows that
//   see the key, of every query head of its group, P and dS recomputed
//   from the saved lse and D: dV = sum_i P_i dY_i, dK = scale * sum_i dS_i
//   Q_i. Each key row is one warp's, so dK and dV need no atomics and the
//   sums run in one order: the result is deterministic.
//
// Scores follow the forward's rule (AttentionCommon.cuh: scale, softcap,
// causal bound, mask); a masked key, or a row with no visible key, has
// P = 0. Accumulation is in f32.
//
//===----------------------------------------------------------------------===//

#include "AttentionCommon.cuh"

#include <cmath>

using namespace shardflow::runtime::cuda;
using namespace shardflow::runtime::cuda::device;

namespace {

constexpr int kLanes = kAttnGradLanes;

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Elements lane, lane + 32, ... of a row of `n` (zeros past n).
template <typename T>
__device__ __forceinline__ void loadRow(float (&r)[kLanes], const T *row, int n, int lane) {
#pragma unroll
  for (int t = 0; t < kLanes; ++t) {
    int d = lane + 32 * t;
    r[t] = d < n ? toFloat(row[d]) : 0.f;
  }
}

template <typename T>
__device__ __forceinline__ void storeRow(T *row, const float (&r)[kLanes], int n, int lane) {
#pragma unroll
  for (int t = 0; t < kLanes; ++t) {
    int d = lane + 32 * t;
    if (d < n)
      row[d] = fromFloat<T>(r[t]);
  }
}

/// The dot product of a register row with a row in memory, summed over
/// the warp (every lane gets it).
template <typename T>
__device__ __forceinline__ float dotRow(const float (&r)[kLanes], const T *row, int n, int lane) {
  float s = 0.f;
#pragma unroll
  for (int t = 0; t < kLanes; ++t) {
    int d = lane + 32 * t;
    if (d < n)
      s = fmaf(r[t], toFloat(row[d]), s);
  }
  return warpSum(s);
}

/// The mask row of query row i of (b, h), as bool and as float (null
/// without a mask).
template <typename T>
__device__ __forceinline__ void maskRow(const AttentionGradArgs &a, int b, int h, int i,
                                        const uint8_t *&maskB, const T *&maskF) {
  maskB = nullptr;
  maskF = nullptr;
  if (a.maskKind != kMaskNone) {
    int64_t off = b * a.maskStride[0] + h * a.maskStride[1] + int64_t(i) * a.maskStride[2];
    maskB = static_cast<const uint8_t *>(a.mask) + off;
    maskF = static_cast<const T *>(a.mask) + off;
  }
}

/// The score of (row, col) from the scaled dot product x, and the
/// derivative of the softcap at x (1 without one).
template <typename T>
__device__ __forceinline__ float scoreAndSlope(const AttentionGradArgs &a, const uint8_t *maskB,
                                               const T *maskF, int row, int col, float x,
                                               float &slope) {
  slope = 1.f;
  if (a.softcap > 0.f) {
    float t = tanhf(x / a.softcap);
    slope = 1.f - t * t;
  }
  return scoreOf<T>(a, maskB, maskF, row, col, x);
}

template <typename T> __device__ __forceinline__ void attentionGradDq(const AttentionGradArgs &a) {
  const int lane = int(threadIdx.x) & 31;
  const int r = int(blockIdx.x) * kAttnGradWarps + int(threadIdx.x >> 5);
  if (r >= a.rows)
    return; // the whole warp: no shuffle is left half-reached
  const int i = r % a.sq, bh = r / a.sq, h = bh % a.qHeads, b = bh / a.qHeads;
  const int kvh = h / a.group;
  const T *Q = static_cast<const T *>(a.q) + b * a.qStride[0] + h * a.qStride[1] +
               int64_t(i) * a.qStride[2];
  const T *dY = static_cast<const T *>(a.dy) + b * a.dyStride[0] + h * a.dyStride[1] +
                int64_t(i) * a.dyStride[2];
  const T *K = static_cast<const T *>(a.k) + b * a.kStride[0] + kvh * a.kStride[1];
  const T *V = static_cast<const T *>(a.v) + b * a.vStride[0] + kvh * a.vStride[1];
  const uint8_t *maskB;
  const T *maskF;
  maskRow(a, b, h, i, maskB, maskF);
  float q[kLanes], dy[kLanes], dq[kLanes];
  loadRow(q, Q, a.d, lane);
  loadRow(dy, dY, a.dv, lane);
  const int keyEnd = a.causal ? min(a.skv, i + 1) : a.skv;
  // Key j's row, its score (-inf: not visible) and the softcap's slope.
  auto score = [&](int j, const T *&Kj, float &slope) {
    Kj = K + int64_t(j) * a.kStride[2];
    return scoreAndSlope<T>(a, maskB, maskF, i, j, a.scale * dotRow(q, Kj, a.d, lane), slope);
  };

  // P = exp(S - lse) with the forward's saved log-sum-exp: D = rowsum(P *
  // dP), then dQ.
  const float lse = a.lse[r];
  float dsum = 0.f;
  if (lse != kNegInf)
    for (int j = 0; j < keyEnd; ++j) {
      const T *Kj;
      float slope, s = score(j, Kj, slope);
      if (s != kNegInf)
        dsum += expf(s - lse) * dotRow(dy, V + int64_t(j) * a.vStride[2], a.dv, lane);
    }
#pragma unroll
  for (int t = 0; t < kLanes; ++t)
    dq[t] = 0.f;
  if (lse != kNegInf)
    for (int j = 0; j < keyEnd; ++j) {
      const T *Kj;
      float slope, s = score(j, Kj, slope);
      if (s == kNegInf)
        continue;
      float dp = dotRow(dy, V + int64_t(j) * a.vStride[2], a.dv, lane);
      float ds = expf(s - lse) * (dp - dsum) * slope * a.scale;
#pragma unroll
      for (int t = 0; t < kLanes; ++t) {
        int d = lane + 32 * t;
        if (d < a.d)
          dq[t] = fmaf(ds, toFloat(Kj[d]), dq[t]);
      }
    }
  T *dQ = static_cast<T *>(a.gradQ) + b * a.qStride[0] + h * a.qStride[1] + int64_t(i) * a.qStride[2];
  storeRow(dQ, dq, a.d, lane);
  if (lane == 0)
    a.dsum[r] = dsum;
}

template <typename T> __device__ __forceinline__ void attentionGradDkv(const AttentionGradArgs &a) {
  const int lane = int(threadIdx.x) & 31;
  const int r = int(blockIdx.x) * kAttnGradWarps + int(threadIdx.x >> 5);
  if (r >= a.rows)
    return;
  const int kvHeads = a.qHeads / a.group;
  const int j = r % a.skv, bh = r / a.skv, kvh = bh % kvHeads, b = bh / kvHeads;
  const T *Kj = static_cast<const T *>(a.k) + b * a.kStride[0] + kvh * a.kStride[1] +
                int64_t(j) * a.kStride[2];
  const T *Vj = static_cast<const T *>(a.v) + b * a.vStride[0] + kvh * a.vStride[1] +
                int64_t(j) * a.vStride[2];
  float k[kLanes], v[kLanes], dk[kLanes], dv[kLanes];
  loadRow(k, Kj, a.d, lane);
  loadRow(v, Vj, a.dv, lane);
#pragma unroll
  for (int t = 0; t < kLanes; ++t)
    dk[t] = dv[t] = 0.f;
  for (int g = 0; g < a.group; ++g) {
    const int h = kvh * a.group + g;
    const T *Q = static_cast<const T *>(a.q) + b * a.qStride[0] + h * a.qStride[1];
    const T *dY = static_cast<const T *>(a.dy) + b * a.dyStride[0] + h * a.dyStride[1];
    const int64_t stats = (int64_t(b) * a.qHeads + h) * a.sq;
    // Under the causal mask only rows i >= j see key j.
    for (int i = a.causal ? j : 0; i < a.sq; ++i) {
      const float lse = a.lse[stats + i];
      if (lse == kNegInf)
        continue;
      const uint8_t *maskB;
      const T *maskF;
      maskRow(a, b, h, i, maskB, maskF);
      const T *Qi = Q + int64_t(i) * a.qStride[2], *dYi = dY + int64_t(i) * a.dyStride[2];
      float slope;
      float s = scoreAndSlope<T>(a, maskB, maskF, i, j, a.scale * dotRow(k, Qi, a.d, lane), slope);
      if (s == kNegInf)
        continue;
      float p = expf(s - lse);
      float dp = dotRow(v, dYi, a.dv, lane);
      float ds = p * (dp - a.dsum[stats + i]) * slope * a.scale;
#pragma unroll
      for (int t = 0; t < kLanes; ++t) {
        int d = lane + 32 * t;
        if (d < a.dv)
          dv[t] = fmaf(p, toFloat(dYi[d]), dv[t]);
        if (d < a.d)
          dk[t] = fmaf(ds, toFloat(Qi[d]), dk[t]);
      }
    }
  }
  T *dK = static_cast<T *>(a.gradK) + b * a.kStride[0] + kvh * a.kStride[1] + int64_t(j) * a.kStride[2];
  T *dV = static_cast<T *>(a.gradV) + b * a.vStride[0] + kvh * a.vStride[1] + int64_t(j) * a.vStride[2];
  storeRow(dK, dk, a.d, lane);
  storeRow(dV, dv, a.dv, lane);
}

} // namespace

#define SF_ATTENTION_GRAD(NAME, T)                                             \
  extern "C" __global__ void __launch_bounds__(32 * kAttnGradWarps)            \
      sf_attention_grad_dq_##NAME(const AttentionGradArgs a) {                 \
    attentionGradDq<T>(a);                                                     \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(32 * kAttnGradWarps)            \
      sf_attention_grad_dkv_##NAME(const AttentionGradArgs a) {                \
    attentionGradDkv<T>(a);                                                    \
  }

SF_ATTENTION_GRAD(f32, float)
SF_ATTENTION_GRAD(f16, __half)
SF_ATTENTION_GRAD(bf16, __nv_bfloat16)
