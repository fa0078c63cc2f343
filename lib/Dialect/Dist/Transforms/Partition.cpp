//===- Partition.cpp - from the global program to the per-rank program ----===//
//
// After dist-insert-reshards every op's operands are laid out as its rule
// needs, so each op runs unchanged on its local pieces: partitioning gives
// every value its local type, has the op registry localize the attributes
// that describe the global op (weight slices, gather row blocks, head
// counts), hands an op with a partition hook to it (an op that becomes an
// algorithm on its pieces), and turns each dist.reshard into collectives. The function keeps its global signature: each rank takes the
// whole inputs and keeps its piece, and results are gathered whole.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
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

  /// Ops a partition hook replaced, erased once the function is done.
  llvm::SmallPtrSet<Operation *, 4> replaced;

  LogicalResult partitionFunction(func::FuncOp fn);
  /// Gives `op` its local types and attributes, or hands it to its
  /// partition hook.
  LogicalResult localizeOp(Operation *op);
};

LogicalResult Partitioner::localizeOp(Operation *op) {
  // The factors' local sizes, read from the layouts of the op's tensors
  // (consistent after dist-insert-reshards).
  const ShardingRule &rule = rules.find(op)->second;
  SmallVector<Layout> operandLayouts, resultLayouts;
  for (Value v : op->getOperands())
    operandLayouts.push_back(layoutOf(v));
  for (Value r : op->getResults())
    resultLayouts.push_back(layoutOf(r));
  SmallVector<int64_t> localSizes(rule.factorSizes);
  auto note = [&](const TensorFactors &factors, const Layout &layout) {
    for (auto [d, axes] : llvm::enumerate(layout.dims))
      if (!axes.empty() && !factors[d].empty())
        localSizes[factors[d].front()] =
            rule.factorSizes[factors[d].front()] / mesh.groupSize(axes);
  };
  for (auto [i, layout] : llvm::enumerate(operandLayouts))
    note(rule.operands[i], layout);
  for (auto [i, layout] : llvm::enumerate(resultLayouts))
    note(rule.results[i], layout);
  LocalizationContext context{rule, localSizes, mesh, operandLayouts, resultLayouts};

  // An op that partitions into an algorithm builds it from its local
  // operands; its results' users take the values it returns.
  if (const PartitionHook *hook = getPartitionHook(op)) {
    OpBuilder b(op);
    auto replacements = (*hook)(b, op, op->getOperands(), context);
    if (failed(replacements))
      return failure();
    if (replacements->size() != op->getNumResults())
      return op->emitOpError("partition hook returned ")
             << replacements->size() << " values for " << op->getNumResults() << " results";
    for (auto [result, replacement, layout] :
         llvm::zip(op->getResults(), *replacements, resultLayouts)) {
      if (replacement.getType() != local(result, layout))
        return op->emitOpError("partition hook returned ")
               << replacement.getType() << " for a result whose local type is "
               << local(result, layout);
      layouts[replacement] = layout;
      result.replaceAllUsesWith(replacement);
    }
    replaced.insert(op);
    return success();
  }

  for (auto [r, layout] : llvm::zip(op->getResults(), resultLayouts))
    r.setType(local(r, layout));
  return localizeAttributes(op, context);
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
        // The new value of training state stays this rank's piece: the
        // state's own buffer (its sharding, given by dist-propagate).
        if (fn.getResultAttr(i, "nn.state"))
          continue;
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
  // State results are local pieces: the signature says so.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(),
                               ret.getOperandTypes()));
  for (Operation *op : llvm::reverse(ops)) {
    if (isa<ReshardOp>(op) || replaced.contains(op))
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
