//===- Profile.cpp - where a program's time goes, per operation -----------===//

#include "shardflow/Runtime/Core/Profile.h"

#include "shardflow/Runtime/Format/Kernel.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <numeric>

using namespace shardflow::runtime;

void ProfileTotals::add(const std::vector<double> &instructionSeconds, double program) {
  if (seconds.size() < instructionSeconds.size())
    seconds.resize(instructionSeconds.size(), 0.0);
  for (size_t i = 0; i < instructionSeconds.size(); ++i)
    seconds[i] += instructionSeconds[i];
  programSeconds += program;
  ++runs;
}

std::string shardflow::runtime::profileKind(const Instruction &inst) {
  if (inst.collective)
    return inst.kernel;
  if (inst.kernel == "launch") {
    std::string fn = inst.params.getString("function", "");
    // Generated kernels are named k<N>_<ops>.
    size_t us = fn.find('_');
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (us != std::string::npos && us > 1 && fn[0] == 'k' &&
        std::all_of(fn.begin() + 1, fn.begin() + long(us), digit))
      fn = fn.substr(us + 1);
    return "generated " + fn;
  }
  std::string kind = inst.kernel;
  if (inst.kernel != "matmul" && inst.kernel != "gemm")
    return kind;
  // A GEMM's cuBLASLt epilogue and residual (matmul's parameters only).
  std::string epilogue = inst.params.getString("epilogue", "");
  if (!epilogue.empty())
    kind += " " + epilogue;
  if (inst.kernel == "matmul" && inst.params.has("residual"))
    kind += " +C";
  return kind;
}

namespace {

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  int size = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string text(size_t(std::max(size, 0)), '\0');
  std::vsnprintf(text.data(), text.size() + 1, fmt, again);
  va_end(again);
  return text;
}

} // namespace

std::string shardflow::runtime::formatProfile(const Artifact &art, const ProfileTotals &totals,
                                              const std::string &clock, size_t top) {
  if (totals.runs == 0)
    return "profile: no run was measured\n";
  double runs = totals.runs;
  double summed = std::accumulate(totals.seconds.begin(), totals.seconds.end(), 0.0);
  std::string out = format("profile: mean of %d run%s (%s)\n", totals.runs,
                           totals.runs == 1 ? "" : "s", clock.c_str());
  out += format("  program              %10.3f ms\n", totals.programSeconds / runs * 1e3);
  out += format("  operations, summed   %10.3f ms\n", summed / runs * 1e3);
  // Collectives that move data between ranks run on the communication
  // stream (CUDA); everything else, local_slice included, computes. The
  // compute share of the program shows how long compute waited (for
  // communication, or for the host to launch work).
  double communication = 0;
  for (size_t i = 0; i < std::min(totals.seconds.size(), art.program.size()); ++i)
    if (art.program[i].collective &&
        art.program[i].collectiveKind != CollectiveKind::LocalSlice)
      communication += totals.seconds[i];
  double compute = summed - communication;
  out += format("    compute            %10.3f ms", compute / runs * 1e3);
  if (totals.programSeconds > 0)
    out += format("  (%.1f%% of the program)", 100.0 * compute / totals.programSeconds);
  out += "\n";
  out += format("    communication      %10.3f ms\n", communication / runs * 1e3);

  struct Kind {
    int count = 0;
    double seconds = 0;
  };
  std::map<std::string, Kind> kinds;
  size_t n = std::min(totals.seconds.size(), art.program.size());
  for (size_t i = 0; i < n; ++i) {
    Kind &k = kinds[profileKind(art.program[i])];
    ++k.count;
    k.seconds += totals.seconds[i];
  }
  std::vector<std::pair<std::string, Kind>> byTime(kinds.begin(), kinds.end());
  std::stable_sort(byTime.begin(), byTime.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  size_t width = 4;
  for (const auto &[name, k] : byTime)
    width = std::max(width, name.size());
  out += format("  %-*s %6s %12s %7s\n", int(width), "kind", "count", "ms per run", "share");
  for (const auto &[name, k] : byTime)
    out += format("  %-*s %6d %12.3f %6.1f%%\n", int(width), name.c_str(), k.count,
                  k.seconds / runs * 1e3, summed > 0 ? 100.0 * k.seconds / summed : 0.0);

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return totals.seconds[a] > totals.seconds[b]; });
  order.resize(std::min(order.size(), top));
  if (!order.empty())
    out += format("  the %zu slowest operations:\n", order.size());
  for (size_t i : order) {
    const Instruction &inst = art.program[i];
    // A generated kernel fuses several nodes: its function names it (as in
    // shard-opt --dump-ptx).
    std::string node = inst.params.getString("node", ""), where;
    if (!node.empty())
      where = "  (ONNX node '" + node + "')";
    else if (inst.kernel == "launch")
      where = "  (function " + inst.params.getString("function", "?") + ")";
    out += format("  #%-5zu %10.3f ms  %s%s\n", i, totals.seconds[i] / runs * 1e3,
                  profileKind(inst).c_str(), where.c_str());
  }
  return out;
}
