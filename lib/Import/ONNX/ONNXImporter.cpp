//===- ONNXImporter.cpp - ONNX models into the nn dialect ------------------===//
//
// Walks the ONNX graph in topological order and emits one or a few nn ops
// per node. Every op is built through its type inference and verified on
// the spot, then folded when its operands are constants, so shape
// arithmetic (Shape -> Gather -> Concat -> Reshape) disappears as it is
// imported and later nodes see constant shapes. Any failure is reported as
// one error naming the node (name, op type, opset) and the reason.
//
// Untrusted input: every size, index and reference in the file is checked
// before use; libonnx and protobuf calls are wrapped so that nothing they
// throw escapes.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Import/ONNX/ONNXImporter.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Import/ONNX/ProtobufOffsets.h"
#include "shardflow/Runtime/Format/NpyIO.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Traits.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include <cmath>
#include <queue>

using namespace mlir;
using namespace shardflow;
namespace nn = shardflow::nn;

// Tensors larger than this are refused as absurd (hostile or corrupt files).
static constexpr int64_t kMaxElements = int64_t(1) << 40;
// So are tensors of higher rank (numpy's limit; real models stay below 10).
// Beyond it the MLIR text that shard-opt prints and re-parses grows slow
// to parse (quadratically in the rank).
static constexpr int64_t kMaxRank = 64;
// ONNX bounds meaning "to the end" in Slice are often INT64_MAX/INT64_MIN.
static constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

std::string shardflow::parseInputShapeSpec(StringRef spec,
                                           ONNXImportOptions &options) {
  auto [name, dimsText] = spec.rsplit('=');
  if (name.empty() || !spec.contains('='))
    return "--input-shape expects NAME=D0,D1,... (got '" + spec.str() + "')";
  SmallVector<StringRef> parts;
  if (!dimsText.empty())
    dimsText.split(parts, dimsText.contains('x') ? 'x' : ',');
  SmallVector<int64_t> dims;
  for (StringRef p : parts) {
    int64_t d;
    if (p.trim().getAsInteger(10, d) || d < 0)
      return "--input-shape " + spec.str() + ": '" + p.str() +
             "' is not a non-negative integer";
    dims.push_back(d);
  }
  options.inputShapes[name] = dims;
  return "";
}

std::string shardflow::parseInputValueSpec(StringRef spec,
                                           ONNXImportOptions &options) {
  auto [name, file] = spec.split('=');
  if (name.empty() || file.empty())
    return "--input-value expects NAME=FILE.npy or NAME=FILE.pb (got '" +
           spec.str() + "')";
  if (!file.ends_with(".npy") && !file.ends_with(".pb"))
    return "--input-value " + spec.str() + ": the file must be .npy or .pb";
  options.inputValueFiles[name] = file.str();
  return "";
}

void shardflow::registerImportDialects(MLIRContext &context) {
  context.loadDialect<nn::NNDialect, func::FuncDialect>();
}

//===----------------------------------------------------------------------===//
// The graph importer
//===----------------------------------------------------------------------===//

namespace {

std::string shapeString(ArrayRef<int64_t> dims) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(dims))
    s += (i ? "," : "") + std::to_string(d);
  return s + "]";
}

class GraphImporter {
public:
  GraphImporter(MLIRContext *ctx, const onnx::ModelProto &model,
                StringRef path, StringRef bytes,
                const ONNXImportOptions &options)
      : ctx(ctx), b(ctx), model(model), graph(model.graph()), path(path.str()),
        options(options), loc(UnknownLoc::get(ctx)) {
    if (!bytes.empty())
      payloads = findInitializerPayloads(bytes);
    SmallString<256> dir(path);
    llvm::sys::path::remove_filename(dir);
    modelDir = dir.str().str();
  }

  OwningOpRef<ModuleOp> run();

  /// An initializer's bytes as the runtime lays them out: little-endian,
  /// bools one byte each, splats expanded.
  FailureOr<std::string> initializerBytes(const onnx::TensorProto &t) {
    auto type = tensorType(t);
    if (failed(type))
      return failure();
    auto data = tensorData(t, *type);
    if (failed(data))
      return failure();
    std::string out;
    if (type->getElementType().isInteger(1)) {
      for (bool v : data->getValues<bool>())
        out.push_back(v ? 1 : 0);
      return out;
    }
    size_t width = size_t(nn::getElementStorageBytes(type->getElementType()));
    ArrayRef<char> raw = data->getRawData();
    if (!data->isSplat())
      return std::string(raw.data(), raw.size());
    for (int64_t i = 0; i < type->getNumElements(); ++i)
      out.append(raw.data(), width);
    return out;
  }

private:
  using Handler = LogicalResult (GraphImporter::*)();
  static const llvm::StringMap<std::pair<Handler, int64_t>> &handlers();

  // --- module-level steps
  LogicalResult readOpset();
  LogicalResult createFunction(ModuleOp module);
  LogicalResult orderNodes(SmallVectorImpl<int> &order);
  LogicalResult importNode(const onnx::NodeProto &n, int index);
  LogicalResult finishFunction();

  // --- diagnostics
  InFlightDiagnostic error() { return emitError(loc); }
  LogicalResult fail(const Twine &msg) { return emitError(loc) << msg.str(); }
  std::string nodeDescription() const {
    return "node '" + nodeName + "' (" + node->op_type() + ", opset " +
           std::to_string(opset) + ")";
  }

  // --- types and tensors
  FailureOr<Type> elementType(int32_t onnxType, StringRef what);
  FailureOr<RankedTensorType> tensorType(const onnx::TensorProto &t);
  FailureOr<DenseElementsAttr> tensorData(const onnx::TensorProto &t,
                                          RankedTensorType type);
  FailureOr<std::string> externalBytes(const onnx::TensorProto &t,
                                       int64_t bytes, std::string &file,
                                       int64_t &offset);
  FailureOr<Value> initializerValue(const onnx::TensorProto &t);
  FailureOr<DenseElementsAttr> pinnedValue(StringRef name, StringRef file,
                                           RankedTensorType declared);
  FailureOr<Value> lookup(const std::string &name);

  // --- node inputs, outputs, attributes
  int numInputs() const { return node->input_size(); }
  bool hasInput(int i) const {
    return i < node->input_size() && !node->input(i).empty();
  }
  Value input(int i); // null when absent; errors are recorded
  LogicalResult requireInputs(int min, int max);
  LogicalResult allowOutputs(int n);
  LogicalResult setOutputs(ValueRange values);
  const onnx::AttributeProto *attr(StringRef name);
  int64_t attrInt(StringRef name, int64_t dflt);
  float attrFloat(StringRef name, float dflt);
  std::string attrString(StringRef name, StringRef dflt);
  SmallVector<int64_t> attrInts(StringRef name, ArrayRef<int64_t> dflt = {});
  bool hasAttr(StringRef name) { return attr(name) != nullptr; }
  FailureOr<SmallVector<int64_t>> constInts(int i, StringRef what);
  FailureOr<double> constScalar(int i, StringRef what);
  FailureOr<DenseElementsAttr> constTensor(int i, StringRef what);
  /// The graph inputs (by name, sorted) that `v` is computed from.
  SmallVector<std::string> graphInputsOf(Value v);

  // --- op construction
  template <typename OpTy>
  FailureOr<Operation *> build(ValueRange operands,
                               ArrayRef<NamedAttribute> attrs = {});
  template <typename OpTy>
  FailureOr<Operation *> buildTyped(TypeRange types, ValueRange operands,
                                    ArrayRef<NamedAttribute> attrs = {});
  FailureOr<SmallVector<Value>> finish(Operation *op);
  template <typename OpTy>
  LogicalResult emit(ValueRange operands, ArrayRef<NamedAttribute> attrs = {});
  /// One op of a node's decomposition into several nn ops: built, verified
  /// and folded like a node's own op. Null once an error has been reported;
  /// a null operand gives null, so a chain of these is checked once at its
  /// end.
  template <typename OpTy>
  Value make(ValueRange operands, ArrayRef<NamedAttribute> attrs = {});
  /// The same for ops whose result type is an input (reshape).
  template <typename OpTy>
  Value makeTyped(Type type, ValueRange operands,
                  ArrayRef<NamedAttribute> attrs = {});
  /// A constant of `type` with every element `element`.
  Value splat(RankedTensorType type, Attribute element);
  /// A rank-0 float constant, which broadcasts against anything.
  Value scalar(Type elem, double value) {
    return splat(RankedTensorType::get({}, elem), b.getFloatAttr(elem, value));
  }
  /// True when the node names output #i (it is present and not empty).
  bool wantsOutput(int i) const {
    return i < node->output_size() && !node->output(i).empty();
  }
  NamedAttribute named(StringRef name, Attribute value) {
    return b.getNamedAttr(name, value);
  }
  RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }
  /// Axes are stored non-negative in nn, so that later passes compare them
  /// directly. Out-of-range values are kept for the verifier to report.
  static int64_t canonicalAxis(int64_t axis, int64_t rank) {
    return axis < 0 && axis >= -rank ? axis + rank : axis;
  }
  static SmallVector<int64_t> canonicalAxes(ArrayRef<int64_t> axes,
                                            int64_t rank) {
    SmallVector<int64_t> out;
    for (int64_t a : axes)
      out.push_back(canonicalAxis(a, rank));
    return out;
  }
  LogicalResult resolveWindow(ArrayRef<int64_t> inShape,
                              ArrayRef<int64_t> kernel,
                              SmallVectorImpl<int64_t> &strides,
                              SmallVectorImpl<int64_t> &pads,
                              SmallVectorImpl<int64_t> &dilations);

  // --- handlers
  template <typename OpTy> LogicalResult unary();
  template <typename OpTy> LogicalResult binary();
  template <typename OpTy> LogicalResult variadicChain();
  template <typename OpTy, int64_t AxesInputSince> LogicalResult reduce();
  template <typename OpTy> LogicalResult softmax();
  template <typename OpTy> LogicalResult pool();
  LogicalResult importLeakyRelu();
  LogicalResult importGelu();
  LogicalResult importClip();
  LogicalResult importDropout();
  LogicalResult importCast();
  LogicalResult importMatMul();
  LogicalResult importGemm();
  LogicalResult importEinsum();
  LogicalResult importConv();
  LogicalResult importGlobalAveragePool();
  LogicalResult importBatchNormalization();
  LogicalResult importLayerNormalization();
  LogicalResult importRMSNormalization();
  /// Mean and biased variance of `x` over `axes`, dimensions kept (null
  /// values when an op fails to build; the error is reported).
  std::pair<Value, Value> meanAndVariance(Value x, ArrayRef<int64_t> axes);
  LogicalResult importReshape();
  LogicalResult importTranspose();
  LogicalResult importFlatten();
  LogicalResult importSqueeze();
  LogicalResult importUnsqueeze();
  LogicalResult importConcat();
  LogicalResult importSplit();
  LogicalResult importSlice();
  LogicalResult importPad();
  LogicalResult importGather();
  LogicalResult importGatherElements();
  LogicalResult importScatterND();
  LogicalResult importExpand();
  LogicalResult importWhere();
  LogicalResult importTrilu();
  LogicalResult importCumSum();
  LogicalResult importRange();
  LogicalResult importShape();
  LogicalResult importConstantOfShape();
  LogicalResult importConstant();
  LogicalResult importTopK();
  LogicalResult importAttention();
  Value attentionHeadsFirst(Value x, int64_t heads);
  Value attentionPadMask(Value mask, int64_t totalSeq);
  Value attentionCausalMask(Value mask, int64_t qSeq, int64_t totalSeq,
                            int64_t pastSeq);
  LogicalResult attentionDecomposed(Value q, Value key, Value value, Value mask,
                                    std::optional<float> scale, float softcap,
                                    int64_t softmaxPrecision, int64_t qkMode,
                                    Value &y, Value &qk);
  LogicalResult importRotaryEmbedding();

  MLIRContext *ctx;
  OpBuilder b;
  const onnx::ModelProto &model;
  const onnx::GraphProto &graph;
  std::string path, modelDir;
  const ONNXImportOptions &options;
  int64_t opset = 0;
  llvm::StringMap<PayloadRange> payloads;
  llvm::StringMap<const onnx::TensorProto *> initializers;
  llvm::StringMap<Value> values;
  SmallVector<std::pair<std::string, DenseElementsAttr>> pinnedInputs;
  func::FuncOp func;

  // The node being imported.
  const onnx::NodeProto *node = nullptr;
  std::string nodeName;
  Location loc;
  bool attrFailed = false;
};

} // namespace

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
  if (*bytes <= options.embedLimitBytes) {
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

template <typename OpTy>
FailureOr<Operation *>
GraphImporter::buildTyped(TypeRange types, ValueRange operands,
                          ArrayRef<NamedAttribute> attrs) {
  for (Type t : types)
    if (auto ranked = dyn_cast<RankedTensorType>(t);
        ranked && ranked.getRank() > kMaxRank)
      return fail("result of rank " + std::to_string(ranked.getRank()) +
                  " exceeds the supported maximum rank " +
                  std::to_string(kMaxRank));
  auto op = OpTy::create(b, loc, types, operands, attrs);
  if (failed(mlir::verify(op))) {
    op->erase();
    return failure();
  }
  return op.getOperation();
}

template <typename OpTy>
FailureOr<Operation *> GraphImporter::build(ValueRange operands,
                                            ArrayRef<NamedAttribute> attrs) {
  DictionaryAttr dict = b.getDictionaryAttr(attrs);
  typename OpTy::Properties props;
  if (failed(OpTy::setPropertiesFromAttr(props, dict,
                                         [&] { return emitError(loc); })))
    return failure();
  SmallVector<Type> types;
  if (failed(OpTy::inferReturnTypes(ctx, loc, operands, dict,
                                    OpaqueProperties(&props), RegionRange(),
                                    types)))
    return failure();
  return buildTyped<OpTy>(types, operands, attrs);
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

template <typename OpTy>
LogicalResult GraphImporter::emit(ValueRange operands,
                                  ArrayRef<NamedAttribute> attrs) {
  auto op = build<OpTy>(operands, attrs);
  if (failed(op))
    return failure();
  auto results = finish(*op);
  if (failed(results))
    return failure();
  return setOutputs(*results);
}

template <typename OpTy>
Value GraphImporter::make(ValueRange operands, ArrayRef<NamedAttribute> attrs) {
  if (llvm::any_of(operands, [](Value v) { return !v; }))
    return nullptr;
  auto op = build<OpTy>(operands, attrs);
  if (failed(op))
    return nullptr;
  auto results = finish(*op);
  return failed(results) ? Value() : (*results)[0];
}

template <typename OpTy>
Value GraphImporter::makeTyped(Type type, ValueRange operands,
                               ArrayRef<NamedAttribute> attrs) {
  if (llvm::any_of(operands, [](Value v) { return !v; }))
    return nullptr;
  auto op = buildTyped<OpTy>(TypeRange(ArrayRef<Type>(type)), operands, attrs);
  if (failed(op))
    return nullptr;
  auto results = finish(*op);
  return failed(results) ? Value() : (*results)[0];
}

Value GraphImporter::splat(RankedTensorType type, Attribute element) {
  return nn::ConstantOp::create(
      b, loc, cast<ElementsAttr>(DenseElementsAttr::get(type, element)));
}

//===----------------------------------------------------------------------===//
// Handlers: elementwise
//===----------------------------------------------------------------------===//

template <typename OpTy> LogicalResult GraphImporter::unary() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  return emit<OpTy>({x});
}

template <typename OpTy> LogicalResult GraphImporter::binary() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), y = input(1);
  if (!x || !y)
    return failure();
  return emit<OpTy>({x, y});
}

template <typename OpTy> LogicalResult GraphImporter::variadicChain() {
  if (failed(requireInputs(1, 1 << 16)) || failed(allowOutputs(1)))
    return failure();
  Value acc = input(0);
  if (!acc)
    return failure();
  if (numInputs() == 1)
    return emit<nn::IdentityOp>({acc});
  for (int i = 1; i < numInputs(); ++i) {
    Value next = input(i);
    if (!next)
      return failure();
    auto op = build<OpTy>({acc, next});
    if (failed(op))
      return failure();
    auto r = finish(*op);
    if (failed(r))
      return failure();
    acc = (*r)[0];
  }
  return setOutputs({acc});
}

LogicalResult GraphImporter::importLeakyRelu() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  float alpha = attrFloat("alpha", 0.01f);
  if (!x || attrFailed)
    return failure();
  return emit<nn::LeakyReluOp>({x}, {named("alpha", b.getF32FloatAttr(alpha))});
}

LogicalResult GraphImporter::importGelu() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  std::string approx = attrString("approximate", "none");
  if (!x || attrFailed)
    return failure();
  return emit<nn::GeluOp>({x}, {named("approximate", b.getStringAttr(approx))});
}

LogicalResult GraphImporter::importClip() {
  if (failed(requireInputs(1, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  SmallVector<NamedAttribute> attrs;
  for (auto [i, name] : {std::pair<int, StringRef>{1, "min"}, {2, "max"}}) {
    if (!hasInput(i))
      continue;
    auto v = constScalar(i, name);
    if (failed(v))
      return failure();
    attrs.push_back(named(name, b.getF64FloatAttr(*v)));
  }
  return emit<nn::ClipOp>({x}, attrs);
}

LogicalResult GraphImporter::importDropout() {
  if (failed(requireInputs(1, 3)) || failed(allowOutputs(2)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  bool training = false;
  if (hasInput(2)) {
    auto t = constScalar(2, "training_mode");
    if (failed(t))
      return failure();
    training = *t != 0;
  }
  // Inference ignores the ratio, so it need not be a constant then.
  double ratio = 0.5;
  if (hasInput(1)) {
    Value r = input(1);
    if (!r)
      return failure();
    DenseElementsAttr value;
    if (training || matchPattern(r, m_Constant(&value))) {
      auto c = constScalar(1, "ratio");
      if (failed(c))
        return failure();
      ratio = *c;
    }
  }
  // Without a seed ONNX leaves the generator's seed open; 0 is as good as
  // any and keeps runs reproducible.
  int64_t seed = attrInt("seed", 0);
  if (attrFailed)
    return failure();
  bool wantMask = node->output_size() > 1 && !node->output(1).empty();
  if (training && ratio != 0.0) {
    if (!(ratio > 0.0 && ratio < 1.0))
      return fail("ratio " + std::to_string(ratio) + " is outside [0, 1)");
    return emit<nn::TrainingDropoutOp>(
        {x}, {named("ratio", b.getF32FloatAttr(float(ratio))),
              named("seed", b.getI64IntegerAttr(seed))});
  }
  // Inference, or nothing dropped: the identity, and a mask of all true.
  auto y = build<nn::DropoutOp>({x}, {named("ratio", b.getF32FloatAttr(float(ratio)))});
  if (failed(y))
    return failure();
  SmallVector<Value> outs{(*y)->getResult(0)};
  if (wantMask) {
    auto maskType = RankedTensorType::get(typeOf(x).getShape(), b.getI1Type());
    outs.push_back(nn::ConstantOp::create(
        b, loc, cast<ElementsAttr>(DenseElementsAttr::get(maskType, true))));
  }
  return setOutputs(outs);
}

LogicalResult GraphImporter::importCast() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!hasAttr("to"))
    return fail("attribute 'to' is required");
  int64_t to = attrInt("to", 0);
  if (!x || attrFailed)
    return failure();
  auto elem = elementType(to, "attribute 'to'");
  if (failed(elem))
    return failure();
  return emit<nn::CastOp>({x}, {named("to", TypeAttr::get(*elem))});
}

template <typename OpTy> LogicalResult GraphImporter::softmax() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  int64_t axis = attrInt("axis", -1);
  if (!x || attrFailed)
    return failure();
  return emit<OpTy>(
      {x}, {named("axis", b.getI64IntegerAttr(
                              canonicalAxis(axis, typeOf(x).getRank())))});
}

//===----------------------------------------------------------------------===//
// Handlers: contractions, convolution, pooling, normalization
//===----------------------------------------------------------------------===//

LogicalResult GraphImporter::importMatMul() { return binary<nn::MatMulOp>(); }

LogicalResult GraphImporter::importGemm() {
  if (failed(requireInputs(2, 3)) || failed(allowOutputs(1)))
    return failure();
  Value a = input(0), bv = input(1), c = input(2);
  float alpha = attrFloat("alpha", 1.0f), beta = attrFloat("beta", 1.0f);
  int64_t ta = attrInt("transA", 0), tb = attrInt("transB", 0);
  if (!a || !bv || (hasInput(2) && !c) || attrFailed)
    return failure();
  SmallVector<Value> operands{a, bv};
  if (c)
    operands.push_back(c);
  return emit<nn::GemmOp>(operands, {named("alpha", b.getF32FloatAttr(alpha)),
                                     named("beta", b.getF32FloatAttr(beta)),
                                     named("trans_a", b.getBoolAttr(ta != 0)),
                                     named("trans_b", b.getBoolAttr(tb != 0))});
}

LogicalResult GraphImporter::importEinsum() {
  if (failed(requireInputs(1, 1 << 10)) || failed(allowOutputs(1)))
    return failure();
  SmallVector<Value> operands;
  for (int i = 0; i < numInputs(); ++i) {
    Value v = input(i);
    if (!v)
      return failure();
    operands.push_back(v);
  }
  if (!hasAttr("equation"))
    return fail("attribute 'equation' is required");
  std::string eq = attrString("equation", "");
  if (attrFailed)
    return failure();
  return emit<nn::EinsumOp>(operands, {named("equation", b.getStringAttr(eq))});
}

/// Resolves ONNX's auto_pad/pads/strides/dilations into explicit values.
LogicalResult GraphImporter::resolveWindow(ArrayRef<int64_t> inShape,
                                           ArrayRef<int64_t> kernel,
                                           SmallVectorImpl<int64_t> &strides,
                                           SmallVectorImpl<int64_t> &pads,
                                           SmallVectorImpl<int64_t> &dilations) {
  size_t spatial = kernel.size();
  strides = attrInts("strides", SmallVector<int64_t>(spatial, 1));
  dilations = attrInts("dilations", SmallVector<int64_t>(spatial, 1));
  pads = attrInts("pads", SmallVector<int64_t>(2 * spatial, 0));
  std::string autoPad = attrString("auto_pad", "NOTSET");
  if (attrFailed)
    return failure();
  if (strides.size() != spatial || dilations.size() != spatial ||
      pads.size() != 2 * spatial)
    return fail("strides, dilations and pads must have " +
                std::to_string(spatial) + ", " + std::to_string(spatial) +
                " and " + std::to_string(2 * spatial) + " entries");
  for (int64_t s : strides)
    if (s < 1)
      return fail("strides must be positive");
  if (autoPad == "NOTSET")
    return success();
  if (autoPad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
    return success();
  }
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return fail("auto_pad '" + autoPad + "' is not one of NOTSET, VALID, "
                "SAME_UPPER, SAME_LOWER");
  for (size_t i = 0; i < spatial; ++i) {
    int64_t in = inShape[2 + i];
    int64_t out = (in + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(
        (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in, 0);
    int64_t small = total / 2, large = total - small;
    pads[i] = autoPad == "SAME_UPPER" ? small : large;
    pads[spatial + i] = autoPad == "SAME_UPPER" ? large : small;
  }
  return success();
}

LogicalResult GraphImporter::importConv() {
  if (failed(requireInputs(2, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), w = input(1), bias = input(2);
  if (!x || !w || (hasInput(2) && !bias))
    return failure();
  auto wt = typeOf(w), xt = typeOf(x);
  if (wt.getRank() < 3 || xt.getRank() != wt.getRank())
    return fail("input and weight must have the same rank >= 3");
  SmallVector<int64_t> kernel =
      attrInts("kernel_shape", wt.getShape().drop_front(2));
  if (kernel != ArrayRef<int64_t>(wt.getShape().drop_front(2)))
    return fail("kernel_shape " + shapeString(kernel) +
                " disagrees with the weight shape " +
                shapeString(wt.getShape()));
  SmallVector<int64_t> strides, pads, dilations;
  if (failed(resolveWindow(xt.getShape(), kernel, strides, pads, dilations)))
    return failure();
  int64_t group = attrInt("group", 1);
  if (attrFailed)
    return failure();
  SmallVector<Value> operands{x, w};
  if (bias)
    operands.push_back(bias);
  return emit<nn::ConvOp>(operands,
                          {named("strides", b.getDenseI64ArrayAttr(strides)),
                           named("pads", b.getDenseI64ArrayAttr(pads)),
                           named("dilations", b.getDenseI64ArrayAttr(dilations)),
                           named("group", b.getI64IntegerAttr(group))});
}

template <typename OpTy> LogicalResult GraphImporter::pool() {
  constexpr bool isMax = std::is_same_v<OpTy, nn::MaxPoolOp>;
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(isMax ? 2 : 1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  if (!hasAttr("kernel_shape"))
    return fail("attribute 'kernel_shape' is required");
  SmallVector<int64_t> kernel = attrInts("kernel_shape");
  if (attrFailed)
    return failure();
  if (int64_t(kernel.size()) != typeOf(x).getRank() - 2)
    return fail("kernel_shape " + shapeString(kernel) +
                " does not match the input's spatial rank");
  SmallVector<int64_t> strides, pads, dilations;
  if (failed(resolveWindow(typeOf(x).getShape(), kernel, strides, pads,
                           dilations)))
    return failure();
  SmallVector<NamedAttribute> attrs{
      named("kernel_shape", b.getDenseI64ArrayAttr(kernel)),
      named("strides", b.getDenseI64ArrayAttr(strides)),
      named("pads", b.getDenseI64ArrayAttr(pads)),
      named("dilations", b.getDenseI64ArrayAttr(dilations)),
      named("ceil_mode", b.getBoolAttr(attrInt("ceil_mode", 0) != 0))};
  if constexpr (!isMax) {
    attrs.push_back(named("count_include_pad",
                          b.getBoolAttr(attrInt("count_include_pad", 0) != 0)));
  } else if (node->output_size() > 1 && !node->output(1).empty()) {
    // storage_order only changes the Indices output.
    int64_t order = attrInt("storage_order", 0);
    if (order != 0 && order != 1)
      return fail("storage_order must be 0 or 1, got " + std::to_string(order));
    attrs.push_back(named("storage_order", b.getI64IntegerAttr(order)));
    if (attrFailed)
      return failure();
    return emit<nn::MaxPoolWithIndicesOp>({x}, attrs);
  }
  if (attrFailed)
    return failure();
  return emit<OpTy>({x}, attrs);
}

LogicalResult GraphImporter::importGlobalAveragePool() {
  return unary<nn::GlobalAveragePoolOp>();
}

std::pair<Value, Value> GraphImporter::meanAndVariance(Value x, ArrayRef<int64_t> axes) {
  SmallVector<NamedAttribute> attrs{named("axes", b.getDenseI64ArrayAttr(axes)),
                                    named("keepdims", b.getBoolAttr(true))};
  Value mean = make<nn::ReduceMeanOp>({x}, attrs);
  Value diff = make<nn::SubOp>({x, mean});
  return {mean, make<nn::ReduceMeanOp>({make<nn::MulOp>({diff, diff})}, attrs)};
}

LogicalResult GraphImporter::importBatchNormalization() {
  if (failed(requireInputs(5, 5)))
    return failure();
  SmallVector<Value> operands;
  for (int i = 0; i < 5; ++i) {
    Value v = input(i);
    if (!v)
      return failure();
    operands.push_back(v);
  }
  float eps = attrFloat("epsilon", 1e-5f);
  float momentum = attrFloat("momentum", 0.9f);
  // training_mode is an attribute from opset 14; before that, training was
  // told by the outputs (mean, var, saved_mean, saved_var), which stay
  // refused below.
  bool training = opset >= 14 && attrInt("training_mode", 0) != 0;
  if (attrFailed)
    return failure();
  if (!training) {
    bool extraOutputs = false;
    for (int i = 1; i < node->output_size(); ++i)
      extraOutputs |= wantsOutput(i);
    if (extraOutputs && opset < 14)
      return fail("training mode (the mean, var, saved_mean and saved_var "
                  "outputs before opset 14) is not supported");
    if (extraOutputs && node->output_size() <= 3)
      return fail("running_mean and running_var are outputs of training mode "
                  "only (training_mode=1)");
    if (failed(allowOutputs(1)))
      return failure();
    return emit<nn::BatchNormalizationOp>(
        operands, {named("epsilon", b.getF32FloatAttr(eps))});
  }
  if (failed(allowOutputs(3)))
    return failure();

  // Training mode normalizes with the batch's own statistics: the mean and
  // the population (biased) variance over every axis but the channel axis 1,
  // computed in float for float16/bfloat16 inputs as the spec asks. Y is the
  // fused op given those statistics; the running statistics blend them into
  // input_mean/input_var by `momentum`.
  Value x = operands[0];
  auto xType = typeOf(x);
  if (xType.getRank() < 2)
    return fail("input must have rank >= 2 ([N, C, ...])");
  const char *names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (auto [i, name] : llvm::enumerate(names)) {
    auto t = typeOf(operands[i]);
    if (!isa<FloatType>(t.getElementType()))
      return fail(Twine(name) + " must be a floating-point tensor");
    if (i > 0 && (t.getRank() != 1 || t.getDimSize(0) != xType.getDimSize(1)))
      return fail(Twine(name) + " must have shape [" +
                  std::to_string(xType.getDimSize(1)) +
                  "] (the channel count)");
  }
  Type compute = xType.getElementType();
  if (compute.isF16() || compute.isBF16())
    compute = b.getF32Type();
  Value xs = x;
  if (compute != xType.getElementType())
    xs = make<nn::CastOp>({x}, {named("to", TypeAttr::get(compute))});
  SmallVector<int64_t> axes{0};
  for (int64_t i = 2; i < xType.getRank(); ++i)
    axes.push_back(i);
  auto [mean, var] = meanAndVariance(xs, axes);
  auto perChannel = RankedTensorType::get({xType.getDimSize(1)}, compute);
  Value mean1 = makeTyped<nn::ReshapeOp>(perChannel, {mean});
  Value var1 = makeTyped<nn::ReshapeOp>(perChannel, {var});
  Value y = make<nn::BatchNormalizationOp>(
      {x, operands[1], operands[2], mean1, var1},
      {named("epsilon", b.getF32FloatAttr(eps))});
  if (!y)
    return failure();
  // running = input * momentum + current * (1 - momentum), in the type of
  // input_mean/input_var.
  auto running = [&](Value input, Value current) -> Value {
    Type t = typeOf(input).getElementType();
    if (typeOf(current).getElementType() != t)
      current = make<nn::CastOp>({current}, {named("to", TypeAttr::get(t))});
    return make<nn::AddOp>(
        {make<nn::MulOp>({input, scalar(t, momentum)}),
         make<nn::MulOp>({current, scalar(t, 1.0 - double(momentum))})});
  };
  Value runningMean = wantsOutput(1) ? running(operands[3], mean1) : Value();
  Value runningVar = wantsOutput(2) ? running(operands[4], var1) : Value();
  if ((wantsOutput(1) && !runningMean) || (wantsOutput(2) && !runningVar))
    return failure();
  return setOutputs({y, runningMean, runningVar});
}

LogicalResult GraphImporter::importLayerNormalization() {
  if (failed(requireInputs(2, 3)) || failed(allowOutputs(3)))
    return failure();
  Value x = input(0), scale = input(1), bias = input(2);
  if (!x || !scale || (hasInput(2) && !bias))
    return failure();
  int64_t rank = typeOf(x).getRank();
  int64_t axis = canonicalAxis(attrInt("axis", -1), rank);
  float eps = attrFloat("epsilon", 1e-5f);
  int64_t stashType = attrInt("stash_type", 1);
  if (attrFailed)
    return failure();
  SmallVector<Value> operands{x, scale};
  if (bias)
    operands.push_back(bias);
  Value y = make<nn::LayerNormalizationOp>(
      operands, {named("axis", b.getI64IntegerAttr(axis)),
                 named("epsilon", b.getF32FloatAttr(eps))});
  if (!y)
    return failure();
  bool wantMean = wantsOutput(1), wantInvStdDev = wantsOutput(2);
  if (!wantMean && !wantInvStdDev)
    return setOutputs({y});

  // Mean and InvStdDev (the statistics a training graph saves) are
  // [d0, ..., d(axis-1), 1, ..., 1] tensors of the stash type, computed in
  // that precision as the spec's function body does; Y keeps the fused op.
  auto stash = elementType(stashType, "attribute 'stash_type'");
  if (failed(stash))
    return failure();
  if (!stash->isF32() && !stash->isBF16())
    return fail("stash_type " + std::to_string(stashType) +
                " is not float (1) or bfloat16 (16), the types Mean and "
                "InvStdDev may have");
  Value xs = x;
  if (typeOf(x).getElementType() != *stash)
    xs = make<nn::CastOp>({x}, {named("to", TypeAttr::get(*stash))});
  SmallVector<int64_t> axes;
  for (int64_t i = axis; i < rank; ++i)
    axes.push_back(i);
  auto [mean, var] = meanAndVariance(xs, axes);
  Value invStdDev = make<nn::ReciprocalOp>(
      {make<nn::SqrtOp>({make<nn::AddOp>({var, scalar(*stash, eps)})})});
  if (!invStdDev)
    return failure();
  return setOutputs({y, mean, invStdDev});
}

LogicalResult GraphImporter::importRMSNormalization() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), scale = input(1);
  int64_t axis = attrInt("axis", -1);
  float eps = attrFloat("epsilon", 1e-5f);
  attrInt("stash_type", 1);
  if (!x || !scale || attrFailed)
    return failure();
  return emit<nn::RMSNormalizationOp>(
      {x, scale}, {named("axis", b.getI64IntegerAttr(
                                     canonicalAxis(axis, typeOf(x).getRank()))),
                   named("epsilon", b.getF32FloatAttr(eps))});
}

/// ReduceSum takes its axes as an input from opset 13, ReduceMean and
/// ReduceMax from opset 18; before that they are an attribute.
template <typename OpTy, int64_t AxesInputSince>
LogicalResult GraphImporter::reduce() {
  bool axesAsInput = opset >= AxesInputSince;
  if (failed(requireInputs(1, axesAsInput ? 2 : 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  SmallVector<int64_t> axes;
  if (axesAsInput) {
    // An old-style attribute would otherwise be ignored silently.
    if (hasAttr("axes"))
      return fail("attribute 'axes' was replaced by the axes input in opset " +
                  std::to_string(AxesInputSince));
    if (hasInput(1)) {
      auto a = constInts(1, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
  } else {
    axes = attrInts("axes");
  }
  bool keepdims = attrInt("keepdims", 1) != 0;
  bool noop = attrInt("noop_with_empty_axes", 0) != 0;
  if (attrFailed)
    return failure();
  if (axes.empty()) {
    if (noop)
      return emit<nn::IdentityOp>({x});
    for (int64_t i = 0; i < typeOf(x).getRank(); ++i)
      axes.push_back(i);
  }
  int64_t rank = typeOf(x).getRank();
  for (int64_t &a : axes) {
    if (a < -rank || a >= rank)
      return fail("axis " + std::to_string(a) + " is out of range for rank " +
                  std::to_string(rank));
    if (a < 0)
      a += rank;
  }
  llvm::sort(axes);
  return emit<OpTy>({x}, {named("axes", b.getDenseI64ArrayAttr(axes)),
                          named("keepdims", b.getBoolAttr(keepdims))});
}

//===----------------------------------------------------------------------===//
// Handlers: shape and data movement
//===----------------------------------------------------------------------===//

LogicalResult GraphImporter::importReshape() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  auto shape = constInts(1, "shape");
  if (failed(shape))
    return failure();
  bool allowZero = attrInt("allowzero", 0) != 0;
  if (attrFailed)
    return failure();
  auto in = typeOf(x);
  SmallVector<int64_t> dims(*shape);
  int64_t known = 1, inferAt = -1;
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d == 0 && !allowZero) {
      if (int64_t(i) >= in.getRank())
        return fail("shape " + shapeString(*shape) + " copies dimension " +
                    std::to_string(i) + " that the input of rank " +
                    std::to_string(in.getRank()) + " lacks");
      d = in.getDimSize(i);
    }
    if (d == -1) {
      if (inferAt >= 0)
        return fail("shape " + shapeString(*shape) + " has more than one -1");
      inferAt = i;
      continue;
    }
    if (d < 0)
      return fail("shape " + shapeString(*shape) + " has a negative entry");
    if (d > 0 && known > kMaxElements / d)
      return fail("shape " + shapeString(*shape) + " is absurdly large");
    known *= d;
  }
  if (inferAt >= 0) {
    if (known == 0 || in.getNumElements() % known)
      return fail("cannot reshape " + shapeString(in.getShape()) + " to " +
                  shapeString(*shape));
    dims[inferAt] = in.getNumElements() / known;
  }
  auto op = buildTyped<nn::ReshapeOp>(
      {RankedTensorType::get(dims, in.getElementType())}, {x});
  if (failed(op))
    return failure();
  auto r = finish(*op);
  return failed(r) ? failure() : setOutputs(*r);
}

LogicalResult GraphImporter::importTranspose() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  SmallVector<int64_t> reversed;
  for (int64_t i = typeOf(x).getRank() - 1; i >= 0; --i)
    reversed.push_back(i);
  SmallVector<int64_t> perm = attrInts("perm", reversed);
  if (attrFailed)
    return failure();
  return emit<nn::TransposeOp>({x}, {named("perm", b.getDenseI64ArrayAttr(perm))});
}

LogicalResult GraphImporter::importFlatten() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  int64_t axis = attrInt("axis", 1);
  if (!x || attrFailed)
    return failure();
  // Flatten's axis may equal the rank (everything in the outer dimension).
  int64_t rank = typeOf(x).getRank();
  if (axis < 0 && axis >= -rank)
    axis += rank;
  return emit<nn::FlattenOp>({x}, {named("axis", b.getI64IntegerAttr(axis))});
}

LogicalResult GraphImporter::importSqueeze() {
  if (failed(requireInputs(1, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  if (hasAttr("axes"))
    return fail("attribute 'axes' was replaced by the axes input in opset 13");
  SmallVector<int64_t> axes;
  if (hasInput(1)) {
    auto a = constInts(1, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    for (auto [i, d] : llvm::enumerate(typeOf(x).getShape()))
      if (d == 1)
        axes.push_back(i);
  }
  return emit<nn::SqueezeOp>(
      {x}, {named("axes", b.getDenseI64ArrayAttr(
                              canonicalAxes(axes, typeOf(x).getRank())))});
}

LogicalResult GraphImporter::importUnsqueeze() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto axes = constInts(1, "axes");
  if (!x || failed(axes))
    return failure();
  int64_t resultRank = typeOf(x).getRank() + int64_t(axes->size());
  return emit<nn::UnsqueezeOp>(
      {x}, {named("axes", b.getDenseI64ArrayAttr(
                              canonicalAxes(*axes, resultRank)))});
}

LogicalResult GraphImporter::importConcat() {
  if (failed(requireInputs(1, 1 << 16)) || failed(allowOutputs(1)))
    return failure();
  SmallVector<Value> operands;
  for (int i = 0; i < numInputs(); ++i) {
    Value v = input(i);
    if (!v)
      return failure();
    operands.push_back(v);
  }
  if (!hasAttr("axis"))
    return fail("attribute 'axis' is required");
  int64_t axis = attrInt("axis", 0);
  if (attrFailed)
    return failure();
  return emit<nn::ConcatOp>(
      operands,
      {named("axis", b.getI64IntegerAttr(
                         canonicalAxis(axis, typeOf(operands[0]).getRank())))});
}

LogicalResult GraphImporter::importSplit() {
  if (failed(requireInputs(1, 2)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  int64_t rank = typeOf(x).getRank();
  int64_t axis = attrInt("axis", 0);
  if (attrFailed)
    return failure();
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  if (axis < 0)
    axis += rank;
  int64_t dim = typeOf(x).getDimSize(axis);
  SmallVector<int64_t> sizes;
  int64_t outputs = node->output_size();
  if (hasAttr("split"))
    return fail("attribute 'split' was replaced by the split input in opset 13");
  if (hasInput(1)) {
    auto s = constInts(1, "split");
    if (failed(s))
      return failure();
    sizes = *s;
  } else if (opset >= 18 && hasAttr("num_outputs")) {
    int64_t n = attrInt("num_outputs", 0);
    if (attrFailed)
      return failure();
    if (n < 1 || n != outputs)
      return fail("num_outputs " + std::to_string(n) + " must be positive and "
                  "match the node's " + std::to_string(outputs) + " outputs");
    // ONNX 18: pieces of ceil(dim / n), the last one smaller.
    int64_t piece = (dim + n - 1) / n;
    for (int64_t i = 0, left = dim; i < n; ++i, left -= piece)
      sizes.push_back(std::clamp<int64_t>(left, 0, piece));
  } else {
    if (outputs < 1 || dim % outputs)
      return fail("dimension " + std::to_string(dim) + " does not split evenly "
                  "into " + std::to_string(outputs) + " outputs");
    sizes.assign(outputs, dim / outputs);
  }
  if (int64_t(sizes.size()) != outputs)
    return fail("split has " + std::to_string(sizes.size()) +
                " sizes for " + std::to_string(outputs) + " outputs");
  return emit<nn::SplitOp>({x}, {named("axis", b.getI64IntegerAttr(axis)),
                                 named("sizes", b.getDenseI64ArrayAttr(sizes))});
}

LogicalResult GraphImporter::importSlice() {
  if (failed(requireInputs(3, 5)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  auto starts = constInts(1, "starts");
  auto ends = constInts(2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  SmallVector<int64_t> axes, steps;
  if (hasInput(3)) {
    auto a = constInts(3, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    for (size_t i = 0; i < starts->size(); ++i)
      axes.push_back(i);
  }
  if (hasInput(4)) {
    auto s = constInts(4, "steps");
    if (failed(s))
      return failure();
    steps = *s;
  } else {
    steps.assign(starts->size(), 1);
  }
  return emit<nn::SliceOp>({x}, {named("starts", b.getDenseI64ArrayAttr(*starts)),
                                 named("ends", b.getDenseI64ArrayAttr(*ends)),
                                 named("axes", b.getDenseI64ArrayAttr(canonicalAxes(
                                                   axes, typeOf(x).getRank()))),
                                 named("steps", b.getDenseI64ArrayAttr(steps))});
}

LogicalResult GraphImporter::importPad() {
  if (failed(requireInputs(2, 4)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto pads = constInts(1, "pads");
  if (!x || failed(pads))
    return failure();
  int64_t rank = typeOf(x).getRank();
  double value = 0;
  if (hasInput(2)) {
    auto v = constScalar(2, "constant_value");
    if (failed(v))
      return failure();
    value = *v;
  }
  SmallVector<int64_t> full(*pads);
  if (hasInput(3)) {
    // Opset 18+: pads only for the listed axes.
    auto axes = constInts(3, "axes");
    if (failed(axes))
      return failure();
    if (pads->size() != 2 * axes->size())
      return fail("pads needs two entries per axis");
    full.assign(2 * rank, 0);
    for (auto [i, a] : llvm::enumerate(*axes)) {
      if (a < -rank || a >= rank)
        return fail("axis " + std::to_string(a) + " is out of range");
      int64_t n = a < 0 ? a + rank : a;
      full[n] = (*pads)[i];
      full[rank + n] = (*pads)[axes->size() + i];
    }
  }
  std::string mode = attrString("mode", "constant");
  if (attrFailed)
    return failure();
  return emit<nn::PadOp>({x}, {named("pads", b.getDenseI64ArrayAttr(full)),
                               named("mode", b.getStringAttr(mode)),
                               named("value", b.getF64FloatAttr(value))});
}

LogicalResult GraphImporter::importGather() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), idx = input(1);
  int64_t axis = attrInt("axis", 0);
  if (!x || !idx || attrFailed)
    return failure();
  // Constant indices outside the data are an error in any ONNX runtime;
  // report them here rather than leave an unfoldable Gather behind.
  DenseElementsAttr indices;
  int64_t rank = typeOf(x).getRank();
  if (matchPattern(idx, m_Constant(&indices)) && axis >= -rank && axis < rank &&
      (indices.getElementType().isSignlessInteger(32) ||
       indices.getElementType().isSignlessInteger(64))) {
    int64_t dim = typeOf(x).getDimSize(axis < 0 ? axis + rank : axis);
    auto values = indices.getValues<APInt>();
    // A splat may stand for a huge tensor: one value says it all.
    for (int64_t i = 0, e = indices.isSplat() ? std::min<int64_t>(
                                                    indices.getNumElements(), 1)
                                              : indices.getNumElements();
         i < e; ++i) {
      int64_t v = values[i].getSExtValue();
      if (v < -dim || v >= dim)
        return fail("index " + std::to_string(v) + " is out of range for axis " +
                    std::to_string(axis) + " of size " + std::to_string(dim));
    }
  }
  return emit<nn::GatherOp>(
      {x, idx}, {named("axis", b.getI64IntegerAttr(canonicalAxis(axis, rank)))});
}

LogicalResult GraphImporter::importGatherElements() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), idx = input(1);
  int64_t axis = attrInt("axis", 0);
  if (!x || !idx || attrFailed)
    return failure();
  return emit<nn::GatherElementsOp>(
      {x, idx}, {named("axis", b.getI64IntegerAttr(
                                   canonicalAxis(axis, typeOf(x).getRank())))});
}

LogicalResult GraphImporter::importScatterND() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), idx = input(1), upd = input(2);
  std::string reduction = attrString("reduction", "none");
  if (!x || !idx || !upd || attrFailed)
    return failure();
  return emit<nn::ScatterNDOp>({x, idx, upd},
                               {named("reduction", b.getStringAttr(reduction))});
}

LogicalResult GraphImporter::importExpand() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto shape = constInts(1, "shape");
  if (!x || failed(shape))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return fail("shape " + shapeString(*shape) + " has a negative entry");
  // Bidirectional: the result is the broadcast of both shapes.
  SmallVector<int64_t> out;
  auto in = typeOf(x);
  if (!OpTrait::util::getBroadcastedShape(in.getShape(), *shape, out))
    return fail("input shape " + shapeString(in.getShape()) +
                " does not broadcast with " + shapeString(*shape));
  auto op = buildTyped<nn::ExpandOp>(
      {RankedTensorType::get(out, in.getElementType())}, {x});
  if (failed(op))
    return failure();
  auto r = finish(*op);
  return failed(r) ? failure() : setOutputs(*r);
}

LogicalResult GraphImporter::importWhere() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  Value c = input(0), x = input(1), y = input(2);
  if (!c || !x || !y)
    return failure();
  return emit<nn::WhereOp>({c, x, y});
}

/// True if `v` (a k, K or axis input read by constScalar) is a whole number
/// that converts to int64_t without overflow.
static bool isInt64(double v) {
  return std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 0x1p62;
}

LogicalResult GraphImporter::importTrilu() {
  if (failed(requireInputs(1, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  int64_t k = 0;
  if (hasInput(1)) {
    auto kv = constScalar(1, "k");
    if (failed(kv))
      return failure();
    if (!isInt64(*kv))
      return fail("k input must be a finite integer");
    k = int64_t(*kv);
  }
  int64_t upper = attrInt("upper", 1);
  if (attrFailed)
    return failure();
  return emit<nn::TriluOp>({x}, {named("upper", b.getBoolAttr(upper != 0)),
                                 named("k", b.getI64IntegerAttr(k))});
}

LogicalResult GraphImporter::importCumSum() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto axis = constScalar(1, "axis");
  if (!x || failed(axis))
    return failure();
  if (!isInt64(*axis))
    return fail("axis input must be a finite integer");
  int64_t exclusive = attrInt("exclusive", 0), reverse = attrInt("reverse", 0);
  if (attrFailed)
    return failure();
  return emit<nn::CumSumOp>({x}, {named("axis", b.getI64IntegerAttr(canonicalAxis(
                                                  int64_t(*axis), typeOf(x).getRank()))),
                                  named("exclusive", b.getBoolAttr(exclusive != 0)),
                                  named("reverse", b.getBoolAttr(reverse != 0))});
}

LogicalResult GraphImporter::importRange() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  auto start = constScalar(0, "start"), limit = constScalar(1, "limit"),
       delta = constScalar(2, "delta");
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  if (*delta == 0 || !std::isfinite(*delta) || !std::isfinite(*start) ||
      !std::isfinite(*limit))
    return fail("start, limit and delta must be finite and delta non-zero");
  double count = std::max(std::ceil((*limit - *start) / *delta), 0.0);
  if (count > double(kMaxElements))
    return fail("range is absurdly long");
  Type elem = typeOf(input(0)).getElementType();
  auto type = RankedTensorType::get({int64_t(count)}, elem);
  auto op = buildTyped<nn::RangeOp>(
      {type}, {}, {named("start", b.getF64FloatAttr(*start)),
                   named("limit", b.getF64FloatAttr(*limit)),
                   named("delta", b.getF64FloatAttr(*delta))});
  if (failed(op))
    return failure();
  return setOutputs((*op)->getResults());
}

LogicalResult GraphImporter::importShape() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  SmallVector<NamedAttribute> attrs{
      named("start", b.getI64IntegerAttr(attrInt("start", 0)))};
  if (hasAttr("end"))
    attrs.push_back(named("end", b.getI64IntegerAttr(attrInt("end", 0))));
  if (attrFailed)
    return failure();
  return emit<nn::ShapeOp>({x}, attrs);
}

LogicalResult GraphImporter::importConstantOfShape() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  auto shape = constInts(0, "shape");
  if (failed(shape))
    return failure();
  int64_t n = 1;
  for (int64_t d : *shape) {
    if (d < 0)
      return fail("shape " + shapeString(*shape) + " has a negative entry");
    if (d > 0 && n > kMaxElements / d)
      return fail("shape " + shapeString(*shape) + " is absurdly large");
    n *= d;
  }
  TypedAttr value = b.getF32FloatAttr(0.0f);
  if (auto *a = attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR)
      return fail("attribute 'value' must be a tensor");
    auto t = tensorType(a->t());
    if (failed(t))
      return failure();
    if (t->getNumElements() != 1)
      return fail("attribute 'value' must hold one element");
    auto data = tensorData(a->t(), *t);
    if (failed(data))
      return failure();
    value = cast<TypedAttr>(*data->getValues<Attribute>().begin());
  }
  auto type = RankedTensorType::get(*shape, value.getType());
  auto op = buildTyped<nn::ConstantOfShapeOp>({type}, {},
                                              {named("value", value)});
  if (failed(op))
    return failure();
  auto r = finish(*op);
  return failed(r) ? failure() : setOutputs(*r);
}

LogicalResult GraphImporter::importConstant() {
  if (failed(requireInputs(0, 0)) || failed(allowOutputs(1)))
    return failure();
  if (node->attribute_size() != 1)
    return fail("expects exactly one value attribute");
  const auto &a = node->attribute(0);
  DenseElementsAttr value;
  if (a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR) {
    auto t = tensorType(a.t());
    if (failed(t))
      return failure();
    auto data = tensorData(a.t(), *t);
    if (failed(data))
      return failure();
    value = *data;
  } else if (a.name() == "value_float" && a.type() == onnx::AttributeProto::FLOAT) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                   a.f());
  } else if (a.name() == "value_floats" &&
             a.type() == onnx::AttributeProto::FLOATS) {
    SmallVector<float> v(a.floats().begin(), a.floats().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({int64_t(v.size())}, b.getF32Type()),
        ArrayRef<float>(v));
  } else if (a.name() == "value_int" && a.type() == onnx::AttributeProto::INT) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()),
                                   int64_t(a.i()));
  } else if (a.name() == "value_ints" && a.type() == onnx::AttributeProto::INTS) {
    SmallVector<int64_t> v(a.ints().begin(), a.ints().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({int64_t(v.size())}, b.getI64Type()),
        ArrayRef<int64_t>(v));
  } else {
    return fail("attribute '" + a.name() + "' of this type is not supported");
  }
  Value c = nn::ConstantOp::create(b, loc, cast<ElementsAttr>(value));
  return setOutputs({c});
}

LogicalResult GraphImporter::importTopK() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(2)))
    return failure();
  Value x = input(0);
  auto k = constScalar(1, "K");
  if (!x || failed(k))
    return failure();
  if (!isInt64(*k))
    return fail("K input must be a finite integer");
  int64_t axis = attrInt("axis", -1), largest = attrInt("largest", 1),
          sorted = attrInt("sorted", 1);
  if (attrFailed)
    return failure();
  return emit<nn::TopKOp>({x}, {named("k", b.getI64IntegerAttr(int64_t(*k))),
                                named("axis", b.getI64IntegerAttr(canonicalAxis(
                                                  axis, typeOf(x).getRank()))),
                                named("largest", b.getBoolAttr(largest != 0)),
                                named("sorted", b.getBoolAttr(sorted != 0))});
}

//===----------------------------------------------------------------------===//
// Handlers: attention and rotary embedding (opset 23)
//===----------------------------------------------------------------------===//

/// Attention's 3-D [B, S, H * D] operands as [B, H, S, D]: the layout of the
/// KV cache (past_* and present_* are 4-D whatever the rank of Q, K and V)
/// and of the decomposition.
Value GraphImporter::attentionHeadsFirst(Value x, int64_t heads) {
  auto t = typeOf(x);
  auto split = RankedTensorType::get(
      {t.getDimSize(0), t.getDimSize(1), heads, t.getDimSize(2) / heads},
      t.getElementType());
  return make<nn::TransposeOp>(
      {makeTyped<nn::ReshapeOp>(split, {x})},
      {named("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))});
}

/// ONNX pads a mask shorter than the keys (past and current) with masked
/// entries at the end: -inf, or false for a boolean mask. A last dimension
/// of 1 broadcasts instead, as the spec's broadcasting rule for the mask
/// says (the reference would pad it too).
Value GraphImporter::attentionPadMask(Value mask, int64_t totalSeq) {
  auto t = typeOf(mask);
  if (t.getRank() < 1)
    return mask;
  int64_t last = t.getDimSize(t.getRank() - 1);
  Type elem = t.getElementType();
  if (last <= 1 || last >= totalSeq ||
      (!elem.isInteger(1) && !isa<FloatType>(elem)))
    return mask; // Anything else is the fused op's verifier's to report.
  SmallVector<int64_t> shape(t.getShape());
  shape.back() = totalSeq - last;
  Attribute fill = elem.isInteger(1) ? Attribute(b.getBoolAttr(false))
                                     : b.getFloatAttr(elem, -INFINITY);
  return make<nn::ConcatOp>(
      {mask, splat(RankedTensorType::get(shape, elem), fill)},
      {named("axis", b.getI64IntegerAttr(t.getRank() - 1))});
}

/// Folds is_causal into the mask (null: none). ONNX aligns the causal
/// frontier after the cached keys: query i sees key j iff j <= i + pastSeq,
/// where nn.attention's own is_causal has no offset. The frontier is
/// computed from two ranges rather than stored, so that a long cache puts
/// no [q_seq, total_seq] constant in the IR.
Value GraphImporter::attentionCausalMask(Value mask, int64_t qSeq,
                                         int64_t totalSeq, int64_t pastSeq) {
  auto range = [&](int64_t start, int64_t count) {
    return makeTyped<nn::RangeOp>(
        RankedTensorType::get({count}, b.getI64Type()), {},
        {named("start", b.getF64FloatAttr(double(start))),
         named("limit", b.getF64FloatAttr(double(start + count))),
         named("delta", b.getF64FloatAttr(1.0))});
  };
  // j < i + pastSeq + 1, as a [q_seq, total_seq] i1 tensor.
  Value frontier = make<nn::UnsqueezeOp>(
      {range(pastSeq + 1, qSeq)}, {named("axes", b.getDenseI64ArrayAttr({1}))});
  Value allowed = make<nn::LessOp>({range(0, totalSeq), frontier});
  if (!mask || !allowed)
    return allowed;
  Type elem = typeOf(mask).getElementType();
  if (elem.isInteger(1))
    return make<nn::AndOp>({mask, allowed});
  if (!isa<FloatType>(elem)) {
    (void)fail("mask must be i1 or have the query's element type");
    return nullptr;
  }
  // A float mask is added to the scores; the frontier adds 0 or -inf.
  return make<nn::AddOp>({mask, make<nn::WhereOp>({allowed, scalar(elem, 0.0),
                                                   scalar(elem, -INFINITY)})});
}

/// Attention as nn ops, step by step as ONNX defines it, for when the
/// scores (qk_matmul_output) are wanted: nn.attention keeps them to itself.
/// q is [B, Hq, Sq, D]; key and value are [B, Hkv, T, D] and [B, Hkv, T, Dv]
/// (the cache included); mask (i1 or float, causal frontier folded in)
/// broadcasts to [B, Hq, Sq, T]. The fused op's verifier has checked all
/// that. y is [B, Hq, Sq, Dv].
LogicalResult
GraphImporter::attentionDecomposed(Value q, Value key, Value value, Value mask,
                                   std::optional<float> scale, float softcap,
                                   int64_t softmaxPrecision, int64_t qkMode,
                                   Value &y, Value &qk) {
  auto qt = typeOf(q);
  Type elem = qt.getElementType();
  int64_t batch = qt.getDimSize(0), qHeads = qt.getDimSize(1),
          qSeq = qt.getDimSize(2), kvHeads = typeOf(key).getDimSize(1);
  int64_t group = qHeads / kvHeads;
  Type softmaxType = elem;
  if (softmaxPrecision != 0) {
    auto t = elementType(softmaxPrecision, "attribute 'softmax_precision'");
    if (failed(t))
      return failure();
    if (!isa<FloatType>(*t))
      return fail("softmax_precision must name a floating-point type");
    softmaxType = *t;
  }
  // [B, Hq, Sq, K] x [B, Hkv, K, N] -> [B, Hq, Sq, N]. Query head h uses
  // key/value head h / group (grouped-query attention): splitting the query
  // heads into [Hkv, group] lets matmul's batch broadcasting share each
  // key/value head with its group without repeating it.
  auto headMatMul = [&](Value lhs, Value rhs) -> Value {
    if (!lhs || !rhs)
      return nullptr;
    if (group == 1)
      return make<nn::MatMulOp>({lhs, rhs});
    auto lt = typeOf(lhs), rt = typeOf(rhs);
    int64_t inner = lt.getDimSize(3), n = rt.getDimSize(3);
    Value l = makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({batch, kvHeads, group, qSeq, inner}, elem),
        {lhs});
    Value r = makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({batch, kvHeads, 1, inner, n}, elem), {rhs});
    return makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({batch, qHeads, qSeq, n}, elem),
        {make<nn::MatMulOp>({l, r})});
  };
  // Q and K are each scaled by sqrt(scale) before the product, as the spec
  // does to keep it from overflowing; a negative scale keeps its sign on
  // the Q side, so that the product is still scale * Q K^T.
  double s = scale ? double(*scale) : 1.0 / std::sqrt(double(qt.getDimSize(3)));
  double root = std::sqrt(std::abs(s));
  Value keyT = make<nn::TransposeOp>(
      {make<nn::MulOp>({key, scalar(elem, root)})},
      {named("perm", b.getDenseI64ArrayAttr({0, 1, 3, 2}))});
  Value raw = headMatMul(
      make<nn::MulOp>({q, scalar(elem, s < 0 ? -root : root)}), keyT);
  Value capped = raw;
  if (softcap > 0) {
    Value cap = scalar(elem, softcap);
    capped =
        make<nn::MulOp>({make<nn::TanhOp>({make<nn::DivOp>({raw, cap})}), cap});
  }
  // The mask as an additive bias: a boolean one adds 0 or -inf.
  Value bias = mask;
  if (mask && typeOf(mask).getElementType().isInteger(1))
    bias =
        make<nn::WhereOp>({mask, scalar(elem, 0.0), scalar(elem, -INFINITY)});
  if (mask && !bias)
    return failure();
  Value withBias = bias ? make<nn::AddOp>({capped, bias}) : capped;
  Value logits = withBias;
  if (softmaxType != elem)
    logits =
        make<nn::CastOp>({logits}, {named("to", TypeAttr::get(softmaxType))});
  Value probs =
      make<nn::SoftmaxOp>({logits}, {named("axis", b.getI64IntegerAttr(3))});
  if (bias) {
    // A query row whose keys are all masked (its bias is -inf throughout)
    // has zero probabilities, and so a zero output row, where softmax would
    // give NaN.
    int64_t last = typeOf(bias).getRank() - 1;
    Value rowMax = make<nn::ReduceMaxOp>(
        {bias}, {named("axes", b.getDenseI64ArrayAttr({last})),
                 named("keepdims", b.getBoolAttr(true))});
    Value blocked = make<nn::EqualOp>({rowMax, scalar(elem, -INFINITY)});
    probs = make<nn::WhereOp>({blocked, scalar(softmaxType, 0.0), probs});
  }
  if (softmaxType != elem)
    probs = make<nn::CastOp>({probs}, {named("to", TypeAttr::get(elem))});
  y = headMatMul(probs, value);
  // Mode 0: the product; 1: after softcap; 2: after the mask too; 3: the
  // probabilities, at the output precision. (onnx's reference returns the
  // softcapped product for mode 0 as well; the spec says the product.)
  qk = qkMode == 0   ? raw
       : qkMode == 1 ? capped
       : qkMode == 2 ? withBias
                     : probs;
  return success(y && qk);
}

LogicalResult GraphImporter::importAttention() {
  if (failed(requireInputs(3, 6)) || failed(allowOutputs(4)))
    return failure();
  Value q = input(0), k = input(1), v = input(2), mask = input(3),
        pastKey = input(4), pastValue = input(5);
  if (!q || !k || !v || (hasInput(3) && !mask) || (hasInput(4) && !pastKey) ||
      (hasInput(5) && !pastValue))
    return failure();
  bool causal = attrInt("is_causal", 0) != 0;
  int64_t qHeads = attrInt("q_num_heads", 0),
          kvHeads = attrInt("kv_num_heads", 0);
  float softcap = attrFloat("softcap", 0.0f);
  std::optional<float> scale;
  if (hasAttr("scale"))
    scale = attrFloat("scale", 1.0f);
  int64_t qkMode = attrInt("qk_matmul_output_mode", 0);
  int64_t softmaxPrecision = attrInt("softmax_precision", 0);
  if (attrFailed)
    return failure();
  if (!pastKey != !pastValue)
    return fail("past_key and past_value must be given together");
  bool wantPresent = wantsOutput(1) || wantsOutput(2), wantQK = wantsOutput(3);
  if (wantQK && (qkMode < 0 || qkMode > 3))
    return fail("qk_matmul_output_mode " + std::to_string(qkMode) +
                " is not 0, 1, 2 or 3");
  auto attrsFor = [&](bool isCausal) {
    SmallVector<NamedAttribute> attrs{
        named("is_causal", b.getBoolAttr(isCausal)),
        named("q_num_heads", b.getI64IntegerAttr(qHeads)),
        named("kv_num_heads", b.getI64IntegerAttr(kvHeads)),
        named("softcap", b.getF32FloatAttr(softcap))};
    if (scale)
      attrs.push_back(named("scale", b.getF32FloatAttr(*scale)));
    return attrs;
  };
  auto qt = typeOf(q), kt = typeOf(k), vt = typeOf(v);
  int64_t rank = qt.getRank();
  bool ranksAgree =
      (rank == 3 || rank == 4) && kt.getRank() == rank && vt.getRank() == rank;

  // Without a cache or the scores, the fused op takes the inputs as they are.
  if (!pastKey && !wantPresent && !wantQK) {
    SmallVector<Value> operands{q, k, v};
    if (mask) {
      if (ranksAgree)
        mask = attentionPadMask(mask, kt.getDimSize(rank == 3 ? 1 : 2));
      if (!mask)
        return failure();
      operands.push_back(mask);
    }
    return emit<nn::AttentionOp>(operands, attrsFor(causal));
  }

  // The cache is [B, kv_heads, seq, head_size]: 3-D inputs are split into
  // heads first and the result merged back at the end.
  if (!ranksAgree)
    return fail("query, key and value must all be 3-D or all 4-D");
  if (rank == 3) {
    if (qHeads <= 0 || kvHeads <= 0)
      return fail("3-D inputs need q_num_heads and kv_num_heads");
    if (qt.getDimSize(2) % qHeads || kt.getDimSize(2) % kvHeads ||
        vt.getDimSize(2) % kvHeads)
      return fail("hidden sizes must divide by the head counts");
    q = attentionHeadsFirst(q, qHeads);
    k = attentionHeadsFirst(k, kvHeads);
    v = attentionHeadsFirst(v, kvHeads);
    if (!q || !k || !v)
      return failure();
  }
  Value presentKey = k, presentValue = v;
  int64_t pastSeq = 0;
  if (pastKey) {
    auto checkPast = [&](Value past, Value current, StringRef name) {
      auto p = typeOf(past), c = typeOf(current);
      if (p.getElementType() != c.getElementType())
        return fail(name + " must have the element type of Q, K and V");
      if (p.getRank() != 4 || p.getDimSize(0) != c.getDimSize(0) ||
          p.getDimSize(1) != c.getDimSize(1) ||
          p.getDimSize(3) != c.getDimSize(3))
        return fail(name + " has shape " + shapeString(p.getShape()) +
                    "; it must be [batch, kv_heads, past_seq, head_size] = [" +
                    std::to_string(c.getDimSize(0)) + "," +
                    std::to_string(c.getDimSize(1)) + ",*," +
                    std::to_string(c.getDimSize(3)) + "]");
      return success();
    };
    if (failed(checkPast(pastKey, k, "past_key")) ||
        failed(checkPast(pastValue, v, "past_value")))
      return failure();
    pastSeq = typeOf(pastKey).getDimSize(2);
    if (typeOf(pastValue).getDimSize(2) != pastSeq)
      return fail("past_key and past_value hold " + std::to_string(pastSeq) +
                  " and " + std::to_string(typeOf(pastValue).getDimSize(2)) +
                  " positions");
    auto seqAxis = named("axis", b.getI64IntegerAttr(2));
    presentKey = make<nn::ConcatOp>({pastKey, k}, {seqAxis});
    presentValue = make<nn::ConcatOp>({pastValue, v}, {seqAxis});
    if (!presentKey || !presentValue)
      return failure();
  }
  int64_t qSeq = typeOf(q).getDimSize(2);
  int64_t totalSeq = typeOf(presentKey).getDimSize(2);
  if (mask) {
    Type maskElem = typeOf(mask).getElementType();
    if (!maskElem.isInteger(1) && maskElem != qt.getElementType())
      return fail("mask must be i1 or have the query's element type");
    if (!(mask = attentionPadMask(mask, totalSeq)))
      return failure();
  }
  // nn.attention's causal frontier has no offset: with cached keys, or when
  // the scores are built here, the frontier becomes part of the mask.
  bool fusedCausal = causal;
  if (causal && (pastSeq > 0 || wantQK)) {
    if (!(mask = attentionCausalMask(mask, qSeq, totalSeq, pastSeq)))
      return failure();
    fusedCausal = false;
  }

  // The fused op checks heads, head sizes and the mask's shape for both
  // ways, and computes Y when the scores are not wanted.
  SmallVector<Value> operands{q, presentKey, presentValue};
  if (mask)
    operands.push_back(mask);
  auto fused = build<nn::AttentionOp>(operands, attrsFor(fusedCausal));
  if (failed(fused))
    return failure();
  Value y, qk;
  if (!wantQK) {
    auto results = finish(*fused);
    if (failed(results))
      return failure();
    y = (*results)[0];
  } else {
    (*fused)->erase();
    if (failed(attentionDecomposed(q, presentKey, presentValue, mask, scale,
                                   softcap, softmaxPrecision, qkMode, y, qk)))
      return failure();
  }
  if (rank == 3) {
    // [B, Hq, Sq, Dv] back to [B, Sq, Hq * Dv].
    auto yt = typeOf(y);
    y = makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({yt.getDimSize(0), yt.getDimSize(2),
                               yt.getDimSize(1) * yt.getDimSize(3)},
                              yt.getElementType()),
        {make<nn::TransposeOp>(
            {y}, {named("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))})});
    if (!y)
      return failure();
  }
  return setOutputs({y, presentKey, presentValue, qk});
}

LogicalResult GraphImporter::importRotaryEmbedding() {
  if (failed(requireInputs(3, 4)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), cosC = input(1), sinC = input(2), pos = input(3);
  if (!x || !cosC || !sinC || (hasInput(3) && !pos))
    return failure();
  SmallVector<NamedAttribute> attrs{
      named("interleaved", b.getBoolAttr(attrInt("interleaved", 0) != 0)),
      named("num_heads", b.getI64IntegerAttr(attrInt("num_heads", 0))),
      named("rotary_embedding_dim",
            b.getI64IntegerAttr(attrInt("rotary_embedding_dim", 0)))};
  if (attrFailed)
    return failure();
  SmallVector<Value> operands{x, cosC, sinC};
  if (pos)
    operands.push_back(pos);
  return emit<nn::RotaryEmbeddingOp>(operands, attrs);
}

//===----------------------------------------------------------------------===//
// The handler table: ONNX op type -> (handler, first opset it exists in)
//===----------------------------------------------------------------------===//

const llvm::StringMap<std::pair<GraphImporter::Handler, int64_t>> &
GraphImporter::handlers() {
  using G = GraphImporter;
  static const llvm::StringMap<std::pair<Handler, int64_t>> table = {
      {"Add", {&G::binary<nn::AddOp>, 1}},
      {"Sub", {&G::binary<nn::SubOp>, 1}},
      {"Mul", {&G::binary<nn::MulOp>, 1}},
      {"Div", {&G::binary<nn::DivOp>, 1}},
      {"Pow", {&G::binary<nn::PowOp>, 1}},
      {"Equal", {&G::binary<nn::EqualOp>, 1}},
      {"Less", {&G::binary<nn::LessOp>, 1}},
      {"Greater", {&G::binary<nn::GreaterOp>, 1}},
      {"And", {&G::binary<nn::AndOp>, 1}},
      {"Min", {&G::variadicChain<nn::MinOp>, 1}},
      {"Max", {&G::variadicChain<nn::MaxOp>, 1}},
      {"Sqrt", {&G::unary<nn::SqrtOp>, 1}},
      {"Exp", {&G::unary<nn::ExpOp>, 1}},
      {"Log", {&G::unary<nn::LogOp>, 1}},
      {"Neg", {&G::unary<nn::NegOp>, 1}},
      {"Abs", {&G::unary<nn::AbsOp>, 1}},
      {"Reciprocal", {&G::unary<nn::ReciprocalOp>, 1}},
      {"Tanh", {&G::unary<nn::TanhOp>, 1}},
      {"Sigmoid", {&G::unary<nn::SigmoidOp>, 1}},
      {"Relu", {&G::unary<nn::ReluOp>, 1}},
      {"Erf", {&G::unary<nn::ErfOp>, 1}},
      {"Not", {&G::unary<nn::NotOp>, 1}},
      {"Identity", {&G::unary<nn::IdentityOp>, 1}},
      {"LeakyRelu", {&G::importLeakyRelu, 1}},
      {"Gelu", {&G::importGelu, 20}},
      {"Clip", {&G::importClip, 1}},
      {"Dropout", {&G::importDropout, 1}},
      {"Cast", {&G::importCast, 1}},
      {"Softmax", {&G::softmax<nn::SoftmaxOp>, 1}},
      {"LogSoftmax", {&G::softmax<nn::LogSoftmaxOp>, 1}},
      {"MatMul", {&G::importMatMul, 1}},
      {"Gemm", {&G::importGemm, 1}},
      {"Einsum", {&G::importEinsum, 12}},
      {"Conv", {&G::importConv, 1}},
      {"MaxPool", {&G::pool<nn::MaxPoolOp>, 1}},
      {"AveragePool", {&G::pool<nn::AveragePoolOp>, 1}},
      {"GlobalAveragePool", {&G::importGlobalAveragePool, 1}},
      {"BatchNormalization", {&G::importBatchNormalization, 1}},
      {"LayerNormalization", {&G::importLayerNormalization, 17}},
      {"RMSNormalization", {&G::importRMSNormalization, 23}},
      {"ReduceMean", {&G::reduce<nn::ReduceMeanOp, 18>, 1}},
      {"ReduceSum", {&G::reduce<nn::ReduceSumOp, 13>, 1}},
      {"ReduceMax", {&G::reduce<nn::ReduceMaxOp, 18>, 1}},
      {"Reshape", {&G::importReshape, 5}},
      {"Transpose", {&G::importTranspose, 1}},
      {"Flatten", {&G::importFlatten, 1}},
      {"Squeeze", {&G::importSqueeze, 1}},
      {"Unsqueeze", {&G::importUnsqueeze, 1}},
      {"Concat", {&G::importConcat, 1}},
      {"Split", {&G::importSplit, 1}},
      {"Slice", {&G::importSlice, 10}},
      {"Pad", {&G::importPad, 11}},
      {"Gather", {&G::importGather, 1}},
      {"GatherElements", {&G::importGatherElements, 11}},
      {"ScatterND", {&G::importScatterND, 11}},
      {"Expand", {&G::importExpand, 8}},
      {"Where", {&G::importWhere, 9}},
      {"Trilu", {&G::importTrilu, 14}},
      {"CumSum", {&G::importCumSum, 11}},
      {"Range", {&G::importRange, 11}},
      {"Shape", {&G::importShape, 1}},
      {"ConstantOfShape", {&G::importConstantOfShape, 9}},
      {"Constant", {&G::importConstant, 1}},
      {"TopK", {&G::importTopK, 10}},
      {"Attention", {&G::importAttention, 23}},
      {"RotaryEmbedding", {&G::importRotaryEmbedding, 23}},
  };
  return table;
}


//===----------------------------------------------------------------------===//
// Module-level import
//===----------------------------------------------------------------------===//

LogicalResult GraphImporter::readOpset() {
  loc = FileLineColLoc::get(ctx, path, 0, 0);
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
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

LogicalResult GraphImporter::importNode(const onnx::NodeProto &n, int index) {
  node = &n;
  nodeName = n.name().empty() ? n.op_type() + "_" + std::to_string(index)
                              : n.name();
  loc = getONNXNodeLoc(ctx, nodeName, n.op_type(), opset, path);
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
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      emitError(loc) << "domain '" << n.domain()
                     << "' is not supported (only the default ONNX domain is)";
    } else {
      const auto &table = handlers();
      auto it = table.find(n.op_type());
      if (it == table.end()) {
        emitError(loc) << "operator is not supported";
      } else if (opset < it->second.second) {
        emitError(loc) << n.op_type() << " needs opset "
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
        for (int i = 0; !mismatch && i < tt.shape().dim_size(); ++i)
          mismatch = tt.shape().dim(i).has_dim_value() &&
                     tt.shape().dim(i).dim_value() != type.getDimSize(i);
        if (mismatch)
          return fail("graph output '" + out.name() +
                      "' is declared with a shape that disagrees with the "
                      "inferred " + shapeString(type.getShape()));
      }
    }
    results.push_back(v->second);
    resultTypes.push_back(type);
  }
  func::ReturnOp::create(b, loc, results);
  func.setFunctionType(
      b.getFunctionType(func.getArgumentTypes(), resultTypes));
  for (auto [i, out] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "nn.name", b.getStringAttr(out.name()));
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

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

static bool looksLikeText(StringRef bytes) {
  StringRef s = bytes.ltrim();
  while (s.starts_with("#")) { // Comment lines, as in lit tests.
    s = s.drop_until([](char c) { return c == '\n'; }).ltrim();
  }
  return s.starts_with("<");
}

/// libonnx's text parser recurses for every nested graph (and type) and has
/// no depth limit of its own: deep nesting overflows the stack. The binary
/// path is bounded by protobuf's recursion limit (100 messages).
static constexpr int64_t kMaxTextNesting = 100;

/// The deepest nesting of {}, () and [] in ONNX text, outside strings and
/// '#' comments.
static int64_t textNestingDepth(StringRef text) {
  int64_t depth = 0, deepest = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '#') {
      i = text.find('\n', i);
      if (i == StringRef::npos)
        break;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
    } else if (c == '{' || c == '(' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == '}' || c == ')' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// The parser's message quotes the whole offending line; keep each line short.
static std::string shortenLines(StringRef message, size_t width = 240) {
  SmallVector<StringRef> lines;
  message.split(lines, '\n');
  std::string out;
  for (auto [i, line] : llvm::enumerate(lines)) {
    out += i ? "\n" : "";
    out += line.size() > width ? (line.take_front(width) + "...").str()
                               : line.str();
  }
  return out;
}

/// Parses binary or text ONNX into `model`; emits a diagnostic on failure.
static LogicalResult parseModel(MLIRContext *context, StringRef bytes,
                                StringRef path, onnx::ModelProto &model,
                                bool &text) {
  Location fileLoc = FileLineColLoc::get(context, path, 0, 0);
  text = looksLikeText(bytes);
  try {
    if (text) {
      std::string copy = bytes.str(); // The parser wants a C string.
      int64_t depth = textNestingDepth(StringRef(copy.c_str()));
      if (depth > kMaxTextNesting)
        return emitError(fileLoc) << "cannot parse ONNX text: brackets nest "
                                  << depth << " levels deep; at most "
                                  << kMaxTextNesting << " are supported";
      auto status = onnx::OnnxParser::Parse(model, copy.c_str());
      if (!status.IsOK())
        return emitError(fileLoc) << "cannot parse ONNX text: "
                                  << shortenLines(status.ErrorMessage());
    } else {
      if (bytes.size() > size_t(std::numeric_limits<int>::max()))
        return emitError(fileLoc)
               << "model file is over 2 GiB; store the weights as ONNX "
                  "external data";
      if (!model.ParseFromArray(bytes.data(), int(bytes.size())))
        return emitError(fileLoc)
               << "not a valid ONNX model (protobuf parse failed: truncated "
                  "or corrupt file?)";
    }
  } catch (const std::logic_error &e) {
    // std::stoll and friends in the text parser: a number it cannot convert.
    return emitError(fileLoc)
           << (text ? "cannot parse ONNX text" : "cannot read ONNX model")
           << ": a number is malformed or out of range (" << e.what() << ")";
  } catch (const std::exception &e) {
    return emitError(fileLoc) << "cannot read ONNX model: " << e.what();
  } catch (...) {
    return emitError(fileLoc) << "cannot read ONNX model";
  }
  if (!model.has_graph())
    return emitError(fileLoc) << "model has no graph";
  return success();
}

OwningOpRef<ModuleOp>
shardflow::importONNXBuffer(MLIRContext *context, StringRef bytes,
                            StringRef path, const ONNXImportOptions &options) {
  registerImportDialects(*context);
  onnx::ModelProto model;
  bool text = false;
  if (failed(parseModel(context, bytes, path, model, text)))
    return nullptr;
  GraphImporter importer(context, model, path, text ? StringRef() : bytes,
                         options);
  return importer.run();
}

LogicalResult shardflow::readInitializerBytes(MLIRContext *context,
                                              StringRef path,
                                              ArrayRef<std::string> names,
                                              llvm::StringMap<std::string> &out) {
  registerImportDialects(*context);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return emitError(FileLineColLoc::get(context, path, 0, 0))
           << "cannot open '" << path << "': " << buffer.getError().message();
  onnx::ModelProto model;
  bool text = false;
  if (failed(parseModel(context, (*buffer)->getBuffer(), path, model, text)))
    return failure();
  ONNXImportOptions options;
  GraphImporter importer(context, model, path, StringRef(), options);
  llvm::StringSet<> wanted;
  for (const std::string &n : names)
    wanted.insert(n);
  for (const auto &init : model.graph().initializer()) {
    if (!wanted.contains(init.name()))
      continue;
    auto bytes = importer.initializerBytes(init);
    if (failed(bytes))
      return failure();
    out[init.name()] = std::move(*bytes);
  }
  for (const std::string &n : names)
    if (!out.count(n))
      return emitError(FileLineColLoc::get(context, path, 0, 0))
             << "the model has no initializer '" << n << "'";
  return success();
}

OwningOpRef<ModuleOp>
shardflow::importONNXFile(MLIRContext *context, StringRef path,
                          const ONNXImportOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(context, path, 0, 0))
        << "cannot open '" << path << "': " << buffer.getError().message();
    return nullptr;
  }
  return importONNXBuffer(context, (*buffer)->getBuffer(), path, options);
}
