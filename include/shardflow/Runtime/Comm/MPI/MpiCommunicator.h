//===- MpiCommunicator.h - collectives over MPI -----------------*- C++ -*-===//
//
// The world mpirun or srun started, and the groups split from it: host
// buffers, MPI's nonblocking collectives (MPI_Iallreduce, ...) behind each
// start* (Communicator.h), polled with MPI_Test. f16 and bf16 are reduced
// in f32 (MPI has no half types) and rounded once when the request
// completes. Errors come back from MPI as codes and are thrown as
// RuntimeError naming the call; abort() is MPI_Abort, which makes the
// launcher end every rank.
//
// Built only where CMake finds MPI (SHARDFLOW_HAVE_MPI); without it
// createWorldCommunicator refuses a launch of several ranks.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_COMM_MPI_MPICOMMUNICATOR_H
#define SHARDFLOW_RUNTIME_COMM_MPI_MPICOMMUNICATOR_H

#include "shardflow/Runtime/Comm/Communicator.h"

#include <memory>

namespace shardflow::runtime {

/// The MPI world: initializes MPI (once), finalized with the communicator.
std::unique_ptr<Communicator> createMpiWorld(int *argc, char ***argv);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_COMM_MPI_MPICOMMUNICATOR_H
