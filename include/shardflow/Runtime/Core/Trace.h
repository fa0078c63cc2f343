//===- Trace.h - every rank's work on one timeline ---------------*- C++ -*-===//
//
// shard-run --trace FILE: each rank records a span per instruction of every
// run (kernels by name, generated kernels by function, collectives by kind,
// local_slice as a copy), on the lane it ran on (a CUDA stream, the CPU),
// with its ONNX node, instruction number and bytes; the host's spans (each
// run, the inputs' upload and the outputs' download) go on a lane of their
// own. Times are on each host's steady clock (hostClockSeconds, Device.h);
// CUDA's come from events placed on it by an event the host waited for at
// the run's start. At the end rank 0 gathers every rank's spans through the
// world communicator and writes one file in the Chrome trace format (a
// "traceEvents" array of complete "X" events, microseconds, pid = rank,
// tid = lane), which Perfetto and chrome://tracing open.
//
// Ranks on other hosts have other clocks: at the recorder's start, rank 0
// measures each rank's offset from its own clock with a few ping-pongs
// (NTP's midpoint rule, keeping the round trip that was fastest) and
// subtracts it from that rank's spans, so the ranks line up to within that
// round trip. The offsets are written in the file's "otherData".
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CORE_TRACE_H
#define SHARDFLOW_RUNTIME_CORE_TRACE_H

#include "shardflow/Runtime/Comm/Communicator.h"

#include <cstdint>
#include <string>
#include <vector>

namespace shardflow::runtime {

/// One span of one rank's work.
struct TraceEvent {
  std::string name;     // the kernel, generated function or collective
  std::string category; // "kernel", "launch", "collective", "copy", "run"
  int lane = 0;         // the recorder's lanes
  double start = 0;     // hostClockSeconds
  double seconds = 0;
  std::string node;         // the ONNX node, when the instruction names one
  int64_t instruction = -1; // the instruction's number, or -1
  int64_t bytes = -1;       // what it reads (collectives) or writes, or -1
  int run = -1;             // the run it belongs to, or -1
};

class TraceRecorder {
public:
  /// Lanes by number (InstructionTime::lane, then the host's). Measures
  /// this rank's clock against rank 0's: a collective call on `world`,
  /// which outlives the recorder.
  TraceRecorder(Communicator &world, std::vector<std::string> lanes);

  void add(TraceEvent event) { events.push_back(std::move(event)); }
  size_t size() const { return events.size(); }

  /// Rank 0 gathers every rank's spans and writes them to `path`; a
  /// collective call on the world. Throws RuntimeError when the file cannot
  /// be written.
  void write(const std::string &path);

  /// This rank's clock minus rank 0's, in seconds, as rank 0 measured it
  /// (known on rank 0, for every rank).
  const std::vector<double> &clockOffsets() const { return offsets; }

private:
  void measureOffsets();

  Communicator &world;
  std::vector<std::string> lanes;
  std::vector<TraceEvent> events;
  std::vector<double> offsets, roundTrips;
};

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_CORE_TRACE_H
