//===- WeightLoader.h - this rank's weight bytes, for any device -*- C++ -*-===//
//
// Both devices (CPU and CUDA) load weights the same way: map each weight
// file once, read-only; take this rank's slice (in place when its bytes are
// one run of the file, else its rows copied together); check the CRC-32C
// recorded at compile time over the file's bytes; and, for a mixed-precision
// weight (`source-dtype`), convert those bytes to the buffer's element type
// into an owned copy. The CPU device keeps the result; the CUDA device
// uploads it and lets the host copy go. `loadAll` does the reading, checking
// and converting on several threads and hands each weight to the caller's
// thread, so the devices' own calls (the CUDA driver's) stay on one thread.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_WEIGHTLOADER_H
#define SHARDFLOW_RUNTIME_WEIGHTLOADER_H

#include "shardflow/Runtime/Format/Artifact.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace shardflow::runtime {

/// Memory that loaded weights are written into instead of the heap: the
/// CUDA device's page-locked staging buffer, which the GPU copies from
/// directly. Both calls come from any thread.
class WeightStaging {
public:
  virtual ~WeightStaging() = default;
  /// A block of `bytes`, or null when none is free (the weight then stays
  /// where the loader put it, as without staging). Never blocks.
  virtual uint8_t *acquire(size_t bytes) = 0;
  /// Gives back a block `acquire` returned.
  virtual void release(uint8_t *block) = 0;
};

/// Gives a staging block back when the weight that holds it goes.
struct StagedRelease {
  WeightStaging *staging = nullptr;
  void operator()(uint8_t *block) const { staging->release(block); }
};

/// One weight's bytes for this rank, in the buffer's element type.
struct WeightBytes {
  const void *data = nullptr; // into a mapping, `owned` or `staged`
  size_t bytes = 0;
  /// Set when the bytes had to be copied (a strided slice) or converted.
  std::unique_ptr<uint8_t[]> owned;
  /// Set when the bytes are in a staging block (they are then all there).
  std::unique_ptr<uint8_t, StagedRelease> staged;
};

class WeightLoader {
public:
  /// `weightsDir` overrides the artifact's model folder when non-empty;
  /// `weightsModel`, when non-empty, is the file the weights stored inside
  /// the model (storage=embedded) are read from.
  WeightLoader(const Artifact &artifact, std::string weightsDir, int rank,
               bool verifyWeights, std::string weightsModel = {});
  ~WeightLoader(); // unmaps the files: `data` pointing into them dies too
  WeightLoader(const WeightLoader &) = delete;
  WeightLoader &operator=(const WeightLoader &) = delete;

  /// Loads buffer `index` (a weight). Throws RuntimeError naming the weight
  /// and file: missing or short file, changed checksum, or a source-dtype
  /// conversion that is not supported. With `staging`, the bytes end in a
  /// block of it when one is free: the last copy, conversion or permutation
  /// writes there, and a weight read in place is copied there.
  WeightBytes load(size_t index, WeightStaging *staging = nullptr);

  /// Loads the weights `indices` on `threads` threads (0: defaultLoadThreads()),
  /// the largest first, and hands each to `use` on the calling thread as soon
  /// as it is ready, in no fixed order. At most `threads` loaded weights wait
  /// for `use` at once, which bounds the host memory held. The first error, a
  /// worker's or `use`'s, stops the rest and is rethrown here.
  /// With `staging`, each weight is loaded as `load(i, staging)` does.
  void loadAll(std::vector<size_t> indices, int threads,
               const std::function<void(size_t, WeightBytes)> &use,
               WeightStaging *staging = nullptr);

  /// Hands the file mappings (base, length) to the caller, who munmaps
  /// them when done: a device that keeps pointers into the files.
  std::vector<std::pair<void *, size_t>> releaseMappings();

private:
  const uint8_t *mapFile(const std::string &path, const std::string &weight,
                         size_t &length);

  const Artifact &art;
  std::string dir;
  std::string model;
  int rank;
  bool verify;
  struct Mapping {
    void *base = nullptr;
    size_t length = 0;
  };
  std::map<std::string, Mapping> files;
  std::mutex filesMutex; // loadAll's workers map files concurrently
};

/// Threads for loading weights when none are asked for: the hardware threads
/// divided among the ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE,
/// MPI_LOCALNRANKS or SLURM_NTASKS_PER_NODE), between 1 and 8.
int defaultLoadThreads();

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_WEIGHTLOADER_H
