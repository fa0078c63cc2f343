//===- ImporterTest.cpp - the importer's library API -----------------------===//
//
// Imports models built with libonnx's protobuf classes and checks the IR
// against facts computed independently from the model (shapes, offsets).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Import/ONNX/ONNXImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "onnx/onnx_pb.h"
#include <gtest/gtest.h>

#include <cstring>

using namespace mlir;
using namespace shardflow;

namespace {

/// Collects error messages instead of printing them.
struct Errors {
  explicit Errors(MLIRContext &ctx) {
    ctx.getDiagEngine().registerHandler([this](Diagnostic &d) {
      messages.push_back(d.str());
      return success();
    });
  }
  std::string all() const {
    std::string s;
    for (auto &m : messages)
      s += m + "\n";
    return s;
  }
  std::vector<std::string> messages;
};

void addTensorInput(onnx::GraphProto *g, const std::string &name,
                    std::vector<int64_t> dims) {
  auto *in = g->add_input();
  in->set_name(name);
  auto *tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims)
    tt->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::ModelProto matmulModel(int64_t k, int64_t n) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  auto *opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  auto *g = model.mutable_graph();
  g->set_name("g");
  addTensorInput(g, "x", {2, k});
  auto *w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(k);
  w->add_dims(n);
  std::vector<float> values(k * n);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = float(i) * 0.5f;
  w->set_raw_data(std::string(reinterpret_cast<char *>(values.data()),
                              values.size() * sizeof(float)));
  auto *node = g->add_node();
  node->set_name("mm");
  node->set_op_type("MatMul");
  node->add_input("x");
  node->add_input("w");
  node->add_output("y");
  g->add_output()->set_name("y");
  return model;
}

TEST(Importer, EmbeddedWeightOffsetPointsAtItsBytes) {
  MLIRContext ctx;
  Errors errors(ctx);
  onnx::ModelProto model = matmulModel(64, 32); // 8 KiB: above the limit
  std::string bytes = model.SerializeAsString();
  ONNXImportOptions options;
  auto module = importONNXBuffer(&ctx, bytes, "/tmp/m.onnx", options);
  ASSERT_TRUE(module) << errors.all();
  nn::WeightOp weight;
  module->walk([&](nn::WeightOp w) { weight = w; });
  ASSERT_TRUE(weight);
  EXPECT_EQ(weight.getStorage(), "embedded");
  EXPECT_EQ(weight.getFile(), "m.onnx");
  ASSERT_TRUE(weight.getOffset());
  const std::string &raw = model.graph().initializer(0).raw_data();
  ASSERT_LE(*weight.getOffset() + raw.size(), bytes.size());
  EXPECT_EQ(std::memcmp(bytes.data() + *weight.getOffset(), raw.data(),
                        raw.size()),
            0);
  EXPECT_EQ(static_cast<int64_t>(*weight.getSize()), int64_t(raw.size()));
}

TEST(Importer, SmallInitializerIsEmbeddedAsConstant) {
  MLIRContext ctx;
  Errors errors(ctx);
  std::string bytes = matmulModel(4, 3).SerializeAsString(); // 48 bytes
  auto module = importONNXBuffer(&ctx, bytes, "m.onnx", ONNXImportOptions());
  ASSERT_TRUE(module) << errors.all();
  int constants = 0, weights = 0;
  module->walk([&](Operation *op) {
    constants += isa<nn::ConstantOp>(op);
    weights += isa<nn::WeightOp>(op);
  });
  EXPECT_EQ(constants, 1);
  EXPECT_EQ(weights, 0);
  auto fn = *module->getOps<func::FuncOp>().begin();
  EXPECT_EQ(cast<RankedTensorType>(fn.getResultTypes()[0]).getShape(),
            ArrayRef<int64_t>({2, 3}));
}

TEST(Importer, ContractionMismatchNamesTheNode) {
  MLIRContext ctx;
  Errors errors(ctx);
  onnx::ModelProto model = matmulModel(4, 3);
  // Make x [2, 5] so that K differs from the weight's 4.
  model.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()
      ->mutable_shape()->mutable_dim(1)->set_dim_value(5);
  std::string bytes = model.SerializeAsString();
  auto module = importONNXBuffer(&ctx, bytes, "m.onnx", ONNXImportOptions());
  EXPECT_FALSE(module);
  EXPECT_NE(errors.all().find("node 'mm' (MatMul, opset 17)"), std::string::npos)
      << errors.all();
  EXPECT_NE(errors.all().find("contraction dimensions differ"), std::string::npos)
      << errors.all();
}

TEST(Importer, InputShapeSpecParsing) {
  ONNXImportOptions options;
  EXPECT_EQ(parseInputShapeSpec("ids=8,128", options), "");
  EXPECT_EQ(options.inputShapes["ids"], SmallVector<int64_t>({8, 128}));
  EXPECT_EQ(parseInputShapeSpec("x=2x3x4", options), "");
  EXPECT_EQ(options.inputShapes["x"], SmallVector<int64_t>({2, 3, 4}));
  EXPECT_EQ(parseInputShapeSpec("scalar=", options), "");
  EXPECT_TRUE(options.inputShapes["scalar"].empty());
  EXPECT_NE(parseInputShapeSpec("noequals", options), "");
  EXPECT_NE(parseInputShapeSpec("x=2,a", options), "");
  EXPECT_NE(parseInputShapeSpec("x=-1", options), "");
}

} // namespace
