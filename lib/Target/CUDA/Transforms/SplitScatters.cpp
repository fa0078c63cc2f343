//===- SplitScatters.cpp - scatter_nd as a copy and updates ---------------===//
//
// Every scatter_nd becomes a copy of its data (`identity`, an elementwise
// kernel, which fuses with the kernel that computes the data) followed by
// `scatter_nd_updates`, which writes the updates into the copy in place:
// a launch of its own, one thread per element of an update slice, taking
// the index tuples in order so that duplicates resolve as on the CPU.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDASPLITSCATTERS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

void splitScatters(func::FuncOp fn) {
  SmallVector<rt::KernelOp> scatters;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "scatter_nd" && k.getInputs().size() == 3 && k.getOutputs().size() == 1)
      scatters.push_back(k);
  });
  for (rt::KernelOp k : scatters) {
    Value data = k.getInputs()[0], out = k.getOutputs()[0];
    if (shapeOf(data) != shapeOf(out) || elemOf(data) != elemOf(out) ||
        elemOf(k.getInputs()[2]) != elemOf(out))
      continue; // left for the error that names it
    OpBuilder b(k);
    rt::KernelOp::create(b, k.getLoc(), b.getStringAttr("identity"), ValueRange{data},
                         ValueRange{out}, b.getDictionaryAttr({}));
    rt::KernelOp::create(b, k.getLoc(), b.getStringAttr("scatter_nd_updates"),
                         ValueRange{k.getInputs()[1], k.getInputs()[2]}, ValueRange{out},
                         k.getParams());
    k.erase();
  }
}

struct CUDASplitScatters : cuda::impl::CUDASplitScattersBase<CUDASplitScatters> {
  void runOnOperation() override { splitScatters(getOperation()); }
};

} // namespace
