//===- Pipelines.cpp - the compile pipeline, phase by phase ----------------===//
//
// Each phase's passes in the order they run, and the pass pipelines that
// expose them to lit. The order within a phase carries decisions:
//   - raising runs before sharding, so the presets find attention, norms
//     and linear layers as single ops;
//   - the compute type is applied after partitioning: presets find linear
//     layers by their nn.weight operands, so weights are cast only once
//     they are sliced (and a slice is converted at load, not the whole);
//   - on CUDA the attention's head layout folds and fused projections split
//     while the program is still nn, where the views are visible.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Pipelines/Pipelines.h"
#include "shardflow/Conversion/Passes.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"
#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace shardflow;

static void buildNNPhase(OpPassManager &pm, const CompileOptions &o) {
  // Dropout on first, so that attention raising does not fold a dropout
  // of the probabilities away.
  if (o.train.enabled && o.train.dropout == "on") {
    nn::NNKeyedDropoutOptions keyed;
    keyed.seed = o.train.dropoutSeed;
    pm.addPass(nn::createNNKeyedDropout(keyed));
  }
  if (o.raises(o.raiseNormalization))
    pm.addNestedPass<func::FuncOp>(nn::createNNRaiseNormalization());
  if (o.raises(o.raiseGelu))
    pm.addNestedPass<func::FuncOp>(nn::createNNRaiseGelu());
  if (o.raises(o.raiseRotateHalf))
    pm.addNestedPass<func::FuncOp>(nn::createNNRaiseRotateHalf());
  if (o.raisesAttention())
    pm.addNestedPass<func::FuncOp>(nn::createNNRaiseAttention());
  pm.addPass(nn::createNNFindLayers()); // records nn.layers, changes nothing
}

/// The sharding seeds of the options and presets (dist-annotate).
void shardflow::buildShardingSeeds(OpPassManager &pm, const CompileOptions &o) {
  dist::DistAnnotateOptions annotate;
  annotate.mesh_ = o.mesh;
  annotate.shard.assign(o.shard.begin(), o.shard.end());
  annotate.strategy = o.strategy;
  annotate.dpAxis = o.dpAxis;
  annotate.tpAxis = o.tpAxis;
  // A training step's weights are state, one buffer per initializer.
  annotate.wholeInitializers = o.train.enabled;
  annotate.training = o.train.enabled;
  if (o.train.enabled)
    annotate.microbatches = o.train.microbatches;
  pm.addPass(dist::createDistAnnotate(annotate));
}

/// The ranks of a --mesh spec ("dp=2,tp=2": 4); 1 when there is none.
static int64_t meshRanks(StringRef spec) {
  int64_t ranks = 1;
  SmallVector<StringRef> axes;
  spec.split(axes, ',', -1, false);
  for (StringRef axis : axes) {
    int64_t size;
    if (!axis.split('=').second.trim().getAsInteger(10, size) && size > 0)
      ranks *= size;
  }
  return ranks;
}

void shardflow::buildDifferentiate(OpPassManager &pm, const CompileOptions &o, StringRef loss,
                                   StringRef wrt) {
  nn::NNDifferentiateOptions differentiate;
  differentiate.loss = loss.str();
  differentiate.wrt = wrt.str();
  // The fused backward ops: both targets have their kernels.
  if (o.target == "cpu" || o.target == "cuda")
    differentiate.fused = {"all"};
  pm.addPass(nn::createNNDifferentiate(differentiate));
}

void shardflow::buildOptimizer(OpPassManager &pm, const CompileOptions &o, StringRef loss,
                               StringRef gradNormSquared, ArrayRef<std::string> stageTies) {
  const TrainOptions &t = o.train;
  nn::NNOptimizerOptions update;
  update.loss = loss.str();
  update.optimizer = t.optimizer;
  update.lr = t.lr;
  update.momentum = t.momentum;
  update.nesterov = t.nesterov;
  update.weightDecay = t.weightDecay.value_or(-1);
  update.beta1 = t.beta1;
  update.beta2 = t.beta2;
  update.eps = t.eps;
  update.clipGradNorm = t.clipGradNorm;
  update.warmupSteps = t.warmupSteps;
  update.schedule = t.schedule;
  update.totalSteps = t.totalSteps;
  update.minLr = t.minLr;
  update.noDecay.assign(t.noDecay.begin(), t.noDecay.end());
  update.gradNormSquared = gradNormSquared.str();
  // A pipeline stage's update trains what its backward accumulated: the
  // frozen initializers have no accumulator (PipelineTraining.cpp).
  if (gradNormSquared.empty()) {
    update.freeze.assign(t.freeze.begin(), t.freeze.end());
    update.trainable.assign(t.trainable.begin(), t.trainable.end());
    update.tie.assign(t.ties.begin(), t.ties.end());
  } else {
    update.tie.assign(stageTies.begin(), stageTies.end());
  }
  // The CPU's update kernel is one pass per parameter; CUDA fuses the
  // elementwise chain in its generated code.
  update.fusedUpdates = o.target == "cpu";
  pm.addPass(nn::createNNOptimizer(update));
}

/// The name of the loss a training step differentiates.
static std::string lossName(const TrainOptions &t) {
  return StringRef(t.loss).starts_with("output:") ? t.loss.substr(7) : "loss";
}

static void buildTrainPhase(OpPassManager &pm, const CompileOptions &o) {
  const TrainOptions &t = o.train;
  if (!t.enabled)
    return;
  // The presets find their patterns (linear layers, norms) in the forward
  // program: its seeds are placed before the backward exists, and
  // propagation carries them through both. Micro-batches are a mesh axis
  // too (dist-unroll-microbatches runs it one coordinate at a time).
  // Pipelined training cuts the forward program with its loss into stages
  // first; each stage is seeded and differentiated on its own
  // (PipelineTraining.cpp).
  if (o.partitions() && !o.pipelinedTraining())
    buildShardingSeeds(pm, o);
  if (!StringRef(t.loss).starts_with("output:")) {
    nn::NNAppendLossOptions append;
    append.kind = t.loss;
    append.labels = t.labels;
    append.ignoreIndex = t.ignoreIndex;
    append.maxBlocks = meshRanks(o.mesh);
    pm.addPass(nn::createNNAppendLoss(append));
  }
  if (o.pipelinedTraining())
    return;
  buildDifferentiate(pm, o, lossName(t), "weights");
  buildOptimizer(pm, o, lossName(t), "", {});
}

static void buildShardedPhase(OpPassManager &pm, const CompileOptions &o) {
  if (!o.partitions() || o.pipelinedTraining())
    return;
  if (!o.train.enabled) // a training step is seeded in phase train
    buildShardingSeeds(pm, o);
  dist::DistPropagateOptions propagate;
  propagate.explain = o.explainSharding;
  pm.addPass(dist::createDistPropagate(propagate));
}

static void buildPartitionedPhase(OpPassManager &pm, const CompileOptions &o) {
  if (o.pipelinedTraining())
    return; // each stage's programs, in the artifact phase
  if (o.partitions()) {
    dist::DistInsertReshardsOptions reshards;
    reshards.explain = o.explainSharding;
    pm.addPass(dist::createDistInsertReshards(reshards));
    pm.addPass(dist::createDistPartition());
    if (o.train.enabled && o.train.microbatches > 1)
      pm.addPass(dist::createDistUnrollMicrobatches());
  }
  if (o.computeType != "f32") {
    nn::NNConvertFloatTypeOptions precision;
    precision.type = o.computeType;
    precision.keepOutputTypes = !o.outputsInDtype;
    pm.addPass(nn::createNNConvertFloatType(precision));
  }
}

static void buildStagesPhase(OpPassManager &pm, const CompileOptions &o) {
  if (!o.pipeline.enabled())
    return;
  dist::DistSplitStagesOptions split;
  split.ranks = o.pipeline.ranks;
  split.microbatches = o.pipeline.microbatchCount();
  split.schedule = o.pipeline.schedule;
  split.scheduleFile = o.pipeline.scheduleFile;
  split.virtualStages = o.pipeline.virtualStages;
  split.split = o.pipeline.split;
  split.training = o.train.enabled;
  pm.addPass(dist::createDistSplitStages(split));
}

static void buildRTPhase(OpPassManager &pm, const CompileOptions &o) {
  if (o.target == "cuda") {
    // The attention kernel reads heads in place ([B, S, H*D]), which saves
    // the transposes around it. A fused projection's pieces become GEMMs of
    // their own (no split copy), or stay one GEMM whose pieces the
    // attention reads in place.
    pm.addNestedPass<func::FuncOp>(nn::createNNFoldAttentionLayout());
    nn::NNSplitFusedProjectionsOptions split;
    split.attentionInPlace = o.cuda.packedQkv;
    pm.addNestedPass<func::FuncOp>(nn::createNNSplitFusedProjections(split));
  }
  pm.addPass(createConvertNNToRT());
  if (o.train.enabled && o.train.gradBucketMB > 0) {
    // A training step's gradient all-reduces, in buckets (as DDP's).
    rt::RTBucketAllReducesOptions buckets;
    buckets.bucketBytes = int64_t(o.train.gradBucketMB * 1024 * 1024);
    pm.addNestedPass<func::FuncOp>(rt::createRTBucketAllReduces(buckets));
  }
  if (o.target != "cuda") {
    // Einsums that are matmuls run on the GEMM (cuda-codegen-pipeline, in
    // the gpu phase, runs the same pass first).
    pm.addNestedPass<func::FuncOp>(rt::createRTEinsumToMatmul());
    // The GEMM reads transposed operands in place (a backward's W^T, X^T).
    pm.addNestedPass<func::FuncOp>(rt::createRTFoldTransposesIntoMatmuls());
    pm.addNestedPass<func::FuncOp>(rt::createRTPlanMemory());
  }
}

static void buildGPUPhase(OpPassManager &pm, const CompileOptions &o) {
  // The rt rewrites, then the generated kernels. packed-qkv only turns off
  // nn-split-fused-projections' attention-in-place in the rt phase:
  // cuda-read-attention-inputs-in-place still runs, for any split left that
  // feeds one attention.
  cuda::CUDACodegenPipelineOptions codegen;
  codegen.gemmEpilogues = o.cuda.gemmEpilogues;
  codegen.gemmResiduals = o.cuda.gemmResiduals;
  codegen.gemmPadding = o.cuda.gemmPadding;
  codegen.vectorize = o.cuda.vectorAccesses;
  codegen.siblingFusion = o.cuda.siblingFusion;
  cuda::buildCUDACodegenPipeline(pm, codegen);
  pm.addNestedPass<func::FuncOp>(rt::createRTPlanMemory());
}

void shardflow::buildPhasePipeline(OpPassManager &pm, CompilePhase phase,
                                   const CompileOptions &options) {
  switch (phase) {
  case CompilePhase::Import:
  case CompilePhase::Artifact:
    return;
  case CompilePhase::Stages:
    return buildStagesPhase(pm, options);
  case CompilePhase::NN:
    return buildNNPhase(pm, options);
  case CompilePhase::Train:
    return buildTrainPhase(pm, options);
  case CompilePhase::Sharded:
    return buildShardedPhase(pm, options);
  case CompilePhase::Partitioned:
    return buildPartitionedPhase(pm, options);
  case CompilePhase::RT:
    return buildRTPhase(pm, options);
  case CompilePhase::GPU:
    if (options.target == "cuda")
      buildGPUPhase(pm, options);
    return;
  }
}

void shardflow::buildCompilePipeline(OpPassManager &pm, const CompileOptions &options) {
  CompilePhase last = options.lastPhase();
  // Pipeline stages go through the later phases one by one, as programs of
  // their own (emitPipelineArtifact).
  if (options.pipeline.enabled() && last > CompilePhase::Stages)
    last = CompilePhase::Stages;
  for (int p = int(CompilePhase::Import) + 1; p <= int(last); ++p)
    buildPhasePipeline(pm, CompilePhase(p), options);
}

//===----------------------------------------------------------------------===//
// Registered pipelines
//===----------------------------------------------------------------------===//

namespace {
/// CompileOptions as pass-pipeline options, spelled as shard-opt's flags.
struct CompilePipelineOptions : public PassPipelineOptions<CompilePipelineOptions> {
  Option<std::string> compileTo{*this, "compile-to",
                                llvm::cl::desc("shardflow-compile: the last phase to run")};
  Option<std::string> target{*this, "target", llvm::cl::desc("cpu or cuda")};
  Option<bool> raiseAttention{*this, "raise-attention",
                              llvm::cl::desc("nn-raise-attention (default: with cuda)")};
  Option<bool> raiseNormalization{
      *this, "raise-normalization",
      llvm::cl::desc("nn-raise-normalization (default: with a target)")};
  Option<bool> raiseGelu{*this, "raise-gelu",
                         llvm::cl::desc("nn-raise-gelu (default: with a target)")};
  Option<bool> raiseRotateHalf{*this, "raise-rotate-half",
                               llvm::cl::desc("nn-raise-rotate-half (default: with a target)")};
  Option<std::string> mesh{*this, "mesh", llvm::cl::desc("Mesh axes, e.g. \"dp=2,tp=2\"")};
  ListOption<std::string> shard{*this, "shard", llvm::cl::desc("Sharding seeds NAME=SPEC")};
  Option<std::string> strategy{*this, "strategy",
                               llvm::cl::desc("Sharding preset: dp, megatron, megatron-sp")};
  Option<std::string> dpAxis{*this, "dp-axis", llvm::cl::desc("Data-parallel axis"),
                             llvm::cl::init("dp")};
  Option<std::string> tpAxis{*this, "tp-axis", llvm::cl::desc("Tensor-parallel axis"),
                             llvm::cl::init("tp")};
  Option<bool> sharding{*this, "sharding",
                        llvm::cl::desc("Run the sharding passes on a program that carries "
                                       "its own dist.mesh (implied by mesh, shard, strategy)"),
                        llvm::cl::init(false)};
  Option<bool> explainSharding{*this, "explain-sharding",
                               llvm::cl::desc("Explain every sharding decision"),
                               llvm::cl::init(false)};
  Option<std::string> dtype{*this, "dtype", llvm::cl::desc("f32, bf16 or f16"),
                            llvm::cl::init("f32")};
  Option<bool> outputsInDtype{*this, "outputs-in-dtype",
                              llvm::cl::desc("Return outputs in the compute type"),
                              llvm::cl::init(false)};
  ListOption<std::string> cudaDisable{*this, "cuda-disable",
                                      llvm::cl::desc("CUDA code generation features to "
                                                     "turn off (shard-opt --cuda-disable)")};

  llvm::Expected<CompileOptions> toCompileOptions() const {
    CompileOptions o;
    o.target = target;
    if (compileTo.hasValue()) {
      o.compileTo = parsePhase(compileTo);
      if (!o.compileTo)
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "compile-to takes " + listPhaseNames() + ", got '" +
                                           compileTo + "'");
    }
    auto optional = [](const Option<bool> &flag) {
      return flag.hasValue() ? std::optional<bool>(flag) : std::nullopt;
    };
    o.raiseAttention = optional(raiseAttention);
    o.raiseNormalization = optional(raiseNormalization);
    o.raiseGelu = optional(raiseGelu);
    o.raiseRotateHalf = optional(raiseRotateHalf);
    o.mesh = mesh;
    o.shard.assign(shard.begin(), shard.end());
    o.strategy = strategy;
    o.dpAxis = dpAxis;
    o.tpAxis = tpAxis;
    o.sharding = sharding || o.shardingRequested();
    o.explainSharding = explainSharding;
    o.computeType = dtype;
    o.outputsInDtype = outputsInDtype;
    for (const std::string &feature : cudaDisable)
      if (llvm::Error e = disableCudaFeature(o.cuda, feature))
        return std::move(e);
    if (llvm::Error e = o.verify())
      return std::move(e);
    return o;
  }
};

/// Registers a pipeline that builds from CompilePipelineOptions, reporting
/// options that do not fit together through MLIR's error handler.
void registerPipeline(StringRef name, StringRef description,
                      std::function<void(OpPassManager &, const CompileOptions &)> build) {
  registerPassPipeline(
      name, description,
      [build](OpPassManager &pm, StringRef text,
              function_ref<LogicalResult(const Twine &)> errorHandler) -> LogicalResult {
        CompilePipelineOptions options;
        if (failed(options.parseFromString(text)))
          return failure();
        llvm::Expected<CompileOptions> compile = options.toCompileOptions();
        if (!compile)
          return errorHandler(llvm::toString(compile.takeError()));
        build(pm, *compile);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> handler) {
        handler(CompilePipelineOptions());
      });
}
} // namespace

void shardflow::registerCompilePipelines() {
  registerPipeline("shardflow-compile",
                   "The Shardflow compile pipeline from imported nn to the phase given by "
                   "compile-to (default: the last one the options ask for)",
                   [](OpPassManager &pm, const CompileOptions &o) {
                     buildCompilePipeline(pm, o);
                   });
  for (CompilePhase phase : {CompilePhase::NN, CompilePhase::Sharded,
                             CompilePhase::Partitioned, CompilePhase::RT, CompilePhase::GPU}) {
    std::string name = ("shardflow-" + getPhaseName(phase)).str();
    std::string description =
        ("The passes of the compile's '" + getPhaseName(phase) + "' phase alone").str();
    registerPipeline(name, description, [phase](OpPassManager &pm, const CompileOptions &o) {
      buildPhasePipeline(pm, phase, o);
    });
  }
}
