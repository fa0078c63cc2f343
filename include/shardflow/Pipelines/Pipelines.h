//===- Pipelines.h - the compile pipeline, phase by phase ------*- C++ -*-===//
//
// One place builds the compiler: the passes of each phase of a compile
// (CompileOptions.h lists the phases), from one CompileOptions. shard-opt
// runs them; lit runs them through the registered pass pipelines
// (`--pass-pipeline='builtin.module(shardflow-compile{compile-to=sharded
// mesh="dp=2,tp=2" strategy=megatron})'`) or through shard-opt's
// `--compile-to=PHASE`.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_PIPELINES_PIPELINES_H
#define SHARDFLOW_PIPELINES_PIPELINES_H

#include "shardflow/Pipelines/CompileOptions.h"

#include "mlir/Pass/PassManager.h"

namespace shardflow {

/// Adds the passes of `phase` alone: they take the program as the phase
/// before it leaves it. Import and Artifact add none (the importer and
/// emitArtifact() are not passes), nor do the reserved Train and Stages.
void buildPhasePipeline(mlir::OpPassManager &pm, CompilePhase phase,
                        const CompileOptions &options);

/// Adds every phase after Import up to options.lastPhase().
void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &options);

/// Registers `shardflow-compile` (every phase up to its compile-to option)
/// and `shardflow-<phase>` for each phase that has passes, each taking the
/// options of CompileOptions by shard-opt's flag names.
void registerCompilePipelines();

} // namespace shardflow

#endif // SHARDFLOW_PIPELINES_PIPELINES_H
