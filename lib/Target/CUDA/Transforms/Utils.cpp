//===- Utils.cpp - queries the CUDA rt rewrites share ---------------------===//

#include "Utils.h"

using namespace mlir;
using namespace shardflow;

SmallVector<rt::KernelOp> shardflow::cuda::kernelsNamed(func::FuncOp fn, StringRef name) {
  SmallVector<rt::KernelOp> found;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == name)
      found.push_back(k);
  });
  return found;
}

Operation *shardflow::cuda::soleReader(Value buffer) {
  SmallVector<Operation *> readers, views;
  rt::collectReaders(buffer, readers, views);
  return readers.size() == 1 && views.empty() ? readers.front() : nullptr;
}

bool shardflow::cuda::writtenBetween(Operation *from, Operation *to, ValueRange operands) {
  llvm::SmallPtrSet<Value, 4> roots;
  for (Value v : operands)
    roots.insert(rt::rootOf(v));
  for (Operation *op = from->getNextNode(); op && op != to; op = op->getNextNode()) {
    if (isa<rt::AllocOp, rt::ViewOp, rt::WeightOp, rt::ConstantOp>(op))
      continue;
    auto k = dyn_cast<rt::KernelOp>(op);
    ValueRange written = k ? ValueRange(k.getOutputs()) : ValueRange(op->getOperands());
    if (llvm::any_of(written, [&](Value v) {
          return isa<MemRefType>(v.getType()) && roots.contains(rt::rootOf(v));
        }))
      return true;
  }
  return false;
}

SmallVector<rt::KernelOp> shardflow::cuda::plainMatmuls(func::FuncOp fn) {
  SmallVector<rt::KernelOp> matmuls;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "matmul" && k.getInputs().size() == 2 && k.getOutputs().size() == 1 &&
        k.getOutputs()[0].getDefiningOp<rt::AllocOp>() &&
        elemOf(k.getInputs()[0]) == elemOf(k.getOutputs()[0]) &&
        elemOf(k.getInputs()[1]) == elemOf(k.getOutputs()[0]))
      matmuls.push_back(k);
  });
  return matmuls;
}
