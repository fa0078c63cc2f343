//===- ShardingRulesTest.cpp - the nn sharding-rule registry ---------------===//

#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include <gtest/gtest.h>

using namespace mlir;
using namespace shardflow;

namespace {
/// Parses `source` into a module in a context with the nn dialect loaded.
struct Parsed {
  MLIRContext context;
  OwningOpRef<ModuleOp> module;

  explicit Parsed(StringRef source) {
    context.loadDialect<nn::NNDialect, func::FuncDialect>();
    module = parseSourceString<ModuleOp>(source, &context);
  }

  /// The first op named `name` in the module.
  Operation *find(StringRef name) {
    Operation *found = nullptr;
    module->walk([&](Operation *op) {
      if (!found && op->getName().getStringRef() == name)
        found = op;
    });
    return found;
  }
};

/// A localization context of a rule and its local factor sizes alone (the
/// head-count localizers read nothing else).
dist::LocalizationContext context(const dist::ShardingRule &rule, ArrayRef<int64_t> local) {
  return {rule, local, dist::MeshOp(), {}, {}};
}
} // namespace

// Every op of the nn dialect has an entry in the op registry that states
// every fact (rule, localization, partition hook, cost): an op added to
// NNOps.td without one, or with a fact left out, fails here.
TEST(ShardingRules, EveryNNOpHasARule) {
  MLIRContext context;
  context.loadDialect<nn::NNDialect>();
  int64_t nnOps = 0;
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "nn")
      continue;
    ++nnOps;
    std::string missing;
    EXPECT_TRUE(dist::hasCompleteOpFacts(name.getStringRef(), missing))
        << name.getStringRef().str() << "'s entry in the op registry lacks " << missing;
  }
  // Guards against a filter that matches nothing.
  EXPECT_GE(nnOps, 69);
  EXPECT_FALSE(dist::hasOpFacts("func.return"));
  EXPECT_FALSE(dist::hasOpFacts("nn.no_such_op"));
}

TEST(ShardingRules, NonNNOpHasNoRule) {
  Parsed p("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
           "  return %a : tensor<2xf32>\n"
           "}\n");
  ASSERT_TRUE(p.module);
  std::string message;
  ScopedDiagnosticHandler handler(&p.context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  EXPECT_TRUE(failed(dist::getShardingRule(p.find("func.return"))));
  EXPECT_NE(message.find("has no sharding rule"), std::string::npos)
      << message;
}

TEST(ShardingRules, PrintsMatmul) {
  Parsed p("func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) {\n"
           "  %0 = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf32>)"
           " -> tensor<4x2xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  auto rule = dist::getShardingRule(p.find("nn.matmul"));
  ASSERT_TRUE(succeeded(rule));
  std::string text;
  llvm::raw_string_ostream os(text);
  rule->print(os);
  EXPECT_EQ(text, "([i, j], [j, k]) -> ([i, k]) {i=4, j=8 reduction, k=2}");
}

TEST(ShardingRules, LocalizesThreeDimensionalAttention) {
  // Hq = 8 = Hkv 4 * g 2, D = 16; Skv 6.
  Parsed p("func.func @f(%q: tensor<2x5x128xf32>, %kv: tensor<2x6x64xf32>) {\n"
           "  %0 = nn.attention %q, %kv, %kv {q_num_heads = 8 : i64,"
           " kv_num_heads = 4 : i64} : (tensor<2x5x128xf32>,"
           " tensor<2x6x64xf32>, tensor<2x6x64xf32>) -> tensor<2x5x128xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  auto attention = cast<nn::AttentionOp>(p.find("nn.attention"));
  auto rule = dist::getShardingRule(attention);
  ASSERT_TRUE(succeeded(rule));
  // Halve the kv-head factor: the major factor of the query's hidden dim.
  int64_t heads = rule->operands[0][2].front();
  EXPECT_EQ(rule->factorSizes[heads], 4);
  EXPECT_EQ(rule->operands[1][2].front(), heads);
  SmallVector<int64_t> local(rule->factorSizes);
  local[heads] /= 2;
  ASSERT_TRUE(succeeded(dist::localizeAttributes(attention, context(*rule, local))));
  EXPECT_EQ(attention.getQNumHeads(), 4u);
  EXPECT_EQ(attention.getKvNumHeads(), 2u);
}

TEST(ShardingRules, LocalizesThreeDimensionalRotaryEmbedding) {
  // num_heads 4, head size 16.
  Parsed p("func.func @f(%x: tensor<2x8x64xf32>, %c: tensor<2x8x8xf32>) {\n"
           "  %0 = nn.rotary_embedding %x, %c, %c {num_heads = 4 : i64} :"
           " (tensor<2x8x64xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>)"
           " -> tensor<2x8x64xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  auto rotary = cast<nn::RotaryEmbeddingOp>(p.find("nn.rotary_embedding"));
  auto rule = dist::getShardingRule(rotary);
  ASSERT_TRUE(succeeded(rule));
  int64_t heads = rule->operands[0][2].front();
  EXPECT_EQ(rule->factorSizes[heads], 4);
  SmallVector<int64_t> local(rule->factorSizes);
  local[heads] = 1;
  ASSERT_TRUE(succeeded(dist::localizeAttributes(rotary, context(*rule, local))));
  EXPECT_EQ(rotary.getNumHeads(), 1u);
}

TEST(ShardingRules, LocalizeLeavesOtherOpsAlone) {
  Parsed p("func.func @f(%a: tensor<4x8xf32>) {\n"
           "  %0 = nn.softmax %a {axis = 1 : i64} : (tensor<4x8xf32>)"
           " -> tensor<4x8xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  Operation *softmax = p.find("nn.softmax");
  auto rule = dist::getShardingRule(softmax);
  ASSERT_TRUE(succeeded(rule));
  DictionaryAttr before = softmax->getAttrDictionary();
  SmallVector<int64_t> local(rule->factorSizes);
  local[0] /= 2;
  ASSERT_TRUE(succeeded(dist::localizeAttributes(softmax, context(*rule, local))));
  EXPECT_EQ(softmax->getAttrDictionary(), before);
}

TEST(ShardingRules, VerifyRejectsAWrongProduct) {
  Parsed p("func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) {\n"
           "  %0 = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf32>)"
           " -> tensor<4x2xf32>\n"
           "  return\n"
           "}\n");
  ASSERT_TRUE(p.module);
  Operation *matmul = p.find("nn.matmul");
  auto rule = dist::getShardingRule(matmul);
  ASSERT_TRUE(succeeded(rule));
  ASSERT_TRUE(succeeded(rule->verify(matmul)));

  std::string message;
  ScopedDiagnosticHandler handler(&p.context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  // K is 8; claim 4.
  dist::ShardingRule broken = *rule;
  broken.factorSizes[rule->operands[0][1].front()] = 4;
  EXPECT_TRUE(failed(broken.verify(matmul)));
  EXPECT_NE(message.find("operand #0 dim 1 has size 8"), std::string::npos)
      << message;

  // A reduction factor in a result.
  broken = *rule;
  broken.results[0][1] = {rule->operands[0][1].front()};
  EXPECT_TRUE(failed(broken.verify(matmul)));
  EXPECT_NE(message.find("result #0 dim 1 holds reduction factor j"),
            std::string::npos)
      << message;

  // One entry too few.
  broken = *rule;
  broken.operands.pop_back();
  EXPECT_TRUE(failed(broken.verify(matmul)));
  EXPECT_NE(message.find("1 operand entries for 2 operands"), std::string::npos)
      << message;

  // A factor index past the end.
  broken = *rule;
  broken.results[0][0] = {broken.numFactors()};
  EXPECT_TRUE(failed(broken.verify(matmul)));
}
