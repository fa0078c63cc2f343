//===- ShardingRule.h - per-op sharding rules in factors -------*- C++ -*-===//
//
// A sharding rule says how an op's operand and result dimensions relate, so
// that a sharding of one tensor can be carried to the others. It is written
// in factors, as einsum writes contractions: every dimension of every
// operand and result is the product of zero or more factors, listed major to
// minor. Sharding a factor over mesh axes shards every dimension that holds
// it (for a compound dimension only its major-most factor may be sharded,
// so that the shards stay contiguous).
//
// A factor is one of:
// - Parallel: each shard of the factor can be computed on its own
//   (elementwise dims, batch dims, matmul M and N);
// - Reduction: the factor appears in operands but not in results, and the
//   op sums over it (matmul K, reduce_sum axes). Sharding it leaves each
//   rank a partial sum: the results are unreduced over the factor's axes;
// - NeedReplication: the factor is shared between tensors, but the op needs
//   it whole (softmax's axis, layer norm's normalized dims, a causal
//   attention's query positions). It is never sharded.
// A dimension with no factor (a broadcast size-1 dim, a dim the op reads
// whole, such as a gather's table axis) is always replicated.
//
// The op registry (OpRegistry.h) holds the rule of every nn op.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_DIST_IR_SHARDINGRULE_H
#define SHARDFLOW_DIALECT_DIST_IR_SHARDINGRULE_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

namespace shardflow::dist {

enum class FactorKind { Parallel, Reduction, NeedReplication };

/// The factors of each dimension of one tensor: dims[d] lists the factor
/// indices of dimension d, major to minor (empty: the dim is replicated).
using TensorFactors = llvm::SmallVector<llvm::SmallVector<int64_t, 2>>;

struct ShardingRule {
  llvm::SmallVector<int64_t> factorSizes;
  llvm::SmallVector<FactorKind> factorKinds;
  /// One entry per operand / result of the op, in order.
  llvm::SmallVector<TensorFactors> operands;
  llvm::SmallVector<TensorFactors> results;

  /// Adds a factor and returns its index.
  int64_t addFactor(int64_t size, FactorKind kind = FactorKind::Parallel);
  int64_t numFactors() const { return factorSizes.size(); }

  /// Checks the rule against `op`: one entry per operand and result, one per
  /// dimension, the product of a dim's factor sizes equal to the dim size, a
  /// reduction factor in no result. Reports a diagnostic on `op` if not.
  mlir::LogicalResult verify(mlir::Operation *op) const;

  /// Prints the rule einsum-style, factors named i, j, k, ... (then f26,
  /// f27, ...), a compound dim as a product, a factor-less dim as 1:
  ///   ([i, j], [j, k]) -> ([i, k]) {i=4, j=8 reduction, k=2}
  void print(llvm::raw_ostream &os) const;
};

} // namespace shardflow::dist

#endif // SHARDFLOW_DIALECT_DIST_IR_SHARDINGRULE_H
