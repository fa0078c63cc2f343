//===- Utils.h - queries the CUDA rt rewrites share ------------*- C++ -*-===//
//
// Facts about buffers and kernel calls that several of the CUDA target's
// rt rewrites ask: which kernels a function calls, who reads a buffer,
// whether a GEMM may move past the ops between two points.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_TARGET_CUDA_TRANSFORMS_UTILS_H
#define SHARDFLOW_LIB_TARGET_CUDA_TRANSFORMS_UTILS_H

#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Target/CUDA/GemmTypes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallVector.h"

namespace shardflow::cuda {

inline llvm::ArrayRef<int64_t> shapeOf(mlir::Value v) {
  return mlir::cast<mlir::MemRefType>(v.getType()).getShape();
}
inline mlir::Type elemOf(mlir::Value v) {
  return mlir::cast<mlir::MemRefType>(v.getType()).getElementType();
}
inline int64_t numel(mlir::Value v) {
  return mlir::cast<mlir::MemRefType>(v.getType()).getNumElements();
}

/// The calls of runtime kernel `name` in `fn`, in program order (a copy:
/// the caller may rewrite them).
llvm::SmallVector<rt::KernelOp> kernelsNamed(mlir::func::FuncOp fn, llvm::StringRef name);

/// The one operation that reads `buffer` (through views), or null.
mlir::Operation *soleReader(mlir::Value buffer);

/// Whether an op strictly between `from` and `to` may write one of the
/// buffers `operands` belong to: a kernel writes its outputs; any other op
/// but allocations, views, weights and constants (a collective, which may
/// reduce in place, a receive) is taken to write every buffer it names.
/// A fusion that moves `from`'s work to `to` needs none to.
bool writtenBetween(mlir::Operation *from, mlir::Operation *to, mlir::ValueRange operands);

/// The matmuls of `fn` without an epilogue: two operands, one result, its
/// own buffer; the product's element type is that of both operands.
llvm::SmallVector<rt::KernelOp> plainMatmuls(mlir::func::FuncOp fn);

} // namespace shardflow::cuda

#endif // SHARDFLOW_LIB_TARGET_CUDA_TRANSFORMS_UTILS_H
