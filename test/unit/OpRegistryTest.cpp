//===- OpRegistryTest.cpp - the op registry's facts and the nn traits ------===//
//
// The cost estimates against hand-counted FLOPs and bytes, the partition
// hook's seam in dist-partition, and the traits the passes ask instead of
// lists of op names.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include <gtest/gtest.h>

using namespace mlir;
using namespace shardflow;

namespace {
struct Parsed {
  MLIRContext context;
  OwningOpRef<ModuleOp> module;

  explicit Parsed(StringRef source) {
    context.loadDialect<nn::NNDialect, dist::DistDialect, func::FuncDialect>();
    module = parseSourceString<ModuleOp>(source, &context);
  }

  Operation *find(StringRef name) {
    Operation *found = nullptr;
    module->walk([&](Operation *op) {
      if (!found && op->getName().getStringRef() == name)
        found = op;
    });
    return found;
  }
};
} // namespace

TEST(OpRegistry, MatmulCostsTwoFlopsPerMultiplyAdd) {
  // A batch of 3 [4, 8] x [8, 5] products in f32.
  Parsed p("func.func @f(%a: tensor<3x4x8xf32>, %b: tensor<8x5xf32>) {\n"
           "  %0 = nn.matmul %a, %b : (tensor<3x4x8xf32>, tensor<8x5xf32>)"
           " -> tensor<3x4x5xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  dist::OpCost cost = dist::estimateCost(p.find("nn.matmul"));
  EXPECT_DOUBLE_EQ(cost.flops, 2.0 * 3 * 4 * 5 * 8);
  EXPECT_DOUBLE_EQ(cost.bytes, 4.0 * (3 * 4 * 8 + 8 * 5 + 3 * 4 * 5));
}

TEST(OpRegistry, AttentionCostsBothProductsAndTheSoftmax) {
  // B 2, H 4, Sq 16, Sk 32, D 8, causal in bf16: half the scores.
  Parsed p("func.func @f(%q: tensor<2x4x16x8xbf16>, %k: tensor<2x4x32x8xbf16>) {\n"
           "  %0 = nn.attention %q, %k, %k {is_causal = true} : (tensor<2x4x16x8xbf16>,"
           " tensor<2x4x32x8xbf16>, tensor<2x4x32x8xbf16>) -> tensor<2x4x16x8xbf16>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  dist::OpCost cost = dist::estimateCost(p.find("nn.attention"));
  double scores = 2.0 * 4 * 16 * 32 / 2;
  EXPECT_DOUBLE_EQ(cost.flops, scores * (2 * 8 + 2 * 8 + 5));
  EXPECT_DOUBLE_EQ(cost.bytes, 2.0 * (2 * 2 * 4 * 16 * 8 + 2 * 2 * 4 * 32 * 8));
}

TEST(OpRegistry, ViewsCostNothingAndCopiesMoveTheirBytes) {
  Parsed p("func.func @f(%a: tensor<4x6xf32>, %g: tensor<6xf32>) {\n"
           "  %0 = nn.reshape %a : (tensor<4x6xf32>) -> tensor<24xf32>\n"
           "  %1 = nn.transpose %a {perm = array<i64: 1, 0>} : (tensor<4x6xf32>)"
           " -> tensor<6x4xf32>\n"
           "  %2 = nn.layer_normalization %a, %g {axis = 1 : i64} : (tensor<4x6xf32>,"
           " tensor<6xf32>) -> tensor<4x6xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  dist::OpCost view = dist::estimateCost(p.find("nn.reshape"));
  EXPECT_EQ(view.flops, 0);
  EXPECT_EQ(view.bytes, 0);
  dist::OpCost copy = dist::estimateCost(p.find("nn.transpose"));
  EXPECT_EQ(copy.flops, 0);
  EXPECT_DOUBLE_EQ(copy.bytes, 2.0 * 24 * 4);
  dist::OpCost norm = dist::estimateCost(p.find("nn.layer_normalization"));
  EXPECT_DOUBLE_EQ(norm.flops, 8.0 * 24);
  EXPECT_DOUBLE_EQ(norm.bytes, (2.0 * 24 + 6) * 4);
}

TEST(OpRegistry, ConvCostsItsWindowPerOutput) {
  // N 1, C 4 in 2 groups, M 6, 3x3 window, 5x5 output, with a bias.
  Parsed p("func.func @f(%x: tensor<1x4x7x7xf32>, %w: tensor<6x2x3x3xf32>, %b: tensor<6xf32>) {\n"
           "  %0 = nn.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>,"
           " dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<1x4x7x7xf32>,"
           " tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<1x6x5x5xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  dist::OpCost cost = dist::estimateCost(p.find("nn.conv"));
  double outputs = 6 * 5 * 5;
  EXPECT_DOUBLE_EQ(cost.flops, 2.0 * (2 * 3 * 3) * outputs + outputs);
}

// No op partitions into an algorithm yet; ring attention and expert
// dispatch will. dist-partition hands such an op its local operands and
// puts the values it returns in place of its results.
TEST(OpRegistry, PartitionHookReplacesTheOpWithWhatItBuilds) {
  Parsed p("dist.mesh @mesh [\"tp\"=2]\n"
           "func.func @f(%a: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {\"tp\"}]>})"
           " -> tensor<4x8xf32> {\n"
           "  %0 = nn.relu %a {dist.shardings = [#dist.sharding<@mesh, [{}, {\"tp\"}]>]}"
           " : (tensor<4x8xf32>) -> tensor<4x8xf32>\n"
           "  %1 = dist.reshard %0 <@mesh, [{}, {}]> : tensor<4x8xf32>\n"
           "  return %1 : tensor<4x8xf32>\n"
           "}\n");
  ASSERT_TRUE(p.module);
  SmallVector<int64_t> seenLocalSizes;
  dist::ScopedPartitionHookForTesting hook(
      "nn.relu",
      [&](OpBuilder &b, Operation *op, ValueRange local,
          const dist::LocalizationContext &context) -> FailureOr<SmallVector<Value>> {
        seenLocalSizes.assign(context.localFactorSizes.begin(), context.localFactorSizes.end());
        Value neg = nn::NegOp::create(b, op->getLoc(), local[0]);
        return SmallVector<Value>{neg};
      });
  PassManager pm(&p.context);
  pm.addPass(dist::createDistPartition());
  ASSERT_TRUE(succeeded(pm.run(*p.module)));
  EXPECT_EQ(p.find("nn.relu"), nullptr);
  Operation *neg = p.find("nn.neg");
  ASSERT_NE(neg, nullptr);
  // The hook saw the local operand and the rule's per-rank sizes.
  EXPECT_EQ(cast<RankedTensorType>(neg->getOperand(0).getType()).getShape(),
            ArrayRef<int64_t>({4, 4}));
  EXPECT_EQ(seenLocalSizes, SmallVector<int64_t>({4, 4}));
  // Its result is gathered like the replaced op's would have been.
  EXPECT_NE(p.find("dist.all_gather"), nullptr);
}

TEST(NNTraits, LinearityDecidesWherePartialSumsFlow) {
  Parsed p("func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) {\n"
           "  %0 = nn.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
           "  %1 = nn.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
           "  %2 = nn.div %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
           "  %3 = nn.pow %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
           "  %4 = nn.flatten %a {axis = 0 : i64} : (tensor<4xf32>) -> tensor<1x4xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  Operation *add = p.find("nn.add"), *mul = p.find("nn.mul"), *div = p.find("nn.div"),
            *pow = p.find("nn.pow"), *flatten = p.find("nn.flatten");
  EXPECT_TRUE(nn::isLinearIn(add, 0) && nn::isLinearIn(add, 1) && nn::isAdditive(add));
  EXPECT_TRUE(nn::isLinearIn(mul, 0) && nn::isLinearIn(mul, 1) && !nn::isAdditive(mul));
  EXPECT_TRUE(nn::isLinearIn(div, 0) && !nn::isLinearIn(div, 1));
  EXPECT_FALSE(nn::isLinearIn(pow, 0) || nn::isLinearIn(pow, 1));
  EXPECT_TRUE(nn::isLinearIn(flatten, 0) && nn::isViewLike(flatten));
  for (Operation *op : {add, mul, div, pow})
    EXPECT_TRUE(nn::isElementwise(op)) << op->getName().getStringRef().str();
  EXPECT_FALSE(nn::isElementwise(flatten));
}

TEST(NNTraits, ColumnSplitsStayThroughElementwiseAndPerHeadOps) {
  Parsed p("func.func @f(%a: tensor<2x4xf32>, %g: tensor<4xf32>) {\n"
           "  %0 = nn.abs %a : (tensor<2x4xf32>) -> tensor<2x4xf32>\n"
           "  %1 = nn.softmax %a {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>\n"
           "  %2 = nn.layer_normalization %a, %g {axis = 1 : i64} : (tensor<2x4xf32>,"
           " tensor<4xf32>) -> tensor<2x4xf32>\n"
           "  %3 = nn.reduce_sum %a {axes = array<i64: 1>} : (tensor<2x4xf32>)"
           " -> tensor<2x1xf32>\n"
           "  %4 = nn.range {start = 0.0 : f64, limit = 4.0 : f64, delta = 1.0 : f64}"
           " : tensor<4xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  EXPECT_TRUE(nn::keepsColumnsApart(p.find("nn.abs")));
  EXPECT_TRUE(nn::keepsColumnsApart(p.find("nn.softmax")));
  EXPECT_FALSE(nn::keepsColumnsApart(p.find("nn.layer_normalization")));
  EXPECT_FALSE(nn::keepsColumnsApart(p.find("nn.reduce_sum")));
  EXPECT_TRUE(nn::isMadeFromAttributes(p.find("nn.range")));
  EXPECT_FALSE(nn::isMadeFromAttributes(p.find("nn.abs")));
}
