//===- PipelineTraining.cpp - a training pipeline's stage programs --------===//
//
// See PipelineTraining.h. The stages phase cut the forward program with its
// loss into @stage_K (one micro-batch's, not yet sharded). Each stage is
// first one training program: the stage seeded (dist-annotate), its
// embedded initializers made weights, then its objective, the loss over M
// where the stage computes it plus sum(y * dy) over each float value y it
// passes on (dy that value's gradient, an input `grad:transfer:K`).
// nn-differentiate against the weights and the transfers it reads gives
// the gradients to send back (`grad:transfer:K`), and each weight's
// gradient is added into its accumulator (state `NAME.grad_acc`; a tied
// copy's into its source's). Propagated and partitioned, the program is
// cut (splitProgram) into
//
//   forward   what the stage passes on and its loss, returning every
//             activation the rest reads (`activation:N`);
//   backward  the rest; for a zero-bubble schedule cut again into I (the
//             gradients sent back, and `backward:N` for W) and W (the
//             accumulators);
//
// and two programs are built beside them:
//
//   norm      the sum of squares of the accumulators the stage owns (one
//             several stages hold, an embedding and its tied LM head, is
//             the first's);
//   update    nn-optimizer over the accumulators, with the squared norm of
//             every stage's gradients as an input; then the accumulators
//             are zeroed.
//
// The norm and update programs are built from the training program's
// weight and accumulator ops, shardings included, so that every program
// reads the same per-rank buffers.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Pipelines/PipelineTraining.h"
#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/Dist/IR/Layout.h"
#include "shardflow/Dialect/NN/Autodiff/Training.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Pipelines/Pipelines.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/GlobPattern.h"

using namespace mlir;
using namespace shardflow;

namespace {

constexpr StringLiteral kObjective = "pipeline.objective";

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

StringRef nameOf(func::FuncOp fn, unsigned result) {
  auto name = fn.getResultAttrOfType<StringAttr>(result, "nn.name");
  return name ? name.getValue() : "";
}

/// Replaces `fn`'s results.
void setResults(func::FuncOp fn, ArrayRef<Value> values, ArrayRef<DictionaryAttr> attrs) {
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  ret->setOperands(values);
  SmallVector<Type> types;
  for (Value v : values)
    types.push_back(v.getType());
  fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(), types));
  fn.setAllResultAttrs(attrs);
}

bool isZeroConstant(Value v) {
  auto c = v.getDefiningOp<nn::ConstantOp>();
  if (!c)
    return false;
  auto value = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!value || !value.isSplat())
    return false;
  auto f = dyn_cast<FloatAttr>(value.getSplatValue<Attribute>());
  return f && f.getValue().isZero();
}

bool matches(ArrayRef<std::string> globs, StringRef name) {
  for (const std::string &glob : globs)
    if (auto pattern = llvm::GlobPattern::create(glob); pattern && pattern->match(name))
      return true;
  return false;
}

} // namespace

OwningOpRef<ModuleOp> shardflow::stageModule(ModuleOp parent, func::FuncOp fn) {
  OwningOpRef<ModuleOp> m = cast<ModuleOp>(parent->clone());
  (*m)->removeAttr("dist.pipeline");
  for (func::FuncOp other : llvm::make_early_inc_range(m->getOps<func::FuncOp>()))
    if (other.getName() != fn.getName())
      other.erase();
  func::FuncOp main = *m->getOps<func::FuncOp>().begin();
  main.setName("main");
  return m;
}

namespace {

func::FuncOp mainOf(ModuleOp m) { return m.lookupSymbol<func::FuncOp>("main"); }

LogicalResult runPhases(ModuleOp m, const CompileOptions &o, ArrayRef<CompilePhase> phases) {
  PassManager pm(m.getContext());
  for (CompilePhase phase : phases)
    buildPhasePipeline(pm, phase, o);
  return pm.run(m);
}

/// An empty module with @main() and `mesh` (when there is one).
OwningOpRef<ModuleOp> emptyProgram(Location loc, dist::MeshOp mesh) {
  OpBuilder b(loc.getContext());
  OwningOpRef<ModuleOp> m = ModuleOp::create(loc);
  b.setInsertionPointToEnd(m->getBody());
  if (mesh)
    b.clone(*mesh);
  auto fn = func::FuncOp::create(b, loc, "main", b.getFunctionType({}, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc, ValueRange{});
  return m;
}

Value scalarF32(OpBuilder &b, Location loc, double v) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  return nn::ConstantOp::create(b, loc, DenseElementsAttr::get(type, b.getF32FloatAttr(float(v))));
}

Value sumOfSquares(OpBuilder &b, Location loc, Value x) {
  return nn::sumAll(b, loc, nn::MulOp::create(b, loc, x, x));
}

DictionaryAttr named(Builder &b, StringRef name, bool state = false) {
  SmallVector<NamedAttribute> attrs{b.getNamedAttr("nn.name", b.getStringAttr(name))};
  if (state)
    attrs.push_back(b.getNamedAttr("nn.state", b.getStringAttr(name)));
  return b.getDictionaryAttr(attrs);
}


/// A program cut in two (splitProgram).
struct SplitPrograms {
  OwningOpRef<ModuleOp> first, second;
};

/// Cuts @main of `m` (a per-rank nn program) in two. `first` computes the
/// results numbered in `firstResults` with what they need, and returns as
/// well, named `PREFIX:N`, each value it computes that `second` reads;
/// `second` computes the other results from those and the arguments it
/// reads. A value that depends on no argument (a weight, a constant, a
/// weight's transpose) is computed again where needed rather than passed.
/// Each takes only the arguments it reads.
SplitPrograms splitProgram(ModuleOp m, ArrayRef<unsigned> firstResults, StringRef prefix) {
  func::FuncOp fn = mainOf(m);
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Operation *> ops;
  DenseMap<Operation *, size_t> order;
  for (Operation &op : body.without_terminator()) {
    order[&op] = ops.size();
    ops.push_back(&op);
  }
  auto operandsOf = [](Operation *op) {
    llvm::SetVector<Value> used(op->operand_begin(), op->operand_end());
    getUsedValuesDefinedAbove(op->getRegions(), used);
    return used;
  };
  // Whether a value depends on an argument.
  llvm::DenseSet<Operation *> dynamic;
  for (Operation *op : ops)
    for (Value v : operandsOf(op))
      if (isa<BlockArgument>(v) || dynamic.contains(v.getDefiningOp()))
        dynamic.insert(op);
  // What each side needs: the ancestors of its results.
  auto ancestors = [&](ArrayRef<Value> roots, const llvm::DenseSet<Operation *> &stop) {
    llvm::DenseSet<Operation *> in;
    SmallVector<Value> work(roots.begin(), roots.end());
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || stop.contains(def) || !in.insert(def).second)
        continue;
      for (Value v : operandsOf(def))
        work.push_back(v);
    }
    return in;
  };
  llvm::DenseSet<unsigned> isFirst(firstResults.begin(), firstResults.end());
  SmallVector<Value> firstRoots, secondRoots;
  for (unsigned i = 0; i < ret.getNumOperands(); ++i)
    (isFirst.contains(i) ? firstRoots : secondRoots).push_back(ret.getOperand(i));
  llvm::DenseSet<Operation *> inFirst = ancestors(firstRoots, {});
  // The second side stops at the first side's dynamic values (passed) and
  // computes everything else it needs itself.
  llvm::DenseSet<Operation *> passedOps;
  for (Operation *op : inFirst)
    if (dynamic.contains(op))
      passedOps.insert(op);
  llvm::DenseSet<Operation *> inSecond = ancestors(secondRoots, passedOps);
  // The values passed: results of the first side's dynamic ops that the
  // second side reads (or returns).
  llvm::SetVector<Value> passed;
  auto notePassed = [&](Value v) {
    if (Operation *def = v.getDefiningOp(); def && passedOps.contains(def))
      passed.insert(v);
  };
  for (Operation *op : ops)
    if (inSecond.contains(op))
      for (Value v : operandsOf(op))
        notePassed(v);
  for (Value v : secondRoots)
    notePassed(v);

  auto build = [&](bool second) {
    OwningOpRef<ModuleOp> out = cast<ModuleOp>(m->clone());
    func::FuncOp old = mainOf(*out);
    OpBuilder b(old);
    const llvm::DenseSet<Operation *> &mine = second ? inSecond : inFirst;
    // Arguments: the ones read, then (second) the passed values.
    llvm::SetVector<unsigned> argsRead;
    for (Operation *op : ops)
      if (mine.contains(op))
        for (Value v : operandsOf(op))
          if (auto a = dyn_cast<BlockArgument>(v); a && a.getOwner() == &body)
            argsRead.insert(a.getArgNumber());
    for (Value v : second ? secondRoots : firstRoots)
      if (auto a = dyn_cast<BlockArgument>(v))
        argsRead.insert(a.getArgNumber());
    SmallVector<unsigned> argList(argsRead.begin(), argsRead.end());
    llvm::sort(argList);
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    for (unsigned a : argList) {
      argTypes.push_back(body.getArgument(a).getType());
      argAttrs.push_back(fn.getArgAttrDict(a));
    }
    if (second)
      for (auto [n, v] : llvm::enumerate(passed)) {
        argTypes.push_back(v.getType());
        argAttrs.push_back(named(b, (prefix + ":" + Twine(n)).str()));
      }
    auto f = func::FuncOp::create(b, fn.getLoc(), "main", b.getFunctionType(argTypes, {}));
    for (NamedAttribute a : fn->getDiscardableAttrs())
      f->setAttr(a.getName(), a.getValue());
    // A side with no op at all (the input's backward of the first stage,
    // which passes nothing back) still runs on the stage's ranks.
    for (auto mesh : out->getOps<dist::MeshOp>())
      f->setAttr("rt.world_size", b.getI64IntegerAttr(mesh.getNumRanks()));
    Block *entry = f.addEntryBlock();
    IRMapping map;
    for (auto [i, a] : llvm::enumerate(argList))
      map.map(body.getArgument(a), entry->getArgument(unsigned(i)));
    if (second)
      for (auto [n, v] : llvm::enumerate(passed))
        map.map(v, entry->getArgument(unsigned(argList.size() + n)));
    OpBuilder inner = OpBuilder::atBlockEnd(entry);
    for (Operation *op : ops)
      if (mine.contains(op))
        inner.clone(*op, map);
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> attrs;
    for (unsigned i = 0; i < ret.getNumOperands(); ++i)
      if (isFirst.contains(i) != second) {
        results.push_back(map.lookupOrDefault(ret.getOperand(i)));
        attrs.push_back(fn.getResultAttrDict(i));
      }
    if (!second)
      for (auto [n, v] : llvm::enumerate(passed)) {
        results.push_back(map.lookup(v));
        attrs.push_back(named(b, (prefix + ":" + Twine(n)).str()));
      }
    func::ReturnOp::create(inner, fn.getLoc(), results);
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    f.setType(b.getFunctionType(argTypes, types));
    for (auto [i, a] : llvm::enumerate(argAttrs))
      if (a)
        f.setArgAttrs(unsigned(i), a);
    f.setAllResultAttrs(attrs);
    old.erase();
    return out;
  };
  SplitPrograms split;
  split.first = build(false);
  split.second = build(true);
  return split;
}
} // namespace

FailureOr<TrainingStagePrograms>
shardflow::buildTrainingStage(ModuleOp module, func::FuncOp stageFn, const CompileOptions &options,
                              int64_t microbatches, bool splitBackward,
                              llvm::StringSet<> &counted) {
  MLIRContext *ctx = module.getContext();
  Location loc = stageFn.getLoc();
  // The stage's programs are ordinary training programs over its sub-mesh.
  CompileOptions so = options;
  so.pipeline = PipelineOptions();
  so.train.microbatches = 1;
  std::string loss =
      StringRef(so.train.loss).starts_with("output:") ? so.train.loss.substr(7) : "loss";
  TrainingStagePrograms out;
  out.backward = stageModule(module, stageFn);
  ModuleOp bwd = *out.backward;
  func::FuncOp main = mainOf(bwd);
  for (unsigned i = 0; i < main.getNumResults(); ++i)
    if (main.getResultAttr(i, "nn.running_statistic"))
      return stageFn.emitError("pipelined training of BatchNormalization's running statistics "
                               "('")
             << nameOf(main, i) << "') is not built yet";

  // Seeds on the forward, as a training step's are placed before its
  // backward exists.
  if (so.partitions()) {
    PassManager pm(ctx);
    buildShardingSeeds(pm, so);
    if (failed(pm.run(bwd)))
      return failure();
  }
  // Initializers embedded in the model (biases, norms' scales) are state
  // the update writes: weights in every program.
  llvm::SetVector<StringRef> embedded;
  main.walk([&](nn::ConstantOp c) {
    StringRef name = getInitializerName(c->getLoc());
    if (!name.empty() && isFloatTensor(c.getResult()) && typeOf(c.getResult()).getNumElements() > 1)
      embedded.insert(name);
  });
  for (std::string name : llvm::map_range(embedded, [](StringRef s) { return s.str(); }))
    if (failed(nn::initializerAsWeight(main, name)))
      return failure();

  // The backward's objective.
  {
    auto ret = cast<func::ReturnOp>(main.getBody().front().getTerminator());
    OpBuilder b(ret);
    Value objective, scaledLoss;
    auto add = [&](Value term) {
      objective = objective ? nn::AddOp::create(b, loc, objective, term).getResult() : term;
    };
    SmallVector<std::pair<Value, std::string>> sent;
    for (unsigned i = 0; i < main.getNumResults(); ++i) {
      Value v = ret.getOperand(i);
      if (auto id = main.getResultAttrOfType<IntegerAttr>(i, "dist.transfer")) {
        if (isFloatTensor(v))
          sent.emplace_back(v, "grad:transfer:" + std::to_string(id.getInt()));
      } else if (nameOf(main, i) == loss) {
        auto type = typeOf(v);
        if (type.getNumElements() != 1 || !type.getElementType().isF32())
          return stageFn.emitError("the loss '") << loss << "' must be an f32 scalar, got "
                                                 << v.getType();
        scaledLoss = nn::MulOp::create(b, loc, v, scalarF32(b, loc, 1.0 / double(microbatches)));
        add(scaledLoss);
      }
    }
    for (auto &[y, name] : sent) {
      unsigned at = main.getNumArguments();
      if (failed(main.insertArgument(at, y.getType(), named(b, name), loc)))
        return stageFn.emitError("cannot add the gradient argument '") << name << "'";
      Value dy = main.getArgument(at);
      Value term = nn::sumAll(b, loc, nn::MulOp::create(b, loc, y, dy));
      if (!typeOf(term).getElementType().isF32())
        return stageFn.emitError("stage ") << stageFn->getAttr("dist.stage")
                                           << " passes on a value of " << y.getType()
                                           << "; pipelined training passes f32 values";
      add(term);
    }
    if (!objective)
      return stageFn.emitError("stage ")
             << stageFn->getAttr("dist.stage")
             << " neither computes the loss nor passes a float value on: nothing to "
                "differentiate";
    // The forward's results stay (what the stage passes on, its loss): the
    // program is cut into the forward and the backward once partitioned.
    SmallVector<Value> values{objective};
    SmallVector<DictionaryAttr> attrs{named(b, kObjective)};
    if (scaledLoss) {
      values.push_back(scaledLoss);
      attrs.push_back(named(b, "loss"));
    }
    for (unsigned i = 0; i < main.getNumResults(); ++i)
      if (main.getResultAttr(i, "dist.transfer")) {
        values.push_back(ret.getOperand(i));
        attrs.push_back(main.getResultAttrDict(i));
      }
    setResults(main, values, attrs);
  }
  {
    PassManager pm(ctx);
    buildDifferentiate(pm, so, kObjective, "transfers");
    if (failed(pm.run(bwd)))
      return failure();
  }

  // Each trained weight's gradient into its accumulator. A tied copy
  // (--tie COPY=SOURCE[^T], or found tied) adds its gradient, in the
  // source's layout, into the source's accumulator, wherever the source
  // is: the stages holding either sum it, and the copy's update follows
  // the source's.
  llvm::StringMap<std::pair<std::string, bool>> tiedTo;
  for (const std::string &spec : so.train.ties) {
    auto [copy, source] = StringRef(spec).split('=');
    bool flip = source.consume_back("^T");
    tiedTo[copy] = {source.str(), flip};
  }
  llvm::MapVector<StringRef, nn::WeightOp> weights;
  main.walk([&](nn::WeightOp w) { weights.insert({w.getName(), w}); });
  {
    auto ret = cast<func::ReturnOp>(main.getBody().front().getTerminator());
    OpBuilder b(ret);
    SmallVector<Value> values;
    SmallVector<DictionaryAttr> attrs;
    llvm::MapVector<StringRef, Value> sums; // accumulator name -> gradient
    llvm::StringMap<std::string> accNames;
    for (unsigned i = 0; i < main.getNumResults(); ++i) {
      StringRef name = nameOf(main, i);
      Value v = ret.getOperand(i);
      if (name == kObjective)
        continue;
      if (!name.starts_with("grad:") || name.starts_with("grad:transfer:")) {
        values.push_back(v);
        attrs.push_back(main.getResultAttrDict(i));
        continue;
      }
      StringRef weight = name.drop_front(5);
      const TrainOptions &t = so.train;
      if (isZeroConstant(v))
        continue; // held: no gradient reaches it
      if (matches(t.freeze, weight) || (!t.trainable.empty() && !matches(t.trainable, weight))) {
        out.frozen.push_back(weight.str());
        continue;
      }
      TrainedWeight tw;
      tw.weight = weight.str();
      std::string source = tw.weight;
      if (auto it = tiedTo.find(weight); it != tiedTo.end()) {
        source = it->second.first;
        tw.flipped = it->second.second;
        tw.tiedTo = source;
        if (tw.flipped)
          v = nn::TransposeOp::create(b, loc, ValueRange{v},
                                      {b.getNamedAttr("perm", b.getDenseI64ArrayAttr({1, 0}))})
                  ->getResult(0);
      }
      tw.accumulator = source + ".grad_acc";
      if (weights.count(tw.accumulator))
        return stageFn.emitError("an initializer is named '")
               << tw.accumulator << "', the name of a gradient accumulator";
      Value &sum = sums[b.getStringAttr(tw.accumulator).getValue()];
      if (sum && sum.getType() != v.getType())
        return stageFn.emitError("the gradients of '")
               << tw.weight << "' and of what it is tied to have other shapes: "
               << sum.getType() << " and " << v.getType();
      sum = sum ? nn::AddOp::create(b, loc, sum, v).getResult() : v;
      out.trained.push_back(std::move(tw));
    }
    for (auto &[acc, g] : sums) {
      auto a = nn::WeightOp::create(b, loc, typeOf(g), b.getStringAttr(acc),
                                    b.getStringAttr("zeros"), StringAttr(), IntegerAttr(),
                                    IntegerAttr(), DenseI64ArrayAttr(), ArrayAttr(),
                                    DenseI64ArrayAttr());
      values.push_back(nn::AddOp::create(b, loc, a.getResult(), g));
      attrs.push_back(named(b, acc, /*state=*/true));
    }
    setResults(main, values, attrs);
  }
  if (out.trained.empty())
    return stageFn.emitError("stage ") << stageFn->getAttr("dist.stage")
                                       << " has no weight to train";
  // The accumulators, each once.
  llvm::SetVector<StringRef> accumulators;
  for (const TrainedWeight &t : out.trained)
    accumulators.insert(t.accumulator);

  // The trained weights are state the update writes: every program reads
  // them as they are stored (no load-time transpose or cast).
  llvm::StringSet<> trainedNames;
  for (const TrainedWeight &t : out.trained)
    trainedNames.insert(t.weight);
  main.walk([&](nn::WeightOp w) {
    if (trainedNames.contains(w.getName()))
      w->setAttr("nn.shared_state", UnitAttr::get(ctx));
  });

  // The backward's shardings, then the weights' for the other programs.
  if (failed(runPhases(bwd, so, {CompilePhase::Sharded})))
    return failure();
  llvm::StringMap<Operation *> stateOps;
  main.walk([&](nn::WeightOp w) { stateOps.try_emplace(w.getName(), w); });
  dist::MeshOp mesh;
  for (auto m : bwd.getOps<dist::MeshOp>())
    mesh = m;

  // The norm of the accumulators this stage owns.
  out.norm = emptyProgram(loc, mesh);
  {
    func::FuncOp fn = mainOf(*out.norm);
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    OpBuilder b(ret);
    Value total;
    for (StringRef acc : accumulators) {
      if (!counted.insert(acc).second)
        continue; // an earlier stage's
      Value a = b.clone(*stateOps.lookup(acc))->getResult(0);
      Value s = sumOfSquares(b, loc, a);
      total = total ? nn::AddOp::create(b, loc, total, s).getResult() : s;
    }
    if (!total)
      total = scalarF32(b, loc, 0);
    setResults(fn, {total}, {named(b, "grad_sq")});
  }

  // The update: @main(loss, grad_sq) returning the loss and each weight's
  // accumulated gradient, as nn-optimizer takes a step. A tied copy whose
  // source the stage also trains is the optimizer's tie (written as the
  // source, updated); one without trains on the source's gradient, in its
  // own layout, which keeps it the source's (transposed): the update is
  // elementwise.
  out.update = emptyProgram(loc, mesh);
  {
    func::FuncOp fn = mainOf(*out.update);
    OpBuilder b(ctx);
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    if (failed(fn.insertArgument(0, scalar, named(b, "loss"), loc)) ||
        failed(fn.insertArgument(1, scalar, named(b, "grad_sq"), loc)))
      return stageFn.emitError("cannot build the update program");
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    b.setInsertionPoint(ret);
    SmallVector<Value> values{fn.getArgument(0)};
    SmallVector<DictionaryAttr> attrs{named(b, "loss")};
    llvm::StringMap<Value> accs;
    for (StringRef acc : accumulators)
      accs[acc] = b.clone(*stateOps.lookup(acc))->getResult(0);
    SmallVector<std::string> ties;
    for (const TrainedWeight &t : out.trained) {
      Value w = b.clone(*stateOps.lookup(t.weight))->getResult(0);
      Value g = accs.lookup(t.accumulator);
      if (!t.tiedTo.empty() && trainedNames.contains(t.tiedTo)) {
        ties.push_back(t.weight + "=" + t.tiedTo + (t.flipped ? "^T" : ""));
        g = nn::ConstantOp::create(
            b, loc, DenseElementsAttr::get(typeOf(w), b.getZeroAttr(typeOf(w).getElementType())));
      } else if (t.flipped) {
        g = nn::TransposeOp::create(b, loc, ValueRange{g},
                                    {b.getNamedAttr("perm", b.getDenseI64ArrayAttr({1, 0}))})
                ->getResult(0);
      }
      values.push_back(g);
      attrs.push_back(named(b, "grad:" + t.weight));
    }
    setResults(fn, values, attrs);
    PassManager pm(ctx);
    buildOptimizer(pm, so, "loss", "grad_sq", ties);
    if (failed(pm.run(*out.update)))
      return failure();
    // Then the accumulators start again from zero.
    ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    b.setInsertionPoint(ret);
    SmallVector<Value> results(ret.getOperands());
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      resultAttrs.push_back(fn.getResultAttrDict(i));
    for (StringRef acc : accumulators) {
      Value old = stateOps.lookup(acc)->getResult(0);
      auto type = typeOf(old);
      Value zero = nn::ConstantOp::create(
          b, loc, DenseElementsAttr::get(type, b.getZeroAttr(type.getElementType())));
      if (auto s = dist::getValueSharding(old))
        dist::setValueSharding(zero, s);
      results.push_back(zero);
      resultAttrs.push_back(named(b, acc, /*state=*/true));
    }
    setResults(fn, results, resultAttrs);
  }

  // Each program through the rest of the phases; the partitioned step cut
  // into its forward (what the stage passes on, the loss, and the
  // activations the backward reads) and its backward.
  if (failed(runPhases(bwd, so, {CompilePhase::Partitioned})))
    return failure();
  {
    func::FuncOp fn = mainOf(bwd);
    SmallVector<unsigned> forwardResults;
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      if (fn.getResultAttr(i, "dist.transfer") || nameOf(fn, i) == "loss")
        forwardResults.push_back(i);
    SplitPrograms split = splitProgram(bwd, forwardResults, "activation");
    out.forward = std::move(split.first);
    out.backward = std::move(split.second);
  }
  // A zero-bubble schedule's backward in two: I, the gradients of what the
  // stage was passed, and W, the weights' (from what I passes it).
  if (splitBackward) {
    func::FuncOp fn = mainOf(*out.backward);
    SmallVector<unsigned> inputResults;
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      if (!fn.getResultAttr(i, "nn.state"))
        inputResults.push_back(i);
    SplitPrograms split = splitProgram(*out.backward, inputResults, "backward");
    out.backwardInput = std::move(split.first);
    out.backwardWeight = std::move(split.second);
  }
  for (OwningOpRef<ModuleOp> *m :
       {&out.forward, &out.backward, &out.backwardInput, &out.backwardWeight})
    if (*m && failed(runPhases(**m, so, {CompilePhase::RT, CompilePhase::GPU})))
      return failure();
  for (ModuleOp m : {*out.norm, *out.update})
    if (failed(runPhases(m, so,
                         {CompilePhase::Sharded, CompilePhase::Partitioned, CompilePhase::RT,
                          CompilePhase::GPU})))
      return failure();
  return out;
}
