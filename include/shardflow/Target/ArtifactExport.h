//===- ArtifactExport.h - rt programs into .shard artifacts ---*- C++ -*-===//
//
// Turns a planned rt module (after convert-nn-to-rt and rt-plan-memory)
// into the runtime's Artifact, the one definition of the .shard format
// (include/shardflow/Runtime/Format/Artifact.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TARGET_ARTIFACTEXPORT_H
#define SHARDFLOW_TARGET_ARTIFACTEXPORT_H

#include "shardflow/Runtime/Format/Artifact.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

namespace shardflow {

/// What the CUDA target's code generation does, each on by default (off
/// only to measure what it buys: shard-opt --cuda-disable).
struct CudaCodegenOptions {
  bool vectorAccesses = true; // convert-rt-to-gpu's vectorize
  bool packedQkv = true;      // nn-split-fused-projections' attention-in-place
  bool gemmEpilogues = true;  // convert-rt-to-gpu's gemm-epilogues
  bool gemmResiduals = true;  // convert-rt-to-gpu's gemm-residuals
  bool gemmPadding = true;    // convert-rt-to-gpu's gemm-padding
  bool siblingFusion = true;  // convert-rt-to-gpu's sibling-fusion
};

/// Adds the passes that lower an nn module to a planned rt module for
/// `target` ("cpu", or "cuda": generated GPU kernels called by rt.launch).
void buildLowerToRTPipeline(mlir::OpPassManager &pm, llvm::StringRef target = "cpu",
                            const CudaCodegenOptions &cuda = {});

/// Exports the module's `main` function. Emits a diagnostic and fails on
/// anything the artifact cannot express (unplanned buffers, attributes
/// of unknown kinds).
mlir::FailureOr<runtime::Artifact> exportArtifact(mlir::ModuleOp module,
                                                  llvm::StringRef target,
                                                  llvm::StringRef modelDir);

} // namespace shardflow

#endif // SHARDFLOW_TARGET_ARTIFACTEXPORT_H
