//===- AttentionGradWorkspace.cpp - attention_grad's row statistics -------===//
//
// The CUDA attention backward runs as two kernels: the first writes each
// query row's rowsum(P * dP), the second reads it (both read the forward's
// saved log-sum-exp). It lives in a workspace the program allocates: an
// f32 buffer of B x Hq x Sq values, the kernel's fourth output.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDAATTENTIONGRADWORKSPACE
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

LogicalResult addWorkspaces(func::FuncOp fn) {
  for (rt::KernelOp k : kernelsNamed(fn, "attention_grad")) {
    if (k.getOutputs().size() != 3 || k.getInputs().size() < 5)
      continue; // already has one, or left for the error that names it
    ArrayRef<int64_t> q = shapeOf(k.getInputs()[0]);
    auto headsAttr = dyn_cast_or_null<IntegerAttr>(k.getParam("q_num_heads"));
    int64_t rows;
    if (q.size() == 4)
      rows = q[0] * q[1] * q[2];
    else if (q.size() == 3 && headsAttr && headsAttr.getInt() > 0)
      rows = q[0] * q[1] * headsAttr.getInt();
    else
      return k.emitOpError("attention_grad needs a [B, H, S, D] query, or [B, S, H*D] with "
                           "q_num_heads");
    OpBuilder b(k);
    Value work = rt::AllocOp::create(b, k.getLoc(), MemRefType::get({rows}, b.getF32Type()),
                                     IntegerAttr());
    SmallVector<Value> outputs(k.getOutputs());
    outputs.push_back(work);
    rt::KernelOp::create(b, k.getLoc(), k.getKernelAttr(), k.getInputs(), outputs, k.getParams());
    k.erase();
  }
  return success();
}

struct CUDAAttentionGradWorkspace
    : cuda::impl::CUDAAttentionGradWorkspaceBase<CUDAAttentionGradWorkspace> {
  void runOnOperation() override {
    if (failed(addWorkspaces(getOperation())))
      signalPassFailure();
  }
};

} // namespace
