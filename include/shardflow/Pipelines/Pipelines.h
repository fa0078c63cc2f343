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

/// Pieces of the train and sharded phases, which pipelined training
/// (PipelineTraining.cpp) applies to each stage's programs: the sharding
/// seeds (dist-annotate with the options' mesh, shards and strategy),
/// nn-differentiate of result `loss` against `wrt`, and nn-optimizer of
/// the training flags (`gradNormSquared`: its grad-norm-squared option; a
/// pipeline stage's update then ties `stageTies` only, and trains every
/// gradient it is given: the stage's backward left the frozen ones out).
void buildShardingSeeds(mlir::OpPassManager &pm, const CompileOptions &options);
void buildDifferentiate(mlir::OpPassManager &pm, const CompileOptions &options,
                        llvm::StringRef loss, llvm::StringRef wrt);
void buildOptimizer(mlir::OpPassManager &pm, const CompileOptions &options,
                    llvm::StringRef loss, llvm::StringRef gradNormSquared,
                    llvm::ArrayRef<std::string> stageTies);

/// Registers `shardflow-compile` (every phase up to its compile-to option)
/// and `shardflow-<phase>` for each phase that has passes, each taking the
/// options of CompileOptions by shard-opt's flag names.
void registerCompilePipelines();

} // namespace shardflow

#endif // SHARDFLOW_PIPELINES_PIPELINES_H
