//===- NpzFuzzer.cpp - libFuzzer target for the .npz reader ---------------===//
//
// Feeds arbitrary bytes to parseNpz (shard-run --inputs FILE.npz): a zip of
// .npy members, stored or zip64. Every member it accepts holds exactly the
// bytes its type and shape need.
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
  try {
    auto members = parseNpz(std::string(reinterpret_cast<const char *>(data), size), "fuzz.npz");
    FUZZ_CHECK(!members.empty(), "an accepted .npz has a member");
    for (auto &[name, t] : members)
      FUZZ_CHECK(t.bytes.size() == t.view().bytes(),
                 "a member holds the bytes its shape needs");
  } catch (const RuntimeError &) {
  }
  return 0;
}
