//===- Localization.cpp - attributes made local by partitioning ------------===//
//
// The attribute localizers the op registry names in each op's entry. The
// partitioner gives an op its per-rank types first; a localizer then
// rewrites what still describes the global op: counts of a split factor's
// elements (head counts), or where this rank's piece lies in the global
// tensor (a weight's slice, a gather table's row block).
//
//===----------------------------------------------------------------------===//

#include "OpFactBuilders.h"

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

namespace {
/// Head counts read from the rule: the factors of an operand dim and their
/// local sizes.
struct HeadCounts {
  const LocalizationContext &context;

  /// The local count of what a list of factors counts; fails on a factor
  /// index outside the rule or a local size below 1.
  FailureOr<int64_t> localCount(ArrayRef<int64_t> factors) const {
    int64_t count = 1;
    for (int64_t f : factors) {
      if (f < 0 || f >= context.rule.numFactors() || context.localFactorSizes[f] < 1)
        return failure();
      count *= context.localFactorSizes[f];
    }
    return count;
  }

  /// The factors of `operand`'s dim `dim`, without the last `dropMinor`.
  FailureOr<ArrayRef<int64_t>> headFactors(unsigned operand, int64_t dim,
                                           size_t dropMinor) const {
    const ShardingRule &rule = context.rule;
    if (operand >= rule.operands.size() ||
        dim >= static_cast<int64_t>(rule.operands[operand].size()))
      return failure();
    ArrayRef<int64_t> factors = rule.operands[operand][dim];
    if (factors.size() <= dropMinor)
      return failure();
    return factors.drop_back(dropMinor);
  }

  /// The local count of the heads in `operand`'s dim `dim`.
  FailureOr<int64_t> heads(unsigned operand, int64_t dim, size_t dropMinor) const {
    auto factors = headFactors(operand, dim, dropMinor);
    if (failed(factors))
      return failure();
    return localCount(*factors);
  }
};

/// Fails unless the context has one local size per factor of the rule.
LogicalResult checkSizes(Operation *op, const LocalizationContext &context) {
  if (static_cast<int64_t>(context.localFactorSizes.size()) != context.rule.numFactors())
    return op->emitOpError("got ")
           << context.localFactorSizes.size() << " local factor sizes for "
           << context.rule.numFactors() << " factors";
  return success();
}
} // namespace

LogicalResult dist::localizeNothing(Operation *op, const LocalizationContext &context) {
  return checkSizes(op, context);
}

LogicalResult dist::localizeAttentionHeads(Operation *op, const LocalizationContext &context) {
  if (failed(checkSizes(op, context)))
    return failure();
  // nn.attention and nn.attention_grad: query and key first, and the same
  // attributes.
  auto intAttr = [&](StringRef name) {
    auto a = op->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : int64_t(0);
  };
  bool threeD = cast<RankedTensorType>(op->getOperand(0).getType()).getRank() == 3;
  // A 4-D op may state its head counts too; they must then match the
  // local shapes.
  bool setQ = threeD || intAttr("q_num_heads") != 0;
  bool setKv = threeD || intAttr("kv_num_heads") != 0;
  if (!setQ && !setKv)
    return success();
  // 3-D: the hidden dim is (heads..., feature); 4-D: the head dim.
  int64_t dim = threeD ? 2 : 1;
  size_t drop = threeD ? 1 : 0;
  HeadCounts counts{context};
  FailureOr<int64_t> hq = counts.heads(0, dim, drop), hkv = counts.heads(1, dim, drop);
  if (failed(hq) || failed(hkv))
    return op->emitOpError("cannot localize the head counts: the sharding rule does not have "
                           "the shape of an attention rule");
  Builder builder(op->getContext());
  if (setQ)
    op->setAttr("q_num_heads", builder.getI64IntegerAttr(*hq));
  if (setKv)
    op->setAttr("kv_num_heads", builder.getI64IntegerAttr(*hkv));
  return success();
}

LogicalResult dist::localizeRotaryHeads(Operation *op, const LocalizationContext &context) {
  if (failed(checkSizes(op, context)))
    return failure();
  auto rotary = cast<nn::RotaryEmbeddingOp>(op);
  bool threeD = cast<RankedTensorType>(rotary.getInput().getType()).getRank() == 3;
  if (!threeD && rotary.getNumHeads() == 0)
    return success();
  FailureOr<int64_t> h = HeadCounts{context}.heads(0, threeD ? 2 : 1, threeD ? 1 : 0);
  if (failed(h))
    return op->emitOpError("cannot localize num_heads: the sharding rule does not have the "
                           "shape of a rotary embedding rule");
  rotary.setNumHeadsAttr(Builder(op->getContext()).getI64IntegerAttr(*h));
  return success();
}

/// The global shape of a value whose local type is `local` under
/// `layout`: each dim's local size times its shard count.
static SmallVector<int64_t> globalShapeOf(MeshOp mesh, const Layout &layout,
                                          RankedTensorType local) {
  SmallVector<int64_t> shape;
  for (auto [d, axes] : llvm::enumerate(layout.dims))
    shape.push_back(local.getDimSize(d) * mesh.groupSize(axes));
  return shape;
}

/// Where rank `rank`'s block of such a value starts, dim by dim.
static SmallVector<int64_t> blockStartOf(MeshOp mesh, const Layout &layout,
                                         RankedTensorType local, int64_t rank) {
  SmallVector<int64_t> start;
  for (auto [d, axes] : llvm::enumerate(layout.dims))
    start.push_back(axes.empty() ? 0 : mesh.indexAlong(rank, axes) * local.getDimSize(d));
  return start;
}

LogicalResult dist::localizeWeightSlices(Operation *op, const LocalizationContext &context) {
  if (failed(checkSizes(op, context)))
    return failure();
  auto w = cast<nn::WeightOp>(op);
  MeshOp mesh = context.mesh;
  const Layout &layout = context.resultLayouts.front();
  // The global shape is the product of local size and shard count; a
  // zero-padded weight's is the stored tensor, which its slices may reach
  // past (and it is described as sliced even when whole, so that the
  // runtime reads only the stored bytes).
  auto localType = cast<RankedTensorType>(w.getType());
  SmallVector<int64_t> globalShape = globalShapeOf(mesh, layout, localType);
  if (auto stored = w.getStoredShapeAttr())
    globalShape.assign(stored.asArrayRef().begin(), stored.asArrayRef().end());
  // A block of a weight already (a preset cut a fused projection into its
  // pieces): the rank's slice is taken inside the block, and the block
  // keeps its place in the whole weight.
  SmallVector<ArrayRef<int64_t>> blockStarts;
  if (auto whole = w.getGlobalShapeAttr(); whole && !w.getStoredShapeAttr()) {
    globalShape.assign(whole.asArrayRef().begin(), whole.asArrayRef().end());
    for (Attribute s : w.getStartsAttr())
      blockStarts.push_back(cast<DenseI64ArrayAttr>(s).asArrayRef());
    if (blockStarts.size() != 1 && int64_t(blockStarts.size()) != mesh.getNumRanks())
      return op->emitOpError("has ")
             << blockStarts.size() << " slice starts, neither one nor one per rank ("
             << mesh.getNumRanks() << ")";
  }
  bool split = llvm::any_of(layout.dims, [](const AxisList &a) { return !a.empty(); }) ||
               w.getStoredShapeAttr() || !blockStarts.empty();
  if (!split)
    return success();
  Builder b(op->getContext());
  SmallVector<Attribute> starts;
  for (int64_t rank = 0, n = mesh.getNumRanks(); rank < n; ++rank) {
    SmallVector<int64_t> start = blockStartOf(mesh, layout, localType, rank);
    if (!blockStarts.empty())
      for (auto [s, o] : llvm::zip(start, blockStarts[blockStarts.size() == 1 ? 0 : rank]))
        s += o;
    starts.push_back(b.getDenseI64ArrayAttr(start));
  }
  w.setGlobalShapeAttr(b.getDenseI64ArrayAttr(globalShape));
  w.setStartsAttr(b.getArrayAttr(starts));
  return success();
}

LogicalResult dist::localizeDropoutBlocks(Operation *op, const LocalizationContext &context) {
  if (failed(checkSizes(op, context)))
    return failure();
  auto d = cast<nn::KeyedDropoutOp>(op);
  MeshOp mesh = context.mesh;
  const Layout &layout = context.resultLayouts.front();
  if (llvm::none_of(layout.dims, [](const AxisList &a) { return !a.empty(); }))
    return success();
  if (d.getGlobalShapeAttr())
    return op->emitOpError("is localized twice");
  auto localType = cast<RankedTensorType>(d.getType());
  Builder b(op->getContext());
  SmallVector<int64_t> starts;
  for (int64_t rank = 0, n = mesh.getNumRanks(); rank < n; ++rank)
    starts.append(blockStartOf(mesh, layout, localType, rank));
  d.setGlobalShapeAttr(b.getDenseI64ArrayAttr(globalShapeOf(mesh, layout, localType)));
  d.setStartsAttr(b.getDenseI64ArrayAttr(starts));
  return success();
}

LogicalResult dist::localizeGatherRows(Operation *op, const LocalizationContext &context) {
  if (failed(checkSizes(op, context)))
    return failure();
  auto g = cast<nn::GatherOp>(op);
  const ShardingRule &rule = context.rule;
  MeshOp mesh = context.mesh;
  // A split table axis: the op learns where each rank's block starts (the
  // operand is already local here; the rule has the global size).
  int64_t rank0 = static_cast<int64_t>(rule.operands[0].size());
  int64_t axis = static_cast<int64_t>(g.getAxis());
  if (axis < 0)
    axis += rank0;
  // A table without a layout is whole (a reshard made it so): nothing to
  // localize.
  if (axis >= static_cast<int64_t>(context.operandLayouts[0].dims.size()))
    return success();
  const AxisList &axes = context.operandLayouts[0].dims[axis];
  if (axes.empty() || rule.operands[0][axis].empty())
    return success();
  int64_t rows = rule.factorSizes[rule.operands[0][axis].front()];
  int64_t block = rows / mesh.groupSize(axes);
  // The rows the indices address: all of them, or fewer when the table is
  // zero-padded (axis_size given before partitioning).
  int64_t global = g.getAxisSize() ? static_cast<int64_t>(*g.getAxisSize()) : rows;
  SmallVector<int64_t> starts;
  for (int64_t rank = 0, n = mesh.getNumRanks(); rank < n; ++rank)
    starts.push_back(mesh.indexAlong(rank, axes) * block);
  Builder b(op->getContext());
  g.setAxisSizeAttr(b.getI64IntegerAttr(global));
  g.setAxisStartsAttr(b.getDenseI64ArrayAttr(starts));
  return success();
}
