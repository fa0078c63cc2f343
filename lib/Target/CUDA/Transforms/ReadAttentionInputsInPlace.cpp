//===- ReadAttentionInputsInPlace.cpp - packed QKV read in place ----------===//
//
// A split along the last dimension of a [B, S, W] buffer whose three
// pieces only one attention reads, as its query, key and value
// (nn-split-fused-projections leaves GPT-2's fused QKV so): the attention
// reads the pieces where they are, the buffer passed three times with
// `packed_qkv` giving the pieces' widths (the runtime offsets the
// pointers and steps rows by W), and the split's copy disappears.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDAREADATTENTIONINPUTSINPLACE
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

void readAttentionInputsInPlace(func::FuncOp fn) {
  for (rt::KernelOp split : kernelsNamed(fn, "split")) {
    if (split.getInputs().size() != 1 || split.getOutputs().size() != 3)
      continue;
    Value fused = split.getInputs()[0];
    ArrayRef<int64_t> shape = shapeOf(fused);
    auto axis = dyn_cast_or_null<IntegerAttr>(split.getParam("axis"));
    if (shape.size() != 3 || !axis || (axis.getInt() != 2 && axis.getInt() != -1))
      continue;
    rt::KernelOp attention;
    bool ok = true;
    for (auto [i, piece] : llvm::enumerate(split.getOutputs())) {
      // Used twice: written by the split, read by the attention (no view).
      Operation *other = nullptr;
      int uses = 0;
      for (Operation *user : piece.getUsers())
        if (user != split)
          other = user, ++uses;
      auto reader = uses == 1 ? dyn_cast<rt::KernelOp>(other) : rt::KernelOp();
      ok = ok && piece.getDefiningOp<rt::AllocOp>() && reader &&
           reader.getKernel() == "attention" && (!attention || reader == attention) &&
           reader.getInputs().size() > i && reader.getInputs()[i] == piece;
      attention = reader;
    }
    if (!ok)
      continue;
    SmallVector<int64_t> widths;
    for (Value piece : split.getOutputs())
      widths.push_back(shapeOf(piece)[2]);
    SmallVector<Value> inputs(attention.getInputs());
    for (int i = 0; i < 3; ++i)
      inputs[i] = fused;
    OpBuilder b(attention);
    NamedAttrList params(attention.getParams());
    params.set("packed_qkv", b.getDenseI64ArrayAttr(widths));
    attention.getInputsMutable().assign(inputs);
    attention.setParamsAttr(params.getDictionary(b.getContext()));
    SmallVector<Value> pieces(split.getOutputs());
    split.erase();
    for (Value piece : pieces)
      piece.getDefiningOp()->erase();
  }
}

struct CUDAReadAttentionInputsInPlace
    : cuda::impl::CUDAReadAttentionInputsInPlaceBase<CUDAReadAttentionInputsInPlace> {
  void runOnOperation() override { readAttentionInputsInPlace(getOperation()); }
};

} // namespace
