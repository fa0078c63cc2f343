//===- DataFuzzer.cpp - libFuzzer target for shard-run --data -------------===//
//
// Feeds arbitrary bytes to the --data reader of a training step: an .npz
// (parseNpz) checked against a fixed step's inputs (TrainingData: one
// array [S, ...shape] per input, the same S for all, labels in their
// range). Every set of arrays it accepts yields, for any step, one tensor
// per input with the input's shape and bytes.
//
// Built by tools/runtime-fuzz-smoke.sh.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "shardflow/Runtime/Format/TrainingData.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace shardflow::runtime;

namespace {
const char *kStep = "shardflow-artifact 4\n"
                    "target cpu\n"
                    "world-size 1\n"
                    "model-dir .\n"
                    "arena 64\n"
                    "buffer 0 input i64 2x4 name=input_ids\n"
                    "buffer 1 input i64 2x4 name=labels range=0,16 ignore=-100\n"
                    "buffer 2 input f32 2 name=x\n"
                    "buffer 3 arena f32 2 offset=0\n"
                    "kernel identity in=2 out=3\n"
                    "output loss 3\n"
                    "end\n";
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const Artifact step = parseArtifact(kStep, "step.shard");
  try {
    auto members = parseNpz(std::string(reinterpret_cast<const char *>(data), size), "fuzz.npz");
    TrainingData batches(std::move(members), step, "fuzz.npz");
    FUZZ_CHECK(batches.entries() >= 1, "accepted data holds a batch");
    for (int64_t t : {int64_t(1), batches.entries() + 1}) {
      auto inputs = batches.step(t);
      FUZZ_CHECK(inputs.size() == 3, "a step has every input");
      for (const BufferDesc &b : step.buffers)
        if (b.kind == BufferDesc::Kind::Input) {
          const HostTensor &in = inputs.at(b.name);
          FUZZ_CHECK(in.shape == b.shape && in.dtype == b.dtype && in.bytes.size() == b.bytes(),
                     "a step's input has the input's shape, type and bytes");
        }
    }
  } catch (const RuntimeError &) {
  }
  return 0;
}
