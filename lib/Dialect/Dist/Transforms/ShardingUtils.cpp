//===- ShardingUtils.cpp - shared helpers of the dist passes ---------------===//
//
// Also holds the reshard algorithm: how one layout of a value becomes
// another with the least data moved (see docs/sharding.md).
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

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

namespace {

ArrayAttr axesAttr(OpBuilder &b, ArrayRef<StringAttr> axes) {
  return b.getArrayAttr(SmallVector<Attribute>(axes.begin(), axes.end()));
}

RankedTensorType scaled(Value v, int64_t mulDim, int64_t divDim, int64_t n) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(t.getShape());
  if (mulDim >= 0)
    shape[mulDim] *= n;
  if (divDim >= 0)
    shape[divDim] /= n;
  return RankedTensorType::get(shape, t.getElementType());
}

size_t commonPrefix(ArrayRef<StringAttr> a, ArrayRef<StringAttr> b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n])
    ++n;
  return n;
}

} // namespace

FailureOr<SmallVector<ReshardStep>> dist::planReshard(const Layout &from,
                                                     const Layout &to,
                                                     MeshOp mesh) {
  SmallVector<ReshardStep> steps;
  Layout cur = from;
  int64_t rank = cur.dims.size();

  // 1. Partial sums. An unreduced axis that the target splits next in some
  // dimension is reduced and scattered at once; the rest are summed.
  for (StringAttr a : to.unreduced)
    if (!llvm::is_contained(cur.unreduced, a))
      return failure();
  AxisList sumAxes;
  for (StringAttr a : cur.unreduced) {
    if (llvm::is_contained(to.unreduced, a))
      continue;
    bool scattered = false;
    for (int64_t d = 0; d < rank && !scattered; ++d) {
      const AxisList &want = to.dims[d];
      AxisList &have = cur.dims[d];
      if (commonPrefix(have, want) == have.size() && want.size() > have.size() &&
          want[have.size()] == a) {
        steps.push_back({ReshardStep::ReduceScatter, {a}, d, -1});
        have.push_back(a);
        scattered = true;
      }
    }
    if (!scattered)
      sumAxes.push_back(a);
  }
  if (!sumAxes.empty())
    steps.push_back({ReshardStep::AllReduce, sumAxes, -1, -1});
  cur.unreduced = to.unreduced;

  // 2. Splits that move from one dimension to another: all_to_all, which
  // sends each rank only the data it keeps. Moves into a dimension that is
  // ready for the axis come first; only when none is left does a move clear
  // its destination of splits the target does not want there (a swap or a
  // cycle of axes between dimensions): those are gathered first, so only
  // they move twice, not the whole tensor.
  auto tryMove = [&](bool clearDestination) {
    for (int64_t i = 0; i < rank; ++i) {
      AxisList &src = cur.dims[i];
      if (src.empty() || commonPrefix(src, to.dims[i]) == src.size())
        continue;
      StringAttr a = src.back();
      for (int64_t j = 0; j < rank; ++j) {
        if (j == i)
          continue;
        AxisList &dst = cur.dims[j];
        const AxisList &want = to.dims[j];
        size_t keep = commonPrefix(dst, want);
        if (want.size() <= keep || want[keep] != a)
          continue;
        if (keep < dst.size()) {
          if (!clearDestination)
            continue;
          steps.push_back(
              {ReshardStep::AllGather, AxisList(dst.begin() + keep, dst.end()), j, -1});
          dst.resize(keep);
        }
        // Split j, concatenate i.
        steps.push_back({ReshardStep::AllToAll, {a}, j, i});
        src.pop_back();
        dst.push_back(a);
        return true;
      }
    }
    return false;
  };
  while (tryMove(/*clearDestination=*/false) || tryMove(/*clearDestination=*/true)) {
  }

  // 3. Splits the target does not have: gather the extra suffix of each
  // dimension in one all_gather (ranks ordered major axis first).
  for (int64_t d = 0; d < rank; ++d) {
    AxisList &have = cur.dims[d];
    size_t keep = commonPrefix(have, to.dims[d]);
    if (keep == have.size())
      continue;
    steps.push_back({ReshardStep::AllGather, AxisList(have.begin() + keep, have.end()), d, -1});
    have.resize(keep);
  }

  // 4. Splits the target adds: each rank keeps its piece, no data moves.
  for (int64_t d = 0; d < rank; ++d) {
    AxisList &have = cur.dims[d];
    const AxisList &want = to.dims[d];
    if (want.size() == have.size())
      continue;
    steps.push_back({ReshardStep::AllSlice, AxisList(want.begin() + have.size(), want.end()), d, -1});
    have = want;
  }
  if (cur != to)
    return failure();
  return steps;
}

double dist::reshardCost(const Layout &from, const Layout &to, RankedTensorType global,
                         MeshOp mesh) {
  auto steps = planReshard(from, to, mesh);
  if (failed(steps))
    return 1e30;
  double bytes = double(global.getNumElements()) *
                 std::max<int64_t>(1, global.getElementTypeBitWidth() / 8);
  for (const AxisList &axes : from.dims)
    bytes /= mesh.groupSize(axes);
  double cost = 0;
  for (const ReshardStep &s : *steps) {
    int64_t n = mesh.groupSize(s.axes);
    switch (s.kind) {
    case ReshardStep::AllReduce: // ring: 2 (n-1)/n of the buffer
      cost += 2.0 * bytes * (n - 1) / n;
      break;
    case ReshardStep::ReduceScatter:
      cost += bytes * (n - 1) / n;
      bytes /= n;
      break;
    case ReshardStep::AllToAll:
      cost += bytes * (n - 1) / n;
      break;
    case ReshardStep::AllGather:
      bytes *= n;
      cost += bytes * (n - 1) / n;
      break;
    case ReshardStep::AllSlice:
      bytes /= n;
      break;
    }
  }
  return cost;
}

FailureOr<Value> dist::emitReshard(OpBuilder &b, Location loc, Value local,
                                   const Layout &from, const Layout &to,
                                   MeshOp mesh) {
  auto steps = planReshard(from, to, mesh);
  if (failed(steps))
    return emitError(loc) << "cannot reshard a value to a sharding with unreduced "
                             "axes that it does not have";
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  for (const ReshardStep &s : *steps) {
    int64_t n = mesh.groupSize(s.axes);
    ArrayAttr axes = axesAttr(b, s.axes);
    switch (s.kind) {
    case ReshardStep::AllReduce:
      local = AllReduceOp::create(b, loc, local.getType(), local, meshRef, axes,
                                  b.getStringAttr("sum"));
      break;
    case ReshardStep::ReduceScatter:
      local = ReduceScatterOp::create(b, loc, scaled(local, -1, s.dim, n), local, meshRef,
                                      axes, b.getI64IntegerAttr(s.dim),
                                      b.getStringAttr("sum"));
      break;
    case ReshardStep::AllToAll:
      local = AllToAllOp::create(b, loc, scaled(local, s.otherDim, s.dim, n), local,
                                 meshRef, axes, b.getI64IntegerAttr(s.dim),
                                 b.getI64IntegerAttr(s.otherDim));
      break;
    case ReshardStep::AllGather:
      local = AllGatherOp::create(b, loc, scaled(local, s.dim, -1, n), local, meshRef,
                                  axes, b.getI64IntegerAttr(s.dim));
      break;
    case ReshardStep::AllSlice:
      local = AllSliceOp::create(b, loc, scaled(local, -1, s.dim, n), local, meshRef,
                                 axes, b.getI64IntegerAttr(s.dim));
      break;
    }
  }
  return local;
}
