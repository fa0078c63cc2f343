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
// Partial sums that meet in an add (a parallel residual block: attention and
// MLP outputs, both row-parallel, added together) stay partial until they
// meet when that moves fewer bytes, so one collective reduces both: the ops
// on their way that are linear in them (adds, subs, products by whole
// values, reshapes...) run on the partial pieces, and each whole operand
// added is scaled by 1/n so that the n ranks' pieces still sum to it.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/Dist/Transforms/ReshardPlanner.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Support/ONNXLocation.h"

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

/// Ops through which a partial sum stays one: linear in some operand (adds
/// and subs, whose whole operands are then scaled; products and quotients
/// by whole values; moves and copies). The facts are the ops' traits.
bool passesPartialSums(Operation *op) {
  return llvm::any_of(llvm::seq(op->getNumOperands()),
                      [&](unsigned i) { return nn::isLinearIn(op, i); });
}

struct Inserter {
  ModuleOp module;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;
  /// Remarks on the partial sums' meetings.
  bool explain = false;
  /// One reshard per (value, target sharding).
  DenseMap<std::pair<Value, Attribute>, Value> cache;

  /// An op that runs on partial sums (an add or sub, or a linear op of one
  /// partial operand): the axes they are unreduced over, and the op's
  /// factor assignment (those axes left out).
  struct PartialSum {
    AxisList unreduced;
    FactorAxes assignment;
  };
  DenseMap<Operation *, PartialSum> partialSums;
  /// Ops that make a partial sum kept partial, and how they run (operands
  /// first, where their own choice could differ).
  DenseMap<Operation *, FactorAxes> partialSources;
  /// Results that stay partial: their one user is in `partialSums`.
  DenseSet<Value> keptPartial;

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

  FactorAxes decide(Operation *op, const ShardingRule &r, ArrayRef<Layout> operandLayouts,
                    ArrayRef<Layout> resultLayouts, bool resultsFirst,
                    ArrayRef<StringAttr> reserved = {});
  Layout producedLayout(const ShardingRule &r, const FactorAxes &assignment, int64_t i);
  double cost(Operation *op, const ShardingRule &r, ArrayRef<Layout> operandLayouts,
              ArrayRef<Layout> resultLayouts, const FactorAxes &assignment,
              bool withResults = true);
  FactorAxes choose(Operation *op, const ShardingRule &r, ArrayRef<Layout> operandLayouts,
                    ArrayRef<Layout> resultLayouts);
  void findPartialSums(func::FuncOp fn);
  Value scaleWhole(OpBuilder &b, Location loc, Value v, const Layout &layout, int64_t n);
  LogicalResult rewriteOp(Operation *op);
  LogicalResult run();
};

SmallVector<Layout> layoutsOf(ValueRange values) {
  SmallVector<Layout> layouts;
  for (Value v : values)
    layouts.push_back(getValueLayout(v));
  return layouts;
}

/// One split per factor, offered by the results' layouts and the operands'
/// in the given order; an axis serves one factor only, and `reserved` axes
/// none.
FactorAxes Inserter::decide(Operation *op, const ShardingRule &r,
                            ArrayRef<Layout> operandLayouts, ArrayRef<Layout> resultLayouts,
                            bool resultsFirst, ArrayRef<StringAttr> reserved) {
  FactorAxes assignment(r.numFactors());
  llvm::SmallSet<StringRef, 4> used;
  for (StringAttr a : reserved)
    used.insert(a.getValue());
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
    if (!nn::isMadeFromAttributes(op))
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
}

Layout Inserter::producedLayout(const ShardingRule &r, const FactorAxes &assignment,
                                int64_t i) {
  Layout made = project(r.results[i], assignment);
  for (int64_t f = 0; f < r.numFactors(); ++f)
    if (r.factorKinds[f] == FactorKind::Reduction)
      made.unreduced.append(assignment[f].begin(), assignment[f].end());
  llvm::sort(made.unreduced, [&](StringAttr a, StringAttr b) {
    return mesh.axisIndex(a.getValue()) < mesh.axisIndex(b.getValue());
  });
  return made;
}

/// The bytes moved to run `op` with `assignment`: operands resharded to
/// what it needs, and (`withResults`) results from what it makes to what
/// they are assigned.
double Inserter::cost(Operation *op, const ShardingRule &r, ArrayRef<Layout> operandLayouts,
                      ArrayRef<Layout> resultLayouts, const FactorAxes &assignment,
                      bool withResults) {
  double total = 0;
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    total += ReshardPlanner(mesh).cost(operandLayouts[i], project(r.operands[i], assignment),
                                       cast<RankedTensorType>(v.getType()));
  if (withResults)
    for (auto [i, v] : llvm::enumerate(op->getResults()))
      total += ReshardPlanner(mesh).cost(producedLayout(r, assignment, i), resultLayouts[i],
                                         cast<RankedTensorType>(v.getType()));
  return total;
}

/// Computing where results are wanted is the default; computing where the
/// operands are (a row-parallel matmul left partial, then reduce-scattered
/// into a sequence-split result) wins when it moves fewer bytes.
FactorAxes Inserter::choose(Operation *op, const ShardingRule &r,
                            ArrayRef<Layout> operandLayouts, ArrayRef<Layout> resultLayouts) {
  FactorAxes assignment = decide(op, r, operandLayouts, resultLayouts, /*resultsFirst=*/true);
  FactorAxes alternative = decide(op, r, operandLayouts, resultLayouts, /*resultsFirst=*/false);
  if (cost(op, r, operandLayouts, resultLayouts, alternative) <
      cost(op, r, operandLayouts, resultLayouts, assignment))
    return alternative;
  return assignment;
}

/// Finds the partial sums worth keeping partial. A source is an op that
/// can leave its result partial where its users want it reduced (by its
/// own choice, or running where its operands are); its value flows through
/// ops linear in it (`passesPartialSums`) whose other operands are whole
/// over those axes, each value used once. Where two flows with the same
/// unreduced axes meet in an add or sub, keeping them partial up to it
/// costs the sources' operand reshards and one reduction after the
/// meeting, against what the sources cost on their own choice (each
/// reduced where it is made): the cheaper wins. A meeting that flows into
/// a later one is decided with it.
void Inserter::findPartialSums(func::FuncOp fn) {
  struct Flow {
    AxisList unreduced;
    Layout layout;
    Operation *op;
  };
  struct Source {
    FactorAxes assignment;
    double kept, alone;
  };
  DenseMap<Value, Flow> flows;
  DenseMap<Operation *, FactorAxes> sumAssignments;
  DenseMap<Operation *, Source> sources;
  SmallVector<Operation *> meetings;
  for (Operation &op : fn.getBody().front()) {
    if (!op.getDialect() || op.getDialect()->getNamespace() != "nn" || nn::isMadeFromAttributes(&op) ||
        op.getNumResults() != 1)
      continue;
    auto type = dyn_cast<RankedTensorType>(op.getResult(0).getType());
    if (!type || !isa<FloatType>(type.getElementType()))
      continue;
    auto rule = getShardingRule(&op);
    if (failed(rule))
      continue;
    const ShardingRule &r = *rule;
    SmallVector<Layout> operandLayouts = layoutsOf(op.getOperands());
    SmallVector<Layout> resultLayouts = layoutsOf(op.getResults());
    if (passesPartialSums(&op)) {
      AxisList unreduced;
      int64_t partial = 0;
      bool ok = true;
      SmallVector<Layout> pieces(operandLayouts);
      for (auto [i, v] : llvm::enumerate(op.getOperands())) {
        auto it = flows.find(v);
        if (it == flows.end())
          continue;
        if (partial++ == 0)
          unreduced = it->second.unreduced;
        ok &= it->second.unreduced == unreduced && v.hasOneUse();
        // Only a sum takes several partial operands; a product or quotient
        // is linear in one (a quotient in its numerator).
        ok &= nn::isLinearIn(&op, i) && (partial == 1 || nn::isAdditive(&op));
        pieces[i] = it->second.layout;
        pieces[i].unreduced.clear();
      }
      if (partial && ok) {
        FactorAxes a = decide(&op, r, pieces, resultLayouts, /*resultsFirst=*/false, unreduced);
        for (auto [i, v] : llvm::enumerate(op.getOperands())) {
          Layout want = project(r.operands[i], a);
          if (flows.count(v)) {
            ok &= flows.find(v)->second.layout.dims == want.dims;
            continue;
          }
          // A whole operand (scaled where it is added): it must be whole
          // over the unreduced axes.
          Layout have = getValueLayout(v);
          ok &= have.unreduced.empty();
          for (const AxisList &axes : have.dims)
            for (StringAttr axis : axes)
              ok &= !llvm::is_contained(unreduced, axis);
        }
        if (ok) {
          Layout made = project(r.results[0], a);
          made.unreduced = unreduced;
          flows[op.getResult(0)] = {unreduced, made, &op};
          sumAssignments[&op] = a;
          if (partial >= 2 && nn::isAdditive(&op))
            meetings.push_back(&op);
          continue;
        }
      }
    }
    if (!resultLayouts[0].unreduced.empty())
      continue;
    FactorAxes chosen = choose(&op, r, operandLayouts, resultLayouts);
    FactorAxes a = chosen;
    Layout made = producedLayout(r, a, 0);
    if (made.unreduced.empty()) {
      a = decide(&op, r, operandLayouts, resultLayouts, /*resultsFirst=*/false);
      made = producedLayout(r, a, 0);
    }
    if (made.unreduced.empty())
      continue;
    // 1/n must be exact in a 16-bit float (n a power of two); in f32 its
    // rounding is below the sum's own.
    int64_t n = mesh.groupSize(made.unreduced);
    if (!llvm::isPowerOf2_64(n) && type.getElementType().getIntOrFloatBitWidth() < 32)
      continue;
    flows[op.getResult(0)] = {made.unreduced, made, &op};
    sources[&op] = {a, cost(&op, r, operandLayouts, resultLayouts, a, /*withResults=*/false),
                    cost(&op, r, operandLayouts, resultLayouts, chosen)};
  }
  // From the last meeting back: its region is every sum and source that
  // flows into it.
  for (Operation *meeting : llvm::reverse(meetings)) {
    if (partialSums.count(meeting))
      continue;
    SmallVector<Operation *> sums, made;
    SmallVector<Value> kept;
    SmallVector<Operation *> work{meeting};
    DenseSet<Operation *> seen;
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!seen.insert(op).second)
        continue;
      if (!sumAssignments.count(op)) {
        made.push_back(op);
        continue;
      }
      sums.push_back(op);
      for (Value v : op->getOperands()) {
        auto it = flows.find(v);
        if (it == flows.end())
          continue;
        kept.push_back(v);
        work.push_back(it->second.op);
      }
    }
    Value result = meeting->getResult(0);
    double keptCost = ReshardPlanner(mesh).cost(flows.find(result)->second.layout,
                                                getValueLayout(result),
                                                cast<RankedTensorType>(result.getType()));
    double aloneCost = 0;
    for (Operation *op : made) {
      keptCost += sources.find(op)->second.kept;
      aloneCost += sources.find(op)->second.alone;
    }
    if (explain) {
      // Locations in the text too: an ONNX node by its name and op type.
      auto remark = meeting->emitRemark();
      remark << "partial sums over " << axesText(flows.find(result)->second.unreduced)
             << " of " << made.size() << " ops meet at " << meeting->getName() << " "
             << describeLocation(meeting->getLoc()) << ": ";
      if (keptCost < aloneCost)
        remark << "reduced together after it (" << int64_t(keptCost)
               << " bytes sent per rank instead of " << int64_t(aloneCost) << ")";
      else
        remark << "reduced where they are made (" << int64_t(aloneCost)
               << " bytes sent per rank; together: " << int64_t(keptCost) << ")";
      for (Operation *op : made)
        remark.attachNote(op->getLoc())
            << "partial sum made by " << op->getName() << " " << describeLocation(op->getLoc());
    }
    if (keptCost >= aloneCost)
      continue;
    for (Operation *op : sums)
      partialSums[op] = {flows.find(op->getResult(0))->second.unreduced,
                         sumAssignments.find(op)->second};
    for (Operation *op : made)
      partialSources[op] = sources.find(op)->second.assignment;
    keptPartial.insert(kept.begin(), kept.end());
  }
}

/// `v` (laid out as `layout`, whole over the unreduced axes) times 1/n:
/// what each of the n ranks adds to a partial sum so that the pieces still
/// sum to `v`. A constant is scaled here; otherwise an nn.mul by a scalar
/// constant, which convert-nn-to-rt folds into a weight's load.
Value Inserter::scaleWhole(OpBuilder &b, Location loc, Value v, const Layout &layout,
                           int64_t n) {
  MLIRContext *ctx = module.getContext();
  Type element = cast<RankedTensorType>(v.getType()).getElementType();
  if (auto c = v.getDefiningOp<nn::ConstantOp>()) {
    // A small bias held in the IR: scaled here.
    if (auto dense = dyn_cast<DenseFPElementsAttr>(c.getValue())) {
      auto semantics = &cast<FloatType>(element).getFloatSemantics();
      SmallVector<APFloat> values;
      for (APFloat x : dense.getValues<APFloat>()) {
        bool lost = false;
        APFloat wide(x.convertToDouble() / double(n));
        wide.convert(*semantics, APFloat::rmNearestTiesToEven, &lost);
        values.push_back(wide);
      }
      Value scaled = nn::ConstantOp::create(
          b, loc, DenseElementsAttr::get(cast<ShapedType>(v.getType()), values));
      scaled.getDefiningOp()->setAttr(
          kShardingsAttr, b.getArrayAttr({Attribute(layout.toAttr(ctx, meshRef))}));
      return scaled;
    }
  }
  auto scalar = RankedTensorType::get({}, element);
  Value factor = nn::ConstantOp::create(
      b, loc, DenseElementsAttr::get(scalar, b.getFloatAttr(element, 1.0 / double(n))));
  factor.getDefiningOp()->setAttr(
      kShardingsAttr,
      b.getArrayAttr({Attribute(ShardingAttr::getReplicated(ctx, meshRef, 0))}));
  Value scaled = nn::MulOp::create(b, loc, v, factor);
  scaled.getDefiningOp()->setAttr(kShardingsAttr,
                                  b.getArrayAttr({Attribute(layout.toAttr(ctx, meshRef))}));
  return scaled;
}

LogicalResult Inserter::rewriteOp(Operation *op) {
  auto rule = getShardingRule(op);
  if (failed(rule))
    return failure();
  const ShardingRule &r = *rule;
  SmallVector<Layout> resultLayouts = layoutsOf(op->getResults());
  SmallVector<Layout> operandLayouts = layoutsOf(op->getOperands());

  auto sum = partialSums.find(op);
  auto source = partialSources.find(op);
  FactorAxes assignment = sum != partialSums.end()      ? sum->second.assignment
                          : source != partialSources.end() ? source->second
                                                           : choose(op, r, operandLayouts,
                                                                    resultLayouts);

  OpBuilder b(op);
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    Layout want = project(r.operands[i], assignment);
    if (sum != partialSums.end() && keptPartial.contains(v)) {
      // A partial operand, already laid out as the sum needs it.
      continue;
    }
    Value operand = v;
    if (operandLayouts[i] != want)
      operand = reshard(b, op->getLoc(), v, want);
    if (sum != partialSums.end() && nn::isAdditive(op))
      operand = scaleWhole(b, op->getLoc(), operand, want,
                           mesh.groupSize(sum->second.unreduced));
    if (operand != v)
      op->setOperand(i, operand);
  }
  b.setInsertionPointAfter(op);
  SmallVector<Attribute> produced;
  SmallVector<std::pair<Value, Layout>> fixups;
  for (auto [i, v] : llvm::enumerate(op->getResults())) {
    Layout made = producedLayout(r, assignment, i);
    if (sum != partialSums.end())
      made.unreduced = sum->second.unreduced;
    produced.push_back(made.toAttr(op->getContext(), meshRef));
    if (made != resultLayouts[i] && !keptPartial.contains(v))
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
    findPartialSums(fn);
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
  using DistInsertReshardsBase::DistInsertReshardsBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = getModuleMesh(module);
    if (!mesh)
      return signalPassFailure();
    Inserter inserter;
    inserter.module = module;
    inserter.mesh = mesh;
    inserter.meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    inserter.explain = explain;
    if (failed(inserter.run()))
      return signalPassFailure();
  }
};

} // namespace
