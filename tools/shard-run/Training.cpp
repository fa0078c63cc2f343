//===- Training.cpp - shard-run --steps: the training loop -----------------===//

#include "Training.h"
#include "Tensors.h"

#include "shardflow/Runtime/Format/TrainingData.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

using namespace shardflow::runtime;

namespace {

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

/// The writable buffer named `name`, or -1.
int stateBuffer(const Artifact &a, const std::string &name) {
  for (size_t i = 0; i < a.buffers.size(); ++i)
    if (a.buffers[i].writable && a.buffers[i].name == name)
      return int(i);
  return -1;
}

/// A scalar output as a double.
double scalarOutput(const std::vector<std::pair<std::string, Tensor>> &outputs,
                    const std::string &name) {
  for (const auto &[n, t] : outputs)
    if (n == name) {
      if (t.numel() != 1 || t.dtype != DType::F32)
        throw RuntimeError("the training step's output '" + name + "' is " + dtypeName(t.dtype) +
                           shapeList(t.shape) + ", not an f32 scalar");
      return double(*static_cast<const float *>(t.data));
    }
  throw RuntimeError("the training step has no output '" + name + "'");
}

/// Tokens a step consumes, for tokens/s: the elements of the first integer
/// input (token ids), else the first input's leading dimension (samples).
int64_t tokensPerStep(const Artifact &a) {
  const BufferDesc *first = nullptr;
  for (const BufferDesc &b : a.buffers) {
    if (b.kind != BufferDesc::Kind::Input)
      continue;
    if (b.dtype == DType::I64 || b.dtype == DType::I32)
      return b.numel();
    if (!first)
      first = &b;
  }
  return first && !first->shape.empty() ? first->shape[0] : 1;
}

std::string clockText(double seconds) {
  long s = long(seconds + 0.5);
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof(text), "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(text, sizeof(text), "%ld:%02ld", s / 60, s % 60);
  return text;
}

/// A JSON number (non-finite values as null, which JSON lacks numbers for).
std::string jsonNumber(double x) {
  if (!std::isfinite(x))
    return "null";
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", x);
  return text;
}

/// Copies `block` (a slice of `whole`'s shape starting at `start`; it may
/// reach past `whole`'s end, a zero-padded vocabulary) into `whole`.
void placeBlock(const HostTensor &block, const std::vector<int64_t> &start, HostTensor &whole) {
  size_t dims = whole.shape.size(), elem = dtypeSize(whole.dtype);
  if (dims == 0) {
    std::memcpy(whole.bytes.data(), block.bytes.data(), elem);
    return;
  }
  // Row-major strides of both, in elements; rows of the last dimension
  // are copied whole (clipped to the tensor).
  std::vector<int64_t> wStride(dims, 1), bStride(dims, 1);
  for (size_t d = dims - 1; d > 0; --d) {
    wStride[d - 1] = wStride[d] * whole.shape[d];
    bStride[d - 1] = bStride[d] * block.shape[d];
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < dims; ++d)
    rows *= block.shape[d];
  int64_t width = std::min(block.shape[dims - 1], whole.shape[dims - 1] - start[dims - 1]);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, from = 0, to = start[dims - 1];
    bool inside = true;
    for (size_t d = dims - 1; d-- > 0;) {
      int64_t i = rest % block.shape[d];
      rest /= block.shape[d];
      from += i * bStride[d];
      inside = inside && start[d] + i < whole.shape[d];
      to += (start[d] + i) * wStride[d];
    }
    if (inside && width > 0)
      std::memcpy(whole.bytes.data() + size_t(to) * elem,
                  block.bytes.data() + size_t(from) * elem, size_t(width) * elem);
  }
}

/// The model's weights (state with a file: not the optimizer's moments or
/// counter), whole, by initializer name, on the runner's rank 0 (empty
/// elsewhere). A weight sliced over the ranks is put together: the first
/// rank holding each distinct slice places it in a tensor of zeros, and a
/// sum over the runner's world adds them.
std::vector<std::pair<std::string, HostTensor>> collectWeights(ProgramRunner &runner) {
  const Artifact &art = runner.artifact();
  Communicator &world = runner.world();
  int rank = world.rank();
  std::vector<std::pair<std::string, HostTensor>> weights;
  for (size_t i = 0; i < art.buffers.size(); ++i) {
    const BufferDesc &b = art.buffers[i];
    if (!b.writable || b.storage == "zeros")
      continue;
    HostTensor mine;
    mine.dtype = b.dtype;
    mine.shape = b.shape;
    mine.bytes.resize(b.bytes());
    runner.device().download(int(i), mine.bytes.data());
    if (b.starts.empty()) {
      if (!b.modelShape.empty())
        mine.shape = b.modelShape;
      if (rank == 0)
        weights.emplace_back(b.name, std::move(mine));
      continue;
    }
    HostTensor whole;
    whole.dtype = b.dtype;
    whole.shape = b.globalShape;
    whole.bytes.assign(size_t(whole.view().numel()) * dtypeSize(b.dtype), 0);
    bool first = true;
    for (int r = 0; r < rank && first; ++r)
      first = b.starts[size_t(r)] != b.starts[size_t(rank)];
    if (first)
      placeBlock(mine, b.starts[size_t(rank)], whole);
    Tensor t = whole.view();
    world.startAllReduce(t, t, Reduction::Sum).wait();
    if (!b.modelShape.empty())
      whole.shape = b.modelShape;
    if (rank == 0)
      weights.emplace_back(b.name, std::move(whole));
  }
  return weights;
}

/// Writes `weights` as safetensors or .npz (by `path`'s extension).
void writeWeights(const std::string &path, std::vector<std::pair<std::string, HostTensor>> &weights) {
  std::vector<std::pair<std::string, Tensor>> views;
  for (auto &[name, t] : weights)
    views.emplace_back(name, t.view());
  if (endsWith(path, ".npz"))
    writeNpz(path, views);
  else
    writeSafetensors(path, views);
}

} // namespace

bool shardflow::runtime::isTrainingStep(const Artifact &artifact) {
  for (const BufferDesc &b : artifact.buffers)
    if (b.writable)
      return true;
  return false;
}

void shardflow::runtime::checkTrainingOptions(const Options &o, const Artifact &artifact) {
  bool training = isTrainingStep(artifact);
  bool asked = o.steps > 0 || !o.data.empty() || !o.log.empty() || !o.saveWeights.empty() ||
               o.skipNonfinite;
  if (!training) {
    if (asked)
      throw RuntimeError("--steps, --data, --log and --save-weights run a training step; '" +
                         o.artifact + "' is not one (compile with shard-opt --train)");
    return;
  }
  if (o.steps <= 0 || o.data.empty())
    throw RuntimeError("'" + o.artifact +
                       "' is a training step: run it with --data FILE.npz --steps N");
  if (o.repeat != 1 || !o.inputsNpz.empty() || !o.inputFiles.empty())
    throw RuntimeError("a training step takes its inputs from --data, once per step: "
                       "not --input, --inputs or --repeat");
  if (!o.saveWeights.empty() && !endsWith(o.saveWeights, ".safetensors") &&
      !endsWith(o.saveWeights, ".npz"))
    throw RuntimeError("--save-weights writes FILE.safetensors or FILE.npz, got '" +
                       o.saveWeights + "'");
}

namespace {

struct StepOutcome {
  double loss = 0, norm = 0, lr = 0;
};

/// The steps from `first` to --steps: progress on the lead rank, the
/// --log lines, a step whose loss or gradient norm is not finite stopping
/// the run (or skipped with --skip-nonfinite).
void runSteps(const Options &o, Communicator &world, const TrainingData &data, int64_t first,
              int64_t tokens,
              const std::function<StepOutcome(int64_t, const std::map<std::string, HostTensor> &,
                                              double &)> &step) {
  bool lead = world.rank() == 0;
  std::ofstream log;
  if (lead && !o.log.empty()) {
    log.open(o.log);
    if (!log)
      throw RuntimeError("cannot write --log '" + o.log + "'");
  }
  bool live = lead && isatty(STDERR_FILENO);
  using Clock = std::chrono::steady_clock;
  auto begin = Clock::now();
  int64_t skipped = 0;
  for (int64_t t = first; t <= o.steps; ++t) {
    auto t0 = Clock::now();
    std::map<std::string, HostTensor> inputs = data.step(t);
    double seconds = 0;
    StepOutcome r = step(t, inputs, seconds);
    double loss = r.loss, norm = r.norm, lr = r.lr;
    if (seconds <= 0)
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    double perSecond = seconds > 0 ? double(tokens) / seconds : 0;
    if (log.is_open()) {
      log << "{\"step\":" << t << ",\"loss\":" << jsonNumber(loss)
          << ",\"grad_norm\":" << jsonNumber(norm) << ",\"lr\":" << jsonNumber(lr)
          << ",\"step_seconds\":" << jsonNumber(seconds)
          << ",\"tokens_per_second\":" << jsonNumber(perSecond) << "}\n";
      log.flush();
    }
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      // The step changed no weight and no moment (nn-optimizer's guard).
      std::string what = "step " + std::to_string(t) + ": the " +
                         (std::isfinite(loss) ? "gradient norm" : "loss") + " is " +
                         (std::isnan(std::isfinite(loss) ? norm : loss) ? "NaN" : "infinite") +
                         " (loss " + jsonNumber(loss) + ", grad_norm " + jsonNumber(norm) + ")";
      if (!o.skipNonfinite)
        throw RuntimeError(what + "; the weights are those before it (pass --skip-nonfinite "
                                  "to skip such steps)");
      ++skipped;
      if (lead)
        std::fprintf(stderr, "%sshard-run: %s: skipped, the weights and moments unchanged\n",
                     live ? "\n" : "", what.c_str());
      continue;
    }
    if (lead) {
      double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
      double eta = elapsed / double(t - first + 1) * double(o.steps - t);
      std::fprintf(stderr,
                   "%sshard-run: step %lld/%lld  loss %.6g  grad_norm %.4g  lr %.4g  "
                   "%.0f tokens/s  ETA %s%s",
                   live ? "\r" : "", (long long)t, (long long)o.steps, loss, norm, lr, perSecond,
                   clockText(eta).c_str(), live ? "\033[K" : "\n");
    }
  }
  if (live)
    std::fprintf(stderr, "\n");
  if (skipped && lead)
    std::fprintf(stderr, "shard-run: %lld step(s) skipped for a loss or gradient norm that "
                         "was not finite\n", (long long)skipped);
  if (first > o.steps && lead)
    std::fprintf(stderr, "shard-run: the step counter is at %lld already: no step to run\n",
                 (long long)(first - 1));
}

/// The steps done before this run: the step counter's value.
int64_t firstStep(ProgramRunner &runner) {
  int counter = stateBuffer(runner.artifact(), "optimizer.step");
  if (counter < 0)
    throw RuntimeError("the training step has no state 'optimizer.step' (its step counter)");
  float done = 0;
  runner.device().download(counter, &done);
  return int64_t(done) + 1;
}

} // namespace

void shardflow::runtime::train(const Options &o, ProgramRunner &runner, RunReport &report) {
  const Artifact &art = runner.artifact();
  Communicator &world = runner.world();
  TrainingData data(readNpz(o.data), art, "--data '" + o.data + "'");
  int64_t first = firstStep(runner);
  std::vector<std::pair<std::string, Tensor>> outputs;
  runSteps(o, world, data, first, tokensPerStep(art),
           [&](int64_t t, const std::map<std::string, HostTensor> &inputs, double &seconds) {
             auto t0 = std::chrono::steady_clock::now();
             outputs = runner.run(inputs);
             seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
             report.ran(int(t - first), seconds);
             return StepOutcome{scalarOutput(outputs, "loss"), scalarOutput(outputs, "grad_norm"),
                                scalarOutput(outputs, "lr")};
           });
  world.barrier();
  if (!o.trace.empty())
    runner.writeTrace(o.trace);
  if (first <= o.steps)
    report.print(o.verbose, world.rank());

  if (!o.saveWeights.empty()) {
    auto weights = collectWeights(runner);
    if (world.rank() == 0)
      writeWeights(o.saveWeights, weights);
  }
  if (!o.output.empty())
    writeOutputs(o.output, std::move(outputs), world.rank());
}

void shardflow::runtime::trainPipeline(const Options &o, PipelineRunner &runner) {
  const PipelineArtifact &art = runner.artifact();
  Communicator &world = runner.worldComm();
  int mbs = art.schedule.microbatches;
  // The whole batch's inputs, as the stages declare them.
  std::vector<BufferDesc> inputs;
  for (const PipelineTensor &t : art.inputs) {
    BufferDesc whole;
    for (const PipelineStageTraining &stage : art.training)
      for (const BufferDesc &b : stage.backward.buffers)
        if (b.kind == BufferDesc::Kind::Input && b.name == t.name)
          whole = b;
    whole.kind = BufferDesc::Kind::Input;
    whole.name = t.name;
    whole.dtype = t.dtype;
    whole.shape = t.shape;
    inputs.push_back(whole);
  }
  TrainingData data(readNpz(o.data), inputs, "--data '" + o.data + "'");
  std::vector<int> local = runner.localStages();
  int64_t first = firstStep(*runner.stateOf(local.front()));
  int64_t tokens = 1;
  for (const BufferDesc &b : inputs)
    if (b.dtype == DType::I64 || b.dtype == DType::I32) {
      tokens = b.numel();
      break;
    }
  double slowest = 0, total = 0;
  int64_t ran = 0;
  runSteps(o, world, data, first, tokens,
           [&](int64_t, const std::map<std::string, HostTensor> &batch, double &seconds) {
             auto t0 = std::chrono::steady_clock::now();
             PipelineRunner::StepFigures f = runner.step(batch);
             seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
             slowest = std::max(slowest, seconds);
             total += seconds;
             ++ran;
             return StepOutcome{f.loss, f.gradNorm, f.lr};
           });
  world.barrier();
  if (!o.trace.empty())
    runner.writeTrace(o.trace);
  if (o.verbose) {
    for (auto &[stage, peak] : runner.peakInFlight())
      if (runner.stageRanks().rank() == 0)
        std::fprintf(stderr,
                     "shard-run: stage %d (pp rank %d): at most %d micro-batch(es) in flight, "
                     "%.1f kB kept for the backward\n",
                     stage, runner.ppRank(), peak.microbatches, double(peak.bytes) * 1e-3);
    if (world.rank() == 0 && ran)
      std::fprintf(stderr, "shard-run: %lld step(s), %.3f s each on average (slowest %.3f s), "
                           "pipeline of %d stages on pp %d x %d ranks, %d micro-batches\n",
                   (long long)ran, total / double(ran), slowest, art.schedule.stages(),
                   art.schedule.ranks, art.stageWorldSize(), mbs);
  }
  if (o.saveWeights.empty())
    return;
  // Each stage's trained weights, put together on its ranks, then sent to
  // world rank 0 (a weight several stages hold, once).
  std::vector<std::pair<std::string, HostTensor>> all;
  std::set<std::string> saved;
  int perStage = art.stageWorldSize();
  for (int k = 0; k < art.schedule.stages(); ++k) {
    int holder = art.schedule.stageRank[size_t(k)] * perStage; // its ranks' first
    std::vector<std::pair<std::string, HostTensor>> weights;
    if (ProgramRunner *state = runner.stateOf(k))
      weights = collectWeights(*state);
    // What rank 0 receives: the weights of the stage's update program.
    for (const BufferDesc &b : art.training[size_t(k)].update.buffers) {
      if (!b.writable || b.storage == "zeros")
        continue;
      bool first = saved.insert(b.name).second;
      HostTensor whole;
      if (world.rank() == holder) {
        for (auto &[name, t] : weights)
          if (name == b.name)
            whole = std::move(t);
      } else if (world.rank() == 0) {
        whole.dtype = b.dtype;
        whole.shape = !b.modelShape.empty() ? b.modelShape
                      : b.starts.empty()    ? b.shape
                                            : b.globalShape;
        whole.bytes.resize(size_t(whole.view().numel()) * dtypeSize(b.dtype));
      }
      if (!first)
        continue;
      if (holder != 0 && world.rank() == holder)
        world.startSend(whole.view(), 0, 1).wait();
      if (holder != 0 && world.rank() == 0)
        world.startRecv(whole.view(), holder, 1).wait();
      if (world.rank() == 0)
        all.emplace_back(b.name, std::move(whole));
    }
  }
  if (world.rank() == 0)
    writeWeights(o.saveWeights, all);
}
