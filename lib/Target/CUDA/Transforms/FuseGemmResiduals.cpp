//===- FuseGemmResiduals.cpp - the residual add as the GEMM's C -----------===//
//
// A matmul of a 2-D B (one GEMM: A's batch folds into M), plain or with
// the bias epilogue, whose result only an add of another buffer of its
// shape reads (a transformer's residual stream, `x + attn(x)`), takes that
// buffer as cuBLASLt's C (`residual`: the last input, added with beta 1
// before the bias) and writes the sum itself: the product is neither
// written nor read again. The matmul moves to the add, where the residual
// is ready, unless something in between may write one of its operands.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDAFUSEGEMMRESIDUALS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

void fuseGemmResiduals(func::FuncOp fn) {
  for (rt::KernelOp mm : kernelsNamed(fn, "matmul")) {
    auto epilogue = dyn_cast_or_null<StringAttr>(mm.getParam("epilogue"));
    bool bias = epilogue && epilogue.getValue() == "bias";
    if ((epilogue && !bias) || mm.getParams().size() != (epilogue ? 1 : 0) ||
        mm.getInputs().size() != (bias ? 3u : 2u) || mm.getOutputs().size() != 1)
      continue;
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!isGemmType(elem) || elemOf(mm.getInputs()[0]) != elem ||
        shapeOf(mm.getInputs()[1]).size() != 2 || !product.getDefiningOp<rt::AllocOp>())
      continue;
    auto add = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!add || add.getKernel() != "add" || add.getInputs().size() != 2 ||
        add.getOutputs().size() != 1)
      continue;
    Value residual = add.getInputs()[0] == product ? add.getInputs()[1] : add.getInputs()[0];
    Value result = add.getOutputs()[0];
    if (residual == product || shapeOf(residual) != shapeOf(product) ||
        elemOf(residual) != elem || shapeOf(result) != shapeOf(product) ||
        elemOf(result) != elem || !result.getDefiningOp<rt::AllocOp>())
      continue;
    // Nothing between the two may write what the matmul reads.
    if (writtenBetween(mm, add, mm.getInputs()))
      continue;
    SmallVector<Value> inputs(mm.getInputs());
    inputs.push_back(residual);
    NamedAttrList params(mm.getParams());
    OpBuilder b(add);
    params.set("residual", b.getBoolAttr(true));
    rt::KernelOp::create(b, add.getLoc(), b.getStringAttr("matmul"), inputs, ValueRange{result},
                         params.getDictionary(b.getContext()));
    add.erase();
    mm.erase();
    product.getDefiningOp()->erase();
  }
}

struct CUDAFuseGemmResiduals : cuda::impl::CUDAFuseGemmResidualsBase<CUDAFuseGemmResiduals> {
  void runOnOperation() override { fuseGemmResiduals(getOperation()); }
};

} // namespace
