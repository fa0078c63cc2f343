//===- PipelineArtifact.cpp - a pipeline's stages and schedule -----------===//

#include "shardflow/Runtime/Format/PipelineArtifact.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace shardflow::runtime {

namespace {

constexpr int64_t kMaxLines = int64_t(1) << 40;

std::vector<std::string> words(const std::string &line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  std::string w;
  while (in >> w)
    out.push_back(w);
  return out;
}

class Reader {
public:
  Reader(const std::string &text, const std::string &path) : in(text), path(path) {}
  PipelineArtifact read();

private:
  [[noreturn]] void fail(const std::string &msg) const {
    throw RuntimeError(path + ":" + std::to_string(lineNo) + ": " + msg);
  }
  bool next(std::string &line) {
    if (!std::getline(in, line))
      return false;
    ++lineNo;
    return true;
  }
  int64_t toInt(const std::string &s, const char *what, int64_t lo, int64_t hi) const {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (...) {
      used = 0;
    }
    if (s.empty() || used != s.size() || v < lo || v > hi)
      fail(std::string("bad ") + what + " '" + s + "'");
    return v;
  }
  std::vector<int64_t> toList(const std::string &s, const char *what) const {
    std::vector<int64_t> out;
    std::istringstream items(s);
    std::string item;
    while (std::getline(items, item, ','))
      out.push_back(toInt(item, what, 0, int64_t(1) << 20));
    return out;
  }
  std::string decode(const std::string &s) const {
    auto out = decodeArtifactText(s);
    if (!out)
      fail("bad escape in '" + s + "'");
    return *out;
  }
  PipelineTensor tensor(const std::vector<std::string> &w) const {
    if (w.size() != 4)
      fail("expected '" + w[0] + " NAME TYPE SHAPE'");
    PipelineTensor t;
    t.name = decode(w[1]);
    auto dtype = parseDType(w[2]);
    if (!dtype)
      fail("unknown element type '" + w[2] + "'");
    t.dtype = *dtype;
    if (w[3] != "scalar") {
      std::istringstream dims(w[3]);
      std::string d;
      while (std::getline(dims, d, 'x'))
        t.shape.push_back(toInt(d, "dimension", 0, int64_t(1) << 40));
    }
    return t;
  }

  /// The `count` lines of stage `index`'s program (`kind`: "" for the
  /// forward, " backward", ...), parsed.
  Artifact section(const std::string &index, const std::string &count, const std::string &kind) {
    int64_t lines = toInt(count, "line count", 1, kMaxLines);
    std::string text, piece;
    for (int64_t i = 0; i < lines; ++i) {
      if (!next(piece))
        fail("stage " + index + kind + " ends early: " + std::to_string(i) + " of " + count +
             " lines");
      text += piece + "\n";
    }
    return parseArtifact(text, path + " (stage " + index + kind + ")");
  }

  std::istringstream in;
  std::string path;
  int lineNo = 0;
  bool training = false;
  /// The current stage's training programs read so far, by kinds[] (5:
  /// all).
  int programsRead = 5;
};

PipelineArtifact Reader::read() {
  PipelineArtifact a;
  std::string line;
  if (!next(line) || words(line) != std::vector<std::string>{"shardflow-pipeline",
                                                             std::to_string(PipelineArtifact::kVersion)}) {
    auto w = words(line);
    if (w.size() == 2 && w[0] == "shardflow-pipeline")
      fail("pipeline artifact version " + w[1] + "; this shard-run reads version " +
           std::to_string(PipelineArtifact::kVersion) + " (recompile with this shard-opt)");
    fail("not a Shardflow pipeline artifact (no 'shardflow-pipeline' header)");
  }
  PipelineSchedule &s = a.schedule;
  bool sawPP = false, sawEnd = false;
  std::vector<std::string> actionText;
  while (next(line)) {
    auto w = words(line);
    if (w.empty())
      continue;
    const std::string &key = w[0];
    if (key == "end") {
      sawEnd = true;
      break;
    }
    if (key == "target" && w.size() == 2) {
      if (w[1] != "cpu" && w[1] != "cuda")
        fail("unknown target '" + w[1] + "'");
      a.target = w[1];
    } else if (key == "world-size" && w.size() == 2) {
      a.worldSize = int(toInt(w[1], "world size", 1, int64_t(1) << 20));
    } else if (key == "pp" && w.size() == 2) {
      s.ranks = int(toInt(w[1], "pp", 1, int64_t(1) << 16));
      sawPP = true;
      actionText.assign(s.ranks, "");
    } else if (key == "microbatches" && w.size() == 2) {
      s.microbatches = int(toInt(w[1], "micro-batch count", 1, int64_t(1) << 20));
    } else if (key == "schedule" && w.size() == 2) {
      a.scheduleName = decode(w[1]);
    } else if (key == "stage-ranks" && w.size() == 2) {
      for (int64_t r : toList(w[1], "stage rank"))
        s.stageRank.push_back(int(r));
    } else if (key == "actions" && (w.size() == 2 || w.size() == 3)) {
      if (!sawPP)
        fail("'actions' before 'pp'");
      int64_t r = toInt(w[1], "pp rank", 0, s.ranks - 1);
      actionText[r] = w.size() == 3 ? w[2] : "";
    } else if (key == "input" || key == "output") {
      (key == "input" ? a.inputs : a.outputs).push_back(tensor(w));
    } else if (key == "training" && w.size() == 1) {
      training = true;
    } else if (key == "stage" && w.size() == 4 && w[2] == "lines") {
      int64_t index = toInt(w[1], "stage", 0, int64_t(1) << 20);
      if (index != int64_t(a.stages.size()))
        fail("stage " + w[1] + " where stage " + std::to_string(a.stages.size()) + " comes next");
      if (training && !a.stages.empty() && programsRead != 5)
        fail("stage " + w[1] + " before stage " + std::to_string(a.stages.size() - 1) +
             "'s update program");
      a.stages.push_back(section(w[1], w[3], ""));
      if (training) {
        a.training.emplace_back();
        programsRead = 0;
      }
    } else if (key == "stage" && w.size() == 5 && w[3] == "lines" && training) {
      // backward, [backward-input, backward-weight,] norm, update
      static const char *kinds[] = {"backward", "backward-input", "backward-weight", "norm",
                                    "update"};
      int want = programsRead;
      if (want == 1 && w[2] != kinds[1])
        want = 3;
      if (a.stages.empty() || want > 4 ||
          toInt(w[1], "stage", 0, int64_t(1) << 20) != int64_t(a.stages.size()) - 1 ||
          w[2] != kinds[want])
        fail("'" + line + "' out of order: each stage's forward is followed by its backward, "
             "(backward-input and backward-weight,) norm and update programs");
      PipelineStageTraining *t = &a.training.back();
      Artifact program = section(w[1], w[4], " " + w[2]);
      Artifact *into[] = {&t->backward, &t->backwardInput, &t->backwardWeight, &t->norm,
                          &t->update};
      *into[want] = std::move(program);
      t->splitsBackward |= want == 1;
      programsRead = want + 1;
    } else {
      fail("unexpected line '" + line + "'");
    }
  }
  if (!sawEnd)
    fail("no 'end' line (truncated?)");
  if (!sawPP)
    fail("no 'pp' line");
  if (int(s.stageRank.size()) != int(a.stages.size()))
    fail(std::to_string(s.stageRank.size()) + " stage ranks for " +
         std::to_string(a.stages.size()) + " stages");
  if (a.worldSize % s.ranks != 0)
    fail("world size " + std::to_string(a.worldSize) + " is not a multiple of pp " +
         std::to_string(s.ranks));
  if (training && (a.stages.empty() || programsRead != 5))
    fail("a training pipeline without each stage's backward, norm and update programs");
  for (size_t k = 0; k < a.training.size(); ++k) {
    const PipelineStageTraining &t = a.training[k];
    std::vector<const Artifact *> programs{&t.backward, &t.norm, &t.update};
    if (t.splitsBackward)
      programs.insert(programs.end(), {&t.backwardInput, &t.backwardWeight});
    for (const Artifact *p : programs)
      if (p->worldSize != a.stageWorldSize() || p->target != a.target)
        fail("stage " + std::to_string(k) + "'s training programs are compiled for another "
             "target or rank count than its forward");
  }
  for (size_t k = 0; k < a.stages.size(); ++k) {
    if (a.stages[k].worldSize != a.stageWorldSize())
      fail("stage " + std::to_string(k) + " is compiled for " +
           std::to_string(a.stages[k].worldSize) + " ranks; each stage has " +
           std::to_string(a.stageWorldSize()));
    if (a.stages[k].target != a.target)
      fail("stage " + std::to_string(k) + " targets " + a.stages[k].target);
  }
  // The schedule, read as a schedule file is, then simulated.
  std::string file;
  for (const std::string &t : actionText)
    file += t + "\n";
  std::string error;
  auto parsed = parsePipelineSchedule(file, path + " (actions)", s.ranks, s.microbatches,
                                      !training, error);
  if (!parsed)
    throw RuntimeError(error);
  if (parsed->stageRank != s.stageRank)
    throw RuntimeError(path + ": the actions put the stages on other ranks than 'stage-ranks'");
  s.actions = std::move(parsed->actions);
  s.forwardOnly = !training;
  PipelineSimulation sim =
      simulatePipeline(s.hasCommunication() ? s : withCommunication(s));
  if (!sim.ok())
    throw RuntimeError(path + ": the schedule: " + sim.error);
  return a;
}

} // namespace

StageMemory stageMemory(const PipelineArtifact &a, int stage) {
  StageMemory m;
  std::vector<const Artifact *> programs{&a.stages.at(size_t(stage))};
  if (a.trains()) {
    const PipelineStageTraining &t = a.training.at(size_t(stage));
    programs.insert(programs.end(), {&t.backward, &t.norm, &t.update});
    if (t.splitsBackward)
      programs.insert(programs.end(), {&t.backwardInput, &t.backwardWeight});
    for (const BufferDesc &b : t.backward.buffers)
      if (b.kind == BufferDesc::Kind::Input && b.name.rfind("grad:", 0) != 0)
        m.activations += b.bytes();
    // Micro-batches from the stage's forward to its backward (or its W).
    int live = 0;
    for (const PipelineAction &act : a.schedule.actions.at(
             size_t(a.schedule.stageRank.at(size_t(stage)))))
      if (act.stage == stage) {
        if (act.op == PipelineOp::Forward)
          m.inFlight = std::max(m.inFlight, ++live);
        else if (act.op == PipelineOp::Backward || act.op == PipelineOp::BackwardWeight)
          --live;
      }
  }
  std::set<std::string> seen;
  auto endsWith = [](const std::string &s, const std::string &tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  // The update program's state first: its kinds are known there.
  for (auto it = programs.rbegin(); it != programs.rend(); ++it) {
    m.arenas = std::max(m.arenas, size_t((*it)->arenaBytes));
    for (const BufferDesc &b : (*it)->buffers) {
      if (b.kind != BufferDesc::Kind::Weight || !seen.insert(b.name).second)
        continue;
      if (b.writable && b.storage == "zeros")
        (endsWith(b.name, ".grad_acc") ? m.accumulators : m.optimizerState) += b.bytes();
      else if (b.writable)
        m.trained += b.bytes();
      else
        m.weights += b.bytes();
    }
  }
  return m;
}

bool isPipelineArtifact(const std::string &path) {
  std::ifstream in(path);
  std::string first;
  return in && (in >> first) && first == "shardflow-pipeline";
}

void writePipelineArtifact(const PipelineArtifact &a, std::ostream &os) {
  const PipelineSchedule &s = a.schedule;
  os << "shardflow-pipeline " << PipelineArtifact::kVersion << "\n";
  os << "target " << a.target << "\n";
  os << "world-size " << a.worldSize << "\n";
  os << "pp " << s.ranks << "\n";
  os << "microbatches " << s.microbatches << "\n";
  os << "schedule " << encodeArtifactText(a.scheduleName.empty() ? "custom" : a.scheduleName)
     << "\n";
  os << "stage-ranks ";
  for (size_t i = 0; i < s.stageRank.size(); ++i)
    os << (i ? "," : "") << s.stageRank[i];
  os << "\n";
  for (size_t r = 0; r < s.actions.size(); ++r) {
    os << "actions " << r << " ";
    for (size_t i = 0; i < s.actions[r].size(); ++i)
      os << (i ? "," : "") << s.actions[r][i].str();
    os << "\n";
  }
  for (const auto &[kind, list] : {std::make_pair("input", &a.inputs),
                                   std::make_pair("output", &a.outputs)})
    for (const PipelineTensor &t : *list)
      os << kind << " " << encodeArtifactText(t.name) << " " << dtypeName(t.dtype) << " "
         << shapeText(t.shape) << "\n";
  if (a.trains())
    os << "training\n";
  auto section = [&](size_t k, const char *kind, const Artifact &program) {
    std::ostringstream text;
    writeArtifact(program, text);
    std::string body = text.str();
    size_t lines = 0;
    for (char c : body)
      lines += c == '\n';
    os << "stage " << k << kind << " lines " << lines << "\n" << body;
  };
  for (size_t k = 0; k < a.stages.size(); ++k) {
    section(k, "", a.stages[k]);
    if (k < a.training.size()) {
      section(k, " backward", a.training[k].backward);
      if (a.training[k].splitsBackward) {
        section(k, " backward-input", a.training[k].backwardInput);
        section(k, " backward-weight", a.training[k].backwardWeight);
      }
      section(k, " norm", a.training[k].norm);
      section(k, " update", a.training[k].update);
    }
  }
  os << "end\n";
}

PipelineArtifact parsePipelineArtifact(const std::string &text, const std::string &path) {
  return Reader(text, path).read();
}

PipelineArtifact readPipelineArtifact(const std::string &path) {
  PipelineArtifact a = parsePipelineArtifact(readWholeFile(path), path);
  auto slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  for (Artifact &stage : a.stages)
    stage.artifactDir = dir;
  for (PipelineStageTraining &t : a.training)
    for (Artifact *p : {&t.backward, &t.norm, &t.update, &t.backwardInput, &t.backwardWeight})
      p->artifactDir = dir;
  return a;
}

} // namespace shardflow::runtime
