//===- shard-run.cpp - execute a Shardflow artifact ------------------------===//
//
// Runs one rank of a compiled model: reads the artifact and the inputs
// (.npy/.npz/.pb), loads the program onto the device its target names
// (the CPU, or a GPU whose driver, cuBLASLt and NCCL are loaded at run
// time), runs it with the program runner (Core/ProgramRunner.h) and writes
// the outputs (and with --trace, every rank's operations on one timeline).
// A training step (shard-opt --train) runs the training loop instead
// (Training.cpp). Links no MLIR, no libonnx and no CUDA library. The flags
// are in Options.cpp, the I/O in Tensors.cpp, the --verbose and --profile reports
// in Report.cpp.
//
//===----------------------------------------------------------------------===//

#include "Options.h"
#include "Report.h"
#include "Tensors.h"
#include "Training.h"

#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Core/PipelineRunner.h"
#include "shardflow/Runtime/Core/ProgramRunner.h"
#include "shardflow/Runtime/Device/CPU/CpuDevice.h"
#include "shardflow/Runtime/Device/CUDA/CudaDevice.h"
#include "shardflow/Runtime/Format/Artifact.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

using namespace shardflow::runtime;

/// OpenBLAS chose its kernels when it loaded. Where it fell back to its SSE
/// kernels on a CPU whose model it does not know, this starts shard-run
/// again with the ones the CPU can run (OPENBLAS_CORETYPE is read only at
/// load). Before MPI starts: the new image is the same process.
static void restartWithFasterBlas(char **argv) {
  if (std::getenv("OPENBLAS_CORETYPE"))
    return;
  std::string running, core = preferredBlasCore(&running);
  if (core.empty())
    return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  setenv("SHARDFLOW_OPENBLAS_FALLBACK", running.c_str(), 1);
  execv("/proc/self/exe", argv); // on failure, go on with OpenBLAS's choice
}

/// Test hooks: SHARDFLOW_TEST_FAIL_RANK=K makes rank K fail after loading
/// (the failure path), SHARDFLOW_TEST_STALL_RANK=K makes it sleep there
/// instead of running, as a rank that never joins the first collective
/// (--timeout).
static void testHooks(int rank) {
  if (const char *fail = std::getenv("SHARDFLOW_TEST_FAIL_RANK"))
    if (std::atoi(fail) == rank)
      throw RuntimeError("injected failure (SHARDFLOW_TEST_FAIL_RANK)");
  if (const char *stall = std::getenv("SHARDFLOW_TEST_STALL_RANK"))
    if (std::atoi(stall) == rank)
      for (;;)
        sleep(60);
}

/// A pipeline artifact (shard-opt --mesh pp=N): this rank's stages and its
/// part of the schedule, over the whole batch's inputs; rank 0 writes the
/// outputs.
static void runPipeline(const Options &o, Communicator &comm) {
  if (o.profile)
    throw RuntimeError("--profile reports one program's instructions; with a pipeline "
                       "artifact, --trace FILE records its actions");
  PipelineArtifact artifact = readPipelineArtifact(o.artifact);
  bool training = artifact.trains();
  bool asked = o.steps > 0 || !o.data.empty() || !o.log.empty() || !o.saveWeights.empty() ||
               o.skipNonfinite;
  if (!training && asked)
    throw RuntimeError("--steps, --data, --log and --save-weights run a training step; '" +
                       o.artifact + "' is a forward-only pipeline (compile with shard-opt "
                       "--train)");
  if (training && (o.steps <= 0 || o.data.empty()))
    throw RuntimeError("'" + o.artifact + "' is a training pipeline: run it with --data "
                       "FILE.npz --steps N");
  if (training && (o.repeat != 1 || !o.inputsNpz.empty() || !o.inputFiles.empty() ||
                   !o.output.empty()))
    throw RuntimeError("a training pipeline takes its inputs from --data, once per step: "
                       "not --input, --inputs, --repeat or --output");
  int launched = launcherWorldSize();
  if (launched > 1 && launched != comm.size())
    throw RuntimeError("the launcher started " + std::to_string(launched) +
                       " ranks but MPI reports " + std::to_string(comm.size()));
  if (comm.size() != artifact.worldSize)
    throw RuntimeError("the pipeline artifact was compiled for " +
                       std::to_string(artifact.worldSize) + " rank(s) (pp " +
                       std::to_string(artifact.schedule.ranks) + " x " +
                       std::to_string(artifact.stageWorldSize()) + ") but was launched with " +
                       std::to_string(comm.size()));
  std::vector<std::pair<std::string, DType>> declared;
  for (const PipelineTensor &t : artifact.inputs)
    declared.emplace_back(t.name, t.dtype);
  std::map<std::string, HostTensor> inputs;
  if (!training)
    inputs = readInputs(o, declared, comm.rank());
  std::string target = artifact.target;
  PipelineRunner runner(
      std::move(artifact),
      [&](Communicator &stageRanks) {
        return target == "cuda" ? createCudaDevice(o.device, o.cuda, stageRanks)
                                : createCpuDevice(o.device, stageRanks);
      },
      comm, o.runner);
  testHooks(comm.rank());
  if (training) {
    trainPipeline(o, runner);
    return;
  }
  std::vector<std::pair<std::string, HostTensor>> outputs;
  for (int i = 0; i < std::max(o.repeat, 1); ++i)
    outputs = runner.run(inputs);
  comm.barrier();
  if (!o.trace.empty())
    runner.writeTrace(o.trace);
  std::vector<std::pair<std::string, Tensor>> views;
  for (auto &[name, t] : outputs)
    views.emplace_back(name, t.view());
  writeOutputs(o.output, std::move(views), comm.rank());
  if (o.verbose && comm.rank() == 0)
    std::fprintf(stderr, "shard-run: pipeline of %d stages on pp %d x %d ranks, %d micro-batches\n",
                 runner.artifact().schedule.stages(), runner.artifact().schedule.ranks,
                 runner.artifact().stageWorldSize(), runner.artifact().schedule.microbatches);
}

int main(int argc, char **argv) {
  restartWithFasterBlas(argv);
  std::unique_ptr<Communicator> comm;
  try {
    comm = createWorldCommunicator(&argc, &argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "shard-run: error: %s\n", e.what());
    return 1;
  }
  try {
    std::optional<Options> parsed = parseOptions(argc, argv);
    if (!parsed)
      return 0; // --help
    Options &o = *parsed;
    auto start = RunReport::Clock::now();
    if (isPipelineArtifact(o.artifact)) {
      runPipeline(o, *comm);
      return 0;
    }
    Artifact artifact = readArtifact(o.artifact);
    int world = comm->size(), launched = launcherWorldSize();
    if (launched > 1 && launched != world)
      throw RuntimeError("the launcher started " + std::to_string(launched) +
                         " ranks but MPI reports " + std::to_string(world) +
                         ": is shard-run built against the MPI of this mpirun?");
    if (world != artifact.worldSize)
      throw RuntimeError("the artifact was compiled for " + std::to_string(artifact.worldSize) +
                         " rank(s) but was launched with " + std::to_string(world));
    checkTrainingOptions(o, artifact);
    bool training = isTrainingStep(artifact);
    std::map<std::string, HostTensor> inputs;
    if (!training)
      inputs = readInputs(o, artifact, comm->rank());

    // The artifact's target picks the device; one runner runs either.
    std::unique_ptr<Device> device = artifact.target == "cuda"
                                         ? createCudaDevice(o.device, o.cuda, *comm)
                                         : createCpuDevice(o.device, *comm);
    ProgramRunner runner(std::move(artifact), std::move(device), *comm, o.runner);
    testHooks(comm->rank());
    // A training run's "runs" are its steps (every one after the first is
    // measured).
    RunReport report(runner, start, training ? int(std::max<int64_t>(o.steps, 1)) : o.repeat,
                     o.profile);
    report.loaded();
    if (training) {
      train(o, runner, report);
      return 0;
    }
    std::vector<std::pair<std::string, Tensor>> outputs;
    for (int i = 0; i < o.repeat; ++i) {
      auto t0 = RunReport::Clock::now();
      outputs = runner.run(inputs);
      report.ran(i, std::chrono::duration<double>(RunReport::Clock::now() - t0).count());
    }
    // Every rank has finished before rank 0 reports: a failure anywhere
    // stops the job here instead of leaving a partial result.
    comm->barrier();
    if (!o.trace.empty())
      runner.writeTrace(o.trace);
    writeOutputs(o.output, std::move(outputs), comm->rank());
    report.print(o.verbose, comm->rank());
  } catch (const std::exception &e) {
    comm->abort(e.what());
  }
  return 0;
}
