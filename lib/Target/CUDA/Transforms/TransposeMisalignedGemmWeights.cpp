//===- TransposeMisalignedGemmWeights.cpp - aligned GEMM weights ----------===//
//
// A 2-D weight [K, N] that only matmuls read, as their B, whose rows
// are not 16-byte aligned (N elements of its type are not a multiple of
// 16 bytes: GPT-2's [768, 50257] vocabulary projection) while its columns
// would be, is stored transposed ([N, K], `permutation = [1, 0]`, applied
// once at load) and read with `trans_b`. cuBLASLt's fastest kernels
// (TMA on sm_90, 16-byte asynchronous copies on sm_80) need 16-byte
// aligned leading dimensions; the transposed operand has them, and the
// GEMM is the same "TN" form as a framework's [out, in] linear weight.
// A weight already loaded transposed (an ONNX Transpose of an
// initializer) is then loaded as stored.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDATRANSPOSEMISALIGNEDGEMMWEIGHTS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

void transposeMisalignedGemmWeights(func::FuncOp fn) {
  SmallVector<rt::WeightOp> weights(fn.getOps<rt::WeightOp>());
  for (rt::WeightOp w : weights) {
    auto type = cast<MemRefType>(w.getType());
    Type elem = type.getElementType();
    if (type.getRank() != 2 || !isGemmType(elem) || w->use_empty())
      continue;
    int64_t bytes = nn::getElementStorageBytes(elem), k = type.getDimSize(0),
            n = type.getDimSize(1);
    if ((n * bytes) % 16 == 0 || (k * bytes) % 16 != 0)
      continue;
    bool onlyGemmB = llvm::all_of(w->getUses(), [](OpOperand &use) {
      auto mm = dyn_cast<rt::KernelOp>(use.getOwner());
      return mm && mm.getKernel() == "matmul" && use.getOperandNumber() == 1 &&
             mm.getInputs().size() >= 2 && mm.getInputs()[0] != mm.getInputs()[1] &&
             !mm.getParam("trans_b");
    });
    if (!onlyGemmB)
      continue;
    OpBuilder b(w);
    auto perm = w.getPermutationAttr();
    if (perm && perm.asArrayRef()[0] == 1)
      w.removePermutationAttr(); // [1, 0] twice
    else
      w.setPermutationAttr(b.getDenseI64ArrayAttr({1, 0}));
    w.getResult().setType(MemRefType::get({n, k}, elem));
    SmallVector<Operation *> users(w->getUsers());
    for (Operation *user : users) {
      auto mm = cast<rt::KernelOp>(user);
      SmallVector<NamedAttribute> params(mm.getParams().getValue());
      params.push_back(b.getNamedAttr("trans_b", b.getBoolAttr(true)));
      mm.setParamsAttr(b.getDictionaryAttr(params));
    }
  }
}

struct CUDATransposeMisalignedGemmWeights
    : cuda::impl::CUDATransposeMisalignedGemmWeightsBase<CUDATransposeMisalignedGemmWeights> {
  void runOnOperation() override { transposeMisalignedGemmWeights(getOperation()); }
};

} // namespace
