//===- Artifact.cpp - reading and writing .shard artifacts -----------------===//

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/FloatConversion.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

using namespace shardflow::runtime;

int64_t BufferDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<int64_t> BufferDesc::storedShape() const {
  if (permutation.size() != shape.size())
    return shape;
  std::vector<int64_t> stored(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (permutation[i] < 0 || size_t(permutation[i]) >= shape.size())
      return shape; // not a permutation: refused by the reader
    stored[size_t(permutation[i])] = shape[i];
  }
  return stored;
}

void shardflow::runtime::forEachWeightRun(
    const BufferDesc &b, int rank, const std::function<void(size_t, size_t)> &fn) {
  size_t elem = dtypeSize(b.fileDType());
  if (b.starts.empty()) {
    fn(0, b.fileBytes());
    return;
  }
  const std::vector<int64_t> &global = b.globalShape, &start = b.starts.at(size_t(rank));
  const std::vector<int64_t> shape = b.storedShape();
  size_t rankDims = global.size();
  if (rankDims == 0 || b.numel() == 0) {
    fn(0, b.fileBytes());
    return;
  }
  // Row-major strides of the global tensor, in elements.
  std::vector<int64_t> stride(rankDims, 1);
  for (size_t d = rankDims - 1; d > 0; --d)
    stride[d - 1] = stride[d] * global[d];
  // The innermost dimensions the slice covers whole, plus the one before
  // them, form one contiguous run per index of the remaining dimensions.
  size_t runDim = rankDims - 1;
  while (runDim > 0 && shape[runDim] == global[runDim])
    --runDim;
  int64_t runElems = shape[runDim] * stride[runDim];
  // A zero-padded weight's slice may reach past the tensor: within a run
  // along runDim (the dimensions after it are covered whole, so within
  // the tensor), or with whole runs past it in an outer dimension.
  int64_t inside = runElems;
  if (b.zeroPadded)
    inside = std::clamp<int64_t>(global[runDim] - start[runDim], 0, shape[runDim]) *
             stride[runDim];
  std::vector<int64_t> idx(runDim, 0);
  while (true) {
    int64_t offset = start[runDim] * stride[runDim];
    bool past = false;
    for (size_t d = 0; d < runDim; ++d) {
      offset += (start[d] + idx[d]) * stride[d];
      past = past || start[d] + idx[d] >= global[d];
    }
    for (size_t d = runDim + 1; d < rankDims; ++d)
      offset += start[d] * stride[d];
    if (past) {
      fn(kZeroRun, size_t(runElems) * elem);
    } else {
      if (inside > 0)
        fn(size_t(offset) * elem, size_t(inside) * elem);
      if (inside < runElems)
        fn(kZeroRun, size_t(runElems - inside) * elem);
    }
    size_t d = runDim;
    while (d > 0 && ++idx[d - 1] == shape[d - 1])
      idx[--d] = 0;
    if (d == 0)
      return;
  }
}

namespace {

std::string encode(const std::string &s) {
  std::string out;
  for (unsigned char c : s) {
    if (c <= ' ' || c == '%' || c == '=' || c == ',' || c >= 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}


template <typename T> std::string join(const std::vector<T> &v) {
  std::ostringstream os;
  os << std::setprecision(17);
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? "," : "") << v[i];
  return os.str();
}

std::string paramText(const ParamValue &v) {
  std::ostringstream os;
  os << std::setprecision(17);
  if (auto *i = std::get_if<int64_t>(&v))
    os << "i:" << *i;
  else if (auto *f = std::get_if<double>(&v))
    os << "f:" << *f;
  else if (auto *s = std::get_if<std::string>(&v))
    os << "s:" << encode(*s);
  else if (auto *is = std::get_if<std::vector<int64_t>>(&v))
    os << "is:" << join(*is);
  else if (auto *fs = std::get_if<std::vector<double>>(&v))
    os << "fs:" << join(*fs);
  else
    os << "t:" << dtypeName(std::get<DType>(v));
  return os.str();
}

const char *kindName(BufferDesc::Kind k) {
  switch (k) {
  case BufferDesc::Kind::Input:
    return "input";
  case BufferDesc::Kind::Arena:
    return "arena";
  case BufferDesc::Kind::View:
    return "view";
  case BufferDesc::Kind::Weight:
    return "weight";
  case BufferDesc::Kind::Constant:
    return "constant";
  }
  return "?";
}

} // namespace

std::string shardflow::runtime::describeInstruction(const Instruction &inst, size_t n) {
  std::string node = inst.params.getString("node", "");
  return std::string(inst.collective ? "collective '" : "kernel '") + inst.kernel + "' (" +
         (node.empty() ? std::string() : "ONNX node '" + node + "', ") + "instruction " +
         std::to_string(n) + ")";
}

int64_t shardflow::runtime::outputColumnsOf(const Artifact &a, size_t o) {
  return o < a.outputColumns.size() ? a.outputColumns[o] : 0;
}

std::vector<int64_t> shardflow::runtime::outputShape(const Artifact &a, size_t o) {
  std::vector<int64_t> shape = a.buffers.at(size_t(a.outputs.at(o).second)).shape;
  if (int64_t columns = outputColumnsOf(a, o))
    shape.back() = columns;
  return shape;
}

void shardflow::runtime::writeArtifact(const Artifact &a, std::ostream &os) {
  os << "shardflow-artifact " << Artifact::kVersion << "\n";
  os << "target " << a.target << "\n";
  os << "world-size " << a.worldSize << "\n";
  os << "model-dir " << encode(a.modelDir) << "\n";
  os << "arena " << a.arenaBytes << "\n";
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const BufferDesc &b = a.buffers[i];
    os << "buffer " << i << " " << kindName(b.kind) << " " << dtypeName(b.dtype)
       << " " << shapeText(b.shape);
    switch (b.kind) {
    case BufferDesc::Kind::Input:
      os << " name=" << encode(b.name);
      if (b.validRange)
        os << " range=" << b.validRange->first << "," << b.validRange->second;
      if (b.ignoreValue)
        os << " ignore=" << *b.ignoreValue;
      break;
    case BufferDesc::Kind::Arena:
      os << " offset=" << b.offset;
      break;
    case BufferDesc::Kind::View:
      os << " source=" << b.source;
      break;
    case BufferDesc::Kind::Weight:
      os << " name=" << encode(b.name) << " storage=" << b.storage;
      if (!b.file.empty())
        os << " file=" << encode(b.file) << " offset=" << b.fileOffset;
      os << " size=" << b.fileBytes();
      if (b.sourceDType)
        os << " source-dtype=" << dtypeName(*b.sourceDType);
      if (!b.permutation.empty())
        os << " permutation=" << join(b.permutation);
      if (b.scale) {
        char text[32];
        std::snprintf(text, sizeof(text), "%.17g", *b.scale);
        os << " scale=" << text;
      }
      if (!b.globalShape.empty() || !b.starts.empty()) {
        os << " global=" << shapeText(b.globalShape) << " starts=";
        for (size_t r = 0; r < b.starts.size(); ++r)
          os << (r ? ";" : "") << join(b.starts[r]);
      }
      if (b.zeroPadded)
        os << " padded=zeros";
      if (b.writable)
        os << " writable=1";
      if (!b.modelShape.empty())
        os << " model-shape=" << shapeText(b.modelShape);
      if (!b.crc32c.empty()) {
        os << " crc32c=";
        for (size_t r = 0; r < b.crc32c.size(); ++r) {
          char hex[9];
          std::snprintf(hex, sizeof(hex), "%08x", unsigned(b.crc32c[r]));
          os << (r ? ";" : "") << hex;
        }
      }
      break;
    case BufferDesc::Kind::Constant: {
      os << " data=";
      static const char *hex = "0123456789abcdef";
      for (uint8_t byte : b.data)
        os << hex[byte >> 4] << hex[byte & 15];
      break;
    }
    }
    os << "\n";
  }
  for (const DeviceModule &m : a.modules)
    os << "module " << encode(m.name) << " arch=" << encode(m.arch)
       << " format=" << encode(m.format) << " data=" << encodeBase64(m.data) << "\n";
  for (const Instruction &inst : a.program) {
    os << (inst.collective ? "collective " : "kernel ") << inst.kernel << " in=" << join(inst.inputs)
       << " out=" << join(inst.outputs);
    for (const auto &[name, value] : inst.params.all())
      os << " " << encode(name) << "=" << paramText(value);
    os << "\n";
  }
  for (size_t o = 0; o < a.outputs.size(); ++o) {
    os << "output " << encode(a.outputs[o].first) << " " << a.outputs[o].second;
    if (int64_t columns = outputColumnsOf(a, o))
      os << " columns=" << columns;
    os << "\n";
  }
  os << "end\n";
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

// What a reader accepts, bounded so that no size computed from it
// overflows: elements per tensor (as the importer and the TensorProto
// reader), bytes of arena, ranks.
constexpr int64_t kMaxElements = int64_t(1) << 40;
constexpr int64_t kMaxArenaBytes = int64_t(1) << 48;
constexpr int64_t kMaxWorldSize = int64_t(1) << 20;

class Reader {
public:
  Reader(const std::string &text, const std::string &path) : in(text), path(path) {}

  Artifact read();

private:
  [[noreturn]] void fail(const std::string &msg) const {
    throw RuntimeError(path + ":" + std::to_string(lineNo) + ": " + msg);
  }
  std::string decode(const std::string &s) const;
  int64_t toInt(const std::string &s, const char *what) const;
  double toDouble(const std::string &s, const char *what) const;
  std::vector<int64_t> toShape(const std::string &s) const;
  DType toDType(const std::string &s) const;
  int toIndex(const std::string &s, const char *what) const;
  std::vector<int> toIndices(const std::string &s) const;
  ParamValue toParam(const std::string &s) const;
  void checkWeight(const BufferDesc &b, int worldSize) const;
  void checkCollective(const Instruction &inst, int worldSize) const;
  void checkLocalSlice(const Instruction &inst, const Artifact &a) const;
  void checkNoAliasing(const Instruction &inst, const Artifact &a) const;

  std::istringstream in;
  std::string path;
  int lineNo = 0;
};

std::string Reader::decode(const std::string &s) const {
  std::optional<std::string> out = decodeArtifactText(s);
  if (!out)
    fail("bad escape in '" + s + "'");
  return *out;
}

int64_t Reader::toInt(const std::string &s, const char *what) const {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (...) {
    used = 0;
  }
  if (s.empty() || used != s.size())
    fail(std::string("bad ") + what + " '" + s + "'");
  return v;
}

double Reader::toDouble(const std::string &s, const char *what) const {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    // stod rejects "inf"/"nan" spellings it printed itself on some libcs.
    if (s == "inf" || s == "-inf" || s == "nan" || s == "-nan") {
      return s == "inf"    ? std::numeric_limits<double>::infinity()
             : s == "-inf" ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::quiet_NaN();
    }
    used = 0;
  }
  if (s.empty() || used != s.size())
    fail(std::string("bad ") + what + " '" + s + "'");
  return v;
}

std::vector<int64_t> Reader::toShape(const std::string &s) const {
  std::vector<int64_t> shape;
  if (s == "scalar")
    return shape;
  std::stringstream ss(s);
  std::string d;
  int64_t elements = 1;
  while (std::getline(ss, d, 'x')) {
    int64_t v = toInt(d, "dimension");
    if (v < 0 || v > kMaxElements)
      fail("bad dimension '" + d + "'");
    shape.push_back(v);
    // Zero dimensions count as 1, so that strides (products of trailing
    // dimensions) stay in range too; saturated past the limit.
    int64_t extent = std::max<int64_t>(v, 1);
    elements = elements > kMaxElements / extent ? kMaxElements + 1 : elements * extent;
  }
  if (s.empty() || s.back() == 'x')
    fail("bad shape '" + s + "'");
  if (elements > kMaxElements)
    fail("shape '" + s + "' has more than 2^40 elements");
  return shape;
}

DType Reader::toDType(const std::string &s) const {
  auto t = parseDType(s);
  if (!t)
    fail("unknown element type '" + s + "'");
  return *t;
}

int Reader::toIndex(const std::string &s, const char *what) const {
  int64_t v = toInt(s, what);
  // In an int's range, so that no index wraps to another; whether it names
  // a buffer is checked where it is used.
  if (v < int64_t(std::numeric_limits<int>::min()) ||
      v > int64_t(std::numeric_limits<int>::max()))
    fail(std::string("bad ") + what + " '" + s + "'");
  return int(v);
}

std::vector<int> Reader::toIndices(const std::string &s) const {
  std::vector<int> out;
  if (s.empty())
    return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    out.push_back(toIndex(item, "buffer index"));
  if (s.back() == ',')
    fail("bad buffer index list '" + s + "'");
  return out;
}

ParamValue Reader::toParam(const std::string &s) const {
  auto colon = s.find(':');
  if (colon == std::string::npos)
    fail("parameter value '" + s + "' has no type tag");
  std::string tag = s.substr(0, colon), body = s.substr(colon + 1);
  auto split = [&](auto convert) {
    std::vector<decltype(convert(std::string()))> out;
    std::stringstream ss(body);
    std::string item;
    while (!body.empty() && std::getline(ss, item, ','))
      out.push_back(convert(item));
    return out;
  };
  if (tag == "i")
    return toInt(body, "integer parameter");
  if (tag == "f")
    return toDouble(body, "float parameter");
  if (tag == "s")
    return decode(body);
  if (tag == "is")
    return split([&](const std::string &x) { return toInt(x, "integer"); });
  if (tag == "fs")
    return split([&](const std::string &x) { return toDouble(x, "float"); });
  if (tag == "t")
    return toDType(body);
  fail("unknown parameter type tag '" + tag + "'");
}

void Reader::checkWeight(const BufferDesc &b, int worldSize) const {
  std::string what = "weight '" + b.name + "'";
  if (!b.permutation.empty()) {
    std::vector<bool> seen(b.shape.size(), false);
    bool valid = b.permutation.size() == b.shape.size();
    for (int64_t d : b.permutation) {
      valid = valid && d >= 0 && d < int64_t(seen.size()) && !seen[size_t(d)];
      if (valid)
        seen[size_t(d)] = true;
    }
    if (!valid)
      fail(what + ": permutation " + join(b.permutation) + " is not a permutation of its " +
           std::to_string(b.shape.size()) + " dimensions");
  }
  if (b.scale && !canConvertElements(b.fileDType(), DType::F64))
    fail(what + " has a scale but holds " + dtypeName(b.dtype) +
         " elements (only float weights are scaled)");
  const std::vector<int64_t> shape = b.storedShape();
  if (b.globalShape.empty() != b.starts.empty())
    fail(what + " needs both global= and starts= to be sliced");
  if (b.zeroPadded && b.starts.empty())
    fail(what + " is padded=zeros but not sliced (global= and starts=)");
  size_t slices = 1;
  if (!b.starts.empty()) {
    if (b.globalShape.size() != shape.size())
      fail(what + ": global shape and slice shape differ in rank");
    if (b.starts.size() != size_t(worldSize))
      fail(what + " has " + std::to_string(b.starts.size()) +
           " slice starts for a world of " + std::to_string(worldSize) + " ranks");
    for (const auto &start : b.starts) {
      if (start.size() != shape.size())
        fail(what + ": a slice start has the wrong number of dimensions");
      for (size_t d = 0; d < start.size(); ++d)
        if (start[d] < 0 || start[d] > b.globalShape[d] - shape[d]) {
          // Zero padding: past the tensor, not starting past it.
          if (b.zeroPadded && start[d] >= 0 && start[d] <= b.globalShape[d])
            continue;
          fail(what + ": a slice lies outside the global shape" +
               (b.zeroPadded ? "" : " (and the weight is not padded=zeros)"));
        }
    }
    slices = size_t(worldSize);
  }
  if (!b.crc32c.empty() && b.crc32c.size() != slices)
    fail(what + " has " + std::to_string(b.crc32c.size()) + " checksums, expected " +
         std::to_string(slices));
}

void Reader::checkCollective(const Instruction &inst, int worldSize) const {
  if (!parseCollectiveKind(inst.kernel))
    fail("unknown collective '" + inst.kernel + "'");
  // A parameter of the wrong type is refused here, with the line, not
  // when the executor reads it.
  auto param = [&](auto get) {
    try {
      return get();
    } catch (const RuntimeError &e) {
      fail("collective " + inst.kernel + ": " + e.what());
    }
  };
  auto ranks = [&](const char *name) {
    std::vector<int64_t> list = param([&] {
      return inst.params.has(name) ? inst.params.getInts(name) : std::vector<int64_t>{};
    });
    for (int64_t r : list)
      if (r < -1 || r >= worldSize)
        fail("collective " + inst.kernel + ": rank " + std::to_string(r) +
             " in '" + name + "' is outside the world of " + std::to_string(worldSize));
    return list;
  };
  // local_slice names no ranks; its starts are checked against its buffers
  // (checkLocalSlice) once those are known to exist.
  if (inst.kernel == "local_slice")
    return;
  if (inst.kernel == "send" || inst.kernel == "recv") {
    if (ranks("peers").size() != size_t(worldSize))
      fail("collective " + inst.kernel + " needs one peer per rank (-1: none)");
    return;
  }
  if (inst.kernel == "collective_permute") {
    std::vector<int64_t> pairs = ranks("pairs");
    if (pairs.size() % 2)
      fail("collective_permute needs source,target pairs");
    std::vector<int> sends(static_cast<size_t>(worldSize), 0), recvs(sends);
    for (size_t i = 0; i < pairs.size(); i += 2) {
      if (pairs[i] < 0 || pairs[i + 1] < 0)
        fail("collective_permute: ranks in pairs must be non-negative");
      if (++sends[size_t(pairs[i])] > 1 || ++recvs[size_t(pairs[i + 1])] > 1)
        fail("collective_permute: a rank sends or receives twice");
    }
    return;
  }
  std::vector<int64_t> groups = ranks("groups");
  int64_t size = param(
      [&] { return inst.params.has("group_size") ? inst.params.getInt("group_size") : 0; });
  if (size < 1 || groups.empty() || groups.size() % size_t(size))
    fail("collective " + inst.kernel + " needs groups split evenly by group_size");
  std::vector<int> seen(static_cast<size_t>(worldSize), 0);
  for (int64_t r : groups)
    if (r < 0 || ++seen[size_t(r)] > 1)
      fail("collective " + inst.kernel + ": rank " + std::to_string(r) +
           " appears in its groups twice or is negative");
}

void Reader::checkLocalSlice(const Instruction &inst, const Artifact &a) const {
  if (inst.inputs.size() != 1 || inst.outputs.size() != 1)
    fail("collective local_slice needs one input and one output");
  const BufferDesc &in = a.buffers[size_t(inst.inputs[0])];
  const BufferDesc &out = a.buffers[size_t(inst.outputs[0])];
  if (in.dtype != out.dtype || in.shape.size() != out.shape.size())
    fail("collective local_slice: input and output differ in element type or rank");
  auto it = inst.params.all().find("starts");
  const auto *starts =
      it == inst.params.all().end() ? nullptr : std::get_if<std::vector<int64_t>>(&it->second);
  size_t rank = out.shape.size();
  if (!starts || starts->size() != size_t(a.worldSize) * rank)
    fail("collective local_slice needs starts=is: with " + std::to_string(rank) +
         " indices for each of the " + std::to_string(a.worldSize) + " ranks");
  for (size_t r = 0; r < size_t(a.worldSize); ++r)
    for (size_t d = 0; d < rank; ++d) {
      int64_t start = (*starts)[r * rank + d];
      if (start < 0 || start > in.shape[d] - out.shape[d])
        fail("collective local_slice: the block of rank " + std::to_string(r) +
             " leaves the input in dimension " + std::to_string(d));
    }
}

void Reader::checkNoAliasing(const Instruction &inst, const Artifact &a) const {
  // A kernel's outputs never share bytes with its inputs or with each
  // other (Kernel.h): kernels read an input while writing an output, and
  // copy with memcpy. Outputs lie in the arena (checked before); an input
  // outside it cannot overlap them.
  auto arenaRange = [&](int index) {
    while (a.buffers[size_t(index)].kind == BufferDesc::Kind::View)
      index = a.buffers[size_t(index)].source;
    const BufferDesc &b = a.buffers[size_t(index)];
    if (b.kind != BufferDesc::Kind::Arena || b.bytes() == 0)
      return std::pair<int64_t, int64_t>(-1, -1);
    return std::pair<int64_t, int64_t>(b.offset, b.offset + int64_t(b.bytes()));
  };
  for (size_t o = 0; o < inst.outputs.size(); ++o) {
    std::pair<int64_t, int64_t> range = arenaRange(inst.outputs[o]);
    if (range.first < 0)
      continue;
    auto overlaps = [&](int other) {
      std::pair<int64_t, int64_t> r = arenaRange(other);
      return r.first >= 0 && r.first < range.second && range.first < r.second;
    };
    for (int in : inst.inputs)
      if (overlaps(in))
        fail(describeInstruction(inst, a.program.size()) + ": output buffer " +
             std::to_string(inst.outputs[o]) + " overlaps input buffer " + std::to_string(in) +
             " in the arena");
    for (size_t p = 0; p < o; ++p)
      if (overlaps(inst.outputs[p]))
        fail(describeInstruction(inst, a.program.size()) + ": output buffers " +
             std::to_string(inst.outputs[p]) + " and " + std::to_string(inst.outputs[o]) +
             " overlap in the arena");
  }
}

Artifact Reader::read() {
  Artifact a;
  std::string line;
  bool sawHeader = false, sawEnd = false, sawBody = false;
  std::vector<std::string> settings; // target, world-size, ... seen so far
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.empty())
      continue;
    std::istringstream ls(line);
    std::vector<std::string> tok;
    for (std::string t; ls >> t;)
      tok.push_back(t);
    if (tok.empty())
      continue; // a line of blanks, as an empty one
    const std::string &key = tok[0];
    auto need = [&](size_t n) {
      if (tok.size() < n)
        fail("'" + key + "' line is incomplete");
    };
    if (!sawHeader) {
      if (key != "shardflow-artifact" || tok.size() != 2)
        fail("not a Shardflow artifact (no 'shardflow-artifact' header)");
      int64_t version = toInt(tok[1], "version");
      if (version != Artifact::kVersion)
        fail("artifact format version " + std::to_string(version) +
             " is not supported by this shard-run (it reads version " +
             std::to_string(Artifact::kVersion) + "); recompile the model");
      sawHeader = true;
      continue;
    }
    if (sawEnd)
      fail("text after 'end'");
    // The settings come once, before the buffers: the buffers and the
    // program are checked against them as they are read.
    if (key == "target" || key == "world-size" || key == "model-dir" || key == "arena") {
      if (sawBody)
        fail("'" + key + "' line after the buffers (the settings come first)");
      if (std::find(settings.begin(), settings.end(), key) != settings.end())
        fail("a second '" + key + "' line");
      settings.push_back(key);
    } else {
      sawBody = true;
    }
    if (key == "target") {
      need(2);
      a.target = tok[1];
    } else if (key == "world-size") {
      need(2);
      int64_t worldSize = toInt(tok[1], "world size");
      if (worldSize < 1 || worldSize > kMaxWorldSize)
        fail("world size " + tok[1] + " is not between 1 and " + std::to_string(kMaxWorldSize));
      a.worldSize = int(worldSize);
    } else if (key == "model-dir") {
      a.modelDir = tok.size() > 1 ? decode(tok[1]) : "";
    } else if (key == "arena") {
      need(2);
      a.arenaBytes = toInt(tok[1], "arena size");
      if (a.arenaBytes < 0 || a.arenaBytes > kMaxArenaBytes)
        fail("arena size " + tok[1] + " is not between 0 and 2^48 bytes");
    } else if (key == "buffer") {
      need(5);
      if (toInt(tok[1], "buffer index") != int64_t(a.buffers.size()))
        fail("buffers must be numbered in order");
      BufferDesc b;
      const std::string &kind = tok[2];
      b.kind = kind == "input"      ? BufferDesc::Kind::Input
               : kind == "arena"    ? BufferDesc::Kind::Arena
               : kind == "view"     ? BufferDesc::Kind::View
               : kind == "weight"   ? BufferDesc::Kind::Weight
               : kind == "constant" ? BufferDesc::Kind::Constant
                                    : (fail("unknown buffer kind '" + kind + "'"),
                                       BufferDesc::Kind::Arena);
      b.dtype = toDType(tok[3]);
      b.shape = toShape(tok[4]);
      int64_t declaredSize = -1;
      bool sawOffset = false;
      for (size_t i = 5; i < tok.size(); ++i) {
        auto eq = tok[i].find('=');
        if (eq == std::string::npos)
          fail("expected key=value, got '" + tok[i] + "'");
        std::string k = tok[i].substr(0, eq), v = tok[i].substr(eq + 1);
        if (k == "name")
          b.name = decode(v);
        else if (k == "offset") {
          (b.kind == BufferDesc::Kind::Weight ? b.fileOffset : b.offset) =
              toInt(v, "offset");
          sawOffset = true;
        }
        else if (k == "source")
          b.source = toIndex(v, "source");
        else if (k == "storage")
          b.storage = v;
        else if (k == "file")
          b.file = decode(v);
        else if (k == "size")
          declaredSize = toInt(v, "size");
        else if (k == "source-dtype")
          b.sourceDType = toDType(v);
        else if (k == "permutation") {
          std::stringstream ss(v);
          for (std::string d; std::getline(ss, d, ',');)
            b.permutation.push_back(toInt(d, "permutation"));
        }
        else if (k == "global") {
          b.globalShape = toShape(v);
        } else if (k == "starts") {
          std::stringstream ss(v);
          std::string rank;
          while (std::getline(ss, rank, ';')) {
            std::vector<int64_t> start;
            std::stringstream rs(rank);
            for (std::string d; std::getline(rs, d, ',');)
              start.push_back(toInt(d, "slice start"));
            b.starts.push_back(std::move(start));
          }
        } else if (k == "scale") {
          size_t used = 0;
          double x = 0;
          try {
            x = std::stod(v, &used);
          } catch (...) {
            used = 0;
          }
          if (v.empty() || used != v.size() || !std::isfinite(x) || x == 0)
            fail("bad scale '" + v + "' (a finite, nonzero number)");
          b.scale = x;
        } else if (k == "range") {
          auto comma = v.find(',');
          if (comma == std::string::npos)
            fail("range must be LO,HI, got '" + v + "'");
          int64_t lo = toInt(v.substr(0, comma), "range"), hi = toInt(v.substr(comma + 1), "range");
          if (lo >= hi)
            fail("range " + v + " is empty");
          b.validRange = {lo, hi};
        } else if (k == "ignore") {
          b.ignoreValue = toInt(v, "ignore");
        } else if (k == "model-shape") {
          b.modelShape = toShape(v);
        } else if (k == "writable") {
          if (v != "1")
            fail("writable must be '1', got '" + v + "'");
          b.writable = true;
        } else if (k == "padded") {
          if (v != "zeros")
            fail("padded must be 'zeros', got '" + v + "'");
          b.zeroPadded = true;
        } else if (k == "crc32c") {
          std::stringstream ss(v);
          for (std::string c; std::getline(ss, c, ';');) {
            size_t used = 0;
            unsigned long x = 0;
            try {
              x = std::stoul(c, &used, 16);
            } catch (...) {
              used = 0;
            }
            bool hex = std::all_of(c.begin(), c.end(),
                                   [](unsigned char ch) { return std::isxdigit(ch); });
            if (c.empty() || c.size() > 8 || used != c.size() || !hex)
              fail("bad crc32c '" + c + "'");
            b.crc32c.push_back(uint32_t(x));
          }
        } else if (k == "data") {
          if (b.kind != BufferDesc::Kind::Constant)
            fail("only constants have data=");
          if (v.size() != 2 * b.bytes())
            fail("constant data has " + std::to_string(v.size() / 2) +
                 " bytes, its type needs " + std::to_string(b.bytes()));
          for (size_t j = 0; j < v.size(); j += 2) {
            if (!isxdigit((unsigned char)v[j]) || !isxdigit((unsigned char)v[j + 1]))
              fail("constant data is not hexadecimal");
            b.data.push_back(uint8_t(std::stoi(v.substr(j, 2), nullptr, 16)));
          }
        } else {
          fail("unknown buffer field '" + k + "'");
        }
      }
      if (b.zeroPadded && b.kind != BufferDesc::Kind::Weight)
        fail("only weights can be padded=zeros");
      if ((b.validRange || b.ignoreValue) &&
          (b.kind != BufferDesc::Kind::Input ||
           (b.dtype != DType::I64 && b.dtype != DType::I32)))
        fail("only i64 and i32 inputs have a range= or ignore=");
      if (b.writable && b.kind != BufferDesc::Kind::Weight)
        fail("only weights can be writable");
      if (!b.modelShape.empty()) {
        int64_t n = 1, want = 1;
        for (int64_t d : b.modelShape)
          n *= d;
        for (int64_t d : b.starts.empty() ? b.shape : b.globalShape)
          want *= d;
        if (!b.writable || n != want)
          fail("weight '" + b.name + "': model-shape " + shapeText(b.modelShape) +
               " is for writable weights, with as many elements as the weight");
      }
      if (b.kind == BufferDesc::Kind::Weight && b.storage == "zeros" &&
          (!b.writable || !b.file.empty() || !b.permutation.empty() || b.sourceDType ||
           b.scale || b.zeroPadded))
        fail("weight '" + b.name + "' of storage zeros must be writable=1 and have no "
             "file, permutation, source-dtype, scale or padding");
      // The executors point at a constant's bytes: they must be there.
      if (b.kind == BufferDesc::Kind::Constant && b.data.size() != b.bytes())
        fail("constant buffer " + tok[1] + " has no data= (" + std::to_string(b.bytes()) +
             " bytes)");
      if (b.kind == BufferDesc::Kind::Weight && b.fileOffset < 0)
        fail("weight '" + b.name + "' has a negative offset");
      if (declaredSize >= 0 && declaredSize != int64_t(b.fileBytes()))
        fail("weight size " + std::to_string(declaredSize) + " does not match its type");
      if (b.sourceDType && b.kind != BufferDesc::Kind::Weight)
        fail("only weights have a source-dtype");
      if (!b.permutation.empty() && b.kind != BufferDesc::Kind::Weight)
        fail("only weights have a permutation");
      if (b.scale && b.kind != BufferDesc::Kind::Weight)
        fail("only weights have a scale");
      if (b.kind == BufferDesc::Kind::Weight)
        checkWeight(b, a.worldSize);
      if (b.kind == BufferDesc::Kind::View &&
          (b.source < 0 || b.source >= int(a.buffers.size())))
        fail("view of an unknown buffer");
      if (b.kind == BufferDesc::Kind::View &&
          a.buffers[b.source].bytes() != b.bytes())
        fail("view changes the byte size of buffer " + std::to_string(b.source));
      if (b.kind == BufferDesc::Kind::Arena && !sawOffset)
        fail("arena buffer " + tok[1] + " has no offset=");
      if (b.kind == BufferDesc::Kind::Arena &&
          (b.offset < 0 || b.offset > a.arenaBytes ||
           int64_t(b.bytes()) > a.arenaBytes - b.offset))
        fail("buffer lies outside the arena");
      // Kernels read and write whole elements: an element at an odd
      // address is a misaligned access.
      if (b.kind == BufferDesc::Kind::Arena && b.offset % int64_t(dtypeSize(b.dtype)))
        fail("arena buffer " + tok[1] + " at offset " + std::to_string(b.offset) +
             " is not aligned to its " + std::to_string(dtypeSize(b.dtype)) + "-byte elements");
      a.buffers.push_back(std::move(b));
    } else if (key == "module") {
      need(5);
      DeviceModule m;
      m.name = decode(tok[1]);
      for (size_t i = 2; i < tok.size(); ++i) {
        auto eq = tok[i].find('=');
        if (eq == std::string::npos)
          fail("expected key=value, got '" + tok[i] + "'");
        std::string k = tok[i].substr(0, eq), v = tok[i].substr(eq + 1);
        if (k == "arch")
          m.arch = decode(v);
        else if (k == "format")
          m.format = decode(v);
        else if (k == "data") {
          if (!decodeBase64(v, m.data))
            fail("module '" + m.name + "' data is not base64");
        } else
          fail("unknown module field '" + k + "'");
      }
      if (m.format != "cubin" && m.format != "ptx")
        fail("module '" + m.name + "' has format '" + m.format + "' (cubin or ptx expected)");
      if (m.arch.empty() || m.data.empty())
        fail("module '" + m.name + "' needs arch= and data=");
      a.modules.push_back(std::move(m));
    } else if (key == "kernel" || key == "collective") {
      need(4);
      Instruction inst;
      inst.collective = key == "collective";
      inst.kernel = tok[1];
      for (size_t i = 2; i < tok.size(); ++i) {
        auto eq = tok[i].find('=');
        if (eq == std::string::npos)
          fail("expected key=value, got '" + tok[i] + "'");
        std::string k = tok[i].substr(0, eq), v = tok[i].substr(eq + 1);
        if (i == 2 && k == "in")
          inst.inputs = toIndices(v);
        else if (i == 3 && k == "out")
          inst.outputs = toIndices(v);
        else
          inst.params.set(decode(k), toParam(v));
      }
      if (inst.collective) {
        checkCollective(inst, a.worldSize);
        inst.collectiveKind = *parseCollectiveKind(inst.kernel);
      }
      for (int idx : inst.inputs)
        if (idx < 0 || idx >= int(a.buffers.size()))
          fail("kernel " + inst.kernel + " reads an unknown buffer");
      for (int idx : inst.outputs) {
        if (idx < 0 || idx >= int(a.buffers.size()))
          fail("kernel " + inst.kernel + " writes an unknown buffer");
        // Weights are mapped read-only, constants and inputs are the
        // artifact's and the caller's: a program writes only the arena
        // (directly or through a view) and writable state.
        int root = idx;
        while (a.buffers[size_t(root)].kind == BufferDesc::Kind::View)
          root = a.buffers[size_t(root)].source;
        BufferDesc::Kind kind = a.buffers[size_t(root)].kind;
        if (kind != BufferDesc::Kind::Arena && !a.buffers[size_t(root)].writable)
          fail(describeInstruction(inst, a.program.size()) + " writes buffer " +
               std::to_string(idx) + ", " + (root == idx ? "" : "a view of ") + "a" +
               (kind == BufferDesc::Kind::Input ? "n " : " ") + kindName(kind) +
               " (read-only)");
      }
      if (!inst.collective)
        checkNoAliasing(inst, a);
      if (inst.collective && inst.kernel == "local_slice")
        checkLocalSlice(inst, a);
      a.program.push_back(std::move(inst));
    } else if (key == "output") {
      need(3);
      int idx = toIndex(tok[2], "buffer index");
      if (idx < 0 || idx >= int(a.buffers.size()))
        fail("output of an unknown buffer");
      a.outputs.emplace_back(decode(tok[1]), idx);
      int64_t columns = 0;
      for (size_t t = 3; t < tok.size(); ++t) {
        if (tok[t].rfind("columns=", 0) != 0)
          fail("unknown output field '" + tok[t] + "'");
        columns = toInt(tok[t].substr(8), "columns");
        const BufferDesc &b = a.buffers[size_t(idx)];
        if (a.target != "cuda")
          fail("output columns= needs target cuda (the CPU executor returns whole buffers)");
        if (b.shape.empty() || columns <= 0 || columns >= b.shape.back())
          fail("output columns=" + std::to_string(columns) +
               " must be positive and below the buffer's last dimension");
      }
      a.outputColumns.resize(a.outputs.size(), 0);
      a.outputColumns.back() = columns;
    } else if (key == "end") {
      sawEnd = true;
    } else {
      fail("unknown line '" + key + "'");
    }
  }
  if (!sawHeader)
    throw RuntimeError(path + ": empty file, not a Shardflow artifact");
  if (!sawEnd)
    throw RuntimeError(path + ": truncated artifact (no 'end' line)");
  return a;
}

} // namespace

std::string shardflow::runtime::encodeBase64(const std::vector<uint8_t> &bytes) {
  static const char *alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = uint32_t(bytes[i]) << 16;
    if (i + 1 < bytes.size())
      n |= uint32_t(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size())
      n |= bytes[i + 2];
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[n & 63] : '=';
  }
  return out;
}

bool shardflow::runtime::decodeBase64(const std::string &text, std::vector<uint8_t> &bytes) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    if (c == '+')
      return 62;
    if (c == '/')
      return 63;
    return -1;
  };
  if (text.size() % 4)
    return false;
  bytes.clear();
  bytes.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      char c = text[i + j];
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      if (pad || (v[j] = value(c)) < 0)
        return false;
    }
    uint32_t n = uint32_t(v[0]) << 18 | uint32_t(v[1]) << 12 | uint32_t(v[2]) << 6 | uint32_t(v[3]);
    bytes.push_back(uint8_t(n >> 16));
    if (pad < 2)
      bytes.push_back(uint8_t(n >> 8));
    if (pad < 1)
      bytes.push_back(uint8_t(n));
  }
  return true;
}

std::string shardflow::runtime::encodeArtifactText(const std::string &s) { return encode(s); }

std::optional<std::string> shardflow::runtime::decodeArtifactText(const std::string &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !isxdigit((unsigned char)s[i + 1]) ||
        !isxdigit((unsigned char)s[i + 2]))
      return std::nullopt;
    out += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return out;
}

Artifact shardflow::runtime::parseArtifact(const std::string &text,
                                           const std::string &path) {
  return Reader(text, path).read();
}

Artifact shardflow::runtime::readArtifact(const std::string &path) {
  Artifact a = parseArtifact(readWholeFile(path), path);
  auto slash = path.find_last_of('/');
  a.artifactDir = slash == std::string::npos ? "." : path.substr(0, slash);
  return a;
}
