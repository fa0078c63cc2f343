//===- ProgramRunner.cpp - one rank's program over a device ----------------===//
//
// Loading, the instruction loop and the waits; the collectives' lowering
// onto the communicator and the device's copies is in Collectives.cpp.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Core/ProgramRunner.h"
#include "shardflow/Runtime/Format/KernelSignature.h"
#include "shardflow/Runtime/Format/Layout.h"

#include <chrono>
#include <cstdlib>
#include <exception>

using namespace shardflow::runtime;

Device::~Device() = default;

void Device::shareState(std::map<std::string, Tensor> shared) {
  if (!shared.empty())
    throw RuntimeError(std::string("the ") + name() +
                       " device does not share state between programs");
}

/// Checks a shared state tensor against the program's buffer.
void shardflow::runtime::checkSharedState(const BufferDesc &b, const Tensor &shared) {
  if (shared.dtype != b.dtype || shared.shape != b.shape)
    throw RuntimeError("state '" + b.name + "' is " + dtypeName(b.dtype) + shapeList(b.shape) +
                       " in this program but " + dtypeName(shared.dtype) +
                       shapeList(shared.shape) +
                       " in the program that holds it (the stage's programs split it "
                       "differently over the ranks)");
}

double shardflow::runtime::hostClockSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ProgramRunner::ProgramRunner(Artifact artifact, std::unique_ptr<Device> device, Communicator &world,
                             const RunnerSettings &settings, ProgramRunner *stateOwner)
    : art(std::move(artifact)), dev(std::move(device)), worldComm(&world), settings(settings) {
  if (world.size() != art.worldSize)
    throw RuntimeError("the artifact was compiled for " + std::to_string(art.worldSize) +
                       " rank(s) but runs on " + std::to_string(world.size()));
  bindKernelSignatures();
  if (stateOwner) {
    // Every weight this program reads that the owner holds.
    std::map<std::string, Tensor> owned, shared;
    const Artifact &other = stateOwner->artifact();
    for (size_t i = 0; i < other.buffers.size(); ++i)
      if (other.buffers[i].kind == BufferDesc::Kind::Weight)
        owned[other.buffers[i].name] = stateOwner->device().tensorOf(int(i));
    for (const BufferDesc &b : art.buffers)
      if (b.kind == BufferDesc::Kind::Weight)
        if (auto it = owned.find(b.name); it != owned.end()) {
          checkSharedState(b, it->second);
          shared[b.name] = it->second;
        }
    dev->shareState(std::move(shared));
  }
  dev->load(art);
  for (size_t n = 0; n < art.program.size(); ++n) {
    try {
      dev->prepare(n);
    } catch (const std::exception &e) {
      throw RuntimeError(describeInstruction(art.program[n], n) + ": " + e.what());
    }
  }
  dev->finishPreparing();
  prepareCommunicators();
  if (settings.trace) {
    std::vector<std::string> lanes = dev->laneNames();
    lanes.push_back("host");
    tracer = std::make_unique<TraceRecorder>(world, lanes);
  }
}

void ProgramRunner::bindKernelSignatures() {
  for (size_t n = 0; n < art.program.size(); ++n) {
    Instruction &inst = art.program[n];
    if (inst.collective || inst.kernel == "launch")
      continue;
    // A kernel the table lacks is the device's to refuse, naming what it has.
    const KernelSignature *kernel = findKernelSignature(inst.kernel);
    if (!kernel)
      continue;
    if (std::string why = checkParams(*kernel, inst.params); !why.empty())
      throw RuntimeError(describeInstruction(inst, n) + ": " + why);
    inst.params.bind(kernel);
  }
}

ProgramRunner::~ProgramRunner() {
  // What refers to the communicators goes first (a CUDA graph holds NCCL's
  // work), then the communicators, then the device they run on.
  inFlight.clear();
  dev->releaseCommunicatorWork();
  groupComms.clear();
  deviceWorld.reset();
  dev.reset();
}

void ProgramRunner::prepareCommunicators() {
  deviceWorld = dev->createCommunicator(*worldComm);
  comm = deviceWorld ? deviceWorld.get() : worldComm;
  // Every rank walks the same program, so the splits (collective calls)
  // happen in the same order everywhere.
  int rank = worldComm->rank();
  for (const Instruction &inst : art.program) {
    if (!inst.collective || inst.collectiveKind == CollectiveKind::LocalSlice)
      continue;
    std::vector<int64_t> key = collectiveGroupKey(inst);
    if (key.empty() || groupComms.count(key))
      continue;
    int64_t size = key[0];
    int color = -1, order = 0;
    for (size_t i = 1; i < key.size(); ++i)
      if (key[i] == rank) {
        color = int(int64_t(i - 1) / size);
        order = int(int64_t(i - 1) % size);
      }
    groupComms[key] = comm->split(color, order);
  }
}

Communicator *ProgramRunner::groupOf(const Instruction &inst) {
  return groupComms.at(collectiveGroupKey(inst)).get();
}

std::vector<std::pair<std::string, Tensor>>
ProgramRunner::run(const std::map<std::string, HostTensor> &inputs, size_t program) {
  if (program != 0)
    throw RuntimeError("the artifact holds one program; there is no program " +
                       std::to_string(program));
  double started = hostClockSeconds();
  dev->beginRun(bindInputs(art, inputs));
  inFlight.clear();
  dev->execute([&] {
    for (size_t n = 0; n < art.program.size(); ++n)
      dispatch(n);
  });
  dev->finishRun([&] { nameBlockedCollective(); });
  inFlight.clear();
  std::vector<std::pair<std::string, Tensor>> outputs = dev->outputs();
  if (tracer)
    recordTrace(started, hostClockSeconds());
  ++runs;
  return outputs;
}

void ProgramRunner::recordTrace(double start, double end) {
  int host = int(dev->laneNames().size());
  tracer->add({"run " + std::to_string(runs), "run", host, start, end - start, "", -1, -1, runs});
  RunFigures f = dev->lastRun();
  size_t outputBytes = dev->outputBytes();
  if (f.uploadStart >= 0) {
    int64_t bytes = 0;
    for (const BufferDesc &b : art.buffers)
      if (b.kind == BufferDesc::Kind::Input)
        bytes += int64_t(b.bytes());
    tracer->add({"inputs to the device", "copy", host, f.uploadStart, f.uploadSeconds, "", -1,
                 bytes, runs});
  }
  if (f.downloadStart >= 0)
    tracer->add({"outputs to the host", "copy", host, f.downloadStart, f.downloadSeconds, "", -1,
                 int64_t(outputBytes), runs});
  const std::vector<InstructionTime> &times = dev->instructionTimes();
  for (size_t n = 0; n < art.program.size() && n < times.size(); ++n) {
    const Instruction &inst = art.program[n];
    TraceEvent e;
    bool launch = !inst.collective && inst.kernel == "launch";
    e.name = inst.collective ? collectiveKindName(inst.collectiveKind)
             : launch        ? inst.params.getString("function", "launch")
                             : inst.kernel;
    e.category = !inst.collective ? (launch ? "launch" : "kernel")
                 : inst.collectiveKind == CollectiveKind::LocalSlice ? "copy"
                                                                     : "collective";
    e.lane = times[n].lane;
    e.start = times[n].start;
    e.seconds = times[n].seconds;
    e.node = inst.params.getString("node", "");
    e.instruction = int64_t(n);
    e.run = runs;
    // What a collective moves (its input, or a receive's output); what a
    // kernel writes.
    e.bytes = 0;
    if (inst.collective && !inst.inputs.empty())
      e.bytes = int64_t(art.buffers[size_t(inst.inputs[0])].bytes());
    else
      for (int o : inst.outputs)
        e.bytes += int64_t(art.buffers[size_t(o)].bytes());
    tracer->add(std::move(e));
  }
}

void ProgramRunner::writeTrace(const std::string &path) {
  if (!tracer)
    throw RuntimeError("no trace was recorded (the runner was made without `trace`)");
  tracer->write(path);
}

void ProgramRunner::dispatch(size_t n) {
  const Instruction &inst = art.program[n];
  try {
    dev->beginInstruction(n);
    if (!inst.collective || inst.collectiveKind == CollectiveKind::LocalSlice)
      dev->runKernel(n);
    else
      runCollective(n);
    dev->endInstruction(n);
  } catch (const std::exception &e) {
    // Kernels name themselves ("kernel 'div': ..."); said once, here.
    std::string what = e.what(), own = "kernel '" + inst.kernel + "': ";
    if (what.compare(0, own.size(), own) == 0)
      what.erase(0, own.size());
    throw RuntimeError(describeInstruction(inst, n) + ": " + what);
  }
}

void ProgramRunner::settle(size_t n, Request request) {
  if (request.done())
    return;
  if (request.event()) {
    // Ordered on the device's stream: what reads its result comes after
    // it there; the device's wait at the end of the run watches it.
    inFlight.emplace_back(n, std::move(request));
    return;
  }
  if (request.waitWithin(settings.timeoutSeconds) == WaitOutcome::TimedOut)
    timedOut(n);
}

void ProgramRunner::nameBlockedCollective() {
  // The streams run in order: the first collective not done is the one
  // the rest waits for.
  for (auto &[n, request] : inFlight)
    if (!request.test())
      timedOut(n);
}

void ProgramRunner::timedOut(size_t n) {
  const Instruction &inst = art.program[n];
  int rank = worldComm->rank();
  std::string waitedFor;
  auto peer = [&](const char *param) { return int(inst.params.getInts(param).at(size_t(rank))); };
  switch (inst.collectiveKind) {
  case CollectiveKind::Send:
    waitedFor = "rank " + std::to_string(peer("peers")) + " to receive what it sends";
    break;
  case CollectiveKind::Recv:
    waitedFor = "rank " + std::to_string(peer("peers")) + " to send to it";
    break;
  case CollectiveKind::CollectivePermute: {
    auto [dst, src] = permutePeers(inst, rank);
    std::vector<int> peers;
    for (int p : {dst, src})
      if (p >= 0 && (peers.empty() || peers[0] != p))
        peers.push_back(p);
    waitedFor =
        std::string(peers.size() == 1 ? "rank " : "ranks ") + rankList(peers) + " (its peers)";
    break;
  }
  default:
    if (Communicator *group = groupOf(inst))
      waitedFor = "ranks " + rankList(group->worldRanks()) + " (its group)";
    else
      waitedFor = "its group";
    break;
  }
  comm->abort(describeInstruction(inst, n) + " did not finish within " +
              secondsText(settings.timeoutSeconds) + " (" + settings.timeoutFlag + "): rank " +
              std::to_string(rank) + " waited for " + waitedFor +
              "; a rank that never joined it is the likely cause (its own error, if any, "
              "says why)");
  std::exit(1); // abort() does not return; this tells the compiler so
}

std::vector<double> ProgramRunner::instructionSeconds() const {
  std::vector<double> seconds;
  for (const InstructionTime &t : dev->instructionTimes())
    seconds.push_back(t.seconds);
  return seconds;
}
