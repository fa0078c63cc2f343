//===- RTDialect.cpp - the rt dialect and its verifiers --------------------===//

#include "shardflow/Dialect/RT/IR/RTDialect.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"

using namespace mlir;
using namespace shardflow::rt;

#include "shardflow/Dialect/RT/IR/RTOpsDialect.cpp.inc"

void RTDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "shardflow/Dialect/RT/IR/RTOps.cpp.inc"
      >();
}

LogicalResult ViewOp::verify() {
  auto from = getSource().getType(), to = getResult().getType();
  if (from.getElementType() != to.getElementType() ||
      from.getNumElements() != to.getNumElements())
    return emitOpError("cannot view ")
           << from << " as " << to
           << ": element type and count must stay the same";
  return success();
}

LogicalResult ConstantOp::verify() {
  auto value = cast<ShapedType>(getValue().getType());
  auto type = getResult().getType();
  if (value.getShape() != type.getShape() ||
      value.getElementType() != type.getElementType())
    return emitOpError("value of type ")
           << value << " does not match the buffer " << type;
  return success();
}

LogicalResult KernelOp::verify() {
  if (getOutputs().empty())
    return emitOpError("kernel '") << getKernel() << "' writes no outputs";
  for (Value out : getOutputs())
    if (llvm::is_contained(getInputs(), out))
      return emitOpError("kernel '")
             << getKernel() << "' reads and writes the same buffer";
  return success();
}

#define GET_OP_CLASSES
#include "shardflow/Dialect/RT/IR/RTOps.cpp.inc"
