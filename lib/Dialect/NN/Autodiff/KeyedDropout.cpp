//===- KeyedDropout.cpp - the model's dropout on, for training -------------===//
//
// nn-keyed-dropout: each dropout of the model becomes an nn.keyed_dropout
// of its ratio, keyed by the seed, the step counter and the node's number,
// so that a step's mask is the same on every mesh and new at every step.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Autodiff/Training.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace shardflow::nn {
#define GEN_PASS_DEF_NNKEYEDDROPOUT
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

struct NNKeyedDropoutPass : public nn::impl::NNKeyedDropoutBase<NNKeyedDropoutPass> {
  using NNKeyedDropoutBase::NNKeyedDropoutBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>("main");
    if (!fn) {
      module.emitError("nn-keyed-dropout: no function @main");
      return signalPassFailure();
    }
    SmallVector<Operation *> dropouts;
    bool failed = false;
    fn.walk([&](Operation *op) {
      if (auto d = dyn_cast<nn::TrainingDropoutOp>(op)) {
        if (!d.getMask().use_empty()) {
          d.emitOpError("nn-keyed-dropout: the mask of a training-mode Dropout is read; "
                        "--dropout on draws a new mask each step, which this graph "
                        "cannot read");
          failed = true;
        }
        dropouts.push_back(op);
      } else if (isa<nn::DropoutOp>(op)) {
        dropouts.push_back(op);
      }
    });
    if (failed)
      return signalPassFailure();
    if (dropouts.empty())
      return;
    Value step = nn::stepCounter(fn);
    OpBuilder b(step.getDefiningOp());
    b.setInsertionPointAfter(step.getDefiningOp());
    Location loc = fn.getLoc();
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    Value one = nn::ConstantOp::create(b, loc, DenseElementsAttr::get(scalar, b.getF32FloatAttr(1)));
    Value current = nn::AddOp::create(b, loc, step, one);
    int64_t node = 0;
    for (Operation *op : dropouts) {
      Value x = op->getOperand(0);
      auto ratio = op->getAttrOfType<FloatAttr>("ratio");
      double r = ratio ? ratio.getValueAsDouble() : 0.5;
      int64_t number = node++;
      if (r == 0.0) {
        op->getResult(0).replaceAllUsesWith(x);
        op->erase();
        continue;
      }
      OpBuilder here(op);
      auto keyed = nn::KeyedDropoutOp::create(
          here, op->getLoc(), x.getType(), x, current, here.getF32FloatAttr(float(r)),
          here.getI64IntegerAttr(seed), here.getI64IntegerAttr(number), DenseI64ArrayAttr(),
          DenseI64ArrayAttr());
      op->getResult(0).replaceAllUsesWith(keyed.getResult());
      op->erase();
    }
  }
};

} // namespace
