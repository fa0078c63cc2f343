//===- NNDialect.cpp - the nn dialect --------------------------------------===//
//
// Registers the nn ops, folds an op whose operands are all constants with
// the constant evaluator (Evaluate.h: the CPU kernels) when the op has no
// folder of its own, and materializes folded constants as nn.constant.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/IR/NNDialect.h"
#include "shardflow/Dialect/NN/IR/Evaluate.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/Interfaces/FoldInterfaces.h"

using namespace mlir;
using namespace shardflow::nn;

#include "shardflow/Dialect/NN/IR/NNOpsDialect.cpp.inc"

namespace {
/// Called by Operation::fold after the op's own folder (views of
/// constants, identities) declines.
struct NNFoldInterface : DialectFoldInterface {
  using DialectFoldInterface::DialectFoldInterface;
  LogicalResult fold(Operation *op, ArrayRef<Attribute> operands,
                     SmallVectorImpl<OpFoldResult> &results) const final {
    return evaluate(op, operands, results);
  }
};
} // namespace

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "shardflow/Dialect/NN/IR/NNOps.cpp.inc"
      >();
  addInterfaces<NNFoldInterface>();
}

Operation *NNDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
