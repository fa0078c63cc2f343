//===- GradientRulesTest.cpp - the gradient rule registry ------------------===//
//
// Every entry names an nn op and states one fact: a rule, or why the op has
// none; every nn op has an entry. (The rules themselves are checked against finite differences by
// python/tests/test_gradients.py.)
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Autodiff/Gradients.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringSet.h"
#include <gtest/gtest.h>

using namespace mlir;
using namespace shardflow;

TEST(GradientRules, EveryEntryNamesAnNNOpAndStatesOneFact) {
  MLIRContext context;
  context.loadDialect<nn::NNDialect>();
  llvm::StringSet<> ops;
  for (RegisteredOperationName name : context.getRegisteredOperations())
    if (name.getDialectNamespace() == "nn")
      ops.insert(name.getStringRef());
  // dist-annotate's constraint, seeded on a sharded training step's
  // forward program before it is differentiated: the identity on values.
  ops.insert("dist.constraint");
  int entries = 0;
  nn::forEachGradientRule([&](StringRef name, const nn::GradientRule &rule) {
    ++entries;
    EXPECT_TRUE(ops.contains(name)) << name.str() << " is not an nn op (or dist.constraint)";
    EXPECT_NE(rule.fn == nullptr, rule.nonDifferentiable == nullptr)
        << name.str() << " must have a rule or a reason, not both or neither";
  });
  EXPECT_GE(entries, 40);
  EXPECT_EQ(nn::lookupGradientRule("nn.no_such_op"), nullptr);
  ASSERT_NE(nn::lookupGradientRule("nn.floor"), nullptr);
  EXPECT_STREQ(nn::lookupGradientRule("nn.floor")->nonDifferentiable, "piecewise constant");
}

TEST(GradientRules, EveryNNOpHasAnEntry) {
  MLIRContext context;
  context.loadDialect<nn::NNDialect>();
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() == "nn") {
      EXPECT_NE(nn::lookupGradientRule(name.getStringRef()), nullptr)
          << name.getStringRef().str() << " has no gradient rule and no reason to have none";
    }
  }
}
