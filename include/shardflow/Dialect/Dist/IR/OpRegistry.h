//===- OpRegistry.h - every nn op's facts, in one registry -----*- C++ -*-===//
//
// One entry per nn op, keyed by the op's name, holds what the compiler must
// know of the op beyond its ODS definition and traits:
//
// - its sharding rule (ShardingRule.h): how its dimensions relate, in
//   factors;
// - its attribute localization: once the partitioner has given the op its
//   per-rank types, the attributes that count elements of a split factor
//   (a 3-D attention's head counts) or say where this rank's piece lies (a
//   weight's slice, a split gather table's row blocks) are rewritten;
// - an optional partition hook, for an op that partitions into an
//   algorithm rather than into a local copy of itself (ring attention and
//   expert dispatch will have one);
// - its cost estimate: FLOPs and bytes, which pipeline stage balancing and
//   the planner read.
//
// Every entry states each of them, "none" included: an entry that leaves
// one out is a bug the registry's completeness test reports. The gradient
// rules of training will live beside this registry, under the same keys.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_DIST_IR_OPREGISTRY_H
#define SHARDFLOW_DIALECT_DIST_IR_OPREGISTRY_H

#include "shardflow/Dialect/Dist/IR/Layout.h"
#include "shardflow/Dialect/Dist/IR/ShardingRule.h"

#include "mlir/IR/Builders.h"

#include <functional>
#include <string>

namespace shardflow::dist {

/// What an op costs to run once on the types it has (global before
/// partitioning, per rank after): floating-point operations (a
/// multiply-add is two), and the bytes of the tensors it reads and writes
/// once each (views: none). Estimates for balancing and planning, not
/// measurements.
struct OpCost {
  double flops = 0;
  double bytes = 0;
};

/// What localization and a partition hook see of an op whose operands are
/// this rank's pieces: the rule of the global op, each factor's per-rank
/// size, the mesh, and the layouts of its global operands and results.
struct LocalizationContext {
  const ShardingRule &rule;
  llvm::ArrayRef<int64_t> localFactorSizes;
  MeshOp mesh;
  llvm::ArrayRef<Layout> operandLayouts;
  llvm::ArrayRef<Layout> resultLayouts;
};

/// Builds this rank's computation of `op` from its local operands at the
/// builder's insertion point and returns the values that replace its
/// results (laid out as the context's result layouts say).
using PartitionHook = std::function<mlir::FailureOr<llvm::SmallVector<mlir::Value>>(
    mlir::OpBuilder &, mlir::Operation *op, mlir::ValueRange localOperands,
    const LocalizationContext &)>;

/// The sharding rule of `op`. Fails, with a diagnostic on `op`, for ops the
/// registry does not know (any op outside the nn dialect).
mlir::FailureOr<ShardingRule> getShardingRule(mlir::Operation *op);

/// Whether the registry has an entry for ops named `opName` ("nn.matmul").
bool hasOpFacts(llvm::StringRef opName);

/// Whether the entry of `opName` states every fact; otherwise `missing`
/// names the first it leaves out.
bool hasCompleteOpFacts(llvm::StringRef opName, std::string &missing);

/// After the partitioner gives `op` its per-rank operand and result types,
/// rewrites its attributes as its entry says (see above); ops with no such
/// attribute are left alone. Fails with a diagnostic on `op` when an
/// attribute cannot be made local.
mlir::LogicalResult localizeAttributes(mlir::Operation *op, const LocalizationContext &context);

/// The op's partition hook, or null when it partitions into a local copy
/// of itself (every op today).
const PartitionHook *getPartitionHook(mlir::Operation *op);

/// The op's cost estimate on its current types; zero for ops the registry
/// does not know.
OpCost estimateCost(mlir::Operation *op);

/// Replaces the partition hook of ops named `opName` until the returned
/// object dies: for tests of the partitioner's seam, which no op fills yet.
class ScopedPartitionHookForTesting {
public:
  ScopedPartitionHookForTesting(llvm::StringRef opName, PartitionHook hook);
  ~ScopedPartitionHookForTesting();

private:
  std::string opName;
};

} // namespace shardflow::dist

#endif // SHARDFLOW_DIALECT_DIST_IR_OPREGISTRY_H
