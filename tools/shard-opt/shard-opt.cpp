//===- shard-opt.cpp - the Shardflow compiler driver and opt tool ----------===//
//
// An mlir-opt style tool with Shardflow's dialects and passes registered.
// It also takes ONNX models directly: a `.onnx` or `.onnxtxt` input is
// imported into the nn dialect first, then handed to the usual pass
// pipeline and printer, so `shard-opt model.onnx` prints the imported IR.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Conversion/Passes.h"
#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/Dist/IR/TestShardingRules.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"
#include "shardflow/Import/ONNX/ONNXImporter.h"
#include "shardflow/Runtime/Format/Checksum.h"
#include "shardflow/Target/ArtifactExport.h"
#include "shardflow/Target/DeviceCode.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

#include <chrono>
#include <sstream>
#include <map>

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory importCategory(
    "Shardflow ONNX import options (for .onnx and .onnxtxt inputs)");

static cl::list<std::string> inputShapes(
    "input-shape",
    cl::desc("Pin the shape of a graph input: NAME=D0,D1,... (or D0xD1). "
             "Needed for symbolic dims; repeat for several inputs"),
    cl::value_desc("name=dims"), cl::cat(importCategory));

static cl::list<std::string> inputValues(
    "input-value",
    cl::desc("Pin a graph input to the value in a .npy or TensorProto .pb "
             "file: NAME=FILE. The input becomes a constant, so inputs that "
             "decide shapes (axes, k, split sizes) fold; repeatable"),
    cl::value_desc("name=file"), cl::cat(importCategory));

static cl::opt<int64_t> embedLimitBytes(
    "embed-limit-bytes",
    cl::desc("Initializers up to this many bytes are embedded as nn.constant; "
             "larger ones become nn.weight references (default 1024)"),
    cl::init(1024), cl::cat(importCategory));

static cl::opt<bool> printSummary(
    "summary",
    cl::desc("After import, print a one-line summary of the model to stderr "
             "(ops, weights, inputs, outputs, import time)"),
    cl::init(false), cl::cat(importCategory));

static cl::opt<std::string> inputFormat(
    "input-format",
    cl::desc("How to read the input: auto (by extension), mlir, onnx"),
    cl::init("auto"), cl::cat(importCategory));

static cl::OptionCategory compileCategory("Shardflow compilation options");

static cl::opt<std::string> target(
    "target",
    cl::desc("Compile for a target and write the .shard artifact to -o "
             "instead of printing IR: lower nn to rt, plan memory, export. "
             "Targets: cpu (runtime kernels, MPI), cuda (generated fused "
             "kernels as cubin for --cuda-arch and PTX, cuBLASLt GEMMs, "
             "NCCL; needs the CUDA toolkit at compile time)"),
    cl::value_desc("target"), cl::init(""), cl::cat(compileCategory));

static cl::list<std::string> cudaArchs(
    "cuda-arch",
    cl::desc("With --target cuda: GPU architectures to build cubins for, "
             "oldest first; the oldest one's PTX is stored too, for newer "
             "GPUs (default sm_80,sm_90)"),
    cl::CommaSeparated, cl::value_desc("sm_XY"), cl::cat(compileCategory));

static cl::opt<std::string> cudaPath(
    "cuda-path",
    cl::desc("With --target cuda: the CUDA toolkit holding bin/ptxas and "
             "nvvm/libdevice (default $CUDA_PATH, $CUDA_HOME, /usr/local/cuda)"),
    cl::value_desc("dir"), cl::init(""), cl::cat(compileCategory));

static cl::opt<std::string> dumpPTX(
    "dump-ptx",
    cl::desc("With --target cuda: also write the generated kernels' PTX (for "
             "the oldest --cuda-arch) to this file ('-' for stdout)"),
    cl::value_desc("file"), cl::init(""), cl::cat(compileCategory));

static cl::list<std::string> cudaDisable(
    "cuda-disable",
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
    cl::CommaSeparated, cl::value_desc("feature"), cl::cat(compileCategory));

static cl::opt<bool> weightChecksums(
    "weight-checksums",
    cl::desc("With --target: record the CRC-32C of the bytes each rank loads "
             "of every weight, which shard-run checks (reads every weight "
             "once at compile time; default on)"),
    cl::init(true), cl::cat(compileCategory));

static cl::OptionCategory shardCategory("Shardflow sharding options");

static cl::opt<std::string> meshSpec(
    "mesh",
    cl::desc("Distribute the program over a mesh of ranks with named axes, "
             "e.g. dp=2,tp=4 (8 ranks, rank = dp_index * 4 + tp_index). "
             "Partitions the program into the per-rank program"),
    cl::value_desc("axis=size,..."), cl::init(""), cl::cat(shardCategory));

static cl::list<std::string> shardSpecs(
    "shard",
    cl::desc("Seed the sharding of a graph input or weight: NAME=SPEC, one "
             "SPEC entry per dimension: _ (not split), an axis, or axes "
             "joined by + (e.g. ids=dp,_ or fc.weight=_,tp); repeatable. "
             "These seeds outrank --strategy's"),
    cl::value_desc("name=spec"), cl::cat(shardCategory));

static cl::opt<std::string> strategyName(
    "strategy",
    cl::desc("Sharding preset: dp (batch over the dp axis), megatron "
             "(column/row-parallel linear layers and attention heads over the "
             "tp axis; the token embedding and the vocabulary projection split by "
             "vocabulary entries, a vocabulary tp does not divide zero-padded at "
             "load; plus dp when the mesh has it), megatron-sp (megatron plus "
             "sequence parallelism in the norm and dropout regions)"),
    cl::value_desc("preset"), cl::init(""), cl::cat(shardCategory));

static cl::opt<std::string> dpAxisName("dp-axis",
                                       cl::desc("Mesh axis of data parallelism (default dp)"),
                                       cl::init("dp"), cl::cat(shardCategory));
static cl::opt<std::string> tpAxisName(
    "tp-axis", cl::desc("Mesh axis of tensor and sequence parallelism (default tp)"),
    cl::init("tp"), cl::cat(shardCategory));

static cl::opt<bool> explainSharding(
    "explain-sharding",
    cl::desc("Print, for every value, its sharding and where each split came "
             "from (a seed, or the value and op it propagated through), and "
             "where partial sums meet, whether they are reduced together"),
    cl::init(false), cl::cat(shardCategory));

static cl::opt<bool> printReport(
    "report",
    cl::desc("With --target: print per rank the parameter bytes and peak "
             "activation bytes, and each collective with its buffer's bytes and "
             "the bytes a rank sends for it (ring algorithms)"),
    cl::init(false), cl::cat(shardCategory));

//===----------------------------------------------------------------------===//
// Raising and precision (--raise-normalization, --raise-gelu, --raise-rotate-half,
// --raise-attention, --dtype): nn passes that run before sharding
// (raising) and after partitioning (precision).
//===----------------------------------------------------------------------===//

static cl::opt<bool> raiseAttention(
    "raise-attention",
    cl::desc("Raise materialized attention (matmul, scale, mask, softmax, "
             "matmul) to nn.attention before sharding (nn-raise-attention). "
             "Default: on for --target cuda; off for --target cpu, whose "
             "attention kernel is slower than OpenBLAS matmuls for "
             "bidirectional attention, and when printing IR"),
    cl::cat(compileCategory));

static cl::opt<bool> raiseNormalization(
    "raise-normalization",
    cl::desc("Raise written-out layer and RMS norms (means, a square root, "
             "a division or reciprocal; older exporters' LayerNorm, "
             "Llama's RMSNorm) to nn.layer_normalization and "
             "nn.rms_normalization before sharding (nn-raise-normalization): "
             "one kernel per row instead of three or four. Default: on with "
             "--target; off when printing IR"),
    cl::cat(compileCategory));

static cl::opt<bool> raiseGelu(
    "raise-gelu",
    cl::desc("Raise written-out GELU (0.5 x (1 + tanh(...)) or 0.5 x (1 + "
             "erf(x / sqrt 2)), as exporters before opset 20 write GPT-2's "
             "and BERT's) to nn.gelu before sharding (nn-raise-gelu): one "
             "pass instead of seven or eight, and on CUDA the GEMM's gelu "
             "epilogue. Default: on with --target; off when printing IR"),
    cl::cat(compileCategory));

static cl::opt<bool> raiseRotateHalf(
    "raise-rotate-half",
    cl::desc("Raise rotary embeddings' written-out rotate_half (two slices "
             "or a split of the last dimension's halves, a negation and a "
             "concat: Concat(-x2, x1), as Hugging Face's Llama and others "
             "export it) to nn.rotate_half before sharding "
             "(nn-raise-rotate-half): one pass instead of four copies and "
             "passes, and on CUDA one launch with the products by cos and sin. "
             "Default: on with --target; off when printing IR"),
    cl::cat(compileCategory));

static cl::opt<std::string> computeType(
    "dtype",
    cl::desc("Element type the program computes in: f32 (default), bf16 or "
             "f16. Weights stay f32 in their files and are converted at load; "
             "inputs and outputs keep their types (nn-convert-float-type, "
             "after partitioning)"),
    cl::value_desc("f32|bf16|f16"), cl::init("f32"), cl::cat(compileCategory));

static cl::opt<bool> outputsInDtype(
    "outputs-in-dtype",
    cl::desc("With --dtype bf16|f16: return the graph's f32 outputs in that "
             "type instead of casting them back to f32 (half their memory "
             "and traffic: GPT-2 small's logits at batch 8 and sequence "
             "1024 are 0.82 GB instead of 1.65 GB). shard-run writes bf16 "
             "outputs to .npy/.npz as float32 (exact), or as bf16 to .pb"),
    cl::cat(compileCategory));

/// Whether --raise-attention applies: as given, else for --target cuda
/// (a fused kernel there; on the CPU the materialized form's OpenBLAS
/// matmuls beat the attention kernel's serial GEMMs without a causal mask).
static bool raiseAttentionEnabled() {
  if (raiseAttention.getNumOccurrences())
    return raiseAttention;
  return target == "cuda";
}

/// Whether --raise-normalization, --raise-gelu or --raise-rotate-half
/// applies: as given, else
/// when compiling.
static bool raiseEnabled(const cl::opt<bool> &flag) {
  if (flag.getNumOccurrences())
    return flag;
  return !target.empty();
}

static bool nnPassesRequested() {
  return (raiseAttention.getNumOccurrences() && raiseAttention) ||
         (raiseNormalization.getNumOccurrences() && raiseNormalization) ||
         (raiseGelu.getNumOccurrences() && raiseGelu) ||
         (raiseRotateHalf.getNumOccurrences() && raiseRotateHalf) ||
         computeType != "f32";
}

static LogicalResult checkComputeType() {
  if (computeType == "f32" && outputsInDtype) {
    llvm::errs() << "shard-opt: --outputs-in-dtype needs --dtype bf16 or f16 "
                    "(the program computes in f32)\n";
    return failure();
  }
  if (computeType == "f32" || computeType == "bf16" || computeType == "f16")
    return success();
  llvm::errs() << "shard-opt: --dtype must be f32, bf16 or f16, got '"
               << computeType << "'\n";
  return failure();
}

static void addRaisingPasses(PassManager &pm) {
  if (raiseEnabled(raiseNormalization))
    pm.addNestedPass<func::FuncOp>(shardflow::nn::createNNRaiseNormalization());
  if (raiseEnabled(raiseGelu))
    pm.addNestedPass<func::FuncOp>(shardflow::nn::createNNRaiseGelu());
  if (raiseEnabled(raiseRotateHalf))
    pm.addNestedPass<func::FuncOp>(shardflow::nn::createNNRaiseRotateHalf());
  if (raiseAttentionEnabled())
    pm.addNestedPass<func::FuncOp>(shardflow::nn::createNNRaiseAttention());
}

static void addPrecisionPasses(PassManager &pm) {
  if (computeType == "f32")
    return;
  shardflow::nn::NNConvertFloatTypeOptions options;
  options.type = computeType;
  options.keepOutputTypes = !outputsInDtype;
  pm.addPass(shardflow::nn::createNNConvertFloatType(options));
}

static bool shardingRequested() {
  return !meshSpec.empty() || !shardSpecs.empty() || !strategyName.empty();
}

/// Whether `module` is already a per-rank program (it has collectives or
/// sliced weights), as hand-written lowering tests are.
static bool isPartitioned(ModuleOp module) {
  namespace d = shardflow::dist;
  bool partitioned = false;
  module.walk([&](Operation *op) {
    if (isa<d::AllReduceOp, d::AllGatherOp, d::ReduceScatterOp, d::AllToAllOp,
            d::AllSliceOp, d::CollectivePermuteOp, d::SendOp, d::RecvOp>(op))
      partitioned = true;
    if (auto w = dyn_cast<shardflow::nn::WeightOp>(op); w && w.getGlobalShape())
      partitioned = true;
  });
  return partitioned;
}

/// Adds annotation, propagation, reshard insertion and partitioning when
/// the user asked for a mesh or the program has one and is not partitioned
/// yet. Fails when sharding options meet an already partitioned program.
static LogicalResult buildShardingPipeline(ModuleOp module, PassManager &pm) {
  if (!shardingRequested() && module.getOps<shardflow::dist::MeshOp>().empty())
    return success();
  if (isPartitioned(module)) {
    if (shardingRequested()) {
      llvm::errs() << "shard-opt: the program is already partitioned (it has "
                      "dist collectives or sliced weights); --mesh, --shard and "
                      "--strategy apply to global programs\n";
      return failure();
    }
    return success();
  }
  shardflow::dist::DistAnnotateOptions annotate;
  annotate.mesh_ = meshSpec;
  annotate.shard.assign(shardSpecs.begin(), shardSpecs.end());
  annotate.strategy = strategyName;
  annotate.dpAxis = dpAxisName;
  annotate.tpAxis = tpAxisName;
  pm.addPass(shardflow::dist::createDistAnnotate(annotate));
  shardflow::dist::DistPropagateOptions propagate;
  propagate.explain = explainSharding;
  pm.addPass(shardflow::dist::createDistPropagate(propagate));
  shardflow::dist::DistInsertReshardsOptions reshards;
  reshards.explain = explainSharding;
  pm.addPass(shardflow::dist::createDistInsertReshards(reshards));
  pm.addPass(shardflow::dist::createDistPartition());
  return success();
}

/// The nn passes of a compilation: raising, then sharding, then precision
/// (presets find linear layers by their nn.weight operands, so weights
/// are cast only once they are sliced).
static LogicalResult buildNNPipeline(ModuleOp module, PassManager &pm) {
  if (failed(checkComputeType()))
    return failure();
  addRaisingPasses(pm);
  if (failed(buildShardingPipeline(module, pm)))
    return failure();
  addPrecisionPasses(pm);
  return success();
}

/// --report: what each rank holds and what moves between ranks.
static void reportRanks(ModuleOp module, llvm::raw_ostream &os) {
  auto bytesOf = [](Type t) -> int64_t {
    auto m = cast<MemRefType>(t);
    return m.getNumElements() * ((m.getElementTypeBitWidth() + 7) / 8);
  };
  module.walk([&](func::FuncOp fn) {
    int64_t world = 1;
    if (auto w = fn->getAttrOfType<IntegerAttr>("rt.world_size"))
      world = w.getInt();
    // Per weight name: the bytes this rank holds (a weight may be loaded as
    // several slices, e.g. a fused projection's column blocks) and the
    // whole tensor's bytes.
    llvm::MapVector<StringRef, std::pair<int64_t, int64_t>> byName;
    SmallVector<int64_t> padding; // per rank: zero-padded bytes of weights
    int paddedWeights = 0;
    SmallVector<std::string> steps;
    int64_t moved = 0, sent = 0;
    fn.walk([&](Operation *op) {
      if (auto w = dyn_cast<shardflow::rt::WeightOp>(op)) {
        auto m = cast<MemRefType>(w.getType());
        int64_t n = m.getNumElements();
        if (auto g = w.getGlobalShapeAttr()) {
          n = 1;
          for (int64_t d : g.asArrayRef())
            n *= d;
        }
        auto &entry = byName[w.getName()];
        entry.first += bytesOf(w.getType());
        int64_t elementBytes = (m.getElementTypeBitWidth() + 7) / 8;
        entry.second = n * elementBytes;
        // A zero-padded slice reaches past the stored tensor: count, per
        // rank, the buffer's elements outside it (the slice's shape in
        // stored order is the buffer's with the permutation undone).
        if (auto g = w.getGlobalShapeAttr(); g && w.getZeroPadded() && w.getStartsAttr()) {
          SmallVector<int64_t> shape(m.getShape());
          if (auto perm = w.getPermutationAttr())
            for (auto [i, d] : llvm::enumerate(perm.asArrayRef()))
              shape[d] = m.getShape()[i];
          ArrayAttr starts = w.getStartsAttr();
          padding.resize(std::max<size_t>(padding.size(), starts.size()), 0);
          for (auto [r, startsAttr] : llvm::enumerate(starts)) {
            ArrayRef<int64_t> start = cast<DenseI64ArrayAttr>(startsAttr).asArrayRef();
            int64_t inside = 1;
            for (auto [d, size] : llvm::enumerate(shape))
              inside *= std::clamp<int64_t>(g[d] - start[d], 0, size);
            padding[r] += (m.getNumElements() - inside) * elementBytes;
          }
          ++paddedWeights;
        }
        return;
      }
      StringRef name = op->getName().getStringRef();
      if (!name.starts_with("rt.") ||
          isa<shardflow::rt::KernelOp, shardflow::rt::LaunchOp, shardflow::rt::AllocOp,
              shardflow::rt::ViewOp, shardflow::rt::ConstantOp>(op) ||
          op->getNumOperands() == 0)
        return;
      int64_t b = bytesOf(op->getOperand(0).getType());
      if (name == "rt.local_slice")
        return; // each rank keeps its piece: nothing moves
      int64_t groupSize = 0;
      if (auto groups = op->getAttrOfType<ArrayAttr>("groups"); groups && !groups.empty())
        groupSize = cast<DenseI64ArrayAttr>(groups[0]).size();
      // What a rank sends with ring algorithms (the cost model's count):
      // an all_reduce 2(n-1)/n of its buffer, a reduce_scatter and an
      // all_to_all (n-1)/n, an all_gather its piece to n-1 others, a
      // send or permute its buffer.
      int64_t n = std::max<int64_t>(groupSize, 1), out = b;
      if (name == "rt.all_reduce")
        out = 2 * (n - 1) * b / n;
      else if (name == "rt.reduce_scatter" || name == "rt.all_to_all")
        out = (n - 1) * b / n;
      else if (name == "rt.all_gather")
        out = (n - 1) * b;
      else if (name == "rt.recv")
        out = 0;
      std::string line;
      llvm::raw_string_ostream ls(line);
      ls << "  step " << steps.size() + 1 << ": " << name << " " << op->getOperand(0).getType()
         << ", " << b << " bytes per rank";
      if (groupSize)
        ls << ", groups of " << groupSize;
      ls << ", sends " << out << " (" << op->getLoc() << ")";
      steps.push_back(line);
      moved += b;
      sent += out;
    });
    int64_t local = 0, global = 0, slicedLocal = 0, slicedGlobal = 0;
    int weights = int(byName.size()), sliced = 0;
    for (auto &[name, bytes] : byName) {
      local += bytes.first;
      global += bytes.second;
      if (bytes.first < bytes.second) {
        ++sliced;
        slicedLocal += bytes.first;
        slicedGlobal += bytes.second;
      }
    }
    int64_t peak = 0;
    if (auto p = fn->getAttrOfType<IntegerAttr>("rt.peak_bytes"))
      peak = p.getInt();
    os << "report: @" << fn.getName() << " on " << world << " rank"
       << (world == 1 ? "" : "s") << " (every rank runs the same program)\n";
    os << llvm::formatv("  parameters per rank: {0} bytes in {1} weights ({2} sliced); "
                        "the whole model has {3} bytes: {4:F3} per rank\n",
                        local, weights, sliced, global,
                        global ? double(local) / double(global) : 1.0);
    if (sliced)
      os << llvm::formatv("  split weights: {0} of {1} weights, {2} of their {3} bytes per "
                          "rank ({4:F3}); the other {5} weights are whole on every rank "
                          "({6} bytes)\n",
                          sliced, weights, slicedLocal, slicedGlobal,
                          double(slicedLocal) / double(slicedGlobal), weights - sliced,
                          local - slicedLocal);
    if (paddedWeights) {
      int64_t most = *llvm::max_element(padding);
      os << llvm::formatv("  zero padding: {0} of those bytes per rank{1} in {2} weight "
                          "slice{3} that reach past the stored tensor (a GEMM's result rows "
                          "aligned, or a vocabulary padded to the tensor-parallel size)\n",
                          most, llvm::all_equal(padding) ? "" : " at most", paddedWeights,
                          paddedWeights == 1 ? "" : "s");
    }
    os << "  peak activation bytes per rank: " << peak << "\n";
    os << "  collectives: " << steps.size() << ", " << moved
       << " bytes per rank in total; each rank sends " << sent
       << " (ring algorithms)\n";
    for (const std::string &line : steps)
      os << line << "\n";
  });
}

static std::string typeString(Type t) {
  auto rt = cast<RankedTensorType>(t);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << rt.getElementType() << "[";
  llvm::interleave(rt.getShape(), os, ",");
  os << "]";
  return s;
}

static std::string summarize(ModuleOp module, StringRef path, double seconds) {
  size_t ops = 0, constants = 0;
  int64_t weightBytes = 0;
  std::map<std::string, int> kinds, storage;
  std::string ins, outs;
  module.walk([&](Operation *op) {
    if (auto w = dyn_cast<shardflow::nn::WeightOp>(op)) {
      ++storage[w.getStorage().str()];
      weightBytes += shardflow::nn::getTensorStorageBytes(w.getType()).value_or(0);
    } else if (isa<shardflow::nn::ConstantOp>(op)) {
      ++constants;
    } else if (op->getDialect() &&
               op->getDialect()->getNamespace() == "nn") {
      ++ops;
      ++kinds[op->getName().getStringRef().str()];
    }
  });
  int weights = 0;
  std::string storageText;
  for (auto &[kind, n] : storage) {
    weights += n;
    storageText += (storageText.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
  }
  module.walk([&](func::FuncOp f) {
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto name = f.getArgAttrOfType<StringAttr>(i, "nn.name");
      ins += (ins.empty() ? "" : ", ") + (name ? name.str() : "?") + " " +
             typeString(f.getArgument(i).getType());
    }
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      auto name = f.getResultAttrOfType<StringAttr>(i, "nn.name");
      outs += (outs.empty() ? "" : ", ") + (name ? name.str() : "?") + " " +
              typeString(f.getResultTypes()[i]);
    }
  });
  auto opset = module->getAttrOfType<IntegerAttr>("nn.opset");
  return llvm::formatv("summary: {0} (opset {1}): {2} ops of {3} kinds, {4} "
                       "weights ({5:F2} MB{6}), {7} constants; inputs: {8}; "
                       "outputs: {9}; imported in {10:F3} s",
                       llvm::sys::path::filename(path),
                       opset ? opset.getInt() : 0, ops, kinds.size(), weights,
                       weightBytes / 1e6,
                       storageText.empty() ? "" : ": " + storageText,
                       constants, ins, outs, seconds)
      .str();
}

/// Writes the weights that cannot be mapped in place (storage "protobuf":
/// varint-encoded or read from ONNX text) once, to OUTPUT.weights next to
/// the artifact, and points the artifact at them.
static LogicalResult writeSideWeights(MLIRContext *context,
                                      shardflow::runtime::Artifact &artifact,
                                      StringRef modelPath, bool fromONNX,
                                      StringRef outputFile) {
  std::vector<std::string> names;
  for (auto &b : artifact.buffers)
    if (b.kind == shardflow::runtime::BufferDesc::Kind::Weight &&
        b.storage == "protobuf")
      names.push_back(b.name);
  if (names.empty())
    return success();
  if (!fromONNX || outputFile == "-") {
    llvm::errs() << "shard-opt: weight '" << names.front()
                 << "' is not byte-addressable in its file; compile from the "
                    ".onnx/.onnxtxt model with -o FILE so that shard-opt can "
                    "write it next to the artifact\n";
    return failure();
  }
  llvm::StringMap<std::string> bytes;
  if (failed(shardflow::readInitializerBytes(context, modelPath, names, bytes)))
    return failure();
  std::string sidePath = (outputFile + ".weights").str();
  std::error_code ec;
  llvm::raw_fd_ostream side(sidePath, ec);
  if (ec) {
    llvm::errs() << "shard-opt: cannot write '" << sidePath << "': " << ec.message() << "\n";
    return failure();
  }
  uint64_t offset = 0;
  for (auto &b : artifact.buffers) {
    if (b.kind != shardflow::runtime::BufferDesc::Kind::Weight || b.storage != "protobuf")
      continue;
    const std::string &data = bytes[b.name];
    uint64_t aligned = (offset + 63) / 64 * 64;
    side.write_zeros(aligned - offset);
    side << data;
    b.storage = "artifact";
    b.file = llvm::sys::path::filename(sidePath).str();
    b.fileOffset = int64_t(aligned);
    offset = aligned + data.size();
  }
  return success();
}

/// Records in the artifact the CRC-32C of every weight slice each rank
/// loads, reading the weight files as shard-run will find them.
static LogicalResult addWeightChecksums(shardflow::runtime::Artifact &artifact,
                                        StringRef outputFile) {
  namespace rtm = shardflow::runtime;
  SmallString<256> artifactDir(outputFile);
  llvm::sys::path::remove_filename(artifactDir);
  if (artifactDir.empty())
    artifactDir = ".";
  llvm::StringMap<std::unique_ptr<llvm::MemoryBuffer>> files;
  for (rtm::BufferDesc &b : artifact.buffers) {
    if (b.kind != rtm::BufferDesc::Kind::Weight)
      continue;
    SmallString<256> path(b.storage == "artifact" ? artifactDir.str()
                                                  : StringRef(artifact.modelDir));
    llvm::sys::path::append(path, b.file);
    auto &file = files[path];
    if (!file) {
      auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                                /*RequiresNullTerminator=*/false);
      if (!buffer) {
        llvm::errs() << "shard-opt: cannot read weight file '" << path << "' (for '"
                     << b.name << "'): " << buffer.getError().message()
                     << "; pass --weight-checksums=false to compile without it\n";
        return failure();
      }
      file = std::move(*buffer);
    }
    size_t size = file->getBufferSize();
    const uint8_t *base = reinterpret_cast<const uint8_t *>(file->getBufferStart());
    b.crc32c.clear();
    int slices = b.starts.empty() ? 1 : artifact.worldSize;
    for (int rank = 0; rank < slices; ++rank) {
      uint32_t crc = 0;
      bool inside = true;
      rtm::forEachWeightRun(b, rank, [&](size_t offset, size_t length) {
        if (offset == rtm::kZeroRun) {
          // Zero padding past the stored tensor: the loader's zeros.
          static const uint8_t zeros[4096] = {};
          for (size_t done = 0; done < length; done += sizeof(zeros))
            crc = rtm::crc32c(zeros, std::min(sizeof(zeros), length - done), crc);
          return;
        }
        size_t at = size_t(b.fileOffset) + offset;
        if (b.fileOffset < 0 || at + length > size) {
          inside = false;
          return;
        }
        crc = rtm::crc32c(base + at, length, crc);
      });
      if (!inside) {
        llvm::errs() << "shard-opt: weight '" << b.name << "' lies past the end of '"
                     << path << "' (" << size << " bytes)\n";
        return failure();
      }
      b.crc32c.push_back(crc);
    }
  }
  return success();
}

/// Lowers `module` for --target and writes the artifact to `outputFile`.
static int compileToArtifact(ModuleOp module, StringRef inputFile,
                             StringRef outputFile, bool fromONNX) {
  if (target != "cpu" && target != "cuda") {
    llvm::errs() << "shard-opt: --target must be cpu or cuda, got '" << target << "'\n";
    return 1;
  }
  if (target != "cuda" && (!cudaArchs.empty() || !cudaPath.empty() || !dumpPTX.empty() ||
                           !cudaDisable.empty())) {
    llvm::errs() << "shard-opt: --cuda-arch, --cuda-path, --cuda-disable and --dump-ptx need "
                    "--target cuda\n";
    return 1;
  }
  shardflow::CudaCodegenOptions codegen;
  for (const std::string &feature : cudaDisable) {
    if (feature == "vector-accesses")
      codegen.vectorAccesses = false;
    else if (feature == "packed-qkv")
      codegen.packedQkv = false;
    else if (feature == "gemm-epilogues")
      codegen.gemmEpilogues = false;
    else if (feature == "gemm-residuals")
      codegen.gemmResiduals = false;
    else if (feature == "gemm-padding")
      codegen.gemmPadding = false;
    else if (feature == "sibling-fusion")
      codegen.siblingFusion = false;
    else {
      llvm::errs() << "shard-opt: --cuda-disable takes vector-accesses, packed-qkv, "
                      "gemm-epilogues, gemm-residuals, gemm-padding and sibling-fusion, got '"
                   << feature << "'\n";
      return 1;
    }
  }
  for (const std::string &arch : cudaArchs) {
    StringRef digits = StringRef(arch).drop_front(3);
    if (!StringRef(arch).starts_with("sm_") || digits.empty() ||
        !llvm::all_of(digits, [](char c) { return llvm::isDigit(c); }) ||
        std::stoi(digits.str()) < 80) {
      llvm::errs() << "shard-opt: --cuda-arch takes sm_80 or newer (sm_XY), got '" << arch
                   << "'\n";
      return 1;
    }
  }
  PassManager pm(module.getContext());
  // --mlir-print-ir-after=..., --mlir-timing and the other pass-manager
  // flags apply to the compile pipeline too.
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  applyDefaultTimingPassManagerCLOptions(pm);
  if (failed(buildNNPipeline(module, pm)))
    return 1;
  shardflow::buildLowerToRTPipeline(pm, target, codegen);
  if (failed(pm.run(module)))
    return 1;
  if (printReport)
    reportRanks(module, llvm::errs());
  // Weight files are found next to the model unless shard-run is told
  // otherwise (--weights).
  SmallString<256> dir(inputFile == "-" ? "." : inputFile);
  llvm::sys::fs::make_absolute(dir);
  llvm::sys::path::remove_filename(dir);
  auto artifact = shardflow::exportArtifact(module, target, dir);
  if (succeeded(artifact) && target == "cuda") {
    shardflow::DeviceCodeOptions options;
    if (!cudaArchs.empty())
      options.chips.assign(cudaArchs.begin(), cudaArchs.end());
    options.cudaPath = cudaPath;
    auto modules = shardflow::compileDeviceCode(module, options);
    if (failed(modules))
      return 1;
    artifact->modules = std::move(*modules);
    if (!dumpPTX.empty()) {
      std::string error;
      auto ptx = openOutputFile(dumpPTX, &error);
      if (!ptx) {
        llvm::errs() << "shard-opt: " << error << "\n";
        return 1;
      }
      for (const auto &m : artifact->modules)
        if (m.format == "ptx")
          ptx->os() << "// module " << m.name << " (" << m.arch << ")\n"
                    << StringRef(reinterpret_cast<const char *>(m.data.data()), m.data.size());
      ptx->keep();
    }
  }
  if (failed(artifact) ||
      failed(writeSideWeights(module.getContext(), *artifact, inputFile,
                              fromONNX, outputFile)) ||
      (weightChecksums && outputFile != "-" &&
       failed(addWeightChecksums(*artifact, outputFile))))
    return 1;
  std::string error;
  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << "shard-opt: " << error << "\n";
    return 1;
  }
  std::string text;
  {
    std::ostringstream os;
    shardflow::runtime::writeArtifact(*artifact, os);
    text = os.str();
  }
  output->os() << text;
  output->keep();
  return 0;
}

/// LLVM registers a few hundred options of its own before main (backends'
/// tuning knobs: amdgpu, arm, polly, ...) that mean nothing to a user of
/// shard-opt and would bury its own options in --help. Hide them from --help
/// (--help-hidden still lists them, and they still parse); the options MLIR's
/// driver registers later (--pass-pipeline, the passes, the printer flags)
/// stay visible, and so do ours.
static void hideLLVMInternalOptions() {
  for (auto &entry : cl::getRegisteredOptions()) {
    cl::Option *option = entry.second;
    bool keep = llvm::is_contained({"help", "help-list", "version"},
                                   entry.first) ||
                llvm::any_of(option->Categories, [](cl::OptionCategory *c) {
                  return c == &importCategory || c == &compileCategory ||
                         c == &shardCategory;
                });
    if (!keep && option->getOptionHiddenFlag() == cl::NotHidden)
      option->setHiddenFlag(cl::Hidden);
  }
}

int main(int argc, char **argv) {
  hideLLVMInternalOptions();
  DialectRegistry registry;
  registry.insert<shardflow::nn::NNDialect, shardflow::dist::DistDialect,
                  shardflow::rt::RTDialect, func::FuncDialect,
                  memref::MemRefDialect>();
  shardflow::registerDeviceCodeDialects(registry);
  mlir::registerTransformsPasses();
  shardflow::registerConversionPasses();
  shardflow::rt::registerRTPasses();
  shardflow::dist::registerTestShardingRulesPass();
  shardflow::dist::registerDistPasses();
  shardflow::nn::registerNNPasses();

  auto [inputFile, outputFile] = registerAndParseCLIOptions(
      argc, argv,
      "shard-opt: the Shardflow compiler driver and MLIR optimizer.\n\n"
      "  shard-opt model.onnx [--input-shape x=1,128] [-o out.mlir]\n"
      "      imports an ONNX model (binary, with external data, or ONNX\n"
      "      text .onnxtxt) and prints its nn IR\n"
      "  shard-opt model.onnx [--mesh dp=2,tp=4 --strategy megatron]\n"
      "            --target cpu|cuda [--dtype bf16] -o model.shard\n"
      "      compiles it into an artifact that shard-run executes\n"
      "  shard-opt in.mlir --pass-pipeline='...'\n"
      "      runs passes over MLIR, as mlir-opt does\n\n"
      "  Shardflow's own options are listed last, after MLIR's driver\n"
      "  options and passes; --help-hidden also lists LLVM's internal ones.\n",
      registry);
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  if (printReport && target.empty()) {
    llvm::errs() << "shard-opt: --report needs --target (it reports on the "
                    "compiled per-rank program)\n";
    return 1;
  }

  std::string error, summary;
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  StringRef ext = llvm::sys::path::extension(inputFile);
  bool isONNX = inputFormat == "onnx" ||
                (inputFormat == "auto" && (ext == ".onnx" || ext == ".onnxtxt"));
  if (inputFormat != "auto" && inputFormat != "mlir" && inputFormat != "onnx") {
    llvm::errs() << "shard-opt: --input-format must be auto, mlir or onnx, got '"
                 << inputFormat << "'\n";
    return 1;
  }
  if (isONNX) {
    shardflow::ONNXImportOptions options;
    if (embedLimitBytes < 0) {
      llvm::errs() << "shard-opt: --embed-limit-bytes must be >= 0, got "
                   << embedLimitBytes << "\n";
      return 1;
    }
    options.embedLimitBytes = embedLimitBytes;
    for (const std::string &spec : inputValues) {
      std::string msg = shardflow::parseInputValueSpec(spec, options);
      if (!msg.empty()) {
        llvm::errs() << "shard-opt: " << msg << "\n";
        return 1;
      }
    }
    for (const std::string &spec : inputShapes) {
      std::string msg = shardflow::parseInputShapeSpec(spec, options);
      if (!msg.empty()) {
        llvm::errs() << "shard-opt: " << msg << "\n";
        return 1;
      }
    }
    MLIRContext context(registry);
    context.printOpOnDiagnostic(false);
    std::string displayPath = inputFile == "-" ? "<stdin>" : inputFile;
    context.getDiagEngine().registerHandler([&](Diagnostic &diag) {
      const char *kind = diag.getSeverity() == DiagnosticSeverity::Error
                             ? "error"
                         : diag.getSeverity() == DiagnosticSeverity::Warning
                             ? "warning"
                         : diag.getSeverity() == DiagnosticSeverity::Remark
                             ? "remark"
                             : "note";
      llvm::errs() << displayPath << ": " << kind << ": " << diag.str() << "\n";
      for (Diagnostic &note : diag.getNotes())
        llvm::errs() << displayPath << ": note: " << note.str() << "\n";
      return success();
    });
    auto start = std::chrono::steady_clock::now();
    OwningOpRef<ModuleOp> module;
    if (inputFile == "-") {
      auto in = openInputFile(inputFile, &error);
      if (!in) {
        llvm::errs() << "shard-opt: " << error << "\n";
        return 1;
      }
      module = shardflow::importONNXBuffer(&context, in->getBuffer(), "<stdin>",
                                           options);
    } else {
      module = shardflow::importONNXFile(&context, inputFile, options);
    }
    if (!module)
      return 1;
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (printSummary)
      summary = summarize(*module, displayPath, seconds);
    if (!target.empty()) {
      int rc = compileToArtifact(*module, inputFile, outputFile, /*fromONNX=*/true);
      if (!summary.empty())
        llvm::errs() << summary << "\n";
      return rc;
    }
    if (shardingRequested() || nnPassesRequested()) {
      PassManager pm(&context);
      if (failed(buildNNPipeline(*module, pm)) || failed(pm.run(*module)))
        return 1;
    }
    // Hand the module to the opt pipeline as text; locations go along so
    // later diagnostics still name the ONNX node.
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os, OpPrintingFlags().enableDebugInfo(true, false));
    buffer = llvm::MemoryBuffer::getMemBufferCopy(text, displayPath);
  } else {
    buffer = openInputFile(inputFile, &error);
    if (!buffer) {
      llvm::errs() << "shard-opt: " << error << "\n";
      return 1;
    }
    if (!target.empty()) {
      MLIRContext context(registry);
      context.printOpOnDiagnostic(false);
      llvm::SourceMgr sourceMgr;
      sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
      SourceMgrDiagnosticHandler handler(sourceMgr, &context);
      OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
      if (!module)
        return 1;
      return compileToArtifact(*module, inputFile, outputFile, /*fromONNX=*/false);
    }
    if (shardingRequested() || nnPassesRequested()) {
      MLIRContext context(registry);
      context.printOpOnDiagnostic(false);
      llvm::SourceMgr sourceMgr;
      sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
      SourceMgrDiagnosticHandler handler(sourceMgr, &context);
      OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
      if (!module)
        return 1;
      PassManager pm(&context);
      if (failed(buildNNPipeline(*module, pm)) || failed(pm.run(*module)))
        return 1;
      std::string text;
      llvm::raw_string_ostream os(text);
      module->print(os, OpPrintingFlags().enableDebugInfo(true, false));
      buffer = llvm::MemoryBuffer::getMemBufferCopy(text, inputFile);
    }
  }

  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << "shard-opt: " << error << "\n";
    return 1;
  }
  if (failed(MlirOptMain(output->os(), std::move(buffer), registry, config)))
    return 1;
  output->keep();
  // After the IR, so that it is the last line a user sees.
  if (!summary.empty()) {
    output->os().flush();
    llvm::errs() << summary << "\n";
  }
  return 0;
}
