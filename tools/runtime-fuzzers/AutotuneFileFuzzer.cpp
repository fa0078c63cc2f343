//===- AutotuneFileFuzzer.cpp - libFuzzer target for --gemm-autotune-file -===//
//
// Feeds arbitrary text to parseAutotuneRecords, the reader of shard-run's
// --gemm-autotune-file. Every choice it accepts picks one of its
// candidates, and the records written back read again to the same records.
//
// Built by tools/runtime-fuzz-smoke.sh.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "shardflow/Runtime/Format/GemmAutotuneFile.h"
#include "shardflow/Runtime/Format/Kernel.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace shardflow::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  AutotuneRecords r;
  try {
    r = parseAutotuneRecords(std::string(reinterpret_cast<const char *>(data), size),
                             "fuzz.autotune");
  } catch (const RuntimeError &) {
    return 0;
  }
  for (const auto &[key, choice] : r.choices)
    FUZZ_CHECK(!key.empty() && choice.first < choice.second,
               "a choice picks one of its candidates");
  AutotuneRecords again = parseAutotuneRecords(formatAutotuneRecords(r), "written.autotune");
  FUZZ_CHECK(again.gpu == r.gpu && again.cublasLtVersion == r.cublasLtVersion &&
                 again.choices == r.choices,
             "records written and read again are the same");
  return 0;
}
