//===- PipelineTraining.h - a training pipeline's stage programs -*- C++ -*-===//
//
// `shard-opt --mesh pp=N --train`: the stages phase cuts the forward program
// and its loss into stage functions; the artifact phase makes each one the
// programs a training stage runs (Runtime/Format/PipelineArtifact.h): its
// forward (which returns the activations its backward reads), its
// backward (the gradients of one micro-batch, added into accumulators; for
// a zero-bubble schedule also cut into I and W), the norm of its
// gradients and its optimizer step. PipelineTraining.cpp says how.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_PIPELINES_PIPELINETRAINING_H
#define SHARDFLOW_PIPELINES_PIPELINETRAINING_H

#include "shardflow/Pipelines/CompileOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringSet.h"

#include <string>
#include <vector>

namespace shardflow {

/// An initializer a stage trains.
struct TrainedWeight {
  std::string weight;
  /// The state its gradient is added into: `NAME.grad_acc`, NAME the
  /// weight or, for a tied copy, its source.
  std::string accumulator;
  /// A tied copy: its source, and whether it holds it transposed.
  std::string tiedTo;
  bool flipped = false;
};

/// One stage's programs, compiled through the rt (and gpu) phases.
struct TrainingStagePrograms {
  mlir::OwningOpRef<mlir::ModuleOp> forward, backward, norm, update;
  /// With splitBackward: the backward's I and W parts.
  mlir::OwningOpRef<mlir::ModuleOp> backwardInput, backwardWeight;
  std::vector<TrainedWeight> trained;
  /// The initializers --freeze / --trainable leave alone.
  std::vector<std::string> frozen;
};

/// A module of `parent`'s (the stages phase's output) with stage function
/// `fn` alone, as @main.
mlir::OwningOpRef<mlir::ModuleOp> stageModule(mlir::ModuleOp parent, mlir::func::FuncOp fn);

/// Builds and compiles stage function `stageFn` of `module` (the stages
/// phase's output) as a training stage over `microbatches` micro-batches
/// (`splitBackward`: with the backward's I and W parts too, for a schedule
/// that runs them).
/// `counted`: the accumulators earlier stages' norms count (one several
/// stages hold is counted by the first); the stage adds its own.
mlir::FailureOr<TrainingStagePrograms>
buildTrainingStage(mlir::ModuleOp module, mlir::func::FuncOp stageFn,
                   const CompileOptions &options, int64_t microbatches, bool splitBackward,
                   llvm::StringSet<> &counted);

} // namespace shardflow

#endif // SHARDFLOW_PIPELINES_PIPELINETRAINING_H
