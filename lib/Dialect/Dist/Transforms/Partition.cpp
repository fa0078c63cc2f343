//===- Partition.cpp - from the global program to the per-rank program ----===//
//
// After dist-insert-reshards every op's operands are laid out as its rule
// needs, so each op runs unchanged on its local pieces: partitioning gives
// every value its local type, slices weights, fixes the few attributes that
// count elements of a split factor, and turns each dist.reshard into
// collectives. The function keeps its global signature: each rank takes the
// whole inputs and keeps its piece, and results are gathered whole.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/Dist/Transforms/ReshardPlanner.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"

namespace shardflow::dist {
#define GEN_PASS_DEF_DISTPARTITION
#include "shardflow/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace shardflow::dist

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

namespace {

struct Partitioner {
  ModuleOp module;
  MeshOp mesh;
  /// Every value's layout, read before any attribute is removed; values that
  /// replace others inherit their layout.
  DenseMap<Value, Layout> layouts;
  /// Rules need the global types, so they are computed before rewriting.
  DenseMap<Operation *, ShardingRule> rules;

  const Layout &layoutOf(Value v) {
    auto it = layouts.find(v);
    if (it == layouts.end())
      it = layouts.try_emplace(v, getValueLayout(v)).first;
    return it->second;
  }

  RankedTensorType local(Value v, const Layout &layout) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(t.getShape());
    for (auto [d, axes] : llvm::enumerate(layout.dims))
      shape[d] /= mesh.groupSize(axes);
    return RankedTensorType::get(shape, t.getElementType());
  }

  LogicalResult partitionFunction(func::FuncOp fn);
  LogicalResult localizeOp(Operation *op);
};

LogicalResult Partitioner::localizeOp(Operation *op) {
  // The factors' local sizes, read from the layouts of the op's tensors
  // (consistent after dist-insert-reshards).
  const ShardingRule *rule = &rules.find(op)->second;
  SmallVector<Layout> resultLayouts;
  for (Value r : op->getResults())
    resultLayouts.push_back(layoutOf(r));
  SmallVector<int64_t> localSizes(rule->factorSizes);
  auto note = [&](const TensorFactors &factors, const Layout &layout) {
    for (auto [d, axes] : llvm::enumerate(layout.dims))
      if (!axes.empty() && !factors[d].empty())
        localSizes[factors[d].front()] =
            rule->factorSizes[factors[d].front()] / mesh.groupSize(axes);
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    note(rule->operands[i], layoutOf(v));
  for (auto [i, layout] : llvm::enumerate(resultLayouts))
    note(rule->results[i], layout);

  for (auto [r, layout] : llvm::zip(op->getResults(), resultLayouts))
    r.setType(local(r, layout));

  if (auto w = dyn_cast<nn::WeightOp>(op)) {
    const Layout &layout = resultLayouts.front();
    // The global shape is the product of local size and shard count; a
    // zero-padded weight's is the stored tensor, which its slices may
    // reach past (and it is described as sliced even when whole, so that
    // the runtime reads only the stored bytes).
    SmallVector<int64_t> globalShape;
    auto localType = cast<RankedTensorType>(w.getType());
    for (auto [d, axes] : llvm::enumerate(layout.dims))
      globalShape.push_back(localType.getDimSize(d) * mesh.groupSize(axes));
    if (auto stored = w.getStoredShapeAttr())
      globalShape.assign(stored.asArrayRef().begin(), stored.asArrayRef().end());
    bool split = llvm::any_of(layout.dims, [](const AxisList &a) { return !a.empty(); }) ||
                 w.getStoredShapeAttr();
    if (split) {
      Builder b(op->getContext());
      SmallVector<Attribute> starts;
      for (int64_t rank = 0, n = mesh.getNumRanks(); rank < n; ++rank) {
        SmallVector<int64_t> start;
        for (auto [d, axes] : llvm::enumerate(layout.dims))
          start.push_back(axes.empty() ? 0
                                       : mesh.indexAlong(rank, axes) *
                                             localType.getDimSize(d));
        starts.push_back(b.getDenseI64ArrayAttr(start));
      }
      w.setGlobalShapeAttr(b.getDenseI64ArrayAttr(globalShape));
      w.setStartsAttr(b.getArrayAttr(starts));
    }
  }
  if (auto g = dyn_cast<nn::GatherOp>(op)) {
    // A split table axis: the op learns where each rank's block starts
    // (the operand is already local here; the rule has the global size).
    int64_t rank0 = static_cast<int64_t>(rule->operands[0].size());
    int64_t axis = static_cast<int64_t>(g.getAxis());
    if (axis < 0)
      axis += rank0;
    const AxisList &axes = layoutOf(g.getInput()).dims[axis];
    if (!axes.empty() && !rule->operands[0][axis].empty()) {
      int64_t rows = rule->factorSizes[rule->operands[0][axis].front()];
      int64_t block = rows / mesh.groupSize(axes);
      // The rows the indices address: all of them, or fewer when the
      // table is zero-padded (axis_size given before partitioning).
      int64_t global = g.getAxisSize() ? static_cast<int64_t>(*g.getAxisSize()) : rows;
      SmallVector<int64_t> starts;
      for (int64_t rank = 0, n = mesh.getNumRanks(); rank < n; ++rank)
        starts.push_back(mesh.indexAlong(rank, axes) * block);
      Builder b(op->getContext());
      g.setAxisSizeAttr(b.getI64IntegerAttr(global));
      g.setAxisStartsAttr(b.getDenseI64ArrayAttr(starts));
    }
  }
  if (failed(localizeAttributes(op, *rule, localSizes)))
    return failure();
  return success();
}

LogicalResult Partitioner::partitionFunction(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  OpBuilder b(fn.getContext());
  b.setInsertionPointToStart(&body);
  // Layouts first: rewriting removes the attributes they are read from.
  for (BlockArgument arg : fn.getArguments())
    if (isa<RankedTensorType>(arg.getType()))
      layoutOf(arg);
  bool bad = false;
  fn.walk([&](Operation *op) {
    for (Value r : op->getResults())
      if (isa<RankedTensorType>(r.getType()))
        layoutOf(r);
    if (op->getDialect() && op->getDialect()->getNamespace() == "nn") {
      auto rule = getShardingRule(op);
      if (failed(rule))
        bad = true;
      else
        rules[op] = *rule;
    }
  });
  if (bad)
    return failure();
  // Each rank keeps its piece of every input.
  for (BlockArgument arg : fn.getArguments()) {
    if (!isa<RankedTensorType>(arg.getType()))
      continue;
    Layout layout = layoutOf(arg);
    fn.removeArgAttr(arg.getArgNumber(), kShardingAttr);
    if (llvm::all_of(layout.dims, [](const AxisList &a) { return a.empty(); }))
      continue;
    auto piece = ReshardPlanner(mesh).emit(b, fn.getLoc(), arg,
                                           Layout::replicated(layout.dims.size()), layout);
    if (failed(piece))
      return failure();
    Operation *first = piece->getDefiningOp();
    while (first->getOperand(0) != arg)
      first = first->getOperand(0).getDefiningOp();
    arg.replaceAllUsesExcept(*piece, first);
    layouts[*piece] = layout;
  }
  SmallVector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
  for (Operation *op : ops) {
    if (auto r = dyn_cast<ReshardOp>(op)) {
      OpBuilder rb(op);
      auto out = ReshardPlanner(mesh).emit(rb, r.getLoc(), r.getInput(),
                                           layoutOf(r.getInput()), layoutOf(r.getResult()));
      if (failed(out))
        return failure();
      layouts[*out] = layoutOf(r.getResult());
      r.replaceAllUsesWith(*out);
      continue; // erased below, once its input's producer is rewritten
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      OpBuilder rb(op);
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        Layout layout = Layout::replicated(cast<RankedTensorType>(fn.getResultTypes()[i]).getRank());
        if (auto s = fn.getResultAttrOfType<ShardingAttr>(i, kShardingAttr))
          layout = Layout::of(s);
        fn.removeResultAttr(i, StringAttr::get(fn.getContext(), kShardingAttr));
        auto whole = ReshardPlanner(mesh).emit(rb, ret.getLoc(), v, layout,
                                               Layout::replicated(layout.dims.size()));
        if (failed(whole))
          return failure();
        ret->setOperand(i, *whole);
      }
      continue;
    }
    if (op->getDialect() && op->getDialect()->getNamespace() == "nn") {
      if (failed(localizeOp(op)))
        return failure();
      continue;
    }
  }
  for (Operation *op : llvm::reverse(ops)) {
    if (isa<ReshardOp>(op))
      op->erase();
    else
      op->removeAttr(kShardingsAttr);
  }
  return success();
}

struct DistPartitionPass : public shardflow::dist::impl::DistPartitionBase<DistPartitionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = getModuleMesh(module);
    if (!mesh)
      return signalPassFailure();
    Partitioner p;
    p.module = module;
    p.mesh = mesh;
    for (auto fn : module.getOps<func::FuncOp>())
      if (failed(p.partitionFunction(fn)))
        return signalPassFailure();
  }
};

} // namespace
