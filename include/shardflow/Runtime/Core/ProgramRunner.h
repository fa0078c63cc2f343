//===- ProgramRunner.h - one rank's program over a device -------*- C++ -*-===//
//
// The runtime's core: one loop over an artifact's instructions for every
// device (Device.h: CPU, CUDA) and communicator (Communicator.h: MPI, NCCL,
// single rank). The runner loads the program onto its device, makes the
// communicators its collectives need (the device's, split into the rank
// groups the program names), and at each run binds the inputs, dispatches
// every instruction, waits, and hands back the outputs:
//
//   kernel, launch   to the device (runKernel).
//   local_slice      to the device as well: no data moves between ranks.
//   collectives      through the communicator, with the device copying
//                    around them where a collective splits or gathers a
//                    dimension that is not the outermost.
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
//                   the block of in at this rank's start.
//
// Waiting: a collective whose request is a host operation (MPI, single
// rank) is waited for before the next instruction; one ordered on a device
// stream (NCCL) is left to the stream, and the device's wait at the end of
// the run watches it. Either wait gives up after `timeoutSeconds`
// (--timeout): the rank ends the whole job with a message that names the
// collective (kind, instruction, ONNX node) and the ranks it waited for.
//
// Timing: with `profile` or `trace`, the device times every instruction
// (Device::instructionTimes); instructionSeconds() gives the last run's,
// for shard-run --profile (Profile.h), and with `trace` every run's spans
// go to a TraceRecorder (Trace.h) for --trace.
//
// Programs that share state: a training pipeline stage's forward, backward,
// norm and update are artifacts of their own, each on a device of its own,
// and the later ones read the weights and state the first one loaded
// (`stateOwner`, Device::shareState): one buffer per weight, accumulator
// and moment on the rank.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CORE_PROGRAMRUNNER_H
#define SHARDFLOW_RUNTIME_CORE_PROGRAMRUNNER_H

#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Core/Device.h"
#include "shardflow/Runtime/Core/Trace.h"
#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shardflow::runtime {

struct RunnerSettings {
  /// How long a rank waits in a collective, send or recv (and for the
  /// device) before it ends the job, and the flag that set it.
  double timeoutSeconds = 600;
  std::string timeoutFlag = "--timeout";
  /// Time every instruction (instructionSeconds).
  bool profile = false;
  /// Record every run's spans for writeTrace (Trace.h; the device must time
  /// instructions on the host's clock: DeviceSettings::traceClock).
  bool trace = false;
};

class ProgramRunner {
public:
  /// Loads `artifact` onto `device`: a collective call on `world` (the
  /// launched world, which outlives the runner), whose size must be the
  /// artifact's. Throws RuntimeError naming what is wrong (the instruction,
  /// for one that cannot run on the device).
  ///
  /// With `stateOwner` (a runner of this process that outlives this one),
  /// the weights and state both programs read are the owner's buffers
  /// (Device::shareState): a pipeline stage's programs.
  ProgramRunner(Artifact artifact, std::unique_ptr<Device> device, Communicator &world,
                const RunnerSettings &settings, ProgramRunner *stateOwner = nullptr);
  ~ProgramRunner();
  ProgramRunner(const ProgramRunner &) = delete;
  ProgramRunner &operator=(const ProgramRunner &) = delete;

  /// Runs program `program` (0: the artifact's only one) with the inputs
  /// by name, each matching the artifact's shape and type. Returns the
  /// outputs by name, in the artifact's order, valid until the next run
  /// and while the inputs live.
  std::vector<std::pair<std::string, Tensor>> run(const std::map<std::string, HostTensor> &inputs,
                                                  size_t program = 0);

  const Artifact &artifact() const { return art; }
  Device &device() { return *dev; }
  Communicator &world() { return *worldComm; }
  /// With `profile`: the last run's seconds per instruction.
  std::vector<double> instructionSeconds() const;
  /// With `trace`: rank 0 writes every rank's spans of every run so far to
  /// `path` as Chrome trace JSON; a collective call on the world.
  void writeTrace(const std::string &path);

private:
  /// Checks every kernel instruction's parameters against the kernel table
  /// and binds them to their signature, so a kernel reads no other.
  void bindKernelSignatures();
  void prepareCommunicators();
  /// Issues instruction `n`, naming it in an error.
  void dispatch(size_t n);
  void runCollective(size_t n);
  /// Waits for a collective's request: now when it is a host operation,
  /// at the device's wait when it is ordered on a stream.
  void settle(size_t n, Request request);
  /// Ends the job: instruction `n` did not finish within the timeout.
  [[noreturn]] void timedOut(size_t n);
  /// finishRun's `timedOut`: the first collective still in flight.
  void nameBlockedCollective();
  /// The communicator of instruction `n`'s rank groups (nullptr: this rank
  /// is in none of them).
  Communicator *groupOf(const Instruction &inst);
  /// The spans of the run that went from `start` to `end`.
  void recordTrace(double start, double end);

  Artifact art;
  std::unique_ptr<Device> dev;
  Communicator *worldComm;
  RunnerSettings settings;
  /// The communicator for the device's buffers (CUDA: NCCL), or nullptr
  /// when it is the world itself.
  std::unique_ptr<Communicator> deviceWorld;
  Communicator *comm = nullptr; // deviceWorld, else the world
  /// Per rank-group table (collectiveGroupKey), this rank's communicator
  /// in it, or nullptr when the rank is in none of the groups.
  std::map<std::vector<int64_t>, std::unique_ptr<Communicator>> groupComms;
  /// Collectives of this run still in flight on a device stream.
  std::vector<std::pair<size_t, Request>> inFlight;
  std::unique_ptr<TraceRecorder> tracer;
  int runs = 0;
};

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_CORE_PROGRAMRUNNER_H
