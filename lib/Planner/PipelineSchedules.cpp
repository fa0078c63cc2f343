//===- PipelineSchedules.cpp - the pipeline schedules shard-opt knows ----===//

#include "shardflow/Planner/PipelineSchedules.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace shardflow {

using runtime::PipelineAction;
using runtime::PipelineOp;
using runtime::PipelineSchedule;

namespace {
struct KindName {
  PipelineScheduleKind kind;
  const char *name;
};
constexpr KindName kKinds[] = {
    {PipelineScheduleKind::GPipe, "gpipe"},
    {PipelineScheduleKind::OneFOneB, "1f1b"},
    {PipelineScheduleKind::Interleaved1F1B, "interleaved-1f1b"},
    {PipelineScheduleKind::ZBH1, "zb-h1"},
    {PipelineScheduleKind::ZBV, "zbv"},
};

PipelineAction act(int stage, PipelineOp op, int mb) { return PipelineAction{stage, op, mb}; }

// gpipe and 1f1b: stage r on rank r, `warmup(r)` forwards first.
void oneStagePerRank(PipelineSchedule &s, bool gpipe) {
  int p = s.ranks, m = s.microbatches;
  for (int r = 0; r < p; ++r) {
    auto &list = s.actions[r];
    int warmup = gpipe ? m : std::min(m, p - r - 1);
    for (int i = 0; i < warmup; ++i)
      list.push_back(act(r, PipelineOp::Forward, i));
    for (int i = 0; i < m - warmup; ++i) {
      list.push_back(act(r, PipelineOp::Forward, warmup + i));
      list.push_back(act(r, PipelineOp::Backward, i));
    }
    for (int i = m - warmup; i < m; ++i)
      list.push_back(act(r, PipelineOp::Backward, i));
  }
}

// Megatron-LM's interleaved order: the k-th forward of a rank is chunk
// (k / p) % V of micro-batch (k / (p V)) p + k % p; its k-th backward
// takes the chunks from the last.
void interleaved(PipelineSchedule &s, int v) {
  int p = s.ranks, m = s.microbatches, total = m * v;
  for (int r = 0; r < p; ++r) {
    auto at = [&](int k, bool forward) {
      int chunk = (k / p) % v;
      if (!forward)
        chunk = v - 1 - chunk;
      int mb = (k / (p * v)) * p + k % p;
      return act(chunk * p + r, forward ? PipelineOp::Forward : PipelineOp::Backward, mb);
    };
    auto &list = s.actions[r];
    int warmup = std::min(total, (p - r - 1) * 2 + (v - 1) * p);
    for (int k = 0; k < warmup; ++k)
      list.push_back(at(k, true));
    for (int k = 0; k < total - warmup; ++k) {
      list.push_back(at(warmup + k, true));
      list.push_back(at(k, false));
    }
    for (int k = total - warmup; k < total; ++k)
      list.push_back(at(k, false));
  }
}

// List scheduling with unit costs (the zero-bubble schedules): each step
// takes the rank that can start something soonest; of what it can start
// then, an I first (the highest stage's), then an F (the highest stage's:
// a micro-batch in flight before a new one) while the rank holds fewer
// than `cap[r]` stage micro-batches, then a W (the oldest).
void listSchedule(PipelineSchedule &s, const std::vector<int> &cap,
                  const runtime::PipelineCosts &costs) {
  int p = s.ranks, m = s.microbatches, stages = s.stages(), last = stages - 1;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> fEnd(stages, std::vector<double>(m, kNever));
  std::vector<std::vector<double>> iEnd = fEnd;
  std::vector<int> nextF(stages, 0), nextI(stages, 0), nextW(stages, 0);
  std::vector<double> now(p, 0.0);
  std::vector<int> live(p, 0);
  std::vector<std::vector<int>> stagesOf(p);
  for (int st = 0; st < stages; ++st)
    stagesOf[s.stageRank[st]].push_back(st);
  size_t remaining = size_t(stages) * m * 3;
  while (remaining) {
    int bestRank = -1;
    double bestTime = kNever;
    PipelineAction bestAction;
    for (int r = 0; r < p; ++r) {
      // (ready time, priority, action): lower is better.
      std::optional<std::tuple<double, int, int, PipelineAction>> pick;
      auto offer = [&](double ready, int priority, int order, PipelineAction a) {
        if (ready == kNever)
          return;
        ready = std::max(ready, now[r]);
        auto cand = std::make_tuple(ready, priority, order, a);
        if (!pick || std::tie(std::get<0>(cand), std::get<1>(cand), std::get<2>(cand)) <
                         std::tie(std::get<0>(*pick), std::get<1>(*pick), std::get<2>(*pick)))
          pick = cand;
      };
      for (int st : stagesOf[r]) {
        if (int mb = nextI[st]; mb < m && fEnd[st][mb] != kNever) {
          double ready = fEnd[st][mb];
          if (st < last)
            ready = std::max(ready, iEnd[st + 1][mb]);
          offer(ready, 0, -st, act(st, PipelineOp::BackwardInput, mb));
        }
        if (int mb = nextF[st]; mb < m && live[r] < cap[r])
          offer(st == 0 ? 0.0 : fEnd[st - 1][mb], 1, -st, act(st, PipelineOp::Forward, mb));
        if (int mb = nextW[st]; mb < nextI[st])
          offer(iEnd[st][mb], 2, mb * stages + st, act(st, PipelineOp::BackwardWeight, mb));
      }
      if (pick && std::get<0>(*pick) < bestTime) {
        bestTime = std::get<0>(*pick);
        bestRank = r;
        bestAction = std::get<3>(*pick);
      }
    }
    if (bestRank < 0)
      return; // cannot happen with caps of 1 or more; the simulation would say
    const PipelineAction &a = bestAction;
    double end = bestTime + costs.of(a);
    now[bestRank] = end;
    if (a.op == PipelineOp::Forward) {
      fEnd[a.stage][a.microbatch] = end;
      ++nextF[a.stage];
      ++live[bestRank];
    } else if (a.op == PipelineOp::BackwardInput) {
      iEnd[a.stage][a.microbatch] = end;
      ++nextI[a.stage];
    } else {
      ++nextW[a.stage];
      --live[bestRank];
    }
    s.actions[bestRank].push_back(a);
    --remaining;
  }
}
} // namespace

const char *pipelineScheduleName(PipelineScheduleKind kind) {
  for (const KindName &k : kKinds)
    if (k.kind == kind)
      return k.name;
  return "?";
}

std::optional<PipelineScheduleKind> parsePipelineScheduleKind(const std::string &name) {
  for (const KindName &k : kKinds)
    if (name == k.name)
      return k.kind;
  return std::nullopt;
}

std::string pipelineScheduleNames() {
  std::string out;
  for (const KindName &k : kKinds)
    out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

std::optional<PipelineSchedule> buildPipelineSchedule(PipelineScheduleKind kind, int ranks,
                                                      int microbatches, int virtualStages,
                                                      bool forwardOnly, std::string &error,
                                                      const runtime::PipelineCosts &costs) {
  std::string name = pipelineScheduleName(kind);
  if (ranks < 1 || microbatches < 1) {
    error = name + ": " + std::to_string(ranks) + " pp ranks and " +
            std::to_string(microbatches) + " micro-batches (both must be at least 1)";
    return std::nullopt;
  }
  int v = virtualStages;
  switch (kind) {
  case PipelineScheduleKind::Interleaved1F1B:
    if (v < 2) {
      error = name + " needs --virtual-stages 2 or more (got " + std::to_string(v) +
              "); with one stage per rank it is 1f1b";
      return std::nullopt;
    }
    if (microbatches % ranks != 0) {
      error = name + ": --microbatches " + std::to_string(microbatches) +
              " must be a multiple of pp (" + std::to_string(ranks) +
              "): micro-batches go round the ranks in groups of pp";
      return std::nullopt;
    }
    break;
  case PipelineScheduleKind::ZBV:
    if (v != 2 && v != 1) {
      error = name + " runs two stages per rank (--virtual-stages " + std::to_string(v) + ")";
      return std::nullopt;
    }
    v = 2;
    break;
  default:
    if (v != 1) {
      error = name + " runs one stage per rank (--virtual-stages " + std::to_string(v) +
              " is for interleaved-1f1b)";
      return std::nullopt;
    }
  }
  PipelineSchedule s;
  s.ranks = ranks;
  s.microbatches = microbatches;
  s.forwardOnly = forwardOnly;
  s.actions.resize(ranks);
  s.stageRank.resize(size_t(ranks) * v);
  for (int st = 0; st < ranks * v; ++st)
    s.stageRank[st] = kind == PipelineScheduleKind::ZBV && st >= ranks ? 2 * ranks - 1 - st
                                                                       : st % ranks;
  switch (kind) {
  case PipelineScheduleKind::GPipe:
  case PipelineScheduleKind::OneFOneB:
    oneStagePerRank(s, kind == PipelineScheduleKind::GPipe);
    break;
  case PipelineScheduleKind::Interleaved1F1B:
    interleaved(s, v);
    break;
  case PipelineScheduleKind::ZBH1: {
    std::vector<int> cap(ranks);
    for (int r = 0; r < ranks; ++r)
      cap[r] = ranks - r;
    listSchedule(s, cap, costs);
    break;
  }
  case PipelineScheduleKind::ZBV:
    listSchedule(s, std::vector<int>(ranks, 2 * ranks), costs);
    break;
  }
  if (forwardOnly)
    for (auto &list : s.actions)
      list.erase(std::remove_if(list.begin(), list.end(),
                                [](const PipelineAction &a) { return a.op != PipelineOp::Forward; }),
                 list.end());
  return s;
}

std::optional<PipelineSchedule> resolvePipelineSchedule(const std::string &name,
                                                        const std::string &file, int ranks,
                                                        int microbatches, int virtualStages,
                                                        bool forwardOnly, std::string &error) {
  std::optional<PipelineSchedule> schedule;
  std::string what;
  if (!file.empty()) {
    what = "--pipeline-schedule-file " + file;
    std::ifstream in(file);
    if (!in) {
      error = what + ": cannot read it";
      return std::nullopt;
    }
    std::ostringstream text;
    text << in.rdbuf();
    std::string why;
    schedule = runtime::parsePipelineSchedule(text.str(), file, ranks, microbatches,
                                              forwardOnly, why);
    if (!schedule) {
      error = "--pipeline-schedule-file " + why;
      return std::nullopt;
    }
    if (virtualStages && schedule->stages() != ranks * virtualStages) {
      error = what + ": " + std::to_string(schedule->stages()) + " stages, but pp=" +
              std::to_string(ranks) + " with --virtual-stages " + std::to_string(virtualStages) +
              " makes " + std::to_string(ranks * virtualStages);
      return std::nullopt;
    }
  } else {
    what = "--pipeline-schedule " + name;
    auto kind = parsePipelineScheduleKind(name);
    if (!kind) {
      error = "--pipeline-schedule takes " + pipelineScheduleNames() + ", got '" + name + "'";
      return std::nullopt;
    }
    int v = virtualStages;
    if (!v)
      v = *kind == PipelineScheduleKind::Interleaved1F1B || *kind == PipelineScheduleKind::ZBV
              ? 2
              : 1;
    schedule = buildPipelineSchedule(*kind, ranks, microbatches, v, forwardOnly, error);
    if (!schedule)
      return std::nullopt;
  }
  runtime::PipelineSimulation sim = runtime::simulatePipeline(
      schedule->hasCommunication() ? *schedule : runtime::withCommunication(*schedule));
  if (!sim.ok()) {
    error = what + ": " + sim.error;
    return std::nullopt;
  }
  return schedule;
}

} // namespace shardflow
