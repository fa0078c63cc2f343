//===- NNDialect.cpp - the nn dialect --------------------------------------===//
//
// Registers the nn ops and materializes folded constants as nn.constant.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/IR/NNDialect.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace shardflow::nn;

#include "shardflow/Dialect/NN/IR/NNOpsDialect.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "shardflow/Dialect/NN/IR/NNOps.cpp.inc"
      >();
}

Operation *NNDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
