//===- Communicator.cpp - single-rank and MPI communicators ----------------===//

#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Core/Polling.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "Device/CPU/Kernels/ElementwiseSupport.h"

#ifdef SHARDFLOW_HAVE_MPI
#include <mpi.h>
#endif

using namespace shardflow::runtime;

int shardflow::runtime::launcherWorldSize() {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char *v = std::getenv(var))
      return std::atoi(v);
  return 1;
}

Reduction shardflow::runtime::parseReduction(const std::string &name) {
  if (name == "sum")
    return Reduction::Sum;
  if (name == "prod")
    return Reduction::Prod;
  if (name == "max")
    return Reduction::Max;
  if (name == "min")
    return Reduction::Min;
  throw RuntimeError("unknown reduction '" + name + "' (sum, prod, max or min)");
}

namespace {

bool isHalf(DType t) { return t == DType::F16 || t == DType::BF16; }

/// An f32 copy of an f16/bf16 tensor (values copied only if `copy`).
std::vector<float> widen(const Tensor &t, bool copy) {
  std::vector<float> f(size_t(t.numel()));
  if (copy) {
    const uint16_t *h = t.as<const uint16_t>();
    for (size_t i = 0; i < f.size(); ++i)
      f[i] = t.dtype == DType::F16 ? cpu::ew::halfToFloat(h[i]) : cpu::ew::bf16ToFloat(h[i]);
  }
  return f;
}

void narrow(const std::vector<float> &f, const Tensor &t) {
  uint16_t *h = t.as<uint16_t>();
  for (size_t i = 0; i < f.size(); ++i)
    h[i] = t.dtype == DType::F16 ? cpu::ew::floatToHalf(f[i]) : cpu::ew::floatToBf16(f[i]);
}

/// Runs `fn` on f32 stand-ins when `in`/`out` are f16 or bf16, so that the
/// reduction itself only ever sees f32.
template <typename Fn> void viaF32(const Tensor &in, const Tensor &out, Fn &&fn) {
  if (!isHalf(in.dtype))
    return fn(in, out);
  std::vector<float> fin = widen(in, true), fout = widen(out, false);
  fn(Tensor{fin.data(), DType::F32, in.shape}, Tensor{fout.data(), DType::F32, out.shape});
  narrow(fout, out);
}

void copyBytes(const Tensor &in, const Tensor &out) {
  if (in.bytes() != out.bytes())
    throw RuntimeError("collective: input and output sizes differ");
  if (out.data != in.data)
    std::memcpy(out.data, in.data, in.bytes());
}

class SingleRank final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  // With one member every collective is a copy.
  void allReduce(const Tensor &in, const Tensor &out, Reduction) override {
    copyBytes(in, out);
  }
  void allGather(const Tensor &in, const Tensor &out) override { copyBytes(in, out); }
  void reduceScatter(const Tensor &in, const Tensor &out, Reduction) override {
    copyBytes(in, out);
  }
  void allToAll(const Tensor &in, const Tensor &out) override { copyBytes(in, out); }
  void sendRecv(const Tensor *send, int dst, const Tensor *recv, int src) override {
    if ((send && dst != 0) || (recv && src != 0))
      throw RuntimeError("send/recv with a peer other than rank 0 on a single rank");
    if (send && recv)
      copyBytes(*send, *recv);
    else if (send || recv)
      throw RuntimeError("an unmatched send or recv on a single rank");
  }
  void broadcast(const Tensor &, int) override {}
  bool broadcastWithin(const Tensor &, int, double) override { return true; }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int) override {
    return color < 0 ? nullptr : std::make_unique<SingleRank>();
  }
  [[noreturn]] void abort(const std::string &reason) override {
    std::fprintf(stderr, "shard-run: error: %s\n", reason.c_str());
    std::exit(1);
  }
  const char *kind() const override { return "single rank"; }
};

#ifdef SHARDFLOW_HAVE_MPI
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

/// An MPI communicator: the world, or a group split from it.
class MPIComm final : public Communicator {
public:
  /// The world; initializes MPI.
  MPIComm(int *argc, char ***argv) : comm(MPI_COMM_WORLD), world(true) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      MPI_Init(argc, argv);
    // Errors come back as codes so that they can be reported, then abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
  }
  /// A group split from another communicator; owns `c`.
  explicit MPIComm(MPI_Comm c) : comm(c), world(false) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
  }
  ~MPIComm() override {
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
  void allReduce(const Tensor &in, const Tensor &out, Reduction op) override {
    viaF32(in, out, [&](const Tensor &i, const Tensor &o) {
      check(MPI_Allreduce(i.data == o.data ? MPI_IN_PLACE : i.data, o.data,
                          count(o.numel()), mpiType(o.dtype), mpiOp(op, o.dtype), comm),
            "all_reduce");
    });
  }
  void allGather(const Tensor &in, const Tensor &out) override {
    if (out.bytes() != in.bytes() * size_t(n))
      throw RuntimeError("all_gather: the output is not size() inputs");
    check(MPI_Allgather(in.data, count(int64_t(in.bytes())), MPI_BYTE, out.data,
                        count(int64_t(in.bytes())), MPI_BYTE, comm),
          "all_gather");
  }
  void reduceScatter(const Tensor &in, const Tensor &out, Reduction op) override {
    if (in.numel() != out.numel() * n)
      throw RuntimeError("reduce_scatter: the input is not size() outputs");
    viaF32(in, out, [&](const Tensor &i, const Tensor &o) {
      check(MPI_Reduce_scatter_block(i.data, o.data, count(o.numel()), mpiType(o.dtype),
                                     mpiOp(op, o.dtype), comm),
            "reduce_scatter");
    });
  }
  void allToAll(const Tensor &in, const Tensor &out) override {
    if (in.bytes() != out.bytes() || in.bytes() % size_t(n))
      throw RuntimeError("all_to_all: input and output must be size() equal chunks");
    int chunk = count(int64_t(in.bytes() / size_t(n)));
    check(MPI_Alltoall(in.data, chunk, MPI_BYTE, out.data, chunk, MPI_BYTE, comm),
          "all_to_all");
  }
  void sendRecv(const Tensor *send, int dst, const Tensor *recv, int src) override {
    MPI_Request requests[2];
    int active = 0;
    if (recv && src >= 0)
      check(MPI_Irecv(recv->data, count(int64_t(recv->bytes())), MPI_BYTE, src, 0, comm,
                      &requests[active++]),
            "recv");
    if (send && dst >= 0)
      check(MPI_Isend(send->data, count(int64_t(send->bytes())), MPI_BYTE, dst, 0, comm,
                      &requests[active++]),
            "send");
    check(MPI_Waitall(active, requests, MPI_STATUSES_IGNORE), "send/recv");
  }
  void broadcast(const Tensor &t, int root) override {
    check(MPI_Bcast(t.data, count(int64_t(t.bytes())), MPI_BYTE, root, comm), "broadcast");
  }
  bool broadcastWithin(const Tensor &t, int root, double seconds) override {
    // MPI has no timeouts: a nonblocking broadcast, polled.
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(t.data, count(int64_t(t.bytes())), MPI_BYTE, root, comm, &request),
          "broadcast");
    WaitOutcome outcome = pollUntil(
        [&] {
          int done = 0;
          check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "broadcast");
          return done != 0;
        },
        seconds);
    return outcome == WaitOutcome::Finished;
  }
  void barrier() override { check(MPI_Barrier(comm), "barrier"); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, &sub), "comm_split");
    if (sub == MPI_COMM_NULL)
      return nullptr;
    return std::make_unique<MPIComm>(sub);
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
  /// MPI counts are ints; larger messages are refused rather than truncated.
  static int count(int64_t n) {
    if (n > int64_t(std::numeric_limits<int>::max()))
      throw RuntimeError("a message of " + std::to_string(n) +
                         " elements exceeds MPI's int count");
    return int(n);
  }
  void check(int code, const char *what) {
    if (code == MPI_SUCCESS)
      return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    throw RuntimeError(std::string("MPI ") + what + " failed: " +
                       std::string(text, len));
  }
  MPI_Comm comm;
  bool world;
  int r = 0, n = 1;
};
#endif

} // namespace

std::unique_ptr<Communicator> shardflow::runtime::createSingleRankCommunicator() {
  return std::make_unique<SingleRank>();
}

std::unique_ptr<Communicator>
shardflow::runtime::createWorldCommunicator(int *argc, char ***argv) {
  int launched = launcherWorldSize();
#ifdef SHARDFLOW_HAVE_MPI
  if (launched > 1 || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK"))
    return std::make_unique<MPIComm>(argc, argv);
#else
  (void)argc;
  (void)argv;
  if (launched > 1)
    throw RuntimeError("launched as " + std::to_string(launched) +
                       " ranks, but this shard-run was built without MPI");
#endif
  return std::make_unique<SingleRank>();
}
