//===- GroupEmitter.h - a fusion group as a generated kernel ----*- C++ -*-===//
//
// Emits one fusion group (with its siblings) as a gpu.func in
// `gpu.module @shardflow_kernels` and replaces its members by the
// rt.launch that calls it, where the group's last member stood.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_CONVERSION_RTTOGPU_GROUPEMITTER_H
#define SHARDFLOW_LIB_CONVERSION_RTTOGPU_GROUPEMITTER_H

#include "FusionGroups.h"
#include "KernelEmitter.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace shardflow::rtgpu {

/// The module that holds every generated kernel.
constexpr llvm::StringLiteral kModuleName = "shardflow_kernels";

class GroupEmitter {
public:
  /// With `vectorize`, each thread takes up to 16 bytes of consecutive
  /// elements (laneCount).
  explicit GroupEmitter(bool vectorize) : vectorize(vectorize) {}

  /// Emits group `g` and its siblings as kernel number `id` of `module`
  /// (its name: k<id>_ and its members' kernels) and replaces the members
  /// by its launch; an empty group is erased without a launch.
  mlir::LogicalResult emitGroup(Group &g, mlir::gpu::GPUModuleOp module, int id);

private:
  /// Values of a Loop group's members at the `width` consecutive flat
  /// indices from `base` (a multiple of `width`); stores the outputs that
  /// leave the group when `store` is set.
  mlir::LogicalResult emitLoopBody(KernelEmitter &e, llvm::ArrayRef<rt::KernelOp> members,
                                   const Group &g, mlir::Value base, int64_t width,
                                   llvm::DenseMap<mlir::Value, mlir::Value> &args,
                                   llvm::DenseMap<mlir::Value, Lanes> &values, bool store);
  /// How many consecutive elements one thread takes in a group whose
  /// threads split `elements` (a Loop group's iterations, a row's length)
  /// into equal runs: as many as fit in 16 bytes of the group's narrowest
  /// element type (at most 8), halved until they divide `elements`; 1
  /// without `vectorize`, or when a buffer holds booleans or other types
  /// narrower than a byte.
  int64_t laneCount(const Group &g, int64_t elements) const;
  /// The body of a Row group: its prologue, the row reduction and its
  /// epilogue, one block or one warp per row.
  mlir::FailureOr<mlir::Value> emitRowBody(KernelEmitter &e, Group &g,
                                           llvm::DenseMap<mlir::Value, mlir::Value> &args);

  bool vectorize;
};

} // namespace shardflow::rtgpu

#endif // SHARDFLOW_LIB_CONVERSION_RTTOGPU_GROUPEMITTER_H
