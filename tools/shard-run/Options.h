//===- Options.h - shard-run's command line ---------------------*- C++ -*-===//
//
// Every flag of shard-run (--help prints them all, Options.cpp) parsed into
// one struct: what the driver reads and writes, and the settings of the
// program runner and of the device the artifact's target picks.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TOOLS_SHARD_RUN_OPTIONS_H
#define SHARDFLOW_TOOLS_SHARD_RUN_OPTIONS_H

#include "shardflow/Runtime/Core/Device.h"
#include "shardflow/Runtime/Core/ProgramRunner.h"
#include "shardflow/Runtime/Device/CUDA/CudaDevice.h"

#include <map>
#include <optional>
#include <string>

namespace shardflow::runtime {

struct Options {
  std::string artifact;
  /// --weights: the model file (.onnx) or its folder.
  std::string weights;
  /// --input NAME=FILE (.npy, .pb) and --inputs FILE.npz.
  std::map<std::string, std::string> inputFiles;
  std::string inputsNpz;
  /// --output FILE (.npz, .npy, .pb; {rank} for one file per rank).
  std::string output;
  int repeat = 1;
  /// Training (an artifact compiled with --train): --data FILE.npz, run
  /// until the step counter reaches --steps, --log FILE.jsonl,
  /// --save-weights FILE.safetensors|.npz.
  std::string data;
  int64_t steps = 0;
  std::string log;
  std::string saveWeights;
  /// Go on past a step whose loss or gradient norm is not finite (it
  /// changes no weight) instead of stopping.
  bool skipNonfinite = false;
  bool verbose = false;
  bool profile = false;
  /// --trace FILE: every rank's spans, written by rank 0.
  std::string trace;
  DeviceSettings device;
  CudaOptions cuda;
  RunnerSettings runner;
};

/// The options of `argv`, or nothing after printing --help. Throws
/// RuntimeError naming a flag that is unknown, lacks its value or has a
/// wrong one.
std::optional<Options> parseOptions(int argc, char **argv);

} // namespace shardflow::runtime

#endif // SHARDFLOW_TOOLS_SHARD_RUN_OPTIONS_H
