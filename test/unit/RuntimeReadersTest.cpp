//===- RuntimeReadersTest.cpp - the readers of shard-run's input files ----===//
//
// The .npy, .npz, TensorProto and --gemm-autotune-file readers, and what
// the fuzzers (tools/runtime-fuzzers) and the mutated-artifact test
// (python/tests/test_artifact_mutations.py) found in them and in the
// artifact reader: each damaged input is refused with a RuntimeError that
// names the file, the line or field, and the problem. One case per bug.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/GemmAutotuneFile.h"
#include "shardflow/Runtime/Format/NpyIO.h"
#include "shardflow/Runtime/Format/TensorProtoIO.h"
#include "shardflow/Runtime/Core/WeightLoader.h"

#include "ElementwiseSupport.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
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

/// An .npy file of `header` (numpy's dictionary) and `data`, version 1.
std::string npy(const std::string &header, const std::string &data) {
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  uint16_t n = uint16_t(header.size());
  out.append(reinterpret_cast<const char *>(&n), 2);
  return out + header + data;
}

void put16(std::string &s, uint16_t v) { s.append(reinterpret_cast<const char *>(&v), 2); }
void put32(std::string &s, uint32_t v) { s.append(reinterpret_cast<const char *>(&v), 4); }

/// A zip local header as numpy.savez writes it: stored, sizes 0xFFFFFFFF
/// and a zip64 extra field `extra` (its id and length included).
std::string zip64Member(const std::string &name, const std::string &extra) {
  std::string out;
  put32(out, 0x04034b50);
  put16(out, 45);
  put16(out, 0);
  put16(out, 0);
  put16(out, 0);
  put16(out, 0x21);
  put32(out, 0);
  put32(out, 0xFFFFFFFFu);
  put32(out, 0xFFFFFFFFu);
  put16(out, uint16_t(name.size()));
  put16(out, uint16_t(extra.size()));
  return out + name + extra;
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

TEST(Npy, ElementCountsThatOverflowAreRefused) {
  // Found by the .npy fuzzer: 2^32 x 2^32 elements overflowed the byte
  // count, which then matched an empty payload.
  expectRefused(
      [] {
        parseNpy(npy("{'descr': '<i8', 'fortran_order': False, "
                     "'shape': (4294967296, 4294967296), }\n",
                     ""),
                 "big.npy");
      },
      {"big.npy", "shape (4294967296, 4294967296) has more than 2^40 elements"});
  expectRefused(
      [] {
        parseNpy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2x, 1), }\n",
                     std::string(8, '\0')),
                 "typo.npy");
      },
      {"typo.npy", "bad shape (2x, 1)"});
  expectRefused(
      [] {
        parseNpy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': 7, }\n",
                     std::string(28, '\0')),
                 "bare.npy");
      },
      {"bare.npy", "bad shape 7"});
}

TEST(Npz, Zip64FieldsPastTheFileAreRefused) {
  // Found by the .npz fuzzer: the zip64 extra field was read past the end
  // of the file (its length, then its size, unchecked).
  std::string extra;
  put16(extra, 1);
  put16(extra, 16);
  // The extra field holds its own header only: the sizes it announces are
  // not there.
  std::string shortField = zip64Member("x.npy", extra);
  expectRefused([&] { parseNpz(shortField, "short.npz"); },
                {"short.npz", "malformed zip64 member 'x.npy'"});
  // The header announces 20 bytes of extra field; the file ends first.
  std::string cut = shortField;
  cut[28] = 20;
  expectRefused([&] { parseNpz(cut, "cut.npz"); }, {"cut.npz", "truncated zip header"});
  std::string sizes;
  put16(sizes, 1);
  put16(sizes, 16);
  put32(sizes, 0xFFFFFFF0u); // a size near 2^64
  put32(sizes, 0xFFFFFFFFu);
  put32(sizes, 0);
  put32(sizes, 0);
  expectRefused([&] { parseNpz(zip64Member("x.npy", sizes), "huge.npz"); },
                {"huge.npz", "truncated member 'x.npy'"});
}

const std::string kHead = "shardflow-artifact 4\ntarget cpu\nworld-size 1\narena 64\n";

void expectArtifactRefused(const std::string &body, std::vector<std::string> phrases) {
  phrases.insert(phrases.begin(), "t.shard:");
  expectRefused([&] { parseArtifact(kHead + body + "end\n", "t.shard"); }, phrases);
}

TEST(ArtifactDamage, ConstantsCarryTheirBytes) {
  // Found by the artifact fuzzer and the mutated artifacts: a constant
  // line without data= gave the executor a null pointer (SIGSEGV).
  expectArtifactRefused("buffer 0 constant f32 2\n",
                        {":5:", "constant buffer 0 has no data= (8 bytes)"});
  expectArtifactRefused("buffer 0 arena f32 2 offset=0 data=0000000000000000\n",
                        {":5:", "only constants have data="});
}

TEST(ArtifactDamage, LinesOfBlanksAreSkipped) {
  // Found by the artifact fuzzer: a line of spaces or tabs had no first
  // word, which was read anyway.
  Artifact a = parseArtifact(kHead + " \t\v\nbuffer 0 arena f32 2 offset=0\n  \nend\n",
                             "t.shard");
  EXPECT_EQ(a.buffers.size(), 1u);
}

TEST(ArtifactDamage, SettingsComeOnceBeforeTheBuffers) {
  // Found by the artifact fuzzer: an arena line after the buffers shrank
  // the arena they had been checked against.
  expectArtifactRefused("buffer 0 arena f32 4 offset=48\narena 5\n",
                        {":6:", "'arena' line after the buffers (the settings come first)"});
  expectRefused(
      [] {
        parseArtifact("shardflow-artifact 4\nworld-size 2\nworld-size 1\nend\n", "t.shard");
      },
      {"t.shard:3:", "a second 'world-size' line"});
}

TEST(ArtifactDamage, SizesThatWouldOverflowAreRefused) {
  expectArtifactRefused("buffer 0 arena f32 1048576x1048576x2 offset=0\n",
                        {"shape '1048576x1048576x2' has more than 2^40 elements"});
  expectArtifactRefused("buffer 0 arena f32 2x offset=0\n", {"bad shape '2x'"});
  expectArtifactRefused("buffer 0 arena f32 4 offset=9223372036854775800\n",
                        {"buffer lies outside the arena"});
  expectRefused(
      [] { parseArtifact("shardflow-artifact 4\narena 9223372036854775800\nend\n", "t.shard"); },
      {"t.shard:2:", "arena size 9223372036854775800 is not between 0 and 2^48 bytes"});
  // A slice start so large that start + size overflowed, and passed.
  expectArtifactRefused("buffer 0 weight f32 2 name=w storage=external file=m offset=0 "
                        "global=4 starts=9223372036854775807\n",
                        {"weight 'w': a slice lies outside the global shape"});
  expectArtifactRefused("buffer 0 weight f32 2 name=w storage=external file=m offset=-8\n",
                        {"weight 'w' has a negative offset"});
  expectArtifactRefused("buffer 0 input f32 4 name=x\nbuffer 1 arena f32 2 offset=0\n"
                        "collective local_slice in=0 out=1 starts=is:9223372036854775807\n",
                        {"the block of rank 0 leaves the input in dimension 0"});
}

TEST(ArtifactDamage, NumbersOutOfTheirTypesRangeAreRefused) {
  // Read into an int, these wrapped to a valid rank count or index.
  expectRefused(
      [] { parseArtifact("shardflow-artifact 4\nworld-size 4294967297\nend\n", "t.shard"); },
      {"t.shard:2:", "world size 4294967297 is not between 1 and 1048576"});
  std::string buffers = "buffer 0 input f32 2 name=x\nbuffer 1 arena f32 2 offset=0\n";
  expectArtifactRefused(buffers + "output y 4294967296\n", {"bad buffer index '4294967296'"});
  expectArtifactRefused(buffers + "kernel neg in=4294967296 out=1\n",
                        {"bad buffer index '4294967296'"});
  expectArtifactRefused(buffers + "buffer 2 view f32 2 source=4294967296\n",
                        {"bad source '4294967296'"});
  expectArtifactRefused("buffer 0 weight f32 2 name=w storage=external file=m offset=0 "
                        "crc32c=-1\n",
                        {"bad crc32c '-1'"});
}

TEST(ArtifactDamage, ProgramsWriteOnlyTheArena) {
  // Found by the mutated artifacts: a kernel writing a weight wrote into
  // its read-only mapping (SIGSEGV).
  std::string buffers = "buffer 0 input f32 2 name=x\n"
                        "buffer 1 weight f32 2 name=w storage=external file=m offset=0\n"
                        "buffer 2 constant f32 2 data=0000000000000000\n"
                        "buffer 3 view f32 2 source=2\n"
                        "buffer 4 arena f32 2 offset=0\n"
                        "buffer 5 view f32 2 source=4\n";
  expectArtifactRefused(buffers + "kernel neg in=0 out=1 node=s:n\n",
                        {"kernel 'neg' (ONNX node 'n', instruction 0) writes buffer 1, a "
                         "weight (read-only)"});
  expectArtifactRefused(buffers + "kernel neg in=0 out=3\n",
                        {"writes buffer 3, a view of a constant (read-only)"});
  expectArtifactRefused(buffers + "collective all_reduce in=4 out=0 groups=is:0 "
                                  "group_size=i:1\n",
                        {"collective 'all_reduce' (instruction 0) writes buffer 0, an input "
                         "(read-only)"});
  Artifact a = parseArtifact(kHead + buffers + "kernel neg in=0 out=5\nend\n", "t.shard");
  EXPECT_EQ(a.program.size(), 1u);
}

TEST(ArtifactDamage, ArenaBuffersAreAlignedToTheirElements) {
  // Found by the mutated artifacts under UndefinedBehaviorSanitizer: an
  // arena offset of 1 made every kernel's float access misaligned.
  expectArtifactRefused("buffer 0 arena f32 2 offset=1\n",
                        {"arena buffer 0 at offset 1 is not aligned to its 4-byte elements"});
  Artifact a = parseArtifact(kHead + "buffer 0 arena i8 2 offset=1\nend\n", "t.shard");
  EXPECT_EQ(a.buffers[0].offset, 1);
}

TEST(ArtifactDamage, ArenaBuffersHaveAnOffset) {
  // Found by the mutated artifacts: without offset= an arena buffer sat at
  // 0, over other buffers.
  expectArtifactRefused("buffer 0 arena f32 2\n", {"arena buffer 0 has no offset="});
}

TEST(ArtifactDamage, KernelOutputsDoNotOverlapTheirOperands) {
  // Found by the mutated artifacts under AddressSanitizer: a kernel's
  // output over its input (memcpy with overlapping ranges).
  std::string buffers = "buffer 0 arena f32 4 offset=0\nbuffer 1 arena f32 2 offset=8\n"
                        "buffer 2 view f32 4 source=0\nbuffer 3 arena f32 2 offset=16\n";
  expectArtifactRefused(buffers + "kernel neg in=2 out=1\n",
                        {"kernel 'neg' (instruction 0): output buffer 1 overlaps input buffer 2"});
  expectArtifactRefused(buffers + "kernel split in=3 out=1,0 axis=i:0\n",
                        {"output buffers 1 and 0 overlap in the arena"});
  // Collectives may work in place; disjoint buffers are fine.
  Artifact a = parseArtifact(kHead + buffers +
                                 "collective all_reduce in=1 out=1 groups=is:0 group_size=i:1\n"
                                 "kernel neg in=1 out=3\nend\n",
                             "t.shard");
  EXPECT_EQ(a.program.size(), 2u);
}

TEST(WeightLoaderAlignment, WeightsAtOddOffsetsAreCopiedToAlignedMemory) {
  // Found by the mutated artifacts under UndefinedBehaviorSanitizer: a
  // weight mapped in place at an odd file offset (damaged, or inside a
  // protobuf) reached the kernels misaligned.
  std::string dir = ::testing::TempDir();
  std::vector<float> values = {1.5f, -2.0f, 3.25f};
  {
    std::ofstream f(dir + "/odd.data", std::ios::binary);
    f.put('x');
    f.write(reinterpret_cast<const char *>(values.data()), 12);
  }
  Artifact art;
  art.modelDir = dir;
  BufferDesc b;
  b.kind = BufferDesc::Kind::Weight;
  b.name = "w";
  b.storage = "external";
  b.file = "odd.data";
  b.fileOffset = 1;
  b.shape = {3};
  art.buffers.push_back(b);
  WeightLoader loader(art, "", 0, false);
  WeightBytes w = loader.load(0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data) % alignof(float), 0u);
  EXPECT_EQ(std::memcmp(w.data, values.data(), 12), 0);
  std::remove((dir + "/odd.data").c_str());
}

TEST(ArtifactDamage, CollectiveParametersOfTheWrongTypeNameTheLine) {
  expectArtifactRefused("buffer 0 arena f32 2 offset=0\n"
                        "collective all_reduce in=0 out=0 groups=is:0 group_size=f:1\n",
                        {":6:", "collective all_reduce: parameter 'group_size' is not an integer"});
}

TEST(KernelMath, ExpOfNaNIsNaN) {
  // Found by the mutated artifacts under UndefinedBehaviorSanitizer: a NaN
  // (here a constant's damaged bytes) was converted to an integer.
  volatile float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(cpu::ew::fastExp(float(nan))));
  EXPECT_TRUE(std::isnan(cpu::ew::fastTanh(float(nan))));
  EXPECT_FLOAT_EQ(cpu::ew::fastExp(0.0f), 1.0f);
}

} // namespace
