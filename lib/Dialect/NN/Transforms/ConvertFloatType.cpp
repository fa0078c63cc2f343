//===- ConvertFloatType.cpp - compute an f32 program in bf16 or f16 -------===//
//
// Mixed precision: the program's tensors are stored and moved in a 16-bit
// float type, halving weight memory, activation memory and collective
// traffic, while the kernels accumulate in f32 (matmul, softmax, norms and
// reductions run through f32 in the runtime). The program's interface does
// not change: f32 inputs are cast down at entry and f32 results cast back up
// before they are returned, so the artifact's inputs and outputs keep their
// types. With keep-output-types=false, the results of a function nothing
// calls are returned in the low type instead (half the output memory).
//
// Weights keep their f32 type and get an nn.cast to the low type right
// after them. Nothing reads the f32 weight but that cast, which
// convert-nn-to-rt folds into the rt.weight (the runtime converts the f32
// file bytes once at load). A sharded program converts the same way: the
// cast follows the sliced weight, so the weight table still describes f32
// bytes in the file.
//
// Every other op is rebuilt in place, in program order, so that its
// operands already have their new types: ops that infer their result
// types infer them again; ops whose result type is given (reshape, expand,
// range, constant_of_shape, the dist collectives) get the low type where
// they had f32.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"

namespace shardflow::nn {
#define GEN_PASS_DEF_NNCONVERTFLOATTYPE
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

/// `t` with f32 replaced by `low`, for tensors of f32.
Type lower(Type t, Type low) {
  if (auto tensor = dyn_cast<RankedTensorType>(t);
      tensor && tensor.getElementType().isF32())
    return tensor.clone(low);
  return t;
}

bool isF32Tensor(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  return tensor && tensor.getElementType().isF32();
}

/// `x` rounded (to nearest even) to `semantics`; a finite value beyond its
/// range becomes its largest finite value of that sign, not an infinity.
/// Exporters fill masks with f32's lowest value (PyTorch's
/// finfo(float32).min), finite by intent: a row whose every key is masked
/// then attends uniformly, as it does in f32 (and as PyTorch's bf16 model,
/// filled with finfo(bfloat16).min, does), rather than becoming zeros.
APFloat roundToLow(const APFloat &x, const llvm::fltSemantics &semantics) {
  APFloat y = x;
  bool lost;
  y.convert(semantics, APFloat::rmNearestTiesToEven, &lost);
  if (y.isInfinity() && x.isFinite())
    return APFloat::getLargest(semantics, x.isNegative());
  return y;
}

/// An f32 constant's elements rounded (to nearest even) to `low`.
DenseElementsAttr lowerConstant(DenseElementsAttr value, FloatType low) {
  auto tensor = cast<ShapedType>(value.getType()).clone(low);
  const llvm::fltSemantics &semantics = low.getFloatSemantics();
  auto round = [&](const APFloat &x) { return roundToLow(x, semantics); };
  if (value.isSplat())
    return DenseElementsAttr::get(tensor,
                                  round(value.getSplatValue<APFloat>()));
  SmallVector<APFloat> values;
  values.reserve(value.getNumElements());
  for (APFloat x : value.getValues<APFloat>())
    values.push_back(round(x));
  return DenseElementsAttr::get(tensor, values);
}

/// `replacement` takes the place of `value` everywhere but in `except`.
void replaceUsesExcept(Value value, Value replacement, Operation *except) {
  value.replaceUsesWithIf(
      replacement, [&](OpOperand &use) { return use.getOwner() != except; });
}

/// `lowOutputs`: f32 results are returned in the low type (the function's
/// result types change) instead of being cast back to f32.
LogicalResult convertFunction(func::FuncOp fn, FloatType low, bool lowOutputs) {
  if (fn.isExternal())
    return success();
  if (!fn.getBody().hasOneBlock())
    return fn.emitOpError(
        "nn-convert-float-type expects a single-block function");
  Block &body = fn.getBody().front();
  OpBuilder b(fn.getContext());
  TypeAttr lowAttr = TypeAttr::get(low);

  // Inputs: cast down at entry.
  b.setInsertionPointToStart(&body);
  for (BlockArgument arg : body.getArguments()) {
    if (!isF32Tensor(arg.getType()) || arg.use_empty())
      continue;
    auto cast = nn::CastOp::create(b, arg.getLoc(), arg, lowAttr);
    replaceUsesExcept(arg, cast.getResult(), cast);
  }

  SmallVector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
  for (Operation *op : ops) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (lowOutputs) {
        fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(),
                                     ret->getOperandTypes()));
        continue;
      }
      // Results: cast back to the declared f32 before they are returned.
      b.setInsertionPoint(ret);
      for (OpOperand &operand : ret->getOpOperands()) {
        Type declared = fn.getResultTypes()[operand.getOperandNumber()];
        if (operand.get().getType() != declared && isF32Tensor(declared))
          operand.set(nn::CastOp::create(b, ret.getLoc(), operand.get(),
                                         TypeAttr::get(b.getF32Type())));
      }
      continue;
    }
    if (auto weight = dyn_cast<nn::WeightOp>(op)) {
      // The weight stays what its file holds; a cast follows it.
      if (!isF32Tensor(weight.getType()) || weight->use_empty())
        continue;
      b.setInsertionPointAfter(weight);
      auto cast =
          nn::CastOp::create(b, weight.getLoc(), weight.getResult(), lowAttr);
      replaceUsesExcept(weight.getResult(), cast.getResult(), cast);
      continue;
    }
    if (auto c = dyn_cast<nn::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      if (!dense || !isF32Tensor(c.getType()))
        continue; // other element types stay as they are
      DenseElementsAttr value = lowerConstant(dense, low);
      c.setValueAttr(value);
      c.getResult().setType(cast<RankedTensorType>(value.getType()));
      continue;
    }
    if (auto fill = dyn_cast<nn::ConstantOfShapeOp>(op)) {
      auto value = dyn_cast<FloatAttr>(fill.getValue());
      if (!value || !value.getType().isF32())
        continue;
      APFloat x = roundToLow(value.getValue(), low.getFloatSemantics());
      fill.setValueAttr(FloatAttr::get(low, x));
      fill.getResult().setType(
          cast<RankedTensorType>(lower(fill.getType(), low)));
      continue;
    }
    if (auto c = dyn_cast<nn::CastOp>(op)) {
      if (c.getTo().isF32())
        c.setToAttr(lowAttr);
    }
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      SmallVector<Type> types;
      if (failed(infer.inferReturnTypes(
              op->getContext(), op->getLoc(), op->getOperands(),
              op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
              op->getRegions(), types)))
        return op->emitOpError("has no result types in ")
               << low << " (nn-convert-float-type)";
      for (auto [result, type] : llvm::zip(op->getResults(), types))
        result.setType(type);
    } else {
      for (Value result : op->getResults())
        result.setType(lower(result.getType(), low));
    }
    // A cast that now converts nothing goes away.
    if (auto c = dyn_cast<nn::CastOp>(op);
        c && c.getInput().getType() == c.getResult().getType()) {
      c.getResult().replaceAllUsesWith(c.getInput());
      c.erase();
    }
  }
  return success();
}

struct NNConvertFloatTypePass
    : public nn::impl::NNConvertFloatTypeBase<NNConvertFloatTypePass> {
  using NNConvertFloatTypeBase::NNConvertFloatTypeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(module.getContext());
    FloatType low;
    if (type == "bf16")
      low = b.getBF16Type();
    else if (type == "f16")
      low = b.getF16Type();
    if (!low) {
      module.emitError("nn-convert-float-type: type must be bf16 or f16, got '")
          << type << "'";
      return signalPassFailure();
    }
    for (auto fn : llvm::to_vector(module.getOps<func::FuncOp>())) {
      // A function that something calls keeps its results' types.
      bool lowOutputs =
          !keepOutputTypes && SymbolTable::symbolKnownUseEmpty(fn, module);
      if (failed(convertFunction(fn, low, lowOutputs)))
        return signalPassFailure();
    }
  }
};

} // namespace
