//===- Communicator.h - collectives between ranks -------------*- C++ -*-===//
//
// The runtime talks to other ranks only through this interface: MPI on
// CPUs today, NCCL next to it for GPUs. Tensors are contiguous buffers;
// collectives operate in rank order.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_COMMUNICATOR_H
#define SHARDFLOW_RUNTIME_COMMUNICATOR_H

#include "shardflow/Runtime/Format/Kernel.h"

#include <memory>
#include <string>

namespace shardflow::runtime {

/// How all_reduce and reduce_scatter combine the members' values.
enum class Reduction { Sum, Prod, Max, Min };
/// "sum", "prod", "max", "min"; throws RuntimeError for anything else.
Reduction parseReduction(const std::string &name);

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Element-wise reduction of every member's `in` into every member's
  /// `out` (same shape and type; `out` may be `in`). f16/bf16 are reduced
  /// in f32 and rounded once.
  virtual void allReduce(const Tensor &in, const Tensor &out, Reduction op) = 0;
  /// `out` holds every member's `in` bytes, concatenated in rank order.
  virtual void allGather(const Tensor &in, const Tensor &out) = 0;
  /// `in` holds size() equal contiguous chunks; member r's `out` is the
  /// reduction of every member's chunk r.
  virtual void reduceScatter(const Tensor &in, const Tensor &out, Reduction op) = 0;
  /// `in` holds size() equal contiguous chunks; chunk j goes to member j,
  /// and `out` holds the chunks received, in rank order.
  virtual void allToAll(const Tensor &in, const Tensor &out) = 0;
  /// Sends `send` to member `dst` and receives `recv` from member `src` as
  /// one step (so that rings and chains cannot deadlock); either side may
  /// be absent (nullptr / -1).
  virtual void sendRecv(const Tensor *send, int dst, const Tensor *recv, int src) = 0;
  virtual void broadcast(const Tensor &t, int root) = 0;
  /// broadcast, given up after `seconds`: false when `root` (or another
  /// member) did not join in time. The broadcast is then left pending and
  /// the communicator unusable: the caller aborts the job.
  virtual bool broadcastWithin(const Tensor &t, int root, double seconds) = 0;
  virtual void barrier() = 0;
  /// The members with the same `color`, ranked by `key`: a collective call
  /// on this communicator. A negative color joins none and gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  /// Ends every rank: prints `reason` once and exits non-zero everywhere.
  [[noreturn]] virtual void abort(const std::string &reason) = 0;
  /// A short name for messages: "MPI" or "single rank".
  virtual const char *kind() const = 0;
};

/// The world the process was launched into: MPI when started by mpirun or
/// srun (and built with MPI), otherwise a single rank. Throws RuntimeError
/// when launched as several ranks without MPI support.
std::unique_ptr<Communicator> createWorldCommunicator(int *argc, char ***argv);

/// A world of one rank (every collective is a copy).
std::unique_ptr<Communicator> createSingleRankCommunicator();

/// The number of ranks the launcher (mpirun, srun) says it started, or 1.
int launcherWorldSize();

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_COMMUNICATOR_H
