//===- Executor.h - run an artifact's program on the CPU ------*- C++ -*-===//
//
// Owns the arena, maps this rank's weights (or weight slices) read-only
// from their files at the recorded offsets (the runtime never parses
// protobuf) and checks their CRC-32C, binds inputs and runs the kernels and
// collectives in order.
//
// Collectives (`collective` instructions; `groups`/`group_size` select the
// ranks, see Artifact.h), each reading `in` and writing `out`:
//   all_reduce      reduction=s:sum|prod|max|min; out has in's shape.
//   all_gather      dim=i:D; out is the members' ins concatenated along D.
//   reduce_scatter  dim=i:D, reduction; in is split along D into one piece
//                   per member, member k gets the reduction of the k-th pieces.
//   all_to_all      split_dim=i:S, concat_dim=i:C; in is split along S into
//                   one piece per member, piece k goes to member k, and out is
//                   the pieces received concatenated along C in member order.
//   collective_permute  pairs=is:src,dst,...; out receives src's in, or zeros
//                   on a rank that is no pair's target.
//   send / recv     peers=is: one peer per rank (-1: this rank does not
//                   take part); send reads in, recv writes out.
//   local_slice     starts=is: one start list per rank, flattened; out is
//                   the block of in at this rank's start. No communication:
//                   a strided copy, one memcpy per contiguous run.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_EXECUTOR_H
#define SHARDFLOW_RUNTIME_EXECUTOR_H

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime {

class Executor {
public:
  /// `weightsDir` overrides the artifact's model folder when non-empty.
  /// `comm` is this rank's world (nullptr: a single rank); it must outlive
  /// the executor. With `verifyWeights` the recorded checksums are checked.
  /// `loadThreads` read, check and convert the weights (0: as many as
  /// defaultLoadThreads() in WeightLoader.h says).
  Executor(Artifact artifact, std::string weightsDir, int threads,
           Communicator *comm = nullptr, bool verifyWeights = true,
           int loadThreads = 0);
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
  /// Time every instruction of the following runs (host clock).
  void setProfiling(bool on) { profiling = on; }
  /// With profiling: the last run's seconds per instruction.
  const std::vector<double> &instructionSeconds() const { return timings; }

private:
  void mapWeights(int loadThreads);
  void prepareCollectives();
  void runCollective(const Instruction &inst);
  void runLocalSlice(const Instruction &inst);
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
  /// Weight slices that are not contiguous in their file, copied out.
  std::vector<std::unique_ptr<uint8_t[]>> sliceCopies;
  size_t weightBytes = 0;
  Communicator *comm;
  std::unique_ptr<Communicator> single; // when no world was given
  bool verifyWeights;
  /// Per rank-group table (group size, then the flattened groups), this
  /// rank's communicator in it, or nullptr when the rank is in none of them.
  std::map<std::vector<int64_t>, std::unique_ptr<Communicator>> groupComms;
  std::vector<uint8_t> scratch[2];
  bool profiling = false;
  std::vector<double> timings;
};

/// The OPENBLAS_CORETYPE that would run the CPU executor's GEMMs faster on
/// this CPU, or "" when OpenBLAS's own choice stands: "SkylakeX" or
/// "Haswell" where OpenBLAS, not knowing the CPU's model, fell back to its
/// SSE kernels although the CPU has AVX-512 or AVX2. The kernels OpenBLAS
/// runs now go to `running` ("" without OpenBLAS). OpenBLAS reads the
/// variable only when it loads: shard-run sets it and starts again.
std::string preferredBlasCore(std::string *running = nullptr);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_EXECUTOR_H
