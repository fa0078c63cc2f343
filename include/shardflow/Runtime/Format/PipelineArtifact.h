//===- PipelineArtifact.h - a pipeline's stages and schedule ---*- C++ -*-===//
//
// What `shard-opt --mesh pp=N --target ...` writes: one artifact per stage
// (each an ordinary artifact over the ranks of one pp coordinate, the
// stage's sub-mesh), the schedule, and the whole batch's inputs and
// outputs. Line-oriented text, versioned by its first line:
//
//   shardflow-pipeline 1
//   target cpu
//   world-size 4              pp times each stage's ranks
//   pp 2
//   microbatches 2
//   schedule 1f1b
//   stage-ranks 0,1           each stage's pp coordinate
//   actions 0 0F0,0F1         each pp coordinate's actions, in order
//   actions 1 1F0,1F1
//   input input_ids i64 4x16  the whole batch (a stage's artifact reads
//   output logits f32 4x16x8   batch/M of it per run)
//   stage 0 lines 812         then that many lines: stage 0's artifact
//   ...
//   stage 1 lines 640
//   ...
//   end
//
// A training pipeline (`shard-opt --train`) says `training` after its
// outputs, and each stage's forward is followed by its other programs:
//
//   stage 0 backward lines 2210
//   stage 0 backward-input lines 1400     (zero-bubble schedules: I and W)
//   stage 0 backward-weight lines 900
//   stage 0 norm lines 40
//   stage 0 update lines 512
//
// World rank w runs the stages of pp coordinate w / R (R = world-size /
// pp) as rank w % R of their artifacts. A stage artifact's inputs are the
// graph inputs it reads (dimension 0 cut into M micro-batches) and the
// values earlier stages pass it, named `transfer:K`; its outputs are the
// transfers it passes on and the graph outputs it computes (concatenated
// over the micro-batches along dimension 0).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_FORMAT_PIPELINEARTIFACT_H
#define SHARDFLOW_RUNTIME_FORMAT_PIPELINEARTIFACT_H

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/PipelineSchedule.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace shardflow::runtime {

struct PipelineTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// A training stage's programs besides its forward (one micro-batch's: it
/// returns what the stage passes on, on the stage that computes the loss
/// `loss` (the micro-batch's, over M), and the activations the backward
/// reads, `activation:N`). They share the stage's state by name: the
/// weights, each trained weight's gradient accumulator (`NAME.grad_acc`)
/// and the optimizer's state.
struct PipelineStageTraining {
  /// One micro-batch's backward: reads the forward's activations, the
  /// graph inputs and received values it reads itself, and the gradients
  /// of what the stage passes on (`grad:transfer:K`); returns the
  /// gradients of what it was passed (`grad:transfer:K`); adds its
  /// weights' gradients into their accumulators.
  Artifact backward;
  /// With a schedule that splits the backward (zb-h1, zbv): its two parts.
  /// I returns the gradients of what the stage was passed and what W
  /// reads of its values (`backward:N`); W adds the weights' gradients.
  bool splitsBackward = false;
  Artifact backwardInput, backwardWeight;
  /// The squared 2-norm of the accumulated gradients this stage owns (a
  /// weight several stages read belongs to the first): output `grad_sq`.
  Artifact norm;
  /// The optimizer's step: inputs `loss` (the step's) and `grad_sq` (every
  /// stage's added); outputs loss, grad_norm, lr; zeroes the accumulators.
  Artifact update;
};

struct PipelineArtifact {
  static constexpr int kVersion = 1;
  std::string target = "cpu";
  int worldSize = 1;
  /// The schedule's name (or the schedule file's), for messages.
  std::string scheduleName;
  /// pp ranks, micro-batches, each stage's pp coordinate and each pp
  /// coordinate's actions (compute only, or with sends and receives).
  PipelineSchedule schedule;
  /// The whole batch's graph inputs and outputs.
  std::vector<PipelineTensor> inputs, outputs;
  /// One artifact per stage, over worldSize / pp ranks: its forward.
  std::vector<Artifact> stages;
  /// A training pipeline's other programs, one entry per stage (empty:
  /// forward-only).
  std::vector<PipelineStageTraining> training;

  bool trains() const { return !training.empty(); }

  /// Ranks per stage: worldSize / pp.
  int stageWorldSize() const { return worldSize / schedule.ranks; }
};

/// What one rank of a stage holds, in bytes (shard-opt --report's estimate;
/// shard-run --verbose measures the activations kept).
struct StageMemory {
  /// Weights only read (loaded by each program that reads them; counted
  /// once), trained weights, the optimizer's state (moments, step
  /// counter) and the gradient accumulators.
  size_t weights = 0, trained = 0, optimizerState = 0, accumulators = 0;
  /// What a micro-batch keeps from its forward to its backward (the
  /// activations the backward reads, and the inputs it reads itself), and
  /// the most micro-batches the schedule keeps at once.
  size_t activations = 0;
  int inFlight = 0;
  /// The activation arena the stage's programs share (the largest's; the
  /// stages of one rank share it too).
  size_t arenas = 0;

  size_t total() const {
    return weights + trained + optimizerState + accumulators + activations * size_t(inFlight) +
           arenas;
  }
};
StageMemory stageMemory(const PipelineArtifact &artifact, int stage);

/// Whether the file at `path` starts as a pipeline artifact does.
bool isPipelineArtifact(const std::string &path);

void writePipelineArtifact(const PipelineArtifact &artifact, std::ostream &os);
/// Parses and checks a pipeline artifact: the header, each stage's
/// artifact, and the schedule against the stages (simulated with its
/// sends and receives). Throws RuntimeError naming the file, the line (a
/// stage's lines as `FILE (stage K):LINE`) and the problem.
PipelineArtifact parsePipelineArtifact(const std::string &text, const std::string &path);
PipelineArtifact readPipelineArtifact(const std::string &path);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_FORMAT_PIPELINEARTIFACT_H
