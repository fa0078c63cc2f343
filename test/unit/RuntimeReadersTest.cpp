//===- RuntimeReadersTest.cpp - the readers of shard-run's input files ----===//
//
// The .npy, .npz, TensorProto and --gemm-autotune-file readers, and what
// the fuzzers (tools/runtime-fuzzers) and the mutated-artifact test found in
// them and in the artifact reader: each damaged input is refused with a
// RuntimeError that names the file and the problem.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Artifact.h"
#include "shardflow/Runtime/GemmAutotuneFile.h"
#include "shardflow/Runtime/NpyIO.h"
#include "shardflow/Runtime/TensorProtoIO.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace shardflow::runtime;

namespace {

/// Expects `read` to throw a RuntimeError whose message holds every phrase.
void expectRefused(const std::function<void()> &read, std::vector<std::string> phrases) {
  try {
    read();
    ADD_FAILURE() << "accepted; expected: " << phrases.front();
  } catch (const RuntimeError &e) {
    for (const std::string &phrase : phrases)
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos)
          << "'" << phrase << "' not in: " << e.what();
  }
}

HostTensor tensor(DType dtype, std::vector<int64_t> shape, size_t bytes) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(bytes);
  for (size_t i = 0; i < bytes; ++i)
    t.bytes[i] = uint8_t(i * 13 + 1);
  return t;
}

TEST(Npy, RoundTripsEveryShapeKind) {
  for (const HostTensor &t :
       {tensor(DType::F32, {2, 3}, 24), tensor(DType::I64, {}, 8), tensor(DType::U8, {0, 4}, 0),
        tensor(DType::I1, {5}, 5)}) {
    HostTensor back = parseNpy(serializeNpy(HostTensor(t).view()), "t.npy");
    EXPECT_EQ(back.dtype, t.dtype);
    EXPECT_EQ(back.shape, t.shape);
    EXPECT_EQ(back.bytes, t.bytes);
  }
}

TEST(Npz, ReadsWhatItWrites) {
  HostTensor a = tensor(DType::F32, {2}, 8), b = tensor(DType::I32, {1, 1}, 4);
  std::string path = ::testing::TempDir() + "/readers-test.npz";
  writeNpz(path, {{"a", a.view()}, {"b", b.view()}});
  auto members = readNpz(path);
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[0].first, "a");
  EXPECT_EQ(members[0].second.bytes, a.bytes);
  EXPECT_EQ(members[1].first, "b");
  EXPECT_EQ(members[1].second.shape, (std::vector<int64_t>{1, 1}));
  std::remove(path.c_str());
}

TEST(TensorProto, RoundTripsNameTypeAndBytes) {
  HostTensor t = tensor(DType::BF16, {3, 1}, 6);
  std::string name;
  HostTensor back =
      parseTensorProto(serializeTensorProto("x.y", t.view()), "t.pb", &name);
  EXPECT_EQ(name, "x.y");
  EXPECT_EQ(back.dtype, DType::BF16);
  EXPECT_EQ(back.shape, t.shape);
  EXPECT_EQ(back.bytes, t.bytes);
}

TEST(AutotuneFile, RoundTripsAndRefusesDamage) {
  AutotuneRecords r;
  r.gpu = "NVIDIA H100 80GB HBM3";
  r.cublasLtVersion = "130100";
  r.choices["f32:8x8x8:nn"] = {2, 8};
  r.choices["bf16:16x8x4:nt:bias"] = {0, 1};
  AutotuneRecords back = parseAutotuneRecords(formatAutotuneRecords(r), "t.autotune");
  EXPECT_EQ(back.gpu, r.gpu);
  EXPECT_EQ(back.cublasLtVersion, r.cublasLtVersion);
  EXPECT_EQ(back.choices, r.choices);
  std::string head = std::string(kAutotuneMagic) + "\n";
  expectRefused([&] { parseAutotuneRecords("", "t.autotune"); },
                {"t.autotune, line 1", "not a file of GEMM choices"});
  expectRefused([&] { parseAutotuneRecords(head + "gemm k 3 3\n", "t.autotune"); },
                {"line 2", "CHOSEN < CANDIDATES"});
  expectRefused([&] { parseAutotuneRecords(head + "tile 3\n", "t.autotune"); },
                {"line 2", "unknown line 'tile 3'"});
}

} // namespace
