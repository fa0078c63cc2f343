//===- ArtifactPhase.cpp - the last phase: the .shard file -----------------===//
//
// See ArtifactPhase.h. Side weights come before checksums: a side weight's
// checksum is taken over the file written here, where shard-run reads it.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Pipelines/ArtifactPhase.h"
#include "shardflow/Import/ONNX/ONNXImporter.h"
#include "shardflow/Target/ArtifactExport.h"
#include "shardflow/Target/DeviceCode.h"
#include "shardflow/Dialect/RT/Analysis/RankReport.h"
#include "shardflow/Pipelines/PipelineTraining.h"
#include "shardflow/Pipelines/Pipelines.h"
#include "shardflow/Dialect/NN/Autodiff/Training.h"
#include "shardflow/Runtime/Format/PipelineArtifact.h"
#include "shardflow/Target/WeightFiles.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/GlobPattern.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

#include <sstream>

using namespace mlir;
using namespace shardflow;

/// Writes the generated kernels' PTX to `path` ("-": stdout).
static LogicalResult dumpPTX(const runtime::Artifact &artifact, StringRef path, Location loc) {
  std::string error;
  auto ptx = openOutputFile(path, &error);
  if (!ptx)
    return emitError(loc, error);
  for (const auto &m : artifact.modules)
    if (m.format == "ptx")
      ptx->os() << "// module " << m.name << " (" << m.arch << ")\n"
                << StringRef(reinterpret_cast<const char *>(m.data.data()), m.data.size());
  ptx->keep();
  return success();
}

/// The weights that cannot be mapped in place, read from the ONNX model
/// and written next to the artifact.
static LogicalResult writeSideWeightsOf(runtime::Artifact &artifact, ModuleOp module,
                                        const ArtifactPaths &paths) {
  std::vector<std::string> names = unmappableWeights(artifact);
  if (names.empty())
    return success();
  if (!paths.fromONNX || paths.outputFile == "-")
    return module.emitError("weight '")
           << names.front()
           << "' is not byte-addressable in its file; compile from the .onnx/.onnxtxt "
              "model with -o FILE so that shard-opt can write it next to the artifact";
  llvm::StringMap<std::string> bytes;
  if (failed(readInitializerBytes(module.getContext(), paths.inputFile, names, bytes)))
    return failure();
  return writeSideWeights(artifact, bytes, paths.outputFile, module.getLoc());
}

/// The artifact of `module` (compiled through the rt or gpu phase):
/// exported, with its device code, side weights and checksums.
static FailureOr<runtime::Artifact> buildArtifact(ModuleOp module, const CompileOptions &options,
                                                  const ArtifactPaths &paths) {
  // Weight files are found next to the model unless shard-run is told
  // otherwise (--weights).
  SmallString<256> dir(paths.inputFile == "-" ? "." : paths.inputFile);
  llvm::sys::fs::make_absolute(dir);
  llvm::sys::path::remove_filename(dir);
  auto artifact = exportArtifact(module, options.target, dir);
  if (failed(artifact))
    return failure();
  if (options.target == "cuda") {
    DeviceCodeOptions device;
    if (!options.cudaArchs.empty())
      device.chips.assign(options.cudaArchs.begin(), options.cudaArchs.end());
    device.cudaPath = options.cudaPath;
    auto modules = compileDeviceCode(module, device);
    if (failed(modules))
      return failure();
    artifact->modules = std::move(*modules);
    if (!options.dumpPTX.empty() && failed(dumpPTX(*artifact, options.dumpPTX, module.getLoc())))
      return failure();
  }
  if (failed(writeSideWeightsOf(*artifact, module, paths)) ||
      (options.weightChecksums && paths.outputFile != "-" &&
       failed(addWeightChecksums(*artifact, paths.outputFile, module.getLoc()))))
    return failure();
  return artifact;
}

/// Writes `text` to `path` ("-": stdout).
static LogicalResult writeText(const std::string &text, StringRef path, Location loc) {
  std::string error;
  auto output = openOutputFile(path, &error);
  if (!output)
    return emitError(loc, error);
  output->os() << text;
  output->keep();
  return success();
}

LogicalResult shardflow::emitArtifact(ModuleOp module, const CompileOptions &options,
                                      const ArtifactPaths &paths, llvm::raw_ostream *report) {
  if (module->hasAttr("dist.pipeline"))
    return emitPipelineArtifact(module, options, paths, report);
  auto artifact = buildArtifact(module, options, paths);
  if (failed(artifact))
    return failure();
  std::ostringstream text;
  runtime::writeArtifact(*artifact, text);
  return writeText(text.str(), paths.outputFile, module.getLoc());
}

/// A graph input's or output's whole-batch tensor, from a stage
/// function's argument or result type (one micro-batch's).
static runtime::PipelineTensor wholeBatch(StringRef name, Type type, int64_t microbatches,
                                          Location loc, bool &ok) {
  runtime::PipelineTensor t;
  t.name = name.str();
  auto tensor = cast<RankedTensorType>(type);
  t.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
  if (t.shape.empty()) {
    emitError(loc, "pipeline: '") << name
                                  << "' has no batch dimension to cut into micro-batches";
    ok = false;
  } else {
    t.shape[0] *= microbatches;
  }
  std::string elem;
  llvm::raw_string_ostream os(elem);
  os << tensor.getElementType();
  auto dtype = runtime::parseDType(elem);
  if (!dtype) {
    emitError(loc, "pipeline: '") << name << "' has element type " << elem
                                  << ", which artifacts do not carry";
    ok = false;
  } else {
    t.dtype = *dtype;
  }
  return t;
}

LogicalResult shardflow::emitPipelineArtifact(ModuleOp module, const CompileOptions &options,
                                              const ArtifactPaths &paths,
                                              llvm::raw_ostream *report) {
  auto info = module->getAttrOfType<DictionaryAttr>("dist.pipeline");
  runtime::PipelineArtifact art;
  art.target = options.target;
  if (auto name = info.getAs<StringAttr>("schedule"))
    art.scheduleName = name.getValue().str();
  int64_t ranks = info.getAs<IntegerAttr>("ranks").getInt();
  int64_t microbatches = info.getAs<IntegerAttr>("microbatches").getInt();
  std::string actions;
  for (Attribute a : info.getAs<ArrayAttr>("actions"))
    actions += cast<StringAttr>(a).getValue().str() + "\n";
  std::string error;
  auto schedule = runtime::parsePipelineSchedule(actions, "dist.pipeline", int(ranks),
                                                 int(microbatches), !options.train.enabled,
                                                 error);
  if (!schedule)
    return module.emitError(error);
  art.schedule = std::move(*schedule);

  SmallVector<func::FuncOp> stages(module.getOps<func::FuncOp>());
  llvm::sort(stages, [](func::FuncOp a, func::FuncOp b) {
    return a->getAttrOfType<IntegerAttr>("dist.stage").getInt() <
           b->getAttrOfType<IntegerAttr>("dist.stage").getInt();
  });
  // The whole batch's inputs (each once) and outputs.
  bool ok = true;
  llvm::StringSet<> seenInputs;
  for (func::FuncOp fn : stages) {
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (!fn.getArgAttr(i, "dist.transfer"))
        if (auto name = fn.getArgAttrOfType<StringAttr>(i, "nn.name");
            name && seenInputs.insert(name.getValue()).second)
          art.inputs.push_back(wholeBatch(name.getValue(), fn.getArgument(i).getType(),
                                          microbatches, fn.getLoc(), ok));
    // A training step's outputs are its loss, gradient norm and rate.
    for (unsigned i = 0; i < fn.getNumResults() && !options.train.enabled; ++i)
      if (!fn.getResultAttr(i, "dist.transfer"))
        if (auto name = fn.getResultAttrOfType<StringAttr>(i, "nn.name"))
          art.outputs.push_back(wholeBatch(name.getValue(), fn.getResultTypes()[i],
                                           microbatches, fn.getLoc(), ok));
  }
  if (!ok)
    return failure();

  // Each stage: a module of its own, through the rt (and gpu) phases, then
  // an artifact as any program's. A training stage is four programs
  // (PipelineTraining.h).
  llvm::StringSet<> counted;
  std::vector<std::string> frozen;
  llvm::StringSet<> trained;
  for (auto [k, fn] : llvm::enumerate(stages)) {
    OwningOpRef<ModuleOp> stage;
    std::optional<TrainingStagePrograms> programs;
    if (options.train.enabled) {
      bool split = false;
      for (const auto &list : art.schedule.actions)
        for (const runtime::PipelineAction &a : list)
          split |= a.stage == int(k) && (a.op == runtime::PipelineOp::BackwardInput ||
                                         a.op == runtime::PipelineOp::BackwardWeight);
      auto built = buildTrainingStage(module, fn, options, microbatches, split, counted);
      if (failed(built))
        return failure();
      programs = std::move(*built);
      stage = std::move(programs->forward);
      for (const TrainedWeight &t : programs->trained)
        trained.insert(t.weight);
      frozen.insert(frozen.end(), programs->frozen.begin(), programs->frozen.end());
    } else {
      stage = stageModule(module, fn);
      PassManager pm(module.getContext());
      buildPhasePipeline(pm, CompilePhase::RT, options);
      buildPhasePipeline(pm, CompilePhase::GPU, options);
      if (failed(pm.run(*stage)))
        return failure();
    }
    if (report) {
      auto layers = fn->getAttrOfType<DenseI64ArrayAttr>("dist.layers");
      auto seconds = fn->getAttrOfType<FloatAttr>("dist.estimated_seconds");
      *report << "stage " << k << " on pp rank "
              << fn->getAttrOfType<IntegerAttr>("dist.pp_rank").getInt();
      if (layers)
        *report << ": layers " << layers[0] << " to " << layers[1] - 1
                << (k == 0 ? " and the embeddings" : "")
                << (k + 1 == stages.size() ? " and the head" : "");
      auto flops = fn->getAttrOfType<FloatAttr>("dist.estimated_flops");
      auto bytes = fn->getAttrOfType<FloatAttr>("dist.estimated_bytes");
      if (seconds && flops && bytes)
        *report << llvm::format(", estimated %.3f ms per micro-batch (%.4g GFLOP, %.4g MB "
                                "read and written; registry costs at 80 GFLOP/s + 50 GB/s, one CPU core)",
                                seconds.getValueAsDouble() * 1e3,
                                flops.getValueAsDouble() * 1e-9, bytes.getValueAsDouble() * 1e-6);
      *report << "\n";
      if (programs) {
        *report << "stage " << k << " trains " << programs->trained.size()
                << " initializers; its backward:\n";
        rt::printRankReport(*programs->backward, *report);
        nn::printTrainingReport(*programs->update, *report);
      } else {
        rt::printRankReport(*stage, *report);
      }
    }
    auto build = [&](ModuleOp m, const std::string &suffix) {
      ArtifactPaths stagePaths = paths;
      if (paths.outputFile != "-")
        stagePaths.outputFile = paths.outputFile + ".stage" + std::to_string(k) + suffix;
      return buildArtifact(m, options, stagePaths);
    };
    auto artifact = build(*stage, "");
    if (failed(artifact))
      return failure();
    art.stages.push_back(std::move(*artifact));
    if (programs) {
      runtime::PipelineStageTraining t;
      t.splitsBackward = bool(programs->backwardInput);
      for (auto [m, suffix, into] :
           {std::make_tuple(programs->backward.get(), ".backward", &t.backward),
            std::make_tuple(programs->backwardInput.get(), ".backward-input", &t.backwardInput),
            std::make_tuple(programs->backwardWeight.get(), ".backward-weight",
                            &t.backwardWeight),
            std::make_tuple(programs->norm.get(), ".norm", &t.norm),
            std::make_tuple(programs->update.get(), ".update", &t.update)}) {
        if (!m)
          continue;
        auto program = build(m, suffix);
        if (failed(program))
          return failure();
        *into = std::move(*program);
      }
      art.training.push_back(std::move(t));
    }
  }
  // A --freeze or --trainable glob must name something somewhere.
  for (auto [flag, globs] :
       {std::make_pair("--freeze", &options.train.freeze),
        std::make_pair("--trainable", &options.train.trainable)})
    for (const std::string &glob : *globs) {
      auto pattern = llvm::GlobPattern::create(glob);
      bool any = false;
      for (const std::string &name : frozen)
        any |= pattern && pattern->match(name);
      for (const auto &name : trained)
        any |= flag == StringRef("--trainable") && pattern && pattern->match(name.getKey());
      if (!any)
        return module.emitError(flag) << " '" << glob
                                      << "' matches no initializer that has a gradient";
    }
  art.worldSize = int(ranks) * art.stages.front().worldSize;
  if (report) {
    // What each stage's ranks hold, with the schedule's activations in
    // flight.
    for (int k = 0; k < art.schedule.stages(); ++k) {
      runtime::StageMemory m = runtime::stageMemory(art, k);
      auto mb = [](size_t bytes) { return double(bytes) * 1e-6; };
      *report << llvm::format("stage %d memory per rank: weights %.4g MB", k, mb(m.weights));
      if (art.trains())
        *report << llvm::format(", trained weights %.4g MB, optimizer state %.4g MB, gradient "
                                "accumulators %.4g MB, activations %.4g MB a micro-batch x %d "
                                "in flight (%s)",
                                mb(m.trained), mb(m.optimizerState), mb(m.accumulators),
                                mb(m.activations), m.inFlight, art.scheduleName.c_str());
      *report << llvm::format(", arena %.4g MB: about %.4g MB\n", mb(m.arenas), mb(m.total()));
    }
  }
  std::ostringstream text;
  runtime::writePipelineArtifact(art, text);
  return writeText(text.str(), paths.outputFile, module.getLoc());
}
