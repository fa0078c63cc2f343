//===- Executor.cpp - run an artifact's program on the CPU -----------------===//

#include "shardflow/Runtime/Device/CPU/Executor.h"
#include "shardflow/Runtime/Format/Layout.h"

#include "shardflow/Runtime/Core/WeightLoader.h"

#include "Device/CPU/Kernels/Gemm.h"
#include "Device/CPU/Kernels/Parallel.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sys/mman.h>

using namespace shardflow::runtime;

Executor::Executor(Artifact artifact, std::string weightsDir, int threads,
                   Communicator *world, bool verifyWeights, int loadThreads)
    : art(std::move(artifact)), weightsDir(std::move(weightsDir)),
      threads(threads), arena(nullptr, std::free), comm(world),
      verifyWeights(verifyWeights) {
  if (!comm) {
    single = createSingleRankCommunicator();
    comm = single.get();
  }
  if (comm->size() != art.worldSize)
    throw RuntimeError("the artifact was compiled for " + std::to_string(art.worldSize) +
                       " rank(s) but runs on " + std::to_string(comm->size()));
  if (art.target != "cpu")
    throw RuntimeError("artifact targets '" + art.target +
                       "'; the CPU executor runs cpu artifacts only (cuda artifacts "
                       "run on the CUDA executor)");
  size_t bytes = size_t((art.arenaBytes + 63) / 64 * 64);
  arena.reset(static_cast<uint8_t *>(std::aligned_alloc(64, bytes ? bytes : 64)));
  if (!arena)
    throw RuntimeError("cannot allocate the " + std::to_string(bytes) +
                       "-byte activation arena");
  shardflow::runtime::cpu::setGemmThreads(threads);
  pointers.assign(art.buffers.size(), nullptr);
  for (size_t i = 0; i < art.buffers.size(); ++i) {
    BufferDesc &b = art.buffers[i];
    switch (b.kind) {
    case BufferDesc::Kind::Arena:
      pointers[i] = arena.get() + b.offset;
      break;
    case BufferDesc::Kind::Constant:
      pointers[i] = b.data.data();
      break;
    case BufferDesc::Kind::View:
      pointers[i] = pointers[b.source]; // may be null until inputs are bound
      break;
    default:
      break;
    }
  }
  mapWeights(loadThreads);
  prepareCollectives();
}

Executor::~Executor() {
  for (const Mapping &m : mappings)
    munmap(m.base, m.length);
}

void Executor::mapWeights(int loadThreads) {
  // Mapped in place where possible; strided slices and mixed-precision
  // weights (source-dtype) get an owned copy (see WeightLoader.h).
  WeightLoader loader(art, weightsDir, comm->rank(), verifyWeights);
  std::vector<size_t> weights;
  for (size_t i = 0; i < art.buffers.size(); ++i)
    if (art.buffers[i].kind == BufferDesc::Kind::Weight)
      weights.push_back(i);
  loader.loadAll(weights, loadThreads, [&](size_t i, WeightBytes w) {
    pointers[i] = const_cast<void *>(w.data);
    if (w.owned)
      sliceCopies.push_back(std::move(w.owned));
    weightBytes += art.buffers[i].bytes();
  });
  for (auto [base, length] : loader.releaseMappings())
    mappings.push_back({base, length});
  for (size_t i = 0; i < art.buffers.size(); ++i)
    if (art.buffers[i].kind == BufferDesc::Kind::View && !pointers[i])
      pointers[i] = pointers[art.buffers[i].source];
}

namespace {
std::vector<int64_t> groupsOf(const Instruction &inst) {
  return inst.params.has("groups") ? inst.params.getInts("groups")
                                   : std::vector<int64_t>{};
}

/// Packs `src` (shape `shape`) into `parts` contiguous pieces along `dim`.
void packPieces(const uint8_t *src, const std::vector<int64_t> &shape, int64_t dim,
                int parts, size_t elem, uint8_t *dst) {
  auto [outer, inner] = splitAt(shape, dim, elem);
  size_t piece = inner / size_t(parts);
  for (int p = 0; p < parts; ++p)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (size_t(p) * size_t(outer) + size_t(o)) * piece,
                  src + size_t(o) * inner + size_t(p) * piece, piece);
}

/// The inverse: `parts` contiguous pieces, each of shape `piece` (the
/// result's shape with dimension `dim` divided), concatenated along `dim`.
void unpackPieces(const uint8_t *src, const std::vector<int64_t> &piece, int64_t dim,
                  int parts, size_t elem, uint8_t *dst) {
  auto [outer, inner] = splitAt(piece, dim, elem);
  for (int p = 0; p < parts; ++p)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (size_t(o) * size_t(parts) + size_t(p)) * inner,
                  src + (size_t(p) * size_t(outer) + size_t(o)) * inner, inner);
}
} // namespace

void Executor::prepareCollectives() {
  // Every rank walks the same program, so the splits (collective calls)
  // happen in the same order everywhere.
  int rank = comm->rank();
  for (const Instruction &inst : art.program) {
    if (!inst.collective)
      continue;
    std::vector<int64_t> groups = groupsOf(inst);
    if (groups.empty() || groupComms.count(collectiveGroupKey(inst)))
      continue;
    int64_t size = inst.params.getInt("group_size");
    int color = -1, key = 0;
    for (size_t i = 0; i < groups.size(); ++i)
      if (groups[i] == rank) {
        color = int(int64_t(i) / size);
        key = int(int64_t(i) % size);
      }
    groupComms[collectiveGroupKey(inst)] = comm->split(color, key);
  }
}

void Executor::runLocalSlice(const Instruction &inst) {
  Tensor in = tensorOf(inst.inputs.at(0)), out = tensorOf(inst.outputs.at(0));
  size_t dims = out.shape.size(), elem = dtypeSize(out.dtype);
  std::vector<int64_t> all = inst.params.getInts("starts");
  if (in.shape.size() != dims || all.size() != size_t(art.worldSize) * dims)
    throw RuntimeError("starts does not hold one index per dimension and rank");
  if (out.numel() == 0)
    return;
  if (dims == 0) {
    std::memcpy(out.data, in.data, elem);
    return;
  }
  const int64_t *start = all.data() + size_t(comm->rank()) * dims;
  // Row-major strides of the input, in elements.
  std::vector<int64_t> stride(dims, 1);
  for (size_t d = dims - 1; d > 0; --d)
    stride[d - 1] = stride[d] * in.shape[d];
  // The innermost dimensions the block covers whole, plus the one before
  // them, are one contiguous run of the input per index of the outer ones:
  // a split of the leading dimension (a data-parallel batch) is a single
  // memcpy.
  size_t runDim = dims - 1;
  while (runDim > 0 && out.shape[runDim] == in.shape[runDim])
    --runDim;
  size_t runBytes = size_t(out.shape[runDim] * stride[runDim]) * elem;
  int64_t base = 0;
  for (size_t d = 0; d < dims; ++d)
    base += start[d] * stride[d];
  int64_t runs = 1;
  for (size_t d = 0; d < runDim; ++d)
    runs *= out.shape[d];
  const uint8_t *src = in.as<uint8_t>() + size_t(base) * elem;
  uint8_t *dst = out.as<uint8_t>();
  // Runs go to threads in ranges of at least 64 KiB: a smaller copy is done
  // before a worker wakes up. Each run is copied by one thread.
  int64_t grain = std::max<int64_t>(1, int64_t(65536 / std::max<size_t>(runBytes, 1)));
  cpu::parallelFor(threads, runs, grain, [&](int64_t begin, int64_t end) {
    // The outer index of run `begin`, then an odometer over the rest.
    std::vector<int64_t> idx(runDim, 0);
    for (int64_t r = begin, d = int64_t(runDim) - 1; d >= 0; --d) {
      idx[size_t(d)] = r % out.shape[size_t(d)];
      r /= out.shape[size_t(d)];
    }
    for (int64_t r = begin; r < end; ++r) {
      int64_t offset = 0;
      for (size_t d = 0; d < runDim; ++d)
        offset += idx[d] * stride[d];
      std::memcpy(dst + size_t(r) * runBytes, src + size_t(offset) * elem, runBytes);
      for (size_t d = runDim; d > 0 && ++idx[d - 1] == out.shape[d - 1];)
        idx[--d] = 0;
    }
  });
}

void Executor::runCollective(const Instruction &inst) {
  const std::string &op = inst.kernel;
  int rank = comm->rank();
  if (op == "local_slice")
    return runLocalSlice(inst);
  auto peerOf = [&](const char *what) {
    return int(inst.params.getInts(what).at(size_t(rank)));
  };
  if (op == "send" || op == "recv") {
    int peer = peerOf("peers");
    if (peer < 0)
      return;
    if (op == "send") {
      Tensor in = tensorOf(inst.inputs.at(0));
      comm->sendRecv(&in, peer, nullptr, -1);
    } else {
      Tensor out = tensorOf(inst.outputs.at(0));
      comm->sendRecv(nullptr, -1, &out, peer);
    }
    return;
  }
  Tensor in = tensorOf(inst.inputs.at(0)), out = tensorOf(inst.outputs.at(0));
  if (op == "collective_permute") {
    auto [dst, src] = permutePeers(inst, rank);
    if (src < 0)
      std::memset(out.data, 0, out.bytes());
    comm->sendRecv(dst >= 0 ? &in : nullptr, dst, src >= 0 ? &out : nullptr, src);
    return;
  }
  Communicator *group = groupComms.at(collectiveGroupKey(inst)).get();
  if (!group)
    return; // this rank is in none of the groups
  int g = group->size();
  size_t elem = dtypeSize(in.dtype);
  auto dimParam = [&](const char *name, const std::vector<int64_t> &shape) {
    return collectiveDim(inst, name, shape.size());
  };
  auto buffer = [&](int which, size_t bytes) {
    if (scratch[which].size() < bytes)
      scratch[which].resize(bytes);
    return scratch[which].data();
  };
  if (op == "all_reduce") {
    group->allReduce(in, out, parseReduction(inst.params.getString("reduction", "sum")));
  } else if (op == "all_gather") {
    int64_t dim = dimParam("dim", in.shape);
    if (splitAt(in.shape, dim, elem).first == 1) {
      group->allGather(in, out); // concatenation along dim is the byte order
    } else {
      uint8_t *tmp = buffer(0, out.bytes());
      group->allGather(in, Tensor{tmp, out.dtype, out.shape});
      unpackPieces(tmp, in.shape, dim, g, elem, out.as<uint8_t>());
    }
  } else if (op == "reduce_scatter") {
    int64_t dim = dimParam("dim", in.shape);
    Reduction r = parseReduction(inst.params.getString("reduction", "sum"));
    if (in.shape[size_t(dim)] % g)
      throw RuntimeError("reduce_scatter: dimension " + std::to_string(dim) +
                         " does not split into " + std::to_string(g) + " pieces");
    if (splitAt(in.shape, dim, elem).first == 1) {
      group->reduceScatter(in, out, r);
    } else {
      uint8_t *tmp = buffer(0, in.bytes());
      packPieces(in.as<uint8_t>(), in.shape, dim, g, elem, tmp);
      group->reduceScatter(Tensor{tmp, in.dtype, in.shape}, out, r);
    }
  } else if (op == "all_to_all") {
    int64_t split = dimParam("split_dim", in.shape), concat = dimParam("concat_dim", in.shape);
    if (in.shape[size_t(split)] % g)
      throw RuntimeError("all_to_all: dimension " + std::to_string(split) +
                         " does not split into " + std::to_string(g) + " pieces");
    uint8_t *sendBuf = buffer(0, in.bytes()), *recvBuf = buffer(1, in.bytes());
    packPieces(in.as<uint8_t>(), in.shape, split, g, elem, sendBuf);
    group->allToAll(Tensor{sendBuf, in.dtype, in.shape}, Tensor{recvBuf, in.dtype, in.shape});
    std::vector<int64_t> piece = in.shape;
    piece[size_t(split)] /= g;
    unpackPieces(recvBuf, piece, concat, g, elem, out.as<uint8_t>());
  } else {
    throw RuntimeError("unknown collective '" + op + "'");
  }
}

Tensor Executor::tensorOf(int buffer) const {
  const BufferDesc &b = art.buffers[buffer];
  return Tensor{pointers[buffer], b.dtype, b.shape};
}

std::vector<std::pair<std::string, Tensor>>
Executor::run(const std::map<std::string, HostTensor> &inputs) {
  for (auto [i, t] : bindInputs(art, inputs))
    pointers[i] = const_cast<uint8_t *>(t->bytes.data());
  // Views of inputs are bound now that the inputs are.
  for (size_t i = 0; i < art.buffers.size(); ++i)
    if (art.buffers[i].kind == BufferDesc::Kind::View)
      pointers[i] = pointers[art.buffers[i].source];

  if (profiling)
    timings.assign(art.program.size(), 0.0);
  for (size_t n = 0; n < art.program.size(); ++n) {
    const Instruction &inst = art.program[n];
    using Clock = std::chrono::steady_clock;
    Clock::time_point started = profiling ? Clock::now() : Clock::time_point();
    auto time = [&] {
      if (profiling)
        timings[n] = std::chrono::duration<double>(Clock::now() - started).count();
    };
    if (inst.collective) {
      try {
        runCollective(inst);
      } catch (const std::exception &e) {
        throw RuntimeError(describeInstruction(inst, n) + ": " + e.what());
      }
      time();
      continue;
    }
    KernelFn fn = findKernel(inst.kernel);
    if (!fn)
      throw RuntimeError("no CPU kernel for '" + inst.kernel + "' (instruction " +
                         std::to_string(n) + ")");
    KernelContext ctx{inst.kernel, {}, {}, inst.params, threads, comm ? comm->rank() : 0};
    for (int i : inst.inputs)
      ctx.inputs.push_back(tensorOf(i));
    for (int o : inst.outputs)
      ctx.outputs.push_back(tensorOf(o));
    try {
      fn(ctx);
    } catch (const std::exception &e) {
      // Kernels name themselves ("kernel 'div': ..."); said once, here.
      std::string what = e.what(), own = "kernel '" + inst.kernel + "': ";
      if (what.compare(0, own.size(), own) == 0)
        what.erase(0, own.size());
      throw RuntimeError(describeInstruction(inst, n) + ": " + what);
    }
    time();
  }

  std::vector<std::pair<std::string, Tensor>> outputs;
  for (const auto &[name, buffer] : art.outputs)
    outputs.emplace_back(name, tensorOf(buffer));
  return outputs;
}

std::string shardflow::runtime::preferredBlasCore(std::string *running) {
  return cpu::blasCoreUpgrade(running);
}
