//===- ReshardPlanner.cpp - the collectives between two layouts ------------===//
//
// See ReshardPlanner.h and docs/sharding.md: partial sums are reduced
// first, where a reduce_scatter can also make the target's split; splits
// move between dimensions with all_to_all; what the target does not split
// is gathered; what it splits anew is sliced locally, which costs nothing.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/Transforms/ReshardPlanner.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Planner/CollectiveCostModel.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;
using runtime::CollectiveKind;

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

FailureOr<SmallVector<ReshardStep>> ReshardPlanner::plan(const Layout &from,
                                                         const Layout &to) const {
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
        steps.push_back({CollectiveKind::ReduceScatter, {a}, d, -1});
        have.push_back(a);
        scattered = true;
      }
    }
    if (!scattered)
      sumAxes.push_back(a);
  }
  if (!sumAxes.empty())
    steps.push_back({CollectiveKind::AllReduce, sumAxes, -1, -1});
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
              {CollectiveKind::AllGather, AxisList(dst.begin() + keep, dst.end()), j, -1});
          dst.resize(keep);
        }
        // Split j, concatenate i.
        steps.push_back({CollectiveKind::AllToAll, {a}, j, i});
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
    steps.push_back({CollectiveKind::AllGather, AxisList(have.begin() + keep, have.end()), d, -1});
    have.resize(keep);
  }

  // 4. Splits the target adds: each rank keeps its piece, no data moves.
  for (int64_t d = 0; d < rank; ++d) {
    AxisList &have = cur.dims[d];
    const AxisList &want = to.dims[d];
    if (want.size() == have.size())
      continue;
    steps.push_back({CollectiveKind::LocalSlice, AxisList(want.begin() + have.size(), want.end()), d, -1});
    have = want;
  }
  if (cur != to)
    return failure();
  return steps;
}

double ReshardPlanner::cost(const Layout &from, const Layout &to,
                            RankedTensorType global) const {
  auto steps = plan(from, to);
  if (failed(steps))
    return 1e30;
  double bytes = double(global.getNumElements()) *
                 nn::getElementStorageBytes(global.getElementType());
  for (const AxisList &axes : from.dims)
    bytes /= mesh.groupSize(axes);
  // What each step moves, in nccl-tests' algorithm bytes: a gather's
  // output, the others' input.
  double cost = 0;
  for (const ReshardStep &s : *steps) {
    int64_t n = mesh.groupSize(s.axes);
    if (s.kind == CollectiveKind::AllGather)
      bytes *= n;
    cost += CollectiveCostModel::bytesSent(s.kind, n, bytes);
    if (s.kind == CollectiveKind::ReduceScatter || s.kind == CollectiveKind::LocalSlice)
      bytes /= n;
  }
  return cost;
}

FailureOr<Value> ReshardPlanner::emit(OpBuilder &b, Location loc, Value local,
                                      const Layout &from, const Layout &to) const {
  auto steps = plan(from, to);
  if (failed(steps))
    return emitError(loc) << "cannot reshard a value to a sharding with unreduced "
                             "axes that it does not have";
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  for (const ReshardStep &s : *steps) {
    int64_t n = mesh.groupSize(s.axes);
    ArrayAttr axes = axesAttr(b, s.axes);
    switch (s.kind) {
    case CollectiveKind::AllReduce:
      local = AllReduceOp::create(b, loc, local.getType(), local, meshRef, axes,
                                  b.getStringAttr("sum"));
      break;
    case CollectiveKind::ReduceScatter:
      local = ReduceScatterOp::create(b, loc, scaled(local, -1, s.dim, n), local, meshRef,
                                      axes, b.getI64IntegerAttr(s.dim),
                                      b.getStringAttr("sum"));
      break;
    case CollectiveKind::AllToAll:
      local = AllToAllOp::create(b, loc, scaled(local, s.otherDim, s.dim, n), local,
                                 meshRef, axes, b.getI64IntegerAttr(s.dim),
                                 b.getI64IntegerAttr(s.otherDim));
      break;
    case CollectiveKind::AllGather:
      local = AllGatherOp::create(b, loc, scaled(local, s.dim, -1, n), local, meshRef,
                                  axes, b.getI64IntegerAttr(s.dim));
      break;
    case CollectiveKind::LocalSlice:
      local = AllSliceOp::create(b, loc, scaled(local, -1, s.dim, n), local, meshRef,
                                 axes, b.getI64IntegerAttr(s.dim));
      break;
    default:
      llvm_unreachable("plan() makes no other collectives");
    }
  }
  return local;
}
