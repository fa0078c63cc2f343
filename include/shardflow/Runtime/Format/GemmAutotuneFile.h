//===- GemmAutotuneFile.h - recorded cuBLASLt choices ----------*- C++ -*-===//
//
// shard-run --gemm-autotune-file: the cuBLASLt algorithm choices of earlier
// loads, for one GPU model and cuBLASLt version, so that later loads make
// the same choices without timing them. A text file:
//
//   shardflow-gemm-autotune 1
//   gpu NAME
//   cublaslt VERSION
//   gemm KEY CHOSEN CANDIDATES      (one line per problem)
//
// Plain C++ with no CUDA dependency: the CUDA executor uses it, and so do
// the unit tests and the file's fuzz target.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_GEMMAUTOTUNEFILE_H
#define SHARDFLOW_RUNTIME_GEMMAUTOTUNEFILE_H

#include <cstddef>
#include <map>
#include <string>
#include <utility>

namespace shardflow::runtime {

struct AutotuneRecords {
  std::string gpu, cublasLtVersion;
  /// Problem key -> (index chosen, how many candidates there were).
  std::map<std::string, std::pair<size_t, size_t>> choices;
};

/// The first line of every such file.
inline constexpr const char *kAutotuneMagic = "shardflow-gemm-autotune 1";

/// The file's records; none when it does not exist. Throws RuntimeError on
/// a file that is not one of ours or is damaged, naming it and the line.
AutotuneRecords readAutotuneFile(const std::string &path);

/// The records in `text`, the contents of the file `path` (for messages).
AutotuneRecords parseAutotuneRecords(const std::string &text, const std::string &path);

/// The text of a file holding `r`.
std::string formatAutotuneRecords(const AutotuneRecords &r);

/// Writes `r` to `path` through a temporary file renamed over it, so that
/// a rank reading it meanwhile sees the old file or the new one. Throws
/// RuntimeError when it cannot.
void writeAutotuneFile(const std::string &path, const AutotuneRecords &r);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_GEMMAUTOTUNEFILE_H
