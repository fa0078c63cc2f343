//===- GemmTypes.h - what the CUDA runtime's GEMM multiplies ---*- C++ -*-===//
//
// The CUDA runtime runs `matmul` kernels with cuBLASLt, which it asks for
// f32, f16 and bf16 products only: the rt rewrites route other matmuls to
// generated code, and convert-rt-to-gpu refuses any left.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TARGET_CUDA_GEMMTYPES_H
#define SHARDFLOW_TARGET_CUDA_GEMMTYPES_H

#include "mlir/IR/Types.h"

namespace shardflow::cuda {

/// Element types cuBLASLt multiplies for the runtime.
inline bool isGemmType(mlir::Type t) { return t.isF32() || t.isF16() || t.isBF16(); }

} // namespace shardflow::cuda

#endif // SHARDFLOW_TARGET_CUDA_GEMMTYPES_H
