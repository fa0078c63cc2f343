//===- Communicator.h - collectives between ranks -------------*- C++ -*-===//
//
// The runtime talks to other ranks only through this interface. Three
// communicators implement it:
//
//   single rank  (Communicator.cpp) every collective is a copy; what a run
//                that no launcher started gets.
//   MPI          (Comm/MPI) host buffers: the world the launcher (mpirun,
//                srun) started, the CPU device's collectives, and the
//                bootstrap of NCCL.
//   NCCL         (Comm/NCCL) device buffers of the CUDA device, enqueued on
//                its communication stream; created over another
//                communicator (MPI or single rank), which hands out NCCL's
//                unique ids.
//
// Tensors are contiguous buffers (device pointers for NCCL); collectives
// operate in member order. Every operation comes in two forms: start*
// returns at once with a Request while the operation goes on (MPI: an
// MPI_I* request; NCCL: enqueued on the stream, the request an event
// recorded after it; single rank: done before it returns), and the plain
// form starts it and waits. A started operation's buffers stay untouched
// until its request has completed. Every member starts the same
// operations in the same order (as MPI's nonblocking collectives require),
// whatever order they wait in.
//
// A Request is waited for without a deadline (wait) or within one
// (waitWithin): the program runner gives up on a collective after
// --timeout and ends the job naming it (ProgramRunner.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_COMM_COMMUNICATOR_H
#define SHARDFLOW_RUNTIME_COMM_COMMUNICATOR_H

#include "shardflow/Runtime/Core/Polling.h"
#include "shardflow/Runtime/Format/Kernel.h"

#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime {

/// How all_reduce and reduce_scatter combine the members' values.
enum class Reduction { Sum, Prod, Max, Min };
/// "sum", "prod", "max", "min"; throws RuntimeError for anything else.
Reduction parseReduction(const std::string &name);

/// An operation in flight, or a completed one (default-constructed, or
/// once it has been seen to finish). Move-only. A request dropped in flight
/// leaves its operation going on (nothing waits for it, its buffers stay
/// allocated): a caller gives up on one only on its way to ending the job.
class Request {
public:
  /// What a communicator keeps for an operation in flight.
  class Pending {
  public:
    virtual ~Pending() = default;
    /// Polls once: true when the operation has completed (it is then not
    /// asked again). Reports a failure by throwing RuntimeError, or by
    /// ending the job (an asynchronous NCCL error).
    virtual bool test() = 0;
    /// Blocks until the operation has completed (default: polls).
    virtual void wait();
    /// The CUDA event (a CUevent) recorded after the operation on its
    /// stream, or nullptr for an operation of host buffers. Work queued
    /// after it on that stream, or made to wait for the event, sees its
    /// result without the host waiting.
    virtual void *event() const { return nullptr; }
  };

  Request() = default;
  explicit Request(std::unique_ptr<Pending> pending) : pending(std::move(pending)) {}

  /// Whether the operation is known to have completed (no polling).
  bool done() const { return !pending; }
  /// Polls once; true once the operation has completed.
  bool test();
  /// Blocks until the operation has completed.
  void wait();
  /// Waits at most `seconds` (Polling.h): Finished, or TimedOut with the
  /// operation still in flight.
  WaitOutcome waitWithin(double seconds);
  /// Pending::event() of an operation in flight, else nullptr.
  void *event() const { return pending ? pending->event() : nullptr; }

private:
  std::unique_ptr<Pending> pending;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Each member's rank in the world the launcher started, in member
  /// order: how messages name peers and groups.
  virtual const std::vector<int> &worldRanks() const = 0;

  /// Element-wise reduction of every member's `in` into every member's
  /// `out` (same shape and type; `out` may be `in`). f16/bf16 are reduced
  /// in f32 and rounded once (MPI), or as NCCL reduces them.
  virtual Request startAllReduce(const Tensor &in, const Tensor &out, Reduction op) = 0;
  /// `out` holds every member's `in` bytes, concatenated in rank order;
  /// `in` may be this member's own part of `out`.
  virtual Request startAllGather(const Tensor &in, const Tensor &out) = 0;
  /// `in` holds size() equal contiguous chunks; member r's `out` is the
  /// reduction of every member's chunk r. `out` may be this member's own
  /// chunk of `in`.
  virtual Request startReduceScatter(const Tensor &in, const Tensor &out, Reduction op) = 0;
  /// `in` holds size() equal contiguous chunks; chunk j goes to member j,
  /// and `out` (not overlapping `in`) holds the chunks received, in rank
  /// order.
  virtual Request startAllToAll(const Tensor &in, const Tensor &out) = 0;
  /// Sends `send` to member `dst` and receives `recv` from member `src` as
  /// one step (so that rings and chains cannot deadlock); either side may
  /// be absent (nullptr / -1).
  virtual Request startSendRecv(const Tensor *send, int dst, const Tensor *recv, int src) = 0;
  /// `t` of member `root` into every member's `t`.
  virtual Request startBroadcast(const Tensor &t, int root) = 0;
  /// A message of `t`'s bytes to member `dst`, or from member `src` into
  /// `t`, matched by `tag` (0 to 32767) rather than by order: the pipeline
  /// runner's activations between stages. The default throws RuntimeError
  /// (MPI implements them).
  virtual Request startSend(const Tensor &t, int dst, int tag);
  virtual Request startRecv(const Tensor &t, int src, int tag);

  void allReduce(const Tensor &in, const Tensor &out, Reduction op) {
    startAllReduce(in, out, op).wait();
  }
  void allGather(const Tensor &in, const Tensor &out) { startAllGather(in, out).wait(); }
  void reduceScatter(const Tensor &in, const Tensor &out, Reduction op) {
    startReduceScatter(in, out, op).wait();
  }
  void allToAll(const Tensor &in, const Tensor &out) { startAllToAll(in, out).wait(); }
  void sendRecv(const Tensor *send, int dst, const Tensor *recv, int src) {
    startSendRecv(send, dst, recv, src).wait();
  }
  void broadcast(const Tensor &t, int root) { startBroadcast(t, root).wait(); }
  /// broadcast, given up after `seconds`: false when `root` (or another
  /// member) did not join in time. The broadcast is then left pending and
  /// the communicator unusable: the caller aborts the job.
  bool broadcastWithin(const Tensor &t, int root, double seconds);

  virtual void barrier() = 0;
  /// The members with the same `color`, ranked by `key`: a collective call
  /// on this communicator. A negative color joins none and gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  /// Ends every rank: prints `reason` once and exits non-zero everywhere.
  [[noreturn]] virtual void abort(const std::string &reason) = 0;
  /// A short name for messages: "MPI", "NCCL" or "single rank".
  virtual const char *kind() const = 0;
  /// Ends the job (abort) when work this communicator or one split from
  /// the same world runs in the background has failed (NCCL's
  /// asynchronous errors; `during` says what was waited for); otherwise
  /// nothing. Polled while the host waits for a device.
  virtual void checkBackgroundErrors(const std::string &during) { (void)during; }
};

/// The world the process was launched into: MPI when started by mpirun or
/// srun (and built with MPI), otherwise a single rank. Throws RuntimeError
/// when launched as several ranks without MPI support.
std::unique_ptr<Communicator> createWorldCommunicator(int *argc, char ***argv);

/// A world of one rank (every collective is a copy).
std::unique_ptr<Communicator> createSingleRankCommunicator();

/// The number of ranks the launcher (mpirun, srun) says it started, or 1.
int launcherWorldSize();

/// "0, 1, 3": ranks for messages.
std::string rankList(const std::vector<int> &ranks);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_COMM_COMMUNICATOR_H
