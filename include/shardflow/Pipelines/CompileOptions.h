//===- CompileOptions.h - what one compile is asked to do -----*- C++ -*-===//
//
// Everything that decides the compile pipeline, in one struct: the target,
// the raising passes, the compute type, the sharding seeds and presets, the
// CUDA code generation features, and the phase to stop after. shard-opt
// fills it from its command line (CommandLine.h), the registered pass
// pipelines from their options (Pipelines.h), and the planner will fill it
// from its search; Pipelines.cpp builds the passes from it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_PIPELINES_COMPILEOPTIONS_H
#define SHARDFLOW_PIPELINES_COMPILEOPTIONS_H

#include "shardflow/Runtime/Format/PipelineSchedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace shardflow {

/// The phases of a compile, in order. Each leaves the program in a form of
/// its own (docs/architecture.md "The compile pipeline"); `--compile-to`
/// stops after one of them.
enum class CompilePhase {
  Import,      ///< nn as imported (or as parsed, for MLIR input)
  NN,          ///< after raising exporter idioms to first-class nn ops
  Train,       ///< with --train: loss, autodiff and the optimizer's update
  Sharded,     ///< every value's sharding decided (global program, dist attributes)
  Partitioned, ///< per-rank nn program with collectives, in the compute type
  Stages,      ///< with a pp axis: the pipeline's stage functions and schedule
  RT,          ///< bufferized rt program (memory planned on the CPU target)
  GPU,         ///< CUDA only: generated kernels, GEMM rewrites, memory planned
  Artifact,    ///< the .shard file (not IR)
};

/// "import", "nn", ...; the names `--compile-to` takes.
llvm::StringRef getPhaseName(CompilePhase phase);
std::optional<CompilePhase> parsePhase(llvm::StringRef name);
/// Every phase name, comma-separated, for messages and --help.
std::string listPhaseNames();

/// CUDA code generation features, each on by default; `--cuda-disable`
/// turns one off to measure what it buys.
struct CudaCodegenOptions {
  /// Generated kernels load and store up to 16 bytes per thread
  /// (convert-rt-to-gpu's vectorize).
  bool vectorAccesses = true;
  /// A fused QKV projection stays one GEMM whose pieces the attention reads
  /// in place (nn-split-fused-projections' attention-in-place).
  bool packedQkv = true;
  /// Bias adds and a following gelu or relu in the cuBLASLt GEMM.
  bool gemmEpilogues = true;
  /// A residual add after a GEMM as the GEMM's C.
  bool gemmResiduals = true;
  /// GEMM results with misaligned rows written into aligned, padded rows.
  bool gemmPadding = true;
  /// Independent neighbouring elementwise kernels as one launch.
  bool siblingFusion = true;

  bool allEnabled() const {
    return vectorAccesses && packedQkv && gemmEpilogues && gemmResiduals && gemmPadding &&
           siblingFusion;
  }
};

/// A training step (phase train): the loss, what differentiates, and the
/// optimizer with PyTorch's semantics and defaults (nn-append-loss,
/// nn-differentiate, nn-optimizer).
struct TrainOptions {
  bool enabled = false;
  /// cross-entropy, mse, or output:NAME (a scalar output of the model).
  std::string loss = "cross-entropy";
  std::string labels = "labels";
  int64_t ignoreIndex = -100;
  std::string optimizer = "adamw"; ///< sgd, adamw
  double lr = 1e-3;
  double momentum = 0;
  bool nesterov = false;
  /// Unset: the optimizer's default (sgd 0, adamw 1e-2).
  std::optional<double> weightDecay;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clipGradNorm = 0; ///< 0: no clipping
  int64_t warmupSteps = 0;
  std::string schedule = "constant"; ///< constant, linear, cosine
  int64_t totalSteps = 0;
  double minLr = 0;
  std::vector<std::string> noDecay; ///< initializer name globs
  std::vector<std::string> freeze, trainable; ///< initializer name globs
  /// Tied initializers, COPY=SOURCE or COPY=SOURCE^T: declared (--tie)
  /// and found by the driver (same bytes up to a transpose).
  std::vector<std::string> ties;
  /// Look for tied initializers in the ONNX model (--tie-detection).
  bool detectTies = true;
  /// Gradient all-reduces gathered into buckets of this many MiB
  /// (rt-bucket-all-reduces; 0: one collective each).
  double gradBucketMB = 25;
  /// Gradient accumulation: each rank's batch runs as this many
  /// micro-batches, one after another (dist-unroll-microbatches).
  int64_t microbatches = 1;
  /// The model's Dropout nodes: "off" (as exported) or "on"
  /// (nn-keyed-dropout), with this seed.
  std::string dropout = "off";
  int64_t dropoutSeed = 0;
};

/// Pipeline parallelism (phase stages): the `pp` axis of --mesh, the
/// outermost (ranks 0 .. R-1 run stage 0, R the other axes' product).
struct PipelineOptions {
  /// The pp axis's size; 1: no pipeline.
  int64_t ranks = 1;
  /// Micro-batches per step (--microbatches; 0: pp).
  int64_t microbatches = 0;
  /// A schedule's name (PipelineSchedules.h), or a schedule file.
  std::string schedule = "1f1b";
  std::string scheduleFile;
  /// Stages per rank (0: the schedule's: 2 for interleaved-1f1b and zbv).
  int64_t virtualStages = 0;
  /// Where the stages are cut: "" (balanced along the layers) or
  /// "layers:4,8,12" (the layer each stage after the first starts at).
  std::string split;

  bool enabled() const { return ranks > 1; }
  int64_t microbatchCount() const { return microbatches ? microbatches : ranks; }
};

struct CompileOptions {
  /// "" (print IR), "cpu" or "cuda".
  std::string target;
  /// The last phase to run; Artifact when a target is given, else the
  /// phases requested by the other options (see defaultPhase()).
  std::optional<CompilePhase> compileTo;

  // Raising (phase nn). Unset: on with a target (attention: with cuda,
  // where it is a fused kernel, and with the megatron presets, which split
  // nn.attention by heads whatever layout the exporter gave K; otherwise
  // not on the CPU, where the materialized form's GEMMs are faster), off
  // when printing IR.
  std::optional<bool> raiseAttention, raiseNormalization, raiseGelu, raiseRotateHalf;

  // Training (phase train).
  TrainOptions train;

  // Sharding (phases sharded and partitioned).
  std::string mesh;               ///< "dp=2,tp=4"
  std::vector<std::string> shard; ///< seeds "NAME=SPEC"
  std::string strategy;           ///< "", "dp", "megatron", "megatron-sp"
  std::string dpAxis = "dp", tpAxis = "tp";
  bool explainSharding = false;
  /// Run the sharding passes: set by resolveForModule() (asked for by
  /// mesh/shard/strategy, or the program carries a dist.mesh and is not
  /// partitioned yet); the registered pipelines set it from their options.
  bool sharding = false;

  // Pipeline parallelism (phase stages).
  PipelineOptions pipeline;

  // Precision (end of phase partitioned: weights are cast once sliced).
  std::string computeType = "f32"; ///< f32, bf16, f16
  bool outputsInDtype = false;

  // CUDA (phases rt, gpu, artifact).
  CudaCodegenOptions cuda;
  std::vector<std::string> cudaArchs; ///< empty: sm_80,sm_90
  std::string cudaPath;               ///< empty: $CUDA_PATH, $CUDA_HOME, /usr/local/cuda

  // Artifact.
  bool weightChecksums = true;
  /// With cuda: also write the generated kernels' PTX here ("-": stdout).
  std::string dumpPTX;

  bool raises(const std::optional<bool> &flag) const {
    return flag ? *flag : !target.empty();
  }
  bool raisesAttention() const {
    if (raiseAttention)
      return *raiseAttention;
    // A CPU training step: the fused backward (nn.attention_grad) replaces
    // the batched products and the softmax's backward.
    return target == "cuda" || (target == "cpu" && train.enabled) ||
           (!target.empty() && llvm::StringRef(strategy).starts_with("megatron"));
  }
  /// Whether the dist passes run: sharding, or micro-batches (an axis of
  /// their own that dist-unroll-microbatches runs one after another).
  /// A training step over a pp axis: the stages are cut from the forward
  /// program and its loss, then each is differentiated on its own.
  bool pipelinedTraining() const { return pipeline.enabled() && train.enabled; }
  bool partitions() const { return sharding || (train.enabled && train.microbatches > 1); }

  /// Whether any option asks for sharding.
  bool shardingRequested() const {
    return !mesh.empty() || !shard.empty() || !strategy.empty();
  }
  /// The phase to stop after when compileTo is unset: Artifact with a
  /// target; else Partitioned when sharding or the compute type asks for
  /// it, NN when a raising pass is asked for, Import otherwise.
  CompilePhase lastPhase() const;

  /// Checks the options against each other; the message says what is
  /// wrong, naming the flag as shard-opt spells it ("--dtype must be f32,
  /// bf16 or f16, got 'x'").
  llvm::Error verify() const;
  /// verify()'s checks of the training flags.
  llvm::Error verifyTraining() const;
  /// verify()'s checks of the pipeline flags: the schedule is built (or
  /// read) and simulated, so a deadlock is reported before any compiling.
  llvm::Error verifyPipeline() const;
};

/// The pipeline's action lists (compute only) for `options.pipeline`: the
/// named schedule built, or the schedule file read, each checked by
/// simulation with the sends and receives added. The error names the flag
/// (and the file, line and action).
llvm::Expected<runtime::PipelineSchedule> pipelineScheduleFor(const CompileOptions &options);

/// Takes the `pp` axis out of a --mesh value ("pp=4,dp=2,tp=2" gives 4
/// and leaves "dp=2,tp=2"); pp must come first. 1 when there is none.
llvm::Expected<int64_t> takePipelineAxis(std::string &mesh);

/// Applies the module-dependent decisions to `options`: whether the
/// sharding passes run (requested, or the program has a dist.mesh and is
/// not partitioned yet); an error when sharding is requested for a program
/// that is already partitioned.
llvm::Error resolveForModule(CompileOptions &options, mlir::ModuleOp module);

/// `--cuda-disable` feature names: vector-accesses, packed-qkv,
/// gemm-epilogues, gemm-residuals, gemm-padding, sibling-fusion. Fails on
/// an unknown one.
llvm::Error disableCudaFeature(CudaCodegenOptions &cuda, llvm::StringRef feature);

} // namespace shardflow

#endif // SHARDFLOW_PIPELINES_COMPILEOPTIONS_H
