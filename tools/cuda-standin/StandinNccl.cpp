//===- StandinNccl.cpp - libnccl.so.2 without a GPU -----------------------===//
//
// The NCCL calls shard-run makes. In a communicator of one rank (what a
// single-GPU run has) each collective is a copy from its send buffer to
// its receive buffer (or nothing, in place), run on the caller's stream of
// the stand-in driver; sends and receives to oneself pair up inside a
// group. A communicator of several ranks has one process per rank (shard-run
// under mpirun, SHARDFLOW_STANDIN_GPUS devices per host), which meet
// through files (StandinNcclShm.h): a collective or a group of sends and
// receives is a polled operation on the caller's stream that finishes once
// the peers have brought their parts. Reductions go in rank order, each
// step rounded to the data type (f16 and bf16 through f32), so every rank
// gets the same bits. Nonblocking communicators behave as NCCL documents them: creating
// one, the first operation on it (connection setup) and finalizing it
// return ncclInProgress, and ncclCommGetAsyncError reports ncclInProgress
// once more before ncclSuccess; a call made while the communicator is
// still in progress fails with ncclInvalidUsage, as it is a misuse.
//
// SHARDFLOW_STANDIN_NCCL=hang keeps communicator creation in progress for
// ever (a peer that never connects); =fail makes every communicator report
// ncclRemoteError once its first collective has run (a peer that died).
// Both exercise shard-run's timeout and abort paths. A rank that waits
// longer than SHARDFLOW_STANDIN_NCCL_TIMEOUT seconds (default 300) for its
// peers fails its stream operation, naming the ranks it waited for.
//
//===----------------------------------------------------------------------===//

#include "Standin.h"
#include "StandinNcclShm.h"

#include "shardflow/Runtime/Format/FloatConversion.h"

#include <nccl.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using namespace shardflow;
namespace nccl = shardflow::standin::nccl;
using nccl::Call;
using nccl::Link;

struct ncclComm {
  enum class State { Ready, InProgress, Finalized, Destroyed } state = State::Ready;
  bool blocking = true;
  bool created = false;    // creation has completed
  bool connected = false;  // the first operation has set up connections
  bool finalizing = false; // ncclCommFinalize is in progress
  int polls = 0;           // ncclInProgress reports left
  bool hang = false, failAfterFirst = false;
  bool failed = false; // an asynchronous error (SHARDFLOW_STANDIN_NCCL=fail)
  ncclResult_t asyncStatus = ncclSuccess; // creation failed (a duplicate GPU)
  std::string lastError;
  // Several ranks: the other processes, and what this rank has called.
  std::unique_ptr<Link> link;
  uint64_t collectives = 0;
  std::map<int, uint64_t> sends, receives; // per peer
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
  uint64_t nth = 0; // several ranks: the how-manieth send to (receive from) peer
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

//===----------------------------------------------------------------------===//
// Several ranks
//===----------------------------------------------------------------------===//

using Clock = std::chrono::steady_clock;

double waitLimit() {
  const char *v = std::getenv("SHARDFLOW_STANDIN_NCCL_TIMEOUT");
  double seconds = v ? std::atof(v) : 0;
  return seconds > 0 ? seconds : 300;
}

/// How long a polled operation has waited for its peers; ends the wait.
struct Patience {
  bool started = false;
  Clock::time_point start, abortSeen;
  int aborted = -1;

  /// Called each time the operation is still waiting for `forWhat`
  /// ("rank 1 to post ..."). A peer that aborted gives the communicator an
  /// asynchronous error at once (the caller polls for it, and aborts) and
  /// fails the operation a little later; otherwise the wait fails past
  /// SHARDFLOW_STANDIN_NCCL_TIMEOUT.
  void wait(ncclComm_t comm, const std::string &forWhat) {
    Clock::time_point now = Clock::now();
    if (!started) {
      started = true;
      start = now;
    }
    if (aborted < 0 && comm->link && (aborted = comm->link->abortedPeer()) >= 0) {
      abortSeen = now;
      comm->failed = true;
      comm->lastError = "stand-in NCCL: rank " + std::to_string(aborted) +
                        " aborted the communicator while rank " +
                        std::to_string(comm->link->rank()) + " waited for " + forWhat;
    }
    if (aborted >= 0 && now - abortSeen > std::chrono::seconds(5))
      throw std::runtime_error(comm->lastError);
    double waited = std::chrono::duration<double>(now - start).count();
    if (waited > waitLimit())
      throw std::runtime_error("rank " + std::to_string(comm->link ? comm->link->rank() : 0) +
                               " waited " + std::to_string(int(waited)) + " s for " + forWhat +
                               " (SHARDFLOW_STANDIN_NCCL_TIMEOUT)");
  }
};

template <typename T> T combine(T a, T b, ncclRedOp_t op) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
    case ncclProd:
      return a * b;
    case ncclMax:
      return std::fmax(a, b);
    case ncclMin:
      return std::fmin(a, b);
    default: // sum, avg (divided at the end)
      return a + b;
    }
  } else {
    using U = std::make_unsigned_t<T>; // wraps around, as on a GPU
    switch (op) {
    case ncclProd:
      return T(U(U(a) * U(b)));
    case ncclMax:
      return std::max(a, b);
    case ncclMin:
      return std::min(a, b);
    default:
      return T(U(U(a) + U(b)));
    }
  }
}

template <typename T>
void combineAll(char *acc, const char *x, size_t count, ncclRedOp_t op, int ranks) {
  for (size_t i = 0; i < count; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    if (x) {
      std::memcpy(&b, x + i * sizeof(T), sizeof(T));
      a = combine(a, b, op);
    } else {
      a = T(a / T(ranks)); // ncclAvg's last step
    }
    std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}

void combineHalves(char *acc, const char *x, size_t count, ncclRedOp_t op, int ranks,
                   bool bf16) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t a, b;
    std::memcpy(&a, acc + 2 * i, 2);
    float fa = bf16 ? runtime::bf16BitsToFloat(a) : runtime::halfBitsToFloat(a);
    if (x) {
      std::memcpy(&b, x + 2 * i, 2);
      float fb = bf16 ? runtime::bf16BitsToFloat(b) : runtime::halfBitsToFloat(b);
      fa = combine(fa, fb, op);
    } else {
      fa /= float(ranks);
    }
    a = bf16 ? runtime::floatToBf16Bits(fa) : runtime::floatToHalfBits(fa);
    std::memcpy(acc + 2 * i, &a, 2);
  }
}

/// acc = op(acc, x), element by element; with x null, acc /= ranks (avg).
void reduce(char *acc, const char *x, size_t count, ncclDataType_t type, ncclRedOp_t op,
            int ranks) {
  switch (type) {
  case ncclInt8:
    return combineAll<int8_t>(acc, x, count, op, ranks);
  case ncclUint8:
    return combineAll<uint8_t>(acc, x, count, op, ranks);
  case ncclInt32:
    return combineAll<int32_t>(acc, x, count, op, ranks);
  case ncclUint32:
    return combineAll<uint32_t>(acc, x, count, op, ranks);
  case ncclInt64:
    return combineAll<int64_t>(acc, x, count, op, ranks);
  case ncclUint64:
    return combineAll<uint64_t>(acc, x, count, op, ranks);
  case ncclFloat32:
    return combineAll<float>(acc, x, count, op, ranks);
  case ncclFloat64:
    return combineAll<double>(acc, x, count, op, ranks);
  case ncclFloat16:
  case ncclBfloat16:
    return combineHalves(acc, x, count, op, ranks, type == ncclBfloat16);
  default:
    throw std::runtime_error("a reduction over an unsupported type");
  }
}

/// The link of `comm`, or an error if it was aborted meanwhile.
Link &linkOf(ncclComm_t comm) {
  if (!comm->link)
    throw std::runtime_error("the communicator was aborted or destroyed with work queued");
  return *comm->link;
}

/// Enqueues a collective of a communicator of several ranks: this rank
/// brings `sendBytes` at `send` and gets `recvBytes` at `recv`.
ncclResult_t linkCollective(const char *name, const Call &call, const void *send,
                            size_t sendBytes, void *recv, size_t recvBytes, ncclComm_t comm,
                            cudaStream_t stream) {
  if (ncclResult_t r = checkBuffer(comm, send, sendBytes, name))
    return r;
  if (ncclResult_t r = checkBuffer(comm, recv, recvBytes, name))
    return r;
  if (call.kind != nccl::AllGather && call.kind != nccl::Broadcast &&
      (call.type == ncclFloat8e4m3 || call.type == ncclFloat8e5m2))
    return error(comm, ncclInvalidArgument,
                 std::string(name) + ": the stand-in does not reduce fp8 over several ranks");
  struct Progress {
    bool posted = false;
    Patience patience;
  };
  bool fail = comm->failAfterFirst;
  std::string kind = name;
  // Numbered when queued: at each launch of a graph that captured it too.
  auto make = [=]() -> standin::Polled {
    uint64_t seq = ++comm->collectives;
    auto progress = std::make_shared<Progress>();
    std::string what = "nccl " + kind + " " + std::to_string(recvBytes) + " B (collective #" +
                       std::to_string(seq) + " of rank " + std::to_string(comm->link->rank()) +
                       " of " + std::to_string(comm->link->size()) + ")";
    return {what, [=] {
      Link &link = linkOf(comm);
      if (!progress->posted)
        progress->posted = link.post(seq, call, send, sendBytes);
      if (!progress->posted) {
        progress->patience.wait(comm, "every rank to finish collective #" +
                                          std::to_string(seq - 1) + " before " +
                                          nccl::describe(call));
        return false;
      }
      if (!link.allPosted(seq)) {
        progress->patience.wait(comm, "rank(s) " + link.missing(seq) + " to call " +
                                          nccl::describe(call) + " (collective #" +
                                          std::to_string(seq) + ")");
        return false;
      }
      auto type = ncclDataType_t(call.type);
      auto op = ncclRedOp_t(call.op);
      int n = link.size();
      if (call.kind == nccl::AllGather) {
        for (int k = 0; k < n; ++k)
          link.read(k, 0, static_cast<char *>(recv) + size_t(k) * sendBytes, sendBytes);
      } else if (call.kind == nccl::Broadcast) {
        link.read(call.op, 0, recv, recvBytes);
      } else {
        size_t offset = call.kind == nccl::ReduceScatter ? size_t(link.rank()) * recvBytes : 0;
        std::vector<char> acc(recvBytes), part(recvBytes);
        link.read(0, offset, acc.data(), recvBytes);
        for (int k = 1; k < n; ++k) {
          link.read(k, offset, part.data(), recvBytes);
          reduce(acc.data(), part.data(), recvBytes / typeSize(type), type, op, n);
        }
        if (op == ncclAvg)
          reduce(acc.data(), nullptr, recvBytes / typeSize(type), type, op, n);
        std::memcpy(recv, acc.data(), recvBytes);
      }
      link.finish(seq);
      if (fail)
        comm->failed = true;
      return true;
    }};
  };
  bool ok = standin::enqueuePolled(stream, make);
  if (!ok)
    return error(comm, ncclUnhandledCudaError, std::string(name) + ": the CUDA context has failed");
  return accepted(comm);
}

/// Enqueues sends and receives of one communicator and stream of several
/// ranks, which go on together (a group), as one operation.
ncclResult_t linkGroup(std::vector<PointToPoint> ops) {
  ncclComm_t comm = ops.front().comm;
  struct Progress {
    std::vector<bool> done;
    Patience patience;
  };
  size_t bytes = 0;
  for (const PointToPoint &op : ops)
    bytes += op.bytes;
  std::string what = "nccl send/recv " + std::to_string(ops.size()) + " part(s), " +
                     std::to_string(bytes) + " B (rank " + std::to_string(comm->link->rank()) +
                     " of " + std::to_string(comm->link->size()) + ")";
  CUstream stream = ops.front().stream;
  // The first queueing uses the numbers the calls took; a graph's later
  // launches number each send and receive again, as new calls would.
  auto first = std::make_shared<bool>(true);
  auto make = [=, ops = std::move(ops)]() mutable -> standin::Polled {
    if (!*first)
      for (PointToPoint &op : ops)
        op.nth = ++(op.send ? comm->sends : comm->receives)[op.peer];
    *first = false;
    auto progress = std::make_shared<Progress>();
    progress->done.assign(ops.size(), false);
    return {what, [=] {
      Link &link = linkOf(comm);
      std::string waiting;
      for (size_t i = 0; i < ops.size(); ++i) {
        const PointToPoint &op = ops[i];
        if (progress->done[i])
          continue;
        auto buffer = reinterpret_cast<void *>(op.buffer);
        progress->done[i] = op.send ? link.send(op.peer, op.nth, buffer, op.bytes)
                                    : link.receive(op.peer, op.nth, buffer, op.bytes);
        if (!progress->done[i] && waiting.empty())
          waiting = op.send ? "rank " + std::to_string(op.peer) + " to take send #" +
                                  std::to_string(op.nth - 1) + " to it"
                            : "rank " + std::to_string(op.peer) + " to make send #" +
                                  std::to_string(op.nth) + " to it";
      }
      if (waiting.empty())
        return true;
      progress->patience.wait(comm, waiting);
      return false;
    }};
  };
  bool ok = standin::enqueuePolled(stream, make);
  if (!ok)
    return error(comm, ncclUnhandledCudaError, "send/recv: the CUDA context has failed");
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
  // Unique across the processes of a host: it names the folder where a
  // communicator's ranks meet (StandinNcclShm.h).
  static unsigned serial = 0;
  char host[64] = {};
  ::gethostname(host, sizeof(host) - 1);
  for (char *c = host; *c; ++c)
    if (!std::isalnum(static_cast<unsigned char>(*c)) && *c != '-' && *c != '.')
      *c = '_';
  std::memset(uniqueId, 0, sizeof(*uniqueId));
  std::snprintf(uniqueId->internal, sizeof(uniqueId->internal), "shardflow-nccl-%s-%ld-%u-%llx",
                host, long(::getpid()), ++serial,
                static_cast<unsigned long long>(Clock::now().time_since_epoch().count()));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  if (!comm)
    return error(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: a null output");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return error(nullptr, ncclInvalidArgument,
                 "ncclCommInitRankConfig: rank " + std::to_string(rank) + " of " +
                     std::to_string(nranks));
  std::string id(commId.internal, strnlen(commId.internal, sizeof(commId.internal)));
  if (nranks > 1 && (id.empty() || id.find('/') != std::string::npos || id[0] == '.'))
    return error(nullptr, ncclInvalidArgument,
                 "ncclCommInitRankConfig: a unique id not made by ncclGetUniqueId");
  if (nranks > 1 && standin::currentDevice() < 0)
    return error(nullptr, ncclInvalidUsage,
                 "ncclCommInitRankConfig: no CUDA context is current (retain the device's "
                 "primary context first)");
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
  if (nranks > 1) {
    try {
      c->link = std::make_unique<Link>(id, nranks, rank, standin::currentDevice());
    } catch (const std::exception &e) {
      delete c;
      return error(nullptr, ncclSystemError, std::string("ncclCommInitRankConfig: ") + e.what());
    }
  }
  *comm = c;
  if (blocking) { // SHARDFLOW_STANDIN_NCCL=hang applies to nonblocking creation
    if (c->link) {
      Patience patience;
      try {
        while (!c->link->joined()) {
          patience.wait(c, "every rank to join the communicator");
          ::usleep(200);
        }
      } catch (const std::exception &e) {
        return error(c, ncclInvalidUsage, std::string("ncclCommInitRankConfig: ") + e.what());
      }
    }
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
    if (comm->lastError.empty())
      comm->lastError = "stand-in NCCL: a peer failed (SHARDFLOW_STANDIN_NCCL=fail)";
    *asyncError = ncclRemoteError;
    return ncclSuccess;
  }
  if (comm->asyncStatus != ncclSuccess) {
    *asyncError = comm->asyncStatus;
    return ncclSuccess;
  }
  if (comm->state == ncclComm::State::InProgress) {
    bool joining = false;
    if (comm->link && !comm->created && !comm->hang) {
      try {
        joining = !comm->link->joined();
      } catch (const std::exception &e) {
        error(comm, ncclInvalidUsage, std::string("ncclCommInitRankConfig: ") + e.what());
        comm->asyncStatus = *asyncError = ncclInvalidUsage;
        return ncclSuccess;
      }
    }
    if ((comm->hang && !comm->created) || comm->polls > 0 || joining) {
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
  comm->link.reset();
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm) {
    comm->state = ncclComm::State::Destroyed;
    if (comm->link)
      comm->link->abort();
    comm->link.reset();
  }
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
  std::vector<PointToPoint> ops, one;
  ops.swap(pending);
  // Several ranks: each communicator and stream's part of the group goes
  // on as one operation.
  std::map<std::pair<ncclComm_t, cudaStream_t>, std::vector<PointToPoint>> parts;
  for (const PointToPoint &op : ops)
    if (op.comm->link)
      parts[{op.comm, op.stream}].push_back(op);
    else
      one.push_back(op);
  ncclResult_t status = ncclSuccess;
  for (auto &[key, part] : parts) {
    ncclResult_t r = linkGroup(part);
    if (r != ncclSuccess && r != ncclInProgress)
      return r;
    if (r == ncclInProgress)
      status = ncclInProgress;
  }
  ops.swap(one);
  if (ops.empty())
    return status;
  // One rank: the i-th send to oneself feeds the i-th receive from oneself.
  std::vector<PointToPoint> sends, recvs;
  for (const PointToPoint &op : ops)
    (op.send ? sends : recvs).push_back(op);
  if (sends.size() != recvs.size())
    return error(ops.front().comm, ncclInvalidUsage,
                 "a group with " + std::to_string(sends.size()) + " send(s) and " +
                     std::to_string(recvs.size()) + " receive(s) to oneself would hang");
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
  size_t bytes = count * typeSize(datatype);
  if (comm->link)
    return linkCollective("all_reduce", Call{nccl::AllReduce, datatype, op, 0, count}, sendbuff,
                          bytes, recvbuff, bytes, comm, stream);
  return copyCollective("all_reduce", sendbuff, recvbuff, count * typeSize(datatype), comm,
                        stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclAllGather"))
    return r;
  if (!typeSize(datatype))
    return error(comm, ncclInvalidArgument, "ncclAllGather: a bad type");
  size_t bytes = sendcount * typeSize(datatype);
  if (comm->link)
    return linkCollective("all_gather", Call{nccl::AllGather, datatype, 0, 0, sendcount},
                          sendbuff, bytes, recvbuff, bytes * size_t(comm->link->size()), comm,
                          stream);
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
  size_t bytes = recvcount * typeSize(datatype);
  if (comm->link)
    return linkCollective("reduce_scatter",
                          Call{nccl::ReduceScatter, datatype, op, 0, recvcount}, sendbuff,
                          bytes * size_t(comm->link->size()), recvbuff, bytes, comm, stream);
  return copyCollective("reduce_scatter", sendbuff, recvbuff, recvcount * typeSize(datatype),
                        comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclBroadcast"))
    return r;
  int size = comm->link ? comm->link->size() : 1;
  if (!typeSize(datatype) || root < 0 || root >= size)
    return error(comm, ncclInvalidArgument,
                 "ncclBroadcast: root " + std::to_string(root) + " in a communicator of " +
                     std::to_string(size) + " rank(s), or a bad type");
  size_t bytes = count * typeSize(datatype);
  if (comm->link)
    return linkCollective("broadcast", Call{nccl::Broadcast, datatype, root, 0, count},
                          sendbuff, bytes, recvbuff, bytes, comm, stream);
  return copyCollective("broadcast", sendbuff, recvbuff, bytes, comm, stream);
}

static ncclResult_t pointToPoint(bool send, const void *buffer, size_t count,
                                 ncclDataType_t datatype, int peer, ncclComm_t comm,
                                 cudaStream_t stream) {
  const char *call = send ? "ncclSend" : "ncclRecv";
  if (ncclResult_t r = usable(comm, call))
    return r;
  int size = comm->link ? comm->link->size() : 1;
  if (!typeSize(datatype) || peer < 0 || peer >= size)
    return error(comm, ncclInvalidArgument,
                 std::string(call) + ": peer " + std::to_string(peer) +
                     " in a communicator of " + std::to_string(size) + " rank(s), or a bad type");
  if (groupDepth == 0 && !comm->link)
    return error(comm, ncclInvalidUsage,
                 std::string(call) + " to oneself outside a group would hang");
  size_t bytes = count * typeSize(datatype);
  if (ncclResult_t r = checkBuffer(comm, buffer, bytes, call))
    return r;
  PointToPoint op{comm, send, reinterpret_cast<uintptr_t>(buffer), bytes, peer, stream};
  if (comm->link)
    op.nth = ++(send ? comm->sends : comm->receives)[peer];
  if (groupDepth == 0) // several ranks: a group of its own
    return linkGroup({op});
  pending.push_back(op);
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
