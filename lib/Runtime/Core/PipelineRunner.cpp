//===- PipelineRunner.cpp - a pipeline's schedule on one rank ------------===//

#include "shardflow/Runtime/Core/PipelineRunner.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

namespace shardflow::runtime {

namespace {

constexpr int kMaxTag = 32767; // the least MPI_TAG_UB MPI allows

bool isTransfer(const std::string &name) { return name.rfind("transfer:", 0) == 0; }

int transferId(const std::string &name) { return std::stoi(name.substr(9)); }

/// Micro-batch `m` of `t`: rows [m B/M, (m+1) B/M) of dimension 0.
HostTensor slice(const HostTensor &t, int m, int microbatches) {
  HostTensor out;
  out.dtype = t.dtype;
  out.shape = t.shape;
  out.shape[0] /= microbatches;
  size_t bytes = t.bytes.size() / size_t(microbatches);
  out.bytes.assign(t.bytes.begin() + std::ptrdiff_t(bytes * size_t(m)),
                   t.bytes.begin() + std::ptrdiff_t(bytes * size_t(m + 1)));
  return out;
}

HostTensor copyOf(const Tensor &t) {
  HostTensor out;
  out.dtype = t.dtype;
  out.shape = t.shape;
  out.bytes.resize(t.bytes());
  if (t.bytes())
    std::memcpy(out.bytes.data(), t.data, t.bytes());
  return out;
}

} // namespace

PipelineRunner::PipelineRunner(PipelineArtifact artifact, const DeviceFactory &makeStageDevice,
                               Communicator &world, const RunnerSettings &settings)
    : art(std::move(artifact)), world(world), settings(settings), arena(nullptr, std::free) {
  const PipelineSchedule &s = art.schedule;
  if (world.size() != art.worldSize)
    throw RuntimeError("the pipeline artifact was compiled for " + std::to_string(art.worldSize) +
                       " ranks but was launched with " + std::to_string(world.size()));
  for (const auto &list : s.actions)
    for (const PipelineAction &a : list) {
      bool forward =
          a.op == PipelineOp::Forward || a.op == PipelineOp::SendF || a.op == PipelineOp::RecvF;
      bool whole = a.op == PipelineOp::Backward || a.op == PipelineOp::SendB ||
                   a.op == PipelineOp::RecvB;
      if (!forward && !art.trains())
        throw RuntimeError("the pipeline's action " + a.str() +
                           " is a backward one, but the artifact holds forward programs only");
      if (!forward && !whole && !art.training.at(size_t(a.stage)).splitsBackward)
        throw RuntimeError("the pipeline's action " + a.str() +
                           " splits the backward (I, W), but stage " +
                           std::to_string(a.stage) + " has no I and W programs");
    }
  perStage = art.stageWorldSize();
  pp = world.rank() / perStage;
  sub = world.rank() % perStage;
  stageComm = world.split(pp, sub);
  messages = world.split(0, world.rank());
  plan = s.hasCommunication() ? s : withCommunication(s);

  // The values passed between stages: who makes them, who reads them.
  for (size_t k = 0; k < art.stages.size(); ++k) {
    const Artifact &stage = art.stages[k];
    for (const auto &[name, buffer] : stage.outputs)
      if (isTransfer(name)) {
        int id = transferId(name);
        if (int(transfers.size()) <= id)
          transfers.resize(size_t(id) + 1);
        transfers[id].producer = int(k);
        transfers[id].dtype = stage.buffers[buffer].dtype;
        transfers[id].shape = stage.buffers[buffer].shape;
      }
  }
  for (size_t k = 0; k < art.stages.size(); ++k)
    for (const BufferDesc &b : art.stages[k].buffers)
      if (b.kind == BufferDesc::Kind::Input && isTransfer(b.name)) {
        int id = transferId(b.name);
        if (id >= int(transfers.size()) || transfers[id].producer < 0)
          throw RuntimeError("stage " + std::to_string(k) + " reads " + b.name +
                             ", which no stage computes");
        transfers[id].consumers.push_back(int(k));
      }
  if (int64_t(transfers.size() * (1 + size_t(s.stages())) + art.outputs.size()) *
          s.microbatches >
      kMaxTag)
    throw RuntimeError("the pipeline passes " + std::to_string(transfers.size()) +
                       " values over " + std::to_string(s.microbatches) +
                       " micro-batches: more messages than MPI's tags can tell apart");

  // The stages' programs are not traced instruction by instruction: the
  // pipeline's spans are its actions.
  RunnerSettings stageSettings = settings;
  stageSettings.trace = false;
  // One activation arena for every program of this rank: they run one at a
  // time, and every output kept is copied out of it.
  size_t arenaBytes = 64;
  for (int stage : localStages()) {
    std::vector<const Artifact *> programs{&art.stages[size_t(stage)]};
    if (art.trains()) {
      const PipelineStageTraining &t = art.training[size_t(stage)];
      programs.insert(programs.end(), {&t.backward, &t.norm, &t.update, &t.backwardInput,
                                       &t.backwardWeight});
    }
    for (const Artifact *p : programs)
      arenaBytes = std::max(arenaBytes, size_t((p->arenaBytes + 63) / 64 * 64));
  }
  arena.reset(static_cast<uint8_t *>(std::aligned_alloc(64, arenaBytes)));
  if (!arena)
    throw RuntimeError("cannot allocate the " + std::to_string(arenaBytes) +
                       "-byte activation arena");
  auto makeDevice = [&](Communicator &ranks) {
    std::unique_ptr<Device> device = makeStageDevice(ranks);
    device->useArena(arena.get(), arenaBytes);
    return device;
  };
  for (int stage : localStages()) {
    if (!art.trains()) {
      runners[stage] = std::make_unique<ProgramRunner>(art.stages[size_t(stage)],
                                                       makeDevice(*stageComm), *stageComm,
                                                       stageSettings);
      continue;
    }
    // The update program loads the stage's weights and state; the others
    // read them there.
    Trainer &t = trainers[stage];
    const PipelineStageTraining &programs = art.training[size_t(stage)];
    t.update = std::make_unique<ProgramRunner>(programs.update, makeDevice(*stageComm),
                                               *stageComm, stageSettings);
    if (std::string(t.update->device().name()) != "CPU")
      throw RuntimeError("pipelined training runs on the CPU device; this artifact targets " +
                         art.target);
    t.backward = std::make_unique<ProgramRunner>(programs.backward, makeDevice(*stageComm),
                                                 *stageComm, stageSettings, t.update.get());
    t.norm = std::make_unique<ProgramRunner>(programs.norm, makeDevice(*stageComm), *stageComm,
                                             stageSettings, t.update.get());
    if (programs.splitsBackward) {
      t.input = std::make_unique<ProgramRunner>(programs.backwardInput, makeDevice(*stageComm),
                                                *stageComm, stageSettings, t.update.get());
      t.weight = std::make_unique<ProgramRunner>(programs.backwardWeight, makeDevice(*stageComm),
                                                 *stageComm, stageSettings, t.update.get());
    }
    runners[stage] = std::make_unique<ProgramRunner>(art.stages[size_t(stage)],
                                                     makeDevice(*stageComm), *stageComm,
                                                     stageSettings, t.update.get());
  }
  if (art.trains()) {
    acrossStages = world.split(sub, pp);
    // Accumulators several stages hold, in name order on every rank (the
    // splits are collective calls on the world).
    std::map<std::string, std::vector<int>> holders;
    for (size_t k = 0; k < art.training.size(); ++k)
      for (const BufferDesc &b : art.training[k].update.buffers)
        if (b.kind == BufferDesc::Kind::Weight && b.writable && b.storage == "zeros" &&
            b.name.size() > 9 && b.name.compare(b.name.size() - 9, 9, ".grad_acc") == 0)
          holders[b.name].push_back(int(k));
    auto accumulatorOf = [&](int k, const std::string &name) -> const BufferDesc & {
      for (const BufferDesc &b : art.training[size_t(k)].update.buffers)
        if (b.kind == BufferDesc::Kind::Weight && b.name == name)
          return b;
      throw RuntimeError("stage " + std::to_string(k) + " has no '" + name + "'");
    };
    for (auto &[name, stages] : holders) {
      if (stages.size() < 2)
        continue;
      // Summed element by element: every holder must split it alike.
      const BufferDesc &first = accumulatorOf(stages[0], name);
      for (int k : stages) {
        const BufferDesc &b = accumulatorOf(k, name);
        if (b.shape != first.shape || b.starts != first.starts || b.dtype != first.dtype)
          throw RuntimeError("the gradient accumulator '" + name + "' is " +
                             dtypeName(b.dtype) + shapeList(b.shape) + " per rank on stage " +
                             std::to_string(k) + " but " + dtypeName(first.dtype) +
                             shapeList(first.shape) + " on stage " +
                             std::to_string(stages[0]) +
                             " (or split at other places): the stages that read one weight "
                             "must split it alike to sum its gradients");
      }
      std::set<int> ranks;
      for (int k : stages)
        ranks.insert(s.stageRank[size_t(k)]);
      Shared e;
      e.name = name;
      for (int k : stages)
        if (s.stageRank[size_t(k)] == pp)
          e.stages.push_back(k);
      int color = ranks.size() > 1 && !e.stages.empty() ? sub : -1;
      std::unique_ptr<Communicator> group = world.split(color, pp);
      if (ranks.size() > 1)
        e.holders = std::move(group);
      if (!e.stages.empty())
        shared.push_back(std::move(e));
    }
  }
  if (settings.trace)
    tracer = std::make_unique<TraceRecorder>(world, std::vector<std::string>{"pipeline"});
}

void PipelineRunner::writeTrace(const std::string &path) {
  if (!tracer)
    throw RuntimeError("the pipeline was not traced (RunnerSettings::trace)");
  tracer->write(path);
}

PipelineRunner::~PipelineRunner() = default;

std::vector<int> PipelineRunner::localStages() const {
  std::vector<int> out;
  for (int k = 0; k < art.schedule.stages(); ++k)
    if (art.schedule.stageRank[k] == pp)
      out.push_back(k);
  return out;
}

int PipelineRunner::tagOf(int transfer, int microbatch) const {
  return transfer * art.schedule.microbatches + microbatch;
}

int PipelineRunner::gradTagOf(int transfer, int consumer, int microbatch) const {
  int base = tagOf(int(transfers.size() + art.outputs.size()), 0);
  return base + (transfer * art.schedule.stages() + consumer) * art.schedule.microbatches +
         microbatch;
}

ProgramRunner *PipelineRunner::stateOf(int stage) const {
  auto it = trainers.find(stage);
  return it == trainers.end() ? nullptr : it->second.update.get();
}

void PipelineRunner::timedOut(const std::string &what) {
  world.abort("waited " + std::to_string(int(settings.timeoutSeconds)) + " s (" +
              settings.timeoutFlag + ") " + what);
}

void PipelineRunner::checkInputs(const std::map<std::string, HostTensor> &inputs) const {
  for (const PipelineTensor &t : art.inputs) {
    auto it = inputs.find(t.name);
    if (it == inputs.end())
      throw RuntimeError("input '" + t.name + "' (" + dtypeName(t.dtype) + shapeList(t.shape) +
                         ") was not given; pass --input " + t.name + "=FILE.npy");
    if (it->second.dtype != t.dtype || it->second.shape != t.shape)
      throw RuntimeError("input '" + t.name + "' is " + dtypeName(it->second.dtype) +
                         shapeList(it->second.shape) + " but the pipeline was compiled for " +
                         dtypeName(t.dtype) + shapeList(t.shape));
  }
  for (const auto &[name, t] : inputs)
    if (std::none_of(art.inputs.begin(), art.inputs.end(),
                     [&](const PipelineTensor &p) { return p.name == name; }))
      throw RuntimeError("'" + name + "' is not an input of this model");
}

void PipelineRunner::runActions(const std::map<std::string, HostTensor> &inputs,
                                std::map<std::string, std::vector<HostTensor>> &outputs,
                                double &loss) {
  const PipelineSchedule &s = art.schedule;
  int mbs = s.microbatches;
  bool training = art.trains();
  loss = 0;
  // Values by (transfer, micro-batch): made here, or received.
  std::map<std::pair<int, int>, HostTensor> values;
  // Gradients by (transfer, consumer stage, micro-batch): made here, or
  // received.
  std::map<std::tuple<int, int, int>, HostTensor> grads;
  // What a stage's backward reads, by (stage, micro-batch), from its
  // forward until its backward (or its I), and from its I until its W.
  std::map<std::pair<int, int>, std::map<std::string, HostTensor>> kept, keptForW;
  std::map<int, InFlight> keptNow;
  std::vector<std::pair<Request, std::string>> sends;
  auto rankOf = [&](int stage) { return s.stageRank[size_t(stage)] * perStage + sub; };
  // Posts stage `stage`'s values for micro-batch `m` to every other rank
  // that reads them (skips over several stages included), right after the
  // stage computes them: what withCommunication's SEND_F stands for.
  auto post = [&](int stage, int m) {
    for (size_t id = 0; id < transfers.size(); ++id) {
      const Transfer &t = transfers[id];
      if (t.producer != stage)
        continue;
      std::set<int> ranks;
      for (int c : t.consumers)
        if (s.stageRank[size_t(c)] != pp)
          ranks.insert(s.stageRank[size_t(c)]);
      HostTensor &v = values.at({int(id), m});
      for (int r : ranks)
        sends.emplace_back(messages->startSend(v.view(), r * perStage + sub, tagOf(int(id), m)),
                           "transfer:" + std::to_string(id) + " of micro-batch " +
                               std::to_string(m) + " to rank " +
                               std::to_string(r * perStage + sub));
    }
  };
  auto wait = [&](Request &r, const std::string &what, const std::string &label, int stage,
                  size_t bytes, PipelineOp op) {
    double start = hostClockSeconds();
    if (r.waitWithin(settings.timeoutSeconds) == WaitOutcome::TimedOut)
      timedOut(what);
    if (tracer)
      tracer->add({PipelineAction{stage, op, -1}.str(), "wait", 0, start,
                   hostClockSeconds() - start, label, -1, int64_t(bytes), steps});
  };
  // Receives what stage `stage` reads of micro-batch `m` from other ranks
  // and has not yet received.
  auto receive = [&](int stage, int m, const std::string &at) {
    for (size_t id = 0; id < transfers.size(); ++id) {
      const Transfer &t = transfers[id];
      if (std::find(t.consumers.begin(), t.consumers.end(), stage) == t.consumers.end() ||
          s.stageRank[size_t(t.producer)] == pp || values.count({int(id), m}))
        continue;
      HostTensor v;
      v.dtype = t.dtype;
      v.shape = t.shape;
      v.bytes.resize(size_t(v.view().numel()) * dtypeSize(v.dtype));
      int from = rankOf(t.producer);
      Request r = messages->startRecv(v.view(), from, tagOf(int(id), m));
      std::string label = "transfer:" + std::to_string(id);
      wait(r,
           at + " for " + label + " of micro-batch " + std::to_string(m) + " from rank " +
               std::to_string(from) + " (stage " + std::to_string(t.producer) + ")",
           label, stage, v.bytes.size(), PipelineOp::RecvF);
      values[{int(id), m}] = std::move(v);
    }
  };
  // Receives the gradients of what stage `stage` passed on of micro-batch
  // `m` from the stages on other ranks that read it.
  auto receiveGrads = [&](int stage, int m, const std::string &at) {
    for (size_t id = 0; id < transfers.size(); ++id) {
      const Transfer &t = transfers[id];
      if (t.producer != stage || t.dtype != DType::F32)
        continue;
      for (int c : t.consumers) {
        if (s.stageRank[size_t(c)] == pp || grads.count({int(id), c, m}))
          continue;
        HostTensor g;
        g.dtype = t.dtype;
        g.shape = t.shape;
        g.bytes.resize(size_t(g.view().numel()) * dtypeSize(g.dtype));
        Request r = messages->startRecv(g.view(), rankOf(c), gradTagOf(int(id), c, m));
        std::string label = "grad:transfer:" + std::to_string(id);
        wait(r,
             at + " for " + label + " of micro-batch " + std::to_string(m) + " from rank " +
                 std::to_string(rankOf(c)) + " (stage " + std::to_string(c) + ")",
             label, stage, g.bytes.size(), PipelineOp::RecvB);
        grads[{int(id), c, m}] = std::move(g);
      }
    }
  };
  const std::vector<PipelineAction> &actions = plan.actions[size_t(pp)];
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction &a = actions[i];
    std::string at = "at its action " + std::to_string(i + 1) + " (" + a.str() + ")";
    if (a.op == PipelineOp::Forward) {
      receive(a.stage, a.microbatch, at);
      const Artifact &stage = art.stages[size_t(a.stage)];
      auto inputOf = [&](const std::string &name) -> HostTensor {
        if (!isTransfer(name))
          return slice(inputs.at(name), a.microbatch, mbs);
        auto it = values.find({transferId(name), a.microbatch});
        if (it == values.end())
          throw RuntimeError("pipeline " + at + ": " + name + " of micro-batch " +
                             std::to_string(a.microbatch) + " was not computed before");
        return it->second;
      };
      std::map<std::string, HostTensor> feed;
      for (const BufferDesc &b : stage.buffers)
        if (b.kind == BufferDesc::Kind::Input)
          feed[b.name] = inputOf(b.name);
      double start = hostClockSeconds();
      auto results = runners.at(a.stage)->run(feed);
      std::map<std::string, HostTensor> activations;
      for (auto &[name, t] : results) {
        if (isTransfer(name)) {
          values[{transferId(name), a.microbatch}] = copyOf(t);
        } else if (training && name == "loss") {
          loss += double(*static_cast<const float *>(t.data));
        } else if (training) {
          activations[name] = copyOf(t);
        } else if (sub == 0) {
          std::vector<HostTensor> &parts = outputs[name];
          parts.resize(size_t(mbs));
          parts[size_t(a.microbatch)] = copyOf(t);
        }
      }
      if (tracer)
        tracer->add({a.str(), "forward", 0, start, hostClockSeconds() - start,
                     "stage " + std::to_string(a.stage), int64_t(i), -1, steps});
      post(a.stage, a.microbatch);
      if (training) {
        // What the backward reads: the forward's activations, and the
        // graph inputs and received values it reads itself.
        std::map<std::string, HostTensor> keep;
        for (const BufferDesc &b : art.training[size_t(a.stage)].backward.buffers) {
          if (b.kind != BufferDesc::Kind::Input || b.name.rfind("grad:", 0) == 0)
            continue;
          auto act = activations.find(b.name);
          keep[b.name] = act != activations.end() ? std::move(act->second) : inputOf(b.name);
        }
        InFlight &now = keptNow[a.stage];
        for (const auto &[name, t] : keep)
          now.bytes += t.bytes.size();
        ++now.microbatches;
        InFlight &peak = peakKept[a.stage];
        peak.microbatches = std::max(peak.microbatches, now.microbatches);
        peak.bytes = std::max(peak.bytes, now.bytes);
        kept[{a.stage, a.microbatch}] = std::move(keep);
      }
    } else if (a.op == PipelineOp::BackwardWeight) {
      // The weights' part of the backward: from what I kept for it.
      auto keptIt = keptForW.find({a.stage, a.microbatch});
      if (keptIt == keptForW.end())
        throw RuntimeError("pipeline " + at + ": the input's backward (I) of micro-batch " +
                           std::to_string(a.microbatch) + " did not run before");
      double start = hostClockSeconds();
      trainers.at(a.stage).weight->run(keptIt->second);
      if (tracer)
        tracer->add({a.str(), "backward", 0, start, hostClockSeconds() - start,
                     "stage " + std::to_string(a.stage), int64_t(i), -1, steps});
      InFlight &now = keptNow[a.stage];
      for (const auto &[name, t] : keptIt->second)
        now.bytes -= t.bytes.size();
      --now.microbatches;
      keptForW.erase(keptIt);
    } else if (a.op == PipelineOp::Backward || a.op == PipelineOp::BackwardInput) {
      bool whole = a.op == PipelineOp::Backward;
      receiveGrads(a.stage, a.microbatch, at);
      auto keptIt = kept.find({a.stage, a.microbatch});
      if (keptIt == kept.end())
        throw RuntimeError("pipeline " + at + ": the forward of micro-batch " +
                           std::to_string(a.microbatch) + " did not run before");
      std::map<std::string, HostTensor> &feed = keptIt->second;
      for (size_t id = 0; id < transfers.size(); ++id) {
        const Transfer &t = transfers[id];
        if (t.producer != a.stage || t.dtype != DType::F32)
          continue;
        HostTensor sum;
        for (int c : t.consumers) {
          auto g = grads.find({int(id), c, a.microbatch});
          if (g == grads.end())
            throw RuntimeError("pipeline " + at + ": the gradient of transfer:" +
                               std::to_string(id) + " from stage " + std::to_string(c) +
                               " was not computed before");
          if (sum.bytes.empty()) {
            sum = std::move(g->second);
          } else {
            float *x = reinterpret_cast<float *>(sum.bytes.data());
            const float *y = reinterpret_cast<const float *>(g->second.bytes.data());
            for (size_t e = 0, n = sum.bytes.size() / 4; e < n; ++e)
              x[e] += y[e];
          }
          grads.erase(g);
        }
        feed["grad:transfer:" + std::to_string(id)] = std::move(sum);
        values.erase({int(id), a.microbatch});
      }
      double start = hostClockSeconds();
      Trainer &trainer = trainers.at(a.stage);
      ProgramRunner &program = whole ? *trainer.backward : *trainer.input;
      std::map<std::string, HostTensor> programFeed;
      for (const BufferDesc &b : program.artifact().buffers)
        if (b.kind == BufferDesc::Kind::Input)
          programFeed[b.name] = std::move(feed.at(b.name));
      auto results = program.run(programFeed);
      if (tracer)
        tracer->add({a.str(), "backward", 0, start, hostClockSeconds() - start,
                     "stage " + std::to_string(a.stage), int64_t(i), -1, steps});
      for (auto &[name, t] : results) {
        if (name.rfind("grad:transfer:", 0) != 0)
          continue;
        int id = std::stoi(name.substr(14));
        int producer = transfers.at(size_t(id)).producer;
        if (s.stageRank[size_t(producer)] == pp) {
          grads[{id, a.stage, a.microbatch}] = copyOf(t);
          continue;
        }
        HostTensor &g = grads[{id, a.stage, a.microbatch}] = copyOf(t);
        sends.emplace_back(
            messages->startSend(g.view(), rankOf(producer), gradTagOf(id, a.stage, a.microbatch)),
            name + " of micro-batch " + std::to_string(a.microbatch) + " to rank " +
                std::to_string(rankOf(producer)));
      }
      InFlight &now = keptNow[a.stage];
      for (const auto &[name, t] : feed)
        if (name.rfind("grad:", 0) != 0)
          now.bytes -= t.bytes.size();
      for (const auto &[name, t] : programFeed)
        if (name.rfind("grad:", 0) != 0)
          now.bytes -= t.bytes.size();
      if (whole) {
        --now.microbatches;
      } else {
        // What W reads: I's results for it, and what the forward kept.
        std::map<std::string, HostTensor> keep;
        for (const BufferDesc &b : trainer.weight->artifact().buffers) {
          if (b.kind != BufferDesc::Kind::Input)
            continue;
          bool found = false;
          for (auto &[name, t] : results)
            if (name == b.name) {
              keep[b.name] = copyOf(t);
              found = true;
            }
          if (!found) {
            // I has run: what it read moves on to W.
            auto k = programFeed.find(b.name);
            keep[b.name] = std::move(k != programFeed.end() ? k->second : feed.at(b.name));
          }
          now.bytes += keep[b.name].bytes.size();
        }
        keptForW[{a.stage, a.microbatch}] = std::move(keep);
      }
      kept.erase(keptIt);
    } else if (a.op == PipelineOp::RecvF) {
      receive(a.stage, a.microbatch, at);
    } else if (a.op == PipelineOp::RecvB) {
      receiveGrads(a.stage, a.microbatch, at);
    } else if (a.op != PipelineOp::SendF && a.op != PipelineOp::SendB) {
      // Sends go out right after the computation that makes what they send.
      throw RuntimeError("pipeline " + at + ": an action this runner does not run");
    }
  }
  for (auto &[request, what] : sends)
    if (request.waitWithin(settings.timeoutSeconds) == WaitOutcome::TimedOut)
      timedOut("for the receiver of " + what);
  ++steps;
}

PipelineRunner::StepFigures PipelineRunner::step(const std::map<std::string, HostTensor> &inputs) {
  if (!art.trains())
    throw RuntimeError("the pipeline artifact holds forward programs only (compile with "
                       "shard-opt --train to train)");
  checkInputs(inputs);
  std::map<std::string, std::vector<HostTensor>> unused;
  double loss = 0;
  runActions(inputs, unused, loss);
  int step = steps - 1;
  double start = hostClockSeconds();
  // An accumulator several stages hold: their sum, in each.
  for (Shared &e : shared) {
    std::vector<Tensor> local;
    for (int k : e.stages) {
      const Artifact &a = trainers.at(k).update->artifact();
      for (size_t b = 0; b < a.buffers.size(); ++b)
        if (a.buffers[b].kind == BufferDesc::Kind::Weight && a.buffers[b].name == e.name)
          local.push_back(trainers.at(k).update->device().tensorOf(int(b)));
    }
    if (local.empty())
      continue;
    for (size_t j = 1; j < local.size(); ++j) {
      if (local[j].shape != local[0].shape)
        throw RuntimeError("accumulator '" + e.name + "' has other shapes on stages " +
                           std::to_string(e.stages[0]) + " and " + std::to_string(e.stages[j]));
      float *x = static_cast<float *>(local[0].data);
      const float *y = static_cast<const float *>(local[j].data);
      for (int64_t n = 0; n < local[0].numel(); ++n)
        x[n] += y[n];
    }
    if (e.holders)
      e.holders->startAllReduce(local[0], local[0], Reduction::Sum).wait();
    for (size_t j = 1; j < local.size(); ++j)
      std::memcpy(local[j].data, local[0].data, local[0].bytes());
  }
  // The squared norm of every stage's gradients and the step's loss, on
  // every rank.
  float figures[2] = {float(loss), 0.0f};
  std::map<std::string, HostTensor> none;
  for (auto &[k, t] : trainers)
    for (auto &[name, out] : t.norm->run(none))
      if (name == "grad_sq")
        figures[1] += *static_cast<const float *>(out.data);
  Tensor both{figures, DType::F32, {2}};
  acrossStages->startAllReduce(both, both, Reduction::Sum).wait();
  HostTensor lossIn, normIn;
  for (auto [t, v] : {std::make_pair(&lossIn, figures[0]), std::make_pair(&normIn, figures[1])}) {
    t->dtype = DType::F32;
    t->bytes.resize(4);
    std::memcpy(t->bytes.data(), &v, 4);
  }
  StepFigures result;
  result.loss = figures[0];
  // (Outputs may be views of the inputs: these outlive the reads.)
  std::map<std::string, HostTensor> updateInputs{{"loss", lossIn}, {"grad_sq", normIn}};
  for (auto &[k, t] : trainers) {
    for (auto &[name, out] : t.update->run(updateInputs)) {
      double v = double(*static_cast<const float *>(out.data));
      if (name == "grad_norm")
        result.gradNorm = v;
      else if (name == "lr")
        result.lr = v;
      else if (name == "loss")
        result.loss = v;
    }
  }
  if (tracer)
    tracer->add({"update", "update", 0, start, hostClockSeconds() - start, "", -1, -1, step});
  return result;
}

std::vector<std::pair<std::string, HostTensor>>
PipelineRunner::run(const std::map<std::string, HostTensor> &inputs) {
  if (art.trains())
    throw RuntimeError("the pipeline artifact is a training step: run it with --data FILE.npz "
                       "--steps N");
  const PipelineSchedule &s = art.schedule;
  checkInputs(inputs);
  std::map<std::string, std::vector<HostTensor>> outputs;
  double unusedLoss = 0;
  runActions(inputs, outputs, unusedLoss);

  // The graph outputs, whole, to world rank 0 (from rank 0 of the stage
  // that computes each).
  std::vector<std::pair<std::string, HostTensor>> result;
  for (size_t o = 0; o < art.outputs.size(); ++o) {
    const PipelineTensor &spec = art.outputs[o];
    int maker = -1;
    for (size_t k = 0; k < art.stages.size(); ++k)
      for (const auto &[name, buffer] : art.stages[k].outputs)
        if (name == spec.name)
          maker = s.stageRank[k] * perStage;
    HostTensor whole;
    whole.dtype = spec.dtype;
    whole.shape = spec.shape;
    whole.bytes.resize(size_t(whole.view().numel()) * dtypeSize(whole.dtype));
    int tag = tagOf(int(transfers.size()), 0) + int(o);
    if (world.rank() == maker) {
      auto &parts = outputs.at(spec.name);
      size_t at = 0;
      for (const HostTensor &part : parts) {
        std::memcpy(whole.bytes.data() + at, part.bytes.data(), part.bytes.size());
        at += part.bytes.size();
      }
      if (maker != 0) {
        Request r = messages->startSend(whole.view(), 0, tag);
        if (r.waitWithin(settings.timeoutSeconds) == WaitOutcome::TimedOut)
          timedOut("for rank 0 to take output '" + spec.name + "'");
      }
    }
    if (world.rank() == 0) {
      if (maker != 0) {
        Request r = messages->startRecv(whole.view(), maker, tag);
        if (r.waitWithin(settings.timeoutSeconds) == WaitOutcome::TimedOut)
          timedOut("for output '" + spec.name + "' from rank " + std::to_string(maker));
      }
      result.emplace_back(spec.name, std::move(whole));
    }
  }
  return result;
}

} // namespace shardflow::runtime
