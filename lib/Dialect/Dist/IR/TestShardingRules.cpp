//===- TestShardingRules.cpp - remark the sharding rule of each nn op ------===//
//
// For every nn op the pass builds the op's sharding rule, checks it against
// the op and emits it as a remark; an op the registry does not know keeps
// getShardingRule's error and fails the pass.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/TestShardingRules.h"

#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace {
struct TestShardingRulesPass
    : PassWrapper<TestShardingRulesPass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestShardingRulesPass)

  StringRef getArgument() const final { return "test-dist-sharding-rules"; }
  StringRef getDescription() const final {
    return "Remark the sharding rule of every nn op (for tests)";
  }

  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](Operation *op) {
      if (!isa<shardflow::nn::NNDialect>(op->getDialect()))
        return;
      FailureOr<shardflow::dist::ShardingRule> rule =
          shardflow::dist::getShardingRule(op);
      if (failed(rule) || failed(rule->verify(op))) {
        ok = false;
        return;
      }
      std::string text;
      llvm::raw_string_ostream os(text);
      rule->print(os);
      op->emitRemark() << text;
    });
    if (!ok)
      signalPassFailure();
  }
};
} // namespace

void shardflow::dist::registerTestShardingRulesPass() {
  PassRegistration<TestShardingRulesPass>();
}
