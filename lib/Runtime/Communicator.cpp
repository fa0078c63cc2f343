//===- Communicator.cpp - single-rank and MPI communicators ----------------===//

#include "shardflow/Runtime/Communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

namespace {

class SingleRank final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allReduceSum(const Tensor &) override {}
  void allGather(const Tensor &in, const Tensor &out) override {
    std::memcpy(out.data, in.data, in.bytes());
  }
  void broadcast(const Tensor &, int) override {}
  void send(const Tensor &, int) override {
    throw RuntimeError("send on a single rank");
  }
  void recv(const Tensor &, int) override {
    throw RuntimeError("recv on a single rank");
  }
  void barrier() override {}
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
  case DType::I32:
    return MPI_INT32_T;
  case DType::I64:
    return MPI_INT64_T;
  case DType::U8:
  case DType::I8:
  case DType::I1:
    return MPI_UINT8_T;
  default:
    throw RuntimeError(std::string("MPI reductions do not support ") + dtypeName(t));
  }
}

class MPIWorld final : public Communicator {
public:
  MPIWorld(int *argc, char ***argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      MPI_Init(argc, argv);
    // Errors come back as codes so that they can be reported, then abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
  }
  ~MPIWorld() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
  }
  int rank() const override { return r; }
  int size() const override { return n; }
  void allReduceSum(const Tensor &t) override {
    check(MPI_Allreduce(MPI_IN_PLACE, t.data, int(t.numel()), mpiType(t.dtype),
                        MPI_SUM, MPI_COMM_WORLD),
          "all_reduce");
  }
  void allGather(const Tensor &in, const Tensor &out) override {
    check(MPI_Allgather(in.data, int(in.bytes()), MPI_BYTE, out.data,
                        int(in.bytes()), MPI_BYTE, MPI_COMM_WORLD),
          "all_gather");
  }
  void broadcast(const Tensor &t, int root) override {
    check(MPI_Bcast(t.data, int(t.bytes()), MPI_BYTE, root, MPI_COMM_WORLD),
          "broadcast");
  }
  void send(const Tensor &t, int peer) override {
    check(MPI_Send(t.data, int(t.bytes()), MPI_BYTE, peer, 0, MPI_COMM_WORLD),
          "send");
  }
  void recv(const Tensor &t, int peer) override {
    check(MPI_Recv(t.data, int(t.bytes()), MPI_BYTE, peer, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE),
          "recv");
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }
  [[noreturn]] void abort(const std::string &reason) override {
    std::fprintf(stderr, "shard-run: error: rank %d: %s\n", r, reason.c_str());
    std::fflush(stderr);
    // MPI_Abort makes the launcher end every rank of the job.
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
  }
  const char *kind() const override { return "MPI"; }

private:
  void check(int code, const char *what) {
    if (code == MPI_SUCCESS)
      return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    throw RuntimeError(std::string("MPI ") + what + " failed: " +
                       std::string(text, len));
  }
  int r = 0, n = 1;
};
#endif

} // namespace

std::unique_ptr<Communicator>
shardflow::runtime::createWorldCommunicator(int *argc, char ***argv) {
  int launched = launcherWorldSize();
#ifdef SHARDFLOW_HAVE_MPI
  if (launched > 1 || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK"))
    return std::make_unique<MPIWorld>(argc, argv);
#else
  (void)argc;
  (void)argv;
  if (launched > 1)
    throw RuntimeError("launched as " + std::to_string(launched) +
                       " ranks, but this shard-run was built without MPI");
#endif
  return std::make_unique<SingleRank>();
}
