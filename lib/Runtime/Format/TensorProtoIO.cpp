//===- TensorProtoIO.cpp - ONNX TensorProto reading and writing ------------===//
//
// A bounds-checked reader and a writer for the protobuf wire format of one
// onnx.TensorProto. Every length read from the file is checked against the
// bytes that remain before it is used, so a truncated or corrupt file is
// reported, never read past.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/TensorProtoIO.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <cstring>
#include <fstream>
#include <sstream>

using namespace shardflow::runtime;

namespace {

// onnx.TensorProto.DataType values.
enum OnnxType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
};

struct TypeMapping {
  int32_t onnx;
  DType dtype;
};
constexpr TypeMapping kTypes[] = {
    {kFloat, DType::F32},   {kUInt8, DType::U8},     {kInt8, DType::I8},
    {kUInt16, DType::U16},  {kInt16, DType::I16},    {kInt32, DType::I32},
    {kInt64, DType::I64},   {kBool, DType::I1},      {kFloat16, DType::F16},
    {kDouble, DType::F64},  {kUInt32, DType::U32},   {kUInt64, DType::U64},
    {kBFloat16, DType::BF16},
};

std::string onnxTypeName(int64_t t) {
  static const char *names[] = {
      "UNDEFINED", "FLOAT",      "UINT8",        "INT8",       "UINT16",
      "INT16",     "INT32",      "INT64",        "STRING",     "BOOL",
      "FLOAT16",   "DOUBLE",     "UINT32",       "UINT64",     "COMPLEX64",
      "COMPLEX128", "BFLOAT16",  "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
      "FLOAT8E5M2FNUZ", "UINT4", "INT4",         "FLOAT4E2M1", "FLOAT8E8M0",
      "UINT2",     "INT2"};
  if (t >= 0 && t < int64_t(sizeof(names) / sizeof(names[0])))
    return names[t];
  return "data type " + std::to_string(t);
}

// Field numbers of onnx.TensorProto.
enum Field : uint32_t {
  kDims = 1,
  kDataType = 2,
  kSegment = 3,
  kFloatData = 4,
  kInt32Data = 5,
  kStringData = 6,
  kInt64Data = 7,
  kName = 8,
  kRawData = 9,
  kDoubleData = 10,
  kUInt64Data = 11,
  kExternalData = 13,
  kDataLocation = 14,
};

enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

/// A cursor over protobuf bytes that never reads past its end.
class WireReader {
public:
  WireReader(const char *begin, const char *end, const std::string &what)
      : p(reinterpret_cast<const uint8_t *>(begin)),
        end(reinterpret_cast<const uint8_t *>(end)), what(what) {}

  bool done() const { return p == end; }
  size_t left() const { return size_t(end - p); }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p == end)
        fail("truncated varint");
      uint8_t b = *p++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80))
        return v;
    }
    fail("varint longer than 10 bytes");
  }
  uint32_t fixed32() {
    need(4);
    uint32_t v;
    std::memcpy(&v, p, 4);
    p += 4;
    return v;
  }
  uint64_t fixed64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, p, 8);
    p += 8;
    return v;
  }
  /// A length-delimited payload: the varint length, then that many bytes.
  WireReader sub() {
    uint64_t n = varint();
    if (n > left())
      fail("length " + std::to_string(n) + " runs past the end of the data (" +
           std::to_string(left()) + " bytes left)");
    const uint8_t *at = p;
    p += n;
    return WireReader(reinterpret_cast<const char *>(at),
                      reinterpret_cast<const char *>(p), what);
  }
  std::string bytes() {
    WireReader s = sub();
    return std::string(reinterpret_cast<const char *>(s.p), s.left());
  }
  void skip(uint32_t wire) {
    switch (wire) {
    case kVarint:
      varint();
      return;
    case kFixed64:
      need(8);
      p += 8;
      return;
    case kLen:
      sub();
      return;
    case kFixed32:
      need(4);
      p += 4;
      return;
    default:
      fail("unsupported wire type " + std::to_string(wire));
    }
  }

  [[noreturn]] void fail(const std::string &why) const {
    throw RuntimeError(what + ": not a valid ONNX TensorProto: " + why);
  }

private:
  void need(size_t n) {
    if (left() < n)
      fail("truncated field");
  }
  const uint8_t *p, *end;
  const std::string &what;
};

/// The typed payload fields of a TensorProto as read from the wire.
struct Payload {
  std::vector<uint32_t> floats;  // float_data, as bits
  std::vector<uint64_t> int32s;  // int32_data, as varints
  std::vector<uint64_t> int64s;  // int64_data
  std::vector<uint64_t> doubles; // double_data, as bits
  std::vector<uint64_t> uint64s; // uint64_data
  bool hasRaw = false;
  std::string raw;
};

/// Reads a repeated varint field, packed (wire type 2) or one value.
void readVarints(WireReader &r, uint32_t wire, std::vector<uint64_t> &out,
                 const char *field) {
  if (wire == kVarint) {
    out.push_back(r.varint());
  } else if (wire == kLen) {
    WireReader s = r.sub();
    while (!s.done())
      out.push_back(s.varint());
  } else {
    r.fail(std::string(field) + " has wire type " + std::to_string(wire));
  }
}

template <typename T, uint32_t Wire_, typename Read>
void readFixed(WireReader &r, uint32_t wire, std::vector<T> &out, const char *field,
               Read read) {
  if (wire == Wire_) {
    out.push_back(read(r));
  } else if (wire == kLen) {
    WireReader s = r.sub();
    if (s.left() % sizeof(T))
      r.fail(std::string("packed ") + field + " has " + std::to_string(s.left()) +
             " bytes, not a multiple of " + std::to_string(sizeof(T)));
    out.reserve(out.size() + s.left() / sizeof(T));
    while (!s.done())
      out.push_back(read(s));
  } else {
    r.fail(std::string(field) + " has wire type " + std::to_string(wire));
  }
}


void putVarint(std::string &s, uint64_t v) {
  while (v >= 0x80) {
    s += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  s += char(uint8_t(v));
}
void putKey(std::string &s, uint32_t field, uint32_t wire) {
  putVarint(s, (uint64_t(field) << 3) | wire);
}

/// Copies `values` into `t.bytes`, narrowing each to the element type.
template <typename T>
void narrowInto(HostTensor &t, const std::vector<uint64_t> &values) {
  t.bytes.resize(values.size() * sizeof(T));
  for (size_t i = 0; i < values.size(); ++i) {
    T v = T(values[i]);
    std::memcpy(t.bytes.data() + i * sizeof(T), &v, sizeof(T));
  }
}

} // namespace

std::optional<DType> shardflow::runtime::dtypeFromOnnx(int32_t onnxType) {
  for (const auto &m : kTypes)
    if (m.onnx == onnxType)
      return m.dtype;
  return std::nullopt;
}

int32_t shardflow::runtime::onnxFromDType(DType t) {
  for (const auto &m : kTypes)
    if (m.dtype == t)
      return m.onnx;
  throw RuntimeError(std::string("element type ") + dtypeName(t) +
                     " has no ONNX equivalent");
}

HostTensor shardflow::runtime::parseTensorProto(const std::string &data,
                                                const std::string &what,
                                                std::string *nameOut) {
  WireReader r(data.data(), data.data() + data.size(), what);
  std::vector<uint64_t> dims;
  int64_t dataType = kUndefined;
  bool hasDataType = false;
  std::string name;
  Payload pay;
  while (!r.done()) {
    uint64_t key = r.varint();
    uint64_t field = key >> 3;
    uint32_t wire = uint32_t(key & 7);
    if (field == 0)
      r.fail("field number 0");
    switch (field) {
    case kDims:
      readVarints(r, wire, dims, "dims");
      break;
    case kDataType:
      if (wire != kVarint)
        r.fail("data_type has wire type " + std::to_string(wire));
      dataType = int64_t(int32_t(r.varint()));
      hasDataType = true;
      break;
    case kSegment:
      throw RuntimeError(what + ": segmented TensorProtos are not supported");
    case kFloatData:
      readFixed<uint32_t, kFixed32>(r, wire, pay.floats, "float_data",
                                    [](WireReader &w) { return w.fixed32(); });
      break;
    case kInt32Data:
      readVarints(r, wire, pay.int32s, "int32_data");
      break;
    case kStringData:
      throw RuntimeError(what + ": string tensors are not supported (the tensor "
                                "has string_data)");
    case kInt64Data:
      readVarints(r, wire, pay.int64s, "int64_data");
      break;
    case kName:
      if (wire != kLen)
        r.fail("name has wire type " + std::to_string(wire));
      name = r.bytes();
      break;
    case kRawData:
      if (wire != kLen)
        r.fail("raw_data has wire type " + std::to_string(wire));
      pay.raw = r.bytes();
      pay.hasRaw = true;
      break;
    case kDoubleData:
      readFixed<uint64_t, kFixed64>(r, wire, pay.doubles, "double_data",
                                    [](WireReader &w) { return w.fixed64(); });
      break;
    case kUInt64Data:
      readVarints(r, wire, pay.uint64s, "uint64_data");
      break;
    case kExternalData:
      throw RuntimeError(what + ": the tensor's data is external (external_data); "
                                "save it with its data inside the .pb");
    case kDataLocation: {
      if (wire != kVarint)
        r.fail("data_location has wire type " + std::to_string(wire));
      if (r.varint() != 0)
        throw RuntimeError(what + ": the tensor's data is external "
                                  "(data_location EXTERNAL); save it with its "
                                  "data inside the .pb");
      break;
    }
    default:
      r.skip(wire); // doc_string, metadata_props, fields added later
    }
  }

  if (!hasDataType || dataType == kUndefined)
    throw RuntimeError(what + ": the TensorProto has no data_type");
  if (dataType == kString)
    throw RuntimeError(what + ": string tensors are not supported");
  auto dtype = dtypeFromOnnx(int32_t(dataType));
  if (!dtype)
    throw RuntimeError(what + ": element type " + onnxTypeName(dataType) +
                       " is not supported");

  HostTensor t;
  t.dtype = *dtype;
  // Element counts above 2^40 are refused before anything is allocated.
  constexpr uint64_t kMaxElements = uint64_t(1) << 40;
  uint64_t numel = 1;
  for (uint64_t d : dims) {
    if (int64_t(d) < 0)
      throw RuntimeError(what + ": negative dimension " + std::to_string(int64_t(d)));
    if (d > kMaxElements || (d && numel > kMaxElements / d))
      throw RuntimeError(what + ": more than 2^40 elements");
    numel *= d;
    t.shape.push_back(int64_t(d));
  }
  size_t elemSize = dtypeSize(t.dtype);
  auto shapeText = [&] {
    std::string s = "[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      s += (i ? "," : "") + std::to_string(t.shape[i]);
    return s + "]";
  };

  // Which typed field ONNX stores this element type in.
  const char *typedField;
  size_t typedCount;
  switch (t.dtype) {
  case DType::F32:
    typedField = "float_data";
    typedCount = pay.floats.size();
    break;
  case DType::F64:
    typedField = "double_data";
    typedCount = pay.doubles.size();
    break;
  case DType::I64:
    typedField = "int64_data";
    typedCount = pay.int64s.size();
    break;
  case DType::U32:
  case DType::U64:
    typedField = "uint64_data";
    typedCount = pay.uint64s.size();
    break;
  default:
    typedField = "int32_data";
    typedCount = pay.int32s.size();
    break;
  }
  size_t anyTyped = pay.floats.size() + pay.doubles.size() + pay.int64s.size() +
                    pay.uint64s.size() + pay.int32s.size();
  if (anyTyped != typedCount)
    throw RuntimeError(what + ": a " + onnxTypeName(dataType) +
                       " tensor holds its values in the wrong field (expected " +
                       typedField + " or raw_data)");
  if (pay.hasRaw && typedCount)
    throw RuntimeError(what + ": the tensor has both raw_data and " + typedField);

  if (pay.hasRaw) {
    if (pay.raw.size() != numel * elemSize)
      throw RuntimeError(what + ": raw_data holds " + std::to_string(pay.raw.size()) +
                         " bytes; " + onnxTypeName(dataType) + shapeText() +
                         " needs " + std::to_string(numel * elemSize));
    t.bytes.assign(pay.raw.begin(), pay.raw.end());
  } else {
    if (typedCount != numel)
      throw RuntimeError(what + ": " + typedField + " holds " +
                         std::to_string(typedCount) + " values; " +
                         onnxTypeName(dataType) + shapeText() + " needs " +
                         std::to_string(numel));
    switch (t.dtype) {
    case DType::F32:
      t.bytes.resize(numel * 4);
      if (numel)
        std::memcpy(t.bytes.data(), pay.floats.data(), numel * 4);
      break;
    case DType::F64:
      t.bytes.resize(numel * 8);
      if (numel)
        std::memcpy(t.bytes.data(), pay.doubles.data(), numel * 8);
      break;
    case DType::I64:
      narrowInto<int64_t>(t, pay.int64s);
      break;
    case DType::U64:
      narrowInto<uint64_t>(t, pay.uint64s);
      break;
    case DType::U32:
      narrowInto<uint32_t>(t, pay.uint64s);
      break;
    case DType::I32:
      narrowInto<int32_t>(t, pay.int32s);
      break;
    case DType::I16:
      narrowInto<int16_t>(t, pay.int32s);
      break;
    case DType::I8:
      narrowInto<int8_t>(t, pay.int32s);
      break;
    case DType::U16:
    case DType::F16:  // the IEEE half bits
    case DType::BF16: // the bfloat16 bits
      narrowInto<uint16_t>(t, pay.int32s);
      break;
    case DType::U8:
      narrowInto<uint8_t>(t, pay.int32s);
      break;
    case DType::I1:
      t.bytes.resize(numel);
      for (size_t i = 0; i < numel; ++i)
        t.bytes[i] = pay.int32s[i] != 0;
      break;
    }
  }
  if (nameOut)
    *nameOut = std::move(name);
  return t;
}

HostTensor shardflow::runtime::readTensorProto(const std::string &path,
                                               std::string *name) {
  return parseTensorProto(readWholeFile(path), path, name);
}

std::string shardflow::runtime::serializeTensorProto(const std::string &name,
                                                     const Tensor &t) {
  std::string out;
  // Field order and encoding as protobuf writes onnx.TensorProto: dims are
  // not packed in onnx.proto.
  for (int64_t d : t.shape) {
    putKey(out, kDims, kVarint);
    putVarint(out, uint64_t(d));
  }
  putKey(out, kDataType, kVarint);
  putVarint(out, uint64_t(onnxFromDType(t.dtype)));
  if (!name.empty()) {
    putKey(out, kName, kLen);
    putVarint(out, name.size());
    out += name;
  }
  putKey(out, kRawData, kLen);
  putVarint(out, t.bytes());
  out.append(static_cast<const char *>(t.data), t.bytes());
  return out;
}

void shardflow::runtime::writeTensorProto(const std::string &path,
                                          const std::string &name, const Tensor &t) {
  std::string data = serializeTensorProto(name, t);
  std::ofstream f(path, std::ios::binary);
  if (!f || !f.write(data.data(), data.size()))
    throw RuntimeError("cannot write '" + path + "'");
}
