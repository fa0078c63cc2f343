//===- Gemm.cpp - the CPU kernels' blocked GEMM ----------------------------===//

#include "Gemm.h"
#include "Parallel.h"

#ifdef SHARDFLOW_HAVE_CBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cstring>
#include <string>
#include <strings.h>
#include <memory>
#include <type_traits>

namespace shardflow::runtime::cpu {
namespace {

//===----------------------------------------------------------------------===//
// Blocked GEMM: C[M,N] += A[M,K] * B[K,N] with arbitrary strides for A, B.
//===----------------------------------------------------------------------===//

#if defined(__GNUC__) || defined(__clang__)
#define SHARDFLOW_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define SHARDFLOW_ALWAYS_INLINE inline
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define SHARDFLOW_GEMM_AVX2 1
#endif

/// MR x NR accumulators of the micro-kernel, and the cache blocks: KC x NR
/// panels of B and MR x KC panels of A stay in L1, an MC x KC block of A in
/// L2.
constexpr int64_t kKC = 256, kMC = 96, kNC = 2048;

/// One MR x NR tile of C += (packed A panel) * (packed B panel). Float
/// types use vectors of VB bytes (GCC/Clang vector extensions) so that the
/// accumulators live in registers; other types use plain loops.
template <typename T, int MR, int NR, int VB>
SHARDFLOW_ALWAYS_INLINE void microKernel(int64_t kc, const T *__restrict a,
                                         const T *__restrict b, T *__restrict c, int64_t ldc,
                                         int mr, int nr) {
  T tile[MR][NR];
#if defined(__GNUC__) || defined(__clang__)
  if constexpr (std::is_floating_point_v<T> && NR * sizeof(T) % VB == 0) {
    typedef T V __attribute__((vector_size(VB)));
    constexpr int W = int(VB / sizeof(T)), NV = NR / W;
    V acc[MR][NV];
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v)
        acc[r][v] = V{};
    for (int64_t k = 0; k < kc; ++k) {
      V bv[NV];
      for (int v = 0; v < NV; ++v)
        std::memcpy(&bv[v], b + k * NR + v * W, sizeof(V));
      for (int r = 0; r < MR; ++r) {
        V av = V{} + a[k * MR + r];
        for (int v = 0; v < NV; ++v)
          acc[r][v] += av * bv[v];
      }
    }
    if (mr == MR && nr == NR) {
      for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) {
          V cv;
          std::memcpy(&cv, c + r * ldc + v * W, sizeof(V));
          cv += acc[r][v];
          std::memcpy(c + r * ldc + v * W, &cv, sizeof(V));
        }
      return;
    }
    std::memcpy(tile, acc, sizeof(tile));
  } else
#endif
  {
    T acc[MR][NR] = {};
    for (int64_t k = 0; k < kc; ++k)
      for (int r = 0; r < MR; ++r)
        for (int j = 0; j < NR; ++j)
          acc[r][j] += a[k * MR + r] * b[k * NR + j];
    std::memcpy(tile, acc, sizeof(tile));
  }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j)
      c[r * ldc + j] += tile[r][j];
}

/// C (row-major, leading dimension ldc) += A * B, where A(m, k) is
/// a[m * rsA + k * csA] and B(k, n) is b[k * rsB + n * csB].
template <typename T, int MR, int NR, int VB>
SHARDFLOW_ALWAYS_INLINE void gemmBlocked(int64_t M, int64_t N, int64_t K, const T *a,
                                         int64_t rsA, int64_t csA, const T *b, int64_t rsB,
                                         int64_t csB, T *c, int64_t ldc) {
  if (M <= 0 || N <= 0 || K <= 0)
    return;
  int64_t ncMax = std::min<int64_t>(kNC, (N + NR - 1) / NR * NR);
  int64_t mcMax = std::min<int64_t>(kMC, (M + MR - 1) / MR * MR);
  int64_t kcMax = std::min<int64_t>(kKC, K);
  std::unique_ptr<T[]> packB(new T[size_t(ncMax * kcMax)]);
  std::unique_ptr<T[]> packA(new T[size_t(mcMax * kcMax)]);
  for (int64_t jc = 0; jc < N; jc += kNC) {
    int64_t nc = std::min<int64_t>(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      int64_t kc = std::min<int64_t>(kKC, K - pc);
      // B panels: [panel][k][NR], zero-padded past N.
      for (int64_t jr = 0; jr < nc; jr += NR) {
        T *dst = packB.get() + jr * kc;
        int nr = int(std::min<int64_t>(NR, nc - jr));
        for (int64_t k = 0; k < kc; ++k) {
          const T *src = b + (pc + k) * rsB + (jc + jr) * csB;
          if (csB == 1 && nr == NR) {
            for (int j = 0; j < NR; ++j)
              dst[k * NR + j] = src[j];
          } else {
            for (int j = 0; j < NR; ++j)
              dst[k * NR + j] = j < nr ? src[j * csB] : T(0);
          }
        }
      }
      for (int64_t ic = 0; ic < M; ic += kMC) {
        int64_t mc = std::min<int64_t>(kMC, M - ic);
        // A panels: [panel][k][MR], zero-padded past M.
        for (int64_t ir = 0; ir < mc; ir += MR) {
          T *dst = packA.get() + ir * kc;
          int mr = int(std::min<int64_t>(MR, mc - ir));
          for (int r = 0; r < MR; ++r) {
            const T *src = a + (ic + ir + r) * rsA + pc * csA;
            if (r < mr)
              for (int64_t k = 0; k < kc; ++k)
                dst[k * MR + r] = src[k * csA];
            else
              for (int64_t k = 0; k < kc; ++k)
                dst[k * MR + r] = T(0);
          }
        }
        for (int64_t jr = 0; jr < nc; jr += NR) {
          int nr = int(std::min<int64_t>(NR, nc - jr));
          for (int64_t ir = 0; ir < mc; ir += MR) {
            int mr = int(std::min<int64_t>(MR, mc - ir));
            microKernel<T, MR, NR, VB>(kc, packA.get() + ir * kc, packB.get() + jr * kc,
                                   c + (ic + ir) * ldc + jc + jr, ldc, mr, nr);
          }
        }
      }
    }
  }
}

// Baseline ISA: 4 x 8 floats or 4 x 4 doubles fill 8 SSE registers.
template <typename T>
void gemmBaseline(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA, int64_t csA,
                  const T *b, int64_t rsB, int64_t csB, T *c, int64_t ldc) {
  gemmBlocked<T, 4, sizeof(T) >= 8 ? 4 : 8, 16>(M, N, K, a, rsA, csA, b, rsB, csB, c, ldc);
}

#ifdef SHARDFLOW_GEMM_AVX2
// AVX2 + FMA, chosen at run time: 6 x 16 floats or 6 x 8 doubles fill 12
// of the 16 YMM registers.
__attribute__((target("avx2,fma"))) void gemmAvx2(int64_t M, int64_t N, int64_t K,
                                                  const float *a, int64_t rsA, int64_t csA,
                                                  const float *b, int64_t rsB, int64_t csB,
                                                  float *c, int64_t ldc) {
  gemmBlocked<float, 6, 16, 32>(M, N, K, a, rsA, csA, b, rsB, csB, c, ldc);
}
__attribute__((target("avx2,fma"))) void gemmAvx2(int64_t M, int64_t N, int64_t K,
                                                  const double *a, int64_t rsA, int64_t csA,
                                                  const double *b, int64_t rsB, int64_t csB,
                                                  double *c, int64_t ldc) {
  gemmBlocked<double, 6, 8, 32>(M, N, K, a, rsA, csA, b, rsB, csB, c, ldc);
}
bool hasAvx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

} // namespace

#ifdef SHARDFLOW_HAVE_CBLAS
/// OpenBLAS for float and double when each operand is row-major or its
/// transpose (every GEMM the kernels issue); false when it does not apply.
template <typename T>
static bool gemmBlas(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA, int64_t csA,
              const T *b, int64_t rsB, int64_t csB, T *c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (M == 0 || N == 0 || K == 0)
      return true;
    auto layout = [](int64_t rs, int64_t cs, int64_t rows, int64_t cols,
                     CBLAS_TRANSPOSE &t, blasint &ld) {
      if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) {
        t = CblasNoTrans;
        ld = blasint(rs);
        return true;
      }
      if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) {
        t = CblasTrans;
        ld = blasint(cs);
        return true;
      }
      return false;
    };
    CBLAS_TRANSPOSE ta, tb;
    blasint lda, ldb;
    if (!layout(rsA, csA, M, K, ta, lda) || !layout(rsB, csB, K, N, tb, ldb))
      return false;
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, ta, tb, blasint(M), blasint(N), blasint(K), 1.0f, a,
                  lda, b, ldb, 1.0f, c, blasint(ldc));
    else
      cblas_dgemm(CblasRowMajor, ta, tb, blasint(M), blasint(N), blasint(K), 1.0, a,
                  lda, b, ldb, 1.0, c, blasint(ldc));
    return true;
  }
  return false;
}
#endif

// Threads: C is cut into tiles of kTileM x kTileN whatever the thread
// count, each tile one single-threaded GEMM on one thread of the kernels'
// pool. A tile's problem (its shape, K, the addresses of its operands)
// depends only on its position, so every element of C is summed the same
// way for any --threads: OpenBLAS's own threading splits C by the thread
// count, and its kernels treat the edges of a split differently (measured:
// 1 against 3 threads differed in a few percent of the elements of
// 64x512x256 sgemms on OpenBLAS 0.3.21's Prescott and Haswell kernels).
std::string blasCoreUpgrade(std::string *picked) {
#if defined(SHARDFLOW_HAVE_CBLAS) && (defined(__x86_64__) || defined(__i386__)) &&          \
    (defined(__GNUC__) || defined(__clang__))
  // OpenBLAS picks its kernels when it loads, from the CPU's model number;
  // a model it does not know (a newer CPU, or one a hypervisor reports
  // under a generic name) gets its SSE3 "Prescott" kernels whatever the
  // CPU can do: 3x slower here (Sapphire Rapids) than its AVX-512 ones.
  // Only that fallback is overridden; a core OpenBLAS chose by name stays.
  std::string core = openblas_get_corename();
  if (picked)
    *picked = core;
  static const char *const sseCores[] = {"Prescott", "Core2", "Penryn", "Dunnington",
                                         "Nehalem", "Atom", "Katmai", "Coppermine",
                                         "Northwood", "Banias", "Unknown"};
  bool fallback = false;
  for (const char *c : sseCores)
    fallback |= strcasecmp(core.c_str(), c) == 0;
  if (!fallback)
    return "";
  // __builtin_cpu_supports also checks that the OS saves the registers.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
  return "";
#else
  if (picked)
    picked->clear();
  return "";
#endif
}

namespace {
/// Tiles of kTileM x kTileN, or of half that in both dims when C holds
/// fewer than kMinTiles of them (a few threads still share a small
/// product). The larger tile packs each operand panel half as often:
/// GPT-2-style training steps (C of 512 x 768..2048, K 256..1024) ran their
/// GEMMs 10% faster on one thread and 17% on two than with the smaller
/// one alone (AMD EPYC, OpenBLAS 0.3.21, 2026-11-28).
constexpr int64_t kTileM = 256, kTileN = 512, kMinTiles = 4;
/// A range of tiles holds at least this many multiply-adds: below it the
/// pool's hand-off costs more than the work.
constexpr int64_t kMinTileWork = int64_t(1) << 20;

int gemmThreads = 1;
} // namespace

void setGemmThreads(int threads) {
  gemmThreads = std::max(threads, 1);
#ifdef SHARDFLOW_HAVE_CBLAS
  openblas_set_num_threads(1);
#endif
}

/// One tile on the calling thread: OpenBLAS where it applies, else the
/// built-in kernel.
template <typename T>
static void gemmTile(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA, int64_t csA,
                     const T *b, int64_t rsB, int64_t csB, T *c, int64_t ldc) {
#ifdef SHARDFLOW_HAVE_CBLAS
  if (gemmBlas(M, N, K, a, rsA, csA, b, rsB, csB, c, ldc))
    return;
#endif
  gemmAccumulateSerial<T>(M, N, K, a, rsA, csA, b, rsB, csB, c, ldc);
}

template <typename T>
void gemmAccumulate(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA, int64_t csA,
                    const T *b, int64_t rsB, int64_t csB, T *c, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  // The tiles depend on the shape alone, never on the thread count.
  int64_t tileM = kTileM, tileN = kTileN;
  if (((M + tileM - 1) / tileM) * ((N + tileN - 1) / tileN) < kMinTiles) {
    tileM /= 2;
    tileN /= 2;
  }
  int64_t tilesM = (M + tileM - 1) / tileM, tilesN = (N + tileN - 1) / tileN;
  int64_t work = std::min(M, tileM) * std::min(N, tileN) * std::max<int64_t>(K, 1);
  int64_t grain = std::max<int64_t>(1, kMinTileWork / work);
  parallelFor(gemmThreads, tilesM * tilesN, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t m0 = t / tilesN * tileM, n0 = t % tilesN * tileN;
      gemmTile<T>(std::min(tileM, M - m0), std::min(tileN, N - n0), K, a + m0 * rsA, rsA,
                  csA, b + n0 * csB, rsB, csB, c + m0 * ldc + n0, ldc);
    }
  });
}

template <typename T>
void gemmAccumulateSerial(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA,
                          int64_t csA, const T *b, int64_t rsB, int64_t csB, T *c,
                          int64_t ldc) {
#ifdef SHARDFLOW_GEMM_AVX2
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    if (hasAvx2())
      return gemmAvx2(M, N, K, a, rsA, csA, b, rsB, csB, c, ldc);
#endif
  gemmBaseline<T>(M, N, K, a, rsA, csA, b, rsB, csB, c, ldc);
}

template <typename T>
void gemmAccumulateOnThread(int64_t M, int64_t N, int64_t K, const T *a, int64_t rsA,
                            int64_t csA, const T *b, int64_t rsB, int64_t csB, T *c,
                            int64_t ldc) {
  gemmTile<T>(M, N, K, a, rsA, csA, b, rsB, csB, c, ldc);
}

#define SHARDFLOW_INSTANTIATE_GEMM(T)                                                      \
  template void gemmAccumulate<T>(int64_t, int64_t, int64_t, const T *, int64_t, int64_t,   \
                                  const T *, int64_t, int64_t, T *, int64_t);               \
  template void gemmAccumulateOnThread<T>(int64_t, int64_t, int64_t, const T *, int64_t,    \
                                          int64_t, const T *, int64_t, int64_t, T *,        \
                                          int64_t);                                         \
  template void gemmAccumulateSerial<T>(int64_t, int64_t, int64_t, const T *, int64_t,      \
                                        int64_t, const T *, int64_t, int64_t, T *, int64_t);
SHARDFLOW_INSTANTIATE_GEMM(float)
SHARDFLOW_INSTANTIATE_GEMM(double)
SHARDFLOW_INSTANTIATE_GEMM(int8_t)
SHARDFLOW_INSTANTIATE_GEMM(int16_t)
SHARDFLOW_INSTANTIATE_GEMM(int32_t)
SHARDFLOW_INSTANTIATE_GEMM(int64_t)
SHARDFLOW_INSTANTIATE_GEMM(uint8_t)
SHARDFLOW_INSTANTIATE_GEMM(uint16_t)
SHARDFLOW_INSTANTIATE_GEMM(uint32_t)
SHARDFLOW_INSTANTIATE_GEMM(uint64_t)
#undef SHARDFLOW_INSTANTIATE_GEMM

} // namespace shardflow::runtime::cpu
