//===- CudaMemory.cpp - the CUDA device's memory ---------------------------===//
//
// Allocation (checked against the GPU's free memory first), the weights'
// upload through page-locked staging, the outputs' host memory, collective
// scratch, and the copies the runner asks for.
//
//===----------------------------------------------------------------------===//

#include "CudaDeviceImpl.h"

#include "shardflow/Runtime/Core/WeightLoader.h"
#include "shardflow/Runtime/Format/Layout.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {

/// Page-locked staging for the weights' upload: at least this much (or two
/// of the largest weights), at most kStagingLimit, never more than the
/// weights take.
constexpr size_t kStagingBytes = size_t(256) << 20;
constexpr size_t kStagingLimit = size_t(1) << 30;

/// Weight staging in one block of page-locked memory: first fit over the
/// free ranges, which coalesce again when blocks come back. Loader threads
/// take blocks; the uploading thread gives them back once their copy has
/// completed.
class PinnedStaging final : public WeightStaging {
public:
  static constexpr size_t kAlign = 256;

  PinnedStaging(uint8_t *base, size_t size) : base(base) { freeRanges[0] = size; }

  uint8_t *acquire(size_t bytes) override {
    bytes = alignUp(std::max<size_t>(bytes, 1), kAlign);
    std::lock_guard<std::mutex> lock(m);
    for (auto it = freeRanges.begin(); it != freeRanges.end(); ++it) {
      if (it->second < bytes)
        continue;
      auto [offset, size] = *it;
      freeRanges.erase(it);
      if (size > bytes)
        freeRanges[offset + bytes] = size - bytes;
      taken[offset] = bytes;
      return base + offset;
    }
    return nullptr;
  }

  void release(uint8_t *block) override {
    std::lock_guard<std::mutex> lock(m);
    size_t offset = size_t(block - base);
    auto t = taken.find(offset);
    if (t == taken.end())
      return;
    size_t size = t->second;
    taken.erase(t);
    auto next = freeRanges.lower_bound(offset);
    if (next != freeRanges.end() && offset + size == next->first) {
      size += next->second;
      next = freeRanges.erase(next);
    }
    if (next != freeRanges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return;
      }
    }
    freeRanges[offset] = size;
  }

private:
  uint8_t *base;
  std::mutex m;
  std::map<size_t, size_t> freeRanges, taken; // offset -> bytes
};

/// Bytes as GiB with two decimals, or as bytes below 1 MiB.
std::string formatGiB(size_t bytes) {
  if (bytes < (size_t(1) << 20))
    return std::to_string(bytes) + " bytes";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  return text;
}
} // namespace

uint8_t *CudaDevice::allocatePinned(size_t bytes, const char *what) {
  if (!bytes)
    return nullptr;
  void *p = nullptr;
  CUresult r = driver().cuMemHostAlloc(&p, bytes, 0);
  if (r != CUDA_SUCCESS) {
    if (settings.verbose)
      std::fprintf(stderr,
                   "shard-run: rank %d: no page-locked host memory for %s (%zu bytes: %s); "
                   "pageable memory instead\n",
                   rank, what, bytes, describe(r).c_str());
    return nullptr;
  }
  pinnedMemory.push_back(p);
  return static_cast<uint8_t *>(p);
}

void CudaDevice::pinOutputs() {
  // Downloaded into page-locked memory, the outputs are copied at the bus's
  // speed; pageable memory is copied through the driver's staging buffers.
  size_t pinned = 0;
  for (HostOutput &h : hostOutputs) {
    if (uint8_t *p = allocatePinned(h.bytes, "an output")) {
      h.data = p;
      h.pageable = std::vector<uint8_t>();
      pinned += h.bytes;
    } else if (h.pageable.size() != h.bytes) {
      h.pageable.resize(h.bytes);
      h.data = h.pageable.data();
    }
  }
  if (settings.verbose)
    std::fprintf(stderr,
                 "shard-run: rank %d downloads the outputs into page-locked memory "
                 "(%zu bytes)\n",
                 rank, pinned);
}

void CudaDevice::freePinned(void *p) {
  auto it = std::find(pinnedMemory.begin(), pinnedMemory.end(), p);
  if (it == pinnedMemory.end())
    return;
  pinnedMemory.erase(it);
  CU_CALL(cuMemFreeHost, p);
}

void CudaDevice::allocate() {
  const size_t kAlign = 256; // cuBLASLt's preferred alignment
  size_t inputBytes = 0, weightTotal = 0;
  std::vector<size_t> offset(art->buffers.size(), 0);
  for (size_t i = 0; i < art->buffers.size(); ++i) {
    const BufferDesc &b = art->buffers[i];
    if (b.kind == BufferDesc::Kind::Input) {
      offset[i] = inputBytes;
      inputBytes += alignUp(std::max<size_t>(b.bytes(), 1), kAlign);
    } else if (b.kind == BufferDesc::Kind::Weight || b.kind == BufferDesc::Kind::Constant) {
      offset[i] = weightTotal;
      weightTotal += alignUp(std::max<size_t>(b.bytes(), 1), kAlign);
    }
  }
  // What the program needs, against what the GPU has free: a program that
  // cannot fit fails here, naming both, before any allocation.
  size_t freeBytes = 0, totalBytes = 0;
  bool known = driver().cuMemGetInfo(&freeBytes, &totalBytes) == CUDA_SUCCESS;
  size_t workspace = 0;
  for (const Instruction &inst : art->program)
    if (inst.kernel == "matmul" || inst.kernel == "gemm")
      workspace = kGemmWorkspaceBytes;
  size_t total = size_t(art->arenaBytes) + weightTotal + inputBytes + workspace;
  std::string needs = formatGiB(total) + " (activations " + formatGiB(size_t(art->arenaBytes)) +
                      ", weights " + formatGiB(weightTotal) + ", inputs " + formatGiB(inputBytes) +
                      (workspace ? ", cuBLASLt workspace " + formatGiB(workspace) : "") + ")";
  std::string has = known ? formatGiB(freeBytes) + " free of " + formatGiB(totalBytes) : "";
  if (known && total > freeBytes)
    throw RuntimeError("the program needs " + needs + " of GPU memory on rank " +
                       std::to_string(rank) + ", and " + deviceName + " has " + has +
                       ": more ranks (tensor or pipeline parallel), a smaller batch or "
                       "--dtype bf16 at compile time would fit it");
  auto alloc = [&](CUdeviceptr &p, size_t bytes, const char *what) {
    CUresult r = driver().cuMemAlloc(&p, std::max<size_t>(bytes, kAlign));
    if (r != CUDA_SUCCESS)
      throw RuntimeError("cannot allocate " + std::to_string(bytes) + " bytes of GPU memory for " +
                         what + ": " + describe(r) + " (the program needs " + needs +
                         (known ? "; " + deviceName + " had " + has + " at the start" : "") + ")");
  };
  alloc(arena, size_t(art->arenaBytes), "the activation arena");
  alloc(inputMemory, inputBytes, "the inputs");
  alloc(weightMemory, weightTotal, "the weights");

  pointers.assign(art->buffers.size(), 0);
  for (size_t i = 0; i < art->buffers.size(); ++i) {
    const BufferDesc &b = art->buffers[i];
    switch (b.kind) {
    case BufferDesc::Kind::Arena:
      pointers[i] = arena + CUdeviceptr(b.offset);
      break;
    case BufferDesc::Kind::Input:
      pointers[i] = inputMemory + offset[i];
      break;
    case BufferDesc::Kind::Weight:
    case BufferDesc::Kind::Constant:
      pointers[i] = weightMemory + offset[i];
      break;
    case BufferDesc::Kind::View:
      break;
    }
  }
  // Views share their source's pointer (a view of a view resolves through).
  for (size_t i = 0; i < art->buffers.size(); ++i) {
    size_t root = i;
    for (int hops = 0; art->buffers[root].kind == BufferDesc::Kind::View; ++hops) {
      if (hops > int(art->buffers.size()))
        throw RuntimeError("buffer " + std::to_string(i) + " is a view of itself");
      root = size_t(art->buffers[root].source);
    }
    pointers[i] = pointers[root];
  }

  // Weights: mapped, checked and converted on the host, then uploaded; the
  // host copies go as soon as each upload has been staged.
  CUstream s = streams[ComputeStream];
  {
    WeightLoader loader(*art, settings.weightsDir, rank, settings.verifyWeights,
                        settings.weightsModel);
    std::vector<size_t> weights;
    size_t largest = 0, total = 0;
    for (size_t i = 0; i < art->buffers.size(); ++i)
      if (art->buffers[i].kind == BufferDesc::Kind::Weight) {
        weights.push_back(i);
        largest = std::max(largest, art->buffers[i].bytes());
        total += alignUp(art->buffers[i].bytes(), PinnedStaging::kAlign);
      }
    // The loader's threads write each weight's final bytes (the last copy,
    // conversion or permutation) into page-locked staging when a block of
    // it is free, and the GPU reads them from there directly; otherwise the
    // weight goes from pageable memory, which the driver stages itself.
    // Enough for a few of the largest weights; one larger than it all
    // always goes the pageable way.
    size_t stagingBytes = std::min({total, std::max(kStagingBytes, 2 * largest), kStagingLimit});
    using Pinned = CudaOptions::PinnedMemory;
    bool stage = options.pinnedMemory == Pinned::Always ||
                 (options.pinnedMemory == Pinned::Auto && total >= CudaOptions::kPinnedStagingFrom);
    std::unique_ptr<PinnedStaging> staging;
    uint8_t *stagingMemory = stage ? allocatePinned(stagingBytes, "weight staging") : nullptr;
    if (stagingMemory)
      staging = std::make_unique<PinnedStaging>(stagingMemory, stagingBytes);
    size_t staged = 0;
    // Read, checked and converted on the loader's threads; uploaded here,
    // so the driver is called from this thread only.
    loader.loadAll(
        weights, settings.loadThreads,
        [&](size_t i, WeightBytes w) {
          if (w.bytes)
            CU_CALL(cuMemcpyHtoDAsync, pointers[i], w.data, w.bytes, s);
          uploadedWeightBytes += w.bytes;
          if (w.staged) {
            // The block goes back (with `w`) once the GPU has read it.
            CU_CALL(cuStreamSynchronize, s);
            staged += w.bytes;
          }
        },
        staging.get());
    if (settings.verbose)
      std::fprintf(stderr,
                   "shard-run: rank %d uploaded %zu weight bytes, %zu of them from page-locked "
                   "staging (%zu bytes of it)\n",
                   rank, uploadedWeightBytes, staged, staging ? stagingBytes : size_t(0));
    // Every staged upload has completed (each was waited for).
    staging.reset();
    if (stagingMemory)
      freePinned(stagingMemory);
    for (size_t i = 0; i < art->buffers.size(); ++i) {
      const BufferDesc &b = art->buffers[i];
      if (b.kind == BufferDesc::Kind::Constant && !b.data.empty()) {
        if (b.data.size() != b.bytes())
          throw RuntimeError("constant buffer " + std::to_string(i) + " has " +
                             std::to_string(b.data.size()) + " bytes, expected " +
                             std::to_string(b.bytes()));
        CU_CALL(cuMemcpyHtoDAsync, pointers[i], b.data.data(), b.data.size(), s);
      }
    }
    CU_CALL(cuStreamSynchronize, s);
  }

  hostOutputs.resize(art->outputs.size());
  for (size_t o = 0; o < art->outputs.size(); ++o) {
    // An output with columns holds fewer bytes than its (padded) buffer.
    const BufferDesc &b = art->buffers.at(size_t(art->outputs[o].second));
    size_t elements = 1;
    for (int64_t d : outputShape(*art, o))
      elements *= size_t(d);
    hostOutputs[o].bytes = elements * dtypeSize(b.dtype);
    totalOutputBytes += hostOutputs[o].bytes;
  }
  if (options.pinnedMemory == CudaOptions::PinnedMemory::Always) {
    pinOutputs();
  } else {
    for (HostOutput &h : hostOutputs) {
      h.pageable.resize(h.bytes);
      h.data = h.pageable.data();
    }
  }

  // Collective scratch: packed pieces and received pieces (all_to_all
  // needs both), or a copy of an input that overlaps its output.
  for (const Instruction &inst : art->program) {
    if (!inst.collective || inst.inputs.empty() || inst.outputs.empty())
      continue;
    size_t bytes = std::max(art->buffers.at(size_t(inst.inputs[0])).bytes(),
                            art->buffers.at(size_t(inst.outputs[0])).bytes());
    scratchBytes = std::max(scratchBytes, 2 * alignUp(bytes, kAlign));
  }
  if (scratchBytes)
    alloc(scratchMemory, scratchBytes, "collective scratch");
}

Tensor CudaDevice::tensorOf(int buffer) const {
  const BufferDesc &b = art->buffers.at(size_t(buffer));
  return Tensor{reinterpret_cast<void *>(pointerOf(buffer)), b.dtype, b.shape};
}

void *CudaDevice::scratch(int which) {
  return reinterpret_cast<void *>(scratchMemory + (which ? scratchBytes / 2 : 0));
}

void CudaDevice::copy(size_t n, const std::vector<Copy2D> &copies, const void *src, void *dst) {
  runCopies(copies, CUdeviceptr(reinterpret_cast<uintptr_t>(src)),
            CUdeviceptr(reinterpret_cast<uintptr_t>(dst)), streams[steps[n].stream]);
}

void CudaDevice::fillZero(size_t n, void *dst, size_t bytes) {
  CU_CALL(cuMemsetD8Async, CUdeviceptr(reinterpret_cast<uintptr_t>(dst)), 0, bytes,
          streams[steps[n].stream]);
}

void CudaDevice::runCopies(const std::vector<Copy2D> &copies, CUdeviceptr src, CUdeviceptr dst,
                           CUstream stream) {
  for (const Copy2D &c : copies) {
    CUDA_MEMCPY2D m{};
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = (c.fromDestination ? dst : src) + c.srcOffset;
    m.srcPitch = c.srcPitch;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.dstDevice = dst + c.dstOffset;
    m.dstPitch = c.dstPitch;
    m.WidthInBytes = c.width;
    m.Height = c.height;
    if (c.height == 1 || (c.srcPitch == c.width && c.dstPitch == c.width)) {
      // One contiguous run: a plain copy, which has no pitch limit (a 2-D
      // copy refuses pitches past the device's maximum, 2^31 - 1 bytes).
      CU_CALL(cuMemcpyDtoDAsync, m.dstDevice, m.srcDevice, c.width * c.height, stream);
      continue;
    }
    CU_CALL(cuMemcpy2DAsync, &m, stream);
  }
}
