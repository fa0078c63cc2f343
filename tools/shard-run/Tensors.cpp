//===- Tensors.cpp - shard-run's inputs and outputs ------------------------===//

#include "Tensors.h"

#include "shardflow/Runtime/Format/FloatConversion.h"
#include "shardflow/Runtime/Format/TensorProtoIO.h"

#include <cstdio>
#include <cstring>
#include <iostream>

using namespace shardflow::runtime;

namespace {
bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}
} // namespace

std::map<std::string, HostTensor>
shardflow::runtime::readInputs(const Options &options, const Artifact &artifact, int rank) {
  std::vector<std::pair<std::string, DType>> declared;
  for (const BufferDesc &b : artifact.buffers)
    if (b.kind == BufferDesc::Kind::Input)
      declared.emplace_back(b.name, b.dtype);
  return readInputs(options, declared, rank);
}

std::map<std::string, HostTensor>
shardflow::runtime::readInputs(const Options &options,
                               const std::vector<std::pair<std::string, DType>> &declared,
                               int rank) {
  std::map<std::string, HostTensor> inputs;
  if (!options.inputsNpz.empty())
    for (auto &[name, t] : readNpz(options.inputsNpz))
      inputs[name] = std::move(t);
  for (const auto &[name, file] : options.inputFiles)
    inputs[name] = endsWith(file, ".pb") ? readTensorProto(file) : readNpy(file);
  // numpy has no bfloat16: a bf16 input takes float32 data, rounded to
  // nearest even here (a .pb may hold bfloat16 itself).
  for (const auto &[name, dtype] : declared) {
    auto it = inputs.find(name);
    if (dtype != DType::BF16 || it == inputs.end() || it->second.dtype != DType::F32)
      continue;
    HostTensor &t = it->second;
    HostTensor narrow;
    narrow.dtype = DType::BF16;
    narrow.shape = t.shape;
    narrow.bytes.resize(size_t(t.view().numel()) * 2);
    convertElements(t.bytes.data(), DType::F32, narrow.bytes.data(), DType::BF16,
                    size_t(t.view().numel()), "input '" + name + "'");
    t = std::move(narrow);
    if (rank == 0)
      std::fprintf(stderr,
                   "shard-run: note: input '%s' is bf16, which numpy has no type for: "
                   "its float32 values were rounded to bf16 (to nearest even)\n",
                   name.c_str());
  }
  return inputs;
}

void shardflow::runtime::writeOutputs(std::string output,
                                      std::vector<std::pair<std::string, Tensor>> outputs,
                                      int rank) {
  const std::string rankTag = "{rank}";
  bool perRank = output.find(rankTag) != std::string::npos;
  if (perRank)
    output.replace(output.find(rankTag), rankTag.size(), std::to_string(rank));
  if (rank != 0 && !perRank) {
    // Outputs are written once, by rank 0.
  } else if (output.empty()) {
    for (auto &[name, t] : outputs) {
      std::cout << name << ": " << dtypeName(t.dtype) << "[";
      for (size_t i = 0; i < t.shape.size(); ++i)
        std::cout << (i ? "," : "") << t.shape[i];
      std::cout << "]\n";
    }
  } else {
    bool single = endsWith(output, ".npy") || endsWith(output, ".pb");
    if (single && outputs.size() != 1)
      throw RuntimeError("the model has " + std::to_string(outputs.size()) +
                         " outputs; write them to an .npz");
    // numpy has no bfloat16: such outputs are widened to float32, which
    // holds every bf16 value exactly (.pb keeps bfloat16).
    std::vector<HostTensor> widened;
    widened.reserve(outputs.size());
    for (auto &[name, t] : outputs) {
      if (t.dtype != DType::BF16 || endsWith(output, ".pb"))
        continue;
      HostTensor &w = widened.emplace_back();
      w.dtype = DType::F32;
      w.shape = t.shape;
      w.bytes.resize(size_t(t.numel()) * sizeof(float));
      convertElements(t.data, DType::BF16, w.bytes.data(), DType::F32, size_t(t.numel()),
                      "output '" + name + "'");
      std::fprintf(stderr,
                   "shard-run: note: output '%s' is bf16, which numpy has no type for: "
                   "written as float32 (exact)\n",
                   name.c_str());
      t = w.view();
    }
    if (endsWith(output, ".pb"))
      writeTensorProto(output, outputs[0].first, outputs[0].second);
    else if (single)
      writeNpy(output, outputs[0].second);
    else
      writeNpz(output, outputs);
  }
}
