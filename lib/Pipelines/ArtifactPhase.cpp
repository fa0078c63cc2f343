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
#include "shardflow/Target/WeightFiles.h"

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

LogicalResult shardflow::emitArtifact(ModuleOp module, const CompileOptions &options,
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
  std::string error;
  auto output = openOutputFile(paths.outputFile, &error);
  if (!output)
    return module.emitError(error);
  std::ostringstream text;
  runtime::writeArtifact(*artifact, text);
  output->os() << text.str();
  output->keep();
  return success();
}
