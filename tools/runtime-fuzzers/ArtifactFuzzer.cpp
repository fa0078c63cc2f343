//===- ArtifactFuzzer.cpp - libFuzzer target for the artifact reader ------===//
//
// Feeds arbitrary text to parseArtifact, the reader shard-run starts with.
// An artifact it accepts must keep the promises the executors rely on
// without checking again: every buffer's byte size fits in memory
// arithmetic, arena buffers lie inside the arena, constants carry their
// bytes, views keep their source's size, every instruction and output names
// a buffer, each rank's weight runs lie inside the tensor in its file and
// add up to the slice, and inputs bind by name and shape. It must also
// write back as text that reads again to the same artifact (the compiler
// writes what shard-run reads). A pipeline artifact (`shardflow-pipeline`)
// goes to parsePipelineArtifact, and each of its stages (and a training
// pipeline's other programs) is checked as an artifact is.
//
// Built by tools/runtime-fuzz-smoke.sh (clang, runtime-only configuration,
// -DSHARDFLOW_ENABLE_FUZZER=ON).
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/Layout.h"
#include "shardflow/Runtime/Format/PipelineArtifact.h"

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>

using namespace shardflow::runtime;

namespace {

/// A weight's runs are walked only up to this many elements, which bounds
/// the time one input takes (the walk is linear in the slice's rows).
constexpr int64_t kMaxWalkedElements = int64_t(1) << 16;

void checkWeightRuns(const BufferDesc &b) {
  if (b.numel() > kMaxWalkedElements)
    return;
  size_t elem = dtypeSize(b.fileDType());
  size_t globalBytes = elem;
  for (int64_t d : b.starts.empty() ? b.storedShape() : b.globalShape)
    globalBytes *= size_t(d);
  size_t ranks = b.starts.empty() ? 1 : b.starts.size();
  for (size_t r = 0; r < ranks; ++r) {
    size_t total = 0;
    forEachWeightRun(b, int(r), [&](size_t offset, size_t length) {
      FUZZ_CHECK(offset == kZeroRun ? b.zeroPadded
                                    : offset <= globalBytes && length <= globalBytes - offset,
                 "a weight's run lies inside its tensor (or is zero padding)");
      total += length;
    });
    FUZZ_CHECK(total == b.fileBytes(), "a weight's runs add up to its slice");
  }
}

void checkAccepted(const Artifact &a) {
  FUZZ_CHECK(a.worldSize >= 1, "the world has a rank");
  FUZZ_CHECK(a.arenaBytes >= 0, "the arena's size is not negative");
  std::map<std::string, HostTensor> inputs;
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const BufferDesc &b = a.buffers[i];
    int64_t n = b.numel();
    FUZZ_CHECK(n >= 0 && n <= (int64_t(1) << 40), "a buffer has at most 2^40 elements");
    switch (b.kind) {
    case BufferDesc::Kind::Arena:
      FUZZ_CHECK(b.offset >= 0 && b.offset <= a.arenaBytes &&
                     int64_t(b.bytes()) <= a.arenaBytes - b.offset,
                 "an arena buffer lies inside the arena");
      break;
    case BufferDesc::Kind::Constant:
      FUZZ_CHECK(b.data.size() == b.bytes(), "a constant holds its bytes");
      break;
    case BufferDesc::Kind::View:
      FUZZ_CHECK(b.source >= 0 && size_t(b.source) < i &&
                     a.buffers[size_t(b.source)].bytes() == b.bytes(),
                 "a view has an earlier source of its byte size");
      break;
    case BufferDesc::Kind::Weight:
      FUZZ_CHECK(b.fileOffset >= 0, "a weight's file offset is not negative");
      FUZZ_CHECK(b.starts.empty() || b.starts.size() == size_t(a.worldSize),
                 "a sliced weight has a start per rank");
      FUZZ_CHECK(b.crc32c.empty() || b.crc32c.size() == (b.starts.empty() ? 1 : b.starts.size()),
                 "a weight has a checksum per slice");
      checkWeightRuns(b);
      break;
    case BufferDesc::Kind::Input: {
      HostTensor t; // a shape is all bindInputs compares; no bytes needed
      t.dtype = b.dtype;
      t.shape = b.shape;
      inputs[b.name] = std::move(t);
      break;
    }
    }
  }
  for (const Instruction &inst : a.program) {
    for (int i : inst.inputs)
      FUZZ_CHECK(i >= 0 && size_t(i) < a.buffers.size(), "an instruction reads a buffer");
    for (int o : inst.outputs)
      FUZZ_CHECK(o >= 0 && size_t(o) < a.buffers.size(), "an instruction writes a buffer");
    if (inst.collective) {
      try {
        (void)collectiveGroupKey(inst);
      } catch (const RuntimeError &) {
        // A parameter of the wrong type: the executor reports it so too.
      }
    }
  }
  for (size_t o = 0; o < a.outputs.size(); ++o) {
    int b = a.outputs[o].second;
    FUZZ_CHECK(b >= 0 && size_t(b) < a.buffers.size(), "an output names a buffer");
    (void)outputShape(a, o);
  }
  // Two inputs of one name bind to the same tensor; only the first's
  // shape is given, so a second of another shape is refused.
  try {
    (void)bindInputs(a, inputs);
  } catch (const RuntimeError &) {
  }
}

std::string text(const Artifact &a) {
  std::ostringstream os;
  writeArtifact(a, os);
  return os.str();
}

/// A pipeline artifact (shard-opt --mesh pp=N): its stages keep the
/// promises above, it matches its schedule, and it reads again once written.
int fuzzPipeline(const std::string &input) {
  PipelineArtifact p;
  try {
    p = parsePipelineArtifact(input, "fuzz.shard");
  } catch (const RuntimeError &) {
    return 0;
  }
  FUZZ_CHECK(p.schedule.ranks >= 1 && p.worldSize % p.schedule.ranks == 0,
             "a pipeline's world is pp times each stage's ranks");
  FUZZ_CHECK(p.stages.size() == p.schedule.stageRank.size(), "every stage has a rank");
  for (const Artifact &stage : p.stages) {
    FUZZ_CHECK(stage.worldSize == p.stageWorldSize(), "a stage runs on its pp coordinate's ranks");
    checkAccepted(stage);
  }
  FUZZ_CHECK(!p.trains() || p.training.size() == p.stages.size(),
             "a training pipeline has every stage's training programs");
  for (const PipelineStageTraining &t : p.training) {
    std::vector<const Artifact *> programs{&t.backward, &t.norm, &t.update};
    if (t.splitsBackward)
      programs.insert(programs.end(), {&t.backwardInput, &t.backwardWeight});
    for (const Artifact *program : programs) {
      FUZZ_CHECK(program->worldSize == p.stageWorldSize(),
                 "a stage's training program runs on its ranks");
      checkAccepted(*program);
    }
  }
  for (int k = 0; k < p.schedule.stages(); ++k)
    FUZZ_CHECK(stageMemory(p, k).inFlight <= p.schedule.microbatches,
               "a stage keeps at most the step's micro-batches");
  std::ostringstream os;
  writePipelineArtifact(p, os);
  PipelineArtifact again;
  try {
    again = parsePipelineArtifact(os.str(), "written.shard");
  } catch (const RuntimeError &e) {
    std::fprintf(stderr, "%s\n--- written:\n%s", e.what(), os.str().c_str());
    FUZZ_CHECK(false, "an accepted pipeline artifact reads again once written");
  }
  std::ostringstream twice;
  writePipelineArtifact(again, twice);
  FUZZ_CHECK(twice.str() == os.str(), "a pipeline artifact written and read writes the same text");
  return 0;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string input(reinterpret_cast<const char *>(data), size);
  if (input.rfind("shardflow-pipeline", 0) == 0)
    return fuzzPipeline(input);
  Artifact a;
  try {
    a = parseArtifact(input, "fuzz.shard");
  } catch (const RuntimeError &) {
    return 0; // refused with a message: the expected outcome
  }
  checkAccepted(a);
  // What is written reads back, and writes the same text again.
  std::string written = text(a);
  Artifact again;
  try {
    again = parseArtifact(written, "written.shard");
  } catch (const RuntimeError &e) {
    std::fprintf(stderr, "%s\n--- written:\n%s", e.what(), written.c_str());
    FUZZ_CHECK(false, "an accepted artifact reads again once written");
  }
  FUZZ_CHECK(text(again) == written, "an artifact written and read writes the same text");
  return 0;
}
