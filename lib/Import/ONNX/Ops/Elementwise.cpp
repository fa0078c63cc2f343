//===- Elementwise.cpp - elementwise ONNX ops -----------------------------===//
//
// Elementwise ops with attributes (LeakyRelu, Gelu, Clip, Dropout, Cast),
// and the comparisons, tests, logic and activations written with existing
// nn ops (LessOrEqual, GreaterOrEqual, IsNaN, IsInf, Or, Xor, CastLike,
// Size, Sign, Softplus, Elu, Selu, HardSigmoid, HardSwish, Mish, PRelu);
// the plain unary and binary ones use the templates of GraphImporter.h.
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"

#include "llvm/Support/FormatVariadic.h"

#include <limits>

namespace shardflow::onnx_import {

LogicalResult GraphImporter::importLeakyRelu() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  float alpha = attrFloat("alpha", 0.01f);
  if (!x || attrFailed)
    return failure();
  return emit<nn::LeakyReluOp>({x}, {named("alpha", b.getF32FloatAttr(alpha))});
}

LogicalResult GraphImporter::importGelu() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  std::string approx = attrString("approximate", "none");
  if (!x || attrFailed)
    return failure();
  return emit<nn::GeluOp>({x}, {named("approximate", b.getStringAttr(approx))});
}

LogicalResult GraphImporter::importClip() {
  if (failed(requireInputs(1, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  SmallVector<NamedAttribute> attrs;
  for (auto [i, name] : {std::pair<int, StringRef>{1, "min"}, {2, "max"}}) {
    if (!hasInput(i))
      continue;
    auto v = constScalar(i, name);
    if (failed(v))
      return failure();
    attrs.push_back(named(name, b.getF64FloatAttr(*v)));
  }
  return emit<nn::ClipOp>({x}, attrs);
}

LogicalResult GraphImporter::importDropout() {
  if (failed(requireInputs(1, 3)) || failed(allowOutputs(2)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  bool training = false;
  if (hasInput(2)) {
    auto t = constScalar(2, "training_mode");
    if (failed(t))
      return failure();
    training = *t != 0;
  }
  // Inference ignores the ratio, so it need not be a constant then.
  double ratio = 0.5;
  if (hasInput(1)) {
    Value r = input(1);
    if (!r)
      return failure();
    DenseElementsAttr value;
    if (training || matchPattern(r, m_Constant(&value))) {
      auto c = constScalar(1, "ratio");
      if (failed(c))
        return failure();
      ratio = *c;
    }
  }
  // Without a seed ONNX leaves the generator's seed open; 0 is as good as
  // any and keeps runs reproducible.
  int64_t seed = attrInt("seed", 0);
  if (attrFailed)
    return failure();
  bool wantMask = node->output_size() > 1 && !node->output(1).empty();
  if (training && ratio != 0.0) {
    if (!(ratio > 0.0 && ratio < 1.0))
      return fail("ratio " + std::to_string(ratio) + " is outside [0, 1)");
    return emit<nn::TrainingDropoutOp>(
        {x}, {named("ratio", b.getF32FloatAttr(float(ratio))),
              named("seed", b.getI64IntegerAttr(seed))});
  }
  // Inference, or nothing dropped: the identity, and a mask of all true.
  auto y = build<nn::DropoutOp>({x}, {named("ratio", b.getF32FloatAttr(float(ratio)))});
  if (failed(y))
    return failure();
  SmallVector<Value> outs{(*y)->getResult(0)};
  if (wantMask) {
    auto maskType = RankedTensorType::get(typeOf(x).getShape(), b.getI1Type());
    outs.push_back(nn::ConstantOp::create(
        b, loc, cast<ElementsAttr>(DenseElementsAttr::get(maskType, true))));
  }
  return setOutputs(outs);
}

LogicalResult GraphImporter::importCast() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!hasAttr("to"))
    return fail("attribute 'to' is required");
  int64_t to = attrInt("to", 0);
  if (!x || attrFailed)
    return failure();
  auto elem = elementType(to, "attribute 'to'");
  if (failed(elem))
    return failure();
  return emit<nn::CastOp>({x}, {named("to", TypeAttr::get(*elem))});
}

/// x <= y as not(x > y) and (x == x) and (y == y): a NaN on either side
/// makes it false, as IEEE comparisons (and onnxruntime) do; for integers
/// not(x > y) alone. x >= y the same with x < y.
LogicalResult GraphImporter::orEqual(bool greater) {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), y = input(1);
  if (!x || !y)
    return failure();
  Value strict = greater ? make<nn::LessOp>({x, y}) : make<nn::GreaterOp>({x, y});
  Value result = make<nn::NotOp>({strict});
  if (result && isa<FloatType>(typeOf(x).getElementType())) {
    Value ordered = make<nn::AndOp>(
        {make<nn::EqualOp>({x, x}), make<nn::EqualOp>({y, y})});
    result = make<nn::AndOp>({result, ordered});
  }
  if (!result)
    return failure();
  return setOutputs({result});
}

LogicalResult GraphImporter::importLessOrEqual() { return orEqual(false); }
LogicalResult GraphImporter::importGreaterOrEqual() { return orEqual(true); }

/// isnan(x) as not(x == x): only NaN is unequal to itself.
LogicalResult GraphImporter::importIsNaN() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  if (!isa<FloatType>(typeOf(x).getElementType()))
    return fail("input 'X' must be a float tensor, got " +
                std::string(llvm::formatv("{0}", typeOf(x).getElementType())));
  Value r = make<nn::NotOp>({make<nn::EqualOp>({x, x})});
  return r ? setOutputs({r}) : failure();
}

/// isinf(x) as x == +inf, x == -inf or |x| == +inf (both detected).
LogicalResult GraphImporter::importIsInf() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  bool positive = attrInt("detect_positive", 1) != 0;
  bool negative = attrInt("detect_negative", 1) != 0;
  if (!x || attrFailed)
    return failure();
  Type elem = typeOf(x).getElementType();
  if (!isa<FloatType>(elem))
    return fail("input 'X' must be a float tensor, got " +
                std::string(llvm::formatv("{0}", elem)));
  double inf = std::numeric_limits<double>::infinity();
  Value r;
  if (positive && negative)
    r = make<nn::EqualOp>({make<nn::AbsOp>({x}), scalar(elem, inf)});
  else if (positive || negative)
    r = make<nn::EqualOp>({x, scalar(elem, positive ? inf : -inf)});
  else // Nothing detected: every element false.
    r = make<nn::LessOp>({x, scalar(elem, -inf)});
  return r ? setOutputs({r}) : failure();
}

/// a or b as not(not a and not b).
LogicalResult GraphImporter::importOr() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), y = input(1);
  if (!x || !y)
    return failure();
  Value r = make<nn::NotOp>(
      {make<nn::AndOp>({make<nn::NotOp>({x}), make<nn::NotOp>({y})})});
  return r ? setOutputs({r}) : failure();
}

/// a xor b as a != b, compared as 0/1 bytes.
LogicalResult GraphImporter::importXor() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), y = input(1);
  if (!x || !y)
    return failure();
  auto asByte = [&](Value v) {
    return make<nn::CastOp>({v}, {named("to", TypeAttr::get(b.getIntegerType(8)))});
  };
  Value r = make<nn::NotOp>({make<nn::EqualOp>({asByte(x), asByte(y)})});
  return r ? setOutputs({r}) : failure();
}

/// CastLike: Cast to the element type of the second input.
LogicalResult GraphImporter::importCastLike() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), like = input(1);
  if (!x || !like)
    return failure();
  return emit<nn::CastOp>(
      {x}, {named("to", TypeAttr::get(typeOf(like).getElementType()))});
}

/// Size: the element count, known from the static shape.
LogicalResult GraphImporter::importSize() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  auto type = RankedTensorType::get({}, b.getI64Type());
  return setOutputs(
      {splat(type, b.getI64IntegerAttr(typeOf(x).getNumElements()))});
}

/// sign(x) = (x > 0) - (x < 0) in x's type; for floats a NaN stays NaN
/// (where(x == x, sign, x)).
LogicalResult GraphImporter::importSign() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  Type elem = typeOf(x).getElementType();
  if (elem.isInteger(1))
    return fail("input 'input' must be numeric, got a boolean tensor");
  auto zeroAttr = isa<FloatType>(elem) ? Attribute(b.getFloatAttr(elem, 0.0))
                                       : Attribute(b.getIntegerAttr(elem, 0));
  Value zero = splat(RankedTensorType::get({}, elem), zeroAttr);
  auto as = [&](Value bit) {
    return make<nn::CastOp>({bit}, {named("to", TypeAttr::get(elem))});
  };
  Value r = make<nn::SubOp>({as(make<nn::GreaterOp>({x, zero})),
                             as(make<nn::LessOp>({x, zero}))});
  if (r && isa<FloatType>(elem))
    r = make<nn::WhereOp>({make<nn::EqualOp>({x, x}), r, x});
  return r ? setOutputs({r}) : failure();
}

// Mod: fmod = 1 takes the dividend's sign (C's fmod), 0 the divisor's
// (Python's %), which ONNX allows for integers only.
LogicalResult GraphImporter::importMod() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), y = input(1);
  int64_t fmod = attrInt("fmod", 0);
  if (!x || !y || attrFailed)
    return failure();
  if (fmod != 0 && fmod != 1)
    return fail("attribute 'fmod' must be 0 or 1, got " + std::to_string(fmod));
  if (isa<FloatType>(typeOf(x).getElementType()) && fmod == 0)
    return fail("attribute 'fmod' must be 1 for floating-point inputs (ONNX defines the "
                "remainder with the divisor's sign for integers only)");
  return emit<nn::ModOp>({x, y}, {named("fmod", b.getBoolAttr(fmod != 0))});
}

Value GraphImporter::softplusOf(Value x) {
  Type elem = typeOf(x).getElementType();
  Value negAbs = make<nn::NegOp>({make<nn::AbsOp>({x})});
  Value log1p = make<nn::LogOp>(
      {make<nn::AddOp>({make<nn::ExpOp>({negAbs}), scalar(elem, 1.0)})});
  return make<nn::AddOp>({make<nn::MaxOp>({x, scalar(elem, 0.0)}), log1p});
}

/// Softplus: log(1 + exp(x)), written so that exp never overflows.
LogicalResult GraphImporter::importSoftplus() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  Value r = softplusOf(x);
  return r ? setOutputs({r}) : failure();
}

/// Elu: x where x > 0, else alpha * (exp(x) - 1).
LogicalResult GraphImporter::importElu() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  double alpha = attrFloat("alpha", 1.0f);
  if (!x || attrFailed)
    return failure();
  Type elem = typeOf(x).getElementType();
  Value negative = make<nn::MulOp>(
      {make<nn::SubOp>({make<nn::ExpOp>({x}), scalar(elem, 1.0)}), scalar(elem, alpha)});
  Value r = make<nn::WhereOp>(
      {make<nn::GreaterOp>({x, scalar(elem, 0.0)}), x, negative});
  return r ? setOutputs({r}) : failure();
}

/// Selu: gamma * x where x > 0, else gamma * (alpha * exp(x) - alpha).
LogicalResult GraphImporter::importSelu() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  double alpha = attrFloat("alpha", 1.67326319217681884765625f);
  double gamma = attrFloat("gamma", 1.05070102214813232421875f);
  if (!x || attrFailed)
    return failure();
  Type elem = typeOf(x).getElementType();
  Value negative = make<nn::SubOp>(
      {make<nn::MulOp>({make<nn::ExpOp>({x}), scalar(elem, alpha)}), scalar(elem, alpha)});
  Value r = make<nn::MulOp>(
      {make<nn::WhereOp>({make<nn::GreaterOp>({x, scalar(elem, 0.0)}), x, negative}),
       scalar(elem, gamma)});
  return r ? setOutputs({r}) : failure();
}

Value GraphImporter::hardSigmoidOf(Value x, double alpha, double beta) {
  Type elem = typeOf(x).getElementType();
  Value line = make<nn::AddOp>({make<nn::MulOp>({x, scalar(elem, alpha)}), scalar(elem, beta)});
  return make<nn::MaxOp>({make<nn::MinOp>({line, scalar(elem, 1.0)}), scalar(elem, 0.0)});
}

LogicalResult GraphImporter::importHardSigmoid() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  double alpha = attrFloat("alpha", 0.2f), beta = attrFloat("beta", 0.5f);
  if (!x || attrFailed)
    return failure();
  Value r = hardSigmoidOf(x, alpha, beta);
  return r ? setOutputs({r}) : failure();
}

/// HardSwish: x * HardSigmoid(x) with alpha 1/6 and beta 0.5, alpha the
/// float attribute of ONNX's function body (1/6 rounded to f32).
LogicalResult GraphImporter::importHardSwish() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  Value r = make<nn::MulOp>({x, hardSigmoidOf(x, double(1.0f / 6.0f), 0.5)});
  return r ? setOutputs({r}) : failure();
}

/// Mish: x * tanh(softplus(x)).
LogicalResult GraphImporter::importMish() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  Value r = make<nn::MulOp>({x, make<nn::TanhOp>({softplusOf(x)})});
  return r ? setOutputs({r}) : failure();
}

/// PRelu: slope * x where x < 0, else x; slope broadcasts to x.
LogicalResult GraphImporter::importPRelu() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), slope = input(1);
  if (!x || !slope)
    return failure();
  Type elem = typeOf(x).getElementType();
  auto zeroAttr = isa<FloatType>(elem) ? Attribute(b.getFloatAttr(elem, 0.0))
                                       : Attribute(b.getIntegerAttr(elem, 0));
  Value zero = splat(RankedTensorType::get({}, elem), zeroAttr);
  Value r = make<nn::WhereOp>(
      {make<nn::LessOp>({x, zero}), make<nn::MulOp>({x, slope}), x});
  if (r && typeOf(r) != typeOf(x))
    return fail("slope of shape " + shapeString(typeOf(slope).getShape()) +
                " does not broadcast to the input's " + shapeString(typeOf(x).getShape()));
  return r ? setOutputs({r}) : failure();
}

} // namespace shardflow::onnx_import
