//===- AppendLoss.cpp - a training loss after the model -------------------===//
//
// nn-append-loss: the loss of a training step from the model's first result
// and a new labels argument, in nn ops (so that it is differentiated,
// sharded and lowered like the model).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Autodiff/Gradients.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <type_traits>

namespace shardflow::nn {
#define GEN_PASS_DEF_NNAPPENDLOSS
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

struct Builder {
  OpBuilder &b;
  Location loc;

  template <typename OpTy> Value make(ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
    return OpTy::create(b, loc, operands, attrs)->getResult(0);
  }
  Value splat(Type elem, Attribute value) {
    return nn::ConstantOp::create(b, loc,
                                  DenseElementsAttr::get(RankedTensorType::get({}, elem), value));
  }
  Value sumAll(Value v) {
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < typeOf(v).getRank(); ++d)
      axes.push_back(d);
    if (axes.empty())
      return v;
    return make<nn::ReduceSumOp>({v}, {b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
                                       b.getNamedAttr("keepdims", b.getBoolAttr(false))});
  }
  Value castTo(Value v, Type elem) {
    return nn::CastOp::create(b, loc, v, TypeAttr::get(elem));
  }
};

struct NNAppendLossPass : public nn::impl::NNAppendLossBase<NNAppendLossPass> {
  using NNAppendLossBase::NNAppendLossBase;

  /// The log-sum-exp of each row of `logits` over the last dimension,
  /// [..., 1], written out so that each step shards along the classes: the
  /// row max (for range only: any value the same for a row gives the same
  /// result) is the max of `blocks` block maxima, exp and the sum over the
  /// classes are elementwise and a partial sum.
  static Value logSumExp(Builder &l, Value logits, int64_t blocks) {
    OpBuilder &b = l.b;
    auto type = typeOf(logits);
    int64_t rank = type.getRank(), classes = type.getDimSize(rank - 1);
    auto reduce = [&](auto tag, Value v, int64_t axis) {
      using OpTy = decltype(tag);
      Value r = l.make<OpTy>({v}, {b.getNamedAttr("axes", b.getDenseI64ArrayAttr({axis})),
                                   b.getNamedAttr("keepdims", b.getBoolAttr(true))});
      // The maximum is for range only: no cotangent flows through it.
      if (std::is_same_v<OpTy, nn::ReduceMaxOp>)
        r.getDefiningOp()->setAttr(nn::kStopGradientAttr, b.getUnitAttr());
      return r;
    };
    Value rowMax;
    if (blocks > 1) {
      SmallVector<int64_t> shape(type.getShape().drop_back());
      shape.append({blocks, classes / blocks});
      Value split = nn::ReshapeOp::create(
          b, l.loc, RankedTensorType::get(shape, type.getElementType()), logits);
      Value blockMax = reduce(nn::ReduceMaxOp(), split, rank);
      rowMax = reduce(nn::ReduceMaxOp(), blockMax, rank - 1);
      SmallVector<int64_t> kept(type.getShape().drop_back());
      kept.push_back(1);
      rowMax = nn::ReshapeOp::create(
          b, l.loc, RankedTensorType::get(kept, type.getElementType()), rowMax);
    } else {
      rowMax = reduce(nn::ReduceMaxOp(), logits, rank - 1);
    }
    Value sum = reduce(nn::ReduceSumOp(),
                       l.make<nn::ExpOp>({l.make<nn::SubOp>({logits, rowMax})}), rank - 1);
    return l.make<nn::AddOp>({l.make<nn::LogOp>({sum}), rowMax});
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>("main");
    if (!fn || fn.getNumResults() == 0) {
      module.emitError("nn-append-loss: no function @main with a result");
      return signalPassFailure();
    }
    if (kind != "cross-entropy" && kind != "mse") {
      module.emitError("nn-append-loss: kind must be cross-entropy or mse, got '") << kind << "'";
      return signalPassFailure();
    }
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (auto name = fn.getArgAttrOfType<StringAttr>(i, "nn.name"); name && name == labels) {
        fn.emitError("nn-append-loss: the model already has an input named '") << labels << "'";
        return signalPassFailure();
      }
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    Value output = ret.getOperand(0);
    auto outType = dyn_cast<RankedTensorType>(output.getType());
    if (!outType || !isa<FloatType>(outType.getElementType())) {
      fn.emitError("nn-append-loss: the first output must be a float tensor, got ")
          << output.getType();
      return signalPassFailure();
    }
    Type elem = outType.getElementType();
    bool crossEntropy = kind == "cross-entropy";
    if (crossEntropy && outType.getRank() == 0) {
      fn.emitError("nn-append-loss: cross-entropy needs logits of rank >= 1, got ") << outType;
      return signalPassFailure();
    }
    RankedTensorType labelType =
        crossEntropy ? RankedTensorType::get(outType.getShape().drop_back(),
                                             IntegerType::get(&getContext(), 64))
                     : outType;
    OpBuilder b(ret);
    unsigned argIndex = fn.getNumArguments();
    // Class labels must name a class or be the ignored one: the runtime
    // checks them against this range (a label past it would count as
    // nothing, silently).
    SmallVector<NamedAttribute> argAttrs{b.getNamedAttr("nn.name", b.getStringAttr(labels))};
    if (crossEntropy) {
      argAttrs.push_back(b.getNamedAttr(
          "nn.valid_range", b.getDenseI64ArrayAttr({0, outType.getDimSize(outType.getRank() - 1)})));
      argAttrs.push_back(b.getNamedAttr("nn.ignore_value", b.getI64IntegerAttr(ignoreIndex)));
    }
    if (failed(fn.insertArgument(argIndex, labelType, b.getDictionaryAttr(argAttrs),
                                 fn.getLoc())))
      return signalPassFailure();
    Value label = fn.getArgument(argIndex);
    Builder l{b, NameLoc::get(b.getStringAttr("loss"), fn.getLoc())};
    Value loss;
    if (crossEntropy) {
      int64_t rank = outType.getRank(), classes = outType.getDimSize(rank - 1);
      Value lse = logSumExp(l, output, classes % maxBlocks == 0 ? maxBlocks : 1);
      Type i64 = b.getI64Type();
      // Each row's loss: lse - the label's logit, 0 for an ignored
      // position; the global class ids say which column is the label's
      // (the logits may be split along them).
      SmallVector<int64_t> ids(classes);
      for (int64_t c = 0; c < classes; ++c)
        ids[c] = c;
      Value classIds = nn::ConstantOp::create(
          b, l.loc, DenseElementsAttr::get(RankedTensorType::get({classes}, i64),
                                           ArrayRef<int64_t>(ids)));
      Value perRow = nn::SoftmaxCrossEntropyOp::create(b, l.loc, output, lse, label, classIds,
                                                       b.getI64IntegerAttr(ignoreIndex));
      Value ignore = l.splat(i64, b.getI64IntegerAttr(ignoreIndex));
      Value counted = l.castTo(l.make<nn::NotOp>({l.make<nn::EqualOp>({label, ignore})}), elem);
      Value total = l.sumAll(perRow);
      Value count = l.make<nn::MaxOp>({l.sumAll(counted), l.splat(elem, b.getFloatAttr(elem, 1.0))});
      loss = l.make<nn::DivOp>({total, count});
    } else {
      Value d = l.make<nn::SubOp>({output, label});
      Value sq = l.sumAll(l.make<nn::MulOp>({d, d}));
      loss = l.make<nn::DivOp>(
          {sq, l.splat(elem, b.getFloatAttr(elem, double(outType.getNumElements())))});
    }
    SmallVector<Value> results(ret.getOperands());
    results.push_back(loss);
    SmallVector<DictionaryAttr> attrs;
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      attrs.push_back(fn.getResultAttrDict(i));
    attrs.push_back(b.getDictionaryAttr(b.getNamedAttr("nn.name", b.getStringAttr("loss"))));
    ret->setOperands(results);
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    fn.setType(FunctionType::get(&getContext(), fn.getArgumentTypes(), types));
    fn.setAllResultAttrs(attrs);
  }
};

} // namespace
