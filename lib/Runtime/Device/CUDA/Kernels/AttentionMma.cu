//===- AttentionMma.cu - CUDA attention on tensor cores (f16/bf16) ---------===//
//
// The fast path of nn.attention for f16 and bf16 with D = Dv in {64, 128}
// (sm_80+: mma.sync m16n8k16, ldmatrix, cp.async). Same semantics and the
// same score rule as the SIMT kernel (AttentionCommon.cuh); the score
// matrix never leaves registers.
//
// One block of four warps takes 64 query rows of one (batch, query head);
// warp w owns rows 16w..16w+15. Q stays in shared memory, each k-step of
// Q K^T reading its A fragment with ldmatrix (as FlashAttention-2 does by
// default): 4 blocks fit an SM at head size 64 (at most 128 registers,
// 46 KB of shared memory; 3 on an A100 by shared memory). Keys go
// by tiles of 64: K and V tiles are double-buffered in shared memory with
// cp.async, so the next tile loads while this one computes. Per tile a warp
// computes S = Q K^T (16 x 64, f32 accumulators), applies scale, softcap,
// causal bound and mask, updates its rows' running max and sum, turns S
// into P in registers (the accumulator layout of S is the A-fragment
// layout of P, so no shared-memory round trip) and accumulates O += P V.
// Scores, row maxima and exponents are in log2 units: p = 2^(y - max) with
// y = score x log2(e), one fma and one ex2 per score in interior tiles.
// A warp whose rows all lie above a causal tile skips its math.
//
// Each kernel comes twice: with the general score rule (a mask, a softcap,
// a scale that is not positive: the rule of AttentionCommon.cuh's scoreOf,
// a step at a time over the tile), and `_plain`,
// for attention with none of them, which only sets keys past the causal
// bound or the sequence's end to -inf and has none of the general rule's
// code or registers (sm_90, D = 64: 123 registers against 143).
//
// The `mma2` variant (D = 64) gives each warp two 16-row tiles (128 rows
// per block): every K and V fragment loaded from shared memory feeds two
// mma. It is planned only when asked for (AttentionPath::Mma2): on an H100
// it ran 7% faster than the one-tile kernel without causality and 2.5%
// slower with it (docs/benchmarks.md).
//
// Shared rows are padded by 16 bytes so that ldmatrix's eight row
// addresses fall in distinct bank groups.
//
//===----------------------------------------------------------------------===//

#include "AttentionCommon.cuh"

#include <type_traits>

using namespace shardflow::runtime::cuda;
using namespace shardflow::runtime::cuda::device;

namespace {

#ifdef SHARDFLOW_CUDA_HOST_EMULATION
// The host emulation's versions (HostEmulation.h), same contracts.
__device__ __forceinline__ void cpAsync16(void *dst, const void *src, bool valid) {
  shardflow::emulation::cpAsync16(dst, src, valid);
}
__device__ __forceinline__ void cpAsyncCommit() { shardflow::emulation::cpAsyncCommit(); }
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  shardflow::emulation::cpAsyncWait(N);
}
__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], const void *p) {
  shardflow::emulation::ldmatrixX4(r, p, false);
}
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], const void *p) {
  shardflow::emulation::ldmatrixX4(r, p, true);
}
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  shardflow::emulation::mmaM16N8K16(c, a, b0, b1, std::is_same_v<T, __nv_bfloat16>);
}
__device__ __forceinline__ float exp2Approx(float x) { return std::exp2(x); }
#else
__device__ __forceinline__ unsigned smemAddr(const void *p) {
  return unsigned(__cvta_generic_to_shared(p));
}

/// 16 bytes global -> shared without a register round trip; `valid`
/// false writes zeros (rows past the end of the sequence).
__device__ __forceinline__ void cpAsync16(void *dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemAddr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}

/// 2^x, one MUFU.EX2 (results below 2^-126 flush to zero; 2^-inf is 0).
/// __expf(x) is a multiply by log2(e) and the non-flushing ex2, which
/// needs a fix-up around it.
__device__ __forceinline__ float exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// c += a * b for one m16n8k16 tile with f32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

/// Two floats as one register of two 16-bit elements, the first in the
/// low half (the lower column of a fragment).
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/// Two consecutive mask elements, read as one.
template <typename E> struct alignas(2 * sizeof(E)) Two {
  E x, y;
};

/// R: 16-row query tiles per warp (64 R query rows per block). With R = 2
/// each K and V fragment a warp loads from shared memory feeds two mma
/// instead of one, halving shared-memory reads per FLOP, at the cost of
/// twice the accumulator registers (so only for D = 64).
/// General: the kernel for a mask, a softcap or a scale that is not
/// positive, the general rule applied to the whole tile; otherwise
/// (the `_plain` kernels) only the causal bound and the sequence's end,
/// and none of the general rule's code or registers.
template <typename T, int D, int R, bool General>
__device__ __forceinline__ void attentionMma(const AttentionArgs &a) {
  constexpr int kPitch = D + 8;               // elements per shared row
  constexpr int kTile = kMmaKeys * kPitch;    // elements of one K or V tile
  constexpr int kChunks = D / 8;              // 16-byte chunks per row
  constexpr int kKeyTiles = kMmaKeys / 8;     // n-tiles of S
  constexpr int kDimTiles = D / 8;            // n-tiles of O
  constexpr int kRows = kMmaRows * R;         // query rows per block
  static_assert(kMmaRows == 64 && kMmaKeys == 64 && kMmaThreads == 128, "tile shape");
  SF_DYNAMIC_SHARED(unsigned char, smemRaw);
  T *Qs = reinterpret_cast<T *>(smemRaw); // kRows x kPitch
  T *Ks = Qs + kRows * kPitch;            // two stages
  T *Vs = Ks + 2 * kTile;                 // two stages

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3; // fragment row group, thread in group
  const int qb = a.qBlocks - 1 - int(blockIdx.x % unsigned(a.qBlocks));
  const int bh = int(blockIdx.x / unsigned(a.qBlocks));
  const int h = bh % a.qHeads, b = bh / a.qHeads, kvh = h / a.group;
  const int q0 = qb * kRows;
  const int wRow0 = q0 + 16 * R * warp; // this warp's rows: wRow0 .. wRow0 + 16 R - 1

  const T *Q = static_cast<const T *>(a.q) + b * a.qStride[0] + h * a.qStride[1];
  const T *K = static_cast<const T *>(a.k) + b * a.kStride[0] + kvh * a.kStride[1];
  const T *V = static_cast<const T *>(a.v) + b * a.vStride[0] + kvh * a.vStride[1];

  // 64 rows from `first` of a [seq, D] operand (row stride `stride`) into
  // shared memory; rows at or past `limit` become zeros. Offsets within a
  // (batch, head) fit in 32 bits (the planner checks seq x stride), and
  // 32-bit ones keep the loop's addresses in half the registers.
  auto loadRows = [&](T *dst, const T *src, int64_t stride, int first, int limit) {
#pragma unroll
    for (int i = tid; i < 64 * kChunks; i += kMmaThreads) {
      const int r = i / kChunks, c = i % kChunks, s = first + r;
      const bool ok = s < limit;
      cpAsync16(dst + r * kPitch + c * 8, src + ((ok ? s : 0) * int(stride) + c * 8), ok);
    }
  };

  const int keyEnd = a.causal ? min(a.skv, q0 + kRows) : a.skv;
  const int nTiles = (keyEnd + kMmaKeys - 1) / kMmaKeys;
#pragma unroll
  for (int part = 0; part < R; ++part)
    loadRows(Qs + part * 64 * kPitch, Q, a.qStride[2], q0 + part * 64, a.sq);
  if (nTiles > 0) {
    loadRows(Ks, K, a.kStride[2], 0, a.skv);
    loadRows(Vs, V, a.vStride[2], 0, a.skv);
  }
  cpAsyncCommit();

  // The mask of this (batch, head); a row's is found where it is needed
  // (pointers held per row would cost registers the two-tile kernel lacks).
  const int64_t maskBase =
      General && a.maskKind != kMaskNone ? b * a.maskStride[0] + h * a.maskStride[1] : 0;
  // Pairs of keys are read together from a key-contiguous mask whose rows
  // start at even elements, over an even number of keys (a pair's first
  // key is even, so both keys of a pair are in the sequence or neither).
  const bool pairsAligned =
      General && a.maskKind != kMaskNone && a.maskStride[3] == 1 && a.skv % 2 == 0 &&
      a.maskStride[2] % 2 == 0 && maskBase % 2 == 0 &&
      reinterpret_cast<uintptr_t>(a.mask) % (a.maskKind == kMaskBool ? 2 : 2 * sizeof(T)) == 0;

  float o[R][kDimTiles][4];
  // rowMax in log2 units (scaled score x log2(e)); rowSum: this thread's
  // share, the quad adds them at the end.
  float rowMax[R][2], rowSum[R][2];
  constexpr float kLog2e = 1.4426950408889634f;
  const float scaleLog2 = a.scale * kLog2e;
#pragma unroll
  for (int rt = 0; rt < R; ++rt) {
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[rt][j][e] = 0.f;
    rowMax[rt][0] = rowMax[rt][1] = kNegInf;
    rowSum[rt][0] = rowSum[rt][1] = 0.f;
  }

  for (int t = 0; t < nTiles; ++t) {
    const int stage = t & 1;
    if (t + 1 < nTiles) {
      loadRows(Ks + (stage ^ 1) * kTile, K, a.kStride[2], (t + 1) * kMmaKeys, a.skv);
      loadRows(Vs + (stage ^ 1) * kTile, V, a.vStride[2], (t + 1) * kMmaKeys, a.skv);
    }
    // Always commit (maybe an empty group) so that "all but the newest
    // group" is this tile's data on every iteration.
    cpAsyncCommit();
    cpAsyncWait<1>();
    __syncthreads();
    const int k0 = t * kMmaKeys;
    // Warp-uniform: some row of this warp exists and sees a key of the tile.
    const bool active = wRow0 < a.sq && (!a.causal || k0 <= wRow0 + 16 * R - 1);
    if (active) {
      const T *Kt = Ks + stage * kTile, *Vt = Vs + stage * kTile;
      float s[R][kKeyTiles][4];
#pragma unroll
      for (int rt = 0; rt < R; ++rt)
#pragma unroll
        for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[rt][j][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        // Q's A fragment of this k-step, from shared memory: held for the
        // whole loop it cost 16 registers per row tile (4 blocks per SM
        // at head size 64 need at most 128).
        uint32_t qf[R][4];
#pragma unroll
        for (int rt = 0; rt < R; ++rt)
          ldmatrixX4(qf[rt], Qs + (16 * (R * warp + rt) + (lane & 7) +
                                   ((lane >> 3) & 1) * 8) * kPitch +
                                 kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int jp = 0; jp < kKeyTiles / 2; ++jp) {
          uint32_t kf[4];
          ldmatrixX4(kf, Kt + (jp * 16 + (lane & 7) + (lane >> 4) * 8) * kPitch + kk * 16 +
                             ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int rt = 0; rt < R; ++rt) {
            mma<T>(s[rt][2 * jp], qf[rt], kf[0], kf[1]);
            mma<T>(s[rt][2 * jp + 1], qf[rt], kf[2], kf[3]);
          }
        }
      }

      // P as A fragments (S's n-tiles 2kk and 2kk+1 are the fragment of
      // keys 16kk..16kk+15), packed as soon as a row tile's softmax is done:
      // half the registers of S.
      uint32_t pf[R][kMmaKeys / 16][4];
#pragma unroll
      for (int rt = 0; rt < R; ++rt) {
        const int tRow0 = wRow0 + 16 * rt;
        // The plain kernel keeps the raw products: their maximum is that of
        // the scaled scores (the scale is positive), and a score's
        // exponent is one fma with the scale in log2 units. The general
        // kernel turns them into the final scores first: scale and
        // softcap, then the mask, each a loop over the tile's scores under
        // a branch the whole block takes the same way (scoreOf for each
        // score, its branches on softcap and the mask taken per score, ran
        // at a third of the plain kernel's rate on an H100, docs/cuda.md;
        // before that, a branch per score around it had spread the loop
        // over 57 KB of instructions). Then,
        // in both, the causal diagonal and the sequence's last tile set
        // the keys a row cannot see to -inf (one compare per score);
        // interior tiles need nothing more. Rows at or past sq keep what
        // they have: they are never stored, and each row's softmax is its
        // own (the mask is read at the last row and key for them).
        if constexpr (General) {
          if (a.softcap > 0.f) {
            const float cap = a.softcap, toCap = a.scale / a.softcap;
#pragma unroll
            for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                s[rt][j][e] = cap * tanhf(s[rt][j][e] * toCap);
          } else {
#pragma unroll
            for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                s[rt][j][e] *= a.scale;
          }
          if (a.maskKind != kMaskNone) {
            // Offsets within this (batch, head)'s mask fit in 32 bits (the
            // planner checks). A key-contiguous mask whose rows start at
            // even elements is read a pair of keys at a time (a thread's two
            // scores of an n-tile row: half the loads, and half the
            // registers for loads in flight); else each score's key times
            // its stride. Either way keys are clamped to the sequence: the
            // tail tile's columns past it become -inf below.
            int rowOff[2];
#pragma unroll
            for (int r = 0; r < 2; ++r)
              rowOff[r] = min(tRow0 + g + 8 * r, a.sq - 1) * int(a.maskStride[2]);
            // A pair's first key, even, clamped to the sequence's last pair
            // (the sequence's length is even when pairs are read).
            auto pairAt = [&](int j) { return min(k0 + j * 8 + tig * 2, a.skv - 2); };
            // Each score through apply(score, its mask element).
            auto overMask = [&](const auto *m, auto apply) {
              using E = std::remove_cv_t<std::remove_pointer_t<decltype(m)>>;
              if (pairsAligned) {
#pragma unroll
                for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
                  for (int r = 0; r < 2; ++r) {
                    const Two<E> two = *reinterpret_cast<const Two<E> *>(m + rowOff[r] + pairAt(j));
                    s[rt][j][2 * r] = apply(s[rt][j][2 * r], two.x);
                    s[rt][j][2 * r + 1] = apply(s[rt][j][2 * r + 1], two.y);
                  }
              } else {
                const int colStride = int(a.maskStride[3]);
#pragma unroll
                for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
                  for (int e = 0; e < 4; ++e) {
                    const int col = min(k0 + j * 8 + tig * 2 + (e & 1), a.skv - 1);
                    s[rt][j][e] = apply(s[rt][j][e], m[rowOff[e >> 1] + col * colStride]);
                  }
              }
            };
            if (a.maskKind == kMaskBool)
              overMask(static_cast<const uint8_t *>(a.mask) + maskBase,
                       [](float x, uint8_t keep) { return keep ? x : kNegInf; });
            else // additive; -inf masks the key even where the score is +inf
                 // (the CPU kernel's rule)
              overMask(static_cast<const T *>(a.mask) + maskBase, [](float x, T bias) {
                const float add = toFloat(bias);
                return add == kNegInf ? kNegInf : x + add;
              });
          }
        }
        if (k0 + kMmaKeys > a.skv || (a.causal && k0 + kMmaKeys - 1 > tRow0)) {
#pragma unroll
          for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = tRow0 + g + 8 * (e >> 1), col = k0 + j * 8 + tig * 2 + (e & 1);
              if (col >= a.skv || (a.causal && col > row))
                s[rt][j][e] = kNegInf;
            }
        }
        float mx[2] = {kNegInf, kNegInf};
#pragma unroll
        for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            mx[e >> 1] = fmaxf(mx[e >> 1], s[rt][j][e]);
        const float toLog2 = General ? kLog2e : scaleLog2; // of what s holds
        float base[2], alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
          const float newMax = fmaxf(rowMax[rt][r], mx[r] * toLog2);
          // Nothing visible yet: stay at zero (2^(-inf - -inf) is NaN).
          base[r] = newMax == kNegInf ? 0.f : newMax;
          alpha[r] = exp2Approx(rowMax[rt][r] - base[r]);
          rowMax[rt][r] = newMax;
          rowSum[rt][r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float p = exp2Approx(fmaf(s[rt][j][e], toLog2, -base[e >> 1]));
            s[rt][j][e] = p;
            rowSum[rt][e >> 1] += p;
          }
#pragma unroll
        for (int j = 0; j < kDimTiles; ++j) {
          o[rt][j][0] *= alpha[0];
          o[rt][j][1] *= alpha[0];
          o[rt][j][2] *= alpha[1];
          o[rt][j][3] *= alpha[1];
        }
#pragma unroll
        for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
          pf[rt][kk][0] = pack2<T>(s[rt][2 * kk][0], s[rt][2 * kk][1]);
          pf[rt][kk][1] = pack2<T>(s[rt][2 * kk][2], s[rt][2 * kk][3]);
          pf[rt][kk][2] = pack2<T>(s[rt][2 * kk + 1][0], s[rt][2 * kk + 1][1]);
          pf[rt][kk][3] = pack2<T>(s[rt][2 * kk + 1][2], s[rt][2 * kk + 1][3]);
        }
      }
      // O += P V.
#pragma unroll
      for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
#pragma unroll
        for (int jp = 0; jp < kDimTiles / 2; ++jp) {
          uint32_t vf[4];
          ldmatrixX4Trans(vf, Vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kPitch +
                                  jp * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int rt = 0; rt < R; ++rt) {
            mma<T>(o[rt][2 * jp], pf[rt][kk], vf[0], vf[1]);
            mma<T>(o[rt][2 * jp + 1], pf[rt][kk], vf[2], vf[3]);
          }
        }
      }
    }
    __syncthreads(); // the next iteration refills this stage
  }
  cpAsyncWait<0>();

  T *Y = static_cast<T *>(a.y) + b * a.yStride[0] + h * a.yStride[1];
#pragma unroll
  for (int rt = 0; rt < R; ++rt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = rowSum[rt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = wRow0 + 16 * rt + g + 8 * r;
      if (row >= a.sq)
        continue;
      // A fully masked row has sum 0 and output 0 (every p was 0).
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      // The log-sum-exp, from log2 units back to natural ones.
      if (a.lse && tig == 0)
        a.lse[(int64_t(b) * a.qHeads + h) * a.sq + row] =
            sum > 0.f ? (rowMax[rt][r] + log2f(sum)) * 0.6931471805599453f : kNegInf;
      T *out = Y + row * a.yStride[2] + tig * 2;
#pragma unroll
      for (int j = 0; j < kDimTiles; ++j)
        *reinterpret_cast<uint32_t *>(out + j * 8) =
            pack2<T>(o[rt][j][2 * r] * inv, o[rt][j][2 * r + 1] * inv);
    }
}

} // namespace

// Each in two kernels: the general one, and `_plain` for no mask, no
// softcap and a positive scale (the planner picks).
#define SF_ATTENTION_MMA(NAME, T, D)                                           \
  extern "C" __global__ void __launch_bounds__(kMmaThreads)                    \
      sf_attention_mma_##NAME##_d##D(const AttentionArgs a) {                  \
    attentionMma<T, D, 1, true>(a);                                            \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(kMmaThreads)                    \
      sf_attention_mma_##NAME##_d##D##_plain(const AttentionArgs a) {          \
    attentionMma<T, D, 1, false>(a);                                           \
  }
// Two query tiles per warp (128 rows per block), D = 64 only.
#define SF_ATTENTION_MMA2(NAME, T)                                             \
  extern "C" __global__ void __launch_bounds__(kMmaThreads)                    \
      sf_attention_mma2_##NAME##_d64(const AttentionArgs a) {                  \
    attentionMma<T, 64, 2, true>(a);                                           \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(kMmaThreads)                    \
      sf_attention_mma2_##NAME##_d64_plain(const AttentionArgs a) {            \
    attentionMma<T, 64, 2, false>(a);                                          \
  }

SF_ATTENTION_MMA(f16, __half, 64)
SF_ATTENTION_MMA(f16, __half, 128)
SF_ATTENTION_MMA(bf16, __nv_bfloat16, 64)
SF_ATTENTION_MMA(bf16, __nv_bfloat16, 128)
SF_ATTENTION_MMA2(f16, __half)
SF_ATTENTION_MMA2(bf16, __nv_bfloat16)
