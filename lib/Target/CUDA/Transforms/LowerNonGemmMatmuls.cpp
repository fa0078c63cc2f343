//===- LowerNonGemmMatmuls.cpp - matmuls cuBLASLt cannot run --------------===//
//
// The runtime runs matmuls with cuBLASLt, which multiplies f32, f16 and
// bf16 only. A matmul of another element type (integers, f64) becomes the
// einsum it is, which convert-rt-to-gpu generates as loops (one thread per
// output element).
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

#include <string>

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDALOWERNONGEMMMATMULS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

void lowerNonGemmMatmuls(func::FuncOp fn) {
  SmallVector<rt::KernelOp> matmuls;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "matmul" && k.getInputs().size() == 2 && k.getOutputs().size() == 1 &&
        !isGemmType(elemOf(k.getOutputs()[0])))
      matmuls.push_back(k);
  });
  for (rt::KernelOp k : matmuls) {
    bool vecA = shapeOf(k.getInputs()[0]).size() == 1,
         vecB = shapeOf(k.getInputs()[1]).size() == 1;
    std::string eq = std::string(vecA ? "j" : "...ij") + "," + (vecB ? "j" : "...jk") + "->" +
                     (vecA && vecB ? "" : "...") + (vecA ? "" : "i") + (vecB ? "" : "k");
    if (vecA && vecB)
      eq = "j,j->";
    OpBuilder b(k);
    rt::KernelOp::create(b, k.getLoc(), b.getStringAttr("einsum"), k.getInputs(),
                         k.getOutputs(),
                         b.getDictionaryAttr({b.getNamedAttr("equation", b.getStringAttr(eq))}));
    k.erase();
  }
}

struct CUDALowerNonGemmMatmuls : cuda::impl::CUDALowerNonGemmMatmulsBase<CUDALowerNonGemmMatmuls> {
  void runOnOperation() override { lowerNonGemmMatmuls(getOperation()); }
};

} // namespace
