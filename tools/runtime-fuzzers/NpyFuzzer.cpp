//===- NpyFuzzer.cpp - libFuzzer target for the .npy reader ---------------===//
//
// Feeds arbitrary bytes to parseNpy (shard-run --input NAME=FILE.npy). A
// tensor it accepts holds exactly the bytes its type and shape need, and
// writes back as an .npy that reads again to the same tensor.
//
// Built by tools/runtime-fuzz-smoke.sh.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "shardflow/Runtime/Format/NpyIO.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace shardflow::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  HostTensor t;
  try {
    t = parseNpy(std::string(reinterpret_cast<const char *>(data), size), "fuzz.npy");
  } catch (const RuntimeError &) {
    return 0;
  }
  FUZZ_CHECK(t.bytes.size() == t.view().bytes(), "a tensor holds the bytes its shape needs");
  HostTensor again = parseNpy(serializeNpy(t.view()), "written.npy");
  FUZZ_CHECK(again.dtype == t.dtype && again.shape == t.shape && again.bytes == t.bytes,
             "a tensor written as .npy reads back the same");
  return 0;
}
