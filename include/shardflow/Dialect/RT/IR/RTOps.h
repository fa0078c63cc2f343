//===- RTOps.h - rt dialect operations ------------------------*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_RT_IR_RTOPS_H
#define SHARDFLOW_DIALECT_RT_IR_RTOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "shardflow/Dialect/RT/IR/RTDialect.h"
#include "shardflow/Runtime/Format/KernelSignature.h"

#define GET_OP_CLASSES
#include "shardflow/Dialect/RT/IR/RTOps.h.inc"

#include <string>

namespace shardflow::rt {
/// The ONNX node an operation came from: the first name in its location
/// (the importer names each op's location after its node; fused
/// operations carry several), or "" when it has none.
std::string onnxNodeName(mlir::Location loc);

/// The buffer a value's bytes belong to: through rt.view to the allocation
/// (or the argument, weight or constant) it views.
mlir::Value rootOf(mlir::Value v);

/// Every operation that reads `buffer`, through views (the views go to
/// `views`, not `readers`); a kernel that only writes it reads nothing.
void collectReaders(mlir::Value buffer, llvm::SmallVectorImpl<mlir::Operation *> &readers,
                    llvm::SmallVectorImpl<mlir::Operation *> &views);
} // namespace shardflow::rt

#endif // SHARDFLOW_DIALECT_RT_IR_RTOPS_H
