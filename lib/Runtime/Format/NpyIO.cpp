//===- NpyIO.cpp - numpy .npy/.npz reading and writing ---------------------===//

#include "shardflow/Runtime/Format/NpyIO.h"

#include <cstring>
#include <fstream>
#include <sstream>

using namespace shardflow::runtime;

namespace {

struct NpyType {
  const char *descr;
  DType dtype;
};
// numpy's descriptors for our element types ('<' little-endian, '|' n/a).
constexpr NpyType kNpyTypes[] = {
    {"<f2", DType::F16}, {"<f4", DType::F32}, {"<f8", DType::F64},
    {"|b1", DType::I1},  {"|i1", DType::I8},  {"<i2", DType::I16},
    {"<i4", DType::I32}, {"<i8", DType::I64}, {"|u1", DType::U8},
    {"<u2", DType::U16}, {"<u4", DType::U32}, {"<u8", DType::U64},
};


/// Finds the value text after `'key':` in numpy's header dictionary.
std::string headerField(const std::string &header, const std::string &key,
                        const std::string &what) {
  auto at = header.find("'" + key + "'");
  if (at == std::string::npos)
    throw RuntimeError(what + ": .npy header has no '" + key + "'");
  at = header.find(':', at);
  if (at == std::string::npos)
    throw RuntimeError(what + ": malformed .npy header");
  size_t start = header.find_first_not_of(' ', at + 1);
  if (start == std::string::npos)
    throw RuntimeError(what + ": malformed .npy header");
  size_t end;
  if (header[start] == '(')
    end = header.find(')', start) + 1;
  else if (header[start] == '\'')
    end = header.find('\'', start + 1) + 1;
  else
    end = header.find_first_of(",}", start);
  if (end == std::string::npos || end == 0 || end <= start)
    throw RuntimeError(what + ": malformed .npy header");
  return header.substr(start, end - start);
}

/// CRC-32 (zip's) of `n` bytes, continuing from `crc` (0 to start).
uint32_t crc32(const void *data, size_t n, uint32_t crc = 0) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = true;
  }
  uint32_t c = crc ^ 0xFFFFFFFFu;
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i)
    c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void put16(std::string &s, uint16_t v) { s.append(reinterpret_cast<char *>(&v), 2); }
void put32(std::string &s, uint32_t v) { s.append(reinterpret_cast<char *>(&v), 4); }
uint16_t get16(const std::string &s, size_t at) {
  uint16_t v;
  std::memcpy(&v, s.data() + at, 2);
  return v;
}
uint32_t get32(const std::string &s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

} // namespace

std::string shardflow::runtime::readWholeFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw RuntimeError("cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

HostTensor shardflow::runtime::parseNpy(const std::string &data,
                                        const std::string &what) {
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0)
    throw RuntimeError(what + ": not a .npy file");
  int major = (unsigned char)data[6];
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = get16(data, 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12)
      throw RuntimeError(what + ": truncated .npy header");
    headerLen = get32(data, 8);
    headerStart = 12;
  } else {
    throw RuntimeError(what + ": unsupported .npy version " + std::to_string(major));
  }
  if (headerStart + headerLen > data.size())
    throw RuntimeError(what + ": truncated .npy header");
  std::string header = data.substr(headerStart, headerLen);
  std::string descr = headerField(header, "descr", what);
  std::string fortran = headerField(header, "fortran_order", what);
  std::string shapeText = headerField(header, "shape", what);
  if (fortran != "False")
    throw RuntimeError(what + ": Fortran-ordered arrays are not supported; "
                              "save with np.ascontiguousarray");
  descr = descr.substr(1, descr.size() - 2);
  if (descr == "=f4" || descr == "=f8" || descr == "=i8" || descr == "=i4")
    descr[0] = '<';
  HostTensor t;
  bool known = false;
  for (const auto &nt : kNpyTypes)
    if (descr == nt.descr) {
      t.dtype = nt.dtype;
      known = true;
    }
  if (!known)
    throw RuntimeError(what + ": unsupported element type '" + descr + "'");
  if (shapeText.size() < 2 || shapeText.front() != '(' || shapeText.back() != ')')
    throw RuntimeError(what + ": bad shape " + shapeText);
  std::string dims = shapeText.substr(1, shapeText.size() - 2);
  std::stringstream ss(dims);
  std::string d;
  // Element counts above 2^40 are refused (as the artifact and TensorProto
  // readers do), so that the byte count below cannot overflow.
  constexpr int64_t kMaxElements = int64_t(1) << 40;
  int64_t elements = 1;
  while (std::getline(ss, d, ',')) {
    size_t first = d.find_first_not_of(' '), last = d.find_last_not_of(' ');
    if (first == std::string::npos)
      continue;
    std::string digits = d.substr(first, last - first + 1);
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(digits, &used);
    } catch (...) {
    }
    if (used != digits.size() || v < 0)
      throw RuntimeError(what + ": bad shape " + shapeText);
    if (v > kMaxElements || (v && elements > kMaxElements / v))
      throw RuntimeError(what + ": shape " + shapeText + " has more than 2^40 elements");
    elements *= v;
    t.shape.push_back(v);
  }
  size_t bytes = size_t(elements) * dtypeSize(t.dtype);
  size_t dataStart = headerStart + headerLen;
  if (data.size() - dataStart != bytes)
    throw RuntimeError(what + ": holds " + std::to_string(data.size() - dataStart) +
                       " bytes of data; shape " + shapeText + " needs " +
                       std::to_string(bytes));
  t.bytes.assign(data.begin() + dataStart, data.end());
  return t;
}

HostTensor shardflow::runtime::readNpy(const std::string &path) {
  return parseNpy(readWholeFile(path), path);
}

std::vector<std::pair<std::string, HostTensor>>
shardflow::runtime::readNpz(const std::string &path) {
  return parseNpz(readWholeFile(path), path);
}

std::vector<std::pair<std::string, HostTensor>>
shardflow::runtime::parseNpz(const std::string &zip, const std::string &path) {
  std::vector<std::pair<std::string, HostTensor>> out;
  // Every offset below is checked against the file's size before it is
  // read: a damaged or truncated .npz is refused, never read past.
  size_t at = 0;
  while (at + 30 <= zip.size() && get32(zip, at) == 0x04034b50) {
    uint16_t flags = get16(zip, at + 6), method = get16(zip, at + 8);
    uint64_t size = get32(zip, at + 18);
    uint16_t nameLen = get16(zip, at + 26), extraLen = get16(zip, at + 28);
    size_t extra = at + 30 + nameLen, dataAt = extra + extraLen;
    if (dataAt > zip.size())
      throw RuntimeError(path + ": truncated zip header at byte " + std::to_string(at));
    std::string name = zip.substr(at + 30, nameLen);
    if (method != 0)
      throw RuntimeError(path + ": member '" + name +
                         "' is compressed; write inputs with numpy.savez, "
                         "not savez_compressed");
    if (flags & 0x08)
      throw RuntimeError(path + ": streamed zip members are not supported");
    if (size == 0xFFFFFFFFu) { // zip64: numpy uses it for large members
      bool found = false;
      while (extra + 4 <= dataAt) {
        uint16_t id = get16(zip, extra), len = get16(zip, extra + 2);
        if (extra + 4 + len > dataAt)
          break;
        if (id == 1 && len >= 8) {
          std::memcpy(&size, zip.data() + extra + 4, 8);
          found = true;
          break;
        }
        extra += 4 + size_t(len);
      }
      if (!found)
        throw RuntimeError(path + ": malformed zip64 member '" + name + "'");
    }
    if (size > zip.size() - dataAt)
      throw RuntimeError(path + ": truncated member '" + name + "'");
    std::string member = zip.substr(dataAt, size_t(size));
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    out.emplace_back(name, parseNpy(member, path + ":" + name));
    at = dataAt + size_t(size);
  }
  if (out.empty())
    throw RuntimeError(path + ": not an .npz file (no zip members)");
  return out;
}

/// The .npy preamble (magic, version, header) for `t`'s type and shape.
static std::string npyHeader(const Tensor &t) {
  const char *descr = nullptr;
  for (const auto &nt : kNpyTypes)
    if (nt.dtype == t.dtype)
      descr = nt.descr;
  if (!descr)
    throw RuntimeError(std::string("element type ") + dtypeName(t.dtype) +
                       " has no numpy equivalent");
  std::string shape = "(";
  for (size_t i = 0; i < t.shape.size(); ++i)
    shape += std::to_string(t.shape[i]) + (t.shape.size() == 1 ? "," : i + 1 < t.shape.size() ? ", " : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so that the data starts on a 64-byte boundary, ending with '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  put16(out, uint16_t(header.size()));
  return out + header;
}

std::string shardflow::runtime::serializeNpy(const Tensor &t) {
  std::string out = npyHeader(t);
  out.append(static_cast<const char *>(t.data), t.bytes());
  return out;
}

// The writers stream the tensor's bytes from where they are: no copy of
// the data is made, however large the output.
void shardflow::runtime::writeNpy(const std::string &path, const Tensor &t) {
  std::ofstream f(path, std::ios::binary);
  std::string header = npyHeader(t);
  if (!f.write(header.data(), header.size()) ||
      !f.write(static_cast<const char *>(t.data), t.bytes()))
    throw RuntimeError("cannot write '" + path + "'");
}

void shardflow::runtime::writeNpz(
    const std::string &path,
    const std::vector<std::pair<std::string, Tensor>> &tensors) {
  std::ofstream f(path, std::ios::binary);
  if (!f)
    throw RuntimeError("cannot write '" + path + "'");
  std::string central;
  uint64_t written = 0;
  auto emit = [&](const void *data, size_t n) {
    if (!f.write(static_cast<const char *>(data), n))
      throw RuntimeError("cannot write '" + path + "'");
    written += n;
  };
  for (const auto &[name, tensor] : tensors) {
    std::string header = npyHeader(tensor);
    uint64_t size = header.size() + tensor.bytes();
    if (size >= 0xFFFFFFFFu || written >= 0xFFFFFFFFu)
      throw RuntimeError("output '" + name + "' is over 4 GiB; write .npy instead");
    std::string file = name + ".npy";
    uint32_t crc = crc32(header.data(), header.size());
    crc = crc32(tensor.data, tensor.bytes(), crc);
    uint32_t offset = uint32_t(written);
    // Local header: stored (method 0), no data descriptor.
    std::string local;
    put32(local, 0x04034b50);
    put16(local, 20);
    put16(local, 0);
    put16(local, 0);
    put16(local, 0);
    put16(local, 0x21);
    put32(local, crc);
    put32(local, uint32_t(size));
    put32(local, uint32_t(size));
    put16(local, uint16_t(file.size()));
    put16(local, 0);
    local += file;
    local += header;
    emit(local.data(), local.size());
    emit(tensor.data, tensor.bytes());
    put32(central, 0x02014b50);
    put16(central, 20);
    put16(central, 20);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0x21);
    put32(central, crc);
    put32(central, uint32_t(size));
    put32(central, uint32_t(size));
    put16(central, uint16_t(file.size()));
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put32(central, 0);
    put32(central, offset);
    central += file;
  }
  std::string end = central;
  put32(end, 0x06054b50);
  put16(end, 0);
  put16(end, 0);
  put16(end, uint16_t(tensors.size()));
  put16(end, uint16_t(tensors.size()));
  put32(end, uint32_t(central.size()));
  put32(end, uint32_t(written)); // the central directory starts here
  put16(end, 0);
  emit(end.data(), end.size());
}
