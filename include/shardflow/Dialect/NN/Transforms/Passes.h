//===- Passes.h - nn dialect passes ---------------------------*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_NN_TRANSFORMS_PASSES_H
#define SHARDFLOW_DIALECT_NN_TRANSFORMS_PASSES_H

#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace shardflow::nn {

#define GEN_PASS_DECL
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"

} // namespace shardflow::nn

#endif // SHARDFLOW_DIALECT_NN_TRANSFORMS_PASSES_H
