//===- Layout.h - a sharding as per-dimension axis lists -------*- C++ -*-===//
//
// The passes reason about a value's sharding as a Layout: for each
// dimension the mesh axes it is split over, and the axes it is unreduced
// over (a partial sum). This header reads and writes the shardings
// attached to values, and turns a factor assignment of an op's sharding
// rule into tensor layouts.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_DIST_IR_LAYOUT_H
#define SHARDFLOW_DIALECT_DIST_IR_LAYOUT_H

#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/Dist/IR/ShardingRule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace shardflow::dist {

using AxisList = llvm::SmallVector<mlir::StringAttr, 2>;

/// The per-dimension axes and unreduced axes of a sharding, as plain lists.
struct Layout {
  llvm::SmallVector<AxisList> dims;
  AxisList unreduced;

  static Layout of(ShardingAttr sharding);
  static Layout replicated(int64_t rank) {
    Layout l;
    l.dims.resize(rank);
    return l;
  }
  ShardingAttr toAttr(mlir::MLIRContext *ctx, mlir::FlatSymbolRefAttr mesh) const;
  bool operator==(const Layout &other) const {
    return dims == other.dims && unreduced == other.unreduced;
  }
  bool operator!=(const Layout &other) const { return !(*this == other); }
};

/// The module's one mesh; a diagnostic and null when there is none or more
/// than one.
MeshOp getModuleMesh(mlir::ModuleOp module);

/// The sharding attached to `v`: `dist.shardings` of its defining op (a
/// dist.reshard or dist.constraint: its `sharding`), or `dist.sharding` of a
/// function argument. Null when there is none.
ShardingAttr getValueSharding(mlir::Value v);

/// `v`'s layout: its sharding, or replicated when it has none.
Layout getValueLayout(mlir::Value v);

/// Sets `dist.shardings` entry for an op result, or the argument attribute.
void setValueSharding(mlir::Value v, ShardingAttr sharding);

/// Axes assigned to each factor of a rule (empty: not sharded).
using FactorAxes = llvm::SmallVector<AxisList>;

/// Whether `f` may be sharded at all under `rule`: not NeedReplication and
/// never a minor factor of a compound dimension (its shards would not be
/// contiguous).
bool isShardableFactor(const ShardingRule &rule, int64_t f);

/// The layout of a tensor with `factors` when the rule's factors are split
/// as `assignment` (nothing unreduced).
Layout project(const TensorFactors &factors, const FactorAxes &assignment);

/// The product of the sizes of `axes` on `mesh`.
int64_t axesSize(MeshOp mesh, llvm::ArrayRef<mlir::StringAttr> axes);

/// Prints axes as ["a", "b"].
std::string axesText(llvm::ArrayRef<mlir::StringAttr> axes);

} // namespace shardflow::dist

#endif // SHARDFLOW_DIALECT_DIST_IR_LAYOUT_H
