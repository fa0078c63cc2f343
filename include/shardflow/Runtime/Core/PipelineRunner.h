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
//
// A training pipeline (PipelineArtifact::training) runs step() instead:
//
//   F             runs the stage's forward on micro-batch m and keeps what
//                 its backward reads (the activations the forward returns,
//                 and the graph inputs and received values it reads);
//   B             receives the gradients of what the stage passed on (from
//                 every stage that read it, added), runs the backward on
//                 what F kept, which adds the weights' gradients into
//                 their accumulators, posts the gradients of what the stage
//                 was passed to the stages that made it (SEND_B), and drops
//                 what F kept; RECV_B receives ahead;
//   then          an accumulator several stages hold (a weight two stages
//                 read) is summed across them; each stage's norm program
//                 gives its squared gradient norm, summed over the pp ranks
//                 with the loss; each stage's update takes the optimizer
//                 step with both;
//   I, W          the zero-bubble split of B: I computes the gradients to
//                 send back and keeps what W reads (its results, and what
//                 the forward kept); W adds the weights' gradients into
//                 their accumulators. A micro-batch is in flight until W.
//
// The programs of a rank share one activation arena (Device::useArena),
// as large as the largest's: they run one at a time, and the runner
// copies out every output it keeps. The stage's programs share its
// state: the update program loads the
// weights, accumulators and optimizer state, the others read them there
// (ProgramRunner's stateOwner). Training runs on the CPU device (an
// accumulator summed across stages is added in host memory).
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

#include <cstdint>
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

  /// A training pipeline's step over the whole batch (`inputs` by name,
  /// labels included); every rank gets the step's figures.
  struct StepFigures {
    double loss = 0, gradNorm = 0, lr = 0;
  };
  StepFigures step(const std::map<std::string, HostTensor> &inputs);

  /// The most micro-batches whose inputs a local stage kept at once in a
  /// training step so far (the activations in flight), and their bytes.
  struct InFlight {
    int microbatches = 0;
    size_t bytes = 0;
  };
  std::map<int, InFlight> peakInFlight() const { return peakKept; }

  /// A local stage's update runner (its weights and state), nullptr for a
  /// forward-only pipeline or a stage of another rank.
  ProgramRunner *stateOf(int stage) const;
  /// This rank's communicator among its stage's ranks.
  Communicator &stageRanks() { return *stageComm; }
  Communicator &worldComm() { return world; }

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
  /// The tag of transfer `transfer`'s gradient from consumer stage
  /// `consumer`, micro-batch `microbatch`.
  int gradTagOf(int transfer, int consumer, int microbatch) const;
  /// Runs this rank's actions over `inputs`: the graph outputs made here
  /// per micro-batch (forward-only), or the loss summed (training).
  void runActions(const std::map<std::string, HostTensor> &inputs,
                  std::map<std::string, std::vector<HostTensor>> &outputs, double &loss);
  void checkInputs(const std::map<std::string, HostTensor> &inputs) const;
  [[noreturn]] void timedOut(const std::string &what);

  PipelineArtifact art;
  Communicator &world;
  RunnerSettings settings;
  int pp = 0, sub = 0, perStage = 1;
  std::unique_ptr<Communicator> stageComm, messages;
  /// The activation arena every program of this rank runs in (CPU); before
  /// the runners, which outlive it otherwise.
  std::unique_ptr<uint8_t, void (*)(void *)> arena;
  /// The stages of this rank, by stage number.
  std::map<int, std::unique_ptr<ProgramRunner>> runners;
  /// The schedule with its sends and receives.
  PipelineSchedule plan;
  /// Transfer K's producer, consumers, type and shape (one micro-batch's).
  std::vector<Transfer> transfers;
  std::unique_ptr<TraceRecorder> tracer;
  int steps = 0;

  /// A training stage's other programs; its forward is in `runners`.
  struct Trainer {
    std::unique_ptr<ProgramRunner> update, backward, norm, input, weight;
  };
  std::map<int, Trainer> trainers;
  /// The ranks of this rank's position within a stage, one per pp rank.
  std::unique_ptr<Communicator> acrossStages;
  /// An accumulator several stages hold: the local ones, and the ranks of
  /// the other holders' pp coordinates (nullptr: all are local).
  struct Shared {
    std::string name;
    std::vector<int> stages;
    std::unique_ptr<Communicator> holders;
  };
  std::vector<Shared> shared;
  std::map<int, InFlight> peakKept;
};

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_CORE_PIPELINERUNNER_H
