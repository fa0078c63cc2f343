//===- LinearAlgebra.cpp - contractions, convolution, pooling -------------===//
//
// MatMul, Gemm, Einsum, Conv and the pooling ops, with ONNX's window
// attributes (auto_pad, pads, strides, dilations) resolved to explicit ones.
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"

namespace shardflow::onnx_import {

LogicalResult GraphImporter::importMatMul() { return binary<nn::MatMulOp>(); }

LogicalResult GraphImporter::importGemm() {
  if (failed(requireInputs(2, 3)) || failed(allowOutputs(1)))
    return failure();
  Value a = input(0), bv = input(1), c = input(2);
  float alpha = attrFloat("alpha", 1.0f), beta = attrFloat("beta", 1.0f);
  int64_t ta = attrInt("transA", 0), tb = attrInt("transB", 0);
  if (!a || !bv || (hasInput(2) && !c) || attrFailed)
    return failure();
  SmallVector<Value> operands{a, bv};
  if (c)
    operands.push_back(c);
  return emit<nn::GemmOp>(operands, {named("alpha", b.getF32FloatAttr(alpha)),
                                     named("beta", b.getF32FloatAttr(beta)),
                                     named("trans_a", b.getBoolAttr(ta != 0)),
                                     named("trans_b", b.getBoolAttr(tb != 0))});
}

LogicalResult GraphImporter::importEinsum() {
  if (failed(requireInputs(1, 1 << 10)) || failed(allowOutputs(1)))
    return failure();
  SmallVector<Value> operands;
  for (int i = 0; i < numInputs(); ++i) {
    Value v = input(i);
    if (!v)
      return failure();
    operands.push_back(v);
  }
  if (!hasAttr("equation"))
    return fail("attribute 'equation' is required");
  std::string eq = attrString("equation", "");
  if (attrFailed)
    return failure();
  return emit<nn::EinsumOp>(operands, {named("equation", b.getStringAttr(eq))});
}

/// Resolves ONNX's auto_pad/pads/strides/dilations into explicit values.
LogicalResult GraphImporter::resolveWindow(ArrayRef<int64_t> inShape,
                                           ArrayRef<int64_t> kernel,
                                           SmallVectorImpl<int64_t> &strides,
                                           SmallVectorImpl<int64_t> &pads,
                                           SmallVectorImpl<int64_t> &dilations) {
  size_t spatial = kernel.size();
  strides = attrInts("strides", SmallVector<int64_t>(spatial, 1));
  dilations = attrInts("dilations", SmallVector<int64_t>(spatial, 1));
  pads = attrInts("pads", SmallVector<int64_t>(2 * spatial, 0));
  std::string autoPad = attrString("auto_pad", "NOTSET");
  if (attrFailed)
    return failure();
  if (strides.size() != spatial || dilations.size() != spatial ||
      pads.size() != 2 * spatial)
    return fail("strides, dilations and pads must have " +
                std::to_string(spatial) + ", " + std::to_string(spatial) +
                " and " + std::to_string(2 * spatial) + " entries");
  for (int64_t s : strides)
    if (s < 1)
      return fail("strides must be positive");
  if (autoPad == "NOTSET")
    return success();
  if (autoPad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
    return success();
  }
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return fail("auto_pad '" + autoPad + "' is not one of NOTSET, VALID, "
                "SAME_UPPER, SAME_LOWER");
  for (size_t i = 0; i < spatial; ++i) {
    int64_t in = inShape[2 + i];
    int64_t out = (in + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(
        (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in, 0);
    int64_t small = total / 2, large = total - small;
    pads[i] = autoPad == "SAME_UPPER" ? small : large;
    pads[spatial + i] = autoPad == "SAME_UPPER" ? large : small;
  }
  return success();
}

LogicalResult GraphImporter::importConv() {
  if (failed(requireInputs(2, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), w = input(1), bias = input(2);
  if (!x || !w || (hasInput(2) && !bias))
    return failure();
  auto wt = typeOf(w), xt = typeOf(x);
  if (wt.getRank() < 3 || xt.getRank() != wt.getRank())
    return fail("input and weight must have the same rank >= 3");
  SmallVector<int64_t> kernel =
      attrInts("kernel_shape", wt.getShape().drop_front(2));
  if (kernel != ArrayRef<int64_t>(wt.getShape().drop_front(2)))
    return fail("kernel_shape " + shapeString(kernel) +
                " disagrees with the weight shape " +
                shapeString(wt.getShape()));
  SmallVector<int64_t> strides, pads, dilations;
  if (failed(resolveWindow(xt.getShape(), kernel, strides, pads, dilations)))
    return failure();
  int64_t group = attrInt("group", 1);
  if (attrFailed)
    return failure();
  SmallVector<Value> operands{x, w};
  if (bias)
    operands.push_back(bias);
  return emit<nn::ConvOp>(operands,
                          {named("strides", b.getDenseI64ArrayAttr(strides)),
                           named("pads", b.getDenseI64ArrayAttr(pads)),
                           named("dilations", b.getDenseI64ArrayAttr(dilations)),
                           named("group", b.getI64IntegerAttr(group))});
}

LogicalResult GraphImporter::importGlobalAveragePool() {
  return unary<nn::GlobalAveragePoolOp>();
}

} // namespace shardflow::onnx_import
