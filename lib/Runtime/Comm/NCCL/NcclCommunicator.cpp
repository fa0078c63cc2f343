//===- NcclCommunicator.cpp - collectives over NCCL ------------------------===//
//
// A world and the groups split from it share one Family: the stream they
// enqueue on, the timeout, a pool of the events that are their requests'
// handles, and the list of live NCCL communicators, so that an error or
// timeout anywhere aborts all of them before the job ends.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Comm/NCCL/NcclCommunicator.h"
#include "shardflow/Runtime/Device/CUDA/CudaLibraries.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {

void checkCu(CUresult status, const char *call) {
  if (status != CUDA_SUCCESS)
    throw RuntimeError(std::string(call) + " failed: " + describe(status));
}

void checkNccl(ncclResult_t status, const char *call, ncclComm_t comm) {
  if (status == ncclSuccess)
    return;
  // NCCL keeps the text of its last error; `comm` may be null (unused).
  std::string detail;
  if (const char *last = nccl().ncclGetLastError(comm))
    if (*last)
      detail = std::string(": ") + last;
  throw RuntimeError(std::string(call) + " failed: " + describe(status) + detail);
}

ncclRedOp_t ncclOp(Reduction r) {
  switch (r) {
  case Reduction::Sum:
    return ncclSum;
  case Reduction::Prod:
    return ncclProd;
  case Reduction::Max:
    return ncclMax;
  case Reduction::Min:
    return ncclMin;
  }
  return ncclSum;
}

/// NCCL's type for reductions of `t`; throws for the types it lacks.
ncclDataType_t ncclReduceType(DType t, Reduction r) {
  switch (t) {
  case DType::F32:
    return ncclFloat32;
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F64:
    return ncclFloat64;
  case DType::I8:
    return ncclInt8;
  case DType::I32:
    return ncclInt32;
  case DType::I64:
    return ncclInt64;
  case DType::U8:
    return ncclUint8;
  case DType::U32:
    return ncclUint32;
  case DType::U64:
    return ncclUint64;
  case DType::I1:
    if (r == Reduction::Sum || r == Reduction::Prod)
      throw RuntimeError("i1 values can only be reduced with max (or) and min (and)");
    return ncclUint8;
  default:
    throw RuntimeError(std::string("NCCL cannot reduce ") + dtypeName(t) + " values");
  }
}

class NcclCommunicator;

/// What a world and its groups share.
struct Family {
  Communicator *worldBootstrap;
  CUstream stream;
  NcclSettings settings;
  std::vector<ncclComm_t> live;
  std::vector<CUevent> events, freeEvents;

  Family(Communicator &bootstrap, CUstream stream, NcclSettings settings)
      : worldBootstrap(&bootstrap), stream(stream), settings(std::move(settings)) {}
  ~Family() {
    for (CUevent e : events)
      driver().cuEventDestroy(e);
  }

  /// An event for a request; back in the pool when the request goes. (A
  /// CUDA graph that captured a record of it keeps recording it, so events
  /// live as long as the family.)
  CUevent takeEvent() {
    if (freeEvents.empty()) {
      CUevent e = nullptr;
      checkCu(driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      events.push_back(e);
      freeEvents.push_back(e);
    }
    CUevent e = freeEvents.back();
    freeEvents.pop_back();
    return e;
  }
  void giveBack(CUevent e) { freeEvents.push_back(e); }

  void forget(ncclComm_t c) { live.erase(std::remove(live.begin(), live.end(), c), live.end()); }

  /// Aborts every communicator (ncclCommAbort) and ends the job with
  /// `reason` (the MPI communicator's abort names this rank in front of it).
  [[noreturn]] void abortJob(const std::string &reason) {
    for (ncclComm_t c : std::exchange(live, {}))
      nccl().ncclCommAbort(c);
    worldBootstrap->abort(reason);
    std::exit(1); // abort() does not return; this tells the compiler so
  }

  void checkAsyncErrors(const std::string &during) {
    const Nccl &nc = nccl();
    for (ncclComm_t c : live) {
      ncclResult_t async = ncclSuccess;
      nc.ncclCommGetAsyncError(c, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        const char *last = nc.ncclGetLastError(c);
        abortJob("NCCL failed during " + during + ": " + describe(async) +
                 (last && *last ? std::string(": ") + last : ""));
      }
    }
  }

  /// Polls `c` until its pending work leaves ncclInProgress, within the
  /// timeout; `status` gets its final state.
  WaitOutcome settle(ncclComm_t c, ncclResult_t &status) {
    const Nccl &nc = nccl();
    return pollUntil(
        [&] {
          ncclResult_t query = nc.ncclCommGetAsyncError(c, &status);
          if (query != ncclSuccess)
            status = query;
          return status != ncclInProgress;
        },
        settings.timeoutSeconds);
  }

  /// Checks the result of an NCCL call on `c`: ncclInProgress (the call
  /// goes on in the background) is waited for within the timeout, and the
  /// job ended when it does not finish; other failures throw RuntimeError.
  void done(ncclResult_t status, const char *call, ncclComm_t c) {
    if (status == ncclInProgress && c && settle(c, status) == WaitOutcome::TimedOut)
      abortJob(std::string(call) + " did not finish within " +
               secondsText(settings.timeoutSeconds) + " (" + settings.timeoutFlag +
               "): NCCL is waiting for a peer. Check that every rank started, and NCCL's "
               "network settings (NCCL_SOCKET_IFNAME, NCCL_IB_HCA; NCCL_DEBUG=INFO shows "
               "where it stopped)");
    checkNccl(status, call, c);
  }
};

/// A request: the event recorded after the operation on the stream.
class NcclPending final : public Request::Pending {
public:
  NcclPending(std::shared_ptr<Family> family, CUevent event, const char *what)
      : family(std::move(family)), recorded(event), what(what) {}
  ~NcclPending() override { family->giveBack(recorded); }
  bool test() override {
    family->checkAsyncErrors(what);
    CUresult r = driver().cuEventQuery(recorded);
    if (r == CUDA_ERROR_NOT_READY)
      return false;
    if (r != CUDA_SUCCESS)
      // A fault in a kernel: the context is lost, and so is the job.
      family->abortJob(std::string("the GPU failed while running ") + what + ": " + describe(r));
    return true;
  }
  void *event() const override { return recorded; }

private:
  std::shared_ptr<Family> family;
  CUevent recorded;
  const char *what;
};

/// Runs `create`, naming what was being created in its error.
template <typename Fn> auto creating(Fn &&create) {
  try {
    return create();
  } catch (const std::exception &e) {
    throw RuntimeError(std::string("creating the NCCL communicators: ") + e.what() +
                       " (several ranks on one GPU are not supported by NCCL; check "
                       "--device and the launcher's GPU binding)");
  }
}

class NcclCommunicator final : public Communicator {
public:
  /// A communicator of `members`' ranks: a collective call on them.
  NcclCommunicator(std::shared_ptr<Family> family, Communicator &members,
                   std::unique_ptr<Communicator> owned = nullptr)
      : family(std::move(family)), bootstrap(&members), ownBootstrap(std::move(owned)),
        r(members.rank()), n(members.size()) {
    init();
  }
  ~NcclCommunicator() override {
    if (!comm)
      return;
    family->forget(comm);
    // Unwinding from an error (a failed status check, a failed rank): the
    // other ranks may be inside a collective, so the communicator is
    // aborted; finalizing would wait for them.
    if (std::uncaught_exceptions() > 0)
      nccl().ncclCommAbort(comm);
    else
      release();
  }

  int rank() const override { return r; }
  int size() const override { return n; }
  const std::vector<int> &worldRanks() const override { return bootstrap->worldRanks(); }

  Request startAllReduce(const Tensor &in, const Tensor &out, Reduction op) override {
    ncclDataType_t type = ncclReduceType(in.dtype, op);
    family->done(nccl().ncclAllReduce(in.data, out.data, size_t(in.numel()), type, ncclOp(op), comm,
                                      family->stream),
                 "ncclAllReduce", comm);
    return enqueued("ncclAllReduce");
  }
  Request startAllGather(const Tensor &in, const Tensor &out) override {
    if (out.bytes() != in.bytes() * size_t(n))
      throw RuntimeError("all_gather: the output is not size() inputs");
    family->done(
        nccl().ncclAllGather(in.data, out.data, in.bytes(), ncclUint8, comm, family->stream),
        "ncclAllGather", comm);
    return enqueued("ncclAllGather");
  }
  Request startReduceScatter(const Tensor &in, const Tensor &out, Reduction op) override {
    if (in.numel() != out.numel() * n)
      throw RuntimeError("reduce_scatter: the input is not size() outputs");
    ncclDataType_t type = ncclReduceType(in.dtype, op);
    family->done(nccl().ncclReduceScatter(in.data, out.data, size_t(out.numel()), type, ncclOp(op),
                                          comm, family->stream),
                 "ncclReduceScatter", comm);
    return enqueued("ncclReduceScatter");
  }
  Request startAllToAll(const Tensor &in, const Tensor &out) override {
    if (in.bytes() != out.bytes() || in.bytes() % size_t(n))
      throw RuntimeError("all_to_all: input and output must be size() equal chunks");
    // NCCL has no all-to-all: a group of sends and receives, one pair per
    // member.
    const Nccl &nc = nccl();
    size_t piece = in.bytes() / size_t(n);
    family->done(nc.ncclGroupStart(), "ncclGroupStart", nullptr);
    for (int j = 0; j < n; ++j) {
      family->done(nc.ncclSend(in.as<uint8_t>() + size_t(j) * piece, piece, ncclUint8, j, comm,
                               family->stream),
                   "ncclSend", comm);
      family->done(nc.ncclRecv(out.as<uint8_t>() + size_t(j) * piece, piece, ncclUint8, j, comm,
                               family->stream),
                   "ncclRecv", comm);
    }
    family->done(nc.ncclGroupEnd(), "ncclGroupEnd", comm);
    return enqueued("all_to_all (ncclSend/ncclRecv)");
  }
  Request startSendRecv(const Tensor *send, int dst, const Tensor *recv, int src) override {
    const Nccl &nc = nccl();
    family->done(nc.ncclGroupStart(), "ncclGroupStart", nullptr);
    if (send && dst >= 0)
      family->done(nc.ncclSend(send->data, send->bytes(), ncclUint8, dst, comm, family->stream),
                   "ncclSend", comm);
    if (recv && src >= 0)
      family->done(nc.ncclRecv(recv->data, recv->bytes(), ncclUint8, src, comm, family->stream),
                   "ncclRecv", comm);
    family->done(nc.ncclGroupEnd(), "ncclGroupEnd", comm);
    return enqueued("ncclSend/ncclRecv");
  }
  Request startBroadcast(const Tensor &t, int root) override {
    family->done(
        nccl().ncclBroadcast(t.data, t.data, t.bytes(), ncclUint8, root, comm, family->stream),
        "ncclBroadcast", comm);
    return enqueued("ncclBroadcast");
  }

  void barrier() override {
    // Every member's work so far has completed, then the bootstrap's
    // barrier (NCCL has none).
    checkCu(driver().cuStreamSynchronize(family->stream), "cuStreamSynchronize");
    bootstrap->barrier();
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return creating([&]() -> std::unique_ptr<Communicator> {
      std::unique_ptr<Communicator> members = bootstrap->split(color, key);
      if (!members)
        return nullptr;
      Communicator &m = *members;
      return std::make_unique<NcclCommunicator>(family, m, std::move(members));
    });
  }

  [[noreturn]] void abort(const std::string &reason) override { family->abortJob(reason); }
  const char *kind() const override { return "NCCL"; }
  void checkBackgroundErrors(const std::string &during) override {
    family->checkAsyncErrors(during);
  }

  /// The world's health check: one all_reduce of 1 over every rank, so a
  /// broken NCCL setup fails at load with its own message, not in the
  /// middle of a program (and a single-rank run exercises NCCL too).
  void checkHealth() {
    const CudaDriver &d = driver();
    CUdeviceptr probe = 0;
    checkCu(d.cuMemAlloc(&probe, 256), "cuMemAlloc (the NCCL health check)");
    float one = 1.0f, sum = 0.0f;
    checkCu(d.cuMemcpyHtoDAsync(probe, &one, sizeof(one), family->stream), "cuMemcpyHtoDAsync");
    auto p = reinterpret_cast<void *>(probe);
    Request request =
        startAllReduce(Tensor{p, DType::F32, {1}}, Tensor{p, DType::F32, {1}}, Reduction::Sum);
    {
      // The request names the check in an asynchronous error's message.
      const char *what = "the NCCL health check";
      if (pollUntil(
              [&] {
                family->checkAsyncErrors(what);
                return request.test();
              },
              family->settings.timeoutSeconds) == WaitOutcome::TimedOut)
        family->abortJob(std::string(what) + " did not finish within " +
                         secondsText(family->settings.timeoutSeconds) + " (" +
                         family->settings.timeoutFlag +
                         "): a collective is probably waiting for a rank that never joined it");
    }
    checkCu(d.cuMemcpyDtoH(&sum, probe, sizeof(sum)), "cuMemcpyDtoH");
    d.cuMemFree(probe);
    if (sum != float(n))
      throw RuntimeError("the NCCL health check (an all_reduce of 1 over " + std::to_string(n) +
                         " rank(s)) gave " + std::to_string(sum));
  }

private:
  void init() {
    const Nccl &nc = nccl();
    const NcclSettings &s = family->settings;
    ncclUniqueId id{};
    if (r == 0)
      checkNccl(nc.ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
    if (!bootstrap->broadcastWithin(Tensor{&id, DType::U8, {int64_t(sizeof(id))}}, 0,
                                    s.timeoutSeconds))
      family->abortJob("waited " + secondsText(s.timeoutSeconds) + " (" + s.timeoutFlag + ") " +
                       (r == 0 ? std::string("for the other ranks to take NCCL's unique id")
                               : "for rank " + std::to_string(bootstrap->worldRanks().at(0)) +
                                     " to send NCCL's unique id") +
                       " over " + bootstrap->kind() + " (a group of " + std::to_string(n) +
                       " ranks): some rank of the group never got there; its own error, if "
                       "any, says why (a stuck weight load, a GPU that does not answer)");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t status = nc.ncclCommInitRankConfig(&comm, n, id, r, &config);
    if (status != ncclSuccess && status != ncclInProgress) {
      // No communicator to ask for details or to wait on.
      if (comm)
        nc.ncclCommAbort(comm);
      comm = nullptr;
      checkNccl(status, "ncclCommInitRankConfig", nullptr);
    }
    family->live.push_back(comm);
    family->done(status, "ncclCommInitRankConfig (creating the communicator)", comm);
  }

  /// Finalizes and destroys the communicator, aborting it when that fails.
  void release() {
    // Finalizing flushes the communicator's work; it may go on in the
    // background like everything else on a nonblocking communicator. A
    // communicator that cannot be finalized is aborted instead (its
    // resources are freed either way).
    const Nccl &nc = nccl();
    ncclResult_t status = nc.ncclCommFinalize(comm);
    if (status == ncclInProgress && family->settle(comm, status) == WaitOutcome::TimedOut)
      status = ncclInternalError;
    if (status == ncclSuccess)
      nc.ncclCommDestroy(comm);
    else
      nc.ncclCommAbort(comm);
  }

  Request enqueued(const char *what) {
    CUevent e = family->takeEvent();
    CUresult status = driver().cuEventRecord(e, family->stream);
    if (status != CUDA_SUCCESS) {
      family->giveBack(e);
      checkCu(status, "cuEventRecord");
    }
    return Request(std::make_unique<NcclPending>(family, e, what));
  }

  std::shared_ptr<Family> family;
  Communicator *bootstrap;
  std::unique_ptr<Communicator> ownBootstrap; // a group's members
  ncclComm_t comm = nullptr;
  int r, n;
};

} // namespace

std::unique_ptr<Communicator> shardflow::runtime::createNcclWorld(Communicator &bootstrap,
                                                                  void *stream,
                                                                  const NcclSettings &settings) {
  nccl(); // loaded (or the reason it cannot be) before anything else
  auto family = std::make_shared<Family>(bootstrap, static_cast<CUstream>(stream), settings);
  auto world = creating([&] { return std::make_unique<NcclCommunicator>(family, bootstrap); });
  world->checkHealth();
  return world;
}
