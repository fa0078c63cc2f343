//===- shard-opt.cpp - the Shardflow compiler driver and opt tool ----------===//
//
// An mlir-opt style tool with Shardflow's dialects, passes and compile
// pipelines registered. It also takes ONNX models directly: a `.onnx` or
// `.onnxtxt` input is imported into the nn dialect first. With --target it
// compiles to a .shard artifact; with --compile-to=PHASE it stops after a
// phase of the compile and prints the IR, which then goes through the usual
// mlir-opt pass flags and printer. The compile itself is built by the
// Pipelines library from the flags (Pipelines/CommandLine.h).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Conversion/Passes.h"
#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/Dist/IR/TestShardingRules.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/Autodiff/Training.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/NN/Transforms/FindLayers.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"
#include "shardflow/Dialect/RT/Analysis/RankReport.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"
#include "shardflow/Import/ONNX/DiagnosticHandler.h"
#include "shardflow/Import/ONNX/ImportSummary.h"
#include "shardflow/Import/ONNX/ONNXImporter.h"
#include "shardflow/Pipelines/ArtifactPhase.h"
#include "shardflow/Pipelines/CommandLine.h"
#include "shardflow/Pipelines/Pipelines.h"
#include "shardflow/Target/CUDA/Passes.h"
#include "shardflow/Target/DeviceCode.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include <chrono>

using namespace mlir;
using namespace shardflow;
namespace cl = llvm::cl;

static const char *kOverview =
    "shard-opt: the Shardflow compiler driver and MLIR optimizer.\n\n"
    "  shard-opt model.onnx [--input-shape x=1,128] [-o out.mlir]\n"
    "      imports an ONNX model (binary, with external data, or ONNX\n"
    "      text .onnxtxt) and prints its nn IR\n"
    "  shard-opt model.onnx [--mesh dp=2,tp=4 --strategy megatron]\n"
    "            --target cpu|cuda [--dtype bf16] -o model.shard\n"
    "      compiles it into an artifact that shard-run executes\n"
    "  shard-opt model.onnx --target cpu --compile-to=partitioned\n"
    "      stops after a phase of the compile and prints its IR\n"
    "  shard-opt in.mlir --pass-pipeline='...'\n"
    "      runs passes over MLIR, as mlir-opt does\n\n"
    "  Shardflow's own options are listed last, after MLIR's driver\n"
    "  options and passes; --help-hidden also lists LLVM's internal ones.\n";

/// LLVM registers a few hundred options of its own before main (backends'
/// tuning knobs: amdgpu, arm, polly, ...) that mean nothing to a user of
/// shard-opt and would bury its own options in --help. Hide them from --help
/// (--help-hidden still lists them, and they still parse); the options MLIR's
/// driver registers later (--pass-pipeline, the passes, the printer flags)
/// stay visible, and so do ours.
static void hideLLVMInternalOptions() {
  for (auto &entry : cl::getRegisteredOptions()) {
    cl::Option *option = entry.second;
    bool keep = llvm::is_contained({"help", "help-list", "version"}, entry.first) ||
                llvm::any_of(option->Categories, isCompilerOptionCategory);
    if (!keep && option->getOptionHiddenFlag() == cl::NotHidden)
      option->setHiddenFlag(cl::Hidden);
  }
}

static void registerEverything(DialectRegistry &registry) {
  registry.insert<nn::NNDialect, dist::DistDialect, rt::RTDialect, func::FuncDialect,
                  memref::MemRefDialect>();
  registerDeviceCodeDialects(registry);
  mlir::registerTransformsPasses();
  registerConversionPasses();
  rt::registerRTPasses();
  cuda::registerCUDAPasses();
  cuda::registerCUDACodegenPipeline();
  dist::registerTestShardingRulesPass();
  dist::registerDistPasses();
  nn::registerNNPasses();
  registerCompilePipelines();
  registerDeviceCodePipelines();
}

static int fail(llvm::Error error) {
  llvm::errs() << "shard-opt: " << llvm::toString(std::move(error)) << "\n";
  return 1;
}

/// MlirOptMain over `buffer`, writing to `outputFile`: the command line's
/// passes and printer flags apply. `summary`, if any, goes last.
static int runOpt(std::unique_ptr<llvm::MemoryBuffer> buffer, StringRef outputFile,
                  DialectRegistry &registry, const std::string &summary = "") {
  std::string error;
  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << "shard-opt: " << error << "\n";
    return 1;
  }
  if (failed(MlirOptMain(output->os(), std::move(buffer), registry,
                         MlirOptMainConfig::createFromCLOptions())))
    return 1;
  output->keep();
  // After the IR, so that it is the last line a user sees.
  if (!summary.empty()) {
    output->os().flush();
    llvm::errs() << summary << "\n";
  }
  return 0;
}

/// Hands `module` to MlirOptMain as text, so the command line's passes run
/// after the compile's; locations go along so later diagnostics still name
/// the ONNX node.
static int printThroughOpt(ModuleOp module, StringRef bufferName, StringRef outputFile,
                           DialectRegistry &registry, const std::string &summary) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os, OpPrintingFlags().enableDebugInfo(true, false));
  return runOpt(llvm::MemoryBuffer::getMemBufferCopy(text, bufferName), outputFile, registry,
                summary);
}

/// The float initializers of more than one element the importer made
/// weights or embedded constants of, in program order, checked for copies
/// of each other (findTiedInitializers); the ties found join --tie's.
static LogicalResult addTiedInitializers(ModuleOp module, StringRef path, TrainOptions &train) {
  std::vector<std::string> names;
  llvm::StringSet<> seen;
  module.walk([&](Operation *op) {
    StringRef name;
    auto type = op->getNumResults() == 1 ? dyn_cast<RankedTensorType>(op->getResult(0).getType())
                                         : RankedTensorType();
    if (!type || !type.getElementType().isF32() || type.getNumElements() < 2)
      return;
    if (auto w = dyn_cast<nn::WeightOp>(op))
      name = w.getName();
    else if (auto loc = dyn_cast<NameLoc>(op->getLoc());
             loc && isa<nn::ConstantOp>(op) && isa<UnknownLoc>(loc.getChildLoc()))
      name = loc.getName().getValue();
    if (!name.empty() && seen.insert(name).second)
      names.push_back(name.str());
  });
  auto ties = findTiedInitializers(module.getContext(), path, names);
  if (failed(ties))
    return failure();
  for (const std::string &t : *ties) {
    StringRef copy = StringRef(t).split('=').first;
    if (llvm::none_of(train.ties, [&](const std::string &d) {
          return StringRef(d).split('=').first == copy;
        }))
      train.ties.push_back(t);
  }
  return success();
}

int main(int argc, char **argv) {
  registerCompilerCLOptions();
  hideLLVMInternalOptions();
  DialectRegistry registry;
  registerEverything(registry);
  auto [inputFile, outputFile] = registerAndParseCLIOptions(argc, argv, kOverview, registry);
  DriverOptions driver;
  CompileOptions compile;
  if (llvm::Error e = getCompilerCLOptions(driver, compile))
    return fail(std::move(e));
  if (driver.listOps) {
    printSupportedOps(llvm::outs());
    return 0;
  }
  StringRef ext = llvm::sys::path::extension(inputFile);
  bool isONNX = driver.inputFormat == "onnx" ||
                (driver.inputFormat == "auto" && (ext == ".onnx" || ext == ".onnxtxt"));
  CompilePhase last = compile.lastPhase();

  std::string error;
  if (!isONNX && last == CompilePhase::Import) {
    // An mlir-opt run, nothing of the compile asked for.
    auto buffer = openInputFile(inputFile, &error);
    if (!buffer) {
      llvm::errs() << "shard-opt: " << error << "\n";
      return 1;
    }
    return runOpt(std::move(buffer), outputFile, registry);
  }

  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  std::string displayPath = inputFile == "-" ? "<stdin>" : inputFile;
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<ScopedDiagnosticHandler> diagnostics;
  OwningOpRef<ModuleOp> module;
  std::string summary;
  if (isONNX) {
    diagnostics = std::make_unique<ONNXDiagnosticHandler>(&context, displayPath);
    auto start = std::chrono::steady_clock::now();
    if (inputFile == "-") {
      auto in = openInputFile(inputFile, &error);
      if (!in) {
        llvm::errs() << "shard-opt: " << error << "\n";
        return 1;
      }
      module = importONNXBuffer(&context, in->getBuffer(), "<stdin>", driver.import);
    } else {
      module = importONNXFile(&context, inputFile, driver.import);
    }
    if (!module)
      return 1;
    std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    if (driver.summary)
      summary = summarizeImport(*module, displayPath, seconds.count());
  } else {
    auto buffer = openInputFile(inputFile, &error);
    if (!buffer) {
      llvm::errs() << "shard-opt: " << error << "\n";
      return 1;
    }
    sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
    diagnostics = std::make_unique<SourceMgrDiagnosticHandler>(sourceMgr, &context);
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
    if (!module)
      return 1;
  }
  if (llvm::Error e = resolveForModule(compile, *module))
    return fail(std::move(e));
  if (compile.train.enabled && isONNX && inputFile != "-" && compile.train.detectTies &&
      failed(addTiedInitializers(*module, inputFile, compile.train)))
    return 1;

  PassManager pm(&context);
  // With a target, --mlir-print-ir-after=..., --mlir-timing and the other
  // pass-manager flags apply to the compile pipeline (when printing IR,
  // they apply to the passes MlirOptMain runs after it).
  if (!compile.target.empty()) {
    if (failed(applyPassManagerCLOptions(pm)))
      return 1;
    applyDefaultTimingPassManagerCLOptions(pm);
  }
  buildCompilePipeline(pm, compile);
  if (failed(pm.run(*module)))
    return 1;
  if (driver.report) {
    nn::printLayerReport(*module, llvm::errs());
    nn::printTrainingReport(*module, llvm::errs());
    // A pipeline's stages are reported one by one as they are compiled.
    if (!compile.pipeline.enabled())
      rt::printRankReport(*module, llvm::errs());
  }
  if (last != CompilePhase::Artifact)
    return printThroughOpt(*module, displayPath, outputFile, registry, summary);
  ArtifactPaths paths{inputFile, isONNX, outputFile};
  int rc = failed(emitArtifact(*module, compile, paths, driver.report ? &llvm::errs() : nullptr))
               ? 1
               : 0;
  if (!summary.empty())
    llvm::errs() << summary << "\n";
  return rc;
}
