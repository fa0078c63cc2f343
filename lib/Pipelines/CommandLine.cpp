//===- CommandLine.cpp - the compiler's command-line options ---------------===//
//
// The flags live in one struct created when registerCompilerCLOptions() is
// called (as MLIR's own pass-manager flags are), so that a tool that links
// the Pipelines library without calling it gets none of them.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Pipelines/CommandLine.h"

#include "llvm/Support/ManagedStatic.h"

#include <memory>

using namespace shardflow;
namespace cl = llvm::cl;

namespace {
struct CompilerCLOptions {
  cl::OptionCategory importCategory{
      "Shardflow ONNX import options (for .onnx and .onnxtxt inputs)"};
  cl::OptionCategory compileCategory{"Shardflow compilation options"};
  cl::OptionCategory shardCategory{"Shardflow sharding options"};
  cl::OptionCategory trainCategory{"Shardflow training options (with --train)"};

  cl::list<std::string> inputShapes{"input-shape",
    cl::desc("Pin the shape of a graph input: NAME=D0,D1,... (or D0xD1). "
             "Needed for symbolic dims; repeat for several inputs"),
    cl::value_desc("name=dims"), cl::cat(importCategory)};
  cl::list<std::string> inputValues{"input-value",
    cl::desc("Pin a graph input to the value in a .npy or TensorProto .pb "
             "file: NAME=FILE. The input becomes a constant, so inputs that "
             "decide shapes (axes, k, split sizes) fold; repeatable"),
    cl::value_desc("name=file"), cl::cat(importCategory)};
  cl::opt<int64_t> embedLimitBytes{"embed-limit-bytes",
    cl::desc("Initializers up to this many bytes are embedded as nn.constant; "
             "larger ones become nn.weight references (default 1024)"),
    cl::init(1024), cl::cat(importCategory)};
  cl::opt<bool> printSummary{"summary",
    cl::desc("After import, print a one-line summary of the model to stderr "
             "(ops, weights, inputs, outputs, import time)"),
    cl::init(false), cl::cat(importCategory)};
  cl::opt<bool> listOps{"list-ops",
    cl::desc("Print the ONNX ops the importer supports (default domain and "
             "com.microsoft), each with the first version that has it, and exit"),
    cl::init(false), cl::cat(importCategory)};
  cl::opt<std::string> inputFormat{"input-format",
    cl::desc("How to read the input: auto (by extension), mlir, onnx"),
    cl::init("auto"), cl::cat(importCategory)};
  cl::opt<std::string> target{"target",
    cl::desc("Compile for a target and write the .shard artifact to -o "
             "instead of printing IR: lower nn to rt, plan memory, export. "
             "Targets: cpu (runtime kernels, MPI), cuda (generated fused "
             "kernels as cubin for --cuda-arch and PTX, cuBLASLt GEMMs, "
             "NCCL; needs the CUDA toolkit at compile time)"),
    cl::value_desc("target"), cl::init(""), cl::cat(compileCategory)};
  cl::list<std::string> cudaArchs{"cuda-arch",
    cl::desc("With --target cuda: GPU architectures to build cubins for, "
             "oldest first; the oldest one's PTX is stored too, for newer "
             "GPUs (default sm_80,sm_90)"),
    cl::CommaSeparated, cl::value_desc("sm_XY"), cl::cat(compileCategory)};
  cl::opt<std::string> cudaPath{"cuda-path",
    cl::desc("With --target cuda: the CUDA toolkit holding bin/ptxas and "
             "nvvm/libdevice (default $CUDA_PATH, $CUDA_HOME, /usr/local/cuda)"),
    cl::value_desc("dir"), cl::init(""), cl::cat(compileCategory)};
  cl::opt<std::string> dumpPTX{"dump-ptx",
    cl::desc("With --target cuda: also write the generated kernels' PTX (for "
             "the oldest --cuda-arch) to this file ('-' for stdout)"),
    cl::value_desc("file"), cl::init(""), cl::cat(compileCategory)};
  cl::list<std::string> cudaDisable{"cuda-disable",
    cl::desc("With --target cuda: turn code generation features off, to "
             "measure what each buys (comma-separated): vector-accesses "
             "(generated kernels load one element per thread instead of up "
             "to 16 bytes), packed-qkv (a fused QKV projection becomes three "
             "GEMMs instead of one whose result the attention reads in "
             "place), gemm-epilogues (bias adds and the gelu or relu after "
             "them run as generated kernels instead of in the cuBLASLt "
             "GEMM), gemm-residuals (a residual add after a GEMM runs in a "
             "generated kernel instead of as the GEMM's C), gemm-padding (a "
             "GEMM whose result rows are not 16-byte aligned, such as GPT-2's "
             "50257-wide logits, writes them as they are instead of into "
             "aligned rows, which the program returns as they are or a "
             "copy packs for the kernels that read them), sibling-fusion "
             "(independent neighbouring elementwise kernels, such as the "
             "query's and the key's rotary embedding, are launched one by "
             "one instead of as one launch)"),
    cl::CommaSeparated, cl::value_desc("feature"), cl::cat(compileCategory)};
  cl::opt<bool> weightChecksums{"weight-checksums",
    cl::desc("With --target: record the CRC-32C of the bytes each rank loads "
             "of every weight, which shard-run checks (reads every weight "
             "once at compile time; default on)"),
    cl::init(true), cl::cat(compileCategory)};
  cl::opt<std::string> meshSpec{"mesh",
    cl::desc("Distribute the program over a mesh of ranks with named axes, "
             "e.g. dp=2,tp=4 (8 ranks, rank = dp_index * 4 + tp_index). "
             "Partitions the program into the per-rank program. A first axis "
             "pp=N cuts the program into N pipeline stages, each run by the "
             "other axes' ranks (pp=2,tp=2: ranks 0-1 stage 0, ranks 2-3 "
             "stage 1), over --microbatches micro-batches"),
    cl::value_desc("axis=size,..."), cl::init(""), cl::cat(shardCategory)};
  cl::list<std::string> shardSpecs{"shard",
    cl::desc("Seed the sharding of a graph input or weight: NAME=SPEC, one "
             "SPEC entry per dimension: _ (not split), an axis, or axes "
             "joined by + (e.g. ids=dp,_ or fc.weight=_,tp); repeatable. "
             "These seeds outrank --strategy's"),
    cl::value_desc("name=spec"), cl::cat(shardCategory)};
  cl::opt<std::string> strategyName{"strategy",
    cl::desc("Sharding preset: dp (batch over the dp axis), megatron "
             "(column/row-parallel linear layers and attention heads over the "
             "tp axis; the token embedding and the vocabulary projection split by "
             "vocabulary entries, a vocabulary tp does not divide zero-padded at "
             "load; plus dp when the mesh has it), megatron-sp (megatron plus "
             "sequence parallelism in the norm and dropout regions)"),
    cl::value_desc("preset"), cl::init(""), cl::cat(shardCategory)};
  cl::opt<std::string> pipelineSchedule{"pipeline-schedule",
    cl::desc("With a pp axis: the order each stage runs its micro-batches in: "
             "gpipe (every forward, then every backward), 1f1b (default: a "
             "forward and a backward by turns after pp - rank - 1 forwards), "
             "interleaved-1f1b (--virtual-stages stages per rank, Megatron-LM's "
             "order; --microbatches a multiple of pp), zb-h1 (the backward split "
             "into input and weight gradients, 1f1b's memory), zbv (two stages "
             "per rank in a V, split backward). A forward-only program runs "
             "each schedule's forwards in its order. Checked by simulation: a "
             "deadlock is an error naming the first stuck action"),
    cl::value_desc("schedule"), cl::init("1f1b"), cl::cat(shardCategory)};
  cl::opt<std::string> pipelineScheduleFile{"pipeline-schedule-file",
    cl::desc("With a pp axis: a schedule of one's own, one line per pp rank of "
             "comma-separated actions in torch.distributed.pipelining's "
             "notation (0F1: stage 0's forward of micro-batch 1; B, I, W: "
             "backward, its input and weight parts; SEND_F, RECV_F, SEND_B, "
             "RECV_B: added where missing), as its _dump_csv writes; the "
             "stages' ranks are where they compute. Checked by simulation as "
             "--pipeline-schedule's are"),
    cl::value_desc("file"), cl::init(""), cl::cat(shardCategory)};
  cl::opt<int64_t> virtualStages{"virtual-stages",
    cl::desc("With --pipeline-schedule interleaved-1f1b: stages per pp rank "
             "(default 2; stage v * pp + r runs on rank r)"),
    cl::value_desc("V"), cl::init(0), cl::cat(shardCategory)};
  cl::opt<std::string> pipelineSplit{"pipeline-split",
    cl::desc("With a pp axis: where the stages are cut, layers:I,J,... (the "
             "model's layer each stage after the first starts at, 0-based, as "
             "nn-find-layers numbers them; the embeddings go with the first "
             "stage, the final norm and head with the last) or nodes:A,B,... "
             "(each stage after the first starts at the layer holding that "
             "ONNX node). Default: the "
             "cuts that make the slowest stage fastest by the registry's cost "
             "estimates (embeddings and head counted)"),
    cl::value_desc("layers:I,J,...|nodes:A,B,..."), cl::init(""), cl::cat(shardCategory)};
  cl::opt<std::string> dpAxisName{"dp-axis",
                                       cl::desc("Mesh axis of data parallelism (default dp)"),
                                       cl::init("dp"), cl::cat(shardCategory)};
  cl::opt<std::string> tpAxisName{"tp-axis", cl::desc("Mesh axis of tensor and sequence parallelism (default tp)"),
    cl::init("tp"), cl::cat(shardCategory)};
  cl::opt<bool> explainSharding{"explain-sharding",
    cl::desc("Print, for every value, its sharding and where each split came "
             "from (a seed, or the value and op it propagated through), and "
             "where partial sums meet, whether they are reduced together"),
    cl::init(false), cl::cat(shardCategory)};
  cl::opt<bool> printReport{"report",
    cl::desc("With --target: print what a training step trains, is frozen or "
             "held (--train), and per rank the parameter bytes and peak "
             "activation bytes, and each collective with its buffer's bytes and "
             "the bytes a rank sends for it (ring algorithms)"),
    cl::init(false), cl::cat(shardCategory)};
  cl::opt<bool> raiseAttention{"raise-attention",
    cl::desc("Raise materialized attention (matmul, scale, mask, softmax, "
             "matmul) to nn.attention before sharding (nn-raise-attention). "
             "Default: on for --target cuda, for a --train step on the CPU "
             "(its fused backward) and with --strategy megatron or "
             "megatron-sp; otherwise off for --target cpu, whose "
             "attention kernel is slower than OpenBLAS matmuls for "
             "bidirectional attention, and when printing IR"),
    cl::cat(compileCategory)};
  cl::opt<bool> raiseNormalization{"raise-normalization",
    cl::desc("Raise written-out layer and RMS norms (means, a square root, "
             "a division or reciprocal; older exporters' LayerNorm, "
             "Llama's RMSNorm) to nn.layer_normalization and "
             "nn.rms_normalization before sharding (nn-raise-normalization): "
             "one kernel per row instead of three or four. Default: on with "
             "--target; off when printing IR"),
    cl::cat(compileCategory)};
  cl::opt<bool> raiseGelu{"raise-gelu",
    cl::desc("Raise written-out GELU (0.5 x (1 + tanh(...)) or 0.5 x (1 + "
             "erf(x / sqrt 2)), as exporters before opset 20 write GPT-2's "
             "and BERT's) to nn.gelu before sharding (nn-raise-gelu): one "
             "pass instead of seven or eight, and on CUDA the GEMM's gelu "
             "epilogue. Default: on with --target; off when printing IR"),
    cl::cat(compileCategory)};
  cl::opt<bool> raiseRotateHalf{"raise-rotate-half",
    cl::desc("Raise rotary embeddings' written-out rotate_half (two slices "
             "or a split of the last dimension's halves, a negation and a "
             "concat: Concat(-x2, x1), as Hugging Face's Llama and others "
             "export it) to nn.rotate_half before sharding "
             "(nn-raise-rotate-half): one pass instead of four copies and "
             "passes, and on CUDA one launch with the products by cos and sin. "
             "Default: on with --target; off when printing IR"),
    cl::cat(compileCategory)};
  cl::opt<std::string> computeType{"dtype",
    cl::desc("Element type the program computes in: f32 (default), bf16 or "
             "f16. Weights stay f32 in their files and are converted at load; "
             "inputs and outputs keep their types (nn-convert-float-type, "
             "after partitioning)"),
    cl::value_desc("f32|bf16|f16"), cl::init("f32"), cl::cat(compileCategory)};
  cl::opt<bool> outputsInDtype{"outputs-in-dtype",
    cl::desc("With --dtype bf16|f16: return the graph's f32 outputs in that "
             "type instead of casting them back to f32 (half their memory "
             "and traffic: GPT-2 small's logits at batch 8 and sequence "
             "1024 are 0.82 GB instead of 1.65 GB). shard-run writes bf16 "
             "outputs to .npy/.npz as float32 (exact), or as bf16 to .pb"),
    cl::cat(compileCategory)};
  cl::opt<bool> train{"train",
    cl::desc("Compile one training step instead of inference: the loss "
             "(--loss), its gradients against every float initializer it "
             "depends on, and the optimizer's update of the weights, which "
             "with the optimizer's moments and step counter are state that "
             "persists across the steps shard-run --steps runs. The step "
             "returns loss, grad_norm and lr. One rank, the CPU target, f32"),
    cl::init(false), cl::cat(trainCategory)};
  cl::opt<std::string> loss{"loss",
    cl::desc("cross-entropy (softmax cross-entropy over the last dimension of "
             "the first output, labels an int64 input shaped like it without "
             "that dimension, not shifted; the mean over positions whose label "
             "is not --ignore-index), mse (mean squared error against labels "
             "shaped like the first output), or output:NAME (a scalar output "
             "the model computes). Default cross-entropy"),
    cl::value_desc("kind"), cl::init("cross-entropy"), cl::cat(trainCategory)};
  cl::opt<std::string> labels{"labels",
    cl::desc("The name of the labels input the loss adds (default labels)"),
    cl::value_desc("name"), cl::init("labels"), cl::cat(trainCategory)};
  cl::opt<int64_t> ignoreIndex{"ignore-index",
    cl::desc("cross-entropy: the label of positions that do not count (default -100)"),
    cl::init(-100), cl::cat(trainCategory)};
  cl::opt<std::string> optimizer{"optimizer",
    cl::desc("sgd (torch.optim.SGD) or adamw (torch.optim.AdamW, the default)"),
    cl::value_desc("name"), cl::init("adamw"), cl::cat(trainCategory)};
  cl::opt<double> lr{"lr", cl::desc("Peak learning rate (default 1e-3)"), cl::init(1e-3),
                     cl::cat(trainCategory)};
  cl::opt<double> momentum{"momentum", cl::desc("sgd: momentum (default 0)"), cl::init(0),
                           cl::cat(trainCategory)};
  cl::opt<bool> nesterov{"nesterov", cl::desc("sgd: Nesterov momentum"), cl::init(false),
                         cl::cat(trainCategory)};
  cl::opt<double> weightDecay{"weight-decay",
    cl::desc("Weight decay: sgd adds wd*w to the gradient (default 0), adamw "
             "multiplies w by 1 - lr*wd (decoupled, default 1e-2)"),
    cl::cat(trainCategory)};
  cl::list<double> betas{"betas", cl::desc("adamw: beta1,beta2 (default 0.9,0.999)"),
                         cl::CommaSeparated, cl::value_desc("b1,b2"), cl::cat(trainCategory)};
  cl::opt<double> eps{"eps", cl::desc("adamw: added outside the square root (default 1e-8)"),
                      cl::init(1e-8), cl::cat(trainCategory)};
  cl::opt<double> clipGradNorm{"clip-grad-norm",
    cl::desc("Scale the gradients so that their global 2-norm is at most this, as "
             "torch.nn.utils.clip_grad_norm_ (default 0: no clipping)"),
    cl::init(0), cl::cat(trainCategory)};
  cl::opt<int64_t> warmupSteps{"warmup-steps",
    cl::desc("Linear warmup: step t (from 1) uses lr*t/W for t <= W (default 0)"),
    cl::init(0), cl::cat(trainCategory)};
  cl::opt<std::string> lrSchedule{"lr-schedule",
    cl::desc("After warmup: constant (default), linear (lr*(T-t)/(T-W)) or "
             "cosine (min-lr + (lr - min-lr)(1 + cos(pi (t-W)/(T-W)))/2), T = "
             "--total-steps"),
    cl::value_desc("kind"), cl::init("constant"), cl::cat(trainCategory)};
  cl::opt<int64_t> totalSteps{"total-steps",
    cl::desc("linear and cosine schedules: the step they end at"), cl::init(0),
    cl::cat(trainCategory)};
  cl::opt<double> minLr{"min-lr", cl::desc("cosine schedule: the final learning rate (default 0)"),
                        cl::init(0), cl::cat(trainCategory)};
  cl::list<std::string> noDecay{"no-decay",
    cl::desc("Initializers (name globs, e.g. '*.bias') that get no weight decay; "
             "repeatable or comma-separated"),
    cl::CommaSeparated, cl::value_desc("glob"), cl::cat(trainCategory)};
  cl::list<std::string> freeze{"freeze",
    cl::desc("Initializers (name globs) that do not train; repeatable or "
             "comma-separated. --report lists what trains"),
    cl::CommaSeparated, cl::value_desc("glob"), cl::cat(trainCategory)};
  cl::list<std::string> trainable{"trainable",
    cl::desc("Train only the initializers these globs match (default: every "
             "one whose gradient depends on the loss)"),
    cl::CommaSeparated, cl::value_desc("glob"), cl::cat(trainCategory)};
  cl::list<std::string> tie{"tie",
    cl::desc("COPY=SOURCE: two initializers that are one parameter (an "
             "exporter wrote it twice); COPY=SOURCE^T when the copy holds it "
             "transposed (inferred when the 2-D shapes are swapped). The "
             "copy's gradient joins the source's and the copy follows it. "
             "Copies with the same bytes as another initializer, or its "
             "transpose, are found without it (TorchScript's tied language "
             "model head); repeatable"),
    cl::value_desc("copy=source"), cl::cat(trainCategory)};
  cl::opt<bool> tieDetection{"tie-detection",
    cl::desc("With --train: find initializers with the same bytes as another, "
             "or its transpose, and train them as one parameter (default on; "
             "reads every float initializer once)"),
    cl::init(true), cl::cat(trainCategory)};
  cl::opt<double> gradBucketMB{"grad-bucket-mb",
    cl::desc("Gather the gradients' all-reduces (data parallelism) into "
             "buckets of at most this many MiB, one collective each (default "
             "25, as DDP's bucket_cap_mb; 0: one collective per gradient)"),
    cl::init(25), cl::cat(trainCategory)};
  cl::opt<int64_t> microbatches{"microbatches",
    cl::desc("Gradient accumulation: run each rank's batch as M "
             "micro-batches of batch/M, one after another, and sum their "
             "gradients before the update (only one micro-batch's activations "
             "live at a time); M must divide every input's per-rank batch "
             "(dimension 0). The loss and the update equal those of the whole "
             "batch. With a pp axis (and without --train), the micro-batches "
             "the pipeline's stages pass along (default: pp): the stages are "
             "compiled for batch/M"),
    cl::value_desc("M"), cl::init(1), cl::cat(trainCategory)};
  cl::opt<std::string> dropout{"dropout",
    cl::desc("The model's Dropout nodes in training: off (default: the graph "
             "trains as exported; an inference-mode Dropout is the identity) "
             "or on (each Dropout drops with its ratio, a new mask every step "
             "keyed by the seed, the step, the node and the element, so that "
             "every mesh, micro-batching, thread count and target draws the "
             "same one)"),
    cl::value_desc("on|off"), cl::init("off"), cl::cat(trainCategory)};
  cl::opt<int64_t> dropoutSeed{"dropout-seed",
    cl::desc("The seed of --dropout on's masks (default 0)"), cl::init(0),
    cl::cat(trainCategory)};
  cl::opt<std::string> compileTo{"compile-to",
    cl::desc("Stop after a phase of the compile and print its IR (the "
             "artifact phase, the default with --target, writes the .shard "
             "file): import (nn as imported), nn (exporter idioms raised), "
             "train (with --train: the training step), sharded (every value's "
             "sharding decided), partitioned (the per-rank program with its "
             "collectives, in the --dtype), stages (with a pp axis: a function "
             "per pipeline stage and the schedule), rt (bufferized kernels and collectives; needs "
             "--target), gpu (generated GPU kernels; needs --target cuda), "
             "artifact"),
    cl::value_desc("phase"), cl::init(""), cl::cat(compileCategory)};
};

llvm::ManagedStatic<CompilerCLOptions> clOptions;

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// A flag given on the command line, or unset: the compile's default.
std::optional<bool> given(const cl::opt<bool> &flag) {
  return flag.getNumOccurrences() ? std::optional<bool>(flag) : std::nullopt;
}
} // namespace

void shardflow::registerCompilerCLOptions() { *clOptions; }

bool shardflow::isCompilerOptionCategory(const cl::OptionCategory *category) {
  return category == &clOptions->importCategory || category == &clOptions->compileCategory ||
         category == &clOptions->shardCategory || category == &clOptions->trainCategory;
}

llvm::Error shardflow::getCompilerCLOptions(DriverOptions &driver, CompileOptions &compile) {
  const CompilerCLOptions &o = *clOptions;
  driver.inputFormat = o.inputFormat;
  if (driver.inputFormat != "auto" && driver.inputFormat != "mlir" &&
      driver.inputFormat != "onnx")
    return fail("--input-format must be auto, mlir or onnx, got '" + driver.inputFormat + "'");
  if (o.embedLimitBytes < 0)
    return fail("--embed-limit-bytes must be >= 0, got " + llvm::Twine(int64_t(o.embedLimitBytes)));
  driver.import.embedLimitBytes = o.embedLimitBytes;
  // A training step keeps BatchNormalization's running statistics as state.
  driver.import.runningStatistics = o.train;
  driver.import.keepMovedInitializers = o.train;
  for (const std::string &spec : o.inputValues)
    if (std::string message = parseInputValueSpec(spec, driver.import); !message.empty())
      return fail(message);
  for (const std::string &spec : o.inputShapes)
    if (std::string message = parseInputShapeSpec(spec, driver.import); !message.empty())
      return fail(message);
  driver.summary = o.printSummary;
  driver.listOps = o.listOps;
  driver.report = o.printReport;

  compile.target = o.target;
  if (!o.compileTo.empty()) {
    compile.compileTo = parsePhase(o.compileTo);
    if (!compile.compileTo)
      return fail("--compile-to takes " + listPhaseNames() + ", got '" + o.compileTo + "'");
  }
  compile.raiseAttention = given(o.raiseAttention);
  compile.raiseNormalization = given(o.raiseNormalization);
  compile.raiseGelu = given(o.raiseGelu);
  compile.raiseRotateHalf = given(o.raiseRotateHalf);
  compile.mesh = o.meshSpec;
  auto pp = takePipelineAxis(compile.mesh);
  if (!pp)
    return pp.takeError();
  PipelineOptions &pipe = compile.pipeline;
  pipe.ranks = *pp;
  pipe.schedule = o.pipelineSchedule;
  pipe.scheduleFile = o.pipelineScheduleFile;
  pipe.virtualStages = o.virtualStages;
  pipe.split = o.pipelineSplit;
  if (!pipe.enabled()) {
    for (const cl::Option *flag : {static_cast<const cl::Option *>(&o.pipelineSchedule),
                                   static_cast<const cl::Option *>(&o.pipelineScheduleFile),
                                   static_cast<const cl::Option *>(&o.virtualStages),
                                   static_cast<const cl::Option *>(&o.pipelineSplit)})
      if (flag->getNumOccurrences())
        return fail("--" + flag->ArgStr + " needs a pp axis of 2 or more in --mesh "
                    "(--mesh pp=2,...)");
  } else {
    // The micro-batches are the pipeline's: each stage's programs are
    // compiled for one.
    if (o.microbatches.getNumOccurrences())
      pipe.microbatches = o.microbatches;
    driver.import.batchDivisor = pipe.microbatchCount();
  }
  if (!o.pipelineScheduleFile.empty() && o.pipelineSchedule.getNumOccurrences())
    return fail("--pipeline-schedule and --pipeline-schedule-file exclude each other");
  compile.shard.assign(o.shardSpecs.begin(), o.shardSpecs.end());
  compile.strategy = o.strategyName;
  compile.dpAxis = o.dpAxisName;
  compile.tpAxis = o.tpAxisName;
  compile.explainSharding = o.explainSharding;
  compile.computeType = o.computeType;
  compile.outputsInDtype = o.outputsInDtype;
  compile.cudaArchs.assign(o.cudaArchs.begin(), o.cudaArchs.end());
  compile.cudaPath = o.cudaPath;
  compile.dumpPTX = o.dumpPTX;
  compile.weightChecksums = o.weightChecksums;
  TrainOptions &t = compile.train;
  t.enabled = o.train;
  if (!t.enabled) {
    const cl::Option *trainingFlags[] = {
        &o.loss,         &o.labels,      &o.ignoreIndex, &o.optimizer,  &o.lr,
        &o.momentum,     &o.nesterov,    &o.weightDecay, std::addressof(o.betas), &o.eps,
        &o.clipGradNorm, &o.warmupSteps, &o.lrSchedule,  &o.totalSteps, &o.minLr,
        std::addressof(o.noDecay), std::addressof(o.freeze), std::addressof(o.trainable),
        std::addressof(o.tie),     &o.tieDetection, &o.gradBucketMB, &o.microbatches,
        &o.dropout,      &o.dropoutSeed};
    for (const cl::Option *flag : trainingFlags)
      if (flag->getNumOccurrences() && !(flag == &o.microbatches && pipe.enabled()))
        return fail("--" + flag->ArgStr + " needs --train");
  }
  t.loss = o.loss;
  t.labels = o.labels;
  t.ignoreIndex = o.ignoreIndex;
  t.optimizer = o.optimizer;
  t.lr = o.lr;
  t.momentum = o.momentum;
  t.nesterov = o.nesterov;
  if (o.weightDecay.getNumOccurrences())
    t.weightDecay = double(o.weightDecay);
  if (o.betas.getNumOccurrences()) {
    if (o.betas.size() != 2)
      return fail("--betas takes two numbers, beta1,beta2");
    t.beta1 = o.betas[0];
    t.beta2 = o.betas[1];
  }
  t.eps = o.eps;
  t.clipGradNorm = o.clipGradNorm;
  t.warmupSteps = o.warmupSteps;
  t.schedule = o.lrSchedule;
  t.totalSteps = o.totalSteps;
  t.minLr = o.minLr;
  t.noDecay.assign(o.noDecay.begin(), o.noDecay.end());
  t.freeze.assign(o.freeze.begin(), o.freeze.end());
  t.trainable.assign(o.trainable.begin(), o.trainable.end());
  t.ties.assign(o.tie.begin(), o.tie.end());
  t.detectTies = o.tieDetection;
  t.gradBucketMB = o.gradBucketMB;
  t.microbatches = pipe.enabled() ? 1 : int64_t(o.microbatches);
  t.dropout = o.dropout;
  t.dropoutSeed = o.dropoutSeed;
  if (compile.target != "cuda" && !o.cudaDisable.empty())
    return fail("--cuda-arch, --cuda-path, --cuda-disable and --dump-ptx need --target cuda");
  for (const std::string &feature : o.cudaDisable)
    if (llvm::Error e = disableCudaFeature(compile.cuda, feature))
      return e;
  if (driver.report && compile.target.empty())
    return fail("--report needs --target (it reports on the compiled per-rank program)");

  return compile.verify();
}
