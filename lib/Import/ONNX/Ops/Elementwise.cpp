//===- Elementwise.cpp - elementwise ONNX ops -----------------------------===//
//
// Elementwise ops with attributes (LeakyRelu, Gelu, Clip, Dropout, Cast);
// the plain unary and binary ones use the templates of GraphImporter.h.
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"

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

} // namespace shardflow::onnx_import
