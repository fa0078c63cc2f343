//===- FuseGemmOutputCasts.cpp - f32 results of half-precision GEMMs ------===//
//
// A plain f16 or bf16 matmul whose result only a cast to f32 reads, where
// no kernel reads the cast's result (it is returned, or only collectives
// read it: the logits of a `--dtype bf16` program), writes f32 directly:
// cuBLASLt accumulates in f32 and rounds once to the output type, so the
// half-precision product is neither written nor read again, and the
// result is rounded once instead of twice. A cast that a generated kernel
// reads is left alone: it fuses into that kernel, which then reads the
// narrower product.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDAFUSEGEMMOUTPUTCASTS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

void fuseGemmOutputCasts(func::FuncOp fn) {
  for (rt::KernelOp mm : plainMatmuls(fn)) {
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!(elem.isBF16() || elem.isF16()))
      continue;
    auto cast = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!cast || cast.getKernel() != "cast" || cast.getInputs().size() != 1 ||
        cast.getInputs()[0] != product || cast.getOutputs().size() != 1)
      continue;
    Value result = cast.getOutputs()[0];
    auto resultAlloc = result.getDefiningOp<rt::AllocOp>();
    if (!resultAlloc || !elemOf(result).isF32() || shapeOf(result) != shapeOf(product))
      continue;
    SmallVector<Operation *> readers, views;
    rt::collectReaders(result, readers, views);
    if (llvm::any_of(readers, [](Operation *op) { return isa<rt::KernelOp>(op); }))
      continue;
    // The matmul stays where it was (an in-place collective between it and
    // the cast may write one of its operands); the result's buffer is
    // allocated before it.
    if (mm->isBeforeInBlock(resultAlloc))
      resultAlloc->moveBefore(mm);
    OpBuilder b(mm);
    rt::KernelOp::create(b, mm.getLoc(), b.getStringAttr("matmul"), mm.getInputs(),
                         ValueRange{result}, mm.getParamsAttr());
    Operation *alloc = product.getDefiningOp();
    cast.erase();
    mm.erase();
    alloc->erase();
  }
}

struct CUDAFuseGemmOutputCasts : cuda::impl::CUDAFuseGemmOutputCastsBase<CUDAFuseGemmOutputCasts> {
  void runOnOperation() override { fuseGemmOutputCasts(getOperation()); }
};

} // namespace
