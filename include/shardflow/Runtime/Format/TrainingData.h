//===- TrainingData.h - a training run's batches and trained weights -*- C++ -*-===//
//
// shard-run --data: an .npz holding, for each input of a training step
// (labels included), an array [S, ...the input's global shape]; step t
// (1-based) takes entry (t - 1) mod S. And --save-weights: the trained
// weights, whole, as safetensors (the format of Hugging Face's
// `safetensors` package: an 8-byte little-endian header length, a JSON
// header of names, dtypes, shapes and byte ranges, then the bytes) or .npz.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_FORMAT_TRAININGDATA_H
#define SHARDFLOW_RUNTIME_FORMAT_TRAININGDATA_H

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardflow::runtime {

class TrainingData {
public:
  /// Checks `arrays` (the members of `what`, an .npz) against the inputs of
  /// `artifact`: one array per input, none other, each [S, ...input shape]
  /// of the input's type, S the same for all and at least 1. Throws
  /// RuntimeError naming the file and the array.
  TrainingData(std::vector<std::pair<std::string, HostTensor>> arrays, const Artifact &artifact,
               const std::string &what);
  /// The same against `inputs` (input buffers: a pipeline's whole batch).
  TrainingData(std::vector<std::pair<std::string, HostTensor>> arrays,
               const std::vector<BufferDesc> &inputs, const std::string &what);

  /// S: how many batches the file holds.
  int64_t entries() const { return count; }
  /// The inputs of 1-based step `t`: entry (t - 1) mod S of each array.
  std::map<std::string, HostTensor> step(int64_t t) const;

private:
  std::vector<std::pair<std::string, HostTensor>> arrays;
  int64_t count = 0;
};

/// Writes `tensors` (name, tensor) to a safetensors file. Throws
/// RuntimeError naming the file (an element type safetensors lacks, a
/// write that fails).
void writeSafetensors(const std::string &path,
                      const std::vector<std::pair<std::string, Tensor>> &tensors);
/// The safetensors file's bytes.
std::string serializeSafetensors(const std::vector<std::pair<std::string, Tensor>> &tensors);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_FORMAT_TRAININGDATA_H
