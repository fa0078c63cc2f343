//===- NNDialect.h - the nn dialect ---------------------------*- C++ -*-===//
//
// Declares the nn dialect: ONNX semantics on statically shaped tensors.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_IR_NNDIALECT_H
#define SHARDFLOW_DIALECT_NN_IR_NNDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "shardflow/Dialect/NN/IR/NNOpsDialect.h.inc"

#endif // SHARDFLOW_DIALECT_NN_IR_NNDIALECT_H
