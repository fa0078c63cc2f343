//===- NNToRT.cpp - bufferize nn programs into rt kernel calls -------------===//
//
// The nn program is value-semantic and static-shaped, so bufferization is a
// straight walk: every tensor becomes a memref of the same shape, every
// result gets a fresh buffer (rt.alloc) that the op's kernel writes, and
// shape-only ops become views of their operand's buffer. Where each buffer
// lives in memory is decided later by rt-plan-memory.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Conversion/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace shardflow {
#define GEN_PASS_DEF_CONVERTNNTORT
#include "shardflow/Conversion/Passes.h.inc"
} // namespace shardflow

using namespace mlir;
using namespace shardflow;

namespace {

MemRefType toBuffer(Type t) {
  auto tensor = cast<RankedTensorType>(t);
  return MemRefType::get(tensor.getShape(), tensor.getElementType());
}

/// Ops whose result is the operand's bytes under another static shape.
bool isView(Operation *op) {
  return isa<nn::ReshapeOp, nn::FlattenOp, nn::SqueezeOp, nn::UnsqueezeOp,
             nn::IdentityOp, nn::DropoutOp>(op);
}

/// A function that is already an rt program (buffers in, no nn ops), as
/// hand-written rt tests are: nothing to convert.
bool isRTFunction(func::FuncOp fn) {
  auto isBuffer = [](Type t) { return isa<MemRefType>(t); };
  if (!llvm::all_of(fn.getArgumentTypes(), isBuffer) ||
      !llvm::all_of(fn.getResultTypes(), isBuffer))
    return false;
  auto *nnDialect = fn->getContext()->getLoadedDialect<nn::NNDialect>();
  bool hasNN = false;
  fn.walk([&](Operation *op) { hasNN |= op->getDialect() == nnDialect; });
  return !hasNN;
}

LogicalResult convertFunction(func::FuncOp fn) {
  if (isRTFunction(fn))
    return success();
  OpBuilder b(fn);
  SmallVector<Type> args, results;
  for (Type t : fn.getArgumentTypes())
    args.push_back(toBuffer(t));
  for (Type t : fn.getResultTypes())
    results.push_back(toBuffer(t));
  auto newFn = func::FuncOp::create(b, fn.getLoc(), fn.getName(),
                                    b.getFunctionType(args, results));
  newFn->setAttrs(fn->getAttrs());
  newFn.setFunctionType(b.getFunctionType(args, results));
  Block *entry = newFn.addEntryBlock();
  IRMapping map;
  for (auto [from, to] : llvm::zip(fn.getArguments(), entry->getArguments()))
    map.map(from, to);
  b.setInsertionPointToEnd(entry);

  for (Operation &op : fn.getBody().front()) {
    Location loc = op.getLoc();
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      SmallVector<Value> vals;
      for (Value v : ret.getOperands())
        vals.push_back(map.lookup(v));
      func::ReturnOp::create(b, loc, vals);
      continue;
    }
    if (auto w = dyn_cast<nn::WeightOp>(op)) {
      auto nw = rt::WeightOp::create(b, loc, toBuffer(w.getType()),
                                     w.getNameAttr(), w.getStorageAttr(),
                                     w.getFileAttr(), w.getOffsetAttr(),
                                     w.getSizeAttr(), DenseI64ArrayAttr(),
                                     ArrayAttr());
      map.map(w.getResult(), nw.getResult());
      continue;
    }
    if (auto c = dyn_cast<nn::ConstantOp>(op)) {
      auto nc = rt::ConstantOp::create(b, loc, toBuffer(c.getType()),
                                       c.getValue());
      map.map(c.getResult(), nc.getResult());
      continue;
    }
    if (op.getDialect() != op.getContext()->getLoadedDialect<nn::NNDialect>())
      return op.emitOpError("cannot be converted to rt");
    if (isView(&op)) {
      auto view = rt::ViewOp::create(b, loc, toBuffer(op.getResult(0).getType()),
                                     map.lookup(op.getOperand(0)));
      map.map(op.getResult(0), view.getResult());
      continue;
    }
    SmallVector<Value> ins, outs;
    for (Value v : op.getOperands())
      ins.push_back(map.lookup(v));
    for (Value r : op.getResults()) {
      auto alloc = rt::AllocOp::create(b, loc, toBuffer(r.getType()),
                                       IntegerAttr());
      outs.push_back(alloc);
      map.map(r, alloc);
    }
    // The kernel's parameters are the op's attributes, as the nn op had them.
    rt::KernelOp::create(b, loc,
                         b.getStringAttr(op.getName().stripDialect()), ins,
                         outs, op.getAttrDictionary());
  }
  fn.erase();
  return success();
}

struct ConvertNNToRTPass
    : public shardflow::impl::ConvertNNToRTBase<ConvertNNToRTPass> {
  void runOnOperation() override {
    SmallVector<func::FuncOp> fns(getOperation().getOps<func::FuncOp>());
    for (func::FuncOp fn : fns)
      if (failed(convertFunction(fn)))
        return signalPassFailure();
  }
};

} // namespace
