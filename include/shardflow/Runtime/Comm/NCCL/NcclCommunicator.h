//===- NcclCommunicator.h - collectives over NCCL ---------------*- C++ -*-===//
//
// The CUDA device's collectives: NCCL, loaded at run time through
// CudaLibraries.h (shard-run links no CUDA library). Tensors hold device
// pointers; every operation is enqueued on the stream the world was made
// with (the device's communication stream), and its Request is an event
// recorded after it there: the device orders later work after it without
// the host waiting, and the host may wait for it (Communicator.h).
//
// Creating a communicator is a collective call on another one, the
// bootstrap (MPI, or the single rank): member 0 makes NCCL's unique id and
// broadcasts it there. A group (split) is an MPI split of the bootstrap
// plus a fresh unique id from its member 0, not ncclCommSplit: that works
// with any NCCL from 2.14 on, gives the same members and ranks as MPI's
// split, and ranks outside every group create nothing.
//
// The communicators are nonblocking (NCCL 2.14): creating one returns at
// once and goes on in the background, and so does the connection setup of
// a first collective. Both are waited for within the timeout, so a peer
// that never connects (a firewall, the wrong NCCL_SOCKET_IFNAME) ends the
// job with a reason instead of hanging it; so is the unique id's
// broadcast, which a rank stuck before it (in loading, on a dead GPU)
// would otherwise hang. The world runs one all_reduce at creation (NCCL's
// health check), so a broken setup fails at load with its own message.
//
// An asynchronous NCCL error, a timeout or abort() aborts every NCCL
// communicator of the world (ncclCommAbort) and then the bootstrap's job.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H
#define SHARDFLOW_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H

#include "shardflow/Runtime/Comm/Communicator.h"

#include <memory>
#include <string>

namespace shardflow::runtime {

struct NcclSettings {
  /// How long creating a communicator, connecting to peers and the health
  /// check may take, and the flag that set it (for messages).
  double timeoutSeconds = 600;
  std::string timeoutFlag = "--timeout";
};

/// The NCCL world over `bootstrap` (which must outlive it), enqueuing on
/// `stream` (a CUstream) in the current CUDA context: a collective call on
/// `bootstrap`. Throws RuntimeError when NCCL cannot be loaded or fails;
/// ends the job on a timeout.
std::unique_ptr<Communicator> createNcclWorld(Communicator &bootstrap, void *stream,
                                              const NcclSettings &settings);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H
