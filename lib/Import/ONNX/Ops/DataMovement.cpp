//===- DataMovement.cpp - shapes, data movement, generators ---------------===//
//
// Reshape, Transpose, Squeeze, Concat, Split, Slice, Pad, Gather, Scatter,
// Expand, Where; Trilu, CumSum, Range, Shape, ConstantOfShape, Constant,
// TopK. Inputs that nn holds as attributes must fold to constants.
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"



#include <cmath>

namespace shardflow::onnx_import {

LogicalResult GraphImporter::importReshape() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  auto shape = constInts(1, "shape");
  if (failed(shape))
    return failure();
  bool allowZero = attrInt("allowzero", 0) != 0;
  if (attrFailed)
    return failure();
  auto in = typeOf(x);
  SmallVector<int64_t> dims(*shape);
  int64_t known = 1, inferAt = -1;
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d == 0 && !allowZero) {
      if (int64_t(i) >= in.getRank())
        return fail("shape " + shapeString(*shape) + " copies dimension " +
                    std::to_string(i) + " that the input of rank " +
                    std::to_string(in.getRank()) + " lacks");
      d = in.getDimSize(i);
    }
    if (d == -1) {
      if (inferAt >= 0)
        return fail("shape " + shapeString(*shape) + " has more than one -1");
      inferAt = i;
      continue;
    }
    if (d < 0)
      return fail("shape " + shapeString(*shape) + " has a negative entry");
    if (d > 0 && known > kMaxElements / d)
      return fail("shape " + shapeString(*shape) + " is absurdly large");
    known *= d;
  }
  if (inferAt >= 0) {
    if (known == 0 || in.getNumElements() % known)
      return fail("cannot reshape " + shapeString(in.getShape()) + " to " +
                  shapeString(*shape));
    dims[inferAt] = in.getNumElements() / known;
  }
  auto op = buildTyped<nn::ReshapeOp>(
      {RankedTensorType::get(dims, in.getElementType())}, {x});
  if (failed(op))
    return failure();
  auto r = finish(*op);
  return failed(r) ? failure() : setOutputs(*r);
}

LogicalResult GraphImporter::importTranspose() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  SmallVector<int64_t> reversed;
  for (int64_t i = typeOf(x).getRank() - 1; i >= 0; --i)
    reversed.push_back(i);
  SmallVector<int64_t> perm = attrInts("perm", reversed);
  if (attrFailed)
    return failure();
  return emit<nn::TransposeOp>({x}, {named("perm", b.getDenseI64ArrayAttr(perm))});
}

LogicalResult GraphImporter::importFlatten() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  int64_t axis = attrInt("axis", 1);
  if (!x || attrFailed)
    return failure();
  // Flatten's axis may equal the rank (everything in the outer dimension).
  int64_t rank = typeOf(x).getRank();
  if (axis < 0 && axis >= -rank)
    axis += rank;
  return emit<nn::FlattenOp>({x}, {named("axis", b.getI64IntegerAttr(axis))});
}

LogicalResult GraphImporter::importSqueeze() {
  if (failed(requireInputs(1, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  if (hasAttr("axes"))
    return fail("attribute 'axes' was replaced by the axes input in opset 13");
  SmallVector<int64_t> axes;
  if (hasInput(1)) {
    auto a = constInts(1, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    for (auto [i, d] : llvm::enumerate(typeOf(x).getShape()))
      if (d == 1)
        axes.push_back(i);
  }
  return emit<nn::SqueezeOp>(
      {x}, {named("axes", b.getDenseI64ArrayAttr(
                              canonicalAxes(axes, typeOf(x).getRank())))});
}

LogicalResult GraphImporter::importUnsqueeze() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto axes = constInts(1, "axes");
  if (!x || failed(axes))
    return failure();
  int64_t resultRank = typeOf(x).getRank() + int64_t(axes->size());
  return emit<nn::UnsqueezeOp>(
      {x}, {named("axes", b.getDenseI64ArrayAttr(
                              canonicalAxes(*axes, resultRank)))});
}

LogicalResult GraphImporter::importConcat() {
  if (failed(requireInputs(1, 1 << 16)) || failed(allowOutputs(1)))
    return failure();
  SmallVector<Value> operands;
  for (int i = 0; i < numInputs(); ++i) {
    Value v = input(i);
    if (!v)
      return failure();
    operands.push_back(v);
  }
  if (!hasAttr("axis"))
    return fail("attribute 'axis' is required");
  int64_t axis = attrInt("axis", 0);
  if (attrFailed)
    return failure();
  return emit<nn::ConcatOp>(
      operands,
      {named("axis", b.getI64IntegerAttr(
                         canonicalAxis(axis, typeOf(operands[0]).getRank())))});
}

LogicalResult GraphImporter::importSplit() {
  if (failed(requireInputs(1, 2)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  int64_t rank = typeOf(x).getRank();
  int64_t axis = attrInt("axis", 0);
  if (attrFailed)
    return failure();
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  if (axis < 0)
    axis += rank;
  int64_t dim = typeOf(x).getDimSize(axis);
  SmallVector<int64_t> sizes;
  int64_t outputs = node->output_size();
  if (hasAttr("split"))
    return fail("attribute 'split' was replaced by the split input in opset 13");
  if (hasInput(1)) {
    auto s = constInts(1, "split");
    if (failed(s))
      return failure();
    sizes = *s;
  } else if (opset >= 18 && hasAttr("num_outputs")) {
    int64_t n = attrInt("num_outputs", 0);
    if (attrFailed)
      return failure();
    if (n < 1 || n != outputs)
      return fail("num_outputs " + std::to_string(n) + " must be positive and "
                  "match the node's " + std::to_string(outputs) + " outputs");
    // ONNX 18: pieces of ceil(dim / n), the last one smaller.
    int64_t piece = (dim + n - 1) / n;
    for (int64_t i = 0, left = dim; i < n; ++i, left -= piece)
      sizes.push_back(std::clamp<int64_t>(left, 0, piece));
  } else {
    if (outputs < 1 || dim % outputs)
      return fail("dimension " + std::to_string(dim) + " does not split evenly "
                  "into " + std::to_string(outputs) + " outputs");
    sizes.assign(outputs, dim / outputs);
  }
  if (int64_t(sizes.size()) != outputs)
    return fail("split has " + std::to_string(sizes.size()) +
                " sizes for " + std::to_string(outputs) + " outputs");
  return emit<nn::SplitOp>({x}, {named("axis", b.getI64IntegerAttr(axis)),
                                 named("sizes", b.getDenseI64ArrayAttr(sizes))});
}

LogicalResult GraphImporter::importSlice() {
  if (failed(requireInputs(3, 5)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  auto starts = constInts(1, "starts");
  auto ends = constInts(2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  SmallVector<int64_t> axes, steps;
  if (hasInput(3)) {
    auto a = constInts(3, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    for (size_t i = 0; i < starts->size(); ++i)
      axes.push_back(i);
  }
  if (hasInput(4)) {
    auto s = constInts(4, "steps");
    if (failed(s))
      return failure();
    steps = *s;
  } else {
    steps.assign(starts->size(), 1);
  }
  return emit<nn::SliceOp>({x}, {named("starts", b.getDenseI64ArrayAttr(*starts)),
                                 named("ends", b.getDenseI64ArrayAttr(*ends)),
                                 named("axes", b.getDenseI64ArrayAttr(canonicalAxes(
                                                   axes, typeOf(x).getRank()))),
                                 named("steps", b.getDenseI64ArrayAttr(steps))});
}

LogicalResult GraphImporter::importPad() {
  if (failed(requireInputs(2, 4)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto pads = constInts(1, "pads");
  if (!x || failed(pads))
    return failure();
  int64_t rank = typeOf(x).getRank();
  double value = 0;
  if (hasInput(2)) {
    auto v = constScalar(2, "constant_value");
    if (failed(v))
      return failure();
    value = *v;
  }
  SmallVector<int64_t> full(*pads);
  if (hasInput(3)) {
    // Opset 18+: pads only for the listed axes.
    auto axes = constInts(3, "axes");
    if (failed(axes))
      return failure();
    if (pads->size() != 2 * axes->size())
      return fail("pads needs two entries per axis");
    full.assign(2 * rank, 0);
    for (auto [i, a] : llvm::enumerate(*axes)) {
      if (a < -rank || a >= rank)
        return fail("axis " + std::to_string(a) + " is out of range");
      int64_t n = a < 0 ? a + rank : a;
      full[n] = (*pads)[i];
      full[rank + n] = (*pads)[axes->size() + i];
    }
  }
  std::string mode = attrString("mode", "constant");
  if (attrFailed)
    return failure();
  return emit<nn::PadOp>({x}, {named("pads", b.getDenseI64ArrayAttr(full)),
                               named("mode", b.getStringAttr(mode)),
                               named("value", b.getF64FloatAttr(value))});
}

LogicalResult GraphImporter::importGather() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), idx = input(1);
  int64_t axis = attrInt("axis", 0);
  if (!x || !idx || attrFailed)
    return failure();
  // Constant indices outside the data are an error in any ONNX runtime;
  // report them here rather than leave an unfoldable Gather behind.
  DenseElementsAttr indices;
  int64_t rank = typeOf(x).getRank();
  if (matchPattern(idx, m_Constant(&indices)) && axis >= -rank && axis < rank &&
      (indices.getElementType().isSignlessInteger(32) ||
       indices.getElementType().isSignlessInteger(64))) {
    int64_t dim = typeOf(x).getDimSize(axis < 0 ? axis + rank : axis);
    auto values = indices.getValues<APInt>();
    // A splat may stand for a huge tensor: one value says it all.
    for (int64_t i = 0, e = indices.isSplat() ? std::min<int64_t>(
                                                    indices.getNumElements(), 1)
                                              : indices.getNumElements();
         i < e; ++i) {
      int64_t v = values[i].getSExtValue();
      if (v < -dim || v >= dim)
        return fail("index " + std::to_string(v) + " is out of range for axis " +
                    std::to_string(axis) + " of size " + std::to_string(dim));
    }
  }
  return emit<nn::GatherOp>(
      {x, idx}, {named("axis", b.getI64IntegerAttr(canonicalAxis(axis, rank)))});
}

LogicalResult GraphImporter::importGatherElements() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), idx = input(1);
  int64_t axis = attrInt("axis", 0);
  if (!x || !idx || attrFailed)
    return failure();
  return emit<nn::GatherElementsOp>(
      {x, idx}, {named("axis", b.getI64IntegerAttr(
                                   canonicalAxis(axis, typeOf(x).getRank())))});
}

LogicalResult GraphImporter::importScatterND() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), idx = input(1), upd = input(2);
  std::string reduction = attrString("reduction", "none");
  if (!x || !idx || !upd || attrFailed)
    return failure();
  return emit<nn::ScatterNDOp>({x, idx, upd},
                               {named("reduction", b.getStringAttr(reduction))});
}

LogicalResult GraphImporter::importExpand() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto shape = constInts(1, "shape");
  if (!x || failed(shape))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return fail("shape " + shapeString(*shape) + " has a negative entry");
  // Bidirectional: the result is the broadcast of both shapes.
  SmallVector<int64_t> out;
  auto in = typeOf(x);
  if (!OpTrait::util::getBroadcastedShape(in.getShape(), *shape, out))
    return fail("input shape " + shapeString(in.getShape()) +
                " does not broadcast with " + shapeString(*shape));
  auto op = buildTyped<nn::ExpandOp>(
      {RankedTensorType::get(out, in.getElementType())}, {x});
  if (failed(op))
    return failure();
  auto r = finish(*op);
  return failed(r) ? failure() : setOutputs(*r);
}

LogicalResult GraphImporter::importWhere() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  Value c = input(0), x = input(1), y = input(2);
  if (!c || !x || !y)
    return failure();
  return emit<nn::WhereOp>({c, x, y});
}

/// True if `v` (a k, K or axis input read by constScalar) is a whole number
/// that converts to int64_t without overflow.
static bool isInt64(double v) {
  return std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 0x1p62;
}

LogicalResult GraphImporter::importTrilu() {
  if (failed(requireInputs(1, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  int64_t k = 0;
  if (hasInput(1)) {
    auto kv = constScalar(1, "k");
    if (failed(kv))
      return failure();
    if (!isInt64(*kv))
      return fail("k input must be a finite integer");
    k = int64_t(*kv);
  }
  int64_t upper = attrInt("upper", 1);
  if (attrFailed)
    return failure();
  return emit<nn::TriluOp>({x}, {named("upper", b.getBoolAttr(upper != 0)),
                                 named("k", b.getI64IntegerAttr(k))});
}

LogicalResult GraphImporter::importCumSum() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto axis = constScalar(1, "axis");
  if (!x || failed(axis))
    return failure();
  if (!isInt64(*axis))
    return fail("axis input must be a finite integer");
  int64_t exclusive = attrInt("exclusive", 0), reverse = attrInt("reverse", 0);
  if (attrFailed)
    return failure();
  return emit<nn::CumSumOp>({x}, {named("axis", b.getI64IntegerAttr(canonicalAxis(
                                                  int64_t(*axis), typeOf(x).getRank()))),
                                  named("exclusive", b.getBoolAttr(exclusive != 0)),
                                  named("reverse", b.getBoolAttr(reverse != 0))});
}

LogicalResult GraphImporter::importRange() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  auto start = constScalar(0, "start"), limit = constScalar(1, "limit"),
       delta = constScalar(2, "delta");
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  if (*delta == 0 || !std::isfinite(*delta) || !std::isfinite(*start) ||
      !std::isfinite(*limit))
    return fail("start, limit and delta must be finite and delta non-zero");
  double count = std::max(std::ceil((*limit - *start) / *delta), 0.0);
  if (count > double(kMaxElements))
    return fail("range is absurdly long");
  Type elem = typeOf(input(0)).getElementType();
  auto type = RankedTensorType::get({int64_t(count)}, elem);
  auto op = buildTyped<nn::RangeOp>(
      {type}, {}, {named("start", b.getF64FloatAttr(*start)),
                   named("limit", b.getF64FloatAttr(*limit)),
                   named("delta", b.getF64FloatAttr(*delta))});
  if (failed(op))
    return failure();
  // Folded by the constant evaluator unless over its size limit.
  auto results = finish(*op);
  if (failed(results))
    return failure();
  return setOutputs(*results);
}

LogicalResult GraphImporter::importShape() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  SmallVector<NamedAttribute> attrs{
      named("start", b.getI64IntegerAttr(attrInt("start", 0)))};
  if (hasAttr("end"))
    attrs.push_back(named("end", b.getI64IntegerAttr(attrInt("end", 0))));
  if (attrFailed)
    return failure();
  return emit<nn::ShapeOp>({x}, attrs);
}

LogicalResult GraphImporter::importConstantOfShape() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  auto shape = constInts(0, "shape");
  if (failed(shape))
    return failure();
  int64_t n = 1;
  for (int64_t d : *shape) {
    if (d < 0)
      return fail("shape " + shapeString(*shape) + " has a negative entry");
    if (d > 0 && n > kMaxElements / d)
      return fail("shape " + shapeString(*shape) + " is absurdly large");
    n *= d;
  }
  TypedAttr value = b.getF32FloatAttr(0.0f);
  if (auto *a = attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR)
      return fail("attribute 'value' must be a tensor");
    auto t = tensorType(a->t());
    if (failed(t))
      return failure();
    if (t->getNumElements() != 1)
      return fail("attribute 'value' must hold one element");
    auto data = tensorData(a->t(), *t);
    if (failed(data))
      return failure();
    value = cast<TypedAttr>(*data->getValues<Attribute>().begin());
  }
  auto type = RankedTensorType::get(*shape, value.getType());
  auto op = buildTyped<nn::ConstantOfShapeOp>({type}, {},
                                              {named("value", value)});
  if (failed(op))
    return failure();
  auto r = finish(*op);
  return failed(r) ? failure() : setOutputs(*r);
}

LogicalResult GraphImporter::importConstant() {
  if (failed(requireInputs(0, 0)) || failed(allowOutputs(1)))
    return failure();
  if (node->attribute_size() != 1)
    return fail("expects exactly one value attribute");
  const auto &a = node->attribute(0);
  DenseElementsAttr value;
  if (a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR) {
    auto t = tensorType(a.t());
    if (failed(t))
      return failure();
    auto data = tensorData(a.t(), *t);
    if (failed(data))
      return failure();
    value = *data;
  } else if (a.name() == "value_float" && a.type() == onnx::AttributeProto::FLOAT) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                   a.f());
  } else if (a.name() == "value_floats" &&
             a.type() == onnx::AttributeProto::FLOATS) {
    SmallVector<float> v(a.floats().begin(), a.floats().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({int64_t(v.size())}, b.getF32Type()),
        ArrayRef<float>(v));
  } else if (a.name() == "value_int" && a.type() == onnx::AttributeProto::INT) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()),
                                   int64_t(a.i()));
  } else if (a.name() == "value_ints" && a.type() == onnx::AttributeProto::INTS) {
    SmallVector<int64_t> v(a.ints().begin(), a.ints().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({int64_t(v.size())}, b.getI64Type()),
        ArrayRef<int64_t>(v));
  } else {
    return fail("attribute '" + a.name() + "' of this type is not supported");
  }
  Value c = nn::ConstantOp::create(b, loc, cast<ElementsAttr>(value));
  return setOutputs({c});
}

LogicalResult GraphImporter::importTopK() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(2)))
    return failure();
  Value x = input(0);
  auto k = constScalar(1, "K");
  if (!x || failed(k))
    return failure();
  if (!isInt64(*k))
    return fail("K input must be a finite integer");
  int64_t axis = attrInt("axis", -1), largest = attrInt("largest", 1),
          sorted = attrInt("sorted", 1);
  if (attrFailed)
    return failure();
  return emit<nn::TopKOp>({x}, {named("k", b.getI64IntegerAttr(int64_t(*k))),
                                named("axis", b.getI64IntegerAttr(canonicalAxis(
                                                  axis, typeOf(x).getRank()))),
                                named("largest", b.getBoolAttr(largest != 0)),
                                named("sorted", b.getBoolAttr(sorted != 0))});
}

} // namespace shardflow::onnx_import
