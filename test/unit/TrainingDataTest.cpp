//===- TrainingDataTest.cpp - shard-run --data and --save-weights ---------===//
//
// The training data reader against an artifact's inputs (shapes, types,
// batch counts, label ranges), the safetensors writer's layout (what the
// `safetensors` package reads; python/tests/test_training.py loads real
// files with it), and the artifact fields of training state.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/TrainingData.h"

#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

using namespace shardflow::runtime;

namespace {

const char *kStep = R"(shardflow-artifact 4
target cpu
world-size 1
model-dir .
arena 64
buffer 0 input i64 2x3 name=ids
buffer 1 input i64 2x3 name=labels range=0,5 ignore=-100
buffer 2 weight f32 4 name=w storage=external file=m.data offset=0 size=16 writable=1
buffer 3 weight f32 4 name=w.exp_avg storage=zeros size=16 writable=1
buffer 4 arena f32 4 offset=0
kernel identity in=4 out=2
output loss 4
end
)";

HostTensor ints(std::vector<int64_t> shape, std::vector<int64_t> values) {
  HostTensor t;
  t.dtype = DType::I64;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * 8);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

std::vector<int64_t> counting(int64_t n, int64_t from = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = (from + i) % 5;
  return v;
}

void expectRefused(std::vector<std::pair<std::string, HostTensor>> arrays, const Artifact &a,
                   const std::string &phrase) {
  try {
    TrainingData data(std::move(arrays), a, "data.npz");
    ADD_FAILURE() << "accepted; expected: " << phrase;
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(TrainingData, StepTakesEntryModuloS) {
  Artifact a = parseArtifact(kStep, "step.shard");
  TrainingData data({{"ids", ints({3, 2, 3}, counting(18))},
                     {"labels", ints({3, 2, 3}, counting(18, 1))}},
                    a, "data.npz");
  EXPECT_EQ(data.entries(), 3);
  for (int64_t t : {1, 2, 3, 4, 7}) {
    auto inputs = data.step(t);
    const auto *ids = reinterpret_cast<const int64_t *>(inputs["ids"].bytes.data());
    int64_t entry = (t - 1) % 3;
    EXPECT_EQ(inputs["ids"].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(ids[0], (entry * 6) % 5) << "step " << t;
  }
}

TEST(TrainingData, RefusesWhatDoesNotFit) {
  Artifact a = parseArtifact(kStep, "step.shard");
  expectRefused({{"ids", ints({1, 2, 3}, counting(6))}}, a, "data.npz has no array 'labels'");
  expectRefused({{"ids", ints({1, 2, 3}, counting(6))},
                 {"labels", ints({1, 2, 3}, counting(6))},
                 {"extra", ints({1}, {0})}},
                a, "array 'extra' is no input of the training step ('ids', 'labels')");
  expectRefused({{"ids", ints({2, 3}, counting(6))}, {"labels", ints({1, 2, 3}, counting(6))}},
                a, "array 'ids' is i64[2,3]; the input needs i64[S,2,3] with S >= 1 batches");
  expectRefused({{"ids", ints({2, 2, 3}, counting(12))},
                 {"labels", ints({1, 2, 3}, counting(6))}},
                a, "array 'labels' holds 1 batches but 'ids' holds 2");
  std::vector<int64_t> labels = counting(12);
  labels[10] = 5; // entry 1, position [1,1]
  expectRefused({{"ids", ints({2, 2, 3}, counting(12))}, {"labels", ints({2, 2, 3}, labels)}},
                a,
                "array 'labels' holds 5 at position [1,1] of entry 1 (step 2): the input "
                "'labels' takes values in [0, 5) or the ignored -100");
  labels[10] = -100; // the ignored label is fine
  TrainingData ok({{"ids", ints({2, 2, 3}, counting(12))}, {"labels", ints({2, 2, 3}, labels)}},
                  a, "data.npz");
  EXPECT_EQ(ok.entries(), 2);
}

TEST(TrainingData, ArtifactFieldsOfState) {
  Artifact a = parseArtifact(kStep, "step.shard");
  EXPECT_TRUE(a.buffers[2].writable);
  EXPECT_EQ(a.buffers[3].storage, "zeros");
  ASSERT_TRUE(a.buffers[1].validRange.has_value());
  EXPECT_EQ(a.buffers[1].validRange->second, 5);
  EXPECT_EQ(a.buffers[1].ignoreValue, -100);
  // Round trip.
  std::ostringstream os;
  writeArtifact(a, os);
  EXPECT_NE(os.str().find("range=0,5 ignore=-100"), std::string::npos);
  EXPECT_NE(os.str().find("name=w.exp_avg storage=zeros size=16 writable=1"), std::string::npos);
  // A program may write writable state, and only that.
  std::string readOnly = kStep;
  readOnly.replace(readOnly.find("size=16 writable=1"), 18, "size=16");
  EXPECT_THROW(parseArtifact(readOnly, "ro.shard"), RuntimeError);
  std::string zerosReadOnly = kStep;
  zerosReadOnly.replace(zerosReadOnly.find("storage=zeros size=16 writable=1"), 32,
                        "storage=zeros size=16");
  EXPECT_THROW(parseArtifact(zerosReadOnly, "z.shard"), RuntimeError);
  std::string floatRange = kStep;
  floatRange.replace(floatRange.find("input i64 2x3 name=labels"), 25, "input f32 2x3 name=labels");
  EXPECT_THROW(parseArtifact(floatRange, "f.shard"), RuntimeError);
}

TEST(Safetensors, HeaderLayoutAndBytes) {
  float w[2] = {1.5f, -2.0f};
  int64_t s = 7;
  std::string bytes = serializeSafetensors(
      {{"a.weight", Tensor{w, DType::F32, {2}}}, {"odd\"name", Tensor{&s, DType::I64, {}}}});
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  ASSERT_EQ(bytes.size(), 8 + length + 16);
  EXPECT_EQ((8 + length) % 8, 0u) << "the data starts 8-byte aligned";
  std::string header = bytes.substr(8, length);
  EXPECT_NE(header.find("\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("\"odd\\\"name\":{\"dtype\":\"I64\",\"shape\":[],"
                        "\"data_offsets\":[8,16]}"),
            std::string::npos)
      << header;
  float back[2];
  std::memcpy(back, bytes.data() + 8 + length, 8);
  EXPECT_EQ(back[1], -2.0f);
}

} // namespace
