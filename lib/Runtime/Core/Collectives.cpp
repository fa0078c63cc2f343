//===- Collectives.cpp - the program's collectives, onto a communicator ----===//
//
// Each collective instruction as communicator calls and the device's copies
// around them, written once for every device: a dimension that is not the
// outermost is packed into contiguous pieces before (reduce_scatter,
// all_to_all) or unpacked after (all_gather, all_to_all) the call, in the
// device's scratch; an input that overlaps its output where the call does
// not allow it is copied aside first. The copies run on the collective's
// lane, so on CUDA they are ordered with the NCCL calls by the stream, and
// on the CPU the host waits for each call before the copies after it.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Core/ProgramRunner.h"
#include "shardflow/Runtime/Format/Layout.h"

#include <cstring>

using namespace shardflow::runtime;

namespace {
bool overlap(const Tensor &a, const Tensor &b) {
  auto x = reinterpret_cast<uintptr_t>(a.data), y = reinterpret_cast<uintptr_t>(b.data);
  return a.bytes() && b.bytes() && x < y + b.bytes() && y < x + a.bytes();
}
} // namespace

void ProgramRunner::runCollective(size_t n) {
  const Instruction &inst = art.program[n];
  int rank = worldComm->rank();
  auto peerOf = [&](const char *what) { return int(inst.params.getInts(what).at(size_t(rank))); };
  if (inst.collectiveKind == CollectiveKind::Send || inst.collectiveKind == CollectiveKind::Recv) {
    int peer = peerOf("peers");
    if (peer < 0)
      return;
    if (inst.collectiveKind == CollectiveKind::Send) {
      Tensor in = dev->tensorOf(inst.inputs.at(0));
      settle(n, comm->startSendRecv(&in, peer, nullptr, -1));
    } else {
      Tensor out = dev->tensorOf(inst.outputs.at(0));
      settle(n, comm->startSendRecv(nullptr, -1, &out, peer));
    }
    return;
  }
  Tensor in = dev->tensorOf(inst.inputs.at(0)), out = dev->tensorOf(inst.outputs.at(0));
  size_t elem = dtypeSize(in.dtype);
  void *scratch0 = dev->scratch(0), *scratch1 = dev->scratch(1);
  // Communicators read `in` while they write `out`: an input that overlaps
  // its output (other than where the call allows it in place) is copied
  // aside first.
  auto separate = [&](bool inPlaceOk) {
    if (inPlaceOk || !overlap(in, out))
      return in;
    dev->copy(n, {Copy2D{false, 0, 0, in.bytes(), in.bytes(), in.bytes(), 1}}, in.data, scratch0);
    return Tensor{scratch0, in.dtype, in.shape};
  };
  if (inst.collectiveKind == CollectiveKind::CollectivePermute) {
    auto [dst, src] = permutePeers(inst, rank);
    Tensor send = dst >= 0 && src >= 0 ? separate(false) : in;
    if (src < 0)
      dev->fillZero(n, out.data, out.bytes());
    settle(n, comm->startSendRecv(dst >= 0 ? &send : nullptr, dst, src >= 0 ? &out : nullptr, src));
    return;
  }
  Communicator *group = groupOf(inst);
  if (!group)
    return; // this rank is in none of the groups
  int parts = group->size();
  auto dimParam = [&](const char *name) { return collectiveDim(inst, name, in.shape.size()); };
  auto atPart = [&](const Tensor &t, size_t bytes) {
    return static_cast<void *>(t.as<uint8_t>() + size_t(group->rank()) * bytes);
  };
  switch (inst.collectiveKind) {
  case CollectiveKind::AllReduce: {
    Reduction r = parseReduction(inst.params.getString("reduction", "sum"));
    settle(n, group->startAllReduce(separate(in.data == out.data), out, r));
    return;
  }
  case CollectiveKind::AllGather: {
    int64_t dim = dimParam("dim");
    if (splitAt(in.shape, dim, elem).first == 1) {
      // Concatenation along dim is the byte order.
      settle(n, group->startAllGather(separate(in.data == atPart(out, in.bytes())), out));
    } else {
      settle(n, group->startAllGather(in, Tensor{scratch1, out.dtype, out.shape}));
      dev->copy(n, planUnpackPieces(in.shape, dim, parts, elem), scratch1, out.data);
    }
    return;
  }
  case CollectiveKind::ReduceScatter: {
    int64_t dim = dimParam("dim");
    Reduction r = parseReduction(inst.params.getString("reduction", "sum"));
    if (in.shape[size_t(dim)] % parts)
      throw RuntimeError("reduce_scatter: dimension " + std::to_string(dim) +
                         " does not split into " + std::to_string(parts) + " pieces");
    Tensor send;
    if (splitAt(in.shape, dim, elem).first == 1) {
      send = separate(out.data == atPart(in, out.bytes()));
    } else {
      dev->copy(n, planPackPieces(in.shape, dim, parts, elem), in.data, scratch1);
      send = Tensor{scratch1, in.dtype, in.shape};
    }
    settle(n, group->startReduceScatter(send, out, r));
    return;
  }
  case CollectiveKind::AllToAll: {
    int64_t split = dimParam("split_dim"), concat = dimParam("concat_dim");
    if (in.shape[size_t(split)] % parts)
      throw RuntimeError("all_to_all: dimension " + std::to_string(split) +
                         " does not split into " + std::to_string(parts) + " pieces");
    dev->copy(n, planPackPieces(in.shape, split, parts, elem), in.data, scratch0);
    settle(n, group->startAllToAll(Tensor{scratch0, in.dtype, in.shape},
                                   Tensor{scratch1, in.dtype, in.shape}));
    std::vector<int64_t> piece = in.shape;
    piece[size_t(split)] /= parts;
    dev->copy(n, planUnpackPieces(piece, concat, parts, elem), scratch1, out.data);
    return;
  }
  default:
    throw RuntimeError(std::string("collective ") + collectiveKindName(inst.collectiveKind) +
                       " is not one the runner knows");
  }
}
