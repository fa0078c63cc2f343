//===- GemmAutotuneFile.cpp - recorded cuBLASLt choices -------------------===//
//
// Reads and writes shard-run's --gemm-autotune-file (GemmAutotuneFile.h).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/GemmAutotuneFile.h"
#include "shardflow/Runtime/Format/Kernel.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace shardflow::runtime {

AutotuneRecords parseAutotuneRecords(const std::string &text, const std::string &path) {
  AutotuneRecords r;
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
      line.pop_back();
    lines.push_back(line);
  }
  auto bad = [&](size_t n, const std::string &why) {
    return RuntimeError("--gemm-autotune-file " + path + ", line " + std::to_string(n + 1) +
                        ": " + why + " (delete the file to time the GEMMs again)");
  };
  if (lines.empty() || lines[0] != kAutotuneMagic)
    throw bad(0, std::string("not a file of GEMM choices (it starts with '") + kAutotuneMagic +
                     "')");
  for (size_t n = 1; n < lines.size(); ++n) {
    const std::string &l = lines[n];
    if (l.rfind("gpu ", 0) == 0) {
      r.gpu = l.substr(4);
    } else if (l.rfind("cublaslt ", 0) == 0) {
      r.cublasLtVersion = l.substr(9);
    } else if (l.rfind("gemm ", 0) == 0) {
      std::istringstream fields(l.substr(5));
      std::string key, extra;
      unsigned long long chosen = 0, count = 0;
      if (!(fields >> key >> chosen >> count) || (fields >> extra) || chosen >= count)
        throw bad(n, "expected 'gemm KEY CHOSEN CANDIDATES' with CHOSEN < CANDIDATES");
      r.choices[key] = {size_t(chosen), size_t(count)};
    } else if (!l.empty()) {
      throw bad(n, "unknown line '" + l + "'");
    }
  }
  return r;
}

AutotuneRecords readAutotuneFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return {};
  std::ostringstream text;
  text << f.rdbuf();
  return parseAutotuneRecords(text.str(), path);
}

std::string formatAutotuneRecords(const AutotuneRecords &r) {
  std::string text = std::string(kAutotuneMagic) + "\ngpu " + r.gpu + "\ncublaslt " +
                     r.cublasLtVersion + "\n";
  for (const auto &[key, c] : r.choices)
    text += "gemm " + key + " " + std::to_string(c.first) + " " + std::to_string(c.second) + "\n";
  return text;
}

void writeAutotuneFile(const std::string &path, const AutotuneRecords &r) {
  std::string tmp = path + ".tmp" + std::to_string(long(getpid()));
  std::FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f)
    throw RuntimeError("--gemm-autotune-file: cannot write " + tmp + ": " +
                       std::strerror(errno));
  std::string text = formatAutotuneRecords(r);
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fflush(f) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw RuntimeError("--gemm-autotune-file: cannot write " + path + ": " +
                       std::strerror(errno));
  }
}

} // namespace shardflow::runtime
