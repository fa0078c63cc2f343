//===- PipelineRunner.cpp - a pipeline's schedule on one rank ------------===//

#include "shardflow/Runtime/Core/PipelineRunner.h"

#include <algorithm>
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

PipelineRunner::PipelineRunner(PipelineArtifact artifact, const DeviceFactory &makeDevice,
                               Communicator &world, const RunnerSettings &settings)
    : art(std::move(artifact)), world(world), settings(settings) {
  const PipelineSchedule &s = art.schedule;
  if (world.size() != art.worldSize)
    throw RuntimeError("the pipeline artifact was compiled for " + std::to_string(art.worldSize) +
                       " ranks but was launched with " + std::to_string(world.size()));
  for (const auto &list : s.actions)
    for (const PipelineAction &a : list)
      if (a.op != PipelineOp::Forward && a.op != PipelineOp::SendF && a.op != PipelineOp::RecvF)
        throw RuntimeError("the pipeline's action " + a.str() +
                           " is a backward one; this shard-run runs forward-only pipelines");
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
  if (int64_t(transfers.size() + art.outputs.size()) * s.microbatches > kMaxTag)
    throw RuntimeError("the pipeline passes " + std::to_string(transfers.size()) +
                       " values over " + std::to_string(s.microbatches) +
                       " micro-batches: more messages than MPI's tags can tell apart");

  // The stages' programs are not traced instruction by instruction: the
  // pipeline's spans are its actions.
  RunnerSettings stageSettings = settings;
  stageSettings.trace = false;
  for (int stage : localStages())
    runners[stage] = std::make_unique<ProgramRunner>(art.stages[size_t(stage)],
                                                     makeDevice(*stageComm), *stageComm,
                                                     stageSettings);
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

void PipelineRunner::timedOut(const std::string &what) {
  world.abort("waited " + std::to_string(int(settings.timeoutSeconds)) + " s (" +
              settings.timeoutFlag + ") " + what);
}

std::vector<std::pair<std::string, HostTensor>>
PipelineRunner::run(const std::map<std::string, HostTensor> &inputs) {
  const PipelineSchedule &s = art.schedule;
  int mbs = s.microbatches;
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

  // Values by (transfer, micro-batch): made here, or received.
  std::map<std::pair<int, int>, HostTensor> values;
  // Graph outputs made here, per micro-batch.
  std::map<std::string, std::vector<HostTensor>> outputs;
  std::vector<std::pair<Request, std::string>> sends;
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
      int from = s.stageRank[size_t(t.producer)] * perStage + sub;
      Request r = messages->startRecv(v.view(), from, tagOf(int(id), m));
      double start = hostClockSeconds();
      if (r.waitWithin(settings.timeoutSeconds) == WaitOutcome::TimedOut)
        timedOut(at + " for transfer:" + std::to_string(id) + " of micro-batch " +
                 std::to_string(m) + " from rank " + std::to_string(from) + " (stage " +
                 std::to_string(t.producer) + ")");
      if (tracer)
        tracer->add({PipelineAction{stage, PipelineOp::RecvF, m}.str(), "wait", 0, start,
                     hostClockSeconds() - start, "transfer:" + std::to_string(id), -1,
                     int64_t(v.bytes.size()), steps});
      values[{int(id), m}] = std::move(v);
    }
  };
  const std::vector<PipelineAction> &actions = plan.actions[size_t(pp)];
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction &a = actions[i];
    std::string at = "at its action " + std::to_string(i + 1) + " (" + a.str() + ")";
    if (a.op == PipelineOp::Forward) {
      receive(a.stage, a.microbatch, at);
      const Artifact &stage = art.stages[size_t(a.stage)];
      std::map<std::string, HostTensor> feed;
      for (const BufferDesc &b : stage.buffers) {
        if (b.kind != BufferDesc::Kind::Input)
          continue;
        if (isTransfer(b.name)) {
          auto it = values.find({transferId(b.name), a.microbatch});
          if (it == values.end())
            throw RuntimeError("pipeline " + at + ": " + b.name + " of micro-batch " +
                               std::to_string(a.microbatch) + " was not computed before");
          feed[b.name] = it->second;
        } else {
          feed[b.name] = slice(inputs.at(b.name), a.microbatch, mbs);
        }
      }
      double start = hostClockSeconds();
      auto results = runners.at(a.stage)->run(feed);
      if (tracer)
        tracer->add({a.str(), "forward", 0, start, hostClockSeconds() - start,
                     "stage " + std::to_string(a.stage), int64_t(i), -1, steps});
      for (auto &[name, t] : results) {
        if (isTransfer(name)) {
          values[{transferId(name), a.microbatch}] = copyOf(t);
        } else if (sub == 0) {
          std::vector<HostTensor> &parts = outputs[name];
          parts.resize(size_t(mbs));
          parts[size_t(a.microbatch)] = copyOf(t);
        }
      }
      post(a.stage, a.microbatch);
    } else if (a.op == PipelineOp::RecvF) {
      receive(a.stage, a.microbatch, at);
    } else if (a.op != PipelineOp::SendF) { // sends go out right after F
      throw RuntimeError("pipeline " + at + ": not a forward-only action");
    }
  }
  for (auto &[request, what] : sends)
    if (request.waitWithin(settings.timeoutSeconds) == WaitOutcome::TimedOut)
      timedOut("for the receiver of " + what);
  ++steps;

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
