//===- DistDialect.h - the dist dialect -----------------------*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_DIST_IR_DISTDIALECT_H
#define SHARDFLOW_DIALECT_DIST_IR_DISTDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "shardflow/Dialect/Dist/IR/DistOpsDialect.h.inc"

#endif // SHARDFLOW_DIALECT_DIST_IR_DISTDIALECT_H
