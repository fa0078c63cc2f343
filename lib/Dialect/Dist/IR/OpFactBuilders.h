//===- OpFactBuilders.h - the pieces the op registry is built of -*- C++ -*-===//
//
// Internal to Dist/IR: the functions that build each fact of an op (its
// sharding rule, its attribute localization, its cost estimate), which
// OpRegistry.cpp puts together, one entry per op. Rules are built on
// verified ops: the builders rely on the shapes the op verifiers guarantee.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_DIALECT_DIST_IR_OPFACTBUILDERS_H
#define SHARDFLOW_LIB_DIALECT_DIST_IR_OPFACTBUILDERS_H

#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/BuiltinTypes.h"

namespace shardflow::dist {

//===----------------------------------------------------------------------===//
// Sharding rules (ShardingRules.cpp)
//===----------------------------------------------------------------------===//

constexpr FactorKind kParallel = FactorKind::Parallel;
constexpr FactorKind kReduction = FactorKind::Reduction;
constexpr FactorKind kNeedReplication = FactorKind::NeedReplication;

/// Builds the rule of one op. Every dim starts factor-less (replicated); the
/// op's rule adds factors and appends them to dims, major to minor.
class RuleBuilder {
public:
  explicit RuleBuilder(mlir::Operation *op) : op(op) {
    for (mlir::Type t : op->getOperandTypes())
      rule.operands.emplace_back(mlir::cast<mlir::RankedTensorType>(t).getRank());
    for (mlir::Type t : op->getResultTypes())
      rule.results.emplace_back(mlir::cast<mlir::RankedTensorType>(t).getRank());
  }

  mlir::ArrayRef<int64_t> operandShape(unsigned i) const {
    return mlir::cast<mlir::RankedTensorType>(op->getOperand(i).getType()).getShape();
  }
  mlir::ArrayRef<int64_t> resultShape(unsigned i) const {
    return mlir::cast<mlir::RankedTensorType>(op->getResult(i).getType()).getShape();
  }
  unsigned numOperands() const { return op->getNumOperands(); }
  unsigned numResults() const { return op->getNumResults(); }

  int64_t factor(int64_t size, FactorKind kind = kParallel) {
    return rule.addFactor(size, kind);
  }
  /// Appends `f` to operand `i`'s dim `d` as its minor-most factor so far.
  void operand(unsigned i, int64_t d, int64_t f) {
    rule.operands[i][d].push_back(f);
  }
  void result(unsigned i, int64_t d, int64_t f) {
    rule.results[i][d].push_back(f);
  }
  void operand(unsigned i, int64_t d, mlir::ArrayRef<int64_t> fs) {
    for (int64_t f : fs)
      operand(i, d, f);
  }
  void result(unsigned i, int64_t d, mlir::ArrayRef<int64_t> fs) {
    for (int64_t f : fs)
      result(i, d, f);
  }
  /// Sets every dim of operand / result `i` at once.
  void operand(unsigned i, mlir::ArrayRef<mlir::SmallVector<int64_t, 2>> dims) {
    for (auto [d, fs] : llvm::enumerate(dims))
      operand(i, d, fs);
  }
  void result(unsigned i, mlir::ArrayRef<mlir::SmallVector<int64_t, 2>> dims) {
    for (auto [d, fs] : llvm::enumerate(dims))
      result(i, d, fs);
  }

  /// The rule with factors renumbered by first use (operands in order, then
  /// results) and unused ones dropped, so that the printed names follow the
  /// reading order whatever order the factors were added in.
  ShardingRule finish() && {
    mlir::SmallVector<int64_t> newIndex(rule.numFactors(), -1);
    ShardingRule out;
    auto renumber = [&](mlir::SmallVector<TensorFactors> &tensors) {
      for (TensorFactors &tensor : tensors)
        for (auto &factors : tensor)
          for (int64_t &f : factors) {
            if (newIndex[f] < 0)
              newIndex[f] =
                  out.addFactor(rule.factorSizes[f], rule.factorKinds[f]);
            f = newIndex[f];
          }
    };
    renumber(rule.operands);
    renumber(rule.results);
    out.operands = std::move(rule.operands);
    out.results = std::move(rule.results);
    return out;
  }

private:
  mlir::Operation *op;
  ShardingRule rule;
};

/// Operands and results of one shape: dim d of all of them shares one
/// factor of kind `kinds(d)`.
void sameShapeRule(RuleBuilder &b,
                   llvm::function_ref<FactorKind(int64_t)> kinds);

void elementwiseRule(RuleBuilder &b);

/// ONNX multidirectional broadcasting: one Parallel factor per result dim.
void broadcastRule(RuleBuilder &b);
/// Operands and results of the result's shape share a factor per dim;
/// scalar operands (an optimizer's learning rate) take none.
void tensorsAndScalarsRule(RuleBuilder &b);

void matmulRule(RuleBuilder &b);

void gemmRule(RuleBuilder &b, nn::GemmOp op);

mlir::LogicalResult einsumRule(RuleBuilder &b, nn::EinsumOp op);

/// Softmax, log-softmax, cumsum: the axis stays whole.
void axisRule(RuleBuilder &b, int64_t axis);

/// Layer and RMS normalization over [axis, rank); the parameters broadcast
/// right-aligned to the normalized shape.
void normalizationRule(RuleBuilder &b, int64_t axis);
void normalizationScaleGradRule(RuleBuilder &b, int64_t axis);

void batchNormalizationRule(RuleBuilder &b);

/// reduce_sum: reduced axes are Reduction (partial sums add up). Means and
/// maxima of parts are not sums of parts: reduce_mean and reduce_max keep
/// their reduced axes whole. A kept size-1 dim has no factor.
void reduceRule(RuleBuilder &b, mlir::ArrayRef<int64_t> axesAttr,
                bool keepdims, FactorKind reducedKind);

/// The selected axis stays whole; the values and indices share a k-sized
/// factor there, which has no counterpart in the input.
void topkRule(RuleBuilder &b, nn::TopKOp op);

/// Spatial dims get no factors: a sliding window over a split dim needs a
/// halo from the neighbour. Input channels are summed over, unless a bias is
/// added (see contractionKind). With groups, an output channel reads only its
/// group's input channels, which a split of either channel dim would
/// misplace, so the channels stay whole too.
void convRule(RuleBuilder &b, nn::ConvOp op);

/// Batch and channels are independent; windows need whole spatial dims.
void poolRule(RuleBuilder &b);

/// Query head h * g + r reads key/value head h (g query heads per kv
/// head), so the query head dim is the compound (Hkv, g). Softmax runs over
/// the key positions and the scores sum over the feature dim, so both stay
/// whole; so do the query positions under a causal mask, which compares
/// global positions.
void attentionRule(RuleBuilder &b, nn::AttentionOp op);
void attentionGradRule(RuleBuilder &b, nn::AttentionGradOp op);

/// The rotation mixes the two halves (or pairs) of a head's features, so
/// the feature dim stays whole. Positions come from position_ids, which
/// index whole caches, or from caches laid out like the input.
void rotaryEmbeddingRule(RuleBuilder &b, nn::RotaryEmbeddingOp op);

/// Reshape-like ops: the element order is unchanged, so a run of input dims
/// and a run of result dims with equal products hold the same elements.
/// Walking both shapes from the major end, the next shared factor is the
/// common part of the two current dim remainders: all of the smaller one
/// when it divides the larger ([2,6] -> [4,3]: 2, 2, 3), else their gcd,
/// after which the remainders are coprime and the rest of the run cannot be
/// split the same way on both sides: each side's remaining dims there get
/// their own NeedReplication factors. Size-1 dims get no factor.
void reshapeRule(RuleBuilder &b);

/// A size-1 input dim broadcast against a larger result dim has no factor.
void expandRule(RuleBuilder &b);

void transposeRule(RuleBuilder &b, nn::TransposeOp op);

/// Every operand and result has one shape outside `axis`, which has no
/// factor (its parts have different sizes, or the op reads it whole).
void allButAxisRule(RuleBuilder &b, int64_t axis);

void sliceRule(RuleBuilder &b, nn::SliceOp op);

void padRule(RuleBuilder &b, nn::PadOp op);

/// The triangle is cut by global row and column positions.
void triluRule(RuleBuilder &b);

/// Every index picks its slice independently. The table axis may be split
/// (a vocabulary-parallel embedding): partitioning then gives the op its
/// block's place in the axis (`axis_starts`), each rank reads the rows it
/// holds and zeros for the others, and the ranks' results sum to the
/// gather: a reduction factor. Not for i1 tables, whose all_reduce has no
/// sum; those keep the axis whole.
void gatherRule(RuleBuilder &b, nn::GatherOp op);

/// Outside the axis, result (i, j, ...) reads input (i, j, ...) at the same
/// global coordinates, so a dim splits alike only where input and indices
/// have the same size.
void gatherElementsRule(RuleBuilder &b, nn::GatherElementsOp op);

/// The indexed leading dims of the input are written at global positions,
/// and the update rows may land anywhere, so only the trailing slice dims,
/// copied whole per update, split.
void scatterNDRule(RuleBuilder &b);

//===----------------------------------------------------------------------===//
// Attribute localization (Localization.cpp)
//===----------------------------------------------------------------------===//

/// For ops with no attribute that counts elements of a factor or says
/// where a rank's piece lies.
mlir::LogicalResult localizeNothing(mlir::Operation *op, const LocalizationContext &context);
/// A 3-D nn.attention's head counts (or a 4-D one's, when stated).
mlir::LogicalResult localizeAttentionHeads(mlir::Operation *op,
                                           const LocalizationContext &context);
/// A 3-D nn.rotary_embedding's num_heads (or a 4-D one's, when stated).
mlir::LogicalResult localizeRotaryHeads(mlir::Operation *op, const LocalizationContext &context);
/// A split nn.weight's global shape and each rank's start in it.
mlir::LogicalResult localizeWeightSlices(mlir::Operation *op,
                                         const LocalizationContext &context);
/// A gather from a table split along its axis: the global row count and
/// where each rank's block of rows starts.
mlir::LogicalResult localizeGatherRows(mlir::Operation *op, const LocalizationContext &context);
/// nn.keyed_dropout: its input's global shape and where each rank's block
/// of it starts, so that an element's draw is keyed by its global index.
mlir::LogicalResult localizeDropoutBlocks(mlir::Operation *op,
                                          const LocalizationContext &context);

//===----------------------------------------------------------------------===//
// Cost estimates (OpCosts.cpp)
//===----------------------------------------------------------------------===//

/// `flopsPerElement` operations per result element; every operand and
/// result read or written once.
std::function<OpCost(mlir::Operation *)> costPerElement(double flopsPerElement);
/// No work and no traffic: ops that become views of their operand.
OpCost viewCost(mlir::Operation *op);
/// Copies: no arithmetic, operands read and results written once.
OpCost copyCost(mlir::Operation *op);
/// Values made on the device (constants, ranges) or loaded (weights): the
/// result written once.
OpCost sourceCost(mlir::Operation *op);
/// Per input element (reductions, cumsum, top-k), `flopsPerElement` each.
std::function<OpCost(mlir::Operation *)> costPerInputElement(double flopsPerElement);
OpCost matmulCost(mlir::Operation *op);
OpCost gemmCost(mlir::Operation *op);
OpCost einsumCost(mlir::Operation *op);
OpCost convCost(mlir::Operation *op);
OpCost poolCost(mlir::Operation *op);
OpCost attentionCost(mlir::Operation *op);

} // namespace shardflow::dist

#endif // SHARDFLOW_LIB_DIALECT_DIST_IR_OPFACTBUILDERS_H
