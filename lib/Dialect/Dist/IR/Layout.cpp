//===- Layout.cpp - a sharding as per-dimension axis lists -----------------===//

#include "shardflow/Dialect/Dist/IR/Layout.h"

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

Layout Layout::of(ShardingAttr sharding) {
  Layout l;
  for (DimShardingAttr d : sharding.getDims())
    l.dims.emplace_back(d.getAxes().begin(), d.getAxes().end());
  l.unreduced.assign(sharding.getUnreduced().begin(), sharding.getUnreduced().end());
  return l;
}

ShardingAttr Layout::toAttr(MLIRContext *ctx, FlatSymbolRefAttr mesh) const {
  SmallVector<DimShardingAttr> d;
  for (const AxisList &axes : dims)
    d.push_back(DimShardingAttr::get(ctx, axes, false));
  return ShardingAttr::get(ctx, mesh, d, {}, unreduced);
}

MeshOp dist::getModuleMesh(ModuleOp module) {
  auto meshes = llvm::to_vector(module.getOps<MeshOp>());
  if (meshes.size() == 1)
    return meshes.front();
  if (meshes.empty())
    module.emitError("the program has no dist.mesh (give shard-opt --mesh, e.g. "
                     "--mesh dp=2,tp=2)");
  else
    meshes[1].emitError("only one dist.mesh per program is supported");
  return {};
}

ShardingAttr dist::getValueSharding(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (!fn)
      return {};
    return fn.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(), kShardingAttr);
  }
  Operation *op = v.getDefiningOp();
  if (auto r = dyn_cast<ReshardOp>(op))
    return r.getSharding();
  if (auto c = dyn_cast<ConstraintOp>(op))
    return c.getSharding();
  auto list = op->getAttrOfType<ArrayAttr>(kShardingsAttr);
  if (!list)
    return {};
  return dyn_cast<ShardingAttr>(list[cast<OpResult>(v).getResultNumber()]);
}

Layout dist::getValueLayout(Value v) {
  if (ShardingAttr s = getValueSharding(v))
    return Layout::of(s);
  return Layout::replicated(cast<RankedTensorType>(v.getType()).getRank());
}

void dist::setValueSharding(Value v, ShardingAttr sharding) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto fn = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    fn.setArgAttr(arg.getArgNumber(), kShardingAttr, sharding);
    return;
  }
  Operation *op = v.getDefiningOp();
  SmallVector<Attribute> list;
  if (auto old = op->getAttrOfType<ArrayAttr>(kShardingsAttr))
    list.assign(old.begin(), old.end());
  else
    for (Value r : op->getResults())
      list.push_back(ShardingAttr::getReplicated(
          op->getContext(), sharding.getMesh(),
          cast<RankedTensorType>(r.getType()).getRank()));
  list[cast<OpResult>(v).getResultNumber()] = sharding;
  op->setAttr(kShardingsAttr, ArrayAttr::get(op->getContext(), list));
}

bool dist::isShardableFactor(const ShardingRule &rule, int64_t f) {
  if (rule.factorKinds[f] == FactorKind::NeedReplication)
    return false;
  auto minorSomewhere = [&](ArrayRef<TensorFactors> tensors) {
    for (const TensorFactors &t : tensors)
      for (const auto &dim : t)
        for (size_t i = 1; i < dim.size(); ++i)
          if (dim[i] == f)
            return true;
    return false;
  };
  return !minorSomewhere(rule.operands) && !minorSomewhere(rule.results);
}

Layout dist::project(const TensorFactors &factors, const FactorAxes &assignment) {
  Layout l;
  for (const auto &dim : factors)
    l.dims.push_back(dim.empty() ? AxisList() : assignment[dim.front()]);
  return l;
}

int64_t dist::axesSize(MeshOp mesh, ArrayRef<StringAttr> axes) {
  return mesh.groupSize(axes);
}

std::string dist::axesText(ArrayRef<StringAttr> axes) {
  std::string s = "[";
  for (auto [i, a] : llvm::enumerate(axes))
    s += (i ? ", \"" : "\"") + a.getValue().str() + "\"";
  return s + "]";
}
