//===- RTOps.h - rt dialect operations ------------------------*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_RT_IR_RTOPS_H
#define SHARDFLOW_DIALECT_RT_IR_RTOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "shardflow/Dialect/RT/IR/RTDialect.h"

#define GET_OP_CLASSES
#include "shardflow/Dialect/RT/IR/RTOps.h.inc"

#endif // SHARDFLOW_DIALECT_RT_IR_RTOPS_H
