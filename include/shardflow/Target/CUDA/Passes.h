//===- Passes.h - the CUDA target's rt rewrites ---------------*- C++ -*-===//
//
// The passes that rewrite a bufferized rt program into the forms the CUDA
// target runs, and cuda-codegen-pipeline, which runs them and then
// convert-rt-to-gpu.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TARGET_CUDA_PASSES_H
#define SHARDFLOW_TARGET_CUDA_PASSES_H

#include "shardflow/Dialect/RT/IR/RTDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace shardflow::cuda {

#define GEN_PASS_DECL
#include "shardflow/Target/CUDA/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "shardflow/Target/CUDA/Passes.h.inc"

/// The CUDA target's rt-level code generation, each feature on by default
/// (off only to measure what it buys: shard-opt --cuda-disable).
struct CUDACodegenPipelineOptions : mlir::PassPipelineOptions<CUDACodegenPipelineOptions> {
  Option<bool> gemmEpilogues{*this, "gemm-epilogues",
                             llvm::cl::desc("Run cuda-fuse-gemm-epilogues"),
                             llvm::cl::init(true)};
  Option<bool> gemmResiduals{*this, "gemm-residuals",
                             llvm::cl::desc("Run cuda-fuse-gemm-residuals"),
                             llvm::cl::init(true)};
  Option<bool> gemmPadding{*this, "gemm-padding",
                           llvm::cl::desc("Run cuda-pad-misaligned-gemm-results"),
                           llvm::cl::init(true)};
  Option<bool> vectorize{*this, "vectorize",
                         llvm::cl::desc("convert-rt-to-gpu's vectorize: vector accesses of up "
                                        "to 16 bytes in generated kernels"),
                         llvm::cl::init(true)};
  Option<bool> siblingFusion{*this, "sibling-fusion",
                             llvm::cl::desc("convert-rt-to-gpu's sibling-fusion: independent "
                                            "neighbouring elementwise groups as one launch"),
                             llvm::cl::init(true)};
};

/// Adds, to a module pass manager, the rt rewrites in the order the CUDA
/// target runs them (rt-einsum-to-matmul, then this library's passes),
/// then convert-rt-to-gpu: a bufferized rt module becomes one whose
/// kernels are cuBLASLt GEMMs, runtime kernels and generated launches.
void buildCUDACodegenPipeline(mlir::OpPassManager &pm, const CUDACodegenPipelineOptions &options);

/// Registers buildCUDACodegenPipeline as `cuda-codegen-pipeline`.
void registerCUDACodegenPipeline();

} // namespace shardflow::cuda

#endif // SHARDFLOW_TARGET_CUDA_PASSES_H
