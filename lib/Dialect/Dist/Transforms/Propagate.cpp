//===- Propagate.cpp - sharding propagation through op rules ---------------===//
//
// Every tensor dimension starts open and unsplit. Seeds (annotations on
// arguments, results and ops, dist.constraint) are applied one priority
// level at a time, most important first; after each level, shardings flow
// through the ops' sharding rules, forward then backward in program order,
// until nothing changes. A dimension once set is never changed, so an
// earlier (higher-priority) decision always wins. See docs/sharding.md.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallSet.h"

#include <climits>
#include <map>

namespace shardflow::dist {
#define GEN_PASS_DEF_DISTPROPAGATE
#include "shardflow/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace shardflow::dist

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

namespace {

constexpr int kUnset = INT_MAX;

struct DimState {
  AxisList axes;
  /// Set dims are decided: propagation does not change them.
  bool set = false;
  /// A set dimension seeded open (`{"dp", ?}`): propagation may append
  /// axes to it, never change the ones it has.
  bool open = false;
  int priority = kUnset;
  std::string origin;
};

struct ValueState {
  SmallVector<DimState> dims;
  AxisList replicated;
};

/// A short, stable description of a value for explanations.
std::string describe(Value v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto fn = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "nn.name"))
      os << "input '" << name.getValue() << "'";
    else
      os << "argument " << arg.getArgNumber();
    return s;
  }
  Operation *op = v.getDefiningOp();
  if (auto w = dyn_cast<nn::WeightOp>(op)) {
    os << "weight '" << w.getName() << "'";
    return s;
  }
  os << "result " << cast<OpResult>(v).getResultNumber() << " of "
     << op->getName() << " at " << describeLocation(op->getLoc());
  return s;
}

struct Seed {
  Value value;
  ShardingAttr sharding;
  int priority;
  std::string origin;
};

class Propagator {
public:
  Propagator(ModuleOp module, MeshOp mesh) : module(module), mesh(mesh) {}

  LogicalResult run(bool explain);

private:
  LogicalResult collect();
  void applySeed(const Seed &seed);
  bool propagateOp(Operation *op);
  const ShardingRule *ruleOf(Operation *op);
  ValueState &stateOf(Value v);
  void finalize(bool explain);

  ModuleOp module;
  MeshOp mesh;
  SmallVector<Operation *> ops; // program order
  SmallVector<Seed> seeds;
  DenseMap<Value, ValueState> states;
  DenseMap<Operation *, std::optional<ShardingRule>> rules;
  bool failedRule = false;
};

ValueState &Propagator::stateOf(Value v) {
  auto it = states.find(v);
  if (it != states.end())
    return it->second;
  ValueState &s = states[v];
  s.dims.resize(cast<RankedTensorType>(v.getType()).getRank());
  return s;
}

int priorityOf(Operation *op, StringRef attr = "dist.priority") {
  if (auto p = op->getAttrOfType<IntegerAttr>(attr))
    return p.getInt();
  return 0;
}

LogicalResult Propagator::collect() {
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  auto checkSeed = [&](Operation *at, Value v, ShardingAttr s) -> LogicalResult {
    if (s.getMesh() != meshRef)
      return at->emitError("sharding refers to mesh ")
             << s.getMesh() << " but the program's mesh is " << meshRef;
    return verifySharding(s, v.getType(), mesh, [&] {
      return at->emitError() << "bad sharding for " << describe(v) << ": ";
    });
  };
  for (auto fn : module.getOps<func::FuncOp>()) {
    for (BlockArgument arg : fn.getArguments()) {
      if (!isa<RankedTensorType>(arg.getType()))
        continue;
      stateOf(arg);
      if (auto s = fn.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(), kShardingAttr)) {
        if (failed(checkSeed(fn, arg, s)))
          return failure();
        auto p = fn.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), "dist.priority");
        auto origin = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "dist.origin");
        seeds.push_back({arg, s, p ? int(p.getInt()) : 0,
                         origin ? origin.str() : "seeded on " + describe(arg)});
      }
    }
    for (Operation &op : fn.getBody().front()) {
      ops.push_back(&op);
      for (Value r : op.getResults())
        if (isa<RankedTensorType>(r.getType()))
          stateOf(r);
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (auto [i, v] : llvm::enumerate(ret.getOperands()))
          if (auto s = fn.getResultAttrOfType<ShardingAttr>(i, kShardingAttr)) {
            if (failed(checkSeed(fn, v, s)))
              return failure();
            seeds.push_back({v, s, 0, "seeded on result " + std::to_string(i)});
          }
        continue;
      }
      if (auto c = dyn_cast<ConstraintOp>(op)) {
        seeds.push_back({c.getResult(), c.getSharding(), priorityOf(&op),
                         "dist.constraint at " + [&] {
                           std::string s;
                           llvm::raw_string_ostream os(s);
                           os << op.getLoc();
                           return s;
                         }()});
        continue;
      }
      if (auto r = dyn_cast<ReshardOp>(op)) {
        seeds.push_back({r.getResult(), r.getSharding(), priorityOf(&op), "dist.reshard"});
        continue;
      }
      if (auto list = op.getAttrOfType<ArrayAttr>(kShardingsAttr)) {
        for (auto [a, r] : llvm::zip(list, op.getResults())) {
          auto s = cast<ShardingAttr>(a);
          if (failed(checkSeed(&op, r, s)))
            return failure();
          std::string origin = op.getAttrOfType<StringAttr>("dist.origin")
                                   ? op.getAttrOfType<StringAttr>("dist.origin").str()
                                   : "seeded on " + describe(r);
          seeds.push_back({r, s, priorityOf(&op), origin});
        }
      }
    }
  }
  return success();
}

void Propagator::applySeed(const Seed &seed) {
  ValueState &st = stateOf(seed.value);
  for (StringAttr a : seed.sharding.getReplicated())
    if (!llvm::is_contained(st.replicated, a))
      st.replicated.push_back(a);
  for (auto [d, dim] : llvm::enumerate(seed.sharding.getDims())) {
    DimState &ds = st.dims[d];
    if (ds.set)
      continue; // an earlier seed of higher priority decided it
    if (dim.getAxes().empty() && dim.getOpen())
      continue;
    // An axis already used by another dimension of the value loses here.
    bool clash = false;
    for (auto [e, other] : llvm::enumerate(st.dims))
      if (e != d)
        for (StringAttr a : dim.getAxes())
          clash |= llvm::is_contained(other.axes, a);
    if (clash)
      continue;
    ds.axes.assign(dim.getAxes().begin(), dim.getAxes().end());
    ds.set = true;
    ds.open = dim.getOpen();
    ds.priority = seed.priority;
    ds.origin = seed.origin;
  }
}

const ShardingRule *Propagator::ruleOf(Operation *op) {
  auto it = rules.find(op);
  if (it != rules.end())
    return it->second ? &*it->second : nullptr;
  std::optional<ShardingRule> rule;
  if (isa<ConstraintOp>(op)) {
    // The identity: both sides share every factor.
    ShardingRule r;
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    TensorFactors t;
    for (int64_t s : type.getShape())
      t.push_back({r.addFactor(s)});
    r.operands.push_back(t);
    r.results.push_back(t);
    rule = r;
  } else if (op->getDialect() && op->getDialect()->getNamespace() == "nn") {
    auto r = getShardingRule(op);
    if (failed(r))
      failedRule = true;
    else
      rule = *r;
  }
  rules[op] = rule;
  return rule ? &*rules[op] : nullptr;
}

bool Propagator::propagateOp(Operation *op) {
  const ShardingRule *rule = ruleOf(op);
  if (!rule)
    return false;
  SmallVector<Value> tensors(op->getOperands());
  tensors.append(op->getResults().begin(), op->getResults().end());
  auto factorsOf = [&](size_t t) -> const TensorFactors & {
    size_t nOperands = op->getNumOperands();
    return t < nOperands ? rule->operands[t] : rule->results[t - nOperands];
  };

  // Candidate factor shardings from every set dimension, best first.
  struct Candidate {
    int priority;
    size_t order;
    int64_t factor;
    AxisList axes;
    bool open;
    std::string origin;
  };
  SmallVector<Candidate> candidates;
  size_t order = 0;
  for (auto [t, v] : llvm::enumerate(tensors)) {
    ValueState &st = stateOf(v);
    const TensorFactors &factors = factorsOf(t);
    for (auto [d, ds] : llvm::enumerate(st.dims)) {
      ++order;
      if (ds.axes.empty() || factors[d].empty())
        continue;
      int64_t f = factors[d].front();
      if (!isShardableFactor(*rule, f))
        continue;
      // Keep the longest prefix of the axes that divides the factor.
      AxisList axes;
      int64_t n = 1;
      for (StringAttr a : ds.axes) {
        int64_t s = mesh.axisSize(a.getValue());
        if (rule->factorSizes[f] % (n * s) != 0)
          break;
        n *= s;
        axes.push_back(a);
      }
      if (axes.empty())
        continue;
      candidates.push_back({ds.priority, order, f, axes,
                            ds.open && axes.size() == ds.axes.size(),
                            describe(v) + " dim " + std::to_string(d)});
    }
  }
  llvm::stable_sort(candidates, [](const Candidate &a, const Candidate &b) {
    return a.priority < b.priority;
  });
  FactorAxes assignment(rule->numFactors());
  SmallVector<int> factorPriority(rule->numFactors(), kUnset);
  SmallVector<std::string> factorOrigin(rule->numFactors());
  SmallVector<bool> factorOpen(rule->numFactors(), false);
  llvm::SmallSet<StringRef, 4> used;
  auto isUsed = [&](StringAttr a) { return used.contains(a.getValue()); };
  for (const Candidate &c : candidates) {
    AxisList &have = assignment[c.factor];
    if (!have.empty()) {
      // An open split may grow: a later offer that starts with the same
      // axes and adds unused ones extends it.
      if (!factorOpen[c.factor] || c.axes.size() <= have.size() ||
          !std::equal(have.begin(), have.end(), c.axes.begin()) ||
          llvm::any_of(ArrayRef<StringAttr>(c.axes).drop_front(have.size()), isUsed))
        continue;
      for (StringAttr a : ArrayRef<StringAttr>(c.axes).drop_front(have.size()))
        used.insert(a.getValue());
      have = c.axes;
      factorOpen[c.factor] = c.open;
      factorOrigin[c.factor] = c.origin;
      continue;
    }
    if (llvm::any_of(c.axes, isUsed))
      continue;
    have = c.axes;
    factorPriority[c.factor] = c.priority;
    factorOrigin[c.factor] = c.origin;
    factorOpen[c.factor] = c.open;
    for (StringAttr a : c.axes)
      used.insert(a.getValue());
  }

  // Project onto every undecided dimension.
  bool changed = false;
  for (auto [t, v] : llvm::enumerate(tensors)) {
    ValueState &st = stateOf(v);
    const TensorFactors &factors = factorsOf(t);
    for (auto [d, ds] : llvm::enumerate(st.dims)) {
      if (factors[d].empty())
        continue;
      int64_t f = factors[d].front();
      if (assignment[f].empty())
        continue;
      // A set dimension changes only when it is open and the factor's
      // axes extend its own.
      bool extends = ds.set && ds.open && assignment[f].size() > ds.axes.size() &&
                     std::equal(ds.axes.begin(), ds.axes.end(), assignment[f].begin());
      if (ds.set && !extends)
        continue;
      bool clash = false;
      for (StringAttr a : ArrayRef<StringAttr>(assignment[f]).drop_front(ds.axes.size())) {
        clash |= llvm::is_contained(st.replicated, a);
        for (auto [e, other] : llvm::enumerate(st.dims))
          if (e != d)
            clash |= llvm::is_contained(other.axes, a);
      }
      if (clash)
        continue;
      ds.axes = assignment[f];
      ds.set = true;
      if (!extends)
        ds.priority = factorPriority[f];
      std::string s;
      llvm::raw_string_ostream os(s);
      os << "from " << factorOrigin[f] << " through " << op->getName() << " at "
         << op->getLoc();
      ds.origin = extends ? ds.origin + ", extended " + s : s;
      changed = true;
    }
  }
  return changed;
}

void Propagator::finalize(bool explain) {
  MLIRContext *ctx = module.getContext();
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  auto shardingOf = [&](Value v) {
    ValueState &st = stateOf(v);
    SmallVector<DimShardingAttr> dims;
    for (DimState &ds : st.dims)
      dims.push_back(DimShardingAttr::get(ctx, ds.axes, false));
    return ShardingAttr::get(ctx, meshRef, dims, st.replicated, {});
  };
  auto remark = [&](Value v, Location loc) {
    if (!explain)
      return;
    ValueState &st = stateOf(v);
    std::string s;
    llvm::raw_string_ostream os(s);
    os << describe(v) << " is " << Attribute(shardingOf(v));
    for (auto [d, ds] : llvm::enumerate(st.dims)) {
      if (ds.axes.empty())
        continue;
      os << "; dim " << d << " " << axesText(ds.axes) << " " << ds.origin;
    }
    emitRemark(loc) << s;
  };
  for (auto fn : module.getOps<func::FuncOp>()) {
    for (BlockArgument arg : fn.getArguments()) {
      if (!isa<RankedTensorType>(arg.getType()))
        continue;
      fn.setArgAttr(arg.getArgNumber(), kShardingAttr, shardingOf(arg));
      fn.removeArgAttr(arg.getArgNumber(), StringAttr::get(ctx, "dist.priority"));
      fn.removeArgAttr(arg.getArgNumber(), StringAttr::get(ctx, "dist.origin"));
      remark(arg, fn.getLoc());
    }
    for (Operation &op : fn.getBody().front()) {
      op.removeAttr("dist.priority");
      op.removeAttr("dist.origin");
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
          // The new value of training state (nn-optimizer's results) lives
          // where the state does: the sharding of the nn.weight that reads
          // it, which dist-insert-reshards then gives the value.
          Value where = v;
          if (auto state = fn.getResultAttrOfType<StringAttr>(i, "nn.state"))
            fn.walk([&](nn::WeightOp w) {
              if (where == v && w.getName() == state.getValue())
                where = w.getResult();
            });
          fn.setResultAttr(i, kShardingAttr, shardingOf(where));
        }
        continue;
      }
      // A constraint's open dimensions take what propagation gave them.
      if (auto c = dyn_cast<ConstraintOp>(op))
        c.setShardingAttr(shardingOf(c.getResult()));
      if (op.getNumResults() == 0 || isa<ConstraintOp, ReshardOp>(op))
        continue;
      SmallVector<Attribute> list;
      for (Value r : op.getResults())
        list.push_back(shardingOf(r));
      op.setAttr(kShardingsAttr, ArrayAttr::get(ctx, list));
      for (Value r : op.getResults())
        remark(r, op.getLoc());
    }
  }
}

LogicalResult Propagator::run(bool explain) {
  if (failed(collect()))
    return failure();
  std::map<int, SmallVector<Seed *>> levels;
  for (Seed &s : seeds)
    levels[s.priority].push_back(&s);
  if (levels.empty())
    levels[0];
  for (auto &[priority, level] : levels) {
    for (Seed *s : level)
      applySeed(*s);
    for (int iteration = 0; iteration < 64; ++iteration) {
      bool changed = false;
      for (Operation *op : ops)
        changed |= propagateOp(op);
      for (Operation *op : llvm::reverse(ops))
        changed |= propagateOp(op);
      if (failedRule)
        return failure();
      if (!changed)
        break;
    }
  }
  finalize(explain);
  return success();
}

struct DistPropagatePass : public shardflow::dist::impl::DistPropagateBase<DistPropagatePass> {
  using DistPropagateBase::DistPropagateBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = getModuleMesh(module);
    if (!mesh)
      return signalPassFailure();
    Propagator p(module, mesh);
    if (failed(p.run(explain)))
      return signalPassFailure();
  }
};

} // namespace
