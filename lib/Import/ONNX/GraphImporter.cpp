//===- GraphImporter.cpp - the ONNX graph walk ----------------------------===//
//
// Tensors and initializers, a node's inputs and attributes, folding, and
// the walk over the graph in topological order that calls one handler per
// node (OpHandlers.cpp) and reports any failure as one error naming the
// node. Untrusted input: every size, index and reference in the file is
// checked before use.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "shardflow/Runtime/Format/NpyIO.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <queue>

namespace shardflow::onnx_import {

//===----------------------------------------------------------------------===//
// Types and tensors
//===----------------------------------------------------------------------===//

FailureOr<Type> GraphImporter::elementType(int32_t t, StringRef what) {
  using TP = onnx::TensorProto;
  switch (t) {
  case TP::FLOAT:
    return Type(b.getF32Type());
  case TP::DOUBLE:
    return Type(b.getF64Type());
  case TP::FLOAT16:
    return Type(b.getF16Type());
  case TP::BFLOAT16:
    return Type(b.getBF16Type());
  case TP::BOOL:
    return Type(b.getI1Type());
  case TP::INT8:
    return Type(b.getI8Type());
  case TP::INT16:
    return Type(b.getI16Type());
  case TP::INT32:
    return Type(b.getI32Type());
  case TP::INT64:
    return Type(b.getI64Type());
  case TP::UINT8:
    return Type(IntegerType::get(ctx, 8, IntegerType::Unsigned));
  case TP::UINT16:
    return Type(IntegerType::get(ctx, 16, IntegerType::Unsigned));
  case TP::UINT32:
    return Type(IntegerType::get(ctx, 32, IntegerType::Unsigned));
  case TP::UINT64:
    return Type(IntegerType::get(ctx, 64, IntegerType::Unsigned));
  default:
    break;
  }
  std::string name = onnx::TensorProto::DataType_IsValid(t)
                         ? onnx::TensorProto::DataType_Name(
                               static_cast<onnx::TensorProto::DataType>(t))
                         : "unknown (" + std::to_string(t) + ")";
  return fail(what + " has unsupported element type " + name);
}

FailureOr<RankedTensorType>
GraphImporter::tensorType(const onnx::TensorProto &t) {
  auto elem = elementType(t.data_type(), "initializer '" + t.name() + "'");
  if (failed(elem))
    return failure();
  if (t.dims_size() > kMaxRank)
    return fail("initializer '" + t.name() + "' has rank " +
                std::to_string(t.dims_size()) +
                ", above the supported maximum rank " + std::to_string(kMaxRank));
  SmallVector<int64_t> dims;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return fail("initializer '" + t.name() + "' has negative dimension " +
                  std::to_string(d));
    if (d > 0 && n > kMaxElements / d)
      return fail("initializer '" + t.name() + "' is absurdly large");
    n *= d;
    dims.push_back(d);
  }
  return RankedTensorType::get(dims, *elem);
}

FailureOr<std::string> GraphImporter::externalBytes(const onnx::TensorProto &t,
                                                    int64_t bytes,
                                                    std::string &file,
                                                    int64_t &offset) {
  std::string location;
  offset = 0;
  int64_t length = -1;
  for (const auto &kv : t.external_data()) {
    auto parseNum = [&](int64_t &out) -> LogicalResult {
      if (StringRef(kv.value()).getAsInteger(10, out) || out < 0)
        return fail("initializer '" + t.name() + "' has a bad external-data " +
                    kv.key() + " '" + kv.value() + "'");
      return success();
    };
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset" && failed(parseNum(offset)))
      return failure();
    else if (kv.key() == "length" && failed(parseNum(length)))
      return failure();
  }
  if (location.empty())
    return fail("initializer '" + t.name() +
                "' is marked external but names no location");
  // External data must stay inside the model's folder, as ONNX requires.
  if (llvm::sys::path::is_absolute(location) ||
      llvm::is_contained(llvm::make_range(llvm::sys::path::begin(location),
                                          llvm::sys::path::end(location)),
                         ".."))
    return fail("initializer '" + t.name() + "' has external data location '" +
                location + "' outside the model's folder");
  if (length >= 0 && length != bytes)
    return fail("initializer '" + t.name() + "' has external length " +
                std::to_string(length) + " but its type needs " +
                std::to_string(bytes) + " bytes");
  SmallString<256> full(modelDir);
  llvm::sys::path::append(full, location);
  uint64_t fileSize;
  if (llvm::sys::fs::file_size(full, fileSize))
    return fail("external data file '" + full.str().str() +
                "' for initializer '" + t.name() + "' cannot be read");
  if (uint64_t(offset) > fileSize || uint64_t(bytes) > fileSize - offset)
    return fail("external data file '" + full.str().str() + "' is too short for initializer '" +
                t.name() + "' (" + std::to_string(bytes) + " bytes at offset " +
                std::to_string(offset) + ", file has " +
                std::to_string(fileSize) + ")");
  file = location;
  return std::string();
}

FailureOr<DenseElementsAttr>
GraphImporter::tensorData(const onnx::TensorProto &t, RankedTensorType type) {
  Type elem = type.getElementType();
  int64_t n = type.getNumElements();
  int64_t width = nn::getElementStorageBytes(elem);
  std::string raw;
  auto mismatch = [&](int64_t got) {
    return fail("initializer '" + t.name() + "' holds " + std::to_string(got) +
                " values for a shape of " + std::to_string(n) + " elements");
  };
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string file;
    int64_t offset;
    if (failed(externalBytes(t, n * width, file, offset)))
      return failure();
    SmallString<256> full(modelDir);
    llvm::sys::path::append(full, file);
    auto buf = llvm::MemoryBuffer::getFileSlice(full, n * width, offset);
    if (!buf)
      return fail("cannot read external data for initializer '" + t.name() + "'");
    raw = (*buf)->getBuffer().str();
  } else if (t.has_raw_data()) {
    if (int64_t(t.raw_data().size()) != n * width)
      return fail("initializer '" + t.name() + "' has " +
                  std::to_string(t.raw_data().size()) +
                  " bytes of raw data; its type needs " +
                  std::to_string(n * width));
    raw = t.raw_data();
  } else {
    // Typed fields: widen or narrow each value to the element's storage.
    // Compare the counts before allocating: the dims may claim far more
    // values than the file holds.
    int64_t have =
        elem.isF32()   ? t.float_data_size()
        : elem.isF64() ? t.double_data_size()
        : elem.isInteger(64) && !elem.isUnsignedInteger() ? t.int64_data_size()
        : elem.isUnsignedInteger(32) || elem.isUnsignedInteger(64)
            ? t.uint64_data_size()
            : t.int32_data_size();
    if (have != n)
      return mismatch(have);
    raw.resize(n * width);
    auto put = [&](int64_t i, uint64_t bits) {
      for (int64_t k = 0; k < width; ++k)
        raw[i * width + k] = char((bits >> (8 * k)) & 0xff);
    };
    if (isa<FloatType>(elem) && elem.isF32()) {
      if (t.float_data_size() != n)
        return mismatch(t.float_data_size());
      std::memcpy(raw.data(), t.float_data().data(), n * 4);
    } else if (elem.isF64()) {
      if (t.double_data_size() != n)
        return mismatch(t.double_data_size());
      std::memcpy(raw.data(), t.double_data().data(), n * 8);
    } else if (elem.isInteger(64) && !elem.isUnsignedInteger()) {
      if (t.int64_data_size() != n)
        return mismatch(t.int64_data_size());
      std::memcpy(raw.data(), t.int64_data().data(), n * 8);
    } else if (elem.isUnsignedInteger(32) || elem.isUnsignedInteger(64)) {
      if (t.uint64_data_size() != n)
        return mismatch(t.uint64_data_size());
      for (int64_t i = 0; i < n; ++i)
        put(i, t.uint64_data(i));
    } else {
      // int8/16/32, uint8/16, bool, float16, bfloat16 live in int32_data.
      if (t.int32_data_size() != n)
        return mismatch(t.int32_data_size());
      for (int64_t i = 0; i < n; ++i)
        put(i, uint64_t(uint32_t(t.int32_data(i))));
    }
  }
  if (elem.isInteger(1)) {
    SmallVector<bool> bits;
    for (char c : raw)
      bits.push_back(c != 0);
    return DenseElementsAttr::get(type, ArrayRef<bool>(bits));
  }
  bool detectedSplat = false;
  ArrayRef<char> rawRef(raw.data(), raw.size());
  if (!DenseElementsAttr::isValidRawBuffer(type, rawRef, detectedSplat))
    return fail("initializer '" + t.name() + "' has malformed data");
  return DenseElementsAttr::getFromRawBuffer(type, rawRef);
}

FailureOr<Value> GraphImporter::initializerValue(const onnx::TensorProto &t) {
  auto type = tensorType(t);
  if (failed(type))
    return failure();
  auto bytes = nn::getTensorStorageBytes(*type);
  if (!bytes)
    return fail("initializer '" + t.name() + "' has an unsupported type");
  Location wloc = NameLoc::get(b.getStringAttr(t.name()));
  if (*bytes <= options.embedLimitBytes && !stateInitializers.contains(t.name())) {
    auto data = tensorData(t, *type);
    if (failed(data))
      return failure();
    return nn::ConstantOp::create(b, wloc, cast<ElementsAttr>(*data)).getResult();
  }
  SmallVector<NamedAttribute> attrs;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string file;
    int64_t offset;
    if (failed(externalBytes(t, *bytes, file, offset)))
      return failure();
    attrs = {named("storage", b.getStringAttr("external")),
             named("file", b.getStringAttr(file)),
             named("offset", b.getI64IntegerAttr(offset))};
  } else {
    // Check the payload size now so that a corrupt file fails at import.
    int64_t n = type->getNumElements();
    int64_t have = t.has_raw_data()          ? int64_t(t.raw_data().size())
                   : type->getElementType().isF32() ? t.float_data_size() * 4
                   : type->getElementType().isF64() ? t.double_data_size() * 8
                                                    : -1;
    if (have >= 0 && have != *bytes)
      return fail("initializer '" + t.name() + "' has " + std::to_string(have) +
                  " bytes of data; its type needs " + std::to_string(*bytes));
    if (have < 0) {
      int64_t count = type->getElementType().isInteger(64) &&
                              !type->getElementType().isUnsignedInteger()
                          ? t.int64_data_size()
                      : type->getElementType().isUnsignedInteger(32) ||
                              type->getElementType().isUnsignedInteger(64)
                          ? t.uint64_data_size()
                          : t.int32_data_size();
      if (count != n)
        return fail("initializer '" + t.name() + "' holds " +
                    std::to_string(count) + " values for a shape of " +
                    std::to_string(n) + " elements");
    }
    auto it = payloads.find(t.name());
    if (have == *bytes && it != payloads.end() &&
        int64_t(it->second.length) == *bytes) {
      attrs = {named("storage", b.getStringAttr("embedded")),
               named("file", b.getStringAttr(llvm::sys::path::filename(path))),
               named("offset", b.getI64IntegerAttr(it->second.offset))};
    } else {
      attrs = {named("storage", b.getStringAttr("protobuf"))};
    }
  }
  attrs.push_back(named("name", b.getStringAttr(t.name())));
  attrs.push_back(named("size", b.getI64IntegerAttr(*bytes)));
  auto op = nn::WeightOp::create(b, wloc, TypeRange{*type}, ValueRange{}, attrs);
  return op.getResult();
}

/// Reads a --input-value file and checks it against the input's declared
/// type (element type, rank, and every fixed dimension).
FailureOr<DenseElementsAttr>
GraphImporter::pinnedValue(StringRef name, StringRef file,
                           RankedTensorType declared) {
  std::string what = "--input-value " + name.str() + "=" + file.str();
  if (file.ends_with(".pb")) {
    auto buffer = llvm::MemoryBuffer::getFile(file);
    if (!buffer)
      return fail(what + ": cannot read the file");
    onnx::TensorProto t;
    if (!t.ParseFromArray((*buffer)->getBufferStart(),
                          int((*buffer)->getBufferSize())))
      return fail(what + ": not an ONNX TensorProto file");
    t.set_name(name.str());
    auto type = tensorType(t);
    if (failed(type))
      return failure();
    if (type->getElementType() != declared.getElementType() ||
        type->getRank() != declared.getRank())
      return fail(what + ": holds " + shapeString(type->getShape()) +
                  " values that do not match the input's declared type");
    return tensorData(t, *type);
  }
  runtime::HostTensor host;
  try {
    host = runtime::readNpy(file.str());
  } catch (const std::exception &e) {
    return fail(what + ": " + e.what());
  }
  auto type = RankedTensorType::get(host.shape, declared.getElementType());
  std::string have;
  llvm::raw_string_ostream os(have);
  os << declared.getElementType();
  if (runtime::dtypeName(host.dtype) != have || type.getRank() != declared.getRank())
    return fail(what + ": holds " + runtime::dtypeName(host.dtype) +
                shapeString(host.shape) + ", which does not match the input");
  if (host.dtype == runtime::DType::I1) {
    SmallVector<bool> bits(host.bytes.begin(), host.bytes.end());
    return DenseElementsAttr::get(type, ArrayRef<bool>(bits));
  }
  ArrayRef<char> raw(reinterpret_cast<const char *>(host.bytes.data()),
                     host.bytes.size());
  bool splat = false;
  if (!DenseElementsAttr::isValidRawBuffer(type, raw, splat))
    return fail(what + ": malformed data");
  return DenseElementsAttr::getFromRawBuffer(type, raw);
}

FailureOr<Value> GraphImporter::lookup(const std::string &name) {
  auto it = values.find(name);
  if (it != values.end())
    return it->second;
  auto init = initializers.find(name);
  if (init == initializers.end())
    return fail("input '" + name + "' is not defined");
  auto v = initializerValue(*init->second);
  if (failed(v))
    return failure();
  values[name] = *v;
  return *v;
}

//===----------------------------------------------------------------------===//
// Node inputs, outputs and attributes
//===----------------------------------------------------------------------===//

Value GraphImporter::input(int i) {
  if (!hasInput(i))
    return nullptr;
  auto v = lookup(node->input(i));
  if (failed(v)) {
    attrFailed = true;
    return nullptr;
  }
  return *v;
}

LogicalResult GraphImporter::requireInputs(int min, int max) {
  if (numInputs() < min || numInputs() > max)
    return fail("expects " +
                (min == max ? std::to_string(min)
                            : std::to_string(min) + " to " + std::to_string(max)) +
                " inputs, got " + std::to_string(numInputs()));
  for (int i = 0; i < min; ++i)
    if (node->input(i).empty())
      return fail("required input #" + std::to_string(i) + " is missing");
  return success();
}

LogicalResult GraphImporter::allowOutputs(int n) {
  for (int i = n; i < node->output_size(); ++i)
    if (!node->output(i).empty())
      return fail("output #" + std::to_string(i) + " ('" + node->output(i) +
                  "') is not supported");
  return success();
}

LogicalResult GraphImporter::setOutputs(ValueRange vals) {
  if (node->output_size() < 1)
    return fail("has no outputs");
  for (auto [i, v] : llvm::enumerate(vals)) {
    if (int(i) >= node->output_size() || node->output(i).empty())
      continue;
    values[node->output(i)] = v;
  }
  return success();
}

const onnx::AttributeProto *GraphImporter::attr(StringRef name) {
  for (const auto &a : node->attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t GraphImporter::attrInt(StringRef name, int64_t dflt) {
  auto *a = attr(name);
  if (!a)
    return dflt;
  if (a->type() != onnx::AttributeProto::INT) {
    (void)fail("attribute '" + name + "' must be an int");
    attrFailed = true;
    return dflt;
  }
  return a->i();
}

float GraphImporter::attrFloat(StringRef name, float dflt) {
  auto *a = attr(name);
  if (!a)
    return dflt;
  if (a->type() != onnx::AttributeProto::FLOAT) {
    (void)fail("attribute '" + name + "' must be a float");
    attrFailed = true;
    return dflt;
  }
  return a->f();
}

std::string GraphImporter::attrString(StringRef name, StringRef dflt) {
  auto *a = attr(name);
  if (!a)
    return dflt.str();
  if (a->type() != onnx::AttributeProto::STRING) {
    (void)fail("attribute '" + name + "' must be a string");
    attrFailed = true;
    return dflt.str();
  }
  return a->s();
}

SmallVector<int64_t> GraphImporter::attrInts(StringRef name,
                                             ArrayRef<int64_t> dflt) {
  auto *a = attr(name);
  if (!a)
    return SmallVector<int64_t>(dflt);
  if (a->type() != onnx::AttributeProto::INTS) {
    (void)fail("attribute '" + name + "' must be a list of ints");
    attrFailed = true;
    return SmallVector<int64_t>(dflt);
  }
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

FailureOr<DenseElementsAttr> GraphImporter::constTensor(int i, StringRef what) {
  Value v = input(i);
  if (!v)
    return fail(what + " input is missing");
  DenseElementsAttr attr;
  if (matchPattern(v, m_Constant(&attr)))
    return attr;
  std::string msg =
      (what + " input '" + node->input(i) + "' is not a compile-time constant")
          .str();
  // Shape arithmetic on a graph input (CenterCropPad's expansion computes
  // Pad's pads from its 'shape' input) folds once that input is pinned, so
  // name the inputs to pin rather than an intermediate value the user
  // cannot give.
  SmallVector<std::string> sources = graphInputsOf(v);
  if (!sources.empty() &&
      !(sources.size() == 1 && sources[0] == node->input(i))) {
    msg += ": it derives from graph input";
    msg += sources.size() > 1 ? "s " : " ";
    for (auto [k, name] : llvm::enumerate(sources))
      msg += (k ? ", '" : "'") + name + "'";
    msg += " (pin with --input-value NAME=FILE)";
  }
  return fail(msg);
}

SmallVector<std::string> GraphImporter::graphInputsOf(Value v) {
  SmallVector<std::string> names;
  llvm::StringSet<> seen;
  llvm::SmallPtrSet<Operation *, 16> visited;
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(cur)) {
      if (arg.getOwner() != &func.getBody().front())
        continue;
      auto name =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "nn.name");
      if (name && seen.insert(name.getValue()).second)
        names.push_back(name.getValue().str());
      continue;
    }
    Operation *op = cur.getDefiningOp();
    if (op && visited.insert(op).second)
      llvm::append_range(work, op->getOperands());
  }
  llvm::sort(names);
  return names;
}

FailureOr<SmallVector<int64_t>> GraphImporter::constInts(int i, StringRef what) {
  auto attr = constTensor(i, what);
  if (failed(attr))
    return failure();
  if (!isa<IntegerType>(attr->getElementType()))
    return fail(what + " input must hold integers");
  SmallVector<int64_t> out;
  for (const APInt &v : attr->getValues<APInt>())
    out.push_back(v.getSExtValue());
  return out;
}

FailureOr<double> GraphImporter::constScalar(int i, StringRef what) {
  auto attr = constTensor(i, what);
  if (failed(attr))
    return failure();
  if (attr->getNumElements() != 1)
    return fail(what + " input must hold exactly one value");
  if (isa<FloatType>(attr->getElementType()))
    return (*attr->getValues<APFloat>().begin()).convertToDouble();
  APInt v = *attr->getValues<APInt>().begin();
  return attr->getElementType().isUnsignedInteger() ? double(v.getZExtValue())
                                                    : double(v.getSExtValue());
}

//===----------------------------------------------------------------------===//
// Op construction
//===----------------------------------------------------------------------===//

/// Under a training step, the float initializers that reach graph-input
/// data through data movement only become state (see
/// ONNXImportOptions::keepMovedInitializers).
void GraphImporter::keepMovedInitializers() {
  // Data: what the graph inputs (not pinned) reach, except through a
  // shape (static here).
  llvm::StringSet<> data;
  for (const auto &in : graph.input())
    if (!initializers.count(in.name()) && !options.inputValueFiles.count(in.name()))
      data.insert(in.name());
  llvm::StringMap<SmallVector<const onnx::NodeProto *, 2>> consumers;
  for (const auto &n : graph.node()) {
    for (const std::string &in : n.input())
      if (!in.empty())
        consumers[in].push_back(&n);
    if (n.op_type() == "Shape" || n.op_type() == "Size")
      continue;
    if (llvm::any_of(n.input(), [&](const std::string &in) { return data.contains(in); }))
      for (const std::string &out : n.output())
        data.insert(out);
  }
  // The operand through which each movement op carries a tensor's
  // elements (Concat: any; Where: either value, a T5 decoder's causal
  // position bias).
  auto moves = [](const onnx::NodeProto &n, int input) {
    static const llvm::StringSet<> firstOperand = {
        "Expand", "Gather", "Slice", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
        "Tile",   "Identity", "Flatten", "Cast", "Split"};
    if (!n.domain().empty())
      return false;
    return n.op_type() == "Concat" || (n.op_type() == "Where" && input > 0) ||
           (input == 0 && firstOperand.contains(n.op_type()));
  };
  for (const auto &init : graph.initializer()) {
    int64_t elements = 1;
    for (int64_t d : init.dims())
      elements *= d;
    int t = init.data_type();
    if (elements < 2 ||
        (t != onnx::TensorProto::FLOAT && t != onnx::TensorProto::FLOAT16 &&
         t != onnx::TensorProto::DOUBLE && t != onnx::TensorProto::BFLOAT16))
      continue;
    SmallVector<std::string> work{init.name()};
    llvm::StringSet<> seen;
    bool meets = false;
    while (!work.empty() && !meets) {
      std::string v = work.pop_back_val();
      if (!seen.insert(v).second)
        continue;
      for (const onnx::NodeProto *n : consumers.lookup(v)) {
        if (llvm::any_of(n->input(), [&](const std::string &in) { return data.contains(in); })) {
          meets = true;
          break;
        }
        for (int i = 0; i < n->input_size(); ++i)
          if (n->input(i) == v && moves(*n, i))
            for (const std::string &out : n->output())
              work.push_back(out);
      }
    }
    if (meets)
      stateInitializers.insert(init.name());
  }
}

/// Folds `op` if its operands allow it; returns the values to use.
FailureOr<SmallVector<Value>> GraphImporter::finish(Operation *op) {
  SmallVector<Attribute> constants;
  for (Value operand : op->getOperands()) {
    Attribute a;
    matchPattern(operand, m_Constant(&a));
    constants.push_back(a);
  }
  SmallVector<OpFoldResult> folded;
  if (failed(op->fold(constants, folded)) || folded.empty())
    return SmallVector<Value>(op->getResults());
  SmallVector<Value> out;
  for (auto [result, f] : llvm::zip(op->getResults(), folded)) {
    if (auto v = dyn_cast<Value>(f)) {
      out.push_back(v);
      continue;
    }
    auto *c = op->getDialect()->materializeConstant(b, cast<Attribute>(f),
                                                    result.getType(), op->getLoc());
    if (!c)
      return SmallVector<Value>(op->getResults());
    out.push_back(c->getResult(0));
  }
  op->erase();
  return out;
}

Value GraphImporter::splat(RankedTensorType type, Attribute element) {
  return nn::ConstantOp::create(
      b, loc, cast<ElementsAttr>(DenseElementsAttr::get(type, element)));
}

//===----------------------------------------------------------------------===//
// Module-level import
//===----------------------------------------------------------------------===//

LogicalResult GraphImporter::readOpset() {
  loc = FileLineColLoc::get(ctx, path, 0, 0);
  for (const auto &imp : model.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
    else if (imp.domain() == "com.microsoft")
      contribOpset = imp.version();
  }
  if (opset == 0)
    return fail("model imports no default-domain (ai.onnx) opset");
  if (opset < kMinOpset || opset > kMaxOpset)
    return fail("model uses opset " + std::to_string(opset) +
                "; supported opsets are " + std::to_string(kMinOpset) + " to " +
                std::to_string(kMaxOpset));
  return success();
}

LogicalResult GraphImporter::createFunction(ModuleOp module) {
  for (const auto &init : graph.initializer()) {
    if (init.name().empty())
      return fail("an initializer has no name");
    if (!initializers.try_emplace(init.name(), &init).second)
      return fail("initializer '" + init.name() + "' is defined twice");
  }
  // A training step's running statistics are state: their initializers
  // stay weights whatever their size (an embedded constant would fold).
  if (options.runningStatistics)
    for (const auto &n : graph.node()) {
      if (n.op_type() != "BatchNormalization" || !n.domain().empty())
        continue;
      bool training = llvm::any_of(n.attribute(), [](const onnx::AttributeProto &a) {
        return a.name() == "training_mode" && a.i() != 0;
      });
      for (int i = 3; training && i < 5 && i < n.input_size(); ++i)
        if (initializers.count(n.input(i)))
          stateInitializers.insert(n.input(i));
    }
  if (options.keepMovedInitializers)
    keepMovedInitializers();
  // Check the pinned names first: a typo is the likeliest reason for a
  // "dynamic dimension" error that would otherwise come first.
  for (const auto &entry : options.inputValueFiles) {
    bool found = llvm::any_of(graph.input(), [&](const onnx::ValueInfoProto &in) {
      return in.name() == entry.getKey() && !initializers.count(in.name());
    });
    if (!found)
      return fail("--input-value names '" + entry.getKey().str() +
                  "', which is not a graph input");
  }
  for (const auto &entry : options.inputShapes) {
    bool found = llvm::any_of(graph.input(), [&](const onnx::ValueInfoProto &in) {
      return in.name() == entry.getKey() && !initializers.count(in.name());
    });
    if (!found)
      return fail("--input-shape names '" + entry.getKey().str() +
                  "', which is not a graph input");
  }
  llvm::StringSet<> inputNames;
  SmallVector<Type> argTypes;
  SmallVector<std::string> argNames;
  for (const auto &in : graph.input()) {
    if (initializers.count(in.name()))
      continue; // IR < 4 lists initializers among the inputs.
    if (!inputNames.insert(in.name()).second)
      return fail("graph input '" + in.name() + "' is listed twice");
    if (!in.type().has_tensor_type())
      return fail("graph input '" + in.name() +
                  "' is not a tensor (sequence, map and optional inputs are "
                  "not supported)");
    const auto &tt = in.type().tensor_type();
    auto elem = elementType(tt.elem_type(), "graph input '" + in.name() + "'");
    if (failed(elem))
      return failure();
    if (auto pin = options.inputValueFiles.find(in.name());
        pin != options.inputValueFiles.end()) {
      SmallVector<int64_t> declaredDims;
      for (const auto &d : tt.shape().dim())
        declaredDims.push_back(d.has_dim_value() ? d.dim_value() : ShapedType::kDynamic);
      auto value = pinnedValue(in.name(), pin->second,
                               RankedTensorType::get(declaredDims, *elem));
      if (failed(value))
        return failure();
      for (auto [i, d] : llvm::enumerate(declaredDims))
        if (d != ShapedType::kDynamic && d != value->getType().getDimSize(i))
          return fail("--input-value " + in.name() + ": dimension " +
                      std::to_string(i) + " is " +
                      std::to_string(value->getType().getDimSize(i)) +
                      " but the model fixes it at " + std::to_string(d));
      pinnedInputs.emplace_back(in.name(), *value);
      continue;
    }
    SmallVector<int64_t> dims;
    auto pinned = options.inputShapes.find(in.name());
    if (pinned != options.inputShapes.end()) {
      dims = pinned->second;
      if (tt.has_shape()) {
        if (tt.shape().dim_size() != int64_t(dims.size()))
          return fail("--input-shape " + in.name() + " gives rank " +
                      std::to_string(dims.size()) + " but the model declares rank " +
                      std::to_string(tt.shape().dim_size()));
        for (int i = 0; i < tt.shape().dim_size(); ++i)
          if (tt.shape().dim(i).has_dim_value() &&
              tt.shape().dim(i).dim_value() != dims[i])
            return fail("--input-shape " + in.name() + " sets dimension " +
                        std::to_string(i) + " to " + std::to_string(dims[i]) +
                        " but the model fixes it at " +
                        std::to_string(tt.shape().dim(i).dim_value()));
      }
    } else {
      if (!tt.has_shape())
        return fail("graph input '" + in.name() +
                    "' has no shape; pin it with --input-shape " + in.name() +
                    "=D0,D1,...");
      for (int i = 0; i < tt.shape().dim_size(); ++i) {
        const auto &d = tt.shape().dim(i);
        if (!d.has_dim_value())
          return fail("graph input '" + in.name() + "' has dynamic dimension " +
                      std::to_string(i) +
                      (d.has_dim_param() ? " ('" + d.dim_param() + "')" : "") +
                      "; pin it with --input-shape " + in.name() + "=D0,D1,...");
        if (d.dim_value() < 0)
          return fail("graph input '" + in.name() + "' has negative dimension " +
                      std::to_string(d.dim_value()));
        dims.push_back(d.dim_value());
      }
    }
    if (options.batchDivisor > 1 && !dims.empty()) {
      if (dims[0] % options.batchDivisor != 0)
        return fail("--microbatches " + std::to_string(options.batchDivisor) +
                    " does not divide dimension 0 (the batch) of graph input '" + in.name() +
                    "' " + shapeString(dims));
      dims[0] /= options.batchDivisor;
    }
    if (int64_t(dims.size()) > kMaxRank)
      return fail("graph input '" + in.name() + "' has rank " +
                  std::to_string(dims.size()) +
                  ", above the supported maximum rank " +
                  std::to_string(kMaxRank));
    int64_t elements = 1;
    for (int64_t d : dims) {
      if (d > 0 && elements > kMaxElements / d)
        return fail("graph input '" + in.name() + "' of shape " +
                    shapeString(dims) + " is absurdly large");
      elements *= d;
    }
    argTypes.push_back(RankedTensorType::get(dims, *elem));
    argNames.push_back(in.name());
  }

  // Result types are known only after the body is imported; the function
  // type is completed in finishFunction.
  b.setInsertionPointToEnd(module.getBody());
  func = func::FuncOp::create(b, loc, "main", b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(argNames)) {
    func.setArgAttr(i, "nn.name", b.getStringAttr(name));
    values[name] = entry->getArgument(i);
  }
  b.setInsertionPointToEnd(entry);
  for (auto &[name, value] : pinnedInputs)
    values[name] = nn::ConstantOp::create(b, NameLoc::get(b.getStringAttr(name)),
                                          cast<ElementsAttr>(value));
  return success();
}

LogicalResult GraphImporter::orderNodes(SmallVectorImpl<int> &order) {
  int n = graph.node_size();
  // Name nodes as importNode does (op type and index when unnamed).
  auto describe = [&](int i) {
    const auto &nd = graph.node(i);
    return "node '" +
           (nd.name().empty() ? nd.op_type() + "_" + std::to_string(i)
                              : nd.name()) +
           "' (" + nd.op_type() + ", opset " + std::to_string(opset) + ")";
  };
  llvm::StringMap<int> producer;
  for (int i = 0; i < n; ++i)
    for (const auto &out : graph.node(i).output()) {
      if (out.empty())
        continue;
      if (values.count(out) || initializers.count(out))
        return fail(describe(i) + ": redefines '" + out +
                    "', a graph input or initializer");
      if (!producer.try_emplace(out, i).second)
        return fail("value '" + out + "' is produced by two nodes (" +
                    describe(producer[out]) + " and " + describe(i) + ")");
    }
  std::vector<int> pending(n, 0);
  std::vector<SmallVector<int>> users(n);
  for (int i = 0; i < n; ++i) {
    const auto &node = graph.node(i);
    for (const auto &in : node.input()) {
      if (in.empty() || values.count(in) || initializers.count(in))
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return fail(describe(i) + ": input '" + in +
                    "' is not produced by any node, graph input or "
                    "initializer");
      ++pending[i];
      users[it->second].push_back(i);
    }
  }
  // Kahn's algorithm, taking ready nodes in file order so output is stable.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (!pending[i])
      ready.push(i);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[i])
      if (--pending[u] == 0)
        ready.push(u);
  }
  if (int(order.size()) != n) {
    for (int i = 0; i < n; ++i)
      if (pending[i])
        return fail("the graph has a cycle through " + describe(i));
  }
  return success();
}

/// com.microsoft's quantized operators, which the importer leaves out: named
/// in their refusal so that a quantized model is recognized as such.
static bool isQuantizedContribOp(StringRef op) {
  return op.contains("NBits") || op.starts_with("QLinear") ||
         op.starts_with("DynamicQuantize") ||
         op.starts_with("QuantizeLinear") ||
         op.starts_with("DequantizeLinear") || op.starts_with("QAttention") ||
         op.starts_with("QOrdered") || op.starts_with("QGemm") ||
         op.starts_with("QEmbed") || op == "MatMulInteger16" ||
         op == "MatMulIntegerToFloat" || op == "GatherBlockQuantized" ||
         op == "MatMulBnb4" || op == "MatMulFpQ4";
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &n, int index) {
  node = &n;
  nodeName = n.name().empty() ? n.op_type() + "_" + std::to_string(index)
                              : n.name();
  bool defaultDomain = n.domain().empty() || n.domain() == "ai.onnx";
  nodeDomain = defaultDomain ? "" : n.domain();
  nodeOpset = opset;
  if (!defaultDomain) {
    nodeOpset = 0;
    for (const auto &imp : model.opset_import())
      if (imp.domain() == n.domain())
        nodeOpset = imp.version();
  }
  // Ops of other domains are named with it, and that domain's version.
  std::string opType =
      defaultDomain ? n.op_type() : n.domain() + "." + n.op_type();
  loc = getONNXNodeLoc(ctx, nodeName, opType, nodeOpset, path);
  attrFailed = false;

  // Collect what goes wrong while converting the node into one error.
  std::string reasons;
  LogicalResult result = failure();
  {
    ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &diag) {
      if (diag.getSeverity() != DiagnosticSeverity::Error)
        return failure(); // Let warnings and notes through.
      if (!reasons.empty())
        reasons += "; ";
      reasons += diag.str();
      return success();
    });
    if (!defaultDomain && n.domain() != "com.microsoft") {
      emitError(loc) << "domain '" << n.domain()
                     << "' is not supported (only the default ONNX domain "
                        "and com.microsoft are)";
    } else if (!defaultDomain && contribOpset == 0) {
      emitError(loc) << "the model's opset_import has no version for domain "
                        "'com.microsoft'";
    } else {
      const auto &table = defaultDomain ? handlers() : contribHandlers();
      int64_t version = defaultDomain ? opset : contribOpset;
      auto it = table.find(n.op_type());
      if (it == table.end() && defaultDomain) {
        emitError(loc) << "operator is not supported";
      } else if (it == table.end()) {
        emitError(loc) << "operator is not supported in domain '"
                       << n.domain() << "'"
                       << (isQuantizedContribOp(n.op_type())
                               ? " (quantized operators are not imported)"
                               : "");
      } else if (version < it->second.second) {
        emitError(loc) << n.op_type() << " needs "
                       << (defaultDomain ? "opset " : n.domain() + " version ")
                       << it->second.second << " or later";
      } else {
        result = (this->*(it->second.first))();
        if (succeeded(result) && attrFailed)
          result = failure();
      }
    }
  }
  if (succeeded(result)) {
    for (const auto &out : n.output())
      if (!out.empty() && !values.count(out))
        return emitError(loc) << nodeDescription() << ": output '" << out
                              << "' was not produced";
    return success();
  }
  if (reasons.empty())
    reasons = "import failed";
  return emitError(loc) << nodeDescription() << ": " << reasons;
}

LogicalResult GraphImporter::finishFunction() {
  loc = FileLineColLoc::get(ctx, path, 0, 0);
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  llvm::StringSet<> outputNames;
  for (const auto &out : graph.output()) {
    if (!outputNames.insert(out.name()).second)
      return fail("graph output '" + out.name() + "' is listed twice");
    auto v = values.find(out.name());
    if (v == values.end()) {
      if (!initializers.count(out.name()))
        return fail("graph output '" + out.name() + "' is not produced");
      auto iv = lookup(out.name());
      if (failed(iv))
        return failure();
      values[out.name()] = *iv;
      v = values.find(out.name());
    }
    auto type = cast<RankedTensorType>(v->second.getType());
    if (out.type().has_tensor_type()) {
      const auto &tt = out.type().tensor_type();
      if (tt.elem_type() != 0) {
        auto elem = elementType(tt.elem_type(), "graph output '" + out.name() + "'");
        if (failed(elem))
          return failure();
        if (*elem != type.getElementType())
          return fail("graph output '" + out.name() + "' is declared " +
                      "with another element type than it has");
      }
      if (tt.has_shape()) {
        bool mismatch = tt.shape().dim_size() != type.getRank();
        for (int i = 0; !mismatch && i < tt.shape().dim_size(); ++i) {
          // Pipeline micro-batches: the program computes batch/M rows.
          int64_t declared = tt.shape().dim(i).dim_value();
          if (i == 0 && options.batchDivisor > 1 && declared % options.batchDivisor == 0)
            declared /= options.batchDivisor;
          mismatch = tt.shape().dim(i).has_dim_value() && declared != type.getDimSize(i);
        }
        if (mismatch)
          return fail("graph output '" + out.name() +
                      "' is declared with a shape that disagrees with the "
                      "inferred " + shapeString(type.getShape()));
      }
    }
    results.push_back(v->second);
    resultTypes.push_back(type);
  }
  for (auto &[value, name] : runningStatistics) {
    results.push_back(value);
    resultTypes.push_back(value.getType());
  }
  func::ReturnOp::create(b, loc, results);
  func.setFunctionType(
      b.getFunctionType(func.getArgumentTypes(), resultTypes));
  for (auto [i, out] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "nn.name", b.getStringAttr(out.name()));
  for (auto [i, running] : llvm::enumerate(runningStatistics)) {
    unsigned at = unsigned(graph.output_size() + i);
    func.setResultAttr(at, "nn.name", b.getStringAttr("running:" + running.second));
    func.setResultAttr(at, "nn.running_statistic", b.getStringAttr(running.second));
  }
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(FileLineColLoc::get(ctx, path, 0, 0));
  if (failed(readOpset()) || failed(createFunction(*module)))
    return nullptr;
  SmallVector<int> order;
  if (failed(orderNodes(order)))
    return nullptr;
  for (int i : order)
    if (failed(importNode(graph.node(i), i)))
      return nullptr;
  if (failed(finishFunction()))
    return nullptr;
  // Folding leaves the constants and shape ops it consumed without users.
  for (Operation &op : llvm::make_early_inc_range(
           llvm::reverse(func.getBody().front().getOperations())))
    if (isOpTriviallyDead(&op))
      op.erase();
  (*module)->setAttr("nn.source", b.getStringAttr(llvm::sys::path::filename(path)));
  // Every float initializer is a parameter, whether it became a weight, an
  // embedded constant or nothing: --report's denominator.
  int64_t parameterBytes = 0;
  for (const auto &init : graph.initializer()) {
    int64_t width = 0;
    switch (init.data_type()) {
    case onnx::TensorProto::FLOAT:
      width = 4;
      break;
    case onnx::TensorProto::DOUBLE:
      width = 8;
      break;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      width = 2;
      break;
    default:
      continue;
    }
    int64_t n = 1;
    for (int64_t d : init.dims())
      n = d < 0 || (d && n > kMaxElements / d) ? kMaxElements : n * d;
    parameterBytes += std::min(n, kMaxElements) * width;
  }
  (*module)->setAttr("nn.parameter_bytes", b.getI64IntegerAttr(parameterBytes));
  (*module)->setAttr("nn.opset", b.getI64IntegerAttr(opset));
  if (!model.producer_name().empty())
    (*module)->setAttr("nn.producer",
                       b.getStringAttr(StringRef(model.producer_name() + " " +
                                                 model.producer_version())
                                           .rtrim()));
  if (failed(mlir::verify(*module)))
    return nullptr;
  return module;
}

} // namespace shardflow::onnx_import
