//===- ProtobufOffsets.cpp - initializer payload offsets in a .onnx --------===//
//
// A minimal, bounds-checked reader of the protobuf wire format, enough to
// follow ModelProto.graph (field 7), GraphProto.initializer (field 5) and
// TensorProto.{name (8), float_data (4), raw_data (9), double_data (10)}.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Import/ONNX/ProtobufOffsets.h"

#include <optional>

using namespace shardflow;

namespace {
class WireReader {
public:
  WireReader(const uint8_t *begin, const uint8_t *end, const uint8_t *base)
      : pos(begin), end(end), base(base) {}

  bool atEnd() const { return pos >= end; }

  std::optional<uint64_t> varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= end)
        return std::nullopt;
      uint8_t byte = *pos++;
      value |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        return value;
    }
    return std::nullopt;
  }

  /// Reads a field key; returns (field number, wire type).
  std::optional<std::pair<uint64_t, unsigned>> key() {
    auto k = varint();
    if (!k)
      return std::nullopt;
    return std::make_pair(*k >> 3, unsigned(*k & 7));
  }

  /// For a length-delimited field: the payload's [begin, end).
  std::optional<std::pair<const uint8_t *, const uint8_t *>> bytes() {
    auto len = varint();
    if (!len || *len > uint64_t(end - pos))
      return std::nullopt;
    const uint8_t *b = pos;
    pos += *len;
    return std::make_pair(b, pos);
  }

  bool skip(unsigned wireType) {
    switch (wireType) {
    case 0:
      return varint().has_value();
    case 1:
      return advance(8);
    case 2:
      return bytes().has_value();
    case 5:
      return advance(4);
    default:
      return false; // Groups (3, 4) are not used by ONNX.
    }
  }

  uint64_t offsetOf(const uint8_t *p) const { return uint64_t(p - base); }

private:
  bool advance(uint64_t n) {
    if (n > uint64_t(end - pos))
      return false;
    pos += n;
    return true;
  }
  const uint8_t *pos, *end, *base;
};
} // namespace

static void scanTensor(WireReader r, llvm::StringMap<PayloadRange> &out) {
  std::string name;
  std::optional<PayloadRange> payload;
  while (!r.atEnd()) {
    auto k = r.key();
    if (!k)
      return;
    auto [field, wire] = *k;
    if (wire == 2 && (field == 8 || field == 9 || field == 4 || field == 10)) {
      auto b = r.bytes();
      if (!b)
        return;
      if (field == 8)
        name.assign(reinterpret_cast<const char *>(b->first),
                    b->second - b->first);
      else
        payload = PayloadRange{r.offsetOf(b->first),
                               uint64_t(b->second - b->first)};
      continue;
    }
    if (!r.skip(wire))
      return;
  }
  if (payload && !name.empty())
    out[name] = *payload;
}

llvm::StringMap<PayloadRange>
shardflow::findInitializerPayloads(llvm::StringRef model) {
  llvm::StringMap<PayloadRange> out;
  auto *base = reinterpret_cast<const uint8_t *>(model.data());
  WireReader top(base, base + model.size(), base);
  while (!top.atEnd()) {
    auto k = top.key();
    if (!k)
      break;
    auto [field, wire] = *k;
    if (field == 7 && wire == 2) {
      auto graph = top.bytes();
      if (!graph)
        break;
      WireReader g(graph->first, graph->second, base);
      while (!g.atEnd()) {
        auto gk = g.key();
        if (!gk)
          break;
        if (gk->first == 5 && gk->second == 2) {
          auto tensor = g.bytes();
          if (!tensor)
            break;
          scanTensor(WireReader(tensor->first, tensor->second, base), out);
        } else if (!g.skip(gk->second)) {
          break;
        }
      }
      continue;
    }
    if (!top.skip(wire))
      break;
  }
  return out;
}
