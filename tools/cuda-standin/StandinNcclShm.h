//===- StandinNcclShm.h - NCCL ranks in other processes ----------*- C++
//-*-===//
//
// A communicator of several ranks in the stand-in NCCL: one process per
// rank (as shard-run runs under mpirun), meeting in a folder named by the
// unique id under SHARDFLOW_STANDIN_NCCL_DIR (default /dev/shm, else
// $TMPDIR or /tmp). A control file, mapped by every rank, holds atomic
// counters; data goes through files, one per rank for collectives and one
// per ordered pair of ranks for sends.
//
// A collective is numbered on each rank in call order (NCCL requires every
// rank to call the collectives of a communicator in one order). Rank r
// posts its contribution to collective s (its send buffer into its file,
// what it called into its slot) once every rank has finished collective
// s - 1, so nobody still reads its file; a rank finishes s once every rank
// has posted s, reading what it needs. The i-th send from r to p waits for
// p to have taken the (i-1)-th. Every wait is a poll: the caller's stream
// operation reports "not yet" and the stand-in driver runs other streams.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TOOLS_CUDA_STANDIN_STANDINNCCLSHM_H
#define SHARDFLOW_TOOLS_CUDA_STANDIN_STANDINNCCLSHM_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace shardflow::standin::nccl {

/// What a rank called, compared across the ranks of a collective.
struct Call {
  int32_t kind = 0; // Kind
  int32_t type = 0; // ncclDataType_t
  int32_t op = 0;   // ncclRedOp_t (reductions); the root (Broadcast)
  int32_t unused = 0;
  uint64_t count = 0; // the call's count argument
};

enum Kind : int32_t { AllReduce = 1, AllGather, ReduceScatter, Broadcast };

/// Names a Call for messages ("all_reduce of 12 ncclFloat32 (sum)").
std::string describe(const Call &call);

class Link {
public:
  /// Joins communicator `id` as `rank` of `nranks`, running on `device` of
  /// this host. Throws std::runtime_error when the folder or its files
  /// cannot be made, or the communicator exists with another size, or
  /// `rank` has joined already.
  Link(const std::string &id, int nranks, int rank, int device);
  /// Leaves; the last rank to leave removes the folder.
  ~Link();
  Link(const Link &) = delete;
  Link &operator=(const Link &) = delete;

  int size() const { return nranks; }
  int rank() const { return me; }

  /// Whether every rank has joined (creation is complete). Throws when two
  /// ranks run on the same device of one host, as NCCL refuses.
  bool joined();
  /// A rank that has aborted the communicator, or -1.
  int abortedPeer() const;
  /// Leaves at once: peers waiting on this rank see abortedPeer().
  void abort();

  /// Collective `seq` (1, 2, ... in call order): posts this rank's call
  /// and `bytes` of data; false while a rank has not finished seq - 1.
  bool post(uint64_t seq, const Call &call, const void *data, size_t bytes);
  /// Whether every rank has posted `seq`; throws when their calls differ.
  bool allPosted(uint64_t seq);
  /// Reads `bytes` at `offset` of `peer`'s contribution to the collective
  /// every rank has posted.
  void read(int peer, size_t offset, void *out, size_t bytes);
  /// This rank has read all it needs of collective `seq`.
  void finish(uint64_t seq);
  /// The ranks that have not posted `seq` yet ("1, 3"), for messages.
  std::string missing(uint64_t seq) const;

  /// The `nth` (1, 2, ...) send to `peer`: false while `peer` has not
  /// taken the previous one.
  bool send(int peer, uint64_t nth, const void *data, size_t bytes);
  /// The `nth` receive from `peer`: false until it has sent; throws when
  /// its size differs from `bytes`.
  bool receive(int peer, uint64_t nth, void *out, size_t bytes);

private:
  void join(int device);
  void release();
  struct Slot;
  struct Pair;
  Slot &slot(int r) const;
  Pair &pair(int from, int to) const;
  int fileOf(const std::string &name, bool create);
  std::string path(const std::string &name) const;

  int nranks, me;
  std::string folder;
  char *control = nullptr;
  size_t controlBytes = 0;
  bool checked = false, left = false;
  std::map<std::string, int> files; // name -> descriptor
};

} // namespace shardflow::standin::nccl

#endif // SHARDFLOW_TOOLS_CUDA_STANDIN_STANDINNCCLSHM_H
