//===- FoldTransposes.cpp - transposed GEMM operands read in place ---------===//
//
// rt-fold-transposes-into-matmuls: a `transpose` that swaps the last two
// dimensions, read by a `matmul` or `gemm` as a matrix operand, becomes a
// flag of that kernel (`trans_a`, `trans_b`), and the copy goes when
// nothing else reads it. A training step's backward is where these come
// from: every linear layer's dX = dY W^T and dW = X^T dY, and attention's
// products with transposed probabilities and keys.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"

namespace shardflow::rt {
#define GEN_PASS_DEF_RTFOLDTRANSPOSESINTOMATMULS
#include "shardflow/Dialect/RT/Transforms/Passes.h.inc"
} // namespace shardflow::rt

using namespace mlir;
using namespace shardflow;

namespace {

int64_t rankOf(Value v) { return cast<MemRefType>(v.getType()).getRank(); }

/// The buffer `v` is a view of (or `v`).
Value rootOf(Value v) {
  while (auto view = v.getDefiningOp<rt::ViewOp>())
    v = view.getSource();
  return v;
}

/// Whether `k` is a transpose of the last two dimensions only.
bool swapsLastTwo(rt::KernelOp k) {
  if (k.getKernel() != "transpose" || k.getInputs().size() != 1 || k.getOutputs().size() != 1)
    return false;
  auto perm = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get("perm"));
  int64_t rank = rankOf(k.getInputs()[0]);
  if (!perm || int64_t(perm.size()) != rank || rank < 2)
    return false;
  for (int64_t d = 0; d < rank - 2; ++d)
    if (perm[d] != d)
      return false;
  return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
}

/// Whether an op strictly between `from` and `to` (one block) may write
/// the buffer `root` or a view of it. Kernels and collectives name what
/// they write; anything else with an operand on `root` counts as a write.
bool writtenBetween(Operation *from, Operation *to, Value root) {
  for (Operation *op = from->getNextNode(); op && op != to; op = op->getNextNode()) {
    if (auto k = dyn_cast<rt::KernelOp>(op)) {
      for (Value out : k.getOutputs())
        if (rootOf(out) == root)
          return true;
      continue;
    }
    if (isa<rt::AllocOp, rt::ViewOp, rt::WeightOp, rt::ConstantOp>(op))
      continue;
    for (Value operand : op->getOperands())
      if (rootOf(operand) == root)
        return true;
  }
  return false;
}

/// The flag that operand `index` of GEMM kernel `k` would take when read
/// transposed, or "" when it cannot be: matmul operands of rank >= 2 with
/// no flag or epilogue yet (the CUDA rewrites' forms are not the CPU's),
/// gemm's A and B.
StringRef flagFor(rt::KernelOp k, unsigned index) {
  if (index > 1)
    return "";
  StringRef flag = index == 0 ? "trans_a" : "trans_b";
  if (k.getKernel() == "gemm")
    return flag;
  if (k.getKernel() != "matmul" || k.getInputs().size() != 2)
    return "";
  if (rankOf(k.getInputs()[0]) < 2 || rankOf(k.getInputs()[1]) < 2)
    return "";
  DictionaryAttr params = k.getParams();
  if (params.get("trans_a") || params.get("trans_b") || params.get("epilogue") ||
      params.get("residual"))
    return "";
  return flag;
}

struct RTFoldTransposesIntoMatmulsPass
    : public rt::impl::RTFoldTransposesIntoMatmulsBase<RTFoldTransposesIntoMatmulsPass> {
  void runOnOperation() override {
    SmallVector<rt::KernelOp> transposes;
    getOperation().walk([&](rt::KernelOp k) {
      if (swapsLastTwo(k) && k.getOutputs()[0].getDefiningOp<rt::AllocOp>())
        transposes.push_back(k);
    });
    for (rt::KernelOp t : transposes)
      fold(t);
  }

  void fold(rt::KernelOp t) {
    Value source = t.getInputs()[0], copy = t.getOutputs()[0];
    Value root = rootOf(source);
    SmallVector<OpOperand *> reads;
    for (OpOperand &use : copy.getUses())
      if (use.getOwner() != t)
        reads.push_back(&use);
    for (OpOperand *use : reads) {
      auto k = dyn_cast<rt::KernelOp>(use->getOwner());
      if (!k || k->getBlock() != t->getBlock() || !t->isBeforeInBlock(k))
        continue;
      // Operand index among the kernel's inputs.
      unsigned index = use->getOperandNumber();
      if (index >= k.getInputs().size() || llvm::is_contained(k.getOutputs(), copy))
        continue;
      // The same buffer read twice (x^T x) folds only when both reads do.
      if (llvm::count(k.getInputs(), copy) != 1)
        continue;
      StringRef flag = flagFor(k, index);
      if (flag.empty() || writtenBetween(t, k, root))
        continue;
      bool was = false;
      if (auto attr = dyn_cast_or_null<BoolAttr>(k.getParams().get(flag)))
        was = attr.getValue();
      NamedAttrList params(k.getParams());
      params.set(flag, BoolAttr::get(k.getContext(), !was));
      k.setParamsAttr(params.getDictionary(k.getContext()));
      use->set(source);
    }
    if (llvm::all_of(copy.getUsers(), [&](Operation *user) { return user == t; })) {
      Operation *alloc = copy.getDefiningOp();
      t.erase();
      if (alloc->use_empty())
        alloc->erase();
    }
  }
};

} // namespace
