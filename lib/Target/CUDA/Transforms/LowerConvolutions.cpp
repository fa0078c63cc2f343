//===- LowerConvolutions.cpp - convolutions as im2col and a GEMM ----------===//
//
// Convolution as im2col and a GEMM: `im2col` (generated) writes, per
// image and group, the [(C/G) * window, output positions] patch matrix,
// and a matmul of the [G, M/G, (C/G) * window] weight view with it gives
// [N, G, M/G, positions], which is the NCHW result's layout. The bias is
// an elementwise add over the channel dimension. The arithmetic runs on
// cuBLASLt, and the generated add fuses with what follows it (a batch
// normalization, a relu); a convolution of another element type is left
// for convert-rt-to-gpu's error that names it.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDALOWERCONVOLUTIONS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

/// Whether convolution `k` with window `kernel` reads each input position
/// once, in place: every window dimension 1, every stride 1, no padding
/// (the dilations then do not matter).
bool isPointwise(rt::KernelOp k, ArrayRef<int64_t> kernel) {
  auto all = [&](StringRef name, int64_t value) {
    auto a = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam(name));
    return !a || llvm::all_of(a.asArrayRef(), [&](int64_t v) { return v == value; });
  };
  return llvm::all_of(kernel, [](int64_t d) { return d == 1; }) && all("strides", 1) &&
         all("pads", 0);
}

void lowerConvolutions(func::FuncOp fn) {
  SmallVector<rt::KernelOp> convs;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "conv" && k.getOutputs().size() == 1 &&
        (k.getInputs().size() == 2 || k.getInputs().size() == 3))
      convs.push_back(k);
  });
  for (rt::KernelOp k : convs) {
    Value x = k.getInputs()[0], w = k.getInputs()[1], y = k.getOutputs()[0];
    Value bias = k.getInputs().size() > 2 ? k.getInputs()[2] : Value();
    ArrayRef<int64_t> xs = shapeOf(x), ws = shapeOf(w), ys = shapeOf(y);
    auto groupAttr = dyn_cast_or_null<IntegerAttr>(k.getParam("group"));
    int64_t group = groupAttr ? groupAttr.getInt() : 1;
    Type elem = elemOf(y);
    if (xs.size() < 3 || ws.size() != xs.size() || ys.size() != xs.size() || group < 1 ||
        xs[1] % group || ws[0] % group || elemOf(x) != elem || elemOf(w) != elem ||
        !isa<FloatType>(elem) || !y.getDefiningOp<rt::AllocOp>())
      continue; // left for the error that names it
    int64_t window = 1, positions = 1;
    for (int64_t d : ws.drop_front(2))
      window *= d;
    for (int64_t d : ys.drop_front(2))
      positions *= d;
    int64_t patch = (xs[1] / group) * window, n = xs[0], m = ws[0];
    OpBuilder b(k);
    Location loc = k.getLoc();
    auto colType = MemRefType::get({n, group, patch, positions}, elem);
    Value col;
    if (isPointwise(k, ws.drop_front(2))) {
      // A 1x1 window at stride 1 without padding: the patch matrix of an
      // image and group is its [C/G, positions] block of the input itself.
      col = rt::ViewOp::create(b, loc, colType, x);
    } else {
      col = rt::AllocOp::create(b, loc, colType, IntegerAttr());
      SmallVector<NamedAttribute> params(k.getParams().getValue());
      params.push_back(b.getNamedAttr("kernel_shape", b.getDenseI64ArrayAttr(ws.drop_front(2))));
      params.push_back(b.getNamedAttr("out_spatial", b.getDenseI64ArrayAttr(ys.drop_front(2))));
      if (!groupAttr)
        params.push_back(b.getNamedAttr("group", b.getI64IntegerAttr(1)));
      rt::KernelOp::create(b, loc, b.getStringAttr("im2col"), ValueRange{x}, ValueRange{col},
                           b.getDictionaryAttr(params));
    }
    Value wv = rt::ViewOp::create(b, loc, MemRefType::get({group, m / group, patch}, elem), w);
    auto product = rt::AllocOp::create(
        b, loc, MemRefType::get({n, group, m / group, positions}, elem), IntegerAttr());
    rt::KernelOp::create(b, loc, b.getStringAttr("matmul"), ValueRange{wv, col},
                         ValueRange{product}, b.getDictionaryAttr({}));
    Value result = rt::ViewOp::create(b, loc, cast<MemRefType>(y.getType()), product);
    if (bias) {
      SmallVector<int64_t> biasShape(ys.size() - 1, 1);
      biasShape[0] = m;
      Value bv = rt::ViewOp::create(b, loc, MemRefType::get(biasShape, elemOf(bias)), bias);
      rt::KernelOp::create(b, loc, b.getStringAttr("add"), ValueRange{result, bv}, ValueRange{y},
                           b.getDictionaryAttr({}));
      k.erase();
      continue;
    }
    Operation *alloc = y.getDefiningOp();
    y.replaceAllUsesWith(result);
    k.erase();
    if (alloc->use_empty())
      alloc->erase();
  }
}

struct CUDALowerConvolutions : cuda::impl::CUDALowerConvolutionsBase<CUDALowerConvolutions> {
  void runOnOperation() override { lowerConvolutions(getOperation()); }
};

} // namespace
