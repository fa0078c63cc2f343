//===- ReshardPlanner.h - the collectives between two layouts --*- C++ -*-===//
//
// How one layout of a value becomes another with the least data moved
// (docs/sharding.md, "Reshards"): the plan is a list of collectives over
// mesh axes, its cost what a rank sends, and its emission the dist
// collectives on this rank's piece. dist-insert-reshards prices the
// alternatives with it; dist-partition emits the chosen ones; the planner
// will price whole shardings with it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_DIST_TRANSFORMS_RESHARDPLANNER_H
#define SHARDFLOW_DIALECT_DIST_TRANSFORMS_RESHARDPLANNER_H

#include "shardflow/Dialect/Dist/IR/Layout.h"
#include "shardflow/Runtime/Format/Artifact.h"

#include "mlir/IR/Builders.h"

namespace shardflow::dist {

/// One collective of a reshard: all_reduce, reduce_scatter, all_to_all,
/// all_gather, or a local slice (dist.all_slice). `dim` is the dimension
/// gathered, sliced or scattered (for all_to_all: the one split),
/// `otherDim` all_to_all's concatenated dimension.
struct ReshardStep {
  runtime::CollectiveKind kind;
  AxisList axes;
  int64_t dim;
  int64_t otherDim;
};

class ReshardPlanner {
public:
  explicit ReshardPlanner(MeshOp mesh) : mesh(mesh) {}

  /// The collectives that turn layout `from` into `to`, in order: partial
  /// sums first (reduce_scatter where the target splits the reduced axis
  /// next, else all_reduce), then splits moved between dimensions
  /// (all_to_all; a destination holding an unwanted split has it gathered
  /// first), then splits removed (all_gather), then splits added
  /// (all_slice). Fails when `to` has unreduced axes that `from` lacks.
  mlir::FailureOr<llvm::SmallVector<ReshardStep>> plan(const Layout &from,
                                                       const Layout &to) const;

  /// Bytes a rank sends for the reshard of a tensor of type `global`, as the
  /// collective cost model counts them (ring algorithms: all_reduce 2(n-1)/n
  /// of the buffer, the others (n-1)/n; a local slice is free). Huge when the
  /// reshard is impossible.
  double cost(const Layout &from, const Layout &to, mlir::RankedTensorType global) const;

  /// Emits the collectives that turn `local` (this rank's piece of a value
  /// laid out as `from`) into its piece under `to`. Fails with a diagnostic
  /// at `loc` for reshards that cannot be done (making a value partial).
  mlir::FailureOr<mlir::Value> emit(mlir::OpBuilder &b, mlir::Location loc, mlir::Value local,
                                    const Layout &from, const Layout &to) const;

private:
  mutable MeshOp mesh; // op handles are values; their accessors are not const
};

} // namespace shardflow::dist

#endif // SHARDFLOW_DIALECT_DIST_TRANSFORMS_RESHARDPLANNER_H
