//===- CommandLine.h - the compiler's command-line options -----*- C++ -*-===//
//
// shard-opt's own flags (import, compilation, sharding), declared once here
// so that the driver stays a thin tool: register them before parsing the
// command line, then read them back as an ONNXImportOptions-ready
// ImportFlags and a CompileOptions.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_PIPELINES_COMMANDLINE_H
#define SHARDFLOW_PIPELINES_COMMANDLINE_H

#include "shardflow/Import/ONNX/ONNXImporter.h"
#include "shardflow/Pipelines/CompileOptions.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

namespace shardflow {

/// What shard-opt's flags ask of one run, beyond the compile itself.
struct DriverOptions {
  /// "auto" (by extension), "mlir" or "onnx".
  std::string inputFormat = "auto";
  /// For ONNX input.
  ONNXImportOptions import;
  /// --summary: one line about the imported model.
  bool summary = false;
  /// --report: per-rank memory and collectives of the compiled program.
  bool report = false;
  /// --list-ops: print the supported ONNX ops and exit.
  bool listOps = false;
};

/// Registers the flags with LLVM's command line; call before parsing it.
void registerCompilerCLOptions();

/// Whether `category` is one of Shardflow's (the driver's --help hides
/// the others' LLVM-internal flags).
bool isCompilerOptionCategory(const llvm::cl::OptionCategory *category);

/// The parsed flags, checked: an error names the flag and what is wrong
/// with its value.
llvm::Error getCompilerCLOptions(DriverOptions &driver, CompileOptions &compile);

} // namespace shardflow

#endif // SHARDFLOW_PIPELINES_COMMANDLINE_H
