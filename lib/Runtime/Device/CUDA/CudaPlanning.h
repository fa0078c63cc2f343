//===- CudaPlanning.h - host-side decisions of the CUDA device -*- C++ -*-===//
//
// Everything the CUDA device decides without a GPU, kept apart from the
// driver calls so that unit tests check it on machines with no GPU: which
// device a rank uses, which module binary fits the device, how a MatMul's
// shapes map onto cuBLASLt calls, which instructions on one stream must wait
// for which on the other, and the strided copies (Core/CopyPlan.h) that
// broadcast a Gemm's C.
//
// Plain C++: no CUDA header is included here.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CUDA_CUDAPLANNING_H
#define SHARDFLOW_RUNTIME_CUDA_CUDAPLANNING_H

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Core/CopyPlan.h"
#include "shardflow/Runtime/Core/Polling.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardflow::runtime::cuda {

//===----------------------------------------------------------------------===//
// Devices and modules
//===----------------------------------------------------------------------===//

/// This process's rank among the ranks on its node, as the launcher says
/// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCAL_RANK), else 0.
int launcherLocalRank();

/// The device ordinal a rank uses: `requested` (--device; -1 when not
/// given), else `localRank` modulo `deviceCount`. Throws RuntimeError when
/// there is no device or `requested` is not one.
int chooseDevice(int requested, int localRank, int deviceCount);

/// The code to load for module `name` on a device of compute capability
/// major.minor: the cubin for exactly that architecture ("sm_90", or the
/// architecture-specific "sm_90a"), else the PTX of the newest
/// "compute_XY" the device can run (the driver compiles it). Throws
/// RuntimeError naming the module, the device's architecture and the
/// architectures the artifact has.
const DeviceModule &selectModule(const std::vector<DeviceModule> &modules,
                                 const std::string &name, int major, int minor);

//===----------------------------------------------------------------------===//
// GEMM shapes
//===----------------------------------------------------------------------===//

/// How an ONNX MatMul (numpy batch broadcasting, 1-D operands promoted)
/// maps onto row-major GEMMs [m,k] x [k,n] -> [m,n].
struct MatmulPlan {
  enum class Kind {
    /// B has no batch (or a batch of one): A's batch folds into m, one GEMM.
    Folded,
    /// One strided batched GEMM; a stride of 0 repeats that operand (A or
    /// B without batch against the other's batch).
    StridedBatched,
    /// Batches broadcast against each other in other ways: one GEMM per
    /// output batch element at the offsets below.
    Broadcast,
  };
  Kind kind = Kind::Folded;
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0; // elements
  /// Broadcast: per output batch element, the element offsets of its A and
  /// B matrices (C's is index * m * n).
  std::vector<std::pair<int64_t, int64_t>> offsets;
};

/// Throws RuntimeError when the shapes do not form an ONNX MatMul whose
/// result has shape `out`.
MatmulPlan planMatmul(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                      const std::vector<int64_t> &out);

/// Turns a StridedBatched plan into the equivalent Broadcast loop (used when
/// cuBLASLt has no algorithm for a zero stride).
MatmulPlan expandToLoop(const MatmulPlan &plan);

/// An ONNX Gemm: Y[m,n] = alpha * op(A) op(B) + beta * C, C broadcast
/// (unidirectionally) to [m,n]: cRows is 1 or m, cCols 1 or n, both 0
/// when there is no C.
struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  int64_t cRows = 0, cCols = 0;
};

GemmPlan planGemm(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                  const std::vector<int64_t> *c, bool transA, bool transB,
                  const std::vector<int64_t> &out);

//===----------------------------------------------------------------------===//
// Stream ordering
//===----------------------------------------------------------------------===//

/// Bytes of one device allocation: `region` names the allocation (the
/// arena, or one input buffer), [begin, end) the bytes in it.
struct ByteRange {
  int region = 0;
  int64_t begin = 0, end = 0;
  bool overlaps(const ByteRange &o) const {
    return region == o.region && begin < o.end && o.begin < end && begin < end &&
           o.begin < o.end;
  }
};

struct Access {
  ByteRange range;
  bool write = false;
};

/// Orders instructions placed on several streams (compute, communication):
/// each instruction added must wait for the latest earlier instruction on
/// every other stream that touches an overlapping byte range where at least
/// one of the two writes (read-after-write, write-after-read,
/// write-after-write). Instructions on the same stream are ordered by the
/// stream. Once a stream has waited for instruction j of another stream,
/// everything up to j there is known to be done first and is not waited for
/// again.
class HazardTracker {
public:
  explicit HazardTracker(int streams = 2) : pending(size_t(streams)) {}

  /// Adds instruction number `index` (increasing) on `stream`; returns the
  /// instructions it must wait for (at most one per other stream).
  std::vector<int> add(int index, int stream, const std::vector<Access> &accesses);

private:
  struct Entry {
    int index;
    std::vector<Access> accesses;
  };
  std::vector<std::vector<Entry>> pending; // per stream, not yet waited for
};

//===----------------------------------------------------------------------===//
// Strided copies
//===----------------------------------------------------------------------===//

/// Fills a row-major [m,n] matrix from a [rows,cols] one (rows 1 or m,
/// cols 1 or n) broadcast to it: the first column or row placed, then
/// doubled (log2 copies, each reading only bytes already written).
std::vector<Copy2D> planBroadcast2D(int64_t rows, int64_t cols, int64_t m, int64_t n,
                                    size_t elem);

} // namespace shardflow::runtime::cuda

#endif // SHARDFLOW_RUNTIME_CUDA_CUDAPLANNING_H
