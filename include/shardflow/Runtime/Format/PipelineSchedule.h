//===- PipelineSchedule.h - a pipeline's per-rank action lists -*- C++ -*-===//
//
// A pipeline-parallel step as each pp rank runs it: an ordered list of
// actions over (virtual) stages and micro-batches, in the notation of
// torch.distributed.pipelining: `0F1` (stage 0's forward of micro-batch 1),
// `1B0` (a whole backward), `1I0` and `1W0` (zero-bubble schedules'
// backward for the input, then for the weights), `0SEND_F1`, `1RECV_F1`
// (the activation stage 0 sends stage 1), `1SEND_B0`, `0RECV_B0` (the
// gradient stage 1 sends stage 0).
//
// The compiler generates the lists (shardflow/Planner/PipelineSchedules.h)
// or reads them from a file (one line per rank, comma-separated, blank
// cells ignored: the CSV torch's `_dump_csv` writes), adds the sends and
// receives a compute-only list needs, and simulates the lists before it
// writes them: a deadlock, a value read before it is written or
// received, an action missing, duplicated or on the wrong rank is
// refused, naming the action. The same simulation, with a cost per
// action, predicts the step's time, each rank's idle time (the bubble)
// and the micro-batches whose activations each rank holds at once.
//
// Sends are non-blocking (posted when reached, as the runtime's isend),
// receives wait for their send.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_FORMAT_PIPELINESCHEDULE_H
#define SHARDFLOW_RUNTIME_FORMAT_PIPELINESCHEDULE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardflow::runtime {

enum class PipelineOp : uint8_t {
  Forward,        // F
  Backward,       // B: the input's and the weights' gradients
  BackwardInput,  // I: the input's gradient only
  BackwardWeight, // W: the weights' gradient, after I
  SendF,          // SEND_F: the stage's result to the next stage
  RecvF,          // RECV_F: the stage's input from the previous stage
  SendB,          // SEND_B: the input's gradient to the previous stage
  RecvB,          // RECV_B: the result's gradient from the next stage
};

/// The notation's name of `op`: F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B.
const char *pipelineOpName(PipelineOp op);
bool isCompute(PipelineOp op);

struct PipelineAction {
  int stage = 0;
  PipelineOp op = PipelineOp::Forward;
  int microbatch = 0;

  /// "0F1", "1SEND_B0".
  std::string str() const;
  bool operator==(const PipelineAction &o) const {
    return stage == o.stage && op == o.op && microbatch == o.microbatch;
  }
  bool operator!=(const PipelineAction &o) const { return !(*this == o); }
};

/// Parses one action ("0F1", "2RECV_B3"); std::nullopt with `error` set
/// otherwise.
std::optional<PipelineAction> parsePipelineAction(const std::string &text, std::string &error);

struct PipelineSchedule {
  /// pp ranks, and the micro-batches of a step.
  int ranks = 1;
  int microbatches = 1;
  /// The pp rank that runs each (virtual) stage; stages run in this order
  /// in the forward.
  std::vector<int> stageRank;
  /// A forward-only program (inference): no backward actions.
  bool forwardOnly = false;
  /// Each pp rank's actions, in order.
  std::vector<std::vector<PipelineAction>> actions;

  int stages() const { return int(stageRank.size()); }
  /// Whether any rank's list holds a send or a receive.
  bool hasCommunication() const;
  /// One line per rank, actions separated by commas (the file format).
  std::string str() const;
};

/// Reads a schedule file (one line per pp rank, comma-separated actions,
/// blank cells and surrounding spaces ignored, `#` comments). The stages'
/// ranks are where their computations are; the lines must be `ranks`
/// and the stages 0..S-1 with S a multiple of `ranks`. std::nullopt with
/// `error` naming `what`, the line and the cell otherwise.
std::optional<PipelineSchedule> parsePipelineSchedule(const std::string &text,
                                                      const std::string &what, int ranks,
                                                      int microbatches, bool forwardOnly,
                                                      std::string &error);

/// A compute-only schedule with the sends and receives it needs between
/// stages on different ranks: a send right after the computation that
/// produces what it sends, a receive right before the computation that
/// reads it.
PipelineSchedule withCommunication(const PipelineSchedule &computeOnly);

/// What each action costs in the simulation, in any unit of time: per
/// stage (one value for all when the vector has one element).
struct PipelineCosts {
  std::vector<double> forward{1.0}, backward{2.0}, backwardInput{1.0}, backwardWeight{1.0};
  /// From a send's posting to its receive's completion.
  double transfer = 0.0;

  double of(const PipelineAction &a) const;
};

struct PipelineSimulation {
  /// Empty when the schedule is sound; otherwise what is wrong, naming the
  /// rank, the action's position in its list and the action.
  std::string error;
  /// When the last action ends.
  double makespan = 0.0;
  /// Per rank: time spent computing.
  std::vector<double> busy;
  /// 1 - sum(busy) / (ranks * makespan).
  double bubbleFraction = 0.0;
  /// Per rank: the most (stage, micro-batch) pairs whose activations it
  /// holds at once (from the forward's start to the end of the last
  /// backward action that reads them; a forward-only program holds one
  /// at a time).
  std::vector<int> peakLive;
  /// Per rank, per action: start and end.
  std::vector<std::vector<std::pair<double, double>>> spans;

  bool ok() const { return error.empty(); }
};

/// Checks and times `schedule` (which must hold its communication: see
/// withCommunication):
///  - every stage's forward of every micro-batch runs once, on its rank;
///    in training, its backward too, whole (B) or split (I then W);
///  - a computation reads its input (the previous stage's forward, or its
///    RECV_F) and a backward its gradient (the next stage's, or its
///    RECV_B) and its forward only after they ran earlier on its rank;
///  - every send has its receive on the other stage's rank, and none is
///    between two stages of one rank;
///  - no rank waits forever: a deadlock names the first stuck receive and
///    the chain of ranks it waits for.
PipelineSimulation simulatePipeline(const PipelineSchedule &schedule,
                                    const PipelineCosts &costs = PipelineCosts());

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_FORMAT_PIPELINESCHEDULE_H
