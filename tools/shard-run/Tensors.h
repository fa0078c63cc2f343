//===- Tensors.h - shard-run's inputs and outputs ---------------*- C++ -*-===//
//
// The graph's inputs from .npy, .npz and ONNX TensorProto (.pb) files, and
// the outputs written to them. numpy has no bfloat16: a bf16 input takes
// float32 data, rounded to nearest even, and bf16 outputs go to .npy and
// .npz as float32 (exact); a note on stderr says so each time.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TOOLS_SHARD_RUN_TENSORS_H
#define SHARDFLOW_TOOLS_SHARD_RUN_TENSORS_H

#include "Options.h"

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardflow::runtime {

/// The inputs --input and --inputs name, by name; rank 0 prints the notes.
/// `declared`: the program's inputs and their element types (a bf16 one
/// takes float32 data).
std::map<std::string, HostTensor>
readInputs(const Options &options, const std::vector<std::pair<std::string, DType>> &declared,
           int rank);
std::map<std::string, HostTensor> readInputs(const Options &options, const Artifact &artifact,
                                             int rank);

/// Writes the outputs as --output says: rank 0 alone, or every rank to its
/// own file when the name holds {rank}; without --output rank 0 prints a
/// summary.
void writeOutputs(std::string output, std::vector<std::pair<std::string, Tensor>> outputs,
                  int rank);

} // namespace shardflow::runtime

#endif // SHARDFLOW_TOOLS_SHARD_RUN_TENSORS_H
