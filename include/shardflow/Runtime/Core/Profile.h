//===- Profile.h - where a program's time goes, per operation ---*- C++ -*-===//
//
// shard-run --profile: the devices time every instruction of a run (CUDA
// events around each operation on its stream; the host clock on the CPU),
// shard-run sums the times over the runs it measures, and formatProfile
// prints them by kind of operation and the slowest operations by ONNX node.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_PROFILE_H
#define SHARDFLOW_RUNTIME_PROFILE_H

#include "shardflow/Runtime/Format/Artifact.h"

#include <string>
#include <vector>

namespace shardflow::runtime {

/// Per-instruction times summed over the profiled runs.
struct ProfileTotals {
  std::vector<double> seconds; // per instruction of the program
  double programSeconds = 0;   // the programs' own times, summed
  int runs = 0;

  /// One run: `instructionSeconds` has one entry per instruction.
  void add(const std::vector<double> &instructionSeconds, double program);
};

/// A short name for what an instruction does: the kernel ("matmul", with
/// its epilogue and "+C" when it adds a residual), a generated kernel by its
/// function's name without the "kN_" prefix ("generated add_layer_
/// normalization"), a collective by its name.
std::string profileKind(const Instruction &inst);

/// The report: the program's mean time, the operations' summed mean time
/// (split into compute, with its share of the program, and communication:
/// the collectives other than local_slice), then per kind the count, mean time per run and share of the summed
/// time (largest first), and the `top` slowest instructions with their
/// ONNX nodes. `clock` says how the times were taken.
std::string formatProfile(const Artifact &art, const ProfileTotals &totals,
                          const std::string &clock, size_t top = 10);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_PROFILE_H
