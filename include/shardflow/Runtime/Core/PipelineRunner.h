//===- PipelineRunner.h - a pipeline's schedule on one rank ----*- C++ -*-===//
//
// Runs a pipeline artifact (Format/PipelineArtifact.h) on one rank of the
// world: world rank w is rank w % R (R ranks per stage) of the stages of
// pp coordinate w / R, each a ProgramRunner over the communicator of its
// coordinate's ranks. A step cuts the whole batch's inputs into M
// micro-batches along dimension 0 and runs the coordinate's actions in
// order:
//
//   F (forward)   runs the stage's program on micro-batch m: the graph
//                 inputs it reads, and what earlier stages passed it; then
//                 posts its results for later stages on other ranks, skips
//                 over several stages included (non-blocking: MPI messages
//                 tagged by value and micro-batch, to the same rank within
//                 the stage's group), which is what SEND_F stands for;
//   RECV_F        waits for what stages on other ranks send this stage
//                 (F waits for what is still missing, a skip's value),
//                 within --timeout: past it, the job ends naming the
//                 action, the value and the rank it waited for.
//
// Values between stages on the same rank stay on the host. The graph
// outputs, concatenated over the micro-batches, reach world rank 0.
// Forward-only: training schedules (B, I, W) are refused at load.
//
// With RunnerSettings::trace, every action of every step is a span of
// lane "pipeline" (name: the action, "1F3"; category: forward, or wait
// for the time a receive blocked), written with the other ranks' by
// writeTrace as shard-run --trace writes a program's (Trace.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CORE_PIPELINERUNNER_H
#define SHARDFLOW_RUNTIME_CORE_PIPELINERUNNER_H

#include "shardflow/Runtime/Core/ProgramRunner.h"
#include "shardflow/Runtime/Format/PipelineArtifact.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime {

class PipelineRunner {
public:
  /// Makes a device for a stage, over the communicator of the stage's ranks.
  using DeviceFactory = std::function<std::unique_ptr<Device>(Communicator &stageRanks)>;

  /// Loads this rank's stages: a collective call on `world`, whose size
  /// must be the artifact's. Throws RuntimeError naming what is wrong.
  PipelineRunner(PipelineArtifact artifact, const DeviceFactory &makeDevice,
                 Communicator &world, const RunnerSettings &settings);
  ~PipelineRunner();

  /// One step over the whole batch (`inputs` by name, the artifact's
  /// shapes): the outputs, on world rank 0 (empty elsewhere), in the
  /// artifact's order.
  std::vector<std::pair<std::string, HostTensor>> run(const std::map<std::string, HostTensor> &inputs);

  /// With `trace`: rank 0 writes every rank's spans of every step so far
  /// to `path` (Chrome trace JSON); a collective call on the world.
  void writeTrace(const std::string &path);

  const PipelineArtifact &artifact() const { return art; }
  /// This rank's pp coordinate and its rank among the stage's ranks.
  int ppRank() const { return pp; }
  int stageRank() const { return sub; }
  /// The stages this rank runs.
  std::vector<int> localStages() const;

private:
  struct Transfer {
    int producer = -1;
    std::vector<int> consumers;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
  };

  int tagOf(int transfer, int microbatch) const;
  [[noreturn]] void timedOut(const std::string &what);

  PipelineArtifact art;
  Communicator &world;
  RunnerSettings settings;
  int pp = 0, sub = 0, perStage = 1;
  std::unique_ptr<Communicator> stageComm, messages;
  /// The stages of this rank, by stage number.
  std::map<int, std::unique_ptr<ProgramRunner>> runners;
  /// The schedule with its sends and receives.
  PipelineSchedule plan;
  /// Transfer K's producer, consumers, type and shape (one micro-batch's).
  std::vector<Transfer> transfers;
  std::unique_ptr<TraceRecorder> tracer;
  int steps = 0;
};

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_CORE_PIPELINERUNNER_H
