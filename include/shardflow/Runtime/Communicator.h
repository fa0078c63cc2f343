//===- Communicator.h - collectives between ranks -------------*- C++ -*-===//
//
// The runtime talks to other ranks only through this interface: MPI on
// CPUs today, NCCL next to it for GPUs. Tensors are contiguous buffers;
// collectives operate in rank order.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_COMMUNICATOR_H
#define SHARDFLOW_RUNTIME_COMMUNICATOR_H

#include "shardflow/Runtime/Kernel.h"

#include <memory>
#include <string>

namespace shardflow::runtime {

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Element-wise sum over all ranks, in place.
  virtual void allReduceSum(const Tensor &t) = 0;
  /// `out` holds every rank's `in`, concatenated in rank order.
  virtual void allGather(const Tensor &in, const Tensor &out) = 0;
  virtual void broadcast(const Tensor &t, int root) = 0;
  virtual void send(const Tensor &t, int peer) = 0;
  virtual void recv(const Tensor &t, int peer) = 0;
  virtual void barrier() = 0;
  /// Ends every rank: prints `reason` once and exits non-zero everywhere.
  [[noreturn]] virtual void abort(const std::string &reason) = 0;
  /// A short name for messages: "MPI" or "single rank".
  virtual const char *kind() const = 0;
};

/// The world the process was launched into: MPI when started by mpirun or
/// srun (and built with MPI), otherwise a single rank. Throws RuntimeError
/// when launched as several ranks without MPI support.
std::unique_ptr<Communicator> createWorldCommunicator(int *argc, char ***argv);

/// The number of ranks the launcher (mpirun, srun) says it started, or 1.
int launcherWorldSize();

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_COMMUNICATOR_H
