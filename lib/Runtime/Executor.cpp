//===- Executor.cpp - run an artifact's program on the CPU -----------------===//

#include "shardflow/Runtime/Executor.h"

#include "kernels/cpu/Gemm.h"

#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace shardflow::runtime;

namespace {
std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}
} // namespace

Executor::Executor(Artifact artifact, std::string weightsDir, int threads)
    : art(std::move(artifact)), weightsDir(std::move(weightsDir)),
      threads(threads), arena(nullptr, std::free) {
  if (art.target != "cpu")
    throw RuntimeError("artifact targets '" + art.target +
                       "'; this shard-run executes cpu artifacts only");
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
  mapWeights();
}

Executor::~Executor() {
  for (const Mapping &m : mappings)
    munmap(m.base, m.length);
}

void Executor::mapWeights() {
  std::string dir = weightsDir.empty() ? art.modelDir : weightsDir;
  // One mapping per file, covering the whole file; each weight points into it.
  std::map<std::string, std::pair<uint8_t *, size_t>> files;
  for (size_t i = 0; i < art.buffers.size(); ++i) {
    const BufferDesc &b = art.buffers[i];
    if (b.kind != BufferDesc::Kind::Weight)
      continue;
    if (b.storage == "protobuf")
      throw RuntimeError(
          "weight '" + b.name +
          "' is stored in the model in a form that cannot be mapped "
          "(varint-encoded or ONNX text); recompile with this shard-opt, "
          "which writes such weights next to the artifact");
    // Weights converted at compile time sit next to the artifact.
    const std::string &folder = b.storage == "artifact" ? art.artifactDir : dir;
    std::string path = folder.empty() ? b.file : folder + "/" + b.file;
    auto it = files.find(path);
    if (it == files.end()) {
      int fd = open(path.c_str(), O_RDONLY);
      if (fd < 0)
        throw RuntimeError("cannot open weight file '" + path + "' (for '" +
                           b.name + "'); pass --weights with the model's path");
      struct stat st;
      fstat(fd, &st);
      size_t length = size_t(st.st_size);
      void *base = length ? mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0)
                          : nullptr;
      close(fd);
      if (base == MAP_FAILED)
        throw RuntimeError("cannot map weight file '" + path + "'");
      mappings.push_back({base, length});
      it = files.emplace(path, std::make_pair(static_cast<uint8_t *>(base), length))
               .first;
    }
    auto [base, length] = it->second;
    if (b.fileOffset < 0 || size_t(b.fileOffset) + b.bytes() > length)
      throw RuntimeError("weight '" + b.name + "' needs " +
                         std::to_string(b.bytes()) + " bytes at offset " +
                         std::to_string(b.fileOffset) + " of '" + path +
                         "', which has " + std::to_string(length) +
                         " bytes: wrong or modified weight file?");
    pointers[i] = base + b.fileOffset;
    weightBytes += b.bytes();
  }
  for (size_t i = 0; i < art.buffers.size(); ++i)
    if (art.buffers[i].kind == BufferDesc::Kind::View && !pointers[i])
      pointers[i] = pointers[art.buffers[i].source];
}

Tensor Executor::tensorOf(int buffer) const {
  const BufferDesc &b = art.buffers[buffer];
  return Tensor{pointers[buffer], b.dtype, b.shape};
}

std::vector<std::pair<std::string, Tensor>>
Executor::run(const std::map<std::string, HostTensor> &inputs) {
  for (size_t i = 0; i < art.buffers.size(); ++i) {
    const BufferDesc &b = art.buffers[i];
    if (b.kind != BufferDesc::Kind::Input)
      continue;
    auto it = inputs.find(b.name);
    if (it == inputs.end())
      throw RuntimeError("input '" + b.name + "' (" + dtypeName(b.dtype) +
                         shapeText(b.shape) + ") was not given; pass --input " +
                         b.name + "=FILE.npy");
    const HostTensor &t = it->second;
    if (t.dtype != b.dtype || t.shape != b.shape)
      throw RuntimeError("input '" + b.name + "' is " + dtypeName(t.dtype) +
                         shapeText(t.shape) + " but the model was compiled for " +
                         dtypeName(b.dtype) + shapeText(b.shape));
    pointers[i] = const_cast<uint8_t *>(t.bytes.data());
  }
  for (const auto &[name, t] : inputs) {
    bool known = false;
    for (const BufferDesc &b : art.buffers)
      known |= b.kind == BufferDesc::Kind::Input && b.name == name;
    if (!known)
      throw RuntimeError("'" + name + "' is not an input of this model");
  }
  // Views of inputs are bound now that the inputs are.
  for (size_t i = 0; i < art.buffers.size(); ++i)
    if (art.buffers[i].kind == BufferDesc::Kind::View)
      pointers[i] = pointers[art.buffers[i].source];

  for (size_t n = 0; n < art.program.size(); ++n) {
    const Instruction &inst = art.program[n];
    KernelFn fn = findKernel(inst.kernel);
    if (!fn)
      throw RuntimeError("no CPU kernel for '" + inst.kernel + "' (instruction " +
                         std::to_string(n) + ")");
    KernelContext ctx{inst.kernel, {}, {}, inst.params, threads};
    for (int i : inst.inputs)
      ctx.inputs.push_back(tensorOf(i));
    for (int o : inst.outputs)
      ctx.outputs.push_back(tensorOf(o));
    try {
      fn(ctx);
    } catch (const std::exception &e) {
      throw RuntimeError("kernel '" + inst.kernel + "' (instruction " +
                         std::to_string(n) + "): " + e.what());
    }
  }

  std::vector<std::pair<std::string, Tensor>> outputs;
  for (const auto &[name, buffer] : art.outputs)
    outputs.emplace_back(name, tensorOf(buffer));
  return outputs;
}
