//===- Communicator.cpp - requests, the single rank, the launched world ----===//

#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Comm/MPI/MpiCommunicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

using namespace shardflow::runtime;

//===----------------------------------------------------------------------===//
// Requests
//===----------------------------------------------------------------------===//

void Request::Pending::wait() {
  while (!test())
    std::this_thread::yield();
}

bool Request::test() {
  if (pending && pending->test())
    pending.reset();
  return !pending;
}

void Request::wait() {
  if (!pending)
    return;
  pending->wait();
  pending.reset();
}

WaitOutcome Request::waitWithin(double seconds) {
  if (!pending)
    return WaitOutcome::Finished;
  return pollUntil([&] { return test(); }, seconds);
}

Request Communicator::startSend(const Tensor &, int, int) {
  throw RuntimeError(std::string("tagged messages between ranks need MPI; this is ") + kind());
}

Request Communicator::startRecv(const Tensor &, int, int) {
  throw RuntimeError(std::string("tagged messages between ranks need MPI; this is ") + kind());
}

bool Communicator::broadcastWithin(const Tensor &t, int root, double seconds) {
  return startBroadcast(t, root).waitWithin(seconds) == WaitOutcome::Finished;
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

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

std::string shardflow::runtime::rankList(const std::vector<int> &ranks) {
  std::string text;
  for (int r : ranks)
    text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

//===----------------------------------------------------------------------===//
// A single rank
//===----------------------------------------------------------------------===//

namespace {

void copyBytes(const Tensor &in, const Tensor &out) {
  if (in.bytes() != out.bytes())
    throw RuntimeError("collective: input and output sizes differ");
  if (out.data != in.data)
    std::memmove(out.data, in.data, in.bytes());
}

/// With one member every collective is a copy, done before start* returns.
class SingleRank final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int> &worldRanks() const override { return members; }
  Request startAllReduce(const Tensor &in, const Tensor &out, Reduction) override {
    copyBytes(in, out);
    return {};
  }
  Request startAllGather(const Tensor &in, const Tensor &out) override {
    copyBytes(in, out);
    return {};
  }
  Request startReduceScatter(const Tensor &in, const Tensor &out, Reduction) override {
    copyBytes(in, out);
    return {};
  }
  Request startAllToAll(const Tensor &in, const Tensor &out) override {
    copyBytes(in, out);
    return {};
  }
  Request startSendRecv(const Tensor *send, int dst, const Tensor *recv, int src) override {
    if ((send && dst != 0) || (recv && src != 0))
      throw RuntimeError("send/recv with a peer other than rank 0 on a single rank");
    if (send && recv)
      copyBytes(*send, *recv);
    else if (send || recv)
      throw RuntimeError("an unmatched send or recv on a single rank");
    return {};
  }
  Request startBroadcast(const Tensor &, int root) override {
    if (root != 0)
      throw RuntimeError("broadcast from rank " + std::to_string(root) + " on a single rank");
    return {};
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int) override {
    return color < 0 ? nullptr : std::make_unique<SingleRank>();
  }
  [[noreturn]] void abort(const std::string &reason) override {
    std::fprintf(stderr, "shard-run: error: %s\n", reason.c_str());
    std::exit(1);
  }
  const char *kind() const override { return "single rank"; }

private:
  std::vector<int> members{0};
};

} // namespace

std::unique_ptr<Communicator> shardflow::runtime::createSingleRankCommunicator() {
  return std::make_unique<SingleRank>();
}

std::unique_ptr<Communicator> shardflow::runtime::createWorldCommunicator(int *argc, char ***argv) {
  int launched = launcherWorldSize();
#ifdef SHARDFLOW_HAVE_MPI
  if (launched > 1 || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK"))
    return createMpiWorld(argc, argv);
#else
  (void)argc;
  (void)argv;
  if (launched > 1)
    throw RuntimeError("launched as " + std::to_string(launched) +
                       " ranks, but this shard-run was built without MPI");
#endif
  return std::make_unique<SingleRank>();
}
