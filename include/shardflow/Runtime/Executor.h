//===- Executor.h - run an artifact's program on the CPU ------*- C++ -*-===//
//
// Owns the arena, maps weights read-only from their files at the recorded
// offsets (the runtime never parses protobuf), binds inputs and runs the
// kernels in order.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_EXECUTOR_H
#define SHARDFLOW_RUNTIME_EXECUTOR_H

#include "shardflow/Runtime/Artifact.h"
#include "shardflow/Runtime/NpyIO.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime {

class Executor {
public:
  /// `weightsDir` overrides the artifact's model folder when non-empty.
  Executor(Artifact artifact, std::string weightsDir, int threads);
  ~Executor();

  /// Inputs by name; each must match the artifact's shape and type.
  /// Returns the outputs by name, in the artifact's order, as views of the
  /// executor's buffers (or of the inputs): valid until the next run and
  /// while the inputs live. Nothing is copied.
  std::vector<std::pair<std::string, Tensor>>
  run(const std::map<std::string, HostTensor> &inputs);

  const Artifact &artifact() const { return art; }
  /// Bytes of weights mapped for this rank.
  size_t mappedWeightBytes() const { return weightBytes; }

private:
  void mapWeights();
  Tensor tensorOf(int buffer) const;

  Artifact art;
  std::string weightsDir;
  int threads;
  std::unique_ptr<uint8_t, void (*)(void *)> arena;
  std::vector<void *> pointers; // per buffer, once bound
  struct Mapping {
    void *base = nullptr;
    size_t length = 0;
  };
  std::vector<Mapping> mappings;
  size_t weightBytes = 0;
};

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_EXECUTOR_H
