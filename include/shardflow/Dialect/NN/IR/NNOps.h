//===- NNOps.h - nn dialect operations ------------------------*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_NN_IR_NNOPS_H
#define SHARDFLOW_DIALECT_NN_IR_NNOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "shardflow/Dialect/NN/IR/NNDialect.h"
#include "shardflow/Dialect/NN/IR/NNTraits.h"

namespace shardflow::nn {

/// Bytes one element takes in ONNX storage and in our buffers (i1: 1 byte).
int64_t getElementStorageBytes(mlir::Type elementType);
/// Bytes of a statically shaped integer or float tensor.
std::optional<int64_t> getTensorStorageBytes(mlir::ShapedType type);

/// An einsum equation split into per-operand label strings; '.' stands for
/// an ellipsis. The output is explicit or derived as ONNX specifies.
struct EinsumEquation {
  llvm::SmallVector<std::string> inputs;
  std::string output;
};
mlir::FailureOr<EinsumEquation> parseEinsumEquation(llvm::StringRef equation,
                                                    size_t numInputs,
                                                    std::string &why);

} // namespace shardflow::nn

#define GET_OP_CLASSES
#include "shardflow/Dialect/NN/IR/NNOps.h.inc"

#endif // SHARDFLOW_DIALECT_NN_IR_NNOPS_H
