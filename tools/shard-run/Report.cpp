//===- Report.cpp - what shard-run measured, for --verbose and --profile ---===//

#include "Report.h"

#include <algorithm>
#include <cstdio>

using namespace shardflow::runtime;

RunReport::RunReport(ProgramRunner &runner, Clock::time_point start, int repeat, bool profile)
    : runner(runner), start(start), loadedAt(start), repeat(repeat), profile(profile) {}

void RunReport::ran(int index, double hostSeconds) {
  if (index == 0)
    first = best = hostSeconds;
  best = std::min(best, hostSeconds);
  RunFigures f = runner.device().lastRun();
  if (f.downloadSeconds >= 0)
    downloads[f.downloadPinned].push_back(f.downloadSeconds);
  // The first run also pays for lazy initialization inside the libraries:
  // it is measured only when it is the only one.
  if (index == 0 && repeat > 1)
    return;
  if (f.deviceSeconds >= 0)
    deviceTimes.push_back(f.deviceSeconds);
  if (profile)
    profiled.add(runner.instructionSeconds(), f.deviceSeconds >= 0 ? f.deviceSeconds : hostSeconds);
}

void RunReport::print(bool verbose, int rank) const {
  Device &device = runner.device();
  if (verbose) {
    using S = std::chrono::duration<double>;
    std::fprintf(stderr,
                 "shard-run: load %.3f s, first run %.3f s, best of %d runs "
                 "%.6f s; arena %lld bytes, weights %s %zu bytes\n",
                 S(loadedAt - start).count(), first, repeat, best,
                 (long long)runner.artifact().arenaBytes, device.weightPlace(),
                 device.weightBytes());
    if (!deviceTimes.empty()) {
      std::vector<double> sorted = deviceTimes;
      std::sort(sorted.begin(), sorted.end());
      std::fprintf(stderr,
                   "shard-run: GPU program time: best %.3f ms, median %.3f ms over %zu "
                   "runs\n",
                   sorted.front() * 1e3, sorted[sorted.size() / 2] * 1e3, sorted.size());
    }
    for (bool pinned : {false, true}) {
      std::vector<double> d = downloads[pinned];
      if (d.empty() || !device.outputBytes())
        continue;
      std::sort(d.begin(), d.end());
      std::fprintf(stderr,
                   "shard-run: outputs downloaded (%zu bytes, %s memory): best %.3f ms "
                   "(%.2f GB/s) over %zu runs\n",
                   device.outputBytes(), pinned ? "page-locked" : "pageable", d.front() * 1e3,
                   double(device.outputBytes()) / std::max(d.front(), 1e-9) / 1e9, d.size());
    }
  }
  if (profile && rank == 0)
    std::fprintf(stderr, "shard-run: %s",
                 formatProfile(runner.artifact(), profiled, "rank 0; " + device.clock()).c_str());
}
