//===- Device.h - where a program's buffers live and its work runs -*- C++ -*-===//
//
// The program runner (ProgramRunner.h) owns the instruction loop; a device
// owns memory and runs work. Two devices implement this interface:
//
//   CPU   (Device/CPU) host memory: the arena, the weights mapped from
//         their files, the inputs bound in place; kernels from the CPU
//         registry (Format/Kernel.h) run as they are dispatched.
//   CUDA  (Device/CUDA) device memory allocated once at load; kernels,
//         cuBLASLt GEMMs and copies enqueued on a compute stream and
//         collectives on a communication stream, ordered by events where
//         their bytes overlap; a run may be one CUDA graph.
//
// Loading goes: load() (memory and weights), prepare(n) for every
// instruction in order, finishPreparing() (whole-program decisions), then
// createCommunicator() (the communicator for collectives on this device's
// memory). A run goes: beginRun() (inputs), execute() with the runner's
// loop, which calls beginInstruction, runKernel or the memory primitives
// and the communicator, endInstruction for each instruction, then
// finishRun() (wait for the device) and outputs().
//
// Instruction numbers are indices into the artifact's program. Each
// instruction runs on one lane of the device (a CUDA stream, the CPU's
// thread): the primitives given an instruction number run on its lane,
// after what came before on that lane.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CORE_DEVICE_H
#define SHARDFLOW_RUNTIME_CORE_DEVICE_H

#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Core/CopyPlan.h"
#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shardflow::runtime {

/// What every device is loaded with.
struct DeviceSettings {
  /// Overrides the artifact's model folder when non-empty.
  std::string weightsDir;
  /// When non-empty, the model file (.onnx) the weights stored inside the
  /// model are read from, whatever its name (the artifact records the
  /// compiled model's).
  std::string weightsModel;
  /// Check the weight bytes against the checksums recorded at compile time.
  bool verifyWeights = true;
  /// Threads that read, check and convert the weights (0:
  /// defaultLoadThreads() in WeightLoader.h).
  int loadThreads = 0;
  /// Threads per rank for the CPU kernels.
  int threads = 1;
  /// Print what the device chose and measured to stderr.
  bool verbose = false;
  /// Time every instruction (instructionTimes): --profile and --trace,
  /// the flag that asked for it (for messages).
  bool timing = false;
  std::string timingFlag = "--profile";
  /// With timing: also place each instruction on the host's clock
  /// (InstructionTime::start), for --trace.
  bool traceClock = false;
  /// How long the host waits for the device (collectives included) before
  /// it ends the job, and the flag that set it (for messages).
  double timeoutSeconds = 600;
  std::string timeoutFlag = "--timeout";
};

/// One instruction's time in the last run (Device::instructionTimes).
struct InstructionTime {
  /// On the host's steady clock, in seconds (DeviceSettings::traceClock).
  double start = 0;
  /// How long it ran: from when its lane reached it to its end.
  double seconds = 0;
  /// The lane it ran on (Device::laneNames).
  int lane = 0;
};

/// What the last run took, as the device measured it.
struct RunFigures {
  /// The program on the device, from after the input uploads to the end of
  /// its last instruction (CUDA events); negative where the host's clock
  /// around the run is the program's time (CPU).
  double deviceSeconds = -1;
  /// The outputs' download to host memory (host time); negative when the
  /// outputs are views of the device's own memory (CPU).
  double downloadSeconds = -1;
  /// Whether that download went into page-locked memory.
  bool downloadPinned = false;
  /// With DeviceSettings::traceClock, on the host's clock (seconds): when
  /// the inputs' upload started and how long it took on the device (CUDA),
  /// and when the outputs' download started; negative when there is none.
  double uploadStart = -1, uploadSeconds = -1, downloadStart = -1;
};

/// The host's steady clock, in seconds: the clock of InstructionTime::start
/// and of the trace (Trace.h).
double hostClockSeconds();

/// Throws unless `shared` has buffer `b`'s type and per-rank shape, naming
/// the state (Device::shareState).
void checkSharedState(const BufferDesc &b, const Tensor &shared);

class Device {
public:
  virtual ~Device();

  /// "CPU", "CUDA": for messages.
  virtual const char *name() const = 0;

  //===--------------------------------------------------------------------===//
  // Loading
  //===--------------------------------------------------------------------===//

  /// Before load(): the weight buffers (state included) named in `shared`
  /// live in memory another device of this process owns, which outlives
  /// this one: a training pipeline stage's programs share its weights,
  /// gradient accumulators and optimizer state (PipelineRunner.h). load()
  /// takes them from there instead of loading or allocating them, once it
  /// has checked that each has this program's type and per-rank shape.
  virtual void shareState(std::map<std::string, Tensor> shared);

  /// Before load(): run the program's activation arena in `memory` (64-byte
  /// aligned, `bytes` long, outliving the device) when it is large enough,
  /// instead of an arena of its own: programs that run one after another
  /// on a rank and keep nothing in their arenas between runs (a pipeline
  /// stage's, whose runner copies every output it keeps) share one. A
  /// device that cannot (CUDA) keeps its own.
  virtual void useArena(void *memory, size_t bytes) {}

  /// Allocates the program's memory and loads this rank's weights and the
  /// constants. `art` outlives the device.
  virtual void load(const Artifact &art) = 0;
  /// Prepares instruction `n`: a kernel (launch, local_slice) finds what
  /// runs it, a collective its lane. Throws RuntimeError saying what is
  /// wrong (the runner names the instruction).
  virtual void prepare(size_t n) = 0;
  /// Once every instruction is prepared: decisions about the whole program
  /// (CUDA: the stream schedule, grouped and autotuned GEMMs).
  virtual void finishPreparing() = 0;
  /// The communicator for collectives on this device's buffers, made over
  /// `world` (a collective call on it), or nullptr when `world` itself
  /// serves (CPU). CUDA: an NCCL world on the communication stream.
  virtual std::unique_ptr<Communicator> createCommunicator(Communicator &world) = 0;
  /// Drops what still refers to the communicator createCommunicator made
  /// (a CUDA graph that captured NCCL calls); called before it goes.
  virtual void releaseCommunicatorWork() {}

  //===--------------------------------------------------------------------===//
  // A run
  //===--------------------------------------------------------------------===//

  /// Binds (CPU) or uploads (CUDA) the inputs: (buffer, tensor) pairs from
  /// bindInputs (Layout.h), valid until the run ends.
  virtual void beginRun(const std::vector<std::pair<size_t, const HostTensor *>> &inputs) = 0;
  /// Runs the program: calls `enqueue`, which issues every instruction in
  /// order, or replays what an earlier call issued (a CUDA graph: then
  /// `enqueue` is not called).
  virtual void execute(const std::function<void()> &enqueue) = 0;
  /// Around each instruction's work: waits for what it depends on on other
  /// lanes, and times it (DeviceSettings::timing).
  virtual void beginInstruction(size_t n) = 0;
  virtual void endInstruction(size_t n) = 0;
  /// Runs (or enqueues) kernel instruction `n` (prepared).
  virtual void runKernel(size_t n) = 0;
  /// Waits for the run's work. When it does not finish within the timeout,
  /// calls `timedOut` (which names what is waited for and ends the job),
  /// and ends the job itself if that returns.
  virtual void finishRun(const std::function<void()> &timedOut) = 0;
  /// The outputs by name, in the artifact's order, as host tensors valid
  /// until the next run (views of the device's buffers, or downloaded).
  /// Fails when a kernel reported bad data during the run.
  virtual std::vector<std::pair<std::string, Tensor>> outputs() = 0;
  /// Copies buffer `buffer`'s bytes to host memory `dst` (its bytes()),
  /// between runs: how training state is read back (--save-weights).
  virtual void download(int buffer, void *dst) = 0;

  //===--------------------------------------------------------------------===//
  // Memory, for the runner's collectives
  //===--------------------------------------------------------------------===//

  /// Buffer `buffer` in this device's memory (a device pointer on CUDA).
  virtual Tensor tensorOf(int buffer) const = 0;
  /// Scratch 0 and 1, each as large as the largest collective operand.
  virtual void *scratch(int which) = 0;
  /// Runs `copies` from `src` to `dst` on instruction `n`'s lane.
  virtual void copy(size_t n, const std::vector<Copy2D> &copies, const void *src, void *dst) = 0;
  /// `bytes` of zeros at `dst`, on instruction `n`'s lane.
  virtual void fillZero(size_t n, void *dst, size_t bytes) = 0;

  //===--------------------------------------------------------------------===//
  // Figures
  //===--------------------------------------------------------------------===//

  /// With DeviceSettings::timing: the last run's time of each instruction.
  virtual const std::vector<InstructionTime> &instructionTimes() const = 0;
  /// The lanes instructions run on, by InstructionTime::lane.
  virtual std::vector<std::string> laneNames() const = 0;
  /// How instruction times are taken, for the profile's heading.
  virtual std::string clock() const = 0;
  virtual RunFigures lastRun() const = 0;
  /// Bytes of weights this rank holds, and where ("mapped", "on the GPU").
  virtual size_t weightBytes() const = 0;
  virtual const char *weightPlace() const = 0;
  /// Bytes of the outputs a run hands back.
  virtual size_t outputBytes() const = 0;
};

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_CORE_DEVICE_H
