//===- Report.h - what shard-run measured, for --verbose and --profile -*- C++ -*-===//
//
// The runs' times as the host and the device saw them: --verbose prints
// the load, the first and the best run, the device's program time and the
// outputs' download (every rank); --profile prints, for rank 0, the time
// per kind of operation and the slowest operations (Core/Profile.h),
// averaged over the measured runs (all but the first when there are
// several: the first also pays for lazy initialization inside the
// libraries).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TOOLS_SHARD_RUN_REPORT_H
#define SHARDFLOW_TOOLS_SHARD_RUN_REPORT_H

#include "shardflow/Runtime/Core/Profile.h"
#include "shardflow/Runtime/Core/ProgramRunner.h"

#include <chrono>
#include <vector>

namespace shardflow::runtime {

class RunReport {
public:
  using Clock = std::chrono::steady_clock;

  /// Shard-run started at `start`; `repeat` runs follow the load.
  RunReport(ProgramRunner &runner, Clock::time_point start, int repeat, bool profile);

  /// The program is loaded: the runs begin.
  void loaded() { loadedAt = Clock::now(); }
  /// Run `index` (0, 1, ...) took `hostSeconds`.
  void ran(int index, double hostSeconds);
  /// --verbose's lines (this rank), then --profile's report (rank 0).
  void print(bool verbose, int rank) const;

private:
  ProgramRunner &runner;
  Clock::time_point start, loadedAt;
  int repeat;
  bool profile;
  double first = 0, best = 0;
  /// The device's program time of the measured runs.
  std::vector<double> deviceTimes;
  /// Each run's download of its outputs (host time), by kind of memory:
  /// [pageable, page-locked].
  std::vector<double> downloads[2];
  ProfileTotals profiled;
};

} // namespace shardflow::runtime

#endif // SHARDFLOW_TOOLS_SHARD_RUN_REPORT_H
