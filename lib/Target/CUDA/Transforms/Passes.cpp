//===- Passes.cpp - the CUDA target's rt-level pipeline -------------------===//
//
// cuda-codegen-pipeline: the order in which the CUDA target rewrites a
// bufferized rt program before convert-rt-to-gpu generates its kernels.
// Einsums that are matmuls become matmuls first, so the GEMM rewrites see
// them; convolutions become GEMMs before the GEMM rewrites, which see their
// matmuls too; epilogues fold before residuals (a residual rides on a
// `bias` epilogue), and both before the output cast, transposition and
// padding rewrites, which take plain matmuls only.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Target/CUDA/Passes.h"

#include "shardflow/Conversion/Passes.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace shardflow;

void shardflow::cuda::buildCUDACodegenPipeline(OpPassManager &pm,
                                               const CUDACodegenPipelineOptions &options) {
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(rt::createRTEinsumToMatmul());
  fn.addPass(createCUDAReadAttentionInputsInPlace());
  fn.addPass(createCUDALowerConvolutions());
  fn.addPass(createCUDALowerNonGemmMatmuls());
  fn.addPass(createCUDASplitScatters());
  fn.addPass(createCUDAPrecomputeDropoutMasks());
  fn.addPass(createCUDASplitNormalizationScaleGrads());
  fn.addPass(createCUDAKeyedDropoutStarts());
  fn.addPass(createCUDAAttentionGradWorkspace());
  if (options.gemmEpilogues)
    fn.addPass(createCUDAFuseGemmEpilogues());
  if (options.gemmResiduals)
    fn.addPass(createCUDAFuseGemmResiduals());
  fn.addPass(createCUDAFuseGemmOutputCasts());
  fn.addPass(createCUDATransposeMisalignedGemmWeights());
  if (options.gemmPadding)
    fn.addPass(createCUDAPadMisalignedGemmResults());
  ConvertRTToGPUOptions gpu;
  gpu.vectorize = options.vectorize;
  gpu.siblingFusion = options.siblingFusion;
  pm.addPass(createConvertRTToGPU(gpu));
}

void shardflow::cuda::registerCUDACodegenPipeline() {
  PassPipelineRegistration<CUDACodegenPipelineOptions>(
      "cuda-codegen-pipeline",
      "The CUDA target's rt rewrites, then convert-rt-to-gpu: a bufferized rt module "
      "becomes one of cuBLASLt GEMMs, runtime kernels and generated launches",
      buildCUDACodegenPipeline);
}
