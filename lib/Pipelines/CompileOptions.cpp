//===- CompileOptions.cpp - the options of one compile ---------------------===//
//
// Phase names, the checks of options against each other, and the
// decisions that depend on the module (whether it is sharded here).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Pipelines/CompileOptions.h"
#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Planner/PipelineSchedules.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Error.h"

using namespace mlir;
using namespace shardflow;

namespace {
struct PhaseName {
  CompilePhase phase;
  const char *name;
};
constexpr PhaseName kPhases[] = {
    {CompilePhase::Import, "import"}, {CompilePhase::NN, "nn"},
    {CompilePhase::Train, "train"},   {CompilePhase::Sharded, "sharded"},
    {CompilePhase::Partitioned, "partitioned"}, {CompilePhase::Stages, "stages"},
    {CompilePhase::RT, "rt"},         {CompilePhase::GPU, "gpu"},
    {CompilePhase::Artifact, "artifact"},
};

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

StringRef shardflow::getPhaseName(CompilePhase phase) {
  for (const PhaseName &p : kPhases)
    if (p.phase == phase)
      return p.name;
  llvm_unreachable("every phase has a name");
}

std::optional<CompilePhase> shardflow::parsePhase(StringRef name) {
  for (const PhaseName &p : kPhases)
    if (name == p.name)
      return p.phase;
  return std::nullopt;
}

std::string shardflow::listPhaseNames() {
  return llvm::join(llvm::map_range(kPhases, [](const PhaseName &p) { return p.name; }), ", ");
}

CompilePhase CompileOptions::lastPhase() const {
  if (compileTo)
    return *compileTo;
  if (!target.empty())
    return CompilePhase::Artifact;
  if (train.enabled)
    return CompilePhase::Train;
  if (pipeline.enabled())
    return CompilePhase::Stages;
  if (shardingRequested() || computeType != "f32")
    return CompilePhase::Partitioned;
  // Printing IR raises only what was asked for by name.
  auto asked = [](const std::optional<bool> &flag) { return flag && *flag; };
  if (asked(raiseAttention) || asked(raiseNormalization) || asked(raiseGelu) ||
      asked(raiseRotateHalf))
    return CompilePhase::NN;
  return CompilePhase::Import;
}

llvm::Error CompileOptions::verify() const {
  if (!target.empty() && target != "cpu" && target != "cuda")
    return fail("--target must be cpu or cuda, got '" + target + "'");
  if (target != "cuda" &&
      (!cudaArchs.empty() || !cudaPath.empty() || !dumpPTX.empty() ||
       !cuda.allEnabled()))
    return fail("--cuda-arch, --cuda-path, --cuda-disable and --dump-ptx need --target cuda");
  for (const std::string &arch : cudaArchs) {
    StringRef digits = StringRef(arch).drop_front(3);
    unsigned number = 0;
    if (!StringRef(arch).starts_with("sm_") || digits.empty() ||
        !llvm::all_of(digits, llvm::isDigit) || digits.getAsInteger(10, number) ||
        number < 80)
      return fail("--cuda-arch takes sm_80 or newer (sm_XY), got '" + arch + "'");
  }
  if (computeType == "f32" && outputsInDtype)
    return fail("--outputs-in-dtype needs --dtype bf16 or f16 (the program computes in f32)");
  if (computeType != "f32" && computeType != "bf16" && computeType != "f16")
    return fail("--dtype must be f32, bf16 or f16, got '" + computeType + "'");
  if (llvm::Error e = verifyTraining())
    return e;
  if (llvm::Error e = verifyPipeline())
    return e;
  CompilePhase last = lastPhase();
  if (last >= CompilePhase::RT && target.empty())
    return fail("--compile-to " + getPhaseName(last) + " needs --target cpu or cuda");
  if (last == CompilePhase::GPU && target != "cuda")
    return fail("--compile-to gpu needs --target cuda (the CPU target generates no GPU code)");
  return llvm::Error::success();
}

llvm::Error CompileOptions::verifyTraining() const {
  const TrainOptions &t = train;
  if (!t.enabled)
    return llvm::Error::success();
  if (computeType != "f32")
    return fail("--train trains in f32; --dtype " + computeType +
                " (mixed-precision training) is not built yet");
  StringRef loss(t.loss);
  if (loss != "cross-entropy" && loss != "mse" &&
      !(loss.starts_with("output:") && loss.size() > 7))
    return fail("--loss must be cross-entropy, mse or output:NAME, got '" + t.loss + "'");
  if (t.optimizer != "sgd" && t.optimizer != "adamw")
    return fail("--optimizer must be sgd or adamw, got '" + t.optimizer + "'");
  if (!(t.lr > 0))
    return fail("--lr must be positive");
  if (t.momentum < 0 || (t.nesterov && t.momentum <= 0))
    return fail("--momentum must be >= 0, and > 0 with --nesterov");
  if (t.optimizer != "sgd" && (t.momentum != 0 || t.nesterov))
    return fail("--momentum and --nesterov are sgd's (--optimizer sgd)");
  if (t.weightDecay && *t.weightDecay < 0)
    return fail("--weight-decay must be >= 0");
  if (t.beta1 < 0 || t.beta1 >= 1 || t.beta2 < 0 || t.beta2 >= 1)
    return fail("--betas must each lie in [0, 1)");
  if (t.eps < 0)
    return fail("--eps must be >= 0");
  if (t.clipGradNorm < 0)
    return fail("--clip-grad-norm must be >= 0 (0: no clipping)");
  if (t.warmupSteps < 0)
    return fail("--warmup-steps must be >= 0");
  if (t.schedule != "constant" && t.schedule != "linear" && t.schedule != "cosine")
    return fail("--lr-schedule must be constant, linear or cosine, got '" + t.schedule + "'");
  if (t.schedule != "constant" && t.totalSteps <= t.warmupSteps)
    return fail("--lr-schedule " + t.schedule + " needs --total-steps greater than "
                "--warmup-steps");
  if (!(t.gradBucketMB >= 0))
    return fail("--grad-bucket-mb must be >= 0 (0: no buckets)");
  if (t.microbatches < 1)
    return fail("--microbatches must be >= 1");
  if (t.dropout != "on" && t.dropout != "off")
    return fail("--dropout must be on or off, got '" + t.dropout + "'");
  if (t.minLr < 0 || t.minLr > t.lr)
    return fail("--min-lr must lie in [0, --lr]");
  return llvm::Error::success();
}

llvm::Error CompileOptions::verifyPipeline() const {
  const PipelineOptions &p = pipeline;
  if (!p.enabled())
    return llvm::Error::success();
  if (train.enabled) {
    std::string pp = "--mesh pp=" + std::to_string(p.ranks) + " --train";
    if (target == "cuda")
      return fail(pp + " --target cuda: pipelined training runs on the cpu target (CUDA "
                  "stages run forward-only pipelines; their training is not built yet)");
    if (train.dropout == "on")
      return fail(pp + ": --dropout on is not built for pipelines yet (its keyed mask "
                  "is drawn by position in the step's batch, which a micro-batch's program "
                  "does not know)");
    if (computeType != "f32")
      return fail(pp + ": --dtype " + computeType + " is not built for pipelines yet");
  }
  if (compileTo && (*compileTo == CompilePhase::RT || *compileTo == CompilePhase::GPU))
    return fail("--compile-to " + getPhaseName(*compileTo) + " prints one program; with a pp "
                "axis, compile to stages (a function per stage) or to the artifact");
  if (p.microbatchCount() < 1)
    return fail("--microbatches must be >= 1");
  if (p.virtualStages < 0)
    return fail("--virtual-stages must be >= 1");
  StringRef split(p.split);
  if (!split.empty() && !split.starts_with("layers:") && !split.starts_with("nodes:"))
    return fail("--pipeline-split takes layers:I,J,... (the layer each stage after the first "
                "starts at) or nodes:A,B,... (an ONNX node of that layer), got '" + p.split +
                "'");
  return pipelineScheduleFor(*this).takeError();
}

llvm::Expected<runtime::PipelineSchedule> shardflow::pipelineScheduleFor(const CompileOptions &o) {
  const PipelineOptions &p = o.pipeline;
  std::string error;
  auto schedule = resolvePipelineSchedule(p.schedule, p.scheduleFile, int(p.ranks),
                                          int(p.microbatchCount()), int(p.virtualStages),
                                          !o.train.enabled, error);
  if (!schedule)
    return fail(error);
  return std::move(*schedule);
}

llvm::Expected<int64_t> shardflow::takePipelineAxis(std::string &mesh) {
  SmallVector<StringRef> axes;
  StringRef(mesh).split(axes, ',');
  for (auto [i, axis] : llvm::enumerate(axes)) {
    auto [name, size] = axis.trim().split('=');
    if (name.trim() != "pp")
      continue;
    int64_t ranks = 0;
    if (size.trim().getAsInteger(10, ranks) || ranks < 1)
      return fail("--mesh: pp takes a positive size, got '" + axis.trim() + "'");
    if (i != 0)
      return fail("--mesh: pp must be the first axis (the outermost: ranks 0 to k-1 run "
                  "stage 0), got '" + mesh + "'");
    std::string rest;
    for (size_t j = 1; j < axes.size(); ++j)
      rest += (rest.empty() ? "" : ",") + axes[j].trim().str();
    mesh = rest;
    return ranks;
  }
  return 1;
}

/// Whether `module` is already a per-rank program (it has collectives or
/// sliced weights), as hand-written lowering tests are.
static bool isPartitioned(ModuleOp module) {
  bool partitioned = false;
  module.walk([&](Operation *op) {
    if (isa<dist::AllReduceOp, dist::AllGatherOp, dist::ReduceScatterOp, dist::AllToAllOp,
            dist::AllSliceOp, dist::CollectivePermuteOp, dist::SendOp, dist::RecvOp>(op))
      partitioned = true;
    if (auto w = dyn_cast<nn::WeightOp>(op); w && w.getGlobalShape())
      partitioned = true;
  });
  return partitioned;
}

llvm::Error shardflow::resolveForModule(CompileOptions &options, ModuleOp module) {
  options.sharding = false;
  if (!options.shardingRequested() && module.getOps<dist::MeshOp>().empty())
    return llvm::Error::success();
  if (isPartitioned(module)) {
    if (options.train.enabled && options.train.microbatches > 1)
      return fail("--microbatches applies to global programs; this one is already "
                  "partitioned (it has dist collectives or sliced weights)");
    if (options.shardingRequested())
      return fail("the program is already partitioned (it has dist collectives or sliced "
                  "weights); --mesh, --shard and --strategy apply to global programs");
    return llvm::Error::success();
  }
  options.sharding = true;
  return llvm::Error::success();
}

llvm::Error shardflow::disableCudaFeature(CudaCodegenOptions &cuda, StringRef feature) {
  if (feature == "vector-accesses")
    cuda.vectorAccesses = false;
  else if (feature == "packed-qkv")
    cuda.packedQkv = false;
  else if (feature == "gemm-epilogues")
    cuda.gemmEpilogues = false;
  else if (feature == "gemm-residuals")
    cuda.gemmResiduals = false;
  else if (feature == "gemm-padding")
    cuda.gemmPadding = false;
  else if (feature == "sibling-fusion")
    cuda.siblingFusion = false;
  else
    return fail("--cuda-disable takes vector-accesses, packed-qkv, gemm-epilogues, "
                "gemm-residuals, gemm-padding and sibling-fusion, got '" + feature + "'");
  return llvm::Error::success();
}
