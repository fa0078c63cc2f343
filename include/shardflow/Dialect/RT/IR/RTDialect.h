//===- RTDialect.h - the rt dialect ---------------------------*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_RT_IR_RTDIALECT_H
#define SHARDFLOW_DIALECT_RT_IR_RTDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Dialect.h"

#include "shardflow/Dialect/RT/IR/RTOpsDialect.h.inc"

#endif // SHARDFLOW_DIALECT_RT_IR_RTDIALECT_H
