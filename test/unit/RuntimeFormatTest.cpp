//===- RuntimeFormatTest.cpp - checksums, weight slices, artifact lines ---===//

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/Checksum.h"
#include "shardflow/Runtime/Core/Profile.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <sstream>
#include <vector>

using namespace shardflow::runtime;

namespace {

TEST(Checksum, KnownVectors) {
  // The CRC-32C check value (RFC 3720, B.4) and iSCSI's test patterns.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32);
  std::iota(up.begin(), up.end(), uint8_t(0));
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), up.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Checksum, ContinuesAcrossPieces) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = uint8_t(i * 7 + 3);
  uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    uint32_t piece = crc32c(data.data(), cut);
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, piece), whole) << cut;
  }
}

/// The element offsets a slice's runs cover, in order.
std::vector<int64_t> covered(const BufferDesc &b, int rank) {
  std::vector<int64_t> elems;
  forEachWeightRun(b, rank, [&](size_t offset, size_t length) {
    for (size_t i = 0; i < length / 4; ++i)
      elems.push_back(int64_t(offset / 4 + i));
  });
  return elems;
}

BufferDesc sliced(std::vector<int64_t> global, std::vector<int64_t> local,
                  std::vector<std::vector<int64_t>> starts) {
  BufferDesc b;
  b.kind = BufferDesc::Kind::Weight;
  b.dtype = DType::F32;
  b.globalShape = std::move(global);
  b.shape = std::move(local);
  b.starts = std::move(starts);
  return b;
}

TEST(WeightRuns, WholeWeightIsOneRun) {
  BufferDesc b;
  b.dtype = DType::F32;
  b.shape = {3, 5};
  int runs = 0;
  forEachWeightRun(b, 0, [&](size_t offset, size_t length) {
    EXPECT_EQ(offset, 0u);
    EXPECT_EQ(length, 60u);
    ++runs;
  });
  EXPECT_EQ(runs, 1);
}

TEST(WeightRuns, RowSplitIsContiguous) {
  BufferDesc b = sliced({4, 3}, {2, 3}, {{0, 0}, {2, 0}});
  int runs = 0;
  forEachWeightRun(b, 1, [&](size_t offset, size_t length) {
    EXPECT_EQ(offset, 6u * 4);
    EXPECT_EQ(length, 6u * 4);
    ++runs;
  });
  EXPECT_EQ(runs, 1);
}

TEST(WeightRuns, ColumnSplitVisitsEveryElementOfTheBlock) {
  // A [2, 3, 4] block at [1, 1, 2] of a [3, 5, 8] tensor, against the
  // row-major offsets computed directly.
  BufferDesc b = sliced({3, 5, 8}, {2, 3, 4}, {{0, 0, 0}, {1, 1, 2}});
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k)
        want.push_back((1 + i) * 40 + (1 + j) * 8 + (2 + k));
  EXPECT_EQ(covered(b, 1), want);
  int runs = 0;
  forEachWeightRun(b, 1, [&](size_t, size_t length) {
    EXPECT_EQ(length, 16u);
    ++runs;
  });
  EXPECT_EQ(runs, 6);
}

TEST(WeightRuns, PermutedSliceRunsInStoredOrder) {
  // The same [2, 3, 4] block, held permuted as [4, 2, 3] (buffer dimension
  // i is stored dimension perm[i]): the file is read in its own order.
  BufferDesc b = sliced({3, 5, 8}, {4, 2, 3}, {{0, 0, 0}, {1, 1, 2}});
  b.permutation = {2, 0, 1};
  EXPECT_EQ(b.storedShape(), (std::vector<int64_t>{2, 3, 4}));
  BufferDesc plain = sliced({3, 5, 8}, {2, 3, 4}, {{0, 0, 0}, {1, 1, 2}});
  EXPECT_EQ(covered(b, 1), covered(plain, 1));
}

/// Runs as (element offset or -1 for zeros, element count).
std::vector<std::pair<int64_t, int64_t>> runsOf(const BufferDesc &b, int rank) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  forEachWeightRun(b, rank, [&](size_t offset, size_t length) {
    runs.emplace_back(offset == kZeroRun ? -1 : int64_t(offset / 4), int64_t(length / 4));
  });
  return runs;
}

TEST(WeightRuns, ZeroPaddedBlocksEndInZeroRuns) {
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  // Rows: a [5, 3] tensor padded to 6 rows in blocks of 2; the last block
  // has one row of the tensor, then zeros.
  BufferDesc rows = sliced({5, 3}, {2, 3}, {{0, 0}, {2, 0}, {4, 0}});
  rows.zeroPadded = true;
  EXPECT_EQ(runsOf(rows, 1), (Runs{{6, 6}}));
  EXPECT_EQ(runsOf(rows, 2), (Runs{{12, 3}, {-1, 3}}));
  // Columns: a [2, 5] tensor padded to 6 columns; per row, one element
  // then one zero.
  BufferDesc cols = sliced({2, 5}, {2, 2}, {{0, 0}, {0, 2}, {0, 4}});
  cols.zeroPadded = true;
  EXPECT_EQ(runsOf(cols, 2), (Runs{{4, 1}, {-1, 1}, {9, 1}, {-1, 1}}));
  // A block past the tensor in an outer dimension as well: its rows past
  // the tensor are zeros whole.
  BufferDesc both = sliced({3, 5}, {2, 2}, {{2, 4}});
  both.zeroPadded = true;
  EXPECT_EQ(runsOf(both, 0), (Runs{{14, 1}, {-1, 1}, {-1, 2}}));
}

TEST(Artifact, SlicesChecksumsAndCollectivesRoundTrip) {
  Artifact a;
  a.worldSize = 2;
  a.arenaBytes = 64;
  BufferDesc w = sliced({4, 2}, {2, 2}, {{0, 0}, {2, 0}});
  w.name = "w";
  w.storage = "external";
  w.file = "m.data";
  w.crc32c = {0x01234567u, 0x89abcdefu};
  a.buffers.push_back(w);
  BufferDesc arena;
  arena.shape = {2, 2};
  a.buffers.push_back(arena);
  Instruction c;
  c.collective = true;
  c.kernel = "all_reduce";
  c.inputs = {0};
  c.outputs = {1};
  c.params.set("groups", std::vector<int64_t>{0, 1});
  c.params.set("group_size", int64_t(2));
  c.params.set("reduction", std::string("max"));
  a.program.push_back(c);
  a.outputs.emplace_back("y", 1);
  std::ostringstream os;
  writeArtifact(a, os);
  std::string text = os.str();
  EXPECT_NE(text.find("global=4x2 starts=0,0;2,0 crc32c=01234567;89abcdef"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("collective all_reduce in=0 out=1"), std::string::npos) << text;
  Artifact b = parseArtifact(text, "t.shard");
  ASSERT_EQ(b.buffers.size(), 2u);
  EXPECT_EQ(b.buffers[0].globalShape, w.globalShape);
  EXPECT_EQ(b.buffers[0].starts, w.starts);
  EXPECT_EQ(b.buffers[0].crc32c, w.crc32c);
  ASSERT_EQ(b.program.size(), 1u);
  EXPECT_TRUE(b.program[0].collective);
  EXPECT_EQ(b.program[0].params.getString("reduction", ""), "max");
}

void expectRejected(const std::string &text, const std::string &phrase) {
  try {
    parseArtifact(text, "t.shard");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(Artifact, RejectsBadSlicesAndCollectives) {
  std::string head = "shardflow-artifact 4\ntarget cpu\nworld-size 2\narena 64\n";
  std::string weight = "buffer 0 weight f32 2x2 name=w storage=external file=m offset=0 size=16";
  expectRejected(head + weight + " global=4x2 starts=0,0\nend\n",
                 "1 slice starts for a world of 2 ranks");
  expectRejected(head + weight + " global=4x2 starts=0,0;3,0\nend\n",
                 "a slice lies outside the global shape");
  expectRejected(head + weight + " crc32c=1;2\nend\n", "2 checksums, expected 1");
  // Zero padding lets a slice reach past the tensor, not start past it,
  // and needs a slice.
  Artifact padded =
      parseArtifact(head + weight + " global=3x2 starts=0,0;2,0 padded=zeros\nend\n", "t.shard");
  EXPECT_TRUE(padded.buffers[0].zeroPadded);
  std::ostringstream os;
  writeArtifact(padded, os);
  EXPECT_NE(os.str().find("global=3x2 starts=0,0;2,0 padded=zeros"), std::string::npos)
      << os.str();
  expectRejected(head + weight + " global=3x2 starts=0,0;2,0\nend\n",
                 "(and the weight is not padded=zeros)");
  expectRejected(head + weight + " global=3x2 starts=0,0;4,0 padded=zeros\nend\n",
                 "a slice lies outside the global shape");
  expectRejected(head + weight + " padded=zeros\nend\n", "is padded=zeros but not sliced");
  expectRejected(head + weight + " global=3x2 starts=0,0;2,0 padded=ones\nend\n",
                 "padded must be 'zeros'");
  expectRejected(head + weight + " crc32c=xyz\nend\n", "bad crc32c");
  std::string arena = "buffer 1 arena f32 2x2 offset=0\n";
  expectRejected(head + weight + "\n" + arena +
                     "collective all_reduce in=0 out=1 groups=is:0,2 group_size=i:2\nend\n",
                 "rank 2 in 'groups' is outside the world of 2");
  expectRejected(head + weight + "\n" + arena +
                     "collective all_reduce in=0 out=1 groups=is:0,0 group_size=i:2\nend\n",
                 "appears in its groups twice");
  expectRejected(head + weight + "\n" + arena +
                     "collective broadcast_all in=0 out=1\nend\n",
                 "unknown collective 'broadcast_all'");
  expectRejected(head + weight + "\n" + arena + "collective send in=0 out= peers=is:1\nend\n",
                 "needs one peer per rank");
}

TEST(Artifact, LocalSliceStartsAreCheckedAgainstItsBuffers) {
  std::string head = "shardflow-artifact 4\ntarget cpu\nworld-size 2\narena 64\n"
                     "buffer 0 input f32 4x6 name=x\nbuffer 1 arena f32 2x3 offset=0\n";
  Artifact a = parseArtifact(
      head + "collective local_slice in=0 out=1 starts=is:0,0,2,3\noutput y 1\nend\n",
      "t.shard");
  ASSERT_EQ(a.program.size(), 1u);
  EXPECT_TRUE(a.program[0].collective);
  EXPECT_EQ(a.program[0].params.getInts("starts"), (std::vector<int64_t>{0, 0, 2, 3}));
  expectRejected(head + "collective local_slice in=0 out=1 starts=is:0,0\nend\n",
                 "needs starts=is: with 2 indices for each of the 2 ranks");
  expectRejected(head + "collective local_slice in=0 out=1\nend\n", "needs starts=is:");
  expectRejected(head + "collective local_slice in=0 out=1 starts=is:0,0,2,4\nend\n",
                 "the block of rank 1 leaves the input in dimension 1");
  expectRejected(head + "collective local_slice in=0,0 out=1 starts=is:0,0,2,3\nend\n",
                 "needs one input and one output");
}

TEST(Artifact, Base64RoundTripsEveryLength) {
  for (size_t n = 0; n < 70; ++n) {
    std::vector<uint8_t> bytes(n);
    for (size_t i = 0; i < n; ++i)
      bytes[i] = uint8_t(i * 37 + 11);
    std::string text = encodeBase64(bytes);
    EXPECT_EQ(text.size(), (n + 2) / 3 * 4);
    std::vector<uint8_t> back;
    ASSERT_TRUE(decodeBase64(text, back)) << text;
    EXPECT_EQ(back, bytes);
  }
  // RFC 4648's test vectors.
  EXPECT_EQ(encodeBase64({'f', 'o', 'o', 'b'}), "Zm9vYg==");
  EXPECT_EQ(encodeBase64({'f', 'o', 'o', 'b', 'a'}), "Zm9vYmE=");
  std::vector<uint8_t> out;
  EXPECT_FALSE(decodeBase64("Zm9", out));
  EXPECT_FALSE(decodeBase64("Zm=v", out));
  EXPECT_FALSE(decodeBase64("Z!9v", out));
}

TEST(Artifact, DeviceModulesAndSourceTypesRoundTrip) {
  Artifact a;
  a.target = "cuda";
  BufferDesc w;
  w.kind = BufferDesc::Kind::Weight;
  w.dtype = DType::BF16;
  w.sourceDType = DType::F32;
  w.shape = {4, 2};
  w.name = "w";
  w.storage = "external";
  w.file = "m.data";
  a.buffers.push_back(w);
  a.modules.push_back({"kernels", "sm_90", "cubin", {0x7f, 'E', 'L', 'F', 0, 1}});
  a.modules.push_back({"kernels", "compute_80", "ptx", {'/', '/', '\n'}});
  a.outputs.emplace_back("w", 0);
  std::ostringstream os;
  writeArtifact(a, os);
  // The file holds f32: 8 elements of 4 bytes.
  EXPECT_NE(os.str().find("size=32 source-dtype=f32"), std::string::npos) << os.str();
  Artifact b = parseArtifact(os.str(), "t.shard");
  ASSERT_EQ(b.modules.size(), 2u);
  EXPECT_EQ(b.modules[0].arch, "sm_90");
  EXPECT_EQ(b.modules[0].data, a.modules[0].data);
  EXPECT_EQ(b.modules[1].format, "ptx");
  ASSERT_TRUE(b.buffers[0].sourceDType.has_value());
  EXPECT_EQ(*b.buffers[0].sourceDType, DType::F32);
  EXPECT_EQ(b.buffers[0].fileBytes(), 32u);
  EXPECT_EQ(b.buffers[0].bytes(), 16u);

  std::string head = "shardflow-artifact 4\ntarget cuda\nworld-size 1\narena 0\n";
  expectRejected(head + "module k arch=sm_90 format=elf data=AAAA\nend\n", "format 'elf'");
  expectRejected(head + "module k arch=sm_90 format=cubin data=AA*A\nend\n", "not base64");
  expectRejected(head + "buffer 0 weight bf16 2 name=w storage=external file=m offset=0 size=4 "
                        "source-dtype=f32\nend\n",
                 "weight size 4 does not match its type");
}

TEST(Artifact, ScaleRoundTripsAndIsChecked) {
  std::string head = "shardflow-artifact 4\ntarget cpu\nworld-size 1\narena 0\n";
  std::string weight = "buffer 0 weight bf16 8 name=b storage=external file=m offset=0 size=32 "
                       "source-dtype=f32";
  Artifact a = parseArtifact(head + weight + " scale=0.5\nend\n", "t.shard");
  ASSERT_TRUE(a.buffers[0].scale);
  EXPECT_EQ(*a.buffers[0].scale, 0.5);
  a.buffers[0].scale = 1.0 / 3.0;
  std::ostringstream os;
  writeArtifact(a, os);
  EXPECT_NE(os.str().find("source-dtype=f32 scale=0.33333333333333331"), std::string::npos)
      << os.str();
  EXPECT_EQ(*parseArtifact(os.str(), "t.shard").buffers[0].scale, 1.0 / 3.0);
  expectRejected(head + weight + " scale=0\nend\n", "bad scale '0'");
  expectRejected(head + weight + " scale=half\nend\n", "bad scale 'half'");
  expectRejected(head + "buffer 0 weight i64 4 name=b storage=external file=m offset=0 "
                        "size=32 scale=2\nend\n",
                 "has a scale but holds i64 elements");
  expectRejected(head + "buffer 0 arena f32 4 offset=0 scale=2\nend\n",
                 "only weights have a scale");
}

TEST(Artifact, OutputColumnsRoundTripAndAreChecked) {
  // A padded GEMM result returned as it is: 5 of each row's 8 elements.
  std::string head = "shardflow-artifact 4\ntarget cuda\nworld-size 1\narena 256\n"
                     "buffer 0 arena f32 2x3x8 offset=0\nbuffer 1 arena f32 4 offset=192\n";
  Artifact a = parseArtifact(head + "output y 0 columns=5\noutput z 1\nend\n", "t.shard");
  EXPECT_EQ(outputColumnsOf(a, 0), 5);
  EXPECT_EQ(outputColumnsOf(a, 1), 0);
  EXPECT_EQ(outputShape(a, 0), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(outputShape(a, 1), (std::vector<int64_t>{4}));
  std::ostringstream os;
  writeArtifact(a, os);
  EXPECT_NE(os.str().find("output y 0 columns=5\noutput z 1\n"), std::string::npos) << os.str();
  EXPECT_EQ(parseArtifact(os.str(), "t.shard").outputColumns, a.outputColumns);
  expectRejected(head + "output y 0 columns=8\nend\n",
                 "must be positive and below the buffer's last dimension");
  expectRejected(head + "output y 0 columns=0\nend\n", "must be positive");
  expectRejected(head + "output y 0 rows=5\nend\n", "unknown output field 'rows=5'");
  expectRejected("shardflow-artifact 4\ntarget cpu\nworld-size 1\narena 256\n"
                 "buffer 0 arena f32 2x3x8 offset=0\noutput y 0 columns=5\nend\n",
                 "needs target cuda");
}

TEST(Artifact, PermutationRoundTripsAndIsChecked) {
  std::string head = "shardflow-artifact 4\ntarget cuda\nworld-size 2\narena 0\n";
  Artifact a = parseArtifact(head + "buffer 0 weight f32 5x16 name=w storage=external file=m "
                                    "offset=0 size=320 permutation=1,0 global=16x10 "
                                    "starts=0,0;0,5\nend\n",
                             "t.shard");
  EXPECT_EQ(a.buffers[0].permutation, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(a.buffers[0].storedShape(), (std::vector<int64_t>{16, 5}));
  std::ostringstream os;
  writeArtifact(a, os);
  EXPECT_NE(os.str().find("size=320 permutation=1,0 global=16x10"), std::string::npos) << os.str();
  // The slice is checked in the stored order: columns 6..10 leave [16, 10].
  expectRejected(head + "buffer 0 weight f32 5x16 name=w storage=external file=m offset=0 "
                        "size=320 permutation=1,0 global=16x10 starts=0,0;0,6\nend\n",
                 "a slice lies outside the global shape");
  expectRejected(head + "buffer 0 weight f32 5x16 name=w storage=external file=m offset=0 "
                        "size=320 permutation=1,2\nend\n",
                 "permutation 1,2 is not a permutation of its 2 dimensions");
  expectRejected(head + "buffer 0 arena f32 4 offset=0 permutation=0\nend\n",
                 "only weights have a permutation");
}

} // namespace

Instruction profiled(std::string kernel, std::vector<std::pair<std::string, ParamValue>> params,
                     bool collective = false) {
  Instruction inst;
  inst.kernel = std::move(kernel);
  inst.collective = collective;
  for (auto &[name, value] : params)
    inst.params.set(name, value);
  return inst;
}

TEST(Profile, KindsNameEpiloguesResidualsAndGeneratedFunctions) {
  EXPECT_EQ(profileKind(profiled("matmul", {})), "matmul");
  EXPECT_EQ(profileKind(profiled("matmul", {{"epilogue", std::string("gelu_bias")}})),
            "matmul gelu_bias");
  EXPECT_EQ(profileKind(profiled("matmul", {{"epilogue", std::string("bias")},
                                            {"residual", int64_t(1)}})),
            "matmul bias +C");
  EXPECT_EQ(profileKind(profiled("launch", {{"function", std::string("k12_add_rms")}})),
            "generated add_rms");
  // Not the k<N>_ pattern: the whole name.
  EXPECT_EQ(profileKind(profiled("launch", {{"function", std::string("kx_relu")}})),
            "generated kx_relu");
  EXPECT_EQ(profileKind(profiled("all_reduce", {}, /*collective=*/true)), "all_reduce");
}

TEST(Profile, ReportSumsKindsAveragesRunsAndRanksOperations) {
  Artifact a;
  a.program = {profiled("matmul", {{"node", std::string("/fc1/MatMul")}}),
               profiled("launch", {{"function", std::string("k0_gelu")}}),
               profiled("matmul", {{"node", std::string("/fc2/MatMul")}}),
               profiled("all_reduce", {}, true)};
  ProfileTotals totals;
  totals.add({0.004, 0.001, 0.002, 0.003}, 0.011);
  totals.add({0.006, 0.001, 0.002, 0.001}, 0.009);
  EXPECT_EQ(totals.runs, 2);
  std::string report = formatProfile(a, totals, "test clock", 3);
  auto has = [&](const std::string &s) {
    EXPECT_NE(report.find(s), std::string::npos) << "no '" << s << "' in\n" << report;
  };
  has("mean of 2 runs (test clock)");
  has("  program                  10.000 ms\n");
  has("  operations, summed       10.000 ms\n");
  // The all_reduce is communication; the rest computes, 8 of 10 ms.
  has("    compute                 8.000 ms  (80.0% of the program)\n");
  has("    communication           2.000 ms\n");
  // matmul: (0.004 + 0.006 + 0.002 + 0.002) / 2 = 7 ms of 10: first.
  has("  matmul              2        7.000   70.0%\n");
  has("  all_reduce          1        2.000   20.0%\n");
  has("  generated gelu      1        1.000   10.0%\n");
  EXPECT_LT(report.find("  matmul "), report.find("  all_reduce "));
  EXPECT_LT(report.find("  all_reduce "), report.find("  generated gelu "));
  // The 3 slowest: the first matmul, then the second matmul and the
  // all_reduce (2 ms each, in program order); the gelu is left out.
  has("the 3 slowest operations:");
  has("#0          5.000 ms  matmul  (ONNX node '/fc1/MatMul')");
  has("#2          2.000 ms  matmul  (ONNX node '/fc2/MatMul')");
  has("#3          2.000 ms  all_reduce\n");
  EXPECT_LT(report.find("#2 "), report.find("#3 "));
  EXPECT_EQ(report.find("#1 "), std::string::npos) << report;
  EXPECT_EQ(formatProfile(a, ProfileTotals{}, "x"), "profile: no run was measured\n");
}

TEST(Profile, GeneratedKernelsWithoutANodeAreNamedByFunction) {
  Artifact a;
  a.program = {profiled("launch", {{"function", std::string("k3_add_layer_normalization")}})};
  ProfileTotals totals;
  totals.add({0.001}, 0.001);
  std::string report = formatProfile(a, totals, "c");
  EXPECT_NE(report.find("generated add_layer_normalization  (function "
                        "k3_add_layer_normalization)"),
            std::string::npos)
      << report;
}
