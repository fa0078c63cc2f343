//===- Attention.cu - CUDA attention, SIMT (every type and head size) ------===//
//
// Memory-efficient attention for f32, f16 and bf16 with head sizes up to
// 256: the Sq x Skv score matrix never reaches global memory. One thread
// block takes 64 query rows of one (batch, query head); it walks the keys in
// tiles of 64 held in shared memory, keeping for each row the running
// maximum, the running sum of exponentials and the unnormalized output in
// f32 registers (online softmax), and normalizes once at the end.
//
// 256 threads as a 16 x 16 grid: thread (rg, cg) owns query rows 4rg..4rg+3
// and, of each key tile, keys cg + 16j (j < 4), so a row's 16 owners are one
// half-warp and its max and sum reduce with shuffles; of the output it owns
// columns cg + 16j (j < DV / 16). Shared tiles are f32 with padded rows so
// that the column-strided reads hit distinct banks.
//
// The tensor-core kernel (AttentionMma.cu) is the fast path for f16/bf16
// with D = Dv in {64, 128}; this one is the general path and the reference
// the GPU check compares both against the CPU kernel with.
//
//===----------------------------------------------------------------------===//

#include "AttentionCommon.cuh"

using namespace shardflow::runtime::cuda;
using namespace shardflow::runtime::cuda::device;

namespace {

constexpr int kPPitch = kAttnKeys + 4; // rows 4 apart start 16 banks apart

template <typename T, int DV> __device__ __forceinline__ void attentionSimt(const AttentionArgs &a) {
  SF_DYNAMIC_SHARED(float, smem);
  const int D = a.d, Dv = a.dv;
  const int qPitch = D + 1; // odd: column reads of K rows are conflict-free
  float *Qs = smem;                           // kAttnRows x qPitch
  float *KVs = Qs + kAttnRows * qPitch;       // K: kAttnKeys x qPitch, then V: kAttnKeys x Dv
  float *Ps = KVs + kAttnKeys * max(qPitch, Dv); // kAttnRows x kPPitch

  const int tid = threadIdx.x, rg = tid >> 4, cg = tid & 15;
  // Heaviest (last, under the causal mask) query blocks first: they start
  // before the light ones fill the tail of the grid.
  const int qb = a.qBlocks - 1 - int(blockIdx.x % unsigned(a.qBlocks));
  const int bh = int(blockIdx.x / unsigned(a.qBlocks));
  const int h = bh % a.qHeads, b = bh / a.qHeads, kvh = h / a.group;
  const int q0 = qb * kAttnRows;

  const T *Q = static_cast<const T *>(a.q) + b * a.qStride[0] + h * a.qStride[1];
  const T *K = static_cast<const T *>(a.k) + b * a.kStride[0] + kvh * a.kStride[1];
  const T *V = static_cast<const T *>(a.v) + b * a.vStride[0] + kvh * a.vStride[1];

  // Q, pre-multiplied by the scale; rows past the end are zeros.
  for (int i = tid; i < kAttnRows * D; i += kAttnThreads) {
    int r = i / D, d = i - r * D, s = q0 + r;
    Qs[r * qPitch + d] = s < a.sq ? toFloat(Q[s * a.qStride[2] + d]) * a.scale : 0.f;
  }

  // The mask rows of this thread's query rows (null past sq or without a
  // mask: those rows' scores are never read from it).
  const uint8_t *maskB[4] = {};
  const T *maskF[4] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int row = q0 + 4 * rg + i;
    if (a.maskKind != kMaskNone && row < a.sq) {
      int64_t off = b * a.maskStride[0] + h * a.maskStride[1] + row * a.maskStride[2];
      maskB[i] = static_cast<const uint8_t *>(a.mask) + off;
      maskF[i] = static_cast<const T *>(a.mask) + off;
    }
  }

  constexpr int kCols = DV / 16;
  float acc[4][kCols];
  float rowMax[4], rowSum[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    rowMax[i] = kNegInf;
    rowSum[i] = 0.f;
#pragma unroll
    for (int j = 0; j < kCols; ++j)
      acc[i][j] = 0.f;
  }

  // Under the causal mask the block's last row bounds the visible keys.
  int keyEnd = a.skv;
  if (a.causal)
    keyEnd = min(keyEnd, q0 + kAttnRows);

  for (int k0 = 0; k0 < keyEnd; k0 += kAttnKeys) {
    __syncthreads(); // the previous tile's P V is done with KVs and Ps
    for (int i = tid; i < kAttnKeys * D; i += kAttnThreads) {
      int r = i / D, d = i - r * D, s = k0 + r;
      KVs[r * qPitch + d] = s < a.skv ? toFloat(K[s * a.kStride[2] + d]) : 0.f;
    }
    __syncthreads();

    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        s[i][j] = 0.f;
#pragma unroll 4
    for (int d = 0; d < D; ++d) {
      float qa[4], kb[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        qa[i] = Qs[(4 * rg + i) * qPitch + d];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        kb[j] = KVs[(cg + 16 * j) * qPitch + d];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          s[i][j] = fmaf(qa[i], kb[j], s[i][j]);
    }

    // Scores, the tile's row maxima and the online-softmax update.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = q0 + 4 * rg + i;
      float mx = kNegInf;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = k0 + cg + 16 * j;
        float x = row < a.sq && col < a.skv ? scoreOf<T>(a, maskB[i], maskF[i], row, col, s[i][j])
                                            : kNegInf;
        s[i][j] = x;
        mx = fmaxf(mx, x);
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float newMax = fmaxf(rowMax[i], mx);
      // Nothing visible yet: keep everything at zero (exp(-inf - -inf) is NaN).
      const float base = newMax == kNegInf ? 0.f : newMax;
      const float alpha = __expf(rowMax[i] - base);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float p = __expf(s[i][j] - base);
        s[i][j] = p;
        sum += p;
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
      rowSum[i] = rowSum[i] * alpha + sum;
      rowMax[i] = newMax;
#pragma unroll
      for (int j = 0; j < kCols; ++j)
        acc[i][j] *= alpha;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        Ps[(4 * rg + i) * kPPitch + cg + 16 * j] = s[i][j];
    }
    __syncthreads(); // K no longer needed, P complete

    // V rows past the end must be zeros, not garbage: 0 * NaN is NaN.
    for (int i = tid; i < kAttnKeys * Dv; i += kAttnThreads) {
      int r = i / Dv, d = i - r * Dv, sIdx = k0 + r;
      KVs[i] = sIdx < a.skv ? toFloat(V[sIdx * a.vStride[2] + d]) : 0.f;
    }
    __syncthreads();

    const int keys = min(kAttnKeys, keyEnd - k0);
#pragma unroll 2
    for (int c = 0; c < keys; ++c) {
      float p[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        p[i] = Ps[(4 * rg + i) * kPPitch + c];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int col = cg + 16 * j;
        float v = col < Dv ? KVs[c * Dv + col] : 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          acc[i][j] = fmaf(p[i], v, acc[i][j]);
      }
    }
  }

  T *Y = static_cast<T *>(a.y) + b * a.yStride[0] + h * a.yStride[1];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = q0 + 4 * rg + i;
    if (row >= a.sq)
      continue;
    // A fully masked row has sum 0 and output 0 (every p was 0).
    const float inv = rowSum[i] > 0.f ? 1.f / rowSum[i] : 0.f;
    if (a.lse && cg == 0)
      a.lse[(int64_t(b) * a.qHeads + h) * a.sq + row] =
          rowSum[i] > 0.f ? rowMax[i] + logf(rowSum[i]) : kNegInf;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int col = cg + 16 * j;
      if (col < Dv)
        Y[row * a.yStride[2] + col] = fromFloat<T>(acc[i][j] * inv);
    }
  }
}

} // namespace

#define SF_ATTENTION_SIMT(NAME, T, DV)                                         \
  extern "C" __global__ void __launch_bounds__(kAttnThreads)                   \
      sf_attention_simt_##NAME##_dv##DV(const AttentionArgs a) {               \
    attentionSimt<T, DV>(a);                                                   \
  }

SF_ATTENTION_SIMT(f32, float, 64)
SF_ATTENTION_SIMT(f32, float, 128)
SF_ATTENTION_SIMT(f32, float, 256)
SF_ATTENTION_SIMT(f16, __half, 64)
SF_ATTENTION_SIMT(f16, __half, 128)
SF_ATTENTION_SIMT(f16, __half, 256)
SF_ATTENTION_SIMT(bf16, __nv_bfloat16, 64)
SF_ATTENTION_SIMT(bf16, __nv_bfloat16, 128)
SF_ATTENTION_SIMT(bf16, __nv_bfloat16, 256)
