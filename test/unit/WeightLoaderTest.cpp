//===- WeightLoaderTest.cpp - weights loaded on several threads -----------===//
//
// WeightLoader::loadAll reads, checks and converts weights on worker threads
// and hands them to the caller's thread: the bytes must be those of the
// one-thread load (slices, f32 -> bf16/f16 conversion, permutations), and a
// failure on any thread must surface once, naming the weight.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Checksum.h"
#include "shardflow/Runtime/Format/FloatConversion.h"
#include "shardflow/Runtime/Core/WeightLoader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unistd.h>

using namespace shardflow::runtime;

namespace {

/// A folder holding one weight file of `floats` random f32 values, and an
/// artifact whose weights are views of it in every form the loader knows.
struct Fixture {
  std::string dir;
  std::vector<float> values;
  Artifact art;

  explicit Fixture(size_t weights) {
    char name[] = "/tmp/shardflow-weights-XXXXXX";
    dir = mkdtemp(name);
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    // Weight w is a [rows, 24] matrix at its own offset; 8 + 4w rows.
    int64_t offset = 0;
    for (size_t w = 0; w < weights; ++w) {
      int64_t rows = 8 + 4 * int64_t(w);
      BufferDesc b;
      b.kind = BufferDesc::Kind::Weight;
      b.name = "w" + std::to_string(w);
      b.storage = "external";
      b.file = "m.data";
      b.fileOffset = offset;
      b.dtype = DType::F32;
      b.shape = {rows, 24};
      switch (w % 8) {
      case 1: // converted at load
        b.dtype = DType::BF16;
        b.sourceDType = DType::F32;
        break;
      case 2: // a column block of the stored matrix, converted
        b.dtype = DType::F16;
        b.sourceDType = DType::F32;
        b.globalShape = {rows, 24};
        b.shape = {rows, 12};
        b.starts = {{0, 12}};
        break;
      case 3: // stored transposed
        b.shape = {24, rows};
        b.permutation = {1, 0};
        break;
      case 4: // a column block of the stored matrix, as it is
        b.globalShape = {rows, 24};
        b.shape = {rows, 8};
        b.starts = {{0, 16}};
        break;
      case 5: // a column block, stored transposed
        b.globalShape = {rows, 24};
        b.shape = {12, rows};
        b.starts = {{0, 4}};
        b.permutation = {1, 0};
        break;
      case 6: // a row block reaching 3 rows past the stored ones, converted
        b.dtype = DType::BF16;
        b.sourceDType = DType::F32;
        b.globalShape = {rows, 24};
        b.shape = {8, 24};
        b.starts = {{rows - 5, 0}};
        b.zeroPadded = true;
        break;
      case 7: // a column block reaching 4 columns past, stored transposed
        b.globalShape = {rows, 24};
        b.shape = {12, rows};
        b.starts = {{0, 16}};
        b.permutation = {1, 0};
        b.zeroPadded = true;
        break;
      }
      for (int64_t i = 0; i < rows * 24; ++i)
        values.push_back(dist(gen));
      offset += rows * 24 * 4;
      art.buffers.push_back(b);
    }
    std::ofstream(dir + "/m.data", std::ios::binary)
        .write(reinterpret_cast<const char *>(values.data()),
               std::streamsize(values.size() * sizeof(float)));
    art.modelDir = dir;
    // The checksums the compiler would record: over this rank's file bytes.
    for (size_t w = 0; w < weights; ++w) {
      BufferDesc &b = art.buffers[w];
      std::vector<uint8_t> bytes;
      forEachWeightRun(b, 0, [&](size_t off, size_t len) {
        if (off == kZeroRun) { // zero padding past the stored tensor
          bytes.insert(bytes.end(), len, 0);
          return;
        }
        const uint8_t *base =
            reinterpret_cast<const uint8_t *>(values.data()) + b.fileOffset + off;
        bytes.insert(bytes.end(), base, base + len);
      });
      b.crc32c = {crc32c(bytes.data(), bytes.size())};
    }
  }
  ~Fixture() {
    std::remove((dir + "/m.data").c_str());
    rmdir(dir.c_str());
  }

  std::vector<size_t> all() const {
    std::vector<size_t> v(art.buffers.size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = i;
    return v;
  }

  /// Every weight's bytes, loaded with `threads` threads (and `staging`).
  std::map<size_t, std::vector<uint8_t>> loadWith(int threads, WeightStaging *staging = nullptr,
                                                  size_t *staged = nullptr) {
    WeightLoader loader(art, "", 0, true);
    std::map<size_t, std::vector<uint8_t>> out;
    std::thread::id caller = std::this_thread::get_id();
    loader.loadAll(
        all(), threads,
        [&](size_t i, WeightBytes w) {
          EXPECT_EQ(std::this_thread::get_id(), caller) << "use() runs on the caller's thread";
          EXPECT_EQ(w.bytes, art.buffers[i].bytes());
          if (w.staged) {
            EXPECT_EQ(w.data, w.staged.get()) << "weight " << i << " staged but read elsewhere";
            EXPECT_FALSE(w.owned) << "weight " << i << " keeps a heap copy beside its block";
            if (staged)
              ++*staged;
          }
          const uint8_t *p = static_cast<const uint8_t *>(w.data);
          EXPECT_TRUE(out.emplace(i, std::vector<uint8_t>(p, p + w.bytes)).second)
              << "weight " << i << " handed over twice";
        },
        staging);
    return out;
  }
};

/// Staging in `slots` heap blocks of `slotBytes`, filled with 0xee when
/// taken (so bytes the loader did not write show), counting what is out.
class SlotStaging final : public WeightStaging {
public:
  SlotStaging(size_t slots, size_t slotBytes) : slotBytes(slotBytes), blocks(slots) {
    for (auto &b : blocks)
      b.memory.reset(new uint8_t[slotBytes]);
  }
  uint8_t *acquire(size_t bytes) override {
    std::lock_guard<std::mutex> lock(m);
    if (bytes > slotBytes)
      return nullptr;
    for (auto &b : blocks)
      if (!b.taken) {
        b.taken = true;
        ++out;
        maxOut = std::max(maxOut, out);
        std::memset(b.memory.get(), 0xee, slotBytes);
        return b.memory.get();
      }
    ++refused;
    return nullptr;
  }
  void release(uint8_t *block) override {
    std::lock_guard<std::mutex> lock(m);
    for (auto &b : blocks)
      if (b.memory.get() == block) {
        EXPECT_TRUE(b.taken) << "a block given back twice";
        b.taken = false;
        --out;
        return;
      }
    ADD_FAILURE() << "a block given back that was never taken";
  }
  size_t out = 0, maxOut = 0, refused = 0;

private:
  struct Block {
    std::unique_ptr<uint8_t[]> memory;
    bool taken = false;
  };
  size_t slotBytes;
  std::vector<Block> blocks;
  std::mutex m;
};

TEST(WeightLoader, ThreadsLoadTheBytesOfOneThread) {
  Fixture f(13);
  auto one = f.loadWith(1);
  ASSERT_EQ(one.size(), f.art.buffers.size());
  // The one-thread bytes against the fixture's own values: a bf16 weight,
  // an f16 column block and a transposed matrix.
  const std::vector<uint8_t> &bf = one.at(1); // [12, 24] bf16, at 8*24 floats
  uint16_t got;
  std::memcpy(&got, bf.data() + 2 * 5, 2);
  EXPECT_EQ(got, floatToBf16Bits(f.values[8 * 24 + 5]));
  const std::vector<uint8_t> &half = one.at(2); // rows of w2 [16, 24]: cols 12..23
  size_t w2 = (8 + 12) * 24;
  std::memcpy(&got, half.data() + 2 * (3 * 12 + 4), 2);
  EXPECT_EQ(got, floatToHalfBits(f.values[w2 + 3 * 24 + 12 + 4]));
  const std::vector<uint8_t> &t = one.at(3); // w3 [20, 24] stored, [24, 20] here
  size_t w3 = w2 + 16 * 24;
  float x;
  std::memcpy(&x, t.data() + 4 * (7 * 20 + 2), 4); // (7, 2) = stored (2, 7)
  EXPECT_EQ(x, f.values[w3 + 2 * 24 + 7]);
  for (int threads : {2, 4, 64})
    EXPECT_EQ(f.loadWith(threads), one) << threads << " threads";
}

TEST(WeightLoader, ZeroPaddedBlocksReadZerosPastTheTensor) {
  // A vocabulary padded to a multiple of the tensor-parallel size: the
  // block's part in the file is the file's values, the part past it zeros,
  // converted and permuted like the rest (checksums over both, as the
  // compiler records them).
  Fixture f(8);
  auto one = f.loadWith(1);
  size_t w6 = 0;
  for (int64_t k = 0; k < 6; ++k)
    w6 += size_t(8 + 4 * k) * 24;
  const std::vector<uint8_t> &rows = one.at(6); // [8, 24] bf16: rows 27..31 of 32, 3 zero rows
  ASSERT_EQ(rows.size(), 8u * 24 * 2);
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 24; ++c) {
      uint16_t got;
      std::memcpy(&got, rows.data() + 2 * (r * 24 + c), 2);
      uint16_t want = r < 5 ? floatToBf16Bits(f.values[w6 + size_t(27 + r) * 24 + size_t(c)]) : 0;
      ASSERT_EQ(got, want) << r << ", " << c;
    }
  size_t w7 = w6 + 32 * 24;
  const std::vector<uint8_t> &cols = one.at(7); // [12, 36]: stored columns 16..27 of 24
  ASSERT_EQ(cols.size(), 12u * 36 * 4);
  for (int64_t c = 0; c < 12; ++c)
    for (int64_t r = 0; r < 36; ++r) {
      float got;
      std::memcpy(&got, cols.data() + 4 * (c * 36 + r), 4);
      float want = c < 8 ? f.values[w7 + size_t(r) * 24 + size_t(16 + c)] : 0.0f;
      ASSERT_EQ(got, want) << c << ", " << r;
    }
  for (int threads : {2, 4})
    EXPECT_EQ(f.loadWith(threads), one) << threads << " threads";
}

TEST(WeightLoader, ScaledWeightsAreMultipliedBeforeRounding) {
  // A weight-only product the compiler folded (scale=): the file's values
  // times the factor, in f64, rounded once to the buffer's type; sliced
  // and converted weights too; the checksums stay those of the file.
  Fixture f(8);
  f.art.buffers[0].scale = 0.5;   // [8, 24] f32, else read in place
  f.art.buffers[1].scale = 0.25;  // [12, 24] f32 in the file, bf16 buffer
  f.art.buffers[4].scale = -3.0;  // [24, 8]: stored columns 16..23 of 24
  auto one = f.loadWith(1);
  auto f32At = [&](size_t w, size_t i) {
    float x;
    std::memcpy(&x, one.at(w).data() + 4 * i, 4);
    return x;
  };
  for (size_t i = 0; i < 8 * 24; ++i)
    ASSERT_EQ(f32At(0, i), f.values[i] * 0.5f) << i;
  size_t w1 = 8 * 24;
  for (size_t i = 0; i < 12 * 24; ++i) {
    uint16_t got;
    std::memcpy(&got, one.at(1).data() + 2 * i, 2);
    ASSERT_EQ(got, floatToBf16Bits(f.values[w1 + i] * 0.25f)) << i;
  }
  size_t w4 = (8 + 12 + 16 + 20) * 24;
  for (size_t r = 0; r < 24; ++r)
    for (size_t c = 0; c < 8; ++c)
      ASSERT_EQ(f32At(4, r * 8 + c), float(double(f.values[w4 + r * 24 + 16 + c]) * -3.0))
          << r << ", " << c;
  for (int threads : {2, 4})
    EXPECT_EQ(f.loadWith(threads), one) << threads << " threads";
}

TEST(WeightLoader, StagedWeightsAreTheBytesOfTheHeapLoad) {
  // Every form (in place, converted, gathered, permuted and their mixes)
  // ends in its staging block with the bytes of the load without staging.
  Fixture f(18);
  auto plain = f.loadWith(1);
  for (int threads : {1, 2, 4}) {
    // At most `threads` weights wait for use() and one is in it: with one
    // block more than the threads, none is refused.
    SlotStaging staging(size_t(threads) + 1, 80 * 24 * 4);
    size_t staged = 0;
    EXPECT_EQ(f.loadWith(threads, &staging, &staged), plain) << threads << " threads";
    EXPECT_EQ(staged, f.art.buffers.size()) << threads << " threads";
    EXPECT_EQ(staging.refused, 0u) << threads << " threads";
    EXPECT_LE(staging.maxOut, size_t(threads) + 1);
    EXPECT_EQ(staging.out, 0u) << "every block is given back";
  }
  // Weights larger than a block, and a staging with no free block, keep
  // the heap or the mapping.
  SlotStaging small(2, 20 * 24 * 2);
  size_t staged = 0;
  EXPECT_EQ(f.loadWith(3, &small, &staged), plain);
  EXPECT_GT(staged, 0u);
  EXPECT_LT(staged, f.art.buffers.size());
  EXPECT_EQ(small.out, 0u);
}

TEST(WeightLoader, AFailureGivesTheStagingBlocksBack) {
  Fixture f(12);
  f.art.buffers[7].crc32c = {f.art.buffers[7].crc32c[0] ^ 1u};
  for (int threads : {1, 4}) {
    SlotStaging staging(size_t(threads) + 1, 80 * 24 * 4);
    WeightLoader loader(f.art, "", 0, true);
    EXPECT_THROW(loader.loadAll(f.all(), threads, [](size_t, WeightBytes) {}, &staging),
                 RuntimeError);
    EXPECT_EQ(staging.out, 0u) << threads << " threads";
  }
}

TEST(WeightLoader, AWorkersFailureIsRethrownNamingTheWeight) {
  Fixture f(12);
  f.art.buffers[9].crc32c = {f.art.buffers[9].crc32c[0] ^ 1u};
  for (int threads : {1, 4}) {
    WeightLoader loader(f.art, "", 0, true);
    size_t handed = 0;
    try {
      loader.loadAll(f.all(), threads, [&](size_t, WeightBytes) { ++handed; });
      ADD_FAILURE() << "a changed checksum was accepted with " << threads << " threads";
    } catch (const RuntimeError &e) {
      EXPECT_NE(std::string(e.what()).find("weight 'w9'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
    }
    EXPECT_LT(handed, f.art.buffers.size());
  }
}

TEST(WeightLoader, AnErrorInUseStopsTheWorkers) {
  Fixture f(16);
  WeightLoader loader(f.art, "", 0, true);
  size_t handed = 0;
  try {
    loader.loadAll(f.all(), 4, [&](size_t i, WeightBytes) {
      if (++handed == 3)
        throw RuntimeError("upload of weight " + std::to_string(i) + " failed");
    });
    ADD_FAILURE() << "the error in use() was lost";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("upload of weight"), std::string::npos) << e.what();
  }
  EXPECT_EQ(handed, 3u) << "use() is not called after it failed";
}

TEST(WeightLoader, DefaultThreadsShareTheMachineAmongLocalRanks) {
  const char *var = "OMPI_COMM_WORLD_LOCAL_SIZE";
  const char *saved = std::getenv(var);
  std::string keep = saved ? saved : "";
  int hardware = std::max(1, int(std::thread::hardware_concurrency()));
  setenv(var, "1", 1);
  EXPECT_EQ(defaultLoadThreads(), std::min(hardware, 8));
  setenv(var, "100000", 1);
  EXPECT_EQ(defaultLoadThreads(), 1);
  setenv(var, "not a number", 1);
  EXPECT_EQ(defaultLoadThreads(), std::min(hardware, 8));
  if (saved)
    setenv(var, keep.c_str(), 1);
  else
    unsetenv(var);
}

TEST(FloatConversion, NarrowingLoopsMatchTheScalarRounding) {
  // Bit patterns over every exponent, with the mantissa edges that decide
  // rounding, NaNs, infinities and subnormals.
  std::vector<uint32_t> bits;
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t exp = 0; exp < 256; ++exp)
      for (uint32_t mant : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0xfffu, 0x1000u,
                            0x1001u, 0x3000u, 0x400000u, 0x7fffffu})
        bits.push_back(sign | (exp << 23) | mant);
  std::vector<float> in(bits.size());
  std::memcpy(in.data(), bits.data(), bits.size() * 4);
  std::vector<uint16_t> bf(in.size()), half(in.size());
  convertElements(in.data(), DType::F32, bf.data(), DType::BF16, in.size(), "w");
  convertElements(in.data(), DType::F32, half.data(), DType::F16, in.size(), "w");
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(bf[i], floatToBf16Bits(in[i])) << std::hex << bits[i];
    EXPECT_EQ(half[i], floatToHalfBits(in[i])) << std::hex << bits[i];
  }
}

} // namespace
