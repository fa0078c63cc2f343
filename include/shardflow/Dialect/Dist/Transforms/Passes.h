//===- Passes.h - dist dialect passes -------------------------*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_DIST_TRANSFORMS_PASSES_H
#define SHARDFLOW_DIALECT_DIST_TRANSFORMS_PASSES_H

#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace shardflow::dist {

#define GEN_PASS_DECL
#include "shardflow/Dialect/Dist/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "shardflow/Dialect/Dist/Transforms/Passes.h.inc"

} // namespace shardflow::dist

#endif // SHARDFLOW_DIALECT_DIST_TRANSFORMS_PASSES_H
