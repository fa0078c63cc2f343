//===- WeightLoader.cpp - map, slice, check and convert weights ------------===//

#include "shardflow/Runtime/Core/WeightLoader.h"

#include "shardflow/Runtime/Format/Checksum.h"
#include "shardflow/Runtime/Format/FloatConversion.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <thread>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace shardflow::runtime;

namespace {
/// One row-major matrix of `rows` x `cols` elements of E bytes, element
/// (r, c) read at in + (r * rowStride + c * colStride) * E, in 32 x 32
/// tiles, so a transposed matrix is read and written a cache line at a time.
template <size_t E>
void copyTiled(const uint8_t *in, int64_t rows, int64_t cols, int64_t rowStride,
               int64_t colStride, uint8_t *out) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
          std::memcpy(out + size_t(r * cols + c) * E,
                      in + size_t(r * rowStride + c * colStride) * E, E);
}

/// Copies the row-major `stored` tensor of `elem`-byte elements into
/// `out` with its dimensions permuted (out dimension i is stored dimension
/// perm[i]): an odometer over the outer output dimensions, the last two
/// tiled.
void permuteElements(const uint8_t *in, const std::vector<int64_t> &stored,
                     const std::vector<int64_t> &perm, size_t elem, uint8_t *out) {
  size_t rank = stored.size();
  std::vector<int64_t> storedStride(rank, 1), shape(rank), stride(rank);
  for (size_t d = rank; d-- > 1;)
    storedStride[d - 1] = storedStride[d] * stored[d];
  int64_t total = 1;
  for (size_t i = 0; i < rank; ++i) {
    shape[i] = stored[size_t(perm[i])];
    stride[i] = storedStride[size_t(perm[i])]; // in elements of `in`
    total *= shape[i];
  }
  if (total == 0)
    return;
  while (shape.size() < 2) {
    shape.insert(shape.begin(), 1);
    stride.insert(stride.begin(), 0);
  }
  size_t outer = shape.size() - 2;
  int64_t rows = shape[outer], cols = shape[outer + 1];
  auto tile = elem == 1   ? copyTiled<1>
              : elem == 2 ? copyTiled<2>
              : elem == 4 ? copyTiled<4>
                          : copyTiled<8>;
  std::vector<int64_t> idx(outer, 0);
  uint8_t *dst = out;
  while (true) {
    int64_t base = 0;
    for (size_t d = 0; d < outer; ++d)
      base += idx[d] * stride[d];
    tile(in + size_t(base) * elem, rows, cols, stride[outer], stride[outer + 1], dst);
    dst += size_t(rows * cols) * elem;
    size_t d = outer;
    while (d > 0 && ++idx[d - 1] == shape[d - 1])
      idx[--d] = 0;
    if (d == 0)
      return;
  }
}
} // namespace

WeightLoader::WeightLoader(const Artifact &artifact, std::string weightsDir, int rank,
                           bool verifyWeights, std::string weightsModel)
    : art(artifact), dir(weightsDir.empty() ? artifact.modelDir : std::move(weightsDir)),
      model(std::move(weightsModel)), rank(rank), verify(verifyWeights) {}

WeightLoader::~WeightLoader() {
  for (auto &[path, m] : files)
    if (m.base)
      munmap(m.base, m.length);
}

std::vector<std::pair<void *, size_t>> WeightLoader::releaseMappings() {
  std::vector<std::pair<void *, size_t>> out;
  for (auto &[path, m] : files)
    if (m.base)
      out.emplace_back(m.base, m.length);
  files.clear();
  return out;
}

const uint8_t *WeightLoader::mapFile(const std::string &path, const std::string &weight,
                                     size_t &length) {
  std::lock_guard<std::mutex> lock(filesMutex);
  auto it = files.find(path);
  if (it == files.end()) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0)
      throw RuntimeError("cannot open weight file '" + path + "' (for '" + weight +
                         "'); pass --weights with the model's path");
    struct stat st;
    if (fstat(fd, &st) != 0) {
      close(fd);
      throw RuntimeError("cannot read the size of weight file '" + path + "'");
    }
    Mapping m;
    m.length = size_t(st.st_size);
    m.base = m.length ? mmap(nullptr, m.length, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    close(fd);
    if (m.base == MAP_FAILED)
      throw RuntimeError("cannot map weight file '" + path + "'");
    it = files.emplace(path, m).first;
  }
  length = it->second.length;
  return static_cast<const uint8_t *>(it->second.base);
}

WeightBytes WeightLoader::load(size_t index, WeightStaging *staging) {
  const BufferDesc &b = art.buffers.at(index);
  if (b.storage == "zeros") {
    // Training state that starts at zero: no file.
    WeightBytes out;
    if (uint8_t *block = staging && b.bytes() ? staging->acquire(b.bytes()) : nullptr) {
      std::memset(block, 0, b.bytes());
      out.staged = std::unique_ptr<uint8_t, StagedRelease>(block, StagedRelease{staging});
      out.data = block;
    } else {
      out.owned.reset(new uint8_t[std::max<size_t>(b.bytes(), 1)]());
      out.data = out.owned.get();
    }
    out.bytes = b.bytes();
    return out;
  }
  if (b.storage == "protobuf")
    throw RuntimeError("weight '" + b.name +
                       "' is stored in the model in a form that cannot be mapped "
                       "(varint-encoded or ONNX text); recompile with this shard-opt, "
                       "which writes such weights next to the artifact");
  // Weights converted at compile time sit next to the artifact.
  const std::string &folder = b.storage == "artifact" ? art.artifactDir : dir;
  std::string path = folder.empty() ? b.file : folder + "/" + b.file;
  if (b.storage == "embedded" && !model.empty())
    path = model;
  size_t length = 0;
  const uint8_t *base = mapFile(path, b.name, length);

  // The whole tensor's extent in the file (in the file's element type),
  // then this rank's part of it.
  const std::vector<int64_t> &global = b.starts.empty() ? b.shape : b.globalShape;
  size_t globalBytes = dtypeSize(b.fileDType());
  for (int64_t d : global)
    globalBytes *= size_t(d);
  if (b.fileOffset < 0 || size_t(b.fileOffset) + globalBytes > length)
    throw RuntimeError("weight '" + b.name + "' needs " + std::to_string(globalBytes) +
                       " bytes at offset " + std::to_string(b.fileOffset) + " of '" + path +
                       "', which has " + std::to_string(length) +
                       " bytes: wrong or modified weight file?");
  const uint8_t *whole = base + b.fileOffset;
  std::vector<std::pair<size_t, size_t>> runs;
  forEachWeightRun(b, rank, [&](size_t offset, size_t len) { runs.emplace_back(offset, len); });

  WeightBytes out;
  // A weight whose bytes start at an address its elements are not aligned
  // to (an offset inside a protobuf, a damaged artifact) is copied: kernels
  // load whole elements.
  bool misaligned = runs.size() == 1 && runs[0].first != kZeroRun &&
                    reinterpret_cast<uintptr_t>(whole + runs[0].first) %
                        dtypeSize(b.fileDType());
  bool gathers = runs.size() != 1 || runs[0].first == kZeroRun || misaligned,
       converts = b.fileDType() != b.dtype || b.scale, permutes = !b.permutation.empty();
  if (uint8_t *block = staging && b.bytes() ? staging->acquire(b.bytes()) : nullptr)
    out.staged = std::unique_ptr<uint8_t, StagedRelease>(block, StagedRelease{staging});
  // Each step below writes a new copy: the last one into the staging
  // block when there is one, the others to the heap (`heap`, which then
  // replaces `out.owned` once the step has read the previous copy).
  std::unique_ptr<uint8_t[]> heap;
  auto output = [&](bool last, size_t bytes) -> uint8_t * {
    if (last && out.staged)
      return out.staged.get();
    heap.reset(new uint8_t[std::max<size_t>(bytes, 1)]);
    return heap.get();
  };
  auto keep = [&] { out.owned = std::move(heap); };
  const uint8_t *fileBytes = nullptr;
  if (!gathers) {
    // In place: the rank touches only its own pages.
    fileBytes = whole + runs[0].first;
  } else {
    // Rows of the slice are apart in the file: copy them together.
    uint8_t *dst = output(!converts && !permutes, b.fileBytes());
    fileBytes = dst;
    for (auto [offset, len] : runs) {
      if (offset == kZeroRun)
        std::memset(dst, 0, len); // zero padding past the stored tensor
      else
        std::memcpy(dst, whole + offset, len);
      dst += len;
    }
    keep();
  }
  if (verify && !b.crc32c.empty()) {
    uint32_t want = b.crc32c[b.starts.empty() ? 0 : size_t(rank)];
    uint32_t got = crc32c(fileBytes, b.fileBytes());
    if (got != want) {
      char text[64];
      std::snprintf(text, sizeof(text), "%08x, the artifact expects %08x", got, want);
      throw RuntimeError("weight '" + b.name + "' in '" + path + "' has checksum " + text +
                         ": the weight file changed since compilation (recompile, "
                         "or pass --no-verify-weights to use it anyway)");
    }
  }
  if (converts && b.scale) {
    // A weight-only product folded by the compiler: multiplied in f64, then
    // rounded once to the buffer's type (converted here too).
    std::string what = "weight '" + b.name + "' (scale)";
    std::vector<double> wide(size_t(b.numel()));
    convertElements(fileBytes, b.fileDType(), wide.data(), DType::F64, wide.size(), what);
    for (double &x : wide)
      x *= *b.scale;
    uint8_t *dst = output(!permutes, b.bytes());
    convertElements(wide.data(), DType::F64, dst, b.dtype, wide.size(), what);
    keep();
    fileBytes = dst;
  } else if (converts) {
    // Mixed precision: converted once, here.
    uint8_t *dst = output(!permutes, b.bytes());
    convertElements(fileBytes, b.fileDType(), dst, b.dtype, size_t(b.numel()),
                    "weight '" + b.name + "' (source-dtype " + dtypeName(b.fileDType()) + ")");
    keep();
    fileBytes = dst;
  }
  if (permutes) {
    // A layout chosen at compile time (e.g. a GEMM operand stored
    // transposed): applied once, here.
    size_t elem = dtypeSize(b.dtype);
    if (elem != 1 && elem != 2 && elem != 4 && elem != 8)
      throw RuntimeError("weight '" + b.name + "': cannot permute " + dtypeName(b.dtype) +
                         " elements");
    uint8_t *dst = output(true, b.bytes());
    permuteElements(fileBytes, b.storedShape(), b.permutation, elem, dst);
    keep();
    fileBytes = dst;
  }
  if (out.staged && fileBytes != out.staged.get()) {
    // Read in place: copied into the block here, on this thread.
    std::memcpy(out.staged.get(), fileBytes, b.bytes());
    fileBytes = out.staged.get();
  }
  out.data = fileBytes;
  out.bytes = b.bytes();
  return out;
}

int shardflow::runtime::defaultLoadThreads() {
  int ranksHere = 1;
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char *v = std::getenv(var)) {
      char *end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (end != v && *end == 0 && n > 0) {
        ranksHere = int(n);
        break;
      }
    }
  int hardware = int(std::thread::hardware_concurrency());
  return std::clamp(std::max(hardware, 1) / ranksHere, 1, 8);
}

void WeightLoader::loadAll(std::vector<size_t> indices, int threads,
                           const std::function<void(size_t, WeightBytes)> &use,
                           WeightStaging *staging) {
  if (threads <= 0)
    threads = defaultLoadThreads();
  threads = std::max(1, std::min(threads, int(indices.size())));
  if (threads == 1) {
    for (size_t i : indices)
      use(i, load(i, staging));
    return;
  }
  // The largest first, so that the last weight to finish is a small one.
  std::stable_sort(indices.begin(), indices.end(), [&](size_t a, size_t b) {
    return art.buffers.at(a).fileBytes() > art.buffers.at(b).fileBytes();
  });
  std::mutex m;
  std::condition_variable changed;
  size_t next = 0, handed = 0;
  int loading = 0;
  std::deque<std::pair<size_t, WeightBytes>> ready;
  std::exception_ptr failure;
  auto worker = [&] {
    std::unique_lock<std::mutex> lock(m);
    while (true) {
      // Room for one more loaded weight: those ready and those being loaded
      // stay within `threads`.
      changed.wait(lock, [&] {
        return failure || next == indices.size() ||
               ready.size() + size_t(loading) < size_t(threads);
      });
      if (failure || next == indices.size())
        return;
      size_t index = indices[next++];
      ++loading;
      lock.unlock();
      WeightBytes w;
      std::exception_ptr error;
      try {
        w = load(index, staging);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      --loading;
      if (error && !failure)
        failure = error;
      if (!error)
        ready.emplace_back(index, std::move(w));
      changed.notify_all();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(worker);
  std::unique_lock<std::mutex> lock(m);
  while (handed < indices.size()) {
    changed.wait(lock, [&] { return failure || !ready.empty(); });
    if (failure)
      break;
    auto [index, w] = std::move(ready.front());
    ready.pop_front();
    lock.unlock();
    try {
      use(index, std::move(w));
    } catch (...) {
      lock.lock();
      if (!failure)
        failure = std::current_exception();
      changed.notify_all();
      break;
    }
    lock.lock();
    ++handed;
    changed.notify_all();
  }
  if (lock.owns_lock())
    lock.unlock();
  for (std::thread &t : pool)
    t.join();
  if (failure)
    std::rethrow_exception(failure);
}
