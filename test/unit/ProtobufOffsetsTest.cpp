//===- ProtobufOffsetsTest.cpp - initializer payload offsets ---------------===//
//
// The offsets must point at the exact bytes protobuf serialized for each
// tensor; the reference is libprotobuf's own serialization of the model.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Import/ONNX/ProtobufOffsets.h"

#include "onnx/onnx_pb.h"
#include <gtest/gtest.h>

#include <cstring>

using namespace shardflow;

namespace {

onnx::ModelProto makeModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("unit-test");
  auto *graph = model.mutable_graph();
  graph->set_name("g");
  // raw_data initializer.
  auto *raw = graph->add_initializer();
  raw->set_name("raw");
  raw->set_data_type(onnx::TensorProto::FLOAT);
  raw->add_dims(3);
  float values[3] = {1.5f, -2.0f, 3.25f};
  raw->set_raw_data(std::string(reinterpret_cast<char *>(values), sizeof(values)));
  // Packed float_data initializer.
  auto *packed = graph->add_initializer();
  packed->set_name("packed");
  packed->set_data_type(onnx::TensorProto::FLOAT);
  packed->add_dims(2);
  packed->add_float_data(7.0f);
  packed->add_float_data(8.0f);
  // Varint-encoded int64 data: not byte-addressable, must be absent.
  auto *ints = graph->add_initializer();
  ints->set_name("ints");
  ints->set_data_type(onnx::TensorProto::INT64);
  ints->add_dims(2);
  ints->add_int64_data(5);
  ints->add_int64_data(6);
  auto *node = graph->add_node();
  node->set_op_type("Identity");
  node->add_input("raw");
  node->add_output("y");
  return model;
}

TEST(ProtobufOffsets, FindsRawAndPackedPayloads) {
  std::string bytes = makeModel().SerializeAsString();
  auto found = findInitializerPayloads(bytes);
  ASSERT_EQ(found.count("raw"), 1u);
  ASSERT_EQ(found.count("packed"), 1u);
  EXPECT_EQ(found.count("ints"), 0u);

  const PayloadRange &r = found["raw"];
  ASSERT_EQ(r.length, 12u);
  float got[3];
  std::memcpy(got, bytes.data() + r.offset, sizeof(got));
  EXPECT_EQ(got[0], 1.5f);
  EXPECT_EQ(got[1], -2.0f);
  EXPECT_EQ(got[2], 3.25f);

  const PayloadRange &p = found["packed"];
  ASSERT_EQ(p.length, 8u);
  float pv[2];
  std::memcpy(pv, bytes.data() + p.offset, sizeof(pv));
  EXPECT_EQ(pv[0], 7.0f);
  EXPECT_EQ(pv[1], 8.0f);
}

TEST(ProtobufOffsets, TruncatedInputNeverReadsOutOfBounds) {
  std::string bytes = makeModel().SerializeAsString();
  // Every prefix must be handled; any range reported must lie inside it.
  for (size_t n = 0; n <= bytes.size(); ++n) {
    std::string prefix = bytes.substr(0, n);
    auto found = findInitializerPayloads(prefix);
    for (auto &entry : found)
      EXPECT_LE(entry.second.offset + entry.second.length, n);
  }
}

TEST(ProtobufOffsets, GarbageYieldsNothing) {
  std::string junk(4096, '\xff');
  EXPECT_TRUE(findInitializerPayloads(junk).empty());
  EXPECT_TRUE(findInitializerPayloads("").empty());
}

} // namespace
