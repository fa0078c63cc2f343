//===- SplitNormalizationScaleGrads.cpp - a norm's scale cotangent on CUDA -===//
//
// normalization_scale_grad sums dy * xhat over the rows. On CUDA it becomes
// the forward norm's row kernel with a unit scale (xhat, recomputed as the
// forward computes it), a product with dy that the row kernel takes as its
// epilogue, and a reduce_sum over the row dims: two generated launches,
// with xhat never written to memory.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDASPLITNORMALIZATIONSCALEGRADS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

LogicalResult splitScaleGrads(func::FuncOp fn) {
  for (rt::KernelOp k : kernelsNamed(fn, "normalization_scale_grad")) {
    if (k.getInputs().size() != 2 || k.getOutputs().size() != 1)
      return k.emitOpError("normalization_scale_grad takes the input and the cotangent, and "
                           "writes one result");
    Value x = k.getInputs()[0], dy = k.getInputs()[1], out = k.getOutputs()[0];
    ArrayRef<int64_t> shape = shapeOf(x);
    int64_t rank = shape.size();
    auto axisAttr = dyn_cast_or_null<IntegerAttr>(k.getParam("axis"));
    int64_t axis = axisAttr ? axisAttr.getInt() : -1;
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis >= rank || shapeOf(out) != shape.drop_front(axis) ||
        shapeOf(dy) != shape)
      return k.emitOpError("normalization_scale_grad: the result must have the normalized "
                           "dims of the input, and the cotangent the input's shape");
    auto rmsAttr = dyn_cast_or_null<BoolAttr>(k.getParam("rms"));
    bool rms = rmsAttr && rmsAttr.getValue();
    OpBuilder b(k);
    Location loc = k.getLoc();
    Type t = elemOf(x);
    auto full = MemRefType::get(shape, t);
    auto ones = rt::ConstantOp::create(
        b, loc, cast<MemRefType>(out.getType()),
        DenseElementsAttr::get(RankedTensorType::get(shapeOf(out), t), b.getFloatAttr(t, 1.0)));
    SmallVector<NamedAttribute> normParams{b.getNamedAttr("axis", b.getI64IntegerAttr(axis))};
    if (Attribute eps = k.getParam("epsilon"))
      normParams.push_back(b.getNamedAttr("epsilon", eps));
    Value xhat = rt::AllocOp::create(b, loc, full, IntegerAttr());
    rt::KernelOp::create(b, loc, b.getStringAttr(rms ? "rms_normalization" : "layer_normalization"),
                         ValueRange{x, ones}, ValueRange{xhat}, b.getDictionaryAttr(normParams));
    if (axis == 0) { // one row: the product is the result
      rt::KernelOp::create(b, loc, b.getStringAttr("mul"), ValueRange{dy, xhat}, ValueRange{out},
                           b.getDictionaryAttr({}));
    } else {
      Value product = rt::AllocOp::create(b, loc, full, IntegerAttr());
      rt::KernelOp::create(b, loc, b.getStringAttr("mul"), ValueRange{dy, xhat},
                           ValueRange{product}, b.getDictionaryAttr({}));
      SmallVector<int64_t> rows;
      for (int64_t d = 0; d < axis; ++d)
        rows.push_back(d);
      rt::KernelOp::create(
          b, loc, b.getStringAttr("reduce_sum"), ValueRange{product}, ValueRange{out},
          b.getDictionaryAttr({b.getNamedAttr("axes", b.getDenseI64ArrayAttr(rows)),
                               b.getNamedAttr("keepdims", b.getBoolAttr(false))}));
    }
    k.erase();
  }
  return success();
}

struct CUDASplitNormalizationScaleGrads
    : cuda::impl::CUDASplitNormalizationScaleGradsBase<CUDASplitNormalizationScaleGrads> {
  void runOnOperation() override {
    if (failed(splitScaleGrads(getOperation())))
      signalPassFailure();
  }
};

} // namespace
