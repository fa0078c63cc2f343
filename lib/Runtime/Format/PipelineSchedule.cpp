//===- PipelineSchedule.cpp - a pipeline's per-rank action lists ---------===//

#include "shardflow/Runtime/Format/PipelineSchedule.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <tuple>

namespace shardflow::runtime {

namespace {
struct OpName {
  PipelineOp op;
  const char *name;
};
// Longest names first, so that a prefix does not match early.
constexpr OpName kOpNames[] = {
    {PipelineOp::SendF, "SEND_F"},         {PipelineOp::RecvF, "RECV_F"},
    {PipelineOp::SendB, "SEND_B"},         {PipelineOp::RecvB, "RECV_B"},
    {PipelineOp::Forward, "F"},            {PipelineOp::Backward, "B"},
    {PipelineOp::BackwardInput, "I"},      {PipelineOp::BackwardWeight, "W"},
};

std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return s.substr(b, e - b);
}

bool isBackward(PipelineOp op) {
  return op == PipelineOp::Backward || op == PipelineOp::BackwardInput ||
         op == PipelineOp::BackwardWeight || op == PipelineOp::SendB ||
         op == PipelineOp::RecvB;
}

std::string describe(int rank, size_t index, const PipelineAction &a) {
  return "rank " + std::to_string(rank) + ", action " + std::to_string(index + 1) + " (" +
         a.str() + ")";
}
} // namespace

const char *pipelineOpName(PipelineOp op) {
  for (const OpName &n : kOpNames)
    if (n.op == op)
      return n.name;
  return "?";
}

bool isCompute(PipelineOp op) {
  return op == PipelineOp::Forward || op == PipelineOp::Backward ||
         op == PipelineOp::BackwardInput || op == PipelineOp::BackwardWeight;
}

std::string PipelineAction::str() const {
  return std::to_string(stage) + pipelineOpName(op) + std::to_string(microbatch);
}

std::optional<PipelineAction> parsePipelineAction(const std::string &raw, std::string &error) {
  std::string text = trim(raw);
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
    ++i;
  if (i == 0 || i > 6) {
    error = "'" + text + "' is not an action: it must start with the stage's number (as in 0F1)";
    return std::nullopt;
  }
  PipelineAction a;
  a.stage = std::stoi(text.substr(0, i));
  std::string rest = text.substr(i);
  const OpName *match = nullptr;
  for (const OpName &n : kOpNames)
    if (rest.compare(0, std::char_traits<char>::length(n.name), n.name) == 0) {
      match = &n;
      break;
    }
  if (!match) {
    bool fsdp = rest.rfind("UNSHARD", 0) == 0 || rest.rfind("RESHARD", 0) == 0 ||
                rest.rfind("REDUCE_GRAD", 0) == 0;
    error = "'" + text + "': " +
            (fsdp ? std::string("FSDP's UNSHARD, RESHARD and REDUCE_GRAD actions are not "
                                "supported")
                  : "unknown action (F, B, I, W, SEND_F, RECV_F, SEND_B or RECV_B)");
    return std::nullopt;
  }
  a.op = match->op;
  std::string mb = rest.substr(std::char_traits<char>::length(match->name));
  if (mb.empty() || mb.size() > 6 ||
      !std::all_of(mb.begin(), mb.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    error = "'" + text + "': the micro-batch's number must follow " + match->name;
    return std::nullopt;
  }
  a.microbatch = std::stoi(mb);
  return a;
}

bool PipelineSchedule::hasCommunication() const {
  for (const auto &list : actions)
    for (const PipelineAction &a : list)
      if (!isCompute(a.op))
        return true;
  return false;
}

std::string PipelineSchedule::str() const {
  std::string out;
  for (const auto &list : actions) {
    for (size_t i = 0; i < list.size(); ++i)
      out += (i ? "," : "") + list[i].str();
    out += "\n";
  }
  return out;
}

std::optional<PipelineSchedule> parsePipelineSchedule(const std::string &text,
                                                      const std::string &what, int ranks,
                                                      int microbatches, bool forwardOnly,
                                                      std::string &error) {
  PipelineSchedule s;
  s.ranks = ranks;
  s.microbatches = microbatches;
  s.forwardOnly = forwardOnly;
  std::map<int, std::pair<int, int>> stageAt; // stage -> (rank, line)
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    if (size_t hash = line.find('#'); hash != std::string::npos)
      line.resize(hash);
    if (trim(line).empty())
      continue;
    int rank = int(s.actions.size());
    if (rank == ranks) {
      error = what + ":" + std::to_string(lineNo) + ": more lines than the " +
              std::to_string(ranks) + " pp ranks";
      return std::nullopt;
    }
    s.actions.emplace_back();
    std::istringstream cells(line);
    std::string cell;
    int column = 0;
    while (std::getline(cells, cell, ',')) {
      ++column;
      if (trim(cell).empty())
        continue;
      std::string where = what + ":" + std::to_string(lineNo) + ": cell " + std::to_string(column);
      std::string why;
      std::optional<PipelineAction> a = parsePipelineAction(cell, why);
      if (!a) {
        error = where + ": " + why;
        return std::nullopt;
      }
      if (a->microbatch >= microbatches) {
        error = where + ": " + a->str() + ": micro-batch " + std::to_string(a->microbatch) +
                " of " + std::to_string(microbatches) + " (--microbatches)";
        return std::nullopt;
      }
      if (forwardOnly && isBackward(a->op)) {
        error = where + ": " + a->str() + ": a forward-only program has no backward";
        return std::nullopt;
      }
      if (isCompute(a->op)) {
        auto [it, inserted] = stageAt.emplace(a->stage, std::make_pair(rank, lineNo));
        if (!inserted && it->second.first != rank) {
          error = where + ": " + a->str() + ": stage " + std::to_string(a->stage) +
                  " already computes on rank " + std::to_string(it->second.first) + " (line " +
                  std::to_string(it->second.second) + "); a stage runs on one rank";
          return std::nullopt;
        }
      }
      s.actions.back().push_back(*a);
    }
  }
  if (int(s.actions.size()) != ranks) {
    error = what + ": " + std::to_string(s.actions.size()) + " lines of actions for " +
            std::to_string(ranks) + " pp ranks (one line per rank)";
    return std::nullopt;
  }
  int stages = stageAt.empty() ? 0 : stageAt.rbegin()->first + 1;
  for (int st = 0; st < stages; ++st)
    if (!stageAt.count(st)) {
      error = what + ": stage " + std::to_string(st) + " never computes (the stages are 0 to " +
              std::to_string(stages - 1) + ")";
      return std::nullopt;
    }
  if (stages == 0 || stages % ranks != 0) {
    error = what + ": " + std::to_string(stages) + " stages on " + std::to_string(ranks) +
            " pp ranks: each rank must run the same number of stages";
    return std::nullopt;
  }
  s.stageRank.resize(stages);
  for (auto &[st, at] : stageAt)
    s.stageRank[st] = at.first;
  return s;
}

PipelineSchedule withCommunication(const PipelineSchedule &in) {
  PipelineSchedule out = in;
  int last = in.stages() - 1;
  auto other = [&](int from, int to) {
    return to >= 0 && to <= last && in.stageRank[to] != in.stageRank[from];
  };
  for (auto &list : out.actions) {
    std::vector<PipelineAction> with;
    for (const PipelineAction &a : list) {
      bool forward = a.op == PipelineOp::Forward;
      bool backward = a.op == PipelineOp::Backward || a.op == PipelineOp::BackwardInput;
      if (forward && other(a.stage, a.stage - 1))
        with.push_back({a.stage, PipelineOp::RecvF, a.microbatch});
      if (backward && other(a.stage, a.stage + 1))
        with.push_back({a.stage, PipelineOp::RecvB, a.microbatch});
      with.push_back(a);
      if (forward && other(a.stage, a.stage + 1))
        with.push_back({a.stage, PipelineOp::SendF, a.microbatch});
      if (backward && other(a.stage, a.stage - 1))
        with.push_back({a.stage, PipelineOp::SendB, a.microbatch});
    }
    list = std::move(with);
  }
  return out;
}

double PipelineCosts::of(const PipelineAction &a) const {
  auto pick = [&](const std::vector<double> &v) {
    if (v.empty())
      return 0.0;
    return v.size() == 1 ? v[0] : v[size_t(a.stage) < v.size() ? a.stage : v.size() - 1];
  };
  switch (a.op) {
  case PipelineOp::Forward:
    return pick(forward);
  case PipelineOp::Backward:
    return pick(backward);
  case PipelineOp::BackwardInput:
    return pick(backwardInput);
  case PipelineOp::BackwardWeight:
    return pick(backwardWeight);
  default:
    return 0.0;
  }
}

namespace {
using Key = std::tuple<int, PipelineOp, int>; // stage, op, micro-batch
Key keyOf(const PipelineAction &a) { return {a.stage, a.op, a.microbatch}; }

// The static checks: ranges, ranks, pairs of sends and receives,
// duplicates and completeness. Fills `where` (action -> (rank, index)).
std::string checkStatic(const PipelineSchedule &s, std::map<Key, std::pair<int, size_t>> &where) {
  int stages = s.stages(), last = stages - 1;
  if (int(s.actions.size()) != s.ranks)
    return std::to_string(s.actions.size()) + " action lists for " + std::to_string(s.ranks) +
           " pp ranks";
  for (int st = 0; st < stages; ++st)
    if (s.stageRank[st] < 0 || s.stageRank[st] >= s.ranks)
      return "stage " + std::to_string(st) + " is on rank " + std::to_string(s.stageRank[st]) +
             " of " + std::to_string(s.ranks);
  for (int r = 0; r < s.ranks; ++r) {
    for (size_t i = 0; i < s.actions[r].size(); ++i) {
      const PipelineAction &a = s.actions[r][i];
      std::string at = describe(r, i, a);
      if (a.stage < 0 || a.stage > last)
        return at + ": there are " + std::to_string(stages) + " stages";
      if (a.microbatch < 0 || a.microbatch >= s.microbatches)
        return at + ": there are " + std::to_string(s.microbatches) + " micro-batches";
      if (s.stageRank[a.stage] != r)
        return at + ": stage " + std::to_string(a.stage) + " runs on rank " +
               std::to_string(s.stageRank[a.stage]);
      if (s.forwardOnly && isBackward(a.op))
        return at + ": a forward-only program has no backward";
      int peer = a.op == PipelineOp::SendF || a.op == PipelineOp::RecvB   ? a.stage + 1
                 : a.op == PipelineOp::RecvF || a.op == PipelineOp::SendB ? a.stage - 1
                                                                          : a.stage;
      if (peer < 0 || peer > last)
        return at + ": stage " + std::to_string(a.stage) + " has no " +
               (peer < 0 ? "previous" : "next") + " stage";
      if (!isCompute(a.op) && s.stageRank[peer] == r)
        return at + ": stages " + std::to_string(std::min(a.stage, peer)) + " and " +
               std::to_string(std::max(a.stage, peer)) +
               " are both on this rank: nothing is sent between them";
      auto [it, inserted] = where.emplace(keyOf(a), std::make_pair(r, i));
      if (!inserted)
        return at + ": runs twice (also " +
               describe(it->second.first, it->second.second, a) + ")";
    }
  }
  auto has = [&](int st, PipelineOp op, int mb) { return where.count({st, op, mb}) != 0; };
  for (int st = 0; st < stages; ++st) {
    for (int mb = 0; mb < s.microbatches; ++mb) {
      std::string name = "stage " + std::to_string(st) + ", micro-batch " + std::to_string(mb);
      if (!has(st, PipelineOp::Forward, mb))
        return name + ": no forward (" + PipelineAction{st, PipelineOp::Forward, mb}.str() +
               ") on rank " + std::to_string(s.stageRank[st]);
      if (s.forwardOnly)
        continue;
      bool whole = has(st, PipelineOp::Backward, mb);
      bool input = has(st, PipelineOp::BackwardInput, mb);
      bool weight = has(st, PipelineOp::BackwardWeight, mb);
      if (whole && (input || weight))
        return name + ": both a whole backward (B) and a split one (I, W)";
      if (!whole && !input)
        return name + ": no backward (" + PipelineAction{st, PipelineOp::Backward, mb}.str() +
               ", or " + PipelineAction{st, PipelineOp::BackwardInput, mb}.str() + " and " +
               PipelineAction{st, PipelineOp::BackwardWeight, mb}.str() + ")";
      if (input != weight)
        return name + ": " +
               PipelineAction{st, input ? PipelineOp::BackwardInput : PipelineOp::BackwardWeight,
                              mb}
                   .str() +
               " without " +
               PipelineAction{st, input ? PipelineOp::BackwardWeight : PipelineOp::BackwardInput,
                              mb}
                   .str();
    }
  }
  // Every send has its receive and every receive its send; the
  // activations and gradients between stages on two ranks travel.
  for (const auto &[key, at] : where) {
    auto [st, op, mb] = key;
    PipelineAction a{st, op, mb};
    std::optional<PipelineAction> pair;
    if (op == PipelineOp::SendF)
      pair = PipelineAction{st + 1, PipelineOp::RecvF, mb};
    else if (op == PipelineOp::RecvF)
      pair = PipelineAction{st - 1, PipelineOp::SendF, mb};
    else if (op == PipelineOp::SendB)
      pair = PipelineAction{st - 1, PipelineOp::RecvB, mb};
    else if (op == PipelineOp::RecvB)
      pair = PipelineAction{st + 1, PipelineOp::SendB, mb};
    if (pair && !where.count(keyOf(*pair)))
      return describe(at.first, at.second, a) + ": no rank runs its " +
             (op == PipelineOp::SendF || op == PipelineOp::SendB ? "receive " : "send ") +
             pair->str() + " (on rank " + std::to_string(s.stageRank[pair->stage]) + ")";
  }
  return "";
}
} // namespace

PipelineSimulation simulatePipeline(const PipelineSchedule &s, const PipelineCosts &costs) {
  PipelineSimulation sim;
  std::map<Key, std::pair<int, size_t>> where;
  sim.error = checkStatic(s, where);
  if (!sim.error.empty())
    return sim;
  int last = s.stages() - 1;
  std::map<Key, double> done; // action -> when it ended (a send: when posted)
  auto doneAt = [&](int st, PipelineOp op, int mb) -> std::optional<double> {
    auto it = done.find({st, op, mb});
    if (it == done.end())
      return std::nullopt;
    return it->second;
  };
  std::vector<size_t> pos(s.ranks, 0);
  std::vector<double> now(s.ranks, 0.0);
  std::vector<int> live(s.ranks, 0);
  sim.busy.assign(s.ranks, 0.0);
  sim.peakLive.assign(s.ranks, 0);
  sim.spans.resize(s.ranks);
  for (int r = 0; r < s.ranks; ++r)
    sim.spans[r].reserve(s.actions[r].size());

  // What a computation reads, as (action that must have run on this rank,
  // what it is); std::nullopt when it reads nothing produced in the step.
  auto input = [&](const PipelineAction &a) -> std::optional<std::pair<PipelineAction, std::string>> {
    int r = s.stageRank[a.stage];
    switch (a.op) {
    case PipelineOp::Forward:
      if (a.stage == 0)
        return std::nullopt;
      if (s.stageRank[a.stage - 1] == r)
        return std::make_pair(PipelineAction{a.stage - 1, PipelineOp::Forward, a.microbatch},
                              std::string("its input"));
      return std::make_pair(PipelineAction{a.stage, PipelineOp::RecvF, a.microbatch},
                            std::string("its input"));
    case PipelineOp::SendF:
      return std::make_pair(PipelineAction{a.stage, PipelineOp::Forward, a.microbatch},
                            std::string("the result it sends"));
    case PipelineOp::SendB: {
      PipelineOp op = where.count({a.stage, PipelineOp::BackwardInput, a.microbatch})
                          ? PipelineOp::BackwardInput
                          : PipelineOp::Backward;
      return std::make_pair(PipelineAction{a.stage, op, a.microbatch},
                            std::string("the gradient it sends"));
    }
    case PipelineOp::BackwardWeight:
      return std::make_pair(PipelineAction{a.stage, PipelineOp::BackwardInput, a.microbatch},
                            std::string("the gradient it needs"));
    default:
      return std::nullopt;
    }
  };

  size_t remaining = 0;
  for (const auto &list : s.actions)
    remaining += list.size();
  while (remaining) {
    bool progress = false;
    for (int r = 0; r < s.ranks; ++r) {
      while (pos[r] < s.actions[r].size()) {
        const PipelineAction &a = s.actions[r][pos[r]];
        std::string at = describe(r, pos[r], a);
        double ready = now[r];
        if (a.op == PipelineOp::RecvF || a.op == PipelineOp::RecvB) {
          PipelineAction send = a.op == PipelineOp::RecvF
                                    ? PipelineAction{a.stage - 1, PipelineOp::SendF, a.microbatch}
                                    : PipelineAction{a.stage + 1, PipelineOp::SendB, a.microbatch};
          std::optional<double> sent = doneAt(send.stage, send.op, send.microbatch);
          if (!sent)
            break; // waits
          ready = std::max(ready, *sent + costs.transfer);
        } else if (a.op == PipelineOp::Backward || a.op == PipelineOp::BackwardInput) {
          if (!doneAt(a.stage, PipelineOp::Forward, a.microbatch)) {
            sim.error = at + ": runs before its forward " +
                        PipelineAction{a.stage, PipelineOp::Forward, a.microbatch}.str();
            return sim;
          }
          if (a.stage < last) {
            PipelineAction grad;
            if (s.stageRank[a.stage + 1] != r) {
              grad = {a.stage, PipelineOp::RecvB, a.microbatch};
            } else {
              PipelineOp op = where.count({a.stage + 1, PipelineOp::Backward, a.microbatch})
                                  ? PipelineOp::Backward
                                  : PipelineOp::BackwardInput;
              grad = {a.stage + 1, op, a.microbatch};
            }
            if (!doneAt(grad.stage, grad.op, grad.microbatch)) {
              sim.error = at + ": reads the gradient of its result before " + grad.str() +
                          " " + (grad.op == PipelineOp::RecvB ? "receives" : "computes") + " it";
              return sim;
            }
          }
        } else if (auto need = input(a)) {
          const PipelineAction &dep = need->first;
          if (!doneAt(dep.stage, dep.op, dep.microbatch)) {
            sim.error = at + ": reads " + need->second + " before " + dep.str() + " " +
                        (dep.op == PipelineOp::RecvF ? "receives" : "computes") + " it";
            return sim;
          }
        }
        double cost = costs.of(a);
        double start = ready, end = start + cost;
        sim.spans[r].emplace_back(start, end);
        sim.busy[r] += cost;
        now[r] = end;
        done[keyOf(a)] = end;
        if (a.op == PipelineOp::Forward) {
          sim.peakLive[r] = std::max(sim.peakLive[r], s.forwardOnly ? 1 : ++live[r]);
        } else if (a.op == PipelineOp::Backward || a.op == PipelineOp::BackwardWeight) {
          --live[r];
        }
        ++pos[r];
        --remaining;
        progress = true;
      }
    }
    if (progress)
      continue;
    // Deadlock: every rank left waits at a receive whose send has not been
    // posted. Follow the waits from the first stuck rank until one repeats.
    int r = 0;
    while (pos[r] == s.actions[r].size())
      ++r;
    std::vector<bool> seen(s.ranks, false);
    std::string chain;
    while (!seen[r]) {
      seen[r] = true;
      const PipelineAction &a = s.actions[r][pos[r]];
      PipelineAction send = a.op == PipelineOp::RecvF
                                ? PipelineAction{a.stage - 1, PipelineOp::SendF, a.microbatch}
                                : PipelineAction{a.stage + 1, PipelineOp::SendB, a.microbatch};
      int peer = s.stageRank[send.stage];
      size_t sendIndex = where.at(keyOf(send)).second;
      chain += (chain.empty() ? "" : "; ") + describe(r, pos[r], a) + " waits for " +
               send.str() + ", action " + std::to_string(sendIndex + 1) + " of rank " +
               std::to_string(peer);
      r = peer;
    }
    sim.error = "deadlock: " + chain;
    return sim;
  }
  for (int r = 0; r < s.ranks; ++r)
    sim.makespan = std::max(sim.makespan, now[r]);
  double total = 0;
  for (double b : sim.busy)
    total += b;
  sim.bubbleFraction = sim.makespan > 0 ? 1.0 - total / (s.ranks * sim.makespan) : 0.0;
  return sim;
}

} // namespace shardflow::runtime
