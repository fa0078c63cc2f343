//===- DistOps.h - dist dialect attributes and operations -----*- C++ -*-===//

#ifndef SHARDFLOW_DIALECT_DIST_IR_DISTOPS_H
#define SHARDFLOW_DIALECT_DIST_IR_DISTOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "shardflow/Dialect/Dist/IR/DistDialect.h"

#define GET_ATTRDEF_CLASSES
#include "shardflow/Dialect/Dist/IR/DistAttrs.h.inc"

#define GET_OP_CLASSES
#include "shardflow/Dialect/Dist/IR/DistOps.h.inc"

namespace shardflow::dist {

/// Attribute names used on nn programs before partitioning.
/// `dist.shardings` on an op: an array with one #dist.sharding per result.
inline constexpr llvm::StringLiteral kShardingsAttr = "dist.shardings";
/// `dist.sharding` on a function argument or result.
inline constexpr llvm::StringLiteral kShardingAttr = "dist.sharding";

/// The mesh `sharding` refers to, looked up from `from`; null with a
/// diagnostic on `from` when there is none.
MeshOp lookupMesh(mlir::Operation *from, mlir::FlatSymbolRefAttr mesh);

/// Checks `sharding` against a tensor type and its mesh: one entry per
/// dimension, axes of the mesh, no axis twice, and every split dimension
/// divisible by the product of its axes' sizes.
mlir::LogicalResult
verifySharding(ShardingAttr sharding, mlir::Type type, MeshOp mesh,
               llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// The per-rank shape of a tensor of `type` laid out as `sharding`.
mlir::RankedTensorType localType(mlir::RankedTensorType type,
                                 ShardingAttr sharding, MeshOp mesh);

} // namespace shardflow::dist

#endif // SHARDFLOW_DIALECT_DIST_IR_DISTOPS_H
