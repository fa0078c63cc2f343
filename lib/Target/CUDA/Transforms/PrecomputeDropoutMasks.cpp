//===- PrecomputeDropoutMasks.cpp - dropout masks drawn at compile time ---===//
//
// Training dropout: the mask depends only on the seed and the shape (the
// CPU kernel reseeds numpy's generator on every call), so it is drawn here,
// once, into a constant: the mask output is a copy of it and the result a
// `masked_scale` of the input, both elementwise.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Runtime/Format/NumpyRandom.h"
#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDAPRECOMPUTEDROPOUTMASKS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

LogicalResult precomputeDropoutMasks(func::FuncOp fn) {
  SmallVector<rt::KernelOp> dropouts;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "training_dropout" && k.getInputs().size() == 1 &&
        k.getOutputs().size() == 2)
      dropouts.push_back(k);
  });
  // A mask is one byte per element in the artifact (two hex digits).
  constexpr int64_t kMaxMask = int64_t(1) << 24;
  for (rt::KernelOp k : dropouts) {
    Value x = k.getInputs()[0], y = k.getOutputs()[0], mask = k.getOutputs()[1];
    auto ratioAttr = dyn_cast_or_null<FloatAttr>(k.getParam("ratio"));
    auto seedAttr = dyn_cast_or_null<IntegerAttr>(k.getParam("seed"));
    Type t = elemOf(x);
    if (!ratioAttr || !isa<FloatType>(t) || shapeOf(mask) != shapeOf(x) ||
        !elemOf(mask).isInteger(1))
      continue; // left for the error that names it
    double ratio = ratioAttr.getValueAsDouble();
    if (!(ratio >= 0.0 && ratio < 1.0))
      return k.emitOpError("training_dropout ratio ") << ratio << " is outside [0, 1)";
    if (numel(x) > kMaxMask)
      return k.emitOpError("training_dropout of ")
             << numel(x) << " elements: the CUDA target draws the mask at compile time, "
             << "for at most " << kMaxMask << " elements; compile with --target cpu";
    std::mt19937 gen = runtime::numpyGenerator(seedAttr ? seedAttr.getInt() : 0);
    SmallVector<bool> keep(numel(x));
    for (auto &&bit : keep)
      bit = runtime::numpyUniform(gen) >= ratio;
    // The scale as the CPU kernel computes it, in the element type:
    // 1 / (1 - ratio), ratio first rounded to f32, then to the type.
    const llvm::fltSemantics &sem = cast<FloatType>(t).getFloatSemantics();
    bool lost;
    APFloat r{float(ratio)}, one{1.0};
    r.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    one.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    APFloat denominator = one;
    denominator.subtract(r, APFloat::rmNearestTiesToEven);
    APFloat scale = one;
    scale.divide(denominator, APFloat::rmNearestTiesToEven);
    OpBuilder b(k);
    auto maskType = RankedTensorType::get(shapeOf(mask), b.getI1Type());
    Value bits = rt::ConstantOp::create(b, k.getLoc(), cast<MemRefType>(mask.getType()),
                                        DenseElementsAttr::get(maskType, ArrayRef<bool>(keep)));
    rt::KernelOp::create(b, k.getLoc(), b.getStringAttr("identity"), ValueRange{bits},
                         ValueRange{mask}, b.getDictionaryAttr({}));
    rt::KernelOp::create(
        b, k.getLoc(), b.getStringAttr("masked_scale"), ValueRange{x, bits}, ValueRange{y},
        b.getDictionaryAttr(
            {b.getNamedAttr("scale", b.getF64FloatAttr(scale.convertToDouble()))}));
    k.erase();
  }
  return success();
}

struct CUDAPrecomputeDropoutMasks
    : cuda::impl::CUDAPrecomputeDropoutMasksBase<CUDAPrecomputeDropoutMasks> {
  void runOnOperation() override {
    if (failed(precomputeDropoutMasks(getOperation())))
      signalPassFailure();
  }
};

} // namespace
