//===- FusionGroups.h - rt kernels grouped into generated kernels -*- C++ -*-===//
//
// What convert-rt-to-gpu generates code for, and how it groups kernels
// into launches: which kernels are elementwise, row reductions, launches of
// their own or the runtime's, and the fusion groups formed over a
// function's kernel calls (FusionGroups.cpp says how).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_CONVERSION_RTTOGPU_FUSIONGROUPS_H
#define SHARDFLOW_LIB_CONVERSION_RTTOGPU_FUSIONGROUPS_H

#include "Emitter.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>
#include <optional>

namespace shardflow::rtgpu {

// How the CUDA target runs each kernel is the kernel signature table's
// (RTKernels.td: CudaImpl); these ask it.

/// Kernels the CUDA runtime implements itself (cuBLASLt, its attention
/// kernel, strided copies): they stay rt.kernel calls.
bool isRuntimeKernel(llvm::StringRef name);

/// Kernels generated as elementwise loops.
bool isElementwise(llvm::StringRef name);

/// Elementwise in its output, but reading its inputs at other positions
/// (a rotation partner, a pooling window, an im2col patch, a channel's
/// statistics): it reads buffers, never a fused producer's register
/// (except batch normalization's input, read at the element's own index).
bool readsNeighbours(llvm::StringRef name);

/// Where a row reduction's rows lie in its input: `rows` rows of `length`
/// elements `inner` apart (the reduced dimensions are one contiguous block
/// of axes; the rows enumerate the others in row-major order, which is
/// also the order of a reduction's results).
struct RowGeometry {
  int64_t rows = 0, length = 1, inner = 1;
  int64_t first = 0; // the first reduced axis
};

/// The geometry of `k` when it is a row reduction generated code handles:
/// softmax/log_softmax over one axis, layer/RMS norm over [axis, rank),
/// reduce_sum/mean/max of floats over a contiguous block of axes.
std::optional<RowGeometry> rowGeometry(rt::KernelOp k);

inline bool isRowReduction(rt::KernelOp k) { return rowGeometry(k).has_value(); }

/// A fusion group: kernels emitted as one generated kernel.
struct Group {
  enum class Kind { Loop, Row, Standalone } kind = Kind::Loop;
  /// Program order. A Row group's members are its prologue (elementwise
  /// producers of the row's input), the row kernel `row`, and its epilogue
  /// (elementwise consumers of the row's result, element for element).
  llvm::SmallVector<rt::KernelOp> members;
  rt::KernelOp row;
  llvm::SmallPtrSet<mlir::Operation *, 8> internal; // allocs (and views) that vanish
  int64_t iterations = 0; // Loop: elements of every member's output
  bool closed = false;
  /// sibling-fusion: earlier Loop groups launched with this one, each in
  /// its own range of blocks (program order); they are `absorbed`.
  llvm::SmallVector<Group *> siblings;
  bool absorbed = false;
};

/// Whether `v`'s buffer is one of the group's own: computed and read only
/// inside the generated kernel, it never exists in memory.
inline bool isInternal(const Group &g, mlir::Value v) {
  return g.internal.contains(rootOf(v).getDefiningOp());
}

/// The fusion groups of `fn`'s kernel calls, in the order they were
/// opened; an error naming the kernel when one has no CUDA implementation.
mlir::LogicalResult formGroups(mlir::func::FuncOp fn,
                               llvm::SmallVectorImpl<std::unique_ptr<Group>> &groups);

/// sibling-fusion: gives runs of neighbouring independent Loop groups to
/// the last of each run as its siblings.
void fuseSiblings(llvm::SmallVectorImpl<std::unique_ptr<Group>> &groups);

} // namespace shardflow::rtgpu

#endif // SHARDFLOW_LIB_CONVERSION_RTTOGPU_FUSIONGROUPS_H
