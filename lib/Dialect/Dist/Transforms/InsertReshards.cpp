//===- InsertReshards.cpp - make operands match each op's factor shardings -===//
//
// After propagation every value has a sharding, but an op's operands and
// results need not agree with one another under its rule (a conflict was
// resolved for one of them, or a NeedReplication factor is split). Here
// each op decides one sharding per factor, results first (an op computes
// its outputs where they are wanted), then operands (which is how a split
// contraction dimension leaves partial sums), and dist.reshard ops make the
// program consistent.
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallSet.h"

namespace shardflow::dist {
#define GEN_PASS_DEF_DISTINSERTRESHARDS
#include "shardflow/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace shardflow::dist

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

namespace {

/// Ops that produce whole tensors only: their results start replicated and
/// any split is a reshard after them.
bool producesReplicated(Operation *op) {
  return isa<nn::ConstantOp, nn::RangeOp>(op);
}

struct Inserter {
  ModuleOp module;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;
  /// One reshard per (value, target sharding).
  DenseMap<std::pair<Value, Attribute>, Value> cache;

  Value reshard(OpBuilder &b, Location loc, Value v, const Layout &to) {
    ShardingAttr target = to.toAttr(module.getContext(), meshRef);
    auto key = std::make_pair(v, Attribute(target));
    auto it = cache.find(key);
    if (it != cache.end())
      return it->second;
    Value r = ReshardOp::create(b, loc, v.getType(), v, target);
    cache[key] = r;
    return r;
  }

  LogicalResult rewriteOp(Operation *op);
  LogicalResult run();
};

LogicalResult Inserter::rewriteOp(Operation *op) {
  auto rule = getShardingRule(op);
  if (failed(rule))
    return failure();
  const ShardingRule &r = *rule;
  SmallVector<Layout> resultLayouts, operandLayouts;
  for (Value v : op->getResults())
    resultLayouts.push_back(getValueLayout(v));
  for (Value v : op->getOperands())
    operandLayouts.push_back(getValueLayout(v));

  // One split per factor, offered by the results' layouts and the
  // operands' in the given order; an axis serves one factor only.
  auto decide = [&](bool resultsFirst) {
    FactorAxes assignment(r.numFactors());
    llvm::SmallSet<StringRef, 4> used;
    auto offer = [&](const TensorFactors &factors, const Layout &layout) {
      for (auto [d, axes] : llvm::enumerate(layout.dims)) {
        if (axes.empty() || factors[d].empty())
          continue;
        int64_t f = factors[d].front();
        if (!assignment[f].empty() || !isShardableFactor(r, f))
          continue;
        if (r.factorSizes[f] % mesh.groupSize(axes) != 0)
          continue;
        if (llvm::any_of(axes, [&](StringAttr a) { return used.contains(a.getValue()); }))
          continue;
        assignment[f] = axes;
        for (StringAttr a : axes)
          used.insert(a.getValue());
      }
    };
    auto offerResults = [&] {
      if (!producesReplicated(op))
        for (auto [i, layout] : llvm::enumerate(resultLayouts))
          offer(r.results[i], layout);
    };
    auto offerOperands = [&] {
      for (auto [i, layout] : llvm::enumerate(operandLayouts))
        offer(r.operands[i], layout);
    };
    if (resultsFirst) {
      offerResults();
      offerOperands();
    } else {
      offerOperands();
      offerResults();
    }
    return assignment;
  };
  auto producedLayout = [&](const FactorAxes &assignment, int64_t i) {
    Layout made = project(r.results[i], assignment);
    for (int64_t f = 0; f < r.numFactors(); ++f)
      if (r.factorKinds[f] == FactorKind::Reduction)
        made.unreduced.append(assignment[f].begin(), assignment[f].end());
    llvm::sort(made.unreduced, [&](StringAttr a, StringAttr b) {
      return mesh.axisIndex(a.getValue()) < mesh.axisIndex(b.getValue());
    });
    return made;
  };
  // The bytes moved to run the op with `assignment`: operands resharded to
  // what it needs, results from what it makes to what they are assigned.
  auto cost = [&](const FactorAxes &assignment) {
    double total = 0;
    for (auto [i, v] : llvm::enumerate(op->getOperands()))
      total += reshardCost(operandLayouts[i], project(r.operands[i], assignment),
                           cast<RankedTensorType>(v.getType()), mesh);
    for (auto [i, v] : llvm::enumerate(op->getResults()))
      total += reshardCost(producedLayout(assignment, i), resultLayouts[i],
                           cast<RankedTensorType>(v.getType()), mesh);
    return total;
  };
  // Computing where results are wanted is the default; computing where the
  // operands are (a row-parallel matmul left partial, then reduce-scattered
  // into a sequence-split result) wins when it moves fewer bytes.
  FactorAxes assignment = decide(/*resultsFirst=*/true);
  FactorAxes alternative = decide(/*resultsFirst=*/false);
  if (cost(alternative) < cost(assignment))
    assignment = alternative;

  OpBuilder b(op);
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    Layout want = project(r.operands[i], assignment);
    if (operandLayouts[i] != want)
      op->setOperand(i, reshard(b, op->getLoc(), v, want));
  }
  b.setInsertionPointAfter(op);
  SmallVector<Attribute> produced;
  SmallVector<std::pair<Value, Layout>> fixups;
  for (auto [i, v] : llvm::enumerate(op->getResults())) {
    Layout made = producedLayout(assignment, i);
    produced.push_back(made.toAttr(op->getContext(), meshRef));
    if (made != resultLayouts[i])
      fixups.push_back({v, resultLayouts[i]});
  }
  op->setAttr(kShardingsAttr, ArrayAttr::get(op->getContext(), produced));
  for (auto &[v, want] : fixups) {
    Value fixed = reshard(b, op->getLoc(), v, want);
    v.replaceAllUsesExcept(fixed, fixed.getDefiningOp());
  }
  return success();
}

LogicalResult Inserter::run() {
  for (auto fn : module.getOps<func::FuncOp>()) {
    SmallVector<Operation *> ops;
    for (Operation &op : fn.getBody().front())
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (auto c = dyn_cast<ConstraintOp>(op)) {
        OpBuilder b(op);
        auto r = ReshardOp::create(b, c.getLoc(), c.getType(), c.getInput(), c.getSharding());
        c.replaceAllUsesWith(r.getResult());
        c.erase();
        continue;
      }
      if (isa<ReshardOp>(op))
        continue;
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        OpBuilder b(op);
        for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
          auto s = fn.getResultAttrOfType<ShardingAttr>(i, kShardingAttr);
          Layout want = s ? Layout::of(s)
                          : Layout::replicated(cast<RankedTensorType>(v.getType()).getRank());
          want.unreduced.clear();
          if (getValueLayout(v) != want)
            ret->setOperand(i, reshard(b, ret.getLoc(), v, want));
        }
        continue;
      }
      if (op->getDialect() && op->getDialect()->getNamespace() == "nn") {
        if (failed(rewriteOp(op)))
          return failure();
        continue;
      }
      return op->emitOpError("has no sharding rule; it cannot be partitioned");
    }
  }
  return success();
}

struct DistInsertReshardsPass
    : public shardflow::dist::impl::DistInsertReshardsBase<DistInsertReshardsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = getModuleMesh(module);
    if (!mesh)
      return signalPassFailure();
    Inserter inserter;
    inserter.module = module;
    inserter.mesh = mesh;
    inserter.meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    if (failed(inserter.run()))
      return signalPassFailure();
  }
};

} // namespace
