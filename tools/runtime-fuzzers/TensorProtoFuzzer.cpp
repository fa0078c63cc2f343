//===- TensorProtoFuzzer.cpp - libFuzzer target for the TensorProto reader -===//
//
// Feeds arbitrary bytes to parseTensorProto (shard-run --input
// NAME=FILE.pb), the runtime's own walk of the protobuf wire format. A
// tensor it accepts holds exactly the bytes its type and shape need, and
// writes back as a TensorProto that reads again to the same tensor and name.
//
// Built by tools/runtime-fuzz-smoke.sh.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "shardflow/Runtime/Format/TensorProtoIO.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace shardflow::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  HostTensor t;
  std::string name;
  try {
    t = parseTensorProto(std::string(reinterpret_cast<const char *>(data), size), "fuzz.pb",
                         &name);
  } catch (const RuntimeError &) {
    return 0;
  }
  FUZZ_CHECK(t.bytes.size() == t.view().bytes(), "a tensor holds the bytes its shape needs");
  std::string againName;
  HostTensor again =
      parseTensorProto(serializeTensorProto(name, t.view()), "written.pb", &againName);
  FUZZ_CHECK(again.dtype == t.dtype && again.shape == t.shape && again.bytes == t.bytes &&
                 againName == name,
             "a tensor written as a TensorProto reads back the same");
  return 0;
}
