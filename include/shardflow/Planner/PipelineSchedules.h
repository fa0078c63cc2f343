//===- PipelineSchedules.h - the pipeline schedules shard-opt knows -*- C++ -*-===//
//
// `--pipeline-schedule`: each pp rank's compute actions for a step of M
// micro-batches (shardflow/Runtime/Format/PipelineSchedule.h has the
// notation, the sends and receives, and the simulation that checks them).
//
//   gpipe             every forward, then every backward (stage r on rank r);
//                     holds M micro-batches' activations on every rank.
//   1f1b              p - r - 1 forwards on rank r, then one forward and one
//                     backward by turns, then the backwards left; holds
//                     p - r. The bubble of both: (p - 1) / (M + p - 1).
//   interleaved-1f1b  V stages per rank (stage v * p + r on rank r), in
//                     Megatron-LM's order (micro-batches by groups of p,
//                     (p - r - 1) * 2 + (V - 1) * p forwards first): the
//                     bubble shrinks by about V. M must be a multiple of p.
//   zb-h1             backward split into I (the input's gradient) and W
//                     (the weights'); 1F1B's memory (p - r micro-batches on
//                     rank r), with W deferred into what would be bubbles.
//   zbv               two stages per rank in a V (stage r and 2p - 1 - r
//                     on rank r, so the first and the last stage share rank
//                     0), backward split into I and W, at most 2p stage
//                     micro-batches held per rank (1F1B's first rank's).
//
// zb-h1 and zbv are list-scheduled as the zero-bubble paper's schedules
// are: with F, I and W of equal cost (or the costs given), a rank free at
// time t runs, of what is ready then, an I first, then an F while under
// its memory cap, then a W. A forward-only program (inference) keeps each schedule's forwards in
// their order.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_PLANNER_PIPELINESCHEDULES_H
#define SHARDFLOW_PLANNER_PIPELINESCHEDULES_H

#include "shardflow/Runtime/Format/PipelineSchedule.h"

#include <optional>
#include <string>

namespace shardflow {

enum class PipelineScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZBH1, ZBV };

/// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv".
const char *pipelineScheduleName(PipelineScheduleKind kind);
std::optional<PipelineScheduleKind> parsePipelineScheduleKind(const std::string &name);
/// The names, comma-separated, for messages and --help.
std::string pipelineScheduleNames();

/// Each rank's compute actions (without sends and receives; see
/// runtime::withCommunication) for `ranks` pp ranks, `microbatches`
/// micro-batches and `virtualStages` stages per rank (interleaved-1f1b:
/// 2 or more; zbv: 2; the others: 1). std::nullopt with `error` set for a
/// combination the schedule does not take.
///
/// zb-h1 and zbv are list-scheduled with `costs` (each stage's F, I and W;
/// the default: 1 each): the compiler passes its estimates for a training
/// step, whose first stage has no input gradient to compute (I costs
/// nothing there, W the whole backward).
std::optional<runtime::PipelineSchedule>
buildPipelineSchedule(PipelineScheduleKind kind, int ranks, int microbatches, int virtualStages,
                      bool forwardOnly, std::string &error,
                      const runtime::PipelineCosts &costs = runtime::PipelineCosts());

/// The schedule a compile asks for: the named one built (`file` empty;
/// `virtualStages` 0: the schedule's own, 2 for interleaved-1f1b and zbv),
/// or `file` read; either checked by simulation with its sends and
/// receives added where it has none. std::nullopt with `error` naming the
/// flag (--pipeline-schedule, --pipeline-schedule-file and the file's
/// line and action) otherwise.
std::optional<runtime::PipelineSchedule>
resolvePipelineSchedule(const std::string &name, const std::string &file, int ranks,
                        int microbatches, int virtualStages, bool forwardOnly,
                        std::string &error);

} // namespace shardflow

#endif // SHARDFLOW_PLANNER_PIPELINESCHEDULES_H
