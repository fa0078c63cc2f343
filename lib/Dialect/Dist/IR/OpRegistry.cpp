//===- OpRegistry.cpp - every nn op's facts, in one registry ---------------===//
//
// The table: one entry per nn op (or per family of ops that share every
// fact), each stating the op's sharding rule, attribute localization,
// partition hook and cost estimate. The builders are in ShardingRules.cpp,
// Localization.cpp and OpCosts.cpp; OpRegistry.h says what each fact is.
//
//===----------------------------------------------------------------------===//

#include "OpFactBuilders.h"

#include "llvm/ADT/StringMap.h"

#include <optional>
#include <type_traits>

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

namespace {
using RuleFn = std::function<LogicalResult(RuleBuilder &, Operation *)>;
using LocalizeFn = std::function<LogicalResult(Operation *, const LocalizationContext &)>;
using CostFn = std::function<OpCost(Operation *)>;

struct Entry {
  RuleFn rule;
  LocalizeFn localize;
  /// Unset until the entry states it; a stated "none" is a null hook.
  std::optional<PartitionHook> partition;
  CostFn cost;
};

class Registry {
public:
  Registry();

  const Entry *lookup(StringRef name) const {
    auto it = entries.find(name);
    return it == entries.end() ? nullptr : &it->second;
  }

private:
  /// The facts of OpTys, each stated once for all of them.
  template <typename... OpTys> class Facts {
  public:
    explicit Facts(Registry &registry) : registry(registry) {}

    /// `fn(RuleBuilder &)`, or `fn(RuleBuilder &, OpTy)` for a single op;
    /// either returns void or LogicalResult.
    template <typename Fn> Facts &rule(Fn fn) {
      (setRule<OpTys>(fn), ...);
      return *this;
    }
    Facts &localize(LocalizeFn fn) {
      ((registry.entries[OpTys::getOperationName()].localize = fn), ...);
      return *this;
    }
    Facts &noPartitionHook() {
      ((registry.entries[OpTys::getOperationName()].partition = PartitionHook()), ...);
      return *this;
    }
    Facts &cost(CostFn fn) {
      ((registry.entries[OpTys::getOperationName()].cost = fn), ...);
      return *this;
    }

  private:
    template <typename OpTy, typename Fn> void setRule(Fn fn) {
      RuleFn &slot = registry.entries[OpTy::getOperationName()].rule;
      assert(!slot && "rule stated twice");
      slot = [fn](RuleBuilder &b, Operation *op) -> LogicalResult {
        auto call = [&]() {
          if constexpr (std::is_invocable_v<Fn, RuleBuilder &>)
            return fn(b);
          else
            return fn(b, cast<OpTy>(op));
        };
        if constexpr (std::is_void_v<decltype(call())>) {
          call();
          return success();
        } else {
          return call();
        }
      };
    }

    Registry &registry;
  };

  template <typename... OpTys> Facts<OpTys...> facts() { return Facts<OpTys...>(*this); }

  llvm::StringMap<Entry> entries;
};

/// A rule with no factor: every dim replicated.
void noFactors(RuleBuilder &) {}
} // namespace

Registry::Registry() {
  using namespace nn;

  // Sources: a slice of a constant or weight is a slice of its value; a
  // weight learns where its rank's slice lies.
  facts<ConstantOp, ConstantOfShapeOp>()
      .rule(elementwiseRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(sourceCost);
  facts<WeightOp>()
      .rule(elementwiseRule)
      .localize(localizeWeightSlices)
      .noPartitionHook()
      .cost(sourceCost);
  // Range values are start + i * delta at global positions i; shape's
  // values are the global dims.
  facts<RangeOp, ShapeOp>()
      .rule(noFactors)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(sourceCost);

  // Elementwise.
  facts<SqrtOp, ExpOp, LogOp, TanhOp, SigmoidOp, ErfOp, CosOp, SinOp, FloorOp, CeilOp, RoundOp, ReciprocalOp, ReluOp, NegOp, AbsOp,
        NotOp, LeakyReluOp, GeluOp, ClipOp, CastOp>()
      .rule(elementwiseRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(1));
  // Each rank draws its block's elements by their global index.
  facts<KeyedDropoutOp>()
      .rule(tensorsAndScalarsRule)
      .localize(localizeDropoutBlocks)
      .noPartitionHook()
      .cost(costPerElement(12));
  facts<GeluGradOp>()
      .rule(elementwiseRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(20));
  facts<IdentityOp, DropoutOp>()
      .rule(elementwiseRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(viewCost);
  // An optimizer's fused update: the parameter, its gradient and its
  // state shard alike; the scalars are whole on every rank.
  facts<AdamWUpdateOp>()
      .rule(tensorsAndScalarsRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(12));
  facts<AddOp, SubOp, MulOp, DivOp, ModOp, PowOp, MinOp, MaxOp, EqualOp, LessOp, GreaterOp,
        AndOp, WhereOp>()
      .rule(broadcastRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(1));
  // The mask is drawn from one random stream in global row-major order.
  facts<TrainingDropoutOp>()
      .rule([](RuleBuilder &b) { sameShapeRule(b, [](int64_t) { return kNeedReplication; }); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(3));

  // Along one axis, normalizations.
  facts<SoftmaxOp>()
      .rule([](RuleBuilder &b, SoftmaxOp op) { axisRule(b, op.getAxis()); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(5));
  facts<LogSoftmaxOp>()
      .rule([](RuleBuilder &b, LogSoftmaxOp op) { axisRule(b, op.getAxis()); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(6));
  // Each half of the last dimension reads the other.
  facts<RotateHalfOp>()
      .rule([](RuleBuilder &b) { axisRule(b, -1); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(1));
  facts<CumSumOp>()
      .rule([](RuleBuilder &b, CumSumOp op) { axisRule(b, op.getAxis()); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerInputElement(1));
  facts<TopKOp>()
      .rule(topkRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerInputElement(2));
  facts<LayerNormalizationOp>()
      .rule([](RuleBuilder &b, LayerNormalizationOp op) { normalizationRule(b, op.getAxis()); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(8));
  facts<RMSNormalizationOp>()
      .rule([](RuleBuilder &b, RMSNormalizationOp op) { normalizationRule(b, op.getAxis()); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(6));
  // The norms' backward: the input's cotangent shards like the forward;
  // the scale's sums the rows, which a split makes partial sums.
  facts<NormalizationGradOp>()
      .rule([](RuleBuilder &b, NormalizationGradOp op) { normalizationRule(b, op.getAxis()); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(10));
  facts<NormalizationScaleGradOp>()
      .rule([](RuleBuilder &b, NormalizationScaleGradOp op) {
        normalizationScaleGradRule(b, op.getAxis());
      })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerInputElement(8));
  // The loss's rows are parallel. The forward needs its classes whole (it
  // is expanded to a form that splits them before any sharding); its
  // backward is elementwise over the logits, `classes` naming the columns
  // each piece holds.
  facts<SoftmaxCrossEntropyOp>()
      .rule([](RuleBuilder &b) {
        ArrayRef<int64_t> logits = b.operandShape(0);
        int64_t rank = logits.size();
        for (int64_t d = 0; d + 1 < rank; ++d) {
          int64_t f = b.factor(logits[d]);
          for (unsigned i : {0u, 1u, 2u})
            b.operand(i, d, f);
          b.result(0, d, f);
        }
        int64_t classes = b.factor(logits.back(), kNeedReplication);
        b.operand(0, rank - 1, classes);
        b.operand(3, 0, classes);
      })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerInputElement(2));
  facts<SoftmaxCrossEntropyGradOp>()
      .rule(broadcastRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(6));
  facts<BatchNormalizationOp>()
      .rule(batchNormalizationRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerElement(4));

  // Reductions.
  facts<ReduceSumOp>()
      .rule([](RuleBuilder &b, ReduceSumOp op) {
        reduceRule(b, op.getAxes(), op.getKeepdims(), kReduction);
      })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerInputElement(1));
  // Means, maxima, minima and products of parts are not sums of parts.
  facts<ReduceMeanOp, ReduceMaxOp, ReduceMinOp, ReduceProdOp>()
      .rule([](RuleBuilder &b, auto op) {
        reduceRule(b, op.getAxes(), op.getKeepdims(), kNeedReplication);
      })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerInputElement(1));
  // An index along the axis is only known with the whole axis.
  facts<ArgMaxOp, ArgMinOp>()
      .rule([](RuleBuilder &b, auto op) {
        int64_t axis = op.getAxis();
        reduceRule(b, ArrayRef<int64_t>(axis), op.getKeepdims(), kNeedReplication);
      })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(costPerInputElement(1));

  // Contractions and windows.
  facts<MatMulOp>().rule(matmulRule).localize(localizeNothing).noPartitionHook().cost(matmulCost);
  facts<GemmOp>().rule(gemmRule).localize(localizeNothing).noPartitionHook().cost(gemmCost);
  facts<EinsumOp>().rule(einsumRule).localize(localizeNothing).noPartitionHook().cost(einsumCost);
  facts<ConvOp>().rule(convRule).localize(localizeNothing).noPartitionHook().cost(convCost);
  facts<MaxPoolOp, AveragePoolOp, GlobalAveragePoolOp>()
      .rule(poolRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(poolCost);
  // The indices are flat positions in the whole input (batch and channel
  // included): a rank holding part of the input would compute local ones.
  facts<MaxPoolWithIndicesOp>()
      .rule(noFactors)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(poolCost);
  facts<AttentionOp>()
      .rule(attentionRule)
      .localize(localizeAttentionHeads)
      .noPartitionHook()
      .cost(attentionCost);
  facts<AttentionGradOp>()
      .rule(attentionGradRule)
      .localize(localizeAttentionHeads)
      .noPartitionHook()
      .cost(attentionCost);
  facts<RotaryEmbeddingOp>()
      .rule(rotaryEmbeddingRule)
      .localize(localizeRotaryHeads)
      .noPartitionHook()
      .cost(costPerElement(3));

  // Data movement.
  facts<ReshapeOp, FlattenOp, SqueezeOp, UnsqueezeOp>()
      .rule(reshapeRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(viewCost);
  facts<ExpandOp>().rule(expandRule).localize(localizeNothing).noPartitionHook().cost(copyCost);
  facts<TransposeOp>()
      .rule(transposeRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(copyCost);
  facts<ConcatOp>()
      .rule([](RuleBuilder &b, ConcatOp op) { allButAxisRule(b, op.getAxis()); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(copyCost);
  facts<SplitOp>()
      .rule([](RuleBuilder &b, SplitOp op) { allButAxisRule(b, op.getAxis()); })
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(copyCost);
  facts<SliceOp>().rule(sliceRule).localize(localizeNothing).noPartitionHook().cost(copyCost);
  facts<PadOp>().rule(padRule).localize(localizeNothing).noPartitionHook().cost(copyCost);
  facts<TriluOp>().rule(triluRule).localize(localizeNothing).noPartitionHook().cost(copyCost);
  // A table split along the gathered axis: each rank learns its rows.
  facts<GatherOp>()
      .rule(gatherRule)
      .localize(localizeGatherRows)
      .noPartitionHook()
      .cost(copyCost);
  facts<GatherElementsOp>()
      .rule(gatherElementsRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(copyCost);
  facts<ScatterNDOp>()
      .rule(scatterNDRule)
      .localize(localizeNothing)
      .noPartitionHook()
      .cost(copyCost);
}

static const Registry &registry() {
  static const Registry instance;
  return instance;
}

/// Hooks that tests put in place of an entry's (ScopedPartitionHookForTesting).
static llvm::StringMap<PartitionHook> &hooksForTesting() {
  static llvm::StringMap<PartitionHook> hooks;
  return hooks;
}

static const Entry *entryOf(Operation *op) {
  return op->isRegistered() ? registry().lookup(op->getName().getStringRef()) : nullptr;
}

FailureOr<ShardingRule> dist::getShardingRule(Operation *op) {
  const Entry *entry = entryOf(op);
  if (!entry || !entry->rule)
    return op->emitOpError("has no sharding rule");
  auto isStatic = [](Type t) {
    auto ranked = dyn_cast<RankedTensorType>(t);
    return ranked && ranked.hasStaticShape();
  };
  if (!llvm::all_of(op->getOperandTypes(), isStatic) ||
      !llvm::all_of(op->getResultTypes(), isStatic))
    return op->emitOpError("needs statically shaped tensor operands and results for a sharding "
                           "rule");
  RuleBuilder builder(op);
  if (failed(entry->rule(builder, op)))
    return failure();
  ShardingRule rule = std::move(builder).finish();
  if (failed(rule.verify(op)))
    return failure();
  return rule;
}

bool dist::hasOpFacts(StringRef opName) { return registry().lookup(opName) != nullptr; }

bool dist::hasCompleteOpFacts(StringRef opName, std::string &missing) {
  const Entry *entry = registry().lookup(opName);
  missing = !entry              ? "an entry"
            : !entry->rule      ? "a sharding rule"
            : !entry->localize  ? "its attribute localization (localizeNothing for none)"
            : !entry->partition ? "its partition hook (noPartitionHook() for none)"
            : !entry->cost      ? "a cost estimate"
                                : "";
  return missing.empty();
}

LogicalResult dist::localizeAttributes(Operation *op, const LocalizationContext &context) {
  const Entry *entry = entryOf(op);
  if (!entry || !entry->localize)
    return op->emitOpError("has no attribute localization in the op registry");
  return entry->localize(op, context);
}

const PartitionHook *dist::getPartitionHook(Operation *op) {
  auto &testing = hooksForTesting();
  if (!testing.empty())
    if (auto it = testing.find(op->getName().getStringRef()); it != testing.end())
      return &it->second;
  const Entry *entry = entryOf(op);
  return entry && entry->partition && *entry->partition ? &*entry->partition : nullptr;
}

OpCost dist::estimateCost(Operation *op) {
  const Entry *entry = entryOf(op);
  return entry && entry->cost ? entry->cost(op) : OpCost();
}

ScopedPartitionHookForTesting::ScopedPartitionHookForTesting(StringRef opName,
                                                             PartitionHook hook)
    : opName(opName.str()) {
  hooksForTesting()[opName] = std::move(hook);
}

ScopedPartitionHookForTesting::~ScopedPartitionHookForTesting() {
  hooksForTesting().erase(opName);
}
