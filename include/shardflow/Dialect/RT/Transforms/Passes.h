//===- Passes.h - rt dialect passes ---------------------------*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_RT_TRANSFORMS_PASSES_H
#define SHARDFLOW_DIALECT_RT_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace shardflow::rt {

#define GEN_PASS_DECL
#include "shardflow/Dialect/RT/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "shardflow/Dialect/RT/Transforms/Passes.h.inc"

/// Two-operand f32/f16/bf16 einsums that are matmuls become them, in `fn`
/// (what rt-einsum-to-matmul does).
void rewriteEinsumsAsMatmuls(mlir::func::FuncOp fn);

} // namespace shardflow::rt

#endif // SHARDFLOW_DIALECT_RT_TRANSFORMS_PASSES_H
