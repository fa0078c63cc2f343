//===- Training.h - shard-run --steps: the training loop -------*- C++ -*-===//
//
// An artifact compiled with `shard-opt --train` is one training step whose
// weights, optimizer moments and step counter are writable state that the
// device keeps between runs. The loop runs it on the --data batches until
// the step counter reaches --steps, printing progress on rank 0 (a live
// line on a terminal, a line per step otherwise), logging each step to
// --log as JSON lines, and writing the trained weights with
// --save-weights.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TOOLS_SHARD_RUN_TRAINING_H
#define SHARDFLOW_TOOLS_SHARD_RUN_TRAINING_H

#include "Options.h"
#include "Report.h"

#include "shardflow/Runtime/Core/PipelineRunner.h"
#include "shardflow/Runtime/Core/ProgramRunner.h"

namespace shardflow::runtime {

/// Whether `artifact` is a training step (it has writable state).
bool isTrainingStep(const Artifact &artifact);

/// Checks the training flags against the artifact before anything loads:
/// --steps and --data go with a training step and only with one.
void checkTrainingOptions(const Options &options, const Artifact &artifact);

/// Runs the steps; a collective call on the runner's world.
/// `report` is told of each step (--verbose, --profile; --trace records
/// them) and prints once the steps are done.
void train(const Options &options, ProgramRunner &runner, RunReport &report);

/// The same loop over a training pipeline's steps (PipelineRunner::step);
/// --verbose adds each local stage's peak of micro-batches in flight.
void trainPipeline(const Options &options, PipelineRunner &runner);

} // namespace shardflow::runtime

#endif // SHARDFLOW_TOOLS_SHARD_RUN_TRAINING_H
