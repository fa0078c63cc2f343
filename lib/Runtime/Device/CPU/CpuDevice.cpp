//===- CpuDevice.cpp - the CPU as a device ---------------------------------===//

#include "shardflow/Runtime/Device/CPU/CpuDevice.h"
#include "shardflow/Runtime/Core/WeightLoader.h"
#include "shardflow/Runtime/Format/Layout.h"

#include "Device/CPU/Kernels/Gemm.h"
#include "Device/CPU/Kernels/Parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>

using namespace shardflow::runtime;

namespace {

class CpuDevice final : public Device {
public:
  CpuDevice(const DeviceSettings &settings, Communicator &world)
      : settings(settings), world(world), arena(nullptr, std::free) {}
  ~CpuDevice() override {
    for (auto [base, length] : mappings)
      munmap(base, length);
  }

  const char *name() const override { return "CPU"; }

  void shareState(std::map<std::string, Tensor> state) override { shared = std::move(state); }
  void useArena(void *memory, size_t bytes) override {
    sharedArena = memory;
    sharedArenaBytes = bytes;
  }

  void load(const Artifact &artifact) override {
    art = &artifact;
    if (art->target != "cpu")
      throw RuntimeError("artifact targets '" + art->target +
                         "'; the CPU device runs cpu artifacts only (cuda artifacts run on "
                         "the CUDA device)");
    size_t bytes = size_t((art->arenaBytes + 63) / 64 * 64);
    uint8_t *base = nullptr;
    if (sharedArena && sharedArenaBytes >= size_t(art->arenaBytes)) {
      base = static_cast<uint8_t *>(sharedArena);
    } else {
      arena.reset(static_cast<uint8_t *>(std::aligned_alloc(64, bytes ? bytes : 64)));
      if (!arena)
        throw RuntimeError("cannot allocate the " + std::to_string(bytes) +
                           "-byte activation arena");
      base = arena.get();
    }
    cpu::setGemmThreads(settings.threads);
    pointers.assign(art->buffers.size(), nullptr);
    for (size_t i = 0; i < art->buffers.size(); ++i) {
      const BufferDesc &b = art->buffers[i];
      switch (b.kind) {
      case BufferDesc::Kind::Arena:
        pointers[i] = base + b.offset;
        break;
      case BufferDesc::Kind::Constant:
        pointers[i] = const_cast<uint8_t *>(b.data.data());
        break;
      case BufferDesc::Kind::View:
        pointers[i] = pointers[b.source]; // may be null until inputs are bound
        break;
      default:
        break;
      }
    }
    mapWeights();
    kernels.assign(art->program.size(), nullptr);
    times.assign(art->program.size(), InstructionTime{});
    // Collective scratch: packed pieces and received pieces, or a copy of
    // an input that overlaps its output.
    size_t scratchBytes = 0;
    for (const Instruction &inst : art->program)
      if (inst.collective && !inst.inputs.empty() && !inst.outputs.empty())
        scratchBytes = std::max({scratchBytes, art->buffers.at(size_t(inst.inputs[0])).bytes(),
                                 art->buffers.at(size_t(inst.outputs[0])).bytes()});
    for (std::vector<uint8_t> &s : scratchMemory)
      s.resize(scratchBytes);
    reportBlasCore();
  }

  void prepare(size_t n) override {
    const Instruction &inst = art->program[n];
    if (inst.collective)
      return;
    kernels[n] = findKernel(inst.kernel);
    if (!kernels[n])
      throw RuntimeError("no CPU kernel for '" + inst.kernel + "'");
  }

  void finishPreparing() override {}

  std::unique_ptr<Communicator> createCommunicator(Communicator &) override { return nullptr; }

  void beginRun(const std::vector<std::pair<size_t, const HostTensor *>> &inputs) override {
    for (auto [i, t] : inputs)
      pointers[i] = const_cast<uint8_t *>(t->bytes.data());
    // Views of inputs are bound now that the inputs are.
    for (size_t i = 0; i < art->buffers.size(); ++i)
      if (art->buffers[i].kind == BufferDesc::Kind::View)
        pointers[i] = pointers[size_t(art->buffers[i].source)];
  }

  void execute(const std::function<void()> &enqueue) override { enqueue(); }

  void beginInstruction(size_t n) override {
    if (settings.timing)
      times[n].start = hostClockSeconds();
  }
  void endInstruction(size_t n) override {
    if (settings.timing)
      times[n].seconds = hostClockSeconds() - times[n].start;
  }

  void runKernel(size_t n) override {
    const Instruction &inst = art->program[n];
    if (inst.collective) // local_slice
      return localSlice(inst);
    KernelContext ctx{inst.kernel, {}, {}, inst.params, settings.threads, world.rank()};
    for (int i : inst.inputs)
      ctx.inputs.push_back(tensorOf(i));
    for (int o : inst.outputs)
      ctx.outputs.push_back(tensorOf(o));
    kernels[n](ctx);
  }

  void finishRun(const std::function<void()> &) override {} // nothing is left running

  std::vector<std::pair<std::string, Tensor>> outputs() override {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto &[name, buffer] : art->outputs)
      out.emplace_back(name, tensorOf(buffer));
    return out;
  }

  void download(int buffer, void *dst) override {
    std::memcpy(dst, pointers[size_t(buffer)], art->buffers[size_t(buffer)].bytes());
  }

  Tensor tensorOf(int buffer) const override {
    const BufferDesc &b = art->buffers[size_t(buffer)];
    return Tensor{pointers[size_t(buffer)], b.dtype, b.shape};
  }
  void *scratch(int which) override { return scratchMemory[which].data(); }
  void copy(size_t, const std::vector<Copy2D> &copies, const void *src, void *dst) override {
    runCopiesOnHost(copies, src, dst);
  }
  void fillZero(size_t, void *dst, size_t bytes) override { std::memset(dst, 0, bytes); }

  const std::vector<InstructionTime> &instructionTimes() const override { return times; }
  std::vector<std::string> laneNames() const override { return {"CPU"}; }
  std::string clock() const override { return "host time per operation"; }
  RunFigures lastRun() const override { return {}; }
  size_t weightBytes() const override { return mappedBytes; }
  const char *weightPlace() const override { return "mapped"; }
  size_t outputBytes() const override {
    size_t bytes = 0;
    for (const auto &[name, buffer] : art->outputs)
      bytes += art->buffers[size_t(buffer)].bytes();
    return bytes;
  }

private:
  void mapWeights() {
    // Mapped in place where possible; strided slices and mixed-precision
    // weights (source-dtype) get an owned copy (see WeightLoader.h).
    WeightLoader loader(*art, settings.weightsDir, world.rank(), settings.verifyWeights,
                        settings.weightsModel);
    std::vector<size_t> weights;
    for (size_t i = 0; i < art->buffers.size(); ++i) {
      if (art->buffers[i].kind != BufferDesc::Kind::Weight)
        continue;
      if (auto it = shared.find(art->buffers[i].name); it != shared.end()) {
        checkSharedState(art->buffers[i], it->second);
        pointers[i] = it->second.data; // another program's state
        continue;
      }
      weights.push_back(i);
    }
    loader.loadAll(weights, settings.loadThreads, [&](size_t i, WeightBytes w) {
      if (art->buffers[i].writable && !w.owned) {
        // State the program writes: a copy of its own, not the file's pages.
        w.owned.reset(new uint8_t[std::max<size_t>(w.bytes, 1)]);
        std::memcpy(w.owned.get(), w.data, w.bytes);
        w.data = w.owned.get();
      }
      pointers[i] = const_cast<void *>(w.data);
      if (w.owned)
        sliceCopies.push_back(std::move(w.owned));
      mappedBytes += art->buffers[i].bytes();
    });
    mappings = loader.releaseMappings();
    for (size_t i = 0; i < art->buffers.size(); ++i)
      if (art->buffers[i].kind == BufferDesc::Kind::View && !pointers[i])
        pointers[i] = pointers[size_t(art->buffers[i].source)];
  }

  /// This rank's block of `in`: the innermost dimensions the block covers
  /// whole, plus the one before them, are one contiguous run of the input
  /// per index of the outer ones (a split of the leading dimension, a
  /// data-parallel batch, is a single memcpy).
  void localSlice(const Instruction &inst) {
    Tensor in = tensorOf(inst.inputs.at(0)), out = tensorOf(inst.outputs.at(0));
    size_t dims = out.shape.size(), elem = dtypeSize(out.dtype);
    std::vector<int64_t> all = inst.params.getInts("starts");
    if (in.shape.size() != dims || all.size() != size_t(art->worldSize) * dims)
      throw RuntimeError("starts does not hold one index per dimension and rank");
    if (out.numel() == 0)
      return;
    if (dims == 0) {
      std::memcpy(out.data, in.data, elem);
      return;
    }
    const int64_t *start = all.data() + size_t(world.rank()) * dims;
    // Row-major strides of the input, in elements.
    std::vector<int64_t> stride(dims, 1);
    for (size_t d = dims - 1; d > 0; --d)
      stride[d - 1] = stride[d] * in.shape[d];
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
    // Runs go to threads in ranges of at least 64 KiB: a smaller copy is
    // done before a worker wakes up. Each run is copied by one thread.
    int64_t grain = std::max<int64_t>(1, int64_t(65536 / std::max<size_t>(runBytes, 1)));
    cpu::parallelFor(settings.threads, runs, grain, [&](int64_t begin, int64_t end) {
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

  void reportBlasCore() {
    std::string blasCore;
    preferredBlasCore(&blasCore);
    if (!settings.verbose || world.rank() != 0 || blasCore.empty())
      return;
    const char *fallback = std::getenv("SHARDFLOW_OPENBLAS_FALLBACK");
    std::fprintf(stderr, "shard-run: CPU GEMMs: OpenBLAS's %s kernels%s%s%s\n", blasCore.c_str(),
                 fallback ? " (set by shard-run: OpenBLAS picked " : "", fallback ? fallback : "",
                 fallback ? ", its fallback for a CPU model it does not know)" : "");
  }

  DeviceSettings settings;
  Communicator &world;
  const Artifact *art = nullptr;
  std::unique_ptr<uint8_t, void (*)(void *)> arena;
  /// An arena other programs of the rank use too (useArena), or null.
  void *sharedArena = nullptr;
  size_t sharedArenaBytes = 0;
  std::vector<void *> pointers; // per buffer, once bound
  /// Weights and state another device holds (shareState).
  std::map<std::string, Tensor> shared;
  std::vector<std::pair<void *, size_t>> mappings;
  /// Weight slices that are not contiguous in their file, copied out, and
  /// writable state.
  std::vector<std::unique_ptr<uint8_t[]>> sliceCopies;
  size_t mappedBytes = 0;
  std::vector<KernelFn> kernels; // per instruction
  std::vector<uint8_t> scratchMemory[2];
  std::vector<InstructionTime> times;
};

} // namespace

std::unique_ptr<Device> shardflow::runtime::createCpuDevice(const DeviceSettings &settings,
                                                            Communicator &world) {
  return std::make_unique<CpuDevice>(settings, world);
}

std::string shardflow::runtime::preferredBlasCore(std::string *running) {
  return cpu::blasCoreUpgrade(running);
}
