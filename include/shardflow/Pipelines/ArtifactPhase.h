//===- ArtifactPhase.h - the last phase: the .shard file -------*- C++ -*-===//
//
// The artifact phase is not a pass: it reads the compiled rt program and
// writes files. It exports the program (Target/ArtifactExport.h), compiles
// the generated GPU kernels for CUDA (Target/DeviceCode.h), writes the
// weights that cannot be mapped in place next to the artifact and records
// the weights' checksums (Target/WeightFiles.h), then writes the artifact.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_PIPELINES_ARTIFACTPHASE_H
#define SHARDFLOW_PIPELINES_ARTIFACTPHASE_H

#include "shardflow/Pipelines/CompileOptions.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace shardflow {

/// Where the program came from and where the artifact goes.
struct ArtifactPaths {
  /// The model (or MLIR) file compiled, "-" for stdin: weight files are
  /// found next to it unless shard-run is told otherwise (--weights).
  std::string inputFile;
  /// Whether inputFile is an ONNX model, which side weights are read from.
  bool fromONNX = false;
  /// The artifact, "-" for stdout (then without side weights or checksums).
  std::string outputFile = "-";
};

/// Writes the artifact of `module`, compiled through the rt (CPU) or gpu
/// (CUDA) phase for `options.target`; a module with pipeline stages
/// (`dist.pipeline`, compiled through the stages phase) goes to
/// emitPipelineArtifact. Errors are diagnostics.
mlir::LogicalResult emitArtifact(mlir::ModuleOp module, const CompileOptions &options,
                                 const ArtifactPaths &paths, llvm::raw_ostream *report = nullptr);

/// Compiles each stage function of `module` (the stages phase's output) as
/// a program of its own through the rt and gpu phases, exports it, and
/// writes the pipeline artifact (Runtime/Format/PipelineArtifact.h): the
/// stages' artifacts, the schedule, the whole batch's inputs and outputs.
/// A stage's side weights go to OUTPUT.stageK.weights. With `report`,
/// each stage's layers, estimated time and per-rank report
/// (printRankReport) go there.
mlir::LogicalResult emitPipelineArtifact(mlir::ModuleOp module, const CompileOptions &options,
                                         const ArtifactPaths &paths,
                                         llvm::raw_ostream *report = nullptr);

} // namespace shardflow

#endif // SHARDFLOW_PIPELINES_ARTIFACTPHASE_H
