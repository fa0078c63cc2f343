//===- TrainingData.cpp - a training run's batches and trained weights -----===//

#include "shardflow/Runtime/Format/TrainingData.h"
#include "shardflow/Runtime/Format/Json.h"

#include <cstring>
#include <fstream>
#include <set>

using namespace shardflow::runtime;

namespace {
/// Every value of `t` (entries [S, ...]) lies in the input's range or is
/// its ignored value; else an error naming the array, the entry (the step
/// that takes it) and the position.
void checkRange(const std::string &name, const HostTensor &t, const BufferDesc &b,
                const std::string &what) {
  auto [lo, hi] = *b.validRange;
  size_t n = t.bytes.size() / dtypeSize(t.dtype);
  size_t perEntry = size_t(b.numel());
  for (size_t i = 0; i < n; ++i) {
    int64_t x = t.dtype == DType::I64 ? reinterpret_cast<const int64_t *>(t.bytes.data())[i]
                                      : reinterpret_cast<const int32_t *>(t.bytes.data())[i];
    if ((x >= lo && x < hi) || (b.ignoreValue && x == *b.ignoreValue))
      continue;
    size_t entry = perEntry ? i / perEntry : 0, at = perEntry ? i % perEntry : 0;
    std::vector<int64_t> position(b.shape.size());
    for (size_t d = b.shape.size(); d-- > 0;) {
      position[d] = int64_t(at % size_t(b.shape[d]));
      at /= size_t(b.shape[d]);
    }
    throw RuntimeError(what + ": array '" + name + "' holds " + std::to_string(x) +
                       " at position " + shapeList(position) + " of entry " +
                       std::to_string(entry) + " (step " + std::to_string(entry + 1) +
                       "): the input '" + name + "' takes values in [" + std::to_string(lo) +
                       ", " + std::to_string(hi) + ")" +
                       (b.ignoreValue ? " or the ignored " + std::to_string(*b.ignoreValue)
                                      : std::string()));
  }
}
} // namespace

TrainingData::TrainingData(std::vector<std::pair<std::string, HostTensor>> members,
                           const Artifact &artifact, const std::string &what)
    : TrainingData(std::move(members), artifact.buffers, what) {}

TrainingData::TrainingData(std::vector<std::pair<std::string, HostTensor>> members,
                           const std::vector<BufferDesc> &buffers, const std::string &what) {
  std::map<std::string, const BufferDesc *> inputs;
  std::string names;
  for (const BufferDesc &b : buffers)
    if (b.kind == BufferDesc::Kind::Input) {
      inputs[b.name] = &b;
      names += (names.empty() ? "'" : ", '") + b.name + "'";
    }
  std::set<std::string> seen;
  std::string first;
  for (auto &[name, t] : members) {
    auto it = inputs.find(name);
    if (it == inputs.end())
      throw RuntimeError(what + ": array '" + name + "' is no input of the training step (" +
                         names + ")");
    const BufferDesc &b = *it->second;
    std::vector<int64_t> want = b.shape;
    int64_t entries = t.shape.empty() ? -1 : t.shape[0];
    std::vector<int64_t> inner(t.shape.begin() + (t.shape.empty() ? 0 : 1), t.shape.end());
    if (t.dtype != b.dtype || entries < 1 || inner != want)
      throw RuntimeError(what + ": array '" + name + "' is " + dtypeName(t.dtype) +
                         shapeList(t.shape) + "; the input needs " + dtypeName(b.dtype) + "[S," +
                         shapeList(want).substr(1) + " with S >= 1 batches" +
                         (want.empty() ? " (the input is a scalar: [S])" : ""));
    if (count == 0) {
      count = entries;
      first = name;
    } else if (entries != count) {
      throw RuntimeError(what + ": array '" + name + "' holds " + std::to_string(entries) +
                         " batches but '" + first + "' holds " + std::to_string(count) +
                         "; every array holds the same number");
    }
    seen.insert(name);
    if (b.validRange)
      checkRange(name, t, b, what);
  }
  for (const auto &[name, b] : inputs)
    if (!seen.count(name))
      throw RuntimeError(what + " has no array '" + name + "' (" + dtypeName(b->dtype) + "[S," +
                         shapeList(b->shape).substr(1) + "), an input of the training step");
  arrays = std::move(members);
}

std::map<std::string, HostTensor> TrainingData::step(int64_t t) const {
  std::map<std::string, HostTensor> out;
  int64_t entry = ((t - 1) % count + count) % count;
  for (const auto &[name, all] : arrays) {
    HostTensor &one = out[name];
    one.dtype = all.dtype;
    one.shape.assign(all.shape.begin() + 1, all.shape.end());
    size_t bytes = all.bytes.size() / size_t(count);
    one.bytes.assign(all.bytes.begin() + ptrdiff_t(size_t(entry) * bytes),
                     all.bytes.begin() + ptrdiff_t(size_t(entry + 1) * bytes));
  }
  return out;
}

namespace {
const char *safetensorsDType(DType t) {
  switch (t) {
  case DType::F16: return "F16";
  case DType::BF16: return "BF16";
  case DType::F32: return "F32";
  case DType::F64: return "F64";
  case DType::I1: return "BOOL";
  case DType::I8: return "I8";
  case DType::I16: return "I16";
  case DType::I32: return "I32";
  case DType::I64: return "I64";
  case DType::U8: return "U8";
  case DType::U16: return "U16";
  case DType::U32: return "U32";
  case DType::U64: return "U64";
  }
  return nullptr;
}

} // namespace

std::string shardflow::runtime::serializeSafetensors(
    const std::vector<std::pair<std::string, Tensor>> &tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  size_t offset = 0;
  for (const auto &[name, t] : tensors) {
    header += "," + jsonString(name) + ":{\"dtype\":\"" + safetensorsDType(t.dtype) +
              "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d)
      header += (d ? "," : "") + std::to_string(t.shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.bytes()) + "]}";
    offset += t.bytes();
  }
  header += "}";
  // The data starts 8-byte aligned: the header is padded with spaces.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t length = header.size();
  for (int i = 0; i < 8; ++i)
    out[size_t(i)] = char((length >> (8 * i)) & 0xff);
  out += header;
  out.reserve(out.size() + offset);
  for (const auto &[name, t] : tensors)
    out.append(static_cast<const char *>(t.data), t.bytes());
  return out;
}

void shardflow::runtime::writeSafetensors(
    const std::string &path, const std::vector<std::pair<std::string, Tensor>> &tensors) {
  std::string bytes = serializeSafetensors(tensors);
  std::ofstream os(path, std::ios::binary);
  os.write(bytes.data(), std::streamsize(bytes.size()));
  os.close();
  if (!os)
    throw RuntimeError("cannot write '" + path + "'");
}
