//===- NNOps.cpp - nn op type inference, verifiers and folders -------------===//
//
// Result types follow ONNX's shape inference, written once per op in
// inferReturnTypes; the InferTypeOpInterface verifier then checks every op
// against it, so a wrong result type and a malformed op are reported by the
// same code. Folders cover what exporters' shape arithmetic needs
// (Shape -> Gather -> Concat -> Reshape and friends) on small constants.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/NN/IR/Evaluate.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/APSInt.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace shardflow::nn;

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

int64_t shardflow::nn::getElementStorageBytes(Type type) {
  if (type.isInteger(1))
    return 1; // ONNX stores bool as one byte.
  return (type.getIntOrFloatBitWidth() + 7) / 8;
}

std::optional<int64_t> shardflow::nn::getTensorStorageBytes(ShapedType type) {
  if (!type.hasStaticShape() || !type.getElementType().isIntOrFloat())
    return std::nullopt;
  return type.getNumElements() * getElementStorageBytes(type.getElementType());
}

//===----------------------------------------------------------------------===//
// Helpers for inference
//===----------------------------------------------------------------------===//

namespace {
// Emits "'nn.x' op <message>" at the location, when there is one.
struct InferError {
  std::optional<Location> loc;
  StringRef opName;
  template <typename... Args> LogicalResult operator()(Args &&...args) const {
    return emitOptionalError(loc, "'", opName, "' op ",
                             std::forward<Args>(args)...);
  }
};
} // namespace

static RankedTensorType rankedType(Value v) {
  return v ? dyn_cast<RankedTensorType>(v.getType()) : RankedTensorType();
}

static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? "," : "") + std::to_string(d);
  return s + "]";
}

/// Normalizes an axis in [-rank, rank) to [0, rank).
static std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

static LogicalResult checkAxis(const InferError &err, int64_t axis,
                               int64_t rank, StringRef what, int64_t &out) {
  auto n = normalizeAxis(axis, rank);
  if (!n)
    return err(what, " ", axis, " is out of range for rank ", rank);
  out = *n;
  return success();
}

static LogicalResult broadcast(const InferError &err, ArrayRef<int64_t> a,
                               ArrayRef<int64_t> b,
                               SmallVectorImpl<int64_t> &out) {
  out.clear();
  if (!OpTrait::util::getBroadcastedShape(a, b, out))
    return err("operand shapes ", shapeStr(a), " and ", shapeStr(b),
               " are not broadcast-compatible");
  return success();
}

/// True if `from` broadcasts to `to` without changing `to` (ONNX's
/// unidirectional broadcasting).
static bool broadcastsTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1)
      return false;
  }
  return true;
}

template <typename Adaptor>
static LogicalResult inferBinary(const InferError &err, Adaptor adaptor,
                                 SmallVectorImpl<Type> &types,
                                 Type resultElement, bool sameElements) {
  auto lhs = rankedType(adaptor.getLhs()), rhs = rankedType(adaptor.getRhs());
  if (!lhs || !rhs)
    return err("operands must be ranked tensors");
  if (sameElements && lhs.getElementType() != rhs.getElementType())
    return err("operand element types differ: ", lhs.getElementType(), " vs ",
               rhs.getElementType());
  SmallVector<int64_t> shape;
  if (failed(broadcast(err, lhs.getShape(), rhs.getShape(), shape)))
    return failure();
  types.push_back(RankedTensorType::get(
      shape, resultElement ? resultElement : lhs.getElementType()));
  return success();
}

#define NN_INFER(OP)                                                           \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *context, std::optional<Location> location, Adaptor adaptor, \
      SmallVectorImpl<Type> &types)

#define NN_ERR InferError err{location, getOperationName()};

#define NN_BINARY(OP)                                                          \
  NN_INFER(OP) {                                                               \
    NN_ERR;                                                                    \
    return inferBinary(err, adaptor, types, Type(), true);                     \
  }
NN_BINARY(AddOp)
NN_BINARY(SubOp)
NN_BINARY(MulOp)
NN_BINARY(DivOp)
NN_BINARY(MinOp)
NN_BINARY(MaxOp)
#undef NN_BINARY

NN_INFER(ModOp) {
  NN_ERR;
  auto lhs = rankedType(adaptor.getLhs());
  if (lhs && isa<FloatType>(lhs.getElementType()) && !adaptor.getFmod())
    return err("a float remainder needs fmod (the sign of the dividend)");
  if (lhs && lhs.getElementType().isInteger(1))
    return err("operands must be numbers, not booleans");
  return inferBinary(err, adaptor, types, Type(), true);
}

NN_INFER(PowOp) {
  NN_ERR;
  return inferBinary(err, adaptor, types, Type(), false);
}

#define NN_COMPARE(OP)                                                         \
  NN_INFER(OP) {                                                               \
    NN_ERR;                                                                    \
    return inferBinary(err, adaptor, types, IntegerType::get(context, 1),      \
                       true);                                                  \
  }
NN_COMPARE(EqualOp)
NN_COMPARE(LessOp)
NN_COMPARE(GreaterOp)
NN_COMPARE(AndOp)
#undef NN_COMPARE

NN_INFER(WhereOp) {
  NN_ERR;
  auto c = rankedType(adaptor.getCondition()), x = rankedType(adaptor.getX()),
       y = rankedType(adaptor.getY());
  if (!c || !x || !y)
    return err("operands must be ranked tensors");
  if (x.getElementType() != y.getElementType())
    return err("x and y element types differ: ", x.getElementType(), " vs ",
               y.getElementType());
  SmallVector<int64_t> s1, s2;
  if (failed(broadcast(err, c.getShape(), x.getShape(), s1)) ||
      failed(broadcast(err, s1, y.getShape(), s2)))
    return failure();
  types.push_back(RankedTensorType::get(s2, x.getElementType()));
  return success();
}

// Unary elementwise ops: the result has the operand's type.
#define NN_UNARY(OP)                                                           \
  NN_INFER(OP) {                                                               \
    types.push_back(adaptor.getInput().getType());                             \
    return success();                                                          \
  }
NN_UNARY(SqrtOp)
NN_UNARY(ExpOp)
NN_UNARY(LogOp)
NN_UNARY(TanhOp)
NN_UNARY(SigmoidOp)
NN_UNARY(ErfOp)
NN_UNARY(CosOp)
NN_UNARY(SinOp)
NN_UNARY(FloorOp)
NN_UNARY(CeilOp)
NN_UNARY(RoundOp)
NN_UNARY(ReciprocalOp)
NN_UNARY(ReluOp)
NN_UNARY(NegOp)
NN_UNARY(AbsOp)
NN_UNARY(NotOp)
NN_UNARY(IdentityOp)
NN_UNARY(LeakyReluOp)
NN_UNARY(GeluOp)
NN_UNARY(DropoutOp)
#undef NN_UNARY

// min > max is allowed: ONNX clamps to max then (min(max(x, lo), hi)).
NN_INFER(ClipOp) {
  types.push_back(adaptor.getInput().getType());
  return success();
}

NN_INFER(TrainingDropoutOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  double ratio = adaptor.getRatio().convertToDouble();
  if (!(ratio >= 0.0 && ratio < 1.0))
    return err("ratio ", ratio, " is outside [0, 1)");
  types.push_back(x);
  types.push_back(RankedTensorType::get(x.getShape(), IntegerType::get(context, 1)));
  return success();
}

NN_INFER(AdamWUpdateOp) {
  NN_ERR;
  auto param = rankedType(adaptor.getParam());
  if (!param || !param.getElementType().isF32())
    return err("param must be an f32 tensor");
  for (auto [name, v] : {std::pair<const char *, Value>("grad", adaptor.getGrad()),
                         {"exp_avg", adaptor.getExpAvg()},
                         {"exp_avg_sq", adaptor.getExpAvgSq()}})
    if (v.getType() != param)
      return err(name, " must have the param's type ", param, ", got ", v.getType());
  for (auto [name, v] : {std::pair<const char *, Value>("lr", adaptor.getLr()),
                         {"step", adaptor.getStep()},
                         {"grad_scale", adaptor.getGradScale()}}) {
    auto t = rankedType(v);
    if (!t || t.getRank() != 0 || !t.getElementType().isF32())
      return err(name, " must be an f32 scalar, got ", v.getType());
  }
  auto finite = rankedType(adaptor.getFinite());
  if (!finite || finite.getRank() != 0)
    return err("finite must be an i1 scalar");
  types.append(3, param);
  return success();
}

NN_INFER(GeluGradOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x || adaptor.getResultGrad().getType() != x)
    return err("input and result_grad must be tensors of one type");
  StringRef approximate = adaptor.getApproximate();
  if (approximate != "none" && approximate != "tanh")
    return err("approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  types.push_back(x);
  return success();
}

NN_INFER(KeyedDropoutOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput()), step = rankedType(adaptor.getStep());
  if (!x)
    return err("input must be a ranked tensor");
  if (!step || step.getNumElements() != 1 || !step.getElementType().isF32())
    return err("step must be an f32 scalar");
  double ratio = adaptor.getRatio().convertToDouble();
  if (!(ratio >= 0.0 && ratio < 1.0))
    return err("ratio ", ratio, " is outside [0, 1)");
  if (auto global = adaptor.getGlobalShapeAttr()) {
    if (int64_t(global.size()) != x.getRank())
      return err("global_shape must have the input's rank");
    if (auto starts = adaptor.getStartsAttr()) {
      int64_t rank = x.getRank();
      if (rank == 0 || starts.size() % rank)
        return err("starts must hold one start per dim for each rank");
      for (int64_t i = 0; i < int64_t(starts.size()); ++i)
        if (starts[i] < 0 || starts[i] + x.getDimSize(i % rank) > global[i % rank])
          return err("a rank's block reaches past global_shape");
    }
  } else if (adaptor.getStartsAttr()) {
    return err("starts needs global_shape");
  }
  types.push_back(x);
  return success();
}

NN_INFER(CastOp) {
  NN_ERR;
  auto in = rankedType(adaptor.getInput());
  Type to = adaptor.getTo();
  if (!in)
    return err("operand must be a ranked tensor");
  if (!to || !to.isIntOrFloat())
    return err("target type ", to, " is not an integer or float type");
  types.push_back(RankedTensorType::get(in.getShape(), to));
  return success();
}

/// Runs an op's own type inference, reporting why it fails.
template <typename OpTy> static LogicalResult verifyByInference(OpTy op) {
  SmallVector<Type> types;
  if (failed(OpTy::inferReturnTypes(op->getContext(), op->getLoc(),
                                    op->getOperands(), op->getAttrDictionary(),
                                    op->getPropertiesStorage(),
                                    op->getRegions(), types)))
    return failure();
  for (auto [i, inferred, actual] :
       llvm::enumerate(types, op->getResultTypes()))
    if (inferred != actual)
      return op->emitOpError("result #")
             << i << " has type " << actual << " but the operands give "
             << inferred;
  return success();
}

#define NN_VERIFY_BY_INFERENCE(OP)                                             \
  LogicalResult OP::verify() { return verifyByInference(*this); }
NN_VERIFY_BY_INFERENCE(AddOp)
NN_VERIFY_BY_INFERENCE(SubOp)
NN_VERIFY_BY_INFERENCE(MulOp)
NN_VERIFY_BY_INFERENCE(DivOp)
NN_VERIFY_BY_INFERENCE(PowOp)
NN_VERIFY_BY_INFERENCE(MinOp)
NN_VERIFY_BY_INFERENCE(MaxOp)
NN_VERIFY_BY_INFERENCE(ModOp)
NN_VERIFY_BY_INFERENCE(EqualOp)
NN_VERIFY_BY_INFERENCE(LessOp)
NN_VERIFY_BY_INFERENCE(GreaterOp)
NN_VERIFY_BY_INFERENCE(AndOp)
NN_VERIFY_BY_INFERENCE(WhereOp)
NN_VERIFY_BY_INFERENCE(SqrtOp)
NN_VERIFY_BY_INFERENCE(ExpOp)
NN_VERIFY_BY_INFERENCE(LogOp)
NN_VERIFY_BY_INFERENCE(TanhOp)
NN_VERIFY_BY_INFERENCE(SigmoidOp)
NN_VERIFY_BY_INFERENCE(ErfOp)
NN_VERIFY_BY_INFERENCE(CosOp)
NN_VERIFY_BY_INFERENCE(SinOp)
NN_VERIFY_BY_INFERENCE(FloorOp)
NN_VERIFY_BY_INFERENCE(CeilOp)
NN_VERIFY_BY_INFERENCE(RoundOp)
NN_VERIFY_BY_INFERENCE(ReciprocalOp)
NN_VERIFY_BY_INFERENCE(ReluOp)
NN_VERIFY_BY_INFERENCE(NegOp)
NN_VERIFY_BY_INFERENCE(AbsOp)
NN_VERIFY_BY_INFERENCE(NotOp)
NN_VERIFY_BY_INFERENCE(IdentityOp)
NN_VERIFY_BY_INFERENCE(LeakyReluOp)
NN_VERIFY_BY_INFERENCE(ClipOp)
NN_VERIFY_BY_INFERENCE(DropoutOp)
NN_VERIFY_BY_INFERENCE(CastOp)
NN_VERIFY_BY_INFERENCE(AdamWUpdateOp)
NN_VERIFY_BY_INFERENCE(GeluGradOp)
NN_VERIFY_BY_INFERENCE(KeyedDropoutOp)
NN_VERIFY_BY_INFERENCE(SoftmaxOp)
NN_VERIFY_BY_INFERENCE(LogSoftmaxOp)
NN_VERIFY_BY_INFERENCE(SoftmaxCrossEntropyOp)
NN_VERIFY_BY_INFERENCE(SoftmaxCrossEntropyGradOp)
NN_VERIFY_BY_INFERENCE(BatchNormalizationOp)
NN_VERIFY_BY_INFERENCE(LayerNormalizationOp)
NN_VERIFY_BY_INFERENCE(RMSNormalizationOp)
NN_VERIFY_BY_INFERENCE(NormalizationGradOp)
NN_VERIFY_BY_INFERENCE(NormalizationScaleGradOp)
NN_VERIFY_BY_INFERENCE(MatMulOp)
NN_VERIFY_BY_INFERENCE(GemmOp)
NN_VERIFY_BY_INFERENCE(EinsumOp)
NN_VERIFY_BY_INFERENCE(ConvOp)
NN_VERIFY_BY_INFERENCE(AttentionOp)
NN_VERIFY_BY_INFERENCE(AttentionGradOp)
NN_VERIFY_BY_INFERENCE(RotaryEmbeddingOp)
NN_VERIFY_BY_INFERENCE(RotateHalfOp)
NN_VERIFY_BY_INFERENCE(MaxPoolOp)
NN_VERIFY_BY_INFERENCE(MaxPoolWithIndicesOp)
NN_VERIFY_BY_INFERENCE(TrainingDropoutOp)
NN_VERIFY_BY_INFERENCE(AveragePoolOp)
NN_VERIFY_BY_INFERENCE(GlobalAveragePoolOp)
NN_VERIFY_BY_INFERENCE(ReduceMeanOp)
NN_VERIFY_BY_INFERENCE(ReduceSumOp)
NN_VERIFY_BY_INFERENCE(ReduceMaxOp)
NN_VERIFY_BY_INFERENCE(ReduceMinOp)
NN_VERIFY_BY_INFERENCE(ReduceProdOp)
NN_VERIFY_BY_INFERENCE(ArgMaxOp)
NN_VERIFY_BY_INFERENCE(ArgMinOp)
NN_VERIFY_BY_INFERENCE(CumSumOp)
NN_VERIFY_BY_INFERENCE(TopKOp)
NN_VERIFY_BY_INFERENCE(TransposeOp)
NN_VERIFY_BY_INFERENCE(FlattenOp)
NN_VERIFY_BY_INFERENCE(SqueezeOp)
NN_VERIFY_BY_INFERENCE(UnsqueezeOp)
NN_VERIFY_BY_INFERENCE(ConcatOp)
NN_VERIFY_BY_INFERENCE(SplitOp)
NN_VERIFY_BY_INFERENCE(SliceOp)
NN_VERIFY_BY_INFERENCE(PadOp)
NN_VERIFY_BY_INFERENCE(GatherOp)
NN_VERIFY_BY_INFERENCE(GatherElementsOp)
NN_VERIFY_BY_INFERENCE(ScatterNDOp)
NN_VERIFY_BY_INFERENCE(TriluOp)
NN_VERIFY_BY_INFERENCE(ShapeOp)
#undef NN_VERIFY_BY_INFERENCE

LogicalResult GeluOp::verify() {
  if (failed(verifyByInference(*this)))
    return failure();
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

//===----------------------------------------------------------------------===//
// Softmax and normalizations
//===----------------------------------------------------------------------===//

template <typename Adaptor>
static LogicalResult inferSoftmax(const InferError &err, Adaptor adaptor,
                                  SmallVectorImpl<Type> &types) {
  auto in = rankedType(adaptor.getInput());
  int64_t axis;
  if (!in || failed(checkAxis(err, static_cast<int64_t>(adaptor.getAxis()),
                              std::max<int64_t>(in.getRank(), 1), "axis",
                              axis)))
    return failure();
  types.push_back(in);
  return success();
}
NN_INFER(SoftmaxOp) {
  NN_ERR;
  return inferSoftmax(err, adaptor, types);
}
NN_INFER(LogSoftmaxOp) {
  NN_ERR;
  return inferSoftmax(err, adaptor, types);
}

/// The operands softmax_cross_entropy and its gradient share: logits
/// [..., C], lse [..., 1] of their type, classes [C]; `rows` is [...].
static LogicalResult checkCrossEntropyOperands(const InferError &err, Value logitsValue, Value lse,
                                               Value classes, SmallVectorImpl<int64_t> &rows) {
  auto logits = rankedType(logitsValue);
  if (!logits || logits.getRank() < 1)
    return err("logits must have rank >= 1");
  rows.assign(logits.getShape().begin(), logits.getShape().end() - 1);
  SmallVector<int64_t> column(rows.begin(), rows.end());
  column.push_back(1);
  auto lseType = rankedType(lse);
  if (!lseType || lseType.getShape() != ArrayRef<int64_t>(column) ||
      lseType.getElementType() != logits.getElementType())
    return err("lse must be ", RankedTensorType::get(column, logits.getElementType()), ", got ",
               lse.getType());
  auto classType = rankedType(classes);
  if (!classType || classType.getShape() != ArrayRef<int64_t>{logits.getShape().back()})
    return err("classes must be tensor<", logits.getShape().back(), "xi64>, got ",
               classes.getType());
  return success();
}

NN_INFER(SoftmaxCrossEntropyOp) {
  NN_ERR;
  SmallVector<int64_t> rows;
  if (failed(checkCrossEntropyOperands(err, adaptor.getLogits(), adaptor.getLse(),
                                       adaptor.getClasses(), rows)))
    return failure();
  auto labels = rankedType(adaptor.getLabels());
  if (!labels || labels.getShape() != ArrayRef<int64_t>(rows))
    return err("labels must have shape ", shapeStr(rows), ", got ", adaptor.getLabels().getType());
  types.push_back(RankedTensorType::get(rows, rankedType(adaptor.getLogits()).getElementType()));
  return success();
}

NN_INFER(SoftmaxCrossEntropyGradOp) {
  NN_ERR;
  SmallVector<int64_t> rows;
  if (failed(checkCrossEntropyOperands(err, adaptor.getLogits(), adaptor.getLse(),
                                       adaptor.getClasses(), rows)))
    return failure();
  rows.push_back(1);
  auto labels = rankedType(adaptor.getLabels());
  if (!labels || labels.getShape() != ArrayRef<int64_t>(rows))
    return err("labels must have shape ", shapeStr(rows), ", got ", adaptor.getLabels().getType());
  if (adaptor.getResultGrad().getType() != adaptor.getLse().getType())
    return err("result_grad must have lse's type, got ", adaptor.getResultGrad().getType());
  types.push_back(adaptor.getLogits().getType());
  return success();
}

NN_INFER(BatchNormalizationOp) {
  NN_ERR;
  auto in = rankedType(adaptor.getInput());
  if (!in || in.getRank() < 2)
    return err("input must have rank >= 2 ([N, C, ...])");
  int64_t channels = in.getDimSize(1);
  for (auto [name, v] :
       {std::pair<StringRef, Value>{"scale", adaptor.getScale()},
        {"bias", adaptor.getBias()},
        {"mean", adaptor.getMean()},
        {"variance", adaptor.getVariance()}}) {
    auto t = rankedType(v);
    if (!t || t.getRank() != 1 || t.getDimSize(0) != channels)
      return err(name, " must have shape [", channels, "] (the channel count)");
  }
  types.push_back(in);
  return success();
}

/// Normalizations over [axis, rank) whose parameters broadcast to that shape.
static LogicalResult inferNormalization(const InferError &err, Value input,
                                        int64_t axisAttr,
                                        ArrayRef<std::pair<StringRef, Value>> params,
                                        SmallVectorImpl<Type> &types) {
  auto in = rankedType(input);
  if (!in || in.getRank() < 1)
    return err("input must have rank >= 1");
  int64_t axis;
  if (failed(checkAxis(err, axisAttr, in.getRank(), "axis", axis)))
    return failure();
  ArrayRef<int64_t> normalized = in.getShape().drop_front(axis);
  for (auto [name, v] : params) {
    if (!v)
      continue;
    auto t = rankedType(v);
    if (!t || !broadcastsTo(t.getShape(), normalized))
      return err(name, " shape ", shapeStr(t ? t.getShape() : ArrayRef<int64_t>{}),
                 " does not broadcast to the normalized shape ",
                 shapeStr(normalized));
    if (t.getElementType() != in.getElementType())
      return err(name, " element type ", t.getElementType(),
                 " differs from the input's ", in.getElementType());
  }
  types.push_back(in);
  return success();
}

NN_INFER(LayerNormalizationOp) {
  NN_ERR;
  return inferNormalization(
      err, adaptor.getInput(), static_cast<int64_t>(adaptor.getAxis()),
      {{"scale", adaptor.getScale()}, {"bias", adaptor.getBias()}}, types);
}

NN_INFER(RMSNormalizationOp) {
  NN_ERR;
  return inferNormalization(err, adaptor.getInput(),
                            static_cast<int64_t>(adaptor.getAxis()),
                            {{"scale", adaptor.getScale()}}, types);
}

NN_INFER(NormalizationGradOp) {
  NN_ERR;
  if (adaptor.getResultGrad().getType() != adaptor.getInput().getType())
    return err("result_grad must have the input's type");
  return inferNormalization(err, adaptor.getInput(), static_cast<int64_t>(adaptor.getAxis()),
                            {{"scale", adaptor.getScale()}}, types);
}

NN_INFER(NormalizationScaleGradOp) {
  NN_ERR;
  if (adaptor.getResultGrad().getType() != adaptor.getInput().getType())
    return err("result_grad must have the input's type");
  if (failed(inferNormalization(err, adaptor.getInput(), static_cast<int64_t>(adaptor.getAxis()),
                                {}, types)))
    return failure();
  auto in = cast<RankedTensorType>(types.pop_back_val());
  int64_t axis = static_cast<int64_t>(adaptor.getAxis());
  if (axis < 0)
    axis += in.getRank();
  types.push_back(RankedTensorType::get(in.getShape().drop_front(axis), in.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

NN_INFER(MatMulOp) {
  NN_ERR;
  auto lhs = rankedType(adaptor.getLhs()), rhs = rankedType(adaptor.getRhs());
  if (!lhs || !rhs || lhs.getRank() < 1 || rhs.getRank() < 1)
    return err("operands must have rank >= 1");
  if (lhs.getElementType() != rhs.getElementType())
    return err("operand element types differ: ", lhs.getElementType(), " vs ",
               rhs.getElementType());
  SmallVector<int64_t> a(lhs.getShape()), b(rhs.getShape());
  bool lhsVector = a.size() == 1, rhsVector = b.size() == 1;
  if (lhsVector)
    a.insert(a.begin(), 1);
  if (rhsVector)
    b.push_back(1);
  int64_t m = a[a.size() - 2], k = a.back(), k2 = b[b.size() - 2], n = b.back();
  if (k != k2)
    return err("contraction dimensions differ: lhs ", shapeStr(lhs.getShape()),
               " has ", k, ", rhs ", shapeStr(rhs.getShape()), " has ", k2);
  SmallVector<int64_t> batch;
  if (failed(broadcast(err, ArrayRef<int64_t>(a).drop_back(2),
                       ArrayRef<int64_t>(b).drop_back(2), batch)))
    return failure();
  if (!lhsVector)
    batch.push_back(m);
  if (!rhsVector)
    batch.push_back(n);
  types.push_back(RankedTensorType::get(batch, lhs.getElementType()));
  return success();
}

NN_INFER(GemmOp) {
  NN_ERR;
  auto a = rankedType(adaptor.getA()), b = rankedType(adaptor.getB());
  if (!a || !b || a.getRank() != 2 || b.getRank() != 2)
    return err("A and B must be 2-D");
  if (a.getElementType() != b.getElementType())
    return err("A and B element types differ");
  int64_t m = a.getDimSize(adaptor.getTransA() ? 1 : 0),
          k = a.getDimSize(adaptor.getTransA() ? 0 : 1),
          k2 = b.getDimSize(adaptor.getTransB() ? 1 : 0),
          n = b.getDimSize(adaptor.getTransB() ? 0 : 1);
  if (k != k2)
    return err("contraction dimensions differ: A gives ", k, ", B gives ", k2);
  if (auto c = rankedType(adaptor.getC())) {
    if (!broadcastsTo(c.getShape(), {m, n}))
      return err("C shape ", shapeStr(c.getShape()), " does not broadcast to [",
                 m, ",", n, "]");
    if (c.getElementType() != a.getElementType())
      return err("C element type differs from A's");
  }
  types.push_back(RankedTensorType::get({m, n}, a.getElementType()));
  return success();
}

FailureOr<EinsumEquation> shardflow::nn::parseEinsumEquation(StringRef eq,
                                                             size_t numInputs,
                                                             std::string &why) {
  EinsumEquation result;
  std::string s;
  for (char c : eq)
    if (c != ' ')
      s.push_back(c);
  StringRef text(s);
  auto [lhs, rhs] = text.split("->");
  bool explicitOutput = text.contains("->");
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  if (terms.size() != numInputs) {
    why = "equation has " + std::to_string(terms.size()) + " input terms for " +
          std::to_string(numInputs) + " inputs";
    return failure();
  }
  // Ellipsis is encoded as '.' in the per-term label lists.
  auto parseTerm = [&](StringRef term, std::string &labels) -> bool {
    size_t dots = term.find("...");
    if (dots != StringRef::npos) {
      if (term.substr(dots + 3).contains('.'))
        return false;
      labels = (term.substr(0, dots) + "." + term.substr(dots + 3)).str();
    } else if (term.contains('.')) {
      return false; // A '.' outside "..." is no label.
    } else {
      labels = term.str();
    }
    for (char c : labels)
      if (c != '.' && !llvm::isAlpha(c))
        return false;
    return llvm::count(labels, '.') <= 1;
  };
  for (StringRef term : terms) {
    std::string labels;
    if (!parseTerm(term, labels)) {
      why = "malformed term '" + term.str() + "'";
      return failure();
    }
    result.inputs.push_back(labels);
  }
  if (explicitOutput) {
    if (!parseTerm(rhs, result.output)) {
      why = "malformed output term '" + rhs.str() + "'";
      return failure();
    }
  } else {
    // Implicit output: ellipsis first, then labels used once, alphabetically.
    std::map<char, int> counts;
    bool anyEllipsis = false;
    for (auto &in : result.inputs)
      for (char c : in)
        c == '.' ? (void)(anyEllipsis = true) : (void)++counts[c];
    if (anyEllipsis)
      result.output.push_back('.');
    for (auto [c, n] : counts)
      if (n == 1)
        result.output.push_back(c);
  }
  return result;
}

NN_INFER(EinsumOp) {
  NN_ERR;
  std::string why;
  auto eq = parseEinsumEquation(adaptor.getEquation(), adaptor.getInputs().size(),
                                why);
  if (failed(eq))
    return err("invalid equation '", adaptor.getEquation(), "': ", why);
  std::map<char, int64_t> sizes;
  SmallVector<int64_t> ellipsis;
  Type element;
  for (auto [labels, v] : llvm::zip(eq->inputs, adaptor.getInputs())) {
    auto t = rankedType(v);
    if (!t)
      return err("operands must be ranked tensors");
    if (element && t.getElementType() != element)
      return err("operand element types differ");
    element = t.getElementType();
    int64_t named = labels.size() - llvm::count(labels, '.');
    bool hasEllipsis = labels.find('.') != std::string::npos;
    if ((!hasEllipsis && t.getRank() != named) ||
        (hasEllipsis && t.getRank() < named))
      return err("term '", labels, "' does not match operand rank ",
                 t.getRank());
    int64_t ellipsisRank = t.getRank() - named, dim = 0;
    for (char c : labels) {
      if (c == '.') {
        SmallVector<int64_t> merged;
        auto part = t.getShape().slice(dim, ellipsisRank);
        if (failed(broadcast(err, ellipsis, part, merged)))
          return failure();
        ellipsis = merged;
        dim += ellipsisRank;
        continue;
      }
      int64_t size = t.getDimSize(dim++);
      auto [it, inserted] = sizes.try_emplace(c, size);
      if (!inserted && it->second != size)
        return err("label '", std::string(1, c), "' has sizes ", it->second,
                   " and ", size);
    }
  }
  SmallVector<int64_t> shape;
  for (char c : eq->output) {
    if (c == '.') {
      shape.append(ellipsis.begin(), ellipsis.end());
      continue;
    }
    auto it = sizes.find(c);
    if (it == sizes.end())
      return err("output label '", std::string(1, c),
                 "' does not appear in any input");
    shape.push_back(it->second);
  }
  types.push_back(RankedTensorType::get(shape, element));
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// Output size of a sliding window, as ONNX (and PyTorch) define it.
static int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                                int64_t padBegin, int64_t padEnd,
                                int64_t dilation, bool ceilMode) {
  int64_t span = dilation * (kernel - 1) + 1;
  // May be negative: with ceil_mode a window wider than the (padded) input
  // still yields one output as long as it starts inside the input.
  int64_t numer = in + padBegin + padEnd - span;
  int64_t out = (ceilMode ? llvm::divideCeilSigned(numer, stride)
                          : llvm::divideFloorSigned(numer, stride)) +
                1;
  // With ceil_mode the last window must start inside the input or left pad.
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

static LogicalResult checkWindowAttrs(const InferError &err, int64_t spatial,
                                      ArrayRef<int64_t> strides,
                                      ArrayRef<int64_t> pads,
                                      ArrayRef<int64_t> dilations) {
  if (spatial < 1 || spatial > 3)
    return err("only 1-D, 2-D and 3-D windows are supported, got ", spatial,
               " spatial dimensions");
  if ((int64_t)strides.size() != spatial || (int64_t)dilations.size() != spatial ||
      (int64_t)pads.size() != 2 * spatial)
    return err("strides and dilations need ", spatial, " entries and pads ",
               2 * spatial);
  // Bounded so that window arithmetic cannot overflow on hostile input.
  constexpr int64_t kLimit = int64_t(1) << 31;
  for (int64_t s : strides)
    if (s < 1 || s > kLimit)
      return err("strides must be in [1, 2^31]");
  for (int64_t d : dilations)
    if (d < 1 || d > kLimit)
      return err("dilations must be in [1, 2^31]");
  for (int64_t p : pads)
    if (p < 0 || p > kLimit)
      return err("pads must be in [0, 2^31]");
  return success();
}

NN_INFER(ConvOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput()), w = rankedType(adaptor.getWeight());
  if (!x || !w || x.getRank() < 3 || w.getRank() != x.getRank())
    return err("input and weight must have the same rank >= 3");
  int64_t spatial = x.getRank() - 2;
  auto strides = adaptor.getStrides(), pads = adaptor.getPads(),
       dilations = adaptor.getDilations();
  if (failed(checkWindowAttrs(err, spatial, strides, pads, dilations)))
    return failure();
  int64_t group = static_cast<int64_t>(adaptor.getGroup());
  int64_t c = x.getDimSize(1), m = w.getDimSize(0);
  if (group < 1 || c % group || m % group)
    return err("group ", group, " must divide the input channels ", c,
               " and the output channels ", m);
  if (w.getDimSize(1) * group != c)
    return err("weight has ", w.getDimSize(1), " channels per group, input has ",
               c, " channels in ", group, " groups");
  if (auto b = rankedType(adaptor.getBias()))
    if (b.getRank() != 1 || b.getDimSize(0) != m)
      return err("bias must have shape [", m, "]");
  SmallVector<int64_t> shape{x.getDimSize(0), m};
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t o = windowOutputSize(x.getDimSize(2 + i), w.getDimSize(2 + i),
                                 strides[i], pads[i], pads[spatial + i],
                                 dilations[i], false);
    if (o < 1)
      return err("the kernel does not fit spatial dimension ", i);
    shape.push_back(o);
  }
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

template <typename Adaptor>
static LogicalResult inferPool(const InferError &err, Adaptor adaptor,
                               SmallVectorImpl<Type> &types) {
  auto x = rankedType(adaptor.getInput());
  if (!x || x.getRank() < 3)
    return err("input must have rank >= 3 ([N, C, spatial...])");
  int64_t spatial = x.getRank() - 2;
  auto kernel = adaptor.getKernelShape();
  if ((int64_t)kernel.size() != spatial)
    return err("kernel_shape needs ", spatial, " entries");
  if (failed(checkWindowAttrs(err, spatial, adaptor.getStrides(),
                              adaptor.getPads(), adaptor.getDilations())))
    return failure();
  SmallVector<int64_t> shape{x.getDimSize(0), x.getDimSize(1)};
  for (int64_t i = 0; i < spatial; ++i) {
    if (kernel[i] < 1 || kernel[i] > (int64_t(1) << 31))
      return err("kernel_shape entries must be in [1, 2^31]");
    int64_t o = windowOutputSize(x.getDimSize(2 + i), kernel[i],
                                 adaptor.getStrides()[i], adaptor.getPads()[i],
                                 adaptor.getPads()[spatial + i],
                                 adaptor.getDilations()[i], adaptor.getCeilMode());
    if (o < 1)
      return err("the window does not fit spatial dimension ", i);
    shape.push_back(o);
  }
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}
NN_INFER(MaxPoolOp) {
  NN_ERR;
  return inferPool(err, adaptor, types);
}
NN_INFER(MaxPoolWithIndicesOp) {
  NN_ERR;
  if (adaptor.getStorageOrder() != 0 && adaptor.getStorageOrder() != 1)
    return err("storage_order must be 0 or 1");
  if (failed(inferPool(err, adaptor, types)))
    return failure();
  types.push_back(RankedTensorType::get(
      cast<RankedTensorType>(types.front()).getShape(), IntegerType::get(context, 64)));
  return success();
}
NN_INFER(AveragePoolOp) {
  NN_ERR;
  return inferPool(err, adaptor, types);
}

NN_INFER(GlobalAveragePoolOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x || x.getRank() < 3)
    return err("input must have rank >= 3 ([N, C, spatial...])");
  SmallVector<int64_t> shape(x.getShape().take_front(2));
  shape.append(x.getRank() - 2, 1);
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Attention and rotary embedding
//===----------------------------------------------------------------------===//

/// nn.attention's result type, from its operands and attributes (or
/// nn.attention_grad's, which has them too).
template <typename AdaptorT>
static LogicalResult inferAttention(InferError &err, AdaptorT adaptor,
                                    SmallVectorImpl<Type> &types) {
  auto q = rankedType(adaptor.getQuery()), k = rankedType(adaptor.getKey()),
       v = rankedType(adaptor.getValue());
  if (!q || !k || !v)
    return err("query, key and value must be ranked tensors");
  if (q.getRank() != k.getRank() || q.getRank() != v.getRank() ||
      (q.getRank() != 3 && q.getRank() != 4))
    return err("query, key and value must all be 3-D or all 4-D");
  if (k.getElementType() != q.getElementType() ||
      v.getElementType() != q.getElementType())
    return err("query, key and value element types differ");
  int64_t batch = q.getDimSize(0), hq, hkv, sq, skv, d, dk, dv;
  int64_t qHeadsAttr = static_cast<int64_t>(adaptor.getQNumHeads());
  int64_t kvHeadsAttr = static_cast<int64_t>(adaptor.getKvNumHeads());
  if (q.getRank() == 3) {
    if (qHeadsAttr <= 0 || kvHeadsAttr <= 0)
      return err("3-D inputs need q_num_heads and kv_num_heads");
    hq = qHeadsAttr;
    hkv = kvHeadsAttr;
    if (q.getDimSize(2) % hq || k.getDimSize(2) % hkv || v.getDimSize(2) % hkv)
      return err("hidden sizes must divide by the head counts");
    sq = q.getDimSize(1);
    skv = k.getDimSize(1);
    d = q.getDimSize(2) / hq;
    dk = k.getDimSize(2) / hkv;
    dv = v.getDimSize(2) / hkv;
    if (v.getDimSize(1) != skv)
      return err("key and value sequence lengths differ");
  } else {
    hq = q.getDimSize(1);
    hkv = k.getDimSize(1);
    sq = q.getDimSize(2);
    skv = k.getDimSize(2);
    d = q.getDimSize(3);
    dk = k.getDimSize(3);
    dv = v.getDimSize(3);
    if (v.getDimSize(1) != hkv || v.getDimSize(2) != skv)
      return err("key and value must agree on heads and sequence length");
    if ((qHeadsAttr && qHeadsAttr != hq) || (kvHeadsAttr && kvHeadsAttr != hkv))
      return err("q_num_heads/kv_num_heads disagree with the 4-D shapes");
  }
  if (k.getDimSize(0) != batch || v.getDimSize(0) != batch)
    return err("batch sizes differ");
  if (d != dk)
    return err("query head size ", d, " differs from key head size ", dk);
  if (hkv < 1 || hq % hkv)
    return err("query heads ", hq, " must be a multiple of key/value heads ",
               hkv);
  if (adaptor.getSoftcap().convertToDouble() < 0)
    return err("softcap must be non-negative");
  if (auto mask = rankedType(adaptor.getMask())) {
    Type me = mask.getElementType();
    if (!me.isInteger(1) && me != q.getElementType())
      return err("mask must be i1 or have the query's element type");
    if (!broadcastsTo(mask.getShape(), {batch, hq, sq, skv}))
      return err("mask shape ", shapeStr(mask.getShape()),
                 " does not broadcast to [batch, q_heads, q_seq, kv_seq] = ",
                 shapeStr({batch, hq, sq, skv}));
  } else if (adaptor.getMask()) {
    return err("mask must be a ranked tensor");
  }
  SmallVector<int64_t> shape =
      q.getRank() == 3 ? SmallVector<int64_t>{batch, sq, hq * dv}
                       : SmallVector<int64_t>{batch, hq, sq, dv};
  types.push_back(RankedTensorType::get(shape, q.getElementType()));
  // The log-sum-exp of each query row: f64 for f64, else f32.
  Type lseElement = q.getElementType().isF64() ? q.getElementType()
                                               : Float32Type::get(q.getContext());
  types.push_back(RankedTensorType::get({batch, hq, sq}, lseElement));
  return success();
}

NN_INFER(AttentionOp) {
  NN_ERR;
  if (failed(inferAttention(err, adaptor, types)))
    return failure();
  // Read as an attribute: a builder that sets properties from a dictionary
  // leaves the default unset.
  BoolAttr save = adaptor.getSaveLseAttr();
  if (!save || !save.getValue())
    types.pop_back();
  return success();
}

NN_INFER(AttentionGradOp) {
  NN_ERR;
  SmallVector<Type> forward;
  if (failed(inferAttention(err, adaptor, forward)))
    return failure();
  if (adaptor.getResultGrad().getType() != forward.front())
    return err("result_grad must have the attention's result type ", forward.front(), ", got ",
               adaptor.getResultGrad().getType());
  if (adaptor.getLse().getType() != forward.back())
    return err("lse must have the attention's log-sum-exp type ", forward.back(), ", got ",
               adaptor.getLse().getType());
  types.push_back(adaptor.getQuery().getType());
  types.push_back(adaptor.getKey().getType());
  types.push_back(adaptor.getValue().getType());
  return success();
}

NN_INFER(RotaryEmbeddingOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  auto cosT = rankedType(adaptor.getCosCache()),
       sinT = rankedType(adaptor.getSinCache());
  if (!x || !cosT || !sinT)
    return err("operands must be ranked tensors");
  int64_t heads = static_cast<int64_t>(adaptor.getNumHeads());
  if (x.getRank() != 3 && x.getRank() != 4)
    return err("input must be 3-D or 4-D");
  int64_t batch = x.getDimSize(0), seq, headSize;
  if (x.getRank() == 4) {
    seq = x.getDimSize(2);
    headSize = x.getDimSize(3);
    if (heads && heads != x.getDimSize(1))
      return err("num_heads ", heads, " differs from the input's ",
                 x.getDimSize(1));
  } else if (x.getRank() == 3) {
    if (heads <= 0 || x.getDimSize(2) % heads)
      return err("3-D input needs num_heads dividing the hidden size");
    seq = x.getDimSize(1);
    headSize = x.getDimSize(2) / heads;
  } else {
    return err("input must be 3-D or 4-D");
  }
  int64_t rot = static_cast<int64_t>(adaptor.getRotaryEmbeddingDim());
  if (rot == 0)
    rot = headSize;
  if (rot < 0 || rot > headSize || rot % 2)
    return err("rotary_embedding_dim ", rot,
               " must be even and at most the head size ", headSize);
  if (cosT.getShape() != sinT.getShape())
    return err("cos_cache and sin_cache shapes differ");
  if (cosT.getElementType() != x.getElementType() ||
      sinT.getElementType() != x.getElementType())
    return err("cache element types differ from the input's");
  if (auto pos = rankedType(adaptor.getPositionIds())) {
    if (pos.getShape() != ArrayRef<int64_t>{batch, seq})
      return err("position_ids must have shape [batch, seq] = ",
                 shapeStr({batch, seq}));
    if (cosT.getRank() != 2 || cosT.getDimSize(1) != rot / 2)
      return err("with position_ids the caches must be [max_position, ",
                 rot / 2, "]");
  } else if (cosT.getShape() != ArrayRef<int64_t>{batch, seq, rot / 2}) {
    return err("without position_ids the caches must be [batch, seq, ",
               rot / 2, "] = ", shapeStr({batch, seq, rot / 2}));
  }
  types.push_back(x);
  return success();
}

NN_INFER(RotateHalfOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x || x.getRank() < 1)
    return err("input must be a ranked tensor of rank 1 or more");
  int64_t last = x.getShape().back();
  if (ShapedType::isDynamic(last))
    return err("the last dimension must be static");
  if (last % 2)
    return err("the last dimension must be even (two halves), not ", last);
  types.push_back(x);
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions, scans, top-k
//===----------------------------------------------------------------------===//

template <typename Adaptor>
static LogicalResult inferReduce(const InferError &err, Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  llvm::SmallSet<int64_t, 4> axes;
  for (int64_t a : adaptor.getAxes()) {
    int64_t n;
    if (failed(checkAxis(err, a, x.getRank(), "axis", n)))
      return failure();
    if (!axes.insert(n).second)
      return err("axis ", a, " is repeated");
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < x.getRank(); ++i) {
    if (!axes.contains(i))
      shape.push_back(x.getDimSize(i));
    else if (adaptor.getKeepdims())
      shape.push_back(1);
  }
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}
NN_INFER(ReduceMeanOp) {
  NN_ERR;
  return inferReduce(err, adaptor, types);
}
NN_INFER(ReduceSumOp) {
  NN_ERR;
  return inferReduce(err, adaptor, types);
}
NN_INFER(ReduceMaxOp) {
  NN_ERR;
  return inferReduce(err, adaptor, types);
}
NN_INFER(ReduceMinOp) {
  NN_ERR;
  return inferReduce(err, adaptor, types);
}
NN_INFER(ReduceProdOp) {
  NN_ERR;
  return inferReduce(err, adaptor, types);
}

template <typename Adaptor>
static LogicalResult inferArgReduce(const InferError &err, Adaptor adaptor, MLIRContext *context,
                                    SmallVectorImpl<Type> &types) {
  auto x = rankedType(adaptor.getInput());
  int64_t axis;
  if (!x || failed(checkAxis(err, static_cast<int64_t>(adaptor.getAxis()), x.getRank(), "axis",
                             axis)))
    return failure();
  if (axis != static_cast<int64_t>(adaptor.getAxis()))
    return err("axis ", static_cast<int64_t>(adaptor.getAxis()), " must be non-negative");
  if (x.getDimSize(axis) == 0)
    return err("the axis is empty: there is no index to return");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < x.getRank(); ++i)
    if (i != axis)
      shape.push_back(x.getDimSize(i));
    else if (adaptor.getKeepdims())
      shape.push_back(1);
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}
NN_INFER(ArgMaxOp) {
  NN_ERR;
  return inferArgReduce(err, adaptor, context, types);
}
NN_INFER(ArgMinOp) {
  NN_ERR;
  return inferArgReduce(err, adaptor, context, types);
}

NN_INFER(CumSumOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  int64_t axis;
  if (!x || failed(checkAxis(err, static_cast<int64_t>(adaptor.getAxis()),
                             x.getRank(), "axis", axis)))
    return failure();
  types.push_back(x);
  return success();
}

NN_INFER(TopKOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  int64_t axis;
  if (!x || failed(checkAxis(err, static_cast<int64_t>(adaptor.getAxis()),
                             x.getRank(), "axis", axis)))
    return failure();
  int64_t k = static_cast<int64_t>(adaptor.getK());
  if (k < 0 || k > x.getDimSize(axis))
    return err("k ", k, " is outside [0, ", x.getDimSize(axis), "]");
  SmallVector<int64_t> shape(x.getShape());
  shape[axis] = k;
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type changes from ")
           << in.getElementType() << " to " << out.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("cannot reshape ")
           << shapeStr(in.getShape()) << " (" << in.getNumElements()
           << " elements) to " << shapeStr(out.getShape()) << " ("
           << out.getNumElements() << " elements)";
  return success();
}

NN_INFER(TransposeOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  auto perm = adaptor.getPerm();
  if ((int64_t)perm.size() != x.getRank())
    return err("perm has ", perm.size(), " entries for rank ", x.getRank());
  SmallVector<bool> seen(perm.size());
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.getRank() || seen[p])
      return err("perm ", shapeStr(perm), " is not a permutation");
    seen[p] = true;
    shape.push_back(x.getDimSize(p));
  }
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

NN_INFER(FlattenOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  int64_t axis = static_cast<int64_t>(adaptor.getAxis());
  if (axis < -x.getRank() || axis > x.getRank())
    return err("axis ", axis, " is out of range for rank ", x.getRank());
  if (axis < 0)
    axis += x.getRank();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.getRank(); ++i)
    (i < axis ? outer : inner) *= x.getDimSize(i);
  types.push_back(RankedTensorType::get({outer, inner}, x.getElementType()));
  return success();
}

NN_INFER(SqueezeOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  llvm::SmallSet<int64_t, 4> axes;
  for (int64_t a : adaptor.getAxes()) {
    int64_t n;
    if (failed(checkAxis(err, a, x.getRank(), "axis", n)))
      return failure();
    if (x.getDimSize(n) != 1)
      return err("cannot squeeze axis ", a, " of size ", x.getDimSize(n));
    if (!axes.insert(n).second)
      return err("axis ", a, " is repeated");
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < x.getRank(); ++i)
    if (!axes.contains(i))
      shape.push_back(x.getDimSize(i));
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

NN_INFER(UnsqueezeOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  int64_t rank = x.getRank() + adaptor.getAxes().size();
  llvm::SmallSet<int64_t, 4> axes;
  for (int64_t a : adaptor.getAxes()) {
    int64_t n;
    if (failed(checkAxis(err, a, rank, "axis", n)))
      return failure();
    if (!axes.insert(n).second)
      return err("axis ", a, " is repeated");
  }
  SmallVector<int64_t> shape;
  int64_t next = 0;
  for (int64_t i = 0; i < rank; ++i)
    shape.push_back(axes.contains(i) ? 1 : x.getDimSize(next++));
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

NN_INFER(ConcatOp) {
  NN_ERR;
  auto inputs = adaptor.getInputs();
  if (inputs.empty())
    return err("needs at least one input");
  auto first = rankedType(inputs[0]);
  int64_t axis;
  if (!first || failed(checkAxis(err, static_cast<int64_t>(adaptor.getAxis()),
                                 first.getRank(), "axis", axis)))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  for (Value v : inputs.drop_front()) {
    auto t = rankedType(v);
    if (!t || t.getRank() != first.getRank() ||
        t.getElementType() != first.getElementType())
      return err("inputs must share rank and element type");
    for (int64_t i = 0; i < t.getRank(); ++i) {
      if (i == axis)
        shape[i] += t.getDimSize(i);
      else if (t.getDimSize(i) != shape[i])
        return err("input shapes ", shapeStr(first.getShape()), " and ",
                   shapeStr(t.getShape()), " differ outside axis ", axis);
    }
  }
  types.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

NN_INFER(SplitOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  int64_t axis;
  if (!x || failed(checkAxis(err, static_cast<int64_t>(adaptor.getAxis()),
                             x.getRank(), "axis", axis)))
    return failure();
  int64_t total = 0;
  for (int64_t s : adaptor.getSizes()) {
    if (s < 0)
      return err("split sizes must be non-negative");
    total += s;
  }
  if (adaptor.getSizes().empty() || total != x.getDimSize(axis))
    return err("split sizes ", shapeStr(adaptor.getSizes()), " do not add up to ",
               x.getDimSize(axis), " (axis ", axis, ")");
  for (int64_t s : adaptor.getSizes()) {
    SmallVector<int64_t> shape(x.getShape());
    shape[axis] = s;
    types.push_back(RankedTensorType::get(shape, x.getElementType()));
  }
  return success();
}

/// ONNX Slice on one dimension: the clamped start and the element count.
/// Negative bounds count from the end; then, for a positive step, start and
/// end clamp to [0, dim]; for a negative step, start clamps to [0, dim - 1]
/// and end to [-1, dim - 1] (-1 meaning "through element 0").
static std::pair<int64_t, int64_t> sliceRange(int64_t dim, int64_t start,
                                              int64_t end, int64_t step) {
  if (dim == 0)
    return {0, 0};
  // Adding dim to INT64_MIN-like sentinels cannot overflow: dim >= 0.
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  int64_t s, e, count;
  if (step > 0) {
    s = std::clamp<int64_t>(start, 0, dim);
    e = std::clamp<int64_t>(end, 0, dim);
    count = e > s ? (e - s - 1) / step + 1 : 0;
  } else {
    s = std::clamp<int64_t>(start, 0, dim - 1);
    e = std::clamp<int64_t>(end, -1, dim - 1);
    // Unsigned magnitude: -step overflows for INT64_MIN.
    uint64_t magnitude = 0 - static_cast<uint64_t>(step);
    count = s > e ? int64_t(uint64_t(s - e - 1) / magnitude) + 1 : 0;
  }
  return {s, count};
}

NN_INFER(SliceOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  auto starts = adaptor.getStarts(), ends = adaptor.getEnds(),
       axes = adaptor.getAxes(), steps = adaptor.getSteps();
  if (starts.size() != ends.size() || starts.size() != axes.size() ||
      starts.size() != steps.size())
    return err("starts, ends, axes and steps must have the same length");
  SmallVector<int64_t> shape(x.getShape());
  llvm::SmallSet<int64_t, 4> seen;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis;
    if (failed(checkAxis(err, axes[i], x.getRank(), "axis", axis)))
      return failure();
    if (!seen.insert(axis).second)
      return err("axis ", axes[i], " is repeated");
    if (steps[i] == 0)
      return err("steps must be non-zero");
    shape[axis] = sliceRange(x.getDimSize(axis), starts[i], ends[i], steps[i]).second;
  }
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

NN_INFER(PadOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  auto pads = adaptor.getPads();
  if ((int64_t)pads.size() != 2 * x.getRank())
    return err("pads needs ", 2 * x.getRank(), " entries, got ", pads.size());
  StringRef mode = adaptor.getMode();
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return err("mode must be constant, reflect, edge or wrap, got '", mode, "'");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < x.getRank(); ++i) {
    int64_t d = x.getDimSize(i) + pads[i] + pads[i + x.getRank()];
    if (d < 0)
      return err("pads make dimension ", i, " negative");
    if (mode == "reflect" &&
        (pads[i] >= x.getDimSize(i) || pads[i + x.getRank()] >= x.getDimSize(i)))
      return err("reflect pads must be smaller than dimension ", i);
    shape.push_back(d);
  }
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

NN_INFER(GatherOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput()), idx = rankedType(adaptor.getIndices());
  int64_t axis;
  if (!x || !idx)
    return err("operands must be ranked tensors");
  if (x.getRank() < 1)
    return err("input must have rank >= 1");
  if (failed(checkAxis(err, static_cast<int64_t>(adaptor.getAxis()),
                       x.getRank(), "axis", axis)))
    return failure();
  // A block of a split axis: `axis_size` global rows, this rank's block at
  // one of `axis_starts`.
  auto globalSize = adaptor.getAxisSize();
  auto starts = adaptor.getAxisStarts();
  if (starts && !globalSize)
    return err("axis_starts needs axis_size");
  if (globalSize) {
    int64_t local = x.getDimSize(axis), global = static_cast<int64_t>(*globalSize);
    if (global < 1)
      return err("axis_size must be positive, got ", global);
    if (!starts && global > local)
      return err("axis_size ", global, " exceeds the input's ", local, " rows");
    if (starts && starts->empty())
      return err("axis_starts needs one start per rank");
    // A block may reach past the indexed rows (zero padding), not start
    // past them.
    for (int64_t s : starts.value_or(ArrayRef<int64_t>()))
      if (s < 0 || s >= global)
        return err("axis start ", s, " lies outside the ", global, " indexed rows");
  }
  SmallVector<int64_t> shape(x.getShape().take_front(axis));
  shape.append(idx.getShape().begin(), idx.getShape().end());
  shape.append(x.getShape().begin() + axis + 1, x.getShape().end());
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

NN_INFER(GatherElementsOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput()), idx = rankedType(adaptor.getIndices());
  int64_t axis;
  if (!x || !idx || failed(checkAxis(err, static_cast<int64_t>(adaptor.getAxis()),
                                     x.getRank(), "axis", axis)))
    return failure();
  if (idx.getRank() != x.getRank())
    return err("indices rank ", idx.getRank(), " differs from input rank ",
               x.getRank());
  for (int64_t i = 0; i < x.getRank(); ++i)
    if (i != axis && idx.getDimSize(i) > x.getDimSize(i))
      return err("indices dimension ", i, " exceeds the input's");
  types.push_back(RankedTensorType::get(idx.getShape(), x.getElementType()));
  return success();
}

NN_INFER(ScatterNDOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput()), idx = rankedType(adaptor.getIndices()),
       upd = rankedType(adaptor.getUpdates());
  if (!x || !idx || !upd || idx.getRank() < 1)
    return err("operands must be ranked, indices of rank >= 1");
  StringRef red = adaptor.getReduction();
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    return err("reduction must be none, add, mul, max or min, got '", red, "'");
  int64_t q = idx.getDimSize(idx.getRank() - 1);
  if (q < 1 || q > x.getRank())
    return err("indices' last dimension ", q, " must be in [1, ", x.getRank(), "]");
  SmallVector<int64_t> expected(idx.getShape().drop_back());
  expected.append(x.getShape().begin() + q, x.getShape().end());
  if (upd.getShape() != ArrayRef<int64_t>(expected))
    return err("updates shape ", shapeStr(upd.getShape()), " must be ",
               shapeStr(expected));
  if (upd.getElementType() != x.getElementType())
    return err("updates element type differs from the input's");
  types.push_back(x);
  return success();
}

LogicalResult ExpandOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type changes from ")
           << in.getElementType() << " to " << out.getElementType();
  if (!broadcastsTo(in.getShape(), out.getShape()))
    return emitOpError("input shape ")
           << shapeStr(in.getShape()) << " does not broadcast to "
           << shapeStr(out.getShape());
  return success();
}

NN_INFER(TriluOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x || x.getRank() < 2)
    return err("input must have rank >= 2");
  types.push_back(x);
  return success();
}

LogicalResult RangeOp::verify() {
  double start = getStart().convertToDouble(), limit = getLimit().convertToDouble(),
         delta = getDelta().convertToDouble();
  if (delta == 0 || !std::isfinite(delta) || !std::isfinite(start) ||
      !std::isfinite(limit))
    return emitOpError("start, limit and delta must be finite and delta non-zero");
  // Clamp in double: casting an out-of-range double to int64_t is undefined.
  double steps = std::max(std::ceil((limit - start) / delta), 0.0);
  if (!(steps < 0x1p62))
    return emitOpError("range of ") << steps << " elements is absurdly long";
  int64_t count = static_cast<int64_t>(steps);
  auto type = getResult().getType();
  if (type.getRank() != 1 || type.getDimSize(0) != count)
    return emitOpError("result must be 1-D with ") << count << " elements";
  return success();
}

NN_INFER(ShapeOp) {
  NN_ERR;
  auto x = rankedType(adaptor.getInput());
  if (!x)
    return err("input must be a ranked tensor");
  int64_t rank = x.getRank();
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
  int64_t start = clamp(static_cast<int64_t>(adaptor.getStart()));
  int64_t end = adaptor.getEnd() ? clamp(static_cast<int64_t>(*adaptor.getEnd())) : rank;
  types.push_back(RankedTensorType::get({std::max<int64_t>(end - start, 0)},
                                        IntegerType::get(context, 64)));
  return success();
}

LogicalResult ConstantOfShapeOp::verify() {
  if (getValue().getType() != getResult().getType().getElementType())
    return emitOpError("value type ")
           << getValue().getType() << " differs from the result element type "
           << getResult().getType().getElementType();
  return success();
}

LogicalResult WeightOp::verify() {
  StringRef storage = getStorage();
  if (storage != "external" && storage != "embedded" && storage != "protobuf" &&
      storage != "zeros")
    return emitOpError("storage must be external, embedded, protobuf or zeros, got '")
           << storage << "'";
  if (getName().empty())
    return emitOpError("needs a non-empty name");
  if (storage != "protobuf" && storage != "zeros" && (!getFile() || !getOffset()))
    return emitOpError("storage '") << storage << "' needs a file and an offset";
  if (getOffset() && static_cast<int64_t>(*getOffset()) < 0)
    return emitOpError("offset must be non-negative");
  auto type = cast<RankedTensorType>(getResult().getType());
  if (getGlobalShape().has_value() != getStarts().has_value())
    return emitOpError("global_shape and starts go together");
  auto stored = getStoredShapeAttr();
  if (stored && stored.size() != type.getRank())
    return emitOpError("stored_shape has rank ")
           << stored.size() << " but the weight has rank " << type.getRank();
  if (auto global = getGlobalShapeAttr()) {
    if (global.size() != type.getRank())
      return emitOpError("global_shape has rank ")
             << global.size() << " but the slice has rank " << type.getRank();
    if (stored && global.asArrayRef() != stored.asArrayRef())
      return emitOpError("a zero-padded weight's global_shape must be its stored_shape");
    for (auto [r, start] : llvm::enumerate(getStartsAttr().getAsRange<DenseI64ArrayAttr>())) {
      if (start.size() != type.getRank())
        return emitOpError("starts of rank ") << r << " has the wrong length";
      // A zero-padded weight's slice may reach past the stored tensor.
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (start[d] < 0 ||
            (stored ? start[d] > global[d] : start[d] + type.getDimSize(d) > global[d]))
          return emitOpError("the slice of rank ")
                 << r << " leaves the weight in dimension " << d;
    }
    type = RankedTensorType::get(global.asArrayRef(), type.getElementType());
  } else if (stored) {
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (stored[d] < 0 || stored[d] > type.getDimSize(d))
        return emitOpError("stored_shape [")
               << llvm::make_range(stored.asArrayRef().begin(), stored.asArrayRef().end())
               << "] does not fit in " << getResult().getType();
    type = RankedTensorType::get(stored.asArrayRef(), type.getElementType());
  }
  auto bytes = getTensorStorageBytes(type);
  if (!bytes)
    return emitOpError("weights must have an integer or float element type");
  if (getSize() && static_cast<int64_t>(*getSize()) != *bytes) {
    if (stored && !getGlobalShapeAttr())
      return emitOpError("size ") << *getSize() << " bytes does not match the " << *bytes
                                  << " bytes of its stored shape [" << stored.asArrayRef()
                                  << "]";
    return emitOpError("size ") << *getSize() << " bytes does not match the "
                                << *bytes << " bytes of " << getResult().getType();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Folders
//===----------------------------------------------------------------------===//
//
// Only what needs no op semantics: identities, values known from types or
// attributes, and views of constants. Everything else an op computes from
// constants is folded by the constant evaluator (Evaluate.h), which runs
// the CPU kernel, through the dialect's fold interface.

static DenseElementsAttr denseOf(Attribute a) {
  auto d = dyn_cast_or_null<DenseElementsAttr>(a);
  if (!d || d.getNumElements() * getElementStorageBytes(d.getElementType()) >
                kMaxFoldedBytes)
    return {};
  return d;
}

OpFoldResult IdentityOp::fold(FoldAdaptor) { return getInput(); }

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType().getElementType() == getTo())
    return getInput();
  return {};
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult ShapeOp::fold(FoldAdaptor) {
  auto in = getInput().getType().getShape();
  int64_t rank = in.size();
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
  int64_t start = clamp(getStart());
  int64_t end = getEnd() ? clamp(*getEnd()) : rank;
  SmallVector<int64_t> dims(in.begin() + start,
                            in.begin() + std::max(start, end));
  return DenseElementsAttr::get(getType(), ArrayRef<int64_t>(dims));
}

OpFoldResult ConstantOfShapeOp::fold(FoldAdaptor) {
  return DenseElementsAttr::get(getType(), getValue());
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto in = denseOf(adaptor.getInput()))
    return in.reshape(getType());
  return {};
}
OpFoldResult SqueezeOp::fold(FoldAdaptor adaptor) {
  if (auto in = denseOf(adaptor.getInput()))
    return in.reshape(getType());
  return {};
}
OpFoldResult UnsqueezeOp::fold(FoldAdaptor adaptor) {
  if (auto in = denseOf(adaptor.getInput()))
    return in.reshape(getType());
  return {};
}

#define GET_OP_CLASSES
#include "shardflow/Dialect/NN/IR/NNOps.cpp.inc"
