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

namespace shardflow {

/// Exports the module's `main` function. Emits a diagnostic and fails on
/// anything the artifact cannot express (unplanned buffers, attributes
/// of unknown kinds).
mlir::FailureOr<runtime::Artifact> exportArtifact(mlir::ModuleOp module,
                                                  llvm::StringRef target,
                                                  llvm::StringRef modelDir);

} // namespace shardflow

#endif // SHARDFLOW_TARGET_ARTIFACTEXPORT_H
