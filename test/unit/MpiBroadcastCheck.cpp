//===- MpiBroadcastCheck.cpp - Communicator::broadcastWithin under mpirun -===//
//
// shardflow-mpi-check MODE, run by python/tests/test_mpi.py under
// `mpirun -np 2` (MPI needs real processes, which gtest does not start):
//
//   in-time    both ranks join at once; rank 1 must receive rank 0's value.
//   late-root  rank 0 joins after 3 s; rank 1 gives up after 0.3 s, says
//              how long it waited, and aborts the job, as shard-run does
//              when NCCL's unique id does not arrive.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Comm/Communicator.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <thread>

using namespace shardflow::runtime;

int main(int argc, char **argv) {
  std::unique_ptr<Communicator> comm = createWorldCommunicator(&argc, &argv);
  std::string mode = argc > 1 ? argv[1] : "";
  if ((mode != "in-time" && mode != "late-root") || comm->size() != 2) {
    std::fprintf(stderr, "usage: mpirun -np 2 shardflow-mpi-check in-time|late-root\n");
    return 2;
  }
  bool late = mode == "late-root";
  uint64_t value = comm->rank() == 0 ? 0x5eed5eedULL : 0;
  if (late && comm->rank() == 0)
    std::this_thread::sleep_for(std::chrono::seconds(3));
  auto start = std::chrono::steady_clock::now();
  bool ok = comm->broadcastWithin(Tensor{&value, DType::U8, {int64_t(sizeof(value))}}, 0,
                                  late ? 0.3 : 30.0);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d: %s after %.3f s, value %" PRIx64 "\n", comm->rank(),
              ok ? "finished" : "timed out", waited, value);
  std::fflush(stdout);
  if (!ok)
    comm->abort("the broadcast timed out");
  comm->barrier();
  return 0;
}
