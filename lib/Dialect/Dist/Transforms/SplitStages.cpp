//===- SplitStages.cpp - pipeline stages, a function each ------------------===//
//
// dist-split-stages: the `stages` phase of a pipeline-parallel compile.
// @main (one micro-batch's per-rank program) is cut along the model's
// layers (nn-find-layers) into @stage_0 .. @stage_{S-1}; what a stage reads
// from an earlier one is computed again when cheap (weights, constants, a
// mask from the token mask) or passed as a `dist.transfer`; the schedule
// goes on the module as `dist.pipeline`.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/NN/Transforms/FindLayers.h"
#include "shardflow/Planner/PipelineSchedules.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

#include <limits>

namespace shardflow::dist {
#define GEN_PASS_DEF_DISTSPLITSTAGES
#include "shardflow/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace shardflow::dist

using namespace mlir;
using namespace shardflow;

namespace {

/// At most this many ops are computed again in a later stage instead of
/// passing their result.
constexpr size_t kMaxRecomputed = 64;

/// What a stage program calls transfer `id` among its inputs and outputs.
std::string transferName(int64_t id) { return "transfer:" + std::to_string(id); }

bool isFloat(Type t) {
  return isa<FloatType>(getElementTypeOrSelf(t));
}

struct Splitter {
  func::FuncOp main;
  int64_t stages = 1;
  /// The stage of every op of @main's body (not the terminator).
  DenseMap<Operation *, int64_t> stageOf;
  /// Program order of @main's ops.
  DenseMap<Operation *, size_t> order;

  /// The layer each stage after the first starts at, from `split`
  /// ("layers:I,J") or, without it, balanced by estimated time: `head` and
  /// `tail` are the first and last stages' extra work (embeddings; final
  /// norm and LM head), `layerTime` each layer's.
  FailureOr<SmallVector<int64_t>> cuts(StringRef split, ArrayRef<double> layerTime, double head,
                                       double tail) {
    int64_t layers = int64_t(layerTime.size());
    SmallVector<int64_t> out;
    if (split.empty())
      return balancedCuts(layerTime, head, tail);
    StringRef list = split;
    if (!list.consume_front("layers:"))
      return main.emitError("split takes layers:I,J,... or nodes:A,B,..., got '")
             << split << "'";
    SmallVector<StringRef> items;
    list.split(items, ',');
    for (StringRef item : items) {
      int64_t v = 0;
      if (item.trim().getAsInteger(10, v))
        return main.emitError("--pipeline-split: '") << item << "' is not a layer number";
      out.push_back(v);
    }
    if (int64_t(out.size()) != stages - 1)
      return main.emitError("--pipeline-split ")
             << split << ": " << out.size() << " cuts for " << stages
             << " stages (one fewer than the stages)";
    int64_t previous = 0;
    for (int64_t c : out) {
      if (c <= previous || c >= layers)
        return main.emitError("--pipeline-split ")
               << split << ": the cuts must increase strictly within 1 .. " << layers - 1
               << " (the model has " << layers << " layers), got " << c;
      previous = c;
    }
    return out;
  }

  /// The cuts that make the slowest stage as fast as it can be (a linear
  /// partition by dynamic programming); among equal ones, the first found
  /// with the earliest cuts.
  SmallVector<int64_t> balancedCuts(ArrayRef<double> layerTime, double head, double tail) {
    int64_t k = int64_t(layerTime.size());
    SmallVector<double> prefix(k + 1, 0.0);
    for (int64_t i = 0; i < k; ++i)
      prefix[i + 1] = prefix[i] + layerTime[i];
    auto stageTime = [&](int64_t s, int64_t from, int64_t to) {
      return prefix[to] - prefix[from] + (s == 0 ? head : 0.0) + (s == stages - 1 ? tail : 0.0);
    };
    constexpr double kInf = std::numeric_limits<double>::infinity();
    // best[s][i]: the slowest of stages 0..s holding layers [0, i).
    SmallVector<SmallVector<double>> best(stages, SmallVector<double>(k + 1, kInf));
    SmallVector<SmallVector<int64_t>> from(stages, SmallVector<int64_t>(k + 1, -1));
    for (int64_t i = 1; i <= k; ++i)
      best[0][i] = stageTime(0, 0, i);
    for (int64_t s = 1; s < stages; ++s)
      for (int64_t i = s + 1; i <= k; ++i)
        for (int64_t j = s; j < i; ++j) {
          double slowest = std::max(best[s - 1][j], stageTime(s, j, i));
          // A relative margin keeps equal costs from turning on rounding.
          if (slowest < best[s][i] * (1 - 1e-9)) {
            best[s][i] = slowest;
            from[s][i] = j;
          }
        }
    SmallVector<int64_t> out(stages - 1);
    int64_t at = k;
    for (int64_t s = stages - 1; s > 0; --s) {
      at = from[s][at];
      out[s - 1] = at;
    }
    return out;
  }

  /// An op's estimated time from the registry's cost estimate: FLOPs / F +
  /// bytes / B, with the rates bench/pipeline_balance_bench.py fitted on one
  /// CPU core (80 GFLOP/s, 50 GB/s; AMD EPYC, 2026-11-29), which predicted
  /// another model's stage times within 13%. Their ratio is what balancing
  /// depends on.
  static double timeOf(Operation *op) {
    dist::OpCost cost = dist::estimateCost(op);
    return cost.flops / 8e10 + cost.bytes / 5e10;
  }

  LogicalResult assign(const nn::LayerStructure &layers, StringRef split) {
    SmallVector<SmallVector<Operation *>> blocks;
    for (auto [k, stack] : llvm::enumerate(layers.stacks)) {
      for (auto [b, block] : llvm::enumerate(stack.blocks)) {
        blocks.emplace_back(block.ops.begin(), block.ops.end());
        // The ops between two stacks go with the first block after them.
        if (b == 0 && k > 0)
          blocks.back().append(layers.between[k - 1].begin(), layers.between[k - 1].end());
      }
    }
    int64_t count = int64_t(blocks.size());
    if (count < stages)
      return main.emitError("the pipeline has ")
             << stages << " stages but the model has " << count
             << " layers to cut between (a stage holds one layer or more)";
    SmallVector<double> layerTime;
    for (const auto &ops : blocks)
      layerTime.push_back(llvm::sum_of(llvm::map_range(ops, timeOf)));
    double head = 0, tail = 0;
    for (Operation *op : layers.prologue)
      head += timeOf(op);
    for (Operation *op : layers.epilogue)
      tail += timeOf(op);
    // nodes:A,B names ONNX nodes: each stage after the first starts at the
    // layer that holds its node.
    std::string byLayers = split.str();
    if (StringRef(split).starts_with("nodes:")) {
      SmallVector<StringRef> names;
      StringRef(split).drop_front(6).split(names, ',');
      byLayers = "layers:";
      for (auto [n, raw] : llvm::enumerate(names)) {
        StringRef name = raw.trim();
        int64_t layer = -1;
        bool outside = false;
        for (auto [i, ops] : llvm::enumerate(blocks))
          for (Operation *op : ops)
            if (getONNXNodeName(op->getLoc()) == name)
              layer = int64_t(i);
        for (const auto *list : {&layers.prologue, &layers.epilogue})
          for (Operation *op : *list)
            outside |= getONNXNodeName(op->getLoc()) == name;
        if (layer < 0)
          return main.emitError("--pipeline-split: ")
                 << (outside ? "ONNX node '" + name.str() +
                                   "' is in the embeddings or the head, which the first and "
                                   "last stages hold; name a node of a layer"
                             : "no op of the program comes from an ONNX node named '" + name.str() +
                                   "' (a node folded into a constant at import has none)");
        byLayers += (n ? "," : "") + std::to_string(layer);
      }
    }
    auto at = cuts(byLayers, layerTime, head, tail);
    if (failed(at))
      return failure();
    for (Operation *op : layers.prologue)
      stageOf[op] = 0;
    for (auto [i, ops] : llvm::enumerate(blocks)) {
      int64_t s = llvm::count_if(*at, [&](int64_t c) { return c <= int64_t(i); });
      for (Operation *op : ops)
        stageOf[op] = s;
    }
    for (Operation *op : layers.epilogue)
      stageOf[op] = stages - 1;
    // What each stage holds, for --report: its layers [first, end).
    layerRange.assign(stages, {0, 0});
    for (int64_t s = 0; s < stages; ++s)
      layerRange[s] = {s == 0 ? 0 : (*at)[s - 1], s + 1 == stages ? count : (*at)[s]};
    for (Operation &op : main.getBody().front().without_terminator())
      if (!stageOf.count(&op))
        return op.emitError("no pipeline stage for this op (nn-find-layers left it out)");
    return success();
  }

  /// What every block of a stack reads (a mask, rotary tables, T5's
  /// position bias, an encoder's output).
  llvm::DenseSet<Value> shared;
  /// Per stage: its layers [first, end).
  SmallVector<std::pair<int64_t, int64_t>> layerRange;

  /// The ops that compute `v`, when a later stage may compute it again:
  /// weights and constants alone (a weight two stages read: a tied
  /// embedding), or a value every block reads computed by at most
  /// kMaxRecomputed ops with no collective and no float graph input;
  /// failure when it must be passed (the residual stream, an encoder's
  /// output).
  FailureOr<SmallVector<Operation *>> recomputable(Value v) {
    Operation *def = v.getDefiningOp();
    if (def && def->getNumOperands() == 0 && def->getNumRegions() == 0)
      return SmallVector<Operation *>{def};
    if (!shared.contains(v))
      return failure();
    SmallVector<Operation *> slice;
    llvm::DenseSet<Operation *> seen;
    SmallVector<Value> work{v};
    while (!work.empty()) {
      Value x = work.pop_back_val();
      if (auto arg = dyn_cast<BlockArgument>(x)) {
        if (isFloat(arg.getType()))
          return failure(); // an activation from outside
        continue;
      }
      Operation *def = x.getDefiningOp();
      if (!seen.insert(def).second)
        continue;
      if (isa<dist::DistDialect>(def->getDialect()) || def->getNumRegions() != 0 ||
          slice.size() >= kMaxRecomputed)
        return failure();
      slice.push_back(def);
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
    llvm::sort(slice, [&](Operation *a, Operation *b) { return order[a] < order[b]; });
    return slice;
  }
};

struct DistSplitStagesPass : public dist::impl::DistSplitStagesBase<DistSplitStagesPass> {
  using DistSplitStagesBase::DistSplitStagesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    if (funcs.size() != 1 || funcs.front().getName() != "main" || funcs.front().isExternal()) {
      module.emitError("dist-split-stages cuts one function, @main, into stages");
      return signalPassFailure();
    }
    std::string error;
    auto plan = resolvePipelineSchedule(schedule.getValue(), scheduleFile, int(ranks),
                                        int(microbatches), int(virtualStages),
                                        /*forwardOnly=*/!training, error);
    if (!plan) {
      module.emitError(error);
      return signalPassFailure();
    }
    Splitter sp;
    sp.main = funcs.front();
    sp.stages = plan->stages();
    for (auto [i, op] : llvm::enumerate(sp.main.getBody().front()))
      sp.order[&op] = i;
    auto layers = nn::findLayers(sp.main);
    if (failed(layers)) {
      sp.main.emitError("pipeline stages are cut between the model's repeated layers, and "
                        "nn-find-layers finds none in this program (a model of one layer?)");
      return signalPassFailure();
    }
    for (const nn::LayerStack &stack : layers->stacks)
      sp.shared.insert(stack.shared.begin(), stack.shared.end());
    if (failed(sp.assign(*layers, split)))
      return signalPassFailure();
    if (failed(outline(sp, *plan)))
      return signalPassFailure();
  }

  LogicalResult outline(Splitter &sp, runtime::PipelineSchedule plan) {
    ModuleOp module = getOperation();
    func::FuncOp main = sp.main;
    Block &body = main.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    OpBuilder b(module.getContext());
    auto stageOfValue = [&](Value v) -> int64_t {
      if (Operation *def = v.getDefiningOp())
        return sp.stageOf.lookup(def);
      return 0;
    };
    // Each stage's ops, what it computes again, the graph inputs and the
    // transfers it reads.
    struct Stage {
      SmallVector<Operation *> ops;
      llvm::SetVector<Operation *> recomputed;
      llvm::SetVector<unsigned> inputs; // @main argument numbers
      llvm::SetVector<int64_t> received;
    };
    SmallVector<Stage> stages(sp.stages);
    for (Operation &op : body.without_terminator())
      stages[sp.stageOf[&op]].ops.push_back(&op);
    // Transfers: a value passed from an earlier stage, numbered in program
    // order of first need.
    llvm::MapVector<Value, SmallVector<int64_t>> transfers; // value -> consumer stages
    for (auto [t, stage] : llvm::enumerate(stages)) {
      auto need = [&](Value v) -> LogicalResult {
        if (auto arg = dyn_cast<BlockArgument>(v)) {
          if (arg.getOwner() == &body)
            stage.inputs.insert(arg.getArgNumber());
          return success();
        }
        Operation *def = v.getDefiningOp();
        if (!sp.stageOf.count(def) || sp.stageOf[def] == int64_t(t) ||
            stage.recomputed.contains(def))
          return success();
        if (sp.stageOf[def] > int64_t(t))
          return def->emitError("this op falls in pipeline stage ")
                 << sp.stageOf[def] << " but stage " << t << " reads its result";
        if (auto slice = sp.recomputable(v); succeeded(slice)) {
          for (Operation *op : *slice) {
            stage.recomputed.insert(op);
            for (Value operand : op->getOperands())
              if (auto arg = dyn_cast<BlockArgument>(operand))
                stage.inputs.insert(arg.getArgNumber());
          }
          return success();
        }
        auto &consumers = transfers[v];
        if (!llvm::is_contained(consumers, int64_t(t)))
          consumers.push_back(int64_t(t));
        return success();
      };
      for (Operation *op : stage.ops) {
        llvm::SetVector<Value> used(op->operand_begin(), op->operand_end());
        getUsedValuesDefinedAbove(op->getRegions(), used);
        for (Value operand : used)
          if (failed(need(operand)))
            return failure();
      }
      // The graph outputs this stage computes.
      for (Value v : ret.getOperands())
        if (stageOfValue(v) == int64_t(t))
          if (failed(need(v)))
            return failure();
    }
    DenseMap<Value, int64_t> transferId;
    for (auto [i, entry] : llvm::enumerate(transfers)) {
      transferId[entry.first] = int64_t(i);
      for (int64_t consumer : entry.second)
        stages[consumer].received.insert(int64_t(i));
    }
    // Transfers are named "transfer:K" in the stage programs' inputs and
    // outputs: no graph input or output may already be.
    for (unsigned n = 0; n < main.getNumArguments(); ++n)
      if (auto name = main.getArgAttrOfType<StringAttr>(n, "nn.name");
          name && name.getValue().starts_with("transfer:"))
        return main.emitError("graph input '")
               << name.getValue()
               << "' has a name pipeline stages use for the values they pass on";
    for (unsigned n = 0; n < main.getNumResults(); ++n)
      if (auto name = main.getResultAttrOfType<StringAttr>(n, "nn.name");
          name && name.getValue().starts_with("transfer:"))
        return main.emitError("graph output '")
               << name.getValue()
               << "' has a name pipeline stages use for the values they pass on";

    // Build the stage functions.
    SmallVector<double> stageSeconds;
    b.setInsertionPoint(main);
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    for (auto [t, stage] : llvm::enumerate(stages)) {
      SmallVector<Type> argTypes;
      SmallVector<DictionaryAttr> argAttrs;
      for (unsigned n : stage.inputs) {
        argTypes.push_back(body.getArgument(n).getType());
        argAttrs.push_back(main.getArgAttrDict(n));
      }
      for (int64_t id : stage.received) {
        Value v = transfers.begin()[id].first;
        argTypes.push_back(v.getType());
        argAttrs.push_back(b.getDictionaryAttr(
            {b.getNamedAttr("dist.transfer", i64(id)),
             b.getNamedAttr("dist.from", i64(stageOfValue(v))),
             b.getNamedAttr("nn.name", b.getStringAttr(transferName(id)))}));
      }
      // Results: the transfers this stage sends, then its graph outputs.
      SmallVector<Value> results;
      SmallVector<DictionaryAttr> resultAttrs;
      for (auto [id, entry] : llvm::enumerate(transfers)) {
        if (stageOfValue(entry.first) != int64_t(t))
          continue;
        results.push_back(entry.first);
        resultAttrs.push_back(b.getDictionaryAttr(
            {b.getNamedAttr("dist.transfer", i64(int64_t(id))),
             b.getNamedAttr("dist.to", b.getDenseI64ArrayAttr(entry.second)),
             b.getNamedAttr("nn.name", b.getStringAttr(transferName(int64_t(id))))}));
      }
      for (auto [n, v] : llvm::enumerate(ret.getOperands()))
        if (stageOfValue(v) == int64_t(t)) {
          results.push_back(v);
          resultAttrs.push_back(main.getResultAttrDict(n));
        }
      SmallVector<Type> resultTypes;
      for (Value v : results)
        resultTypes.push_back(v.getType());
      auto fn = func::FuncOp::create(b, main.getLoc(), ("stage_" + Twine(t)).str(),
                                     b.getFunctionType(argTypes, resultTypes));
      fn->setAttr("dist.stage", i64(int64_t(t)));
      fn->setAttr("dist.pp_rank", i64(plan.stageRank[t]));
      fn->setAttr("dist.layers", b.getDenseI64ArrayAttr(
                                     {sp.layerRange[t].first, sp.layerRange[t].second}));

      for (auto [i, attrs] : llvm::enumerate(argAttrs))
        if (attrs)
          fn.setArgAttrs(i, attrs);
      for (auto [i, attrs] : llvm::enumerate(resultAttrs))
        if (attrs)
          fn.setResultAttrs(i, attrs);
      Block *entry = fn.addEntryBlock();
      IRMapping map;
      unsigned a = 0;
      for (unsigned n : stage.inputs)
        map.map(body.getArgument(n), entry->getArgument(a++));
      for (int64_t id : stage.received)
        map.map(transfers.begin()[id].first, entry->getArgument(a++));
      OpBuilder inner = OpBuilder::atBlockEnd(entry);
      SmallVector<Operation *> recomputed(stage.recomputed.begin(), stage.recomputed.end());
      llvm::sort(recomputed, [&](Operation *x, Operation *y) { return sp.order[x] < sp.order[y]; });
      for (Operation *op : recomputed)
        inner.clone(*op, map);
      for (Operation *op : stage.ops)
        inner.clone(*op, map);
      SmallVector<Value> mapped;
      for (Value v : results)
        mapped.push_back(map.lookupOrDefault(v));
      func::ReturnOp::create(inner, main.getLoc(), mapped);
      // What the stage computes per micro-batch, recomputed values included.
      double seconds = 0, flops = 0, bytes = 0;
      fn.walk([&](Operation *op) {
        dist::OpCost cost = dist::estimateCost(op);
        seconds += Splitter::timeOf(op);
        flops += cost.flops;
        bytes += cost.bytes;
      });
      fn->setAttr("dist.estimated_seconds", b.getF64FloatAttr(seconds));
      stageSeconds.push_back(seconds);
      fn->setAttr("dist.estimated_flops", b.getF64FloatAttr(flops));
      fn->setAttr("dist.estimated_bytes", b.getF64FloatAttr(bytes));
    }

    // A training step's zero-bubble schedule, list-scheduled again with
    // the stages' estimates: F as estimated, I as long (none on a stage
    // that is passed no float value: nothing to send back), W the rest of
    // a backward of twice the forward.
    auto kind = parsePipelineScheduleKind(schedule.getValue());
    if (training && scheduleFile.empty() && kind &&
        (*kind == PipelineScheduleKind::ZBH1 || *kind == PipelineScheduleKind::ZBV)) {
      runtime::PipelineCosts costs;
      costs.forward.assign(stageSeconds.begin(), stageSeconds.end());
      costs.backwardInput.clear();
      costs.backwardWeight.clear();
      for (auto [t, stage] : llvm::enumerate(stages)) {
        bool passedFloat = llvm::any_of(stage.received, [&](int64_t id) {
          return isFloat(transfers.begin()[id].first.getType());
        });
        double f = stageSeconds[t];
        costs.backwardInput.push_back(passedFloat ? f : 0.0);
        costs.backwardWeight.push_back(passedFloat ? f : 2 * f);
      }
      std::string error;
      auto timed = buildPipelineSchedule(*kind, int(ranks), int(microbatches),
                                         int(plan.stages() / ranks), false, error, costs);
      if (timed && simulatePipeline(runtime::withCommunication(*timed)).ok() &&
          timed->stageRank == plan.stageRank)
        plan = std::move(*timed);
    }
    // The schedule.
    SmallVector<Attribute> actions;
    for (const auto &list : plan.actions) {
      std::string text;
      for (const auto &act : list)
        text += (text.empty() ? "" : ",") + act.str();
      actions.push_back(b.getStringAttr(text));
    }
    SmallVector<int64_t> stageRanks(plan.stageRank.begin(), plan.stageRank.end());
    module->setAttr("dist.pipeline",
                    b.getDictionaryAttr({
                        b.getNamedAttr("ranks", i64(ranks)),
                        b.getNamedAttr("microbatches", i64(microbatches)),
                        b.getNamedAttr("schedule",
                                       b.getStringAttr(scheduleFile.empty()
                                                           ? std::string(schedule.getValue())
                                                           : std::string(scheduleFile))),
                        b.getNamedAttr("stage_ranks", b.getDenseI64ArrayAttr(stageRanks)),
                        b.getNamedAttr("actions", b.getArrayAttr(actions)),
                    }));
    main.erase();
    return success();
  }
};

} // namespace
