//===- CudaPlanning.cpp - host-side decisions of the CUDA device ---------===//

#include "CudaPlanning.h"
#include "shardflow/Runtime/Format/Layout.h"

#include <algorithm>
#include <cstdlib>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {

int64_t product(const std::vector<int64_t> &v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i)
    p *= v[i];
  return p;
}
} // namespace

//===----------------------------------------------------------------------===//
// Devices and modules
//===----------------------------------------------------------------------===//

int cuda::launcherLocalRank() {
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCAL_RANK"})
    if (const char *v = std::getenv(var))
      if (*v)
        return std::max(0, std::atoi(v));
  return 0;
}

int cuda::chooseDevice(int requested, int localRank, int deviceCount) {
  if (deviceCount <= 0)
    throw RuntimeError("the CUDA driver reports no GPU on this machine");
  if (requested >= 0) {
    if (requested >= deviceCount)
      throw RuntimeError("--device " + std::to_string(requested) + " does not exist: this "
                         "machine has " + std::to_string(deviceCount) + " GPU(s)");
    return requested;
  }
  return std::max(0, localRank) % deviceCount;
}

namespace {
/// "sm_90a" -> (90, "a"); false when `arch` does not start with `prefix`.
bool parseArch(const std::string &arch, const std::string &prefix, int &number,
               std::string &suffix) {
  if (arch.compare(0, prefix.size(), prefix) != 0)
    return false;
  size_t i = prefix.size(), j = i;
  while (j < arch.size() && arch[j] >= '0' && arch[j] <= '9')
    ++j;
  if (j == i)
    return false;
  number = std::atoi(arch.substr(i, j - i).c_str());
  suffix = arch.substr(j);
  return true;
}
} // namespace

const DeviceModule &cuda::selectModule(const std::vector<DeviceModule> &modules,
                                       const std::string &name, int major, int minor) {
  int device = major * 10 + minor;
  const DeviceModule *cubin = nullptr, *ptx = nullptr;
  int ptxArch = -1;
  std::string available;
  for (const DeviceModule &m : modules) {
    if (m.name != name)
      continue;
    available += (available.empty() ? "" : ", ") + m.arch;
    int number;
    std::string suffix;
    if (m.format == "cubin" && parseArch(m.arch, "sm_", number, suffix) &&
        number == device && (suffix.empty() || suffix == "a"))
      cubin = cubin && cubin->arch.size() <= m.arch.size() ? cubin : &m;
    // PTX for compute_XY runs on XY and newer (an "a" variant on XY only).
    if (m.format == "ptx" && parseArch(m.arch, "compute_", number, suffix) &&
        (number == device || (number < device && suffix.empty())) && number > ptxArch) {
      ptx = &m;
      ptxArch = number;
    }
  }
  if (cubin)
    return *cubin;
  if (ptx)
    return *ptx;
  std::string arch = "sm_" + std::to_string(device);
  if (available.empty())
    throw RuntimeError("module '" + name + "' is not in the artifact");
  throw RuntimeError("module '" + name + "' has no code for this GPU (" + arch +
                     "): the artifact has " + available +
                     "; recompile with --target cuda for " + arch);
}

//===----------------------------------------------------------------------===//
// GEMM shapes
//===----------------------------------------------------------------------===//

MatmulPlan cuda::planMatmul(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                            const std::vector<int64_t> &out) {
  auto fail = [&](const std::string &why) -> RuntimeError {
    return RuntimeError("matmul of " + shapeList(a) + " and " + shapeList(b) + " into " +
                        shapeList(out) + ": " + why);
  };
  if (a.empty() || b.empty())
    throw fail("operands must have rank 1 or more");
  size_t ra = a.size(), rb = b.size();
  int64_t m = ra == 1 ? 1 : a[ra - 2], k = a[ra - 1];
  int64_t kb = rb == 1 ? b[0] : b[rb - 2], n = rb == 1 ? 1 : b[rb - 1];
  if (k != kb)
    throw fail("the contracted dimensions differ (" + std::to_string(k) + " and " +
               std::to_string(kb) + ")");
  std::vector<int64_t> batchA(a.begin(), a.end() - std::min<size_t>(ra, 2));
  std::vector<int64_t> batchB(b.begin(), b.end() - std::min<size_t>(rb, 2));
  size_t rank = std::max(batchA.size(), batchB.size());
  // Left-padded with ones to a common rank, as numpy broadcasts.
  std::vector<int64_t> padA(rank, 1), padB(rank, 1), batch(rank, 1);
  std::copy(batchA.begin(), batchA.end(), padA.begin() + long(rank - batchA.size()));
  std::copy(batchB.begin(), batchB.end(), padB.begin() + long(rank - batchB.size()));
  for (size_t d = 0; d < rank; ++d) {
    if (padA[d] != padB[d] && padA[d] != 1 && padB[d] != 1)
      throw fail("batch dimensions do not broadcast");
    batch[d] = padA[d] == 1 ? padB[d] : padA[d];
  }
  std::vector<int64_t> expected = batch;
  if (ra > 1)
    expected.push_back(m);
  if (rb > 1)
    expected.push_back(n);
  // As the CPU kernel: the result's element count decides (a compiler may
  // hand over a reshaped view of it).
  if (product(expected, 0, expected.size()) != product(out, 0, out.size()))
    throw fail("the result should have shape " + shapeList(expected));

  MatmulPlan plan;
  plan.m = m;
  plan.n = n;
  plan.k = k;
  int64_t countA = product(padA, 0, rank), countB = product(padB, 0, rank);
  int64_t count = product(batch, 0, rank);
  if (countB == 1) {
    // Row-major A[..., m, k] is one [count*m, k] matrix.
    plan.kind = MatmulPlan::Kind::Folded;
    plan.m = countA * m;
    return plan;
  }
  plan.batch = count;
  plan.strideC = m * n;
  if (countA == 1 || padA == padB) {
    plan.kind = MatmulPlan::Kind::StridedBatched;
    plan.strideA = countA == 1 ? 0 : m * k;
    plan.strideB = k * n;
    return plan;
  }
  plan.kind = MatmulPlan::Kind::Broadcast;
  // Strides (in matrices) of each operand's batch dimensions; 0 where
  // the operand repeats.
  std::vector<int64_t> strideA(rank, 0), strideB(rank, 0);
  for (int64_t d = int64_t(rank) - 1, sa = 1, sb = 1; d >= 0; --d) {
    strideA[size_t(d)] = padA[size_t(d)] == 1 ? 0 : sa;
    strideB[size_t(d)] = padB[size_t(d)] == 1 ? 0 : sb;
    sa *= padA[size_t(d)];
    sb *= padB[size_t(d)];
  }
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < rank; ++d) {
      oa += idx[d] * strideA[d];
      ob += idx[d] * strideB[d];
    }
    plan.offsets.emplace_back(oa * m * k, ob * k * n);
    for (size_t d = rank; d > 0 && ++idx[d - 1] == batch[d - 1];)
      idx[--d] = 0;
  }
  return plan;
}

MatmulPlan cuda::expandToLoop(const MatmulPlan &plan) {
  if (plan.kind != MatmulPlan::Kind::StridedBatched)
    return plan;
  MatmulPlan loop = plan;
  loop.kind = MatmulPlan::Kind::Broadcast;
  for (int64_t i = 0; i < plan.batch; ++i)
    loop.offsets.emplace_back(i * plan.strideA, i * plan.strideB);
  return loop;
}

GemmPlan cuda::planGemm(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                        const std::vector<int64_t> *c, bool transA, bool transB,
                        const std::vector<int64_t> &out) {
  auto fail = [&](const std::string &why) -> RuntimeError {
    return RuntimeError("gemm of " + shapeList(a) + (transA ? "^T" : "") + " and " +
                        shapeList(b) + (transB ? "^T" : "") + ": " + why);
  };
  if (a.size() != 2 || b.size() != 2)
    throw fail("A and B must be matrices");
  GemmPlan plan;
  plan.transA = transA;
  plan.transB = transB;
  plan.m = transA ? a[1] : a[0];
  plan.k = transA ? a[0] : a[1];
  int64_t kb = transB ? b[1] : b[0];
  plan.n = transB ? b[0] : b[1];
  if (plan.k != kb)
    throw fail("the contracted dimensions differ");
  if (out.size() != 2 || out[0] * out[1] != plan.m * plan.n)
    throw fail("the result should have shape " + shapeList({plan.m, plan.n}) + ", not " +
               shapeList(out));
  if (!c)
    return plan;
  // C broadcasts to [m, n] from the right (unidirectionally).
  std::vector<int64_t> padded(2, 1);
  if (c->size() > 2)
    throw fail("C has rank " + std::to_string(c->size()));
  std::copy(c->begin(), c->end(), padded.begin() + long(2 - c->size()));
  if ((padded[0] != 1 && padded[0] != plan.m) || (padded[1] != 1 && padded[1] != plan.n))
    throw fail("C of shape " + shapeList(*c) + " does not broadcast to " +
               shapeList({plan.m, plan.n}));
  plan.cRows = padded[0];
  plan.cCols = padded[1];
  return plan;
}

//===----------------------------------------------------------------------===//
// Stream ordering
//===----------------------------------------------------------------------===//

std::vector<int> HazardTracker::add(int index, int stream,
                                    const std::vector<Access> &accesses) {
  auto conflicts = [&](const std::vector<Access> &earlier) {
    for (const Access &x : earlier)
      for (const Access &y : accesses)
        if ((x.write || y.write) && x.range.overlaps(y.range))
          return true;
    return false;
  };
  std::vector<int> waits;
  for (size_t s = 0; s < pending.size(); ++s) {
    if (int(s) == stream)
      continue;
    std::vector<Entry> &other = pending[s];
    int latest = -1;
    for (const Entry &e : other)
      if (e.index > latest && conflicts(e.accesses))
        latest = e.index;
    if (latest < 0)
      continue;
    waits.push_back(latest);
    // Everything up to `latest` on that stream is now ordered before this
    // stream's later work.
    other.erase(std::remove_if(other.begin(), other.end(),
                               [&](const Entry &e) { return e.index <= latest; }),
                other.end());
  }
  pending.at(size_t(stream)).push_back({index, accesses});
  return waits;
}

//===----------------------------------------------------------------------===//
// Strided copies
//===----------------------------------------------------------------------===//

std::vector<Copy2D> cuda::planBroadcast2D(int64_t rows, int64_t cols, int64_t m, int64_t n,
                                          size_t elem) {
  std::vector<Copy2D> copies;
  if (m <= 0 || n <= 0)
    return copies;
  if ((rows != 1 && rows != m) || (cols != 1 && cols != n))
    throw RuntimeError("cannot broadcast [" + std::to_string(rows) + "," +
                       std::to_string(cols) + "] to [" + std::to_string(m) + "," +
                       std::to_string(n) + "]");
  size_t row = size_t(n) * elem;
  if (cols == n) {
    // Whole rows: the given ones, in one run.
    appendCopy(copies, Copy2D{false, 0, 0, row, row, size_t(rows) * row, 1});
  } else {
    // One column placed, then doubled to the right within each row.
    appendCopy(copies, Copy2D{false, 0, 0, elem, row, elem, size_t(rows)});
    for (int64_t w = 1; w < n; w *= 2) {
      size_t c = size_t(std::min(w, n - w));
      appendCopy(copies, Copy2D{true, 0, size_t(w) * elem, row, row, c * elem, size_t(rows)});
    }
  }
  if (rows == 1)
    for (int64_t h = 1; h < m; h *= 2) {
      size_t c = size_t(std::min(h, m - h));
      appendCopy(copies, Copy2D{true, 0, size_t(h) * row, row, row, c * row, 1});
    }
  return copies;
}
