//===- FuseGemmEpilogues.cpp - bias and activation in the GEMM ------------===//
//
// A matmul whose result only a bias add reads ([N], the result's last
// dimension), and that add's result only a tanh gelu or a relu, becomes one
// matmul with cuBLASLt's epilogue (`bias`, `gelu_bias`, `relu_bias`): the
// product is written once, with the bias (and activation) applied. The
// matmul moves to the last op it absorbs, unless something in between may
// write one of its operands.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDAFUSEGEMMEPILOGUES
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

void fuseGemmEpilogues(func::FuncOp fn) {
  for (rt::KernelOp mm : plainMatmuls(fn)) {
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!isGemmType(elem) || shapeOf(product).size() < 2)
      continue;
    auto add = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!add || add.getKernel() != "add" || add.getInputs().size() != 2)
      continue;
    Value bias = add.getInputs()[0] == product ? add.getInputs()[1] : add.getInputs()[0];
    if (bias == product || shapeOf(bias).size() != 1 ||
        shapeOf(bias)[0] != shapeOf(product).back() || elemOf(bias) != elem ||
        shapeOf(add.getOutputs()[0]) != shapeOf(product) ||
        !add.getOutputs()[0].getDefiningOp<rt::AllocOp>())
      continue;
    StringRef epilogue = "bias";
    rt::KernelOp last = add;
    if (auto act = dyn_cast_or_null<rt::KernelOp>(soleReader(add.getOutputs()[0]));
        act && act.getInputs().size() == 1 && act.getInputs()[0] == add.getOutputs()[0] &&
        act.getOutputs()[0].getDefiningOp<rt::AllocOp>()) {
      StringAttr approx;
      if (act.getKernel() == "gelu")
        approx = dyn_cast_or_null<StringAttr>(act.getParam("approximate"));
      if (approx && approx.getValue() == "tanh") {
        epilogue = "gelu_bias"; // cuBLASLt's GELU is the tanh form
        last = act;
      } else if (act.getKernel() == "relu") {
        epilogue = "relu_bias";
        last = act;
      }
    }
    Value result = last.getOutputs()[0];
    // The matmul moves to `last`, where the bias is ready.
    if (writtenBetween(mm, last, mm.getInputs()))
      continue;
    OpBuilder b(last);
    rt::KernelOp::create(
        b, last.getLoc(), b.getStringAttr("matmul"),
        ValueRange{mm.getInputs()[0], mm.getInputs()[1], bias}, ValueRange{result},
        b.getDictionaryAttr({b.getNamedAttr("epilogue", b.getStringAttr(epilogue))}));
    SmallVector<Operation *> dead = {last.getOperation()};
    if (last != add) {
      dead.push_back(add);
      dead.push_back(add.getOutputs()[0].getDefiningOp());
    }
    dead.push_back(mm);
    dead.push_back(product.getDefiningOp());
    for (Operation *op : dead)
      op->erase();
  }
}

struct CUDAFuseGemmEpilogues : cuda::impl::CUDAFuseGemmEpiloguesBase<CUDAFuseGemmEpilogues> {
  void runOnOperation() override { fuseGemmEpilogues(getOperation()); }
};

} // namespace
