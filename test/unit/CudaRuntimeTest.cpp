//===- CudaRuntimeTest.cpp - the CUDA executor's host-side logic ----------===//
//
// What the CUDA executor decides without a GPU, checked on machines that
// have none: f32 -> f16/bf16 rounding of mixed-precision weights, device
// and module choice, the mapping of MatMul/Gemm shapes onto cuBLASLt calls,
// the stream hazard tracker, and the strided copies (run here on host
// memory, against straightforward references). With the CUDA headers the
// library loader is checked too: cuBLASLt and NCCL load from the toolkit
// without a driver, and a missing driver gives its message.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/FloatConversion.h"

#include "CudaPlanning.h"

#ifdef SHARDFLOW_TEST_CUDA_LIBRARIES
#include "shardflow/Runtime/Device/CUDA/CudaLibraries.h"
#include <dlfcn.h>
#endif

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {

float fromBits(uint32_t u) { return bitsToFloat(u); }

//===----------------------------------------------------------------------===//
// Float conversion
//===----------------------------------------------------------------------===//

TEST(FloatConversion, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16Bits(1.0f), 0x3F80);
  EXPECT_EQ(floatToBf16Bits(-2.0f), 0xC000);
  EXPECT_EQ(floatToBf16Bits(fromBits(0x3F808000u)), 0x3F80); // tie, even below
  EXPECT_EQ(floatToBf16Bits(fromBits(0x3F818000u)), 0x3F82); // tie, even above
  EXPECT_EQ(floatToBf16Bits(fromBits(0x3F808001u)), 0x3F81); // just above the tie
  EXPECT_EQ(floatToBf16Bits(fromBits(0x3F807FFFu)), 0x3F80); // just below
  EXPECT_EQ(floatToBf16Bits(0.1f), 0x3DCD);
  EXPECT_EQ(floatToBf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(floatToBf16Bits(fromBits(0x00000001u)), 0x0000); // smallest subnormal
  EXPECT_EQ(floatToBf16Bits(fromBits(0x00010000u)), 0x0001); // a bf16 subnormal
  EXPECT_EQ(floatToBf16Bits(std::numeric_limits<float>::max()), 0x7F80); // overflow: inf
  EXPECT_EQ(floatToBf16Bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(floatToBf16Bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(floatToBf16Bits(fromBits(0x7FC00000u)), 0x7FC0);
  // A signalling NaN whose payload sits in the dropped bits stays a NaN.
  EXPECT_EQ(floatToBf16Bits(fromBits(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(floatToBf16Bits(fromBits(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(bf16BitsToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bf16BitsToFloat(0xC049), -3.140625f);
}

TEST(FloatConversion, HalfRoundsToNearestEven) {
  EXPECT_EQ(floatToHalfBits(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalfBits(-2.0f), 0xC000);
  EXPECT_EQ(floatToHalfBits(0.1f), 0x2E66);
  EXPECT_EQ(floatToHalfBits(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(floatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);     // tie, even below
  EXPECT_EQ(floatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02); // tie, even above
  EXPECT_EQ(floatToHalfBits(65504.0f), 0x7BFF);   // the largest half
  EXPECT_EQ(floatToHalfBits(65519.99f), 0x7BFF);  // below the tie with 65536
  EXPECT_EQ(floatToHalfBits(65520.0f), 0x7C00);   // the tie rounds to even: inf
  EXPECT_EQ(floatToHalfBits(1e10f), 0x7C00);
  EXPECT_EQ(floatToHalfBits(-1e10f), 0xFC00);
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -14)), 0x0400); // smallest normal
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -24)), 0x0001); // smallest subnormal
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -25)), 0x0000); // tie with 0: even
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(floatToHalfBits(std::ldexp(3.0f, -25)), 0x0002); // 1.5 units: tie, even 2
  EXPECT_EQ(floatToHalfBits(std::ldexp(5.0f, -25)), 0x0002); // 2.5 units: tie, even 2
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  EXPECT_EQ(floatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalfBits(std::numeric_limits<float>::infinity()), 0x7C00);
  uint16_t nan = floatToHalfBits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(floatToHalfBits(fromBits(0x7F800001u)) & 0x03FF, 0); // signalling: still NaN
}

TEST(FloatConversion, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = halfBitsToFloat(uint16_t(h));
    bool isNan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF);
    if (isNan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      continue;
    }
    EXPECT_EQ(floatToHalfBits(f), h) << std::hex << h;
  }
  EXPECT_EQ(halfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(halfBitsToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(halfBitsToFloat(0xFC00)) && halfBitsToFloat(0xFC00) < 0);
}

TEST(FloatConversion, HalfMatchesRoundingOfDoubles) {
  // Random floats: the nearest half (ties to even), found by search, is
  // what the conversion gives.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-26.0f, 16.5f);
  for (int i = 0; i < 20000; ++i) {
    float f = std::exp2(exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    uint16_t h = floatToHalfBits(f);
    double x = f, got = halfBitsToFloat(h);
    if (std::isinf(got)) {
      EXPECT_GE(std::fabs(x), 65520.0) << f;
      continue;
    }
    // Neighbours of the result are not closer.
    for (int step : {-1, 1}) {
      uint16_t other = uint16_t((h & 0x7FFF) + step) | (h & 0x8000);
      if ((h & 0x7FFF) == 0 && step < 0)
        continue;
      double o = halfBitsToFloat(other);
      if (std::isinf(o))
        continue;
      EXPECT_LE(std::fabs(got - x), std::fabs(o - x)) << f;
      if (std::fabs(got - x) == std::fabs(o - x)) {
        EXPECT_EQ(h & 1, 0) << "a tie must go to the even half: " << f;
      }
    }
  }
}

TEST(FloatConversion, ConvertsArraysAndRefusesOtherTypes) {
  float in[4] = {1.0f, -0.5f, 3.0f, 65536.0f};
  uint16_t bf[4], half[4];
  convertElements(in, DType::F32, bf, DType::BF16, 4, "w");
  convertElements(in, DType::F32, half, DType::F16, 4, "w");
  EXPECT_EQ(bf[0], 0x3F80);
  EXPECT_EQ(bf[1], 0xBF00);
  EXPECT_EQ(half[2], 0x4200);
  EXPECT_EQ(half[3], 0x7C00);
  float back[4];
  convertElements(bf, DType::BF16, back, DType::F32, 4, "w");
  EXPECT_EQ(back[3], 65536.0f);
  uint16_t h2[4];
  convertElements(bf, DType::BF16, h2, DType::F16, 4, "w");
  EXPECT_EQ(h2[0], 0x3C00);
  int64_t ints[2] = {1, 2};
  float out[2];
  try {
    convertElements(ints, DType::I64, out, DType::F32, 2, "weight 'w'");
    FAIL() << "i64 -> f32 must be refused";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("weight 'w': cannot convert i64 to f32"),
              std::string::npos)
        << e.what();
  }
}

//===----------------------------------------------------------------------===//
// Devices and modules
//===----------------------------------------------------------------------===//

TEST(CudaDevices, LocalRankPicksTheDevice) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
  unsetenv("MPI_LOCAL_RANK");
  EXPECT_EQ(launcherLocalRank(), 0);
  setenv("SLURM_LOCALID", "5", 1);
  EXPECT_EQ(launcherLocalRank(), 5);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1); // Open MPI's wins
  EXPECT_EQ(launcherLocalRank(), 3);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
  EXPECT_EQ(chooseDevice(-1, 5, 4), 1);
  EXPECT_EQ(chooseDevice(-1, 0, 1), 0);
  EXPECT_EQ(chooseDevice(2, 5, 4), 2);
  EXPECT_THROW(chooseDevice(4, 0, 4), RuntimeError);
  EXPECT_THROW(chooseDevice(-1, 0, 0), RuntimeError);
}

DeviceModule module(const std::string &name, const std::string &arch) {
  DeviceModule m;
  m.name = name;
  m.arch = arch;
  m.format = arch.rfind("sm_", 0) == 0 ? "cubin" : "ptx";
  m.data = {1, 2, 3};
  return m;
}

TEST(CudaModules, ExactCubinElsePtx) {
  std::vector<DeviceModule> mods = {module("k", "sm_80"), module("k", "sm_90"),
                                    module("k", "compute_80"), module("other", "sm_89")};
  EXPECT_EQ(selectModule(mods, "k", 9, 0).arch, "sm_90");
  EXPECT_EQ(selectModule(mods, "k", 8, 0).arch, "sm_80");
  // No cubin for sm_89 (Ada): the PTX, compiled by the driver.
  EXPECT_EQ(selectModule(mods, "k", 8, 9).arch, "compute_80");
  EXPECT_EQ(selectModule(mods, "k", 10, 0).arch, "compute_80");
  EXPECT_EQ(selectModule(mods, "other", 8, 9).arch, "sm_89");
}

TEST(CudaModules, ArchSpecificCubinAndNewestPtx) {
  std::vector<DeviceModule> mods = {module("k", "sm_90a"), module("k", "compute_70"),
                                    module("k", "compute_86"), module("k", "compute_90a")};
  EXPECT_EQ(selectModule(mods, "k", 9, 0).arch, "sm_90a");
  EXPECT_EQ(selectModule(mods, "k", 8, 9).arch, "compute_86");
  EXPECT_EQ(selectModule(mods, "k", 8, 0).arch, "compute_70");
  // compute_90a runs on sm_90 only, so a newer GPU takes compute_86.
  EXPECT_EQ(selectModule(mods, "k", 10, 0).arch, "compute_86");
}

TEST(CudaModules, NoFittingCodeNamesModuleAndArchs) {
  std::vector<DeviceModule> mods = {module("k", "sm_90"), module("k", "compute_90")};
  try {
    selectModule(mods, "k", 8, 0);
    FAIL() << "an sm_80 GPU cannot run sm_90 code";
  } catch (const RuntimeError &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("module 'k'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sm_80"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sm_90, compute_90"), std::string::npos) << msg;
  }
  try {
    selectModule(mods, "missing", 9, 0);
    FAIL();
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("module 'missing' is not in the artifact"),
              std::string::npos);
  }
}

//===----------------------------------------------------------------------===//
// GEMM shapes
//===----------------------------------------------------------------------===//

TEST(CudaMatmul, BatchWithoutBatchedBFolds) {
  MatmulPlan p = planMatmul({2, 3, 4, 5}, {5, 6}, {2, 3, 4, 6});
  EXPECT_EQ(p.kind, MatmulPlan::Kind::Folded);
  EXPECT_EQ(p.m, 24);
  EXPECT_EQ(p.n, 6);
  EXPECT_EQ(p.k, 5);
  p = planMatmul({4, 5}, {5, 6}, {4, 6});
  EXPECT_EQ(p.kind, MatmulPlan::Kind::Folded);
  EXPECT_EQ(p.m, 4);
  // B with a batch of one folds too.
  p = planMatmul({2, 4, 5}, {1, 5, 6}, {2, 4, 6});
  EXPECT_EQ(p.kind, MatmulPlan::Kind::Folded);
  EXPECT_EQ(p.m, 8);
}

TEST(CudaMatmul, OneDimensionalOperands) {
  MatmulPlan p = planMatmul({5}, {5, 6}, {6});
  EXPECT_EQ(p.kind, MatmulPlan::Kind::Folded);
  EXPECT_EQ(p.m, 1);
  EXPECT_EQ(p.n, 6);
  p = planMatmul({2, 4, 5}, {5}, {2, 4});
  EXPECT_EQ(p.kind, MatmulPlan::Kind::Folded);
  EXPECT_EQ(p.m, 8);
  EXPECT_EQ(p.n, 1);
  p = planMatmul({5}, {5}, {});
  EXPECT_EQ(p.m * p.n, 1);
  p = planMatmul({5}, {3, 5, 6}, {3, 6});
  EXPECT_EQ(p.kind, MatmulPlan::Kind::StridedBatched);
  EXPECT_EQ(p.strideA, 0);
  EXPECT_EQ(p.batch, 3);
}

TEST(CudaMatmul, EqualBatchesAreStridedBatched) {
  MatmulPlan p = planMatmul({2, 3, 4, 5}, {2, 3, 5, 6}, {2, 3, 4, 6});
  EXPECT_EQ(p.kind, MatmulPlan::Kind::StridedBatched);
  EXPECT_EQ(p.batch, 6);
  EXPECT_EQ(p.strideA, 20);
  EXPECT_EQ(p.strideB, 30);
  EXPECT_EQ(p.strideC, 24);
  // A without batch against a batched B: A repeats (stride 0).
  p = planMatmul({4, 5}, {3, 5, 6}, {3, 4, 6});
  EXPECT_EQ(p.kind, MatmulPlan::Kind::StridedBatched);
  EXPECT_EQ(p.strideA, 0);
  EXPECT_EQ(p.strideB, 30);
  MatmulPlan loop = expandToLoop(p);
  ASSERT_EQ(loop.kind, MatmulPlan::Kind::Broadcast);
  ASSERT_EQ(loop.offsets.size(), 3u);
  EXPECT_EQ(loop.offsets[2], std::make_pair(int64_t(0), int64_t(60)));
}

TEST(CudaMatmul, MixedBroadcastLoopsWithOffsets) {
  // A [2,1,4,5] x B [1,3,5,6] -> [2,3,4,6]: A repeats along dim 1, B
  // along dim 0.
  MatmulPlan p = planMatmul({2, 1, 4, 5}, {1, 3, 5, 6}, {2, 3, 4, 6});
  ASSERT_EQ(p.kind, MatmulPlan::Kind::Broadcast);
  ASSERT_EQ(p.offsets.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    int64_t a = i / 3, b = i % 3;
    EXPECT_EQ(p.offsets[size_t(i)].first, a * 20) << i;
    EXPECT_EQ(p.offsets[size_t(i)].second, b * 30) << i;
  }
  // Fewer batch dims on one side ([3,4,5] against [2,3,5,6]): the shorter
  // one is left-padded, so its batch [3] matches B's inner dim.
  p = planMatmul({3, 4, 5}, {2, 3, 5, 6}, {2, 3, 4, 6});
  ASSERT_EQ(p.kind, MatmulPlan::Kind::Broadcast);
  EXPECT_EQ(p.offsets[4], std::make_pair(int64_t(20), int64_t(4 * 30)));
}

TEST(CudaMatmul, RefusesShapesThatDoNotMultiply) {
  EXPECT_THROW(planMatmul({4, 5}, {6, 7}, {4, 7}), RuntimeError);
  EXPECT_THROW(planMatmul({2, 4, 5}, {3, 5, 6}, {2, 4, 6}), RuntimeError);
  EXPECT_THROW(planMatmul({4, 5}, {5, 6}, {4, 7}), RuntimeError);
  EXPECT_THROW(planMatmul({}, {5, 6}, {6}), RuntimeError);
}

TEST(CudaGemm, TransposesAndBroadcastC) {
  std::vector<int64_t> c1 = {6}, c2 = {4, 1}, c3 = {}, c4 = {4, 6}, bad = {5};
  GemmPlan g = planGemm({5, 4}, {6, 5}, &c1, true, true, {4, 6});
  EXPECT_EQ(g.m, 4);
  EXPECT_EQ(g.n, 6);
  EXPECT_EQ(g.k, 5);
  EXPECT_EQ(g.cRows, 1);
  EXPECT_EQ(g.cCols, 6);
  g = planGemm({4, 5}, {5, 6}, &c2, false, false, {4, 6});
  EXPECT_EQ(g.cRows, 4);
  EXPECT_EQ(g.cCols, 1);
  g = planGemm({4, 5}, {5, 6}, &c3, false, false, {4, 6});
  EXPECT_EQ(g.cRows, 1);
  EXPECT_EQ(g.cCols, 1);
  g = planGemm({4, 5}, {5, 6}, &c4, false, false, {4, 6});
  EXPECT_EQ(g.cRows, 4);
  EXPECT_EQ(g.cCols, 6);
  g = planGemm({4, 5}, {5, 6}, nullptr, false, false, {4, 6});
  EXPECT_EQ(g.cRows, 0);
  EXPECT_THROW(planGemm({4, 5}, {5, 6}, &bad, false, false, {4, 6}), RuntimeError);
  EXPECT_THROW(planGemm({4, 5}, {6, 5}, nullptr, false, false, {4, 6}), RuntimeError);
}

//===----------------------------------------------------------------------===//
// Stream ordering
//===----------------------------------------------------------------------===//

Access reads(int64_t begin, int64_t end, int region = 0) { return {{region, begin, end}, false}; }
Access writes(int64_t begin, int64_t end, int region = 0) { return {{region, begin, end}, true}; }
const int kCompute = 0, kComm = 1;
using Waits = std::vector<int>;

TEST(HazardTracker, CollectiveWaitsForItsProducerOnly) {
  HazardTracker t;
  EXPECT_EQ(t.add(0, kCompute, {writes(0, 100)}), Waits{});
  EXPECT_EQ(t.add(1, kCompute, {writes(100, 200)}), Waits{});
  // An all_reduce of [0, 100) waits for instruction 0, not 1.
  EXPECT_EQ(t.add(2, kComm, {reads(0, 100), writes(0, 100)}), Waits{0});
  // Independent compute overlaps with the collective.
  EXPECT_EQ(t.add(3, kCompute, {reads(100, 200), writes(200, 300)}), Waits{});
  // The first reader of the collective's bytes waits for it ...
  EXPECT_EQ(t.add(4, kCompute, {reads(50, 60), writes(300, 400)}), Waits{2});
  // ... and later ones need not wait again.
  EXPECT_EQ(t.add(5, kCompute, {reads(0, 100), writes(400, 500)}), Waits{});
}

TEST(HazardTracker, WriteAfterReadAndWriteAfterWrite) {
  HazardTracker t;
  EXPECT_EQ(t.add(0, kComm, {reads(0, 64), writes(64, 128)}), Waits{});
  // Reading what the collective reads is no conflict.
  EXPECT_EQ(t.add(1, kCompute, {reads(0, 64), writes(512, 600)}), Waits{});
  // Overwriting the collective's input must wait (write after read).
  EXPECT_EQ(t.add(2, kCompute, {writes(32, 40)}), Waits{0});
  HazardTracker u;
  EXPECT_EQ(u.add(0, kComm, {writes(64, 128)}), Waits{});
  EXPECT_EQ(u.add(1, kCompute, {writes(127, 130)}), Waits{0}); // write after write
}

TEST(HazardTracker, RangesAndRegions) {
  HazardTracker t;
  EXPECT_EQ(t.add(0, kCompute, {writes(0, 100)}), Waits{});
  // Touching ends do not overlap; other allocations (regions) never do.
  EXPECT_EQ(t.add(1, kComm, {reads(100, 200), writes(200, 300)}), Waits{});
  EXPECT_EQ(t.add(2, kComm, {reads(0, 100, 7), writes(0, 100, 7)}), Waits{});
  EXPECT_EQ(t.add(3, kComm, {reads(0, 0)}), Waits{}); // empty
  EXPECT_EQ(t.add(4, kComm, {reads(99, 100)}), Waits{0});
}

TEST(HazardTracker, WaitsForTheLatestConflictOnly) {
  HazardTracker t;
  EXPECT_EQ(t.add(0, kCompute, {writes(0, 10)}), Waits{});
  EXPECT_EQ(t.add(1, kCompute, {writes(10, 20)}), Waits{});
  EXPECT_EQ(t.add(2, kCompute, {writes(30, 40)}), Waits{});
  // Reading both 0 and 1: one wait, on 1 (the stream orders 0 before it).
  EXPECT_EQ(t.add(3, kComm, {reads(0, 20), writes(100, 110)}), Waits{1});
  // Instruction 2 is still pending; 0 and 1 are not.
  EXPECT_EQ(t.add(4, kComm, {reads(0, 40), writes(110, 120)}), Waits{2});
  // Both directions in one program: compute reads the second collective.
  EXPECT_EQ(t.add(5, kCompute, {reads(100, 120)}), Waits{4});
}

//===----------------------------------------------------------------------===//
// Strided copies, run on host memory
//===----------------------------------------------------------------------===//

void runOnHost(const std::vector<Copy2D> &copies, const uint8_t *src, uint8_t *dst) {
  for (const Copy2D &c : copies) {
    ASSERT_LE(c.width, c.srcPitch);
    ASSERT_LE(c.width, c.dstPitch);
    const uint8_t *from = (c.fromDestination ? dst : src) + c.srcOffset;
    for (size_t r = 0; r < c.height; ++r)
      std::memmove(dst + c.dstOffset + r * c.dstPitch, from + r * c.srcPitch, c.width);
  }
}

std::vector<int32_t> iota(size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = int32_t(i);
  return v;
}

TEST(CudaCopies, PackAndUnpackPieces) {
  // [2, 6, 3] split into 3 pieces along dim 1: piece p holds rows
  // 2p..2p+1 of both outer slices.
  std::vector<int64_t> shape = {2, 6, 3};
  std::vector<int32_t> in = iota(36), packed(36, -1), back(36, -1);
  runOnHost(planPackPieces(shape, 1, 3, 4), reinterpret_cast<uint8_t *>(in.data()),
            reinterpret_cast<uint8_t *>(packed.data()));
  for (int p = 0; p < 3; ++p)
    for (int o = 0; o < 2; ++o)
      for (int j = 0; j < 6; ++j)
        EXPECT_EQ(packed[size_t(p * 12 + o * 6 + j)], o * 18 + p * 6 + j);
  runOnHost(planUnpackPieces({2, 2, 3}, 1, 3, 4), reinterpret_cast<uint8_t *>(packed.data()),
            reinterpret_cast<uint8_t *>(back.data()));
  EXPECT_EQ(back, in);
  // The outermost dimension needs one contiguous copy per piece.
  EXPECT_EQ(planPackPieces(shape, 0, 2, 4).size(), 2u);
  EXPECT_EQ(planPackPieces(shape, 0, 2, 4)[0].height, 1u);
}

TEST(CudaCopies, BlockCopyMatchesIndexing) {
  std::mt19937 rng(3);
  std::vector<int64_t> in = {3, 4, 5, 6};
  std::vector<int32_t> src = iota(3 * 4 * 5 * 6);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> out(4), start(4);
    for (size_t d = 0; d < 4; ++d) {
      out[d] = 1 + int64_t(rng() % uint32_t(in[d]));
      start[d] = int64_t(rng() % uint32_t(in[d] - out[d] + 1));
    }
    std::vector<int32_t> dst(size_t(out[0] * out[1] * out[2] * out[3]), -1);
    runOnHost(planBlockCopy(in, out, start, 4), reinterpret_cast<uint8_t *>(src.data()),
              reinterpret_cast<uint8_t *>(dst.data()));
    size_t i = 0;
    for (int64_t a = 0; a < out[0]; ++a)
      for (int64_t b = 0; b < out[1]; ++b)
        for (int64_t c = 0; c < out[2]; ++c)
          for (int64_t d = 0; d < out[3]; ++d, ++i) {
            int64_t at = (((a + start[0]) * 4 + b + start[1]) * 5 + c + start[2]) * 6 + d + start[3];
            ASSERT_EQ(dst[i], src[size_t(at)]) << trial;
          }
  }
  // A leading-dimension split (a data-parallel batch) is one copy.
  EXPECT_EQ(planBlockCopy({8, 4, 5}, {2, 4, 5}, {4, 0, 0}, 4).size(), 1u);
  EXPECT_THROW(planBlockCopy({8, 4}, {2, 4}, {7, 0}, 4), RuntimeError);
}

TEST(CudaCopies, BroadcastFillsEveryShape) {
  const int64_t m = 7, n = 5;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, n}, {m, 1}, {m, n}}) {
    std::vector<int32_t> c = iota(size_t(rows * cols));
    for (auto &v : c)
      v += 100;
    std::vector<int32_t> y(size_t(m * n), -1);
    std::vector<Copy2D> copies = planBroadcast2D(rows, cols, m, n, 4);
    runOnHost(copies, reinterpret_cast<uint8_t *>(c.data()), reinterpret_cast<uint8_t *>(y.data()));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(y[size_t(i * n + j)], c[size_t((rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j))])
            << rows << "x" << cols << " at " << i << "," << j;
    // Doubling: a logarithmic number of copies.
    EXPECT_LE(copies.size(), 1u + 3u + 3u);
    // A doubling copy reads only what is already written.
    for (const Copy2D &cp : copies) {
      if (cp.fromDestination) {
        EXPECT_LE(cp.srcOffset + cp.width, cp.dstOffset);
      }
    }
  }
  EXPECT_THROW(planBroadcast2D(3, 1, 7, 5, 4), RuntimeError);
}

//===----------------------------------------------------------------------===//
// The library loader (builds with the CUDA headers only)
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Waiting within a deadline (NCCL's nonblocking calls, GPU events)
//===----------------------------------------------------------------------===//

TEST(CudaWaiting, FinishedWorkStopsThePolling) {
  int polls = 0;
  EXPECT_EQ(pollUntil([&] { return ++polls == 5; }, 10.0), WaitOutcome::Finished);
  EXPECT_EQ(polls, 5);
}

TEST(CudaWaiting, WorkThatNeverFinishesTimesOut) {
  using Clock = std::chrono::steady_clock;
  int polls = 0;
  auto start = Clock::now();
  EXPECT_EQ(pollUntil([&] { ++polls; return false; }, 0.05), WaitOutcome::TimedOut);
  double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(waited, 0.05);
  EXPECT_LT(waited, 5.0);
  EXPECT_GT(polls, 1);
}

TEST(CudaWaiting, AZeroDeadlineStillPollsOnce) {
  // Work that is already done is never a timeout, however short the limit.
  int polls = 0;
  EXPECT_EQ(pollUntil([&] { ++polls; return true; }, 0.0), WaitOutcome::Finished);
  EXPECT_EQ(polls, 1);
  EXPECT_EQ(pollUntil([] { return false; }, 0.0), WaitOutcome::TimedOut);
}

TEST(CudaWaiting, FailuresPropagateFromThePoll) {
  int polls = 0;
  EXPECT_THROW(pollUntil(
                   [&]() -> bool {
                     if (++polls == 3)
                       throw RuntimeError("NCCL failed");
                     return false;
                   },
                   10.0),
               RuntimeError);
  EXPECT_EQ(polls, 3);
}

#ifdef SHARDFLOW_TEST_CUDA_LIBRARIES
TEST(CudaLibraries, MissingDriverIsNamed) {
  if (void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(h);
    GTEST_SKIP() << "this machine has an NVIDIA driver";
  }
  for (int attempt = 0; attempt < 2; ++attempt) { // the error is remembered
    try {
      driver();
      FAIL() << "no driver, yet driver() succeeded";
    } catch (const RuntimeError &e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("libcuda.so.1 could not be loaded ("), std::string::npos) << msg;
      EXPECT_NE(msg.find("is the NVIDIA driver installed?"), std::string::npos) << msg;
    }
  }
}

TEST(CudaLibraries, CublasLtAndNcclResolveWithoutADriver) {
  // Both load (and resolve every function shard-run calls) from the
  // toolkit, with no driver: they only need it once used.
  std::string cublasLtName = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  if (void *h = dlopen(cublasLtName.c_str(), RTLD_NOW | RTLD_LOCAL))
    dlclose(h);
  else
    GTEST_SKIP() << "no cuBLASLt on this machine";
  const CublasLt &lt = cublasLt();
  EXPECT_EQ(lt.library, cublasLtName);
  EXPECT_NE(lt.cublasLtMatmul, nullptr);
  EXPECT_EQ(lt.cublasLtGetVersion() / 10000, size_t(CUBLAS_VER_MAJOR));
  EXPECT_NE(describe(CUBLAS_STATUS_NOT_SUPPORTED).find("CUBLAS_STATUS_NOT_SUPPORTED"),
            std::string::npos);
  if (void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL))
    dlclose(h);
  else
    GTEST_SKIP() << "no NCCL on this machine";
  const Nccl &n = nccl();
  EXPECT_GE(n.version, 21300);
  EXPECT_NE(n.ncclCommInitRankConfig, nullptr);
  EXPECT_NE(n.ncclCommFinalize, nullptr);
  EXPECT_NE(describe(ncclInvalidArgument).find("NCCL error"), std::string::npos);
}
#endif

} // namespace
