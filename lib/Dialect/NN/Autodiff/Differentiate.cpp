//===- Differentiate.cpp - reverse-mode gradients of a scalar loss ---------===//
//
// nn-differentiate: the ops between the values differentiated against (the
// sources: weights or float arguments) and the loss are the active ones;
// walking them last to first, each op's gradient rule turns its results'
// cotangents into its active operands' cotangents, summed where a value has
// several users. The sources' cotangents become new results of @main.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Autodiff/Gradients.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

namespace shardflow::nn {
#define GEN_PASS_DEF_NNDIFFERENTIATE
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

std::string nameOf(func::FuncOp fn, unsigned i, bool result) {
  auto attr = result ? fn.getResultAttrOfType<StringAttr>(i, "nn.name")
                     : fn.getArgAttrOfType<StringAttr>(i, "nn.name");
  if (attr)
    return attr.str();
  return (result ? "result " : "argument ") + std::to_string(i);
}

struct NNDifferentiatePass : public nn::impl::NNDifferentiateBase<NNDifferentiatePass> {
  using NNDifferentiateBase::NNDifferentiateBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>("main");
    if (!fn) {
      module.emitError("nn-differentiate: no function @main");
      return signalPassFailure();
    }
    if (wrt != "weights" && wrt != "inputs" && wrt != "all" && wrt != "transfers") {
      module.emitError("nn-differentiate: wrt must be weights, inputs, all or transfers, got '")
          << wrt << "'";
      return signalPassFailure();
    }
    for (const std::string &kind : fused) {
      if (kind == "all") {
        fusedKinds.assign({"attention", "gelu", "normalization", "cross-entropy"});
        continue;
      }
      if (kind != "attention" && kind != "gelu" && kind != "normalization" &&
          kind != "cross-entropy") {
        module.emitError("nn-differentiate: fused takes attention, gelu, normalization, "
                         "cross-entropy or all, got '")
            << kind << "'";
        return signalPassFailure();
      }
      if (!llvm::is_contained(fusedKinds, kind))
        fusedKinds.push_back(kind);
    }
    if (failed(differentiate(fn)))
      return signalPassFailure();
    // The marks have served: no later pass reads them. The ops that stood
    // whole for their gradient rules become their parts.
    fn.walk([](Operation *op) { op->removeAttr(nn::kStopGradientAttr); });
    // An attention the fused backward wrote again with its log-sum-exp
    // saved is no longer read.
    SmallVector<nn::AttentionOp> unused;
    fn.walk([&](nn::AttentionOp op) {
      if (op->use_empty())
        unused.push_back(op);
    });
    for (nn::AttentionOp op : unused)
      op.erase();
    fn.walk([](nn::SoftmaxCrossEntropyOp op) {
      OpBuilder b(op);
      op.replaceAllUsesWith(nn::expandSoftmaxCrossEntropy(b, op));
      op.erase();
    });
  }

  /// The fused backward kinds asked for, "all" spelled out.
  SmallVector<std::string> fusedKinds;

  LogicalResult differentiate(func::FuncOp fn) {
    Block &body = fn.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // The loss.
    int lossIndex = loss.empty() ? 0 : -1;
    for (unsigned i = 0; i < fn.getNumResults() && lossIndex < 0; ++i)
      if (nameOf(fn, i, true) == loss)
        lossIndex = int(i);
    if (lossIndex < 0 || unsigned(lossIndex) >= ret.getNumOperands())
      return fn.emitError("nn-differentiate: @main has no result named '") << loss << "'";
    Value lossValue = ret.getOperand(lossIndex);
    auto lossType = dyn_cast<RankedTensorType>(lossValue.getType());
    if (!lossType || !isFloatTensor(lossValue) || lossType.getNumElements() != 1)
      return fn.emitError("nn-differentiate: the loss '")
             << nameOf(fn, lossIndex, true) << "' must be a float scalar, got "
             << lossValue.getType();

    // The sources, in order: weights by name, then arguments.
    llvm::MapVector<StringRef, SmallVector<Value>> sources;
    if (wrt != "inputs")
      fn.walk([&](Operation *op) {
        if (auto w = dyn_cast<nn::WeightOp>(op)) {
          // Training state (the step counter a keyed dropout reads) is no
          // parameter.
          if (isFloatTensor(w.getResult()) && w.getStorage() != "zeros")
            sources[w.getName()].push_back(w.getResult());
          return;
        }
        // An initializer small enough to be embedded (a norm's scale, a
        // bias) is a weight too; one of a single element is not (a
        // scalar constant), nor is a constant computed at import.
        auto c = dyn_cast<nn::ConstantOp>(op);
        StringRef name = c ? getInitializerName(c->getLoc()) : "";
        if (!name.empty() && isFloatTensor(c.getResult()) &&
            cast<RankedTensorType>(c.getType()).getNumElements() > 1)
          sources[name].push_back(c.getResult());
      });
    for (auto &[name, values] : sources)
      for (Value v : values)
        if (v.getType() != values.front().getType())
          return v.getDefiningOp()->emitError("nn-differentiate: initializer '")
                 << name << "' is read as blocks of different types";

    // Active values: reached from a source, and reaching the loss.
    llvm::DenseSet<Value> fromSource;
    for (auto &[name, values] : sources)
      fromSource.insert(values.begin(), values.end());
    // The arguments differentiated against.
    auto differentiated = [&](BlockArgument arg) {
      if (wrt == "weights" || !isFloatTensor(arg))
        return false;
      return wrt != "transfers" || bool(fn.getArgAttr(arg.getArgNumber(), "dist.transfer"));
    };
    for (BlockArgument arg : fn.getArguments())
      if (differentiated(arg))
        fromSource.insert(arg);
    // An op marked nn.stop_gradient passes no cotangent: the function does
    // not depend on its results (a softmax's row maximum, subtracted for
    // range only).
    for (Operation &op : body.without_terminator())
      if (!op.hasAttr(nn::kStopGradientAttr) &&
          llvm::any_of(op.getOperands(), [&](Value v) { return fromSource.contains(v); }))
        for (Value r : op.getResults())
          if (isFloatTensor(r))
            fromSource.insert(r);
    llvm::DenseSet<Value> toLoss{lossValue};
    for (Operation &op : llvm::reverse(body.without_terminator()))
      if (llvm::any_of(op.getResults(), [&](Value r) { return toLoss.contains(r); }))
        for (Value v : op.getOperands())
          toLoss.insert(v);
    auto active = [&](Value v) { return fromSource.contains(v) && toLoss.contains(v); };

    // Cotangents, accumulated.
    OpBuilder b(ret);
    llvm::DenseMap<Value, Value> cotangent;
    auto accumulate = [&](Value v, Value g) {
      Value &slot = cotangent[v];
      slot = slot ? nn::AddOp::create(b, g.getLoc(), slot, g).getResult() : g;
    };
    {
      Attribute one = b.getFloatAttr(lossType.getElementType(), 1.0);
      accumulate(lossValue, nn::ConstantOp::create(b, lossValue.getLoc(),
                                                   DenseElementsAttr::get(lossType, one)));
    }
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) {
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        Value g = active(r) ? cotangent.lookup(r) : Value();
        resultGrads.push_back(g);
        any |= bool(g);
      }
      if (!any)
        continue;
      SmallVector<bool> wanted;
      bool wantsAny = false;
      for (Value v : op->getOperands()) {
        wanted.push_back(active(v) && isFloatTensor(v));
        wantsAny |= wanted.back();
      }
      if (!wantsAny)
        continue;
      const nn::GradientRule *rule = nn::lookupGradientRule(op->getName().getStringRef());
      if (!rule)
        return op->emitError("nn-differentiate: '")
               << op->getName() << "' has no gradient rule yet";
      if (!rule->fn)
        return op->emitError("nn-differentiate: '")
               << op->getName() << "' is not differentiable (" << rule->nonDifferentiable
               << ") but a gradient flows through it";
      b.setInsertionPoint(ret);
      nn::GradientBuilder gb(b, op, resultGrads, wanted);
      gb.fusedKinds = fusedKinds;
      if (failed(rule->fn(gb)))
        return failure();
      for (auto [i, v] : llvm::enumerate(op->getOperands()))
        if (wanted[i] && !gb.isHeld(unsigned(i))) {
          Value g = gb.operandGrad(unsigned(i));
          if (!g)
            return op->emitError("nn-differentiate: the gradient rule of '")
                   << op->getName() << "' gave no cotangent for operand " << i;
          accumulate(v, g);
        }
    }

    // The gradients as new results.
    b.setInsertionPoint(ret);
    auto gradientOf = [&](Value v, Location loc) -> Value {
      if (Value g = cotangent.lookup(v))
        return g;
      auto type = cast<RankedTensorType>(v.getType());
      return nn::ConstantOp::create(b, loc,
                                    DenseElementsAttr::get(type, b.getZeroAttr(type.getElementType())));
    };
    SmallVector<Value> results(ret.getOperands());
    SmallVector<std::string> names;
    for (auto &[name, values] : sources) {
      Value total;
      for (Value v : values) {
        Value g = gradientOf(v, v.getLoc());
        total = total ? nn::AddOp::create(b, v.getLoc(), total, g).getResult() : g;
      }
      results.push_back(total);
      names.push_back(("grad:" + name).str());
    }
    for (BlockArgument arg : fn.getArguments())
        if (differentiated(arg)) {
          results.push_back(gradientOf(arg, fn.getLoc()));
          names.push_back("grad:" + nameOf(fn, arg.getArgNumber(), false));
        }
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      resultAttrs.push_back(fn.getResultAttrDict(i));
    for (const std::string &name : names)
      resultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr("nn.name", b.getStringAttr(name))));
    ret->setOperands(results);
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(), types));
    fn.setAllResultAttrs(resultAttrs);
    return success();
  }
};

} // namespace
