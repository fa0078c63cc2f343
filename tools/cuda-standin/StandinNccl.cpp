//===- StandinNccl.cpp - libnccl.so.2 for one rank without a GPU ----------===//
//
// The NCCL calls shard-run makes, for communicators of one rank (what a
// single-GPU run has): each collective is a copy from its send buffer to
// its receive buffer (or nothing, in place), run on the caller's stream of
// the stand-in driver; sends and receives to oneself pair up inside a
// group. Nonblocking communicators behave as NCCL documents them: creating
// one, the first operation on it (connection setup) and finalizing it
// return ncclInProgress, and ncclCommGetAsyncError reports ncclInProgress
// once more before ncclSuccess; a call made while the communicator is
// still in progress fails with ncclInvalidUsage, as it is a misuse.
//
// SHARDFLOW_STANDIN_NCCL=hang keeps communicator creation in progress for
// ever (a peer that never connects); =fail makes every communicator report
// ncclRemoteError once its first collective has run (a peer that died).
// Both exercise shard-run's timeout and abort paths.
//
//===----------------------------------------------------------------------===//

#include "Standin.h"

#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace shardflow;

struct ncclComm {
  enum class State { Ready, InProgress, Finalized, Destroyed } state = State::Ready;
  bool blocking = true;
  bool created = false;    // creation has completed
  bool connected = false;  // the first operation has set up connections
  bool finalizing = false; // ncclCommFinalize is in progress
  int polls = 0;           // ncclInProgress reports left
  bool hang = false, failAfterFirst = false;
  bool failed = false; // an asynchronous error (SHARDFLOW_STANDIN_NCCL=fail)
  std::string lastError;
};

namespace {

std::string globalError;

struct PointToPoint {
  ncclComm_t comm;
  bool send;
  uintptr_t buffer;
  size_t bytes;
  int peer;
  cudaStream_t stream;
};

int groupDepth = 0;
std::vector<PointToPoint> pending;

const char *mode() {
  const char *m = std::getenv("SHARDFLOW_STANDIN_NCCL");
  return m ? m : "";
}

size_t typeSize(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8:
  case ncclFloat8e4m3:
  case ncclFloat8e5m2:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}

ncclResult_t error(ncclComm_t comm, ncclResult_t status, const std::string &why) {
  globalError = "stand-in NCCL: " + why;
  if (comm)
    comm->lastError = globalError;
  standin::note("nccl: " + why);
  return status;
}

/// Whether `comm` takes a call now; sets its error otherwise.
ncclResult_t usable(ncclComm_t comm, const char *call) {
  if (!comm)
    return error(nullptr, ncclInvalidArgument, std::string(call) + ": a null communicator");
  if (comm->state == ncclComm::State::Destroyed || comm->state == ncclComm::State::Finalized)
    return error(comm, ncclInvalidUsage,
                 std::string(call) + ": the communicator is finalized or destroyed");
  if (comm->state == ncclComm::State::InProgress)
    return error(comm, ncclInvalidUsage,
                 std::string(call) + ": called while the communicator's previous operation is "
                                     "in progress (poll ncclCommGetAsyncError until it leaves "
                                     "ncclInProgress first)");
  return ncclSuccess;
}

/// The status of a call that was accepted: the first one on a nonblocking
/// communicator goes on in the background (connection setup).
ncclResult_t accepted(ncclComm_t comm) {
  if (comm->blocking || comm->connected) {
    comm->connected = true;
    return ncclSuccess;
  }
  comm->connected = true;
  comm->state = ncclComm::State::InProgress;
  comm->polls = 1;
  return ncclInProgress;
}

ncclResult_t checkBuffer(ncclComm_t comm, const void *p, size_t bytes, const char *what) {
  std::string problem = standin::checkRange(reinterpret_cast<uintptr_t>(p), bytes, what);
  return problem.empty() ? ncclSuccess : error(comm, ncclInvalidArgument, problem);
}

/// Enqueues recv = send (one rank: every collective is this copy).
ncclResult_t copyCollective(const char *call, const void *send, void *recv, size_t bytes,
                            ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = checkBuffer(comm, send, bytes, call))
    return r;
  if (ncclResult_t r = checkBuffer(comm, recv, bytes, call))
    return r;
  auto s = reinterpret_cast<uintptr_t>(send), d = reinterpret_cast<uintptr_t>(recv);
  if (s != d && bytes && s < d + bytes && d < s + bytes)
    return error(comm, ncclInvalidArgument,
                 std::string(call) + ": send and receive buffers overlap without being the same");
  bool fail = comm->failAfterFirst;
  std::string what = std::string("nccl ") + call + " " + std::to_string(bytes) + " B";
  bool ok = standin::enqueue(stream, what, [=] {
    if (s != d && bytes)
      std::memcpy(recv, send, bytes);
    if (fail)
      comm->failed = true;
  });
  if (!ok)
    return error(comm, ncclUnhandledCudaError, std::string(call) + ": the CUDA context has failed");
  return accepted(comm);
}

} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
  if (!version)
    return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError:
    return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError:
    return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument:
    return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage:
    return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  return comm ? comm->lastError.c_str() : globalError.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId)
    return ncclInvalidArgument;
  static unsigned serial = 0;
  std::memset(uniqueId, 0, sizeof(*uniqueId));
  std::snprintf(uniqueId->internal, sizeof(uniqueId->internal), "shardflow-standin-%u",
                ++serial);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  (void)commId;
  if (!comm)
    return error(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: a null output");
  *comm = nullptr;
  if (nranks != 1 || rank != 0)
    return error(nullptr, ncclInvalidUsage,
                 "ncclCommInitRankConfig: " + std::to_string(nranks) +
                     " ranks; the stand-in runs communicators of one rank only");
  bool blocking = true;
  if (config) {
    if (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t))
      return error(nullptr, ncclInvalidArgument,
                   "ncclCommInitRankConfig: a config not made with NCCL_CONFIG_INITIALIZER");
    if (config->blocking != NCCL_CONFIG_UNDEF_INT)
      blocking = config->blocking != 0;
  }
  auto *c = new ncclComm;
  c->blocking = blocking;
  c->hang = std::strcmp(mode(), "hang") == 0;
  c->failAfterFirst = std::strcmp(mode(), "fail") == 0;
  *comm = c;
  if (blocking) { // SHARDFLOW_STANDIN_NCCL=hang applies to nonblocking creation
    c->created = true;
    return ncclSuccess;
  }
  c->state = ncclComm::State::InProgress;
  c->polls = 1;
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  if (!comm || !asyncError)
    return ncclInvalidArgument;
  if (comm->failed) {
    comm->lastError = "stand-in NCCL: a peer failed (SHARDFLOW_STANDIN_NCCL=fail)";
    *asyncError = ncclRemoteError;
    return ncclSuccess;
  }
  if (comm->state == ncclComm::State::InProgress) {
    if ((comm->hang && !comm->created) || comm->polls > 0) {
      comm->polls = std::max(comm->polls - 1, 0);
      *asyncError = ncclInProgress;
      return ncclSuccess;
    }
    comm->created = true;
    comm->state = comm->finalizing ? ncclComm::State::Finalized : ncclComm::State::Ready;
  }
  *asyncError = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (ncclResult_t r = usable(comm, "ncclCommFinalize"))
    return r;
  if (comm->blocking) {
    comm->state = ncclComm::State::Finalized;
    return ncclSuccess;
  }
  comm->state = ncclComm::State::InProgress;
  comm->polls = 1;
  comm->finalizing = true;
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm || comm->state == ncclComm::State::Destroyed)
    return error(comm, ncclInvalidArgument, "ncclCommDestroy: no such communicator");
  if (comm->state == ncclComm::State::InProgress)
    return error(comm, ncclInvalidUsage, "ncclCommDestroy while an operation is in progress");
  comm->state = ncclComm::State::Destroyed; // kept: a stale handle is then an error
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm)
    comm->state = ncclComm::State::Destroyed;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (groupDepth == 0)
    return error(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--groupDepth > 0)
    return ncclSuccess;
  std::vector<PointToPoint> ops;
  ops.swap(pending);
  // One rank: the i-th send to oneself feeds the i-th receive from oneself.
  std::vector<PointToPoint> sends, recvs;
  for (const PointToPoint &op : ops)
    (op.send ? sends : recvs).push_back(op);
  if (sends.size() != recvs.size())
    return error(ops.front().comm, ncclInvalidUsage,
                 "a group with " + std::to_string(sends.size()) + " send(s) and " +
                     std::to_string(recvs.size()) + " receive(s) to oneself would hang");
  ncclResult_t status = ncclSuccess;
  for (size_t i = 0; i < sends.size(); ++i) {
    const PointToPoint &s = sends[i], &r = recvs[i];
    if (s.bytes != r.bytes || s.comm != r.comm || s.stream != r.stream)
      return error(s.comm, ncclInvalidUsage,
                   "send " + std::to_string(i) + " (" + std::to_string(s.bytes) +
                       " B) and its receive (" + std::to_string(r.bytes) +
                       " B) differ in size, communicator or stream");
    ncclResult_t one =
        copyCollective("send/recv", reinterpret_cast<const void *>(s.buffer),
                       reinterpret_cast<void *>(r.buffer), s.bytes, s.comm, s.stream);
    if (one != ncclSuccess && one != ncclInProgress)
      return one;
    if (one == ncclInProgress)
      status = ncclInProgress;
  }
  return status;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclAllReduce"))
    return r;
  if (!typeSize(datatype) || int(op) < 0 || int(op) >= int(ncclNumOps))
    return error(comm, ncclInvalidArgument, "ncclAllReduce: a bad type or operation");
  return copyCollective("all_reduce", sendbuff, recvbuff, count * typeSize(datatype), comm,
                        stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclAllGather"))
    return r;
  if (!typeSize(datatype))
    return error(comm, ncclInvalidArgument, "ncclAllGather: a bad type");
  return copyCollective("all_gather", sendbuff, recvbuff, sendcount * typeSize(datatype), comm,
                        stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclReduceScatter"))
    return r;
  if (!typeSize(datatype) || int(op) < 0 || int(op) >= int(ncclNumOps))
    return error(comm, ncclInvalidArgument, "ncclReduceScatter: a bad type or operation");
  return copyCollective("reduce_scatter", sendbuff, recvbuff, recvcount * typeSize(datatype),
                        comm, stream);
}

static ncclResult_t pointToPoint(bool send, const void *buffer, size_t count,
                                 ncclDataType_t datatype, int peer, ncclComm_t comm,
                                 cudaStream_t stream) {
  const char *call = send ? "ncclSend" : "ncclRecv";
  if (ncclResult_t r = usable(comm, call))
    return r;
  if (!typeSize(datatype) || peer != 0)
    return error(comm, ncclInvalidArgument,
                 std::string(call) + ": peer " + std::to_string(peer) +
                     " in a communicator of one rank, or a bad type");
  if (groupDepth == 0)
    return error(comm, ncclInvalidUsage,
                 std::string(call) + " to oneself outside a group would hang");
  if (ncclResult_t r = checkBuffer(comm, buffer, count * typeSize(datatype), call))
    return r;
  pending.push_back({comm, send, reinterpret_cast<uintptr_t>(buffer), count * typeSize(datatype),
                     peer, stream});
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return pointToPoint(true, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return pointToPoint(false, recvbuff, count, datatype, peer, comm, stream);
}

} // extern "C"
