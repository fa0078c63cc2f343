//===- Reduction.cpp - Reduce* axes and the composed reductions -----------===//
//
// The axes, keepdims and noop_with_empty_axes of every Reduce* node, and
// ReduceL2, ReduceLogSumExp and ReduceSumSquare as compositions of
// reduce_sum/reduce_max and elementwise ops, and ArgMax/ArgMin.
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"

#include <cmath>

namespace shardflow::onnx_import {

LogicalResult GraphImporter::reductionOperands(int64_t axesInputSince, Value &x,
                                               SmallVector<int64_t> &axes,
                                               bool &keepdims, bool &noop) {
  bool axesAsInput = opset >= axesInputSince;
  if (failed(requireInputs(1, axesAsInput ? 2 : 1)) || failed(allowOutputs(1)))
    return failure();
  x = input(0);
  if (!x)
    return failure();
  if (axesAsInput) {
    // An old-style attribute would otherwise be ignored silently.
    if (hasAttr("axes"))
      return fail("attribute 'axes' was replaced by the axes input in opset " +
                  std::to_string(axesInputSince));
    if (hasInput(1)) {
      auto a = constInts(1, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
  } else {
    axes = attrInts("axes");
  }
  keepdims = attrInt("keepdims", 1) != 0;
  noop = attrInt("noop_with_empty_axes", 0) != 0;
  if (attrFailed)
    return failure();
  if (axes.empty()) {
    if (noop)
      return success();
    for (int64_t i = 0; i < typeOf(x).getRank(); ++i)
      axes.push_back(i);
  }
  noop = false;
  int64_t rank = typeOf(x).getRank();
  for (int64_t &a : axes) {
    if (a < -rank || a >= rank)
      return fail("axis " + std::to_string(a) + " is out of range for rank " +
                  std::to_string(rank));
    if (a < 0)
      a += rank;
  }
  llvm::sort(axes);
  return success();
}

namespace {
SmallVector<NamedAttribute> reduceAttrs(OpBuilder &b, ArrayRef<int64_t> axes,
                                        bool keepdims) {
  return {b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
          b.getNamedAttr("keepdims", b.getBoolAttr(keepdims))};
}
} // namespace

// ReduceSumSquare = reduce_sum(x * x). With noop_with_empty_axes and no axes
// nothing is reduced and the result is x * x, as in onnx's reference.
LogicalResult GraphImporter::importReduceSumSquare() {
  Value x;
  SmallVector<int64_t> axes;
  bool keepdims, noop;
  if (failed(reductionOperands(18, x, axes, keepdims, noop)))
    return failure();
  Value sq = make<nn::MulOp>({x, x});
  if (!sq)
    return failure();
  if (noop)
    return emit<nn::IdentityOp>({sq});
  return emit<nn::ReduceSumOp>({sq}, reduceAttrs(b, axes, keepdims));
}

// ReduceL2 = sqrt(reduce_sum(x * x)) (|x| when nothing is reduced); for
// integers the root is taken in f64 and truncated.
LogicalResult GraphImporter::importReduceL2() {
  Value x;
  SmallVector<int64_t> axes;
  bool keepdims, noop;
  if (failed(reductionOperands(18, x, axes, keepdims, noop)))
    return failure();
  Type elem = typeOf(x).getElementType();
  if (elem.isInteger(1))
    return fail("input 'data' must be numeric, not bool");
  Value sq = make<nn::MulOp>({x, x});
  if (!sq)
    return failure();
  if (!noop)
    sq = make<nn::ReduceSumOp>({sq}, reduceAttrs(b, axes, keepdims));
  if (!sq)
    return failure();
  if (isa<FloatType>(elem))
    return emit<nn::SqrtOp>({sq});
  // Integers: the square root of the (wrapped) integer sum in f64,
  // truncated back to the input's type, as onnx's reference does.
  Value f = make<nn::CastOp>({sq}, {named("to", TypeAttr::get(b.getF64Type()))});
  Value root = f ? make<nn::SqrtOp>({f}) : Value();
  if (!root)
    return failure();
  return emit<nn::CastOp>({root}, {named("to", TypeAttr::get(elem))});
}

// ReduceLogSumExp = log(reduce_sum(exp(x - m))) + m, with m the maximum of
// the finite elements over the axes (0 where there is none), as onnxruntime
// shifts: an infinite element neither overflows nor makes inf - inf, a row of
// -inf gives -inf and a row holding +inf gives +inf; NaN propagates. With
// noop_with_empty_axes and no axes the result is x.
LogicalResult GraphImporter::importReduceLogSumExp() {
  Value x;
  SmallVector<int64_t> axes;
  bool keepdims, noop;
  if (failed(reductionOperands(18, x, axes, keepdims, noop)))
    return failure();
  Type elem = typeOf(x).getElementType();
  if (!isa<FloatType>(elem))
    return fail("input 'data' must be a floating-point tensor");
  if (noop)
    return emit<nn::IdentityOp>({x});
  Value negInf = scalar(elem, -INFINITY);
  Value isInf = make<nn::EqualOp>({make<nn::AbsOp>({x}), scalar(elem, INFINITY)});
  Value finite = make<nn::WhereOp>({isInf, negInf, x});
  Value m = make<nn::ReduceMaxOp>({finite}, reduceAttrs(b, axes, true));
  if (!m)
    return failure();
  m = make<nn::WhereOp>({make<nn::EqualOp>({m, negInf}), scalar(elem, 0.0), m});
  Value e = make<nn::ExpOp>({make<nn::SubOp>({x, m})});
  Value s = make<nn::ReduceSumOp>({e}, reduceAttrs(b, axes, keepdims));
  if (!s)
    return failure();
  if (!keepdims)
    m = make<nn::SqueezeOp>({m}, {named("axes", b.getDenseI64ArrayAttr(axes))});
  if (!m)
    return failure();
  return emit<nn::AddOp>({make<nn::LogOp>({s}), m});
}

// ReduceMin = -reduce_max(-x) on floating point (negation is exact and
// reverses the order; NaN stays NaN, an empty reduction's -inf becomes
// +inf); bool is not(reduce_max(not x)). Integers would overflow negating
// their minimum and are refused.
// ArgMax / ArgMin: the index of the first (select_last_index: last) extreme
// element along one axis, as an i64 tensor.
LogicalResult GraphImporter::importArgReduce(bool isMax) {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  int64_t axis = attrInt("axis", 0), keepdims = attrInt("keepdims", 1),
          last = attrInt("select_last_index", 0);
  if (!x || attrFailed)
    return failure();
  int64_t rank = typeOf(x).getRank();
  if (rank == 0)
    return fail("input 'data' must have rank >= 1");
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  if (axis < 0)
    axis += rank;
  if (typeOf(x).getDimSize(axis) == 0)
    return fail("the axis is empty: there is no index to return");
  SmallVector<NamedAttribute> attrs = {named("axis", b.getI64IntegerAttr(axis)),
                                       named("keepdims", b.getBoolAttr(keepdims != 0)),
                                       named("select_last_index", b.getBoolAttr(last != 0))};
  return isMax ? emit<nn::ArgMaxOp>({x}, attrs) : emit<nn::ArgMinOp>({x}, attrs);
}
LogicalResult GraphImporter::importArgMax() { return importArgReduce(true); }
LogicalResult GraphImporter::importArgMin() { return importArgReduce(false); }

} // namespace shardflow::onnx_import
