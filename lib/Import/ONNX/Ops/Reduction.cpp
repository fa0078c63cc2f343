//===- Reduction.cpp - Reduce* axes and the composed reductions -----------===//
//
// The axes, keepdims and noop_with_empty_axes of every Reduce* node, and
// ReduceL2, ReduceLogSumExp and ReduceSumSquare as compositions of
// reduce_sum/reduce_max and elementwise ops.
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

// ReduceL2 = sqrt(reduce_sum(x * x)) (|x| when nothing is reduced). Floating
// point only: the integer variant's truncated square root has no kernel.
LogicalResult GraphImporter::importReduceL2() {
  Value x;
  SmallVector<int64_t> axes;
  bool keepdims, noop;
  if (failed(reductionOperands(18, x, axes, keepdims, noop)))
    return failure();
  if (!isa<FloatType>(typeOf(x).getElementType()))
    return fail("input 'data' must be a floating-point tensor (integer "
                "ReduceL2 is not supported)");
  Value sq = make<nn::MulOp>({x, x});
  if (!sq)
    return failure();
  if (!noop)
    sq = make<nn::ReduceSumOp>({sq}, reduceAttrs(b, axes, keepdims));
  if (!sq)
    return failure();
  return emit<nn::SqrtOp>({sq});
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
LogicalResult GraphImporter::importReduceMin() {
  Value x;
  SmallVector<int64_t> axes;
  bool keepdims, noop;
  if (failed(reductionOperands(18, x, axes, keepdims, noop)))
    return failure();
  Type elem = typeOf(x).getElementType();
  if (noop)
    return emit<nn::IdentityOp>({x});
  if (elem.isInteger(1)) {
    // bool (opset 20): all = not(any(not x)).
    Value any = make<nn::ReduceMaxOp>({make<nn::NotOp>({x})}, reduceAttrs(b, axes, keepdims));
    if (!any)
      return failure();
    return emit<nn::NotOp>({any});
  }
  if (!isa<FloatType>(elem))
    return fail("input 'data' must be a floating-point or bool tensor (integer "
                "ReduceMin is not supported)");
  Value m = make<nn::ReduceMaxOp>({make<nn::NegOp>({x})}, reduceAttrs(b, axes, keepdims));
  if (!m)
    return failure();
  return emit<nn::NegOp>({m});
}

} // namespace shardflow::onnx_import
