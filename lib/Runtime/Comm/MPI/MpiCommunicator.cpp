//===- MpiCommunicator.cpp - collectives over MPI --------------------------===//

#include "shardflow/Runtime/Comm/MPI/MpiCommunicator.h"
#include "shardflow/Runtime/Format/FloatConversion.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

using namespace shardflow::runtime;

namespace {

MPI_Datatype mpiType(DType t) {
  switch (t) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I8:
    return MPI_INT8_T;
  case DType::I16:
    return MPI_INT16_T;
  case DType::I32:
    return MPI_INT32_T;
  case DType::I64:
    return MPI_INT64_T;
  case DType::U8:
  case DType::I1:
    return MPI_UINT8_T;
  case DType::U16:
    return MPI_UINT16_T;
  case DType::U32:
    return MPI_UINT32_T;
  case DType::U64:
    return MPI_UINT64_T;
  default:
    throw RuntimeError(std::string("MPI reductions do not support ") + dtypeName(t));
  }
}

MPI_Op mpiOp(Reduction op, DType t) {
  if (t == DType::I1 && (op == Reduction::Sum || op == Reduction::Prod))
    throw RuntimeError("i1 values can only be reduced with max (or) and min (and)");
  switch (op) {
  case Reduction::Sum:
    return MPI_SUM;
  case Reduction::Prod:
    return MPI_PROD;
  case Reduction::Max:
    return MPI_MAX;
  case Reduction::Min:
    return MPI_MIN;
  }
  return MPI_SUM;
}

bool isHalf(DType t) { return t == DType::F16 || t == DType::BF16; }

bool overlap(const Tensor &a, const Tensor &b) {
  auto x = static_cast<const uint8_t *>(a.data), y = static_cast<const uint8_t *>(b.data);
  return x < y + b.bytes() && y < x + a.bytes() && a.bytes() && b.bytes();
}

void check(int code, const char *what) {
  if (code == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw RuntimeError(std::string("MPI ") + what + " failed: " + std::string(text, size_t(len)));
}

/// MPI counts are ints; larger messages are refused rather than truncated.
int count(int64_t n) {
  if (n > int64_t(std::numeric_limits<int>::max()))
    throw RuntimeError("a message of " + std::to_string(n) + " elements exceeds MPI's int count");
  return int(n);
}

/// The buffers of an operation given up on.
struct Leftovers {
  std::vector<uint8_t> inCopy;
  std::vector<float> wideIn, wideOut;
};

/// Up to two MPI requests, and what must live until they complete: a
/// private copy of an input that overlaps its output, f32 stand-ins of
/// f16/bf16 tensors (rounded into `narrowTo` at completion).
class MpiPending final : public Request::Pending {
public:
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int active = 0;
  const char *what = "";
  std::vector<uint8_t> inCopy;
  std::vector<float> wideIn, wideOut;
  Tensor narrowTo;

  bool test() override {
    int done = 0;
    check(MPI_Testall(active, requests, &done, MPI_STATUSES_IGNORE), what);
    if (done)
      finish();
    return done != 0;
  }
  void wait() override {
    check(MPI_Waitall(active, requests, MPI_STATUSES_IGNORE), what);
    finish();
  }
  ~MpiPending() override {
    // Dropped in flight (given up on: the job is about to end): MPI may
    // still write into the stand-ins, which are left to it rather than
    // freed under it; waiting could hang.
    if (!finished && (!inCopy.empty() || !wideIn.empty()))
      new Leftovers{std::move(inCopy), std::move(wideIn), std::move(wideOut)};
  }

private:
  void finish() {
    if (finished)
      return;
    finished = true;
    if (narrowTo.data)
      convertElements(wideOut.data(), DType::F32, narrowTo.data, narrowTo.dtype, wideOut.size(),
                      what);
  }
  bool finished = false;
};

/// An MPI communicator: the world, or a group split from it.
class MpiCommunicator final : public Communicator {
public:
  /// The world; initializes MPI.
  MpiCommunicator(int *argc, char ***argv) : comm(MPI_COMM_WORLD), world(true) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      MPI_Init(argc, argv);
    // Errors come back as codes so that they can be reported, then abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    describe();
  }
  /// A group split from another communicator; owns `c`.
  explicit MpiCommunicator(MPI_Comm c) : comm(c), world(false) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    describe();
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return;
    if (world)
      MPI_Finalize();
    else
      MPI_Comm_free(&comm);
  }
  int rank() const override { return r; }
  int size() const override { return n; }
  const std::vector<int> &worldRanks() const override { return members; }

  Request startAllReduce(const Tensor &in, const Tensor &out, Reduction op) override {
    auto p = std::make_unique<MpiPending>();
    p->what = "all_reduce";
    Tensor i = in, o = out;
    const void *send = separate(*p, i, o, i.data == o.data);
    if (isHalf(out.dtype)) {
      widen(*p, i, o);
      send = send == MPI_IN_PLACE ? MPI_IN_PLACE : p->wideIn.data();
      if (send == MPI_IN_PLACE)
        std::copy(p->wideIn.begin(), p->wideIn.end(), p->wideOut.begin());
    }
    check(MPI_Iallreduce(send, o.data, count(o.numel()), mpiType(o.dtype), mpiOp(op, o.dtype), comm,
                         &p->requests[p->active++]),
          p->what);
    return Request(std::move(p));
  }

  Request startAllGather(const Tensor &in, const Tensor &out) override {
    if (out.bytes() != in.bytes() * size_t(n))
      throw RuntimeError("all_gather: the output is not size() inputs");
    auto p = std::make_unique<MpiPending>();
    p->what = "all_gather";
    Tensor i = in;
    // This member's part of the output already in place: MPI_IN_PLACE.
    bool own = in.data == out.as<uint8_t>() + size_t(r) * in.bytes();
    const void *send = separate(*p, i, out, own);
    int bytes = count(int64_t(in.bytes()));
    check(MPI_Iallgather(send, bytes, MPI_BYTE, out.data, bytes, MPI_BYTE, comm,
                         &p->requests[p->active++]),
          p->what);
    return Request(std::move(p));
  }

  Request startReduceScatter(const Tensor &in, const Tensor &out, Reduction op) override {
    if (in.numel() != out.numel() * n)
      throw RuntimeError("reduce_scatter: the input is not size() outputs");
    auto p = std::make_unique<MpiPending>();
    p->what = "reduce_scatter";
    Tensor i = in, o = out;
    separate(*p, i, o, false);
    if (isHalf(out.dtype))
      widen(*p, i, o);
    check(MPI_Ireduce_scatter_block(i.data, o.data, count(o.numel()), mpiType(o.dtype),
                                    mpiOp(op, o.dtype), comm, &p->requests[p->active++]),
          p->what);
    return Request(std::move(p));
  }

  Request startAllToAll(const Tensor &in, const Tensor &out) override {
    if (in.bytes() != out.bytes() || in.bytes() % size_t(n))
      throw RuntimeError("all_to_all: input and output must be size() equal chunks");
    auto p = std::make_unique<MpiPending>();
    p->what = "all_to_all";
    Tensor i = in;
    separate(*p, i, out, false);
    int chunk = count(int64_t(in.bytes() / size_t(n)));
    check(MPI_Ialltoall(i.data, chunk, MPI_BYTE, out.data, chunk, MPI_BYTE, comm,
                        &p->requests[p->active++]),
          p->what);
    return Request(std::move(p));
  }

  Request startSendRecv(const Tensor *send, int dst, const Tensor *recv, int src) override {
    auto p = std::make_unique<MpiPending>();
    p->what = "send/recv";
    if (recv && src >= 0)
      check(MPI_Irecv(recv->data, count(int64_t(recv->bytes())), MPI_BYTE, src, 0, comm,
                      &p->requests[p->active++]),
            "recv");
    if (send && dst >= 0)
      check(MPI_Isend(send->data, count(int64_t(send->bytes())), MPI_BYTE, dst, 0, comm,
                      &p->requests[p->active++]),
            "send");
    return Request(std::move(p));
  }

  Request startSend(const Tensor &t, int dst, int tag) override {
    auto p = std::make_unique<MpiPending>();
    p->what = "send";
    check(MPI_Isend(t.data, count(int64_t(t.bytes())), MPI_BYTE, dst, tag, comm,
                    &p->requests[p->active++]),
          p->what);
    return Request(std::move(p));
  }

  Request startRecv(const Tensor &t, int src, int tag) override {
    auto p = std::make_unique<MpiPending>();
    p->what = "recv";
    check(MPI_Irecv(t.data, count(int64_t(t.bytes())), MPI_BYTE, src, tag, comm,
                    &p->requests[p->active++]),
          p->what);
    return Request(std::move(p));
  }

  Request startBroadcast(const Tensor &t, int root) override {
    auto p = std::make_unique<MpiPending>();
    p->what = "broadcast";
    check(MPI_Ibcast(t.data, count(int64_t(t.bytes())), MPI_BYTE, root, comm,
                     &p->requests[p->active++]),
          p->what);
    return Request(std::move(p));
  }

  void barrier() override { check(MPI_Barrier(comm), "barrier"); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, &sub), "comm_split");
    if (sub == MPI_COMM_NULL)
      return nullptr;
    return std::make_unique<MpiCommunicator>(sub);
  }

  [[noreturn]] void abort(const std::string &reason) override {
    int worldRank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
    std::fprintf(stderr, "shard-run: error: rank %d: %s\n", worldRank, reason.c_str());
    std::fflush(stderr);
    // MPI_Abort makes the launcher end every rank of the job.
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
  }

  const char *kind() const override { return "MPI"; }

private:
  void describe() {
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    members.resize(size_t(n));
    std::iota(members.begin(), members.end(), 0);
    if (world)
      return;
    MPI_Group mine = MPI_GROUP_NULL, everyone = MPI_GROUP_NULL;
    MPI_Comm_group(comm, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &everyone);
    std::vector<int> local(members);
    MPI_Group_translate_ranks(mine, n, local.data(), everyone, members.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&everyone);
  }

  /// MPI reads `in` while it writes `out`: an input that overlaps its
  /// output is copied aside first, unless `inPlace` (then MPI_IN_PLACE).
  /// Returns the send buffer; `in` is updated to the copy.
  const void *separate(MpiPending &p, Tensor &in, const Tensor &out, bool inPlace) {
    if (inPlace)
      return MPI_IN_PLACE;
    if (overlap(in, out)) {
      p.inCopy.assign(in.as<uint8_t>(), in.as<uint8_t>() + in.bytes());
      in.data = p.inCopy.data();
    }
    return in.data;
  }

  /// f32 stand-ins for f16/bf16 `in` and `out`; `in` and `out` then name
  /// them, and the result is rounded into the original `out` at completion.
  void widen(MpiPending &p, Tensor &in, Tensor &out) {
    p.wideIn.resize(size_t(in.numel()));
    p.wideOut.resize(size_t(out.numel()));
    convertElements(in.data, in.dtype, p.wideIn.data(), DType::F32, p.wideIn.size(), p.what);
    p.narrowTo = out;
    in = Tensor{p.wideIn.data(), DType::F32, in.shape};
    out = Tensor{p.wideOut.data(), DType::F32, out.shape};
  }

  MPI_Comm comm;
  bool world;
  int r = 0, n = 1;
  std::vector<int> members;
};

} // namespace

std::unique_ptr<Communicator> shardflow::runtime::createMpiWorld(int *argc, char ***argv) {
  return std::make_unique<MpiCommunicator>(argc, argv);
}
