//===- ShardingUtils.h - shared helpers of the dist passes -----*- C++ -*-===//
//
// Reading and writing the shardings attached to values, and turning a
// factor assignment of an op's sharding rule into tensor shardings.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_DIALECT_DIST_TRANSFORMS_SHARDINGUTILS_H
#define SHARDFLOW_LIB_DIALECT_DIST_TRANSFORMS_SHARDINGUTILS_H

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

/// One collective of a reshard. `dim` is the dimension gathered, sliced or
/// scattered (for all_to_all: the one split), `otherDim` all_to_all's
/// concatenated dimension.
struct ReshardStep {
  enum Kind { AllReduce, ReduceScatter, AllToAll, AllGather, AllSlice } kind;
  AxisList axes;
  int64_t dim;
  int64_t otherDim;
};

/// The collectives that turn layout `from` into `to`, in order: partial
/// sums first (reduce_scatter where the target splits the reduced axis
/// next, else all_reduce), then splits moved between dimensions
/// (all_to_all; a destination holding an unwanted split has it gathered
/// first), then splits removed (all_gather), then splits added (all_slice).
/// Fails when `to` has unreduced axes that `from` lacks.
mlir::FailureOr<llvm::SmallVector<ReshardStep>>
planReshard(const Layout &from, const Layout &to, MeshOp mesh);

/// Bytes a rank sends for the reshard of a tensor of type `global` (ring
/// algorithms: all_reduce 2(n-1)/n of the buffer, the others (n-1)/n);
/// all_slice is free. Huge when the reshard is impossible.
double reshardCost(const Layout &from, const Layout &to,
                   mlir::RankedTensorType global, MeshOp mesh);

/// Emits the collectives that turn `local` (this rank's piece of a value
/// laid out as `from`) into its piece under `to`. Fails with a diagnostic
/// at `loc` for reshards that cannot be done (making a value partial).
mlir::FailureOr<mlir::Value> emitReshard(mlir::OpBuilder &b, mlir::Location loc,
                                         mlir::Value local, const Layout &from,
                                         const Layout &to, MeshOp mesh);

} // namespace shardflow::dist

#endif // SHARDFLOW_LIB_DIALECT_DIST_TRANSFORMS_SHARDINGUTILS_H
