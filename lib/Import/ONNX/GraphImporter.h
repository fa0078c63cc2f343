//===- GraphImporter.h - the ONNX graph walk and its node API ----*- C++ -*-===//
//
// The importer of one ONNX graph: the graph walk (GraphImporter.cpp), the
// table of supported ops (OpHandlers.cpp) and one file per op family
// (Ops/*.cpp) whose handlers turn a node into nn ops through the API below:
// inputs, attributes, compile-time constants, and op construction that
// verifies and folds each op as it is built. Private to the importer.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_IMPORT_ONNX_GRAPHIMPORTER_H
#define SHARDFLOW_LIB_IMPORT_ONNX_GRAPHIMPORTER_H

#include "shardflow/Import/ONNX/ONNXImporter.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Import/ONNX/ProtobufOffsets.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Traits.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include "onnx/onnx_pb.h"

#include <limits>

namespace shardflow::onnx_import {

using namespace mlir;
namespace nn = shardflow::nn;

// Tensors larger than this are refused as absurd (hostile or corrupt files).
inline constexpr int64_t kMaxElements = int64_t(1) << 40;
// So are tensors of higher rank (numpy's limit; real models stay below 10).
// Beyond it the MLIR text that shard-opt prints and re-parses grows slow
// to parse (quadratically in the rank).
inline constexpr int64_t kMaxRank = 64;
// ONNX bounds meaning "to the end" in Slice are often INT64_MAX/INT64_MIN.
inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

inline std::string shapeString(ArrayRef<int64_t> dims) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(dims))
    s += (i ? "," : "") + std::to_string(d);
  return s + "]";
}

class GraphImporter {
public:
  /// The handler tables, for `shard-opt --list-ops`.
  static void printSupportedOps(llvm::raw_ostream &os);

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
  /// The same for the com.microsoft domain (onnxruntime's contrib ops),
  /// keyed by op type with the first version of that domain.
  static const llvm::StringMap<std::pair<Handler, int64_t>> &
  contribHandlers();

  // --- module-level steps
  LogicalResult readOpset();
  LogicalResult createFunction(ModuleOp module);
  /// ONNXImportOptions::keepMovedInitializers: adds them to
  /// stateInitializers.
  void keepMovedInitializers();
  LogicalResult orderNodes(SmallVectorImpl<int> &order);
  LogicalResult importNode(const onnx::NodeProto &n, int index);
  LogicalResult finishFunction();

  // --- diagnostics
  InFlightDiagnostic error() { return emitError(loc); }
  LogicalResult fail(const Twine &msg) { return emitError(loc) << msg.str(); }
  std::string nodeDescription() const {
    if (!nodeDomain.empty())
      return "node '" + nodeName + "' (" + nodeDomain + "." +
             node->op_type() +
             (nodeOpset ? ", opset " + std::to_string(nodeOpset) : "") + ")";
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
  /// The data input and the sorted, non-negative axes of a Reduce* node
  /// (axes as an input from `axesInputSince`, every axis when empty unless
  /// noop_with_empty_axes, which leaves `axes` empty and sets `noop`).
  LogicalResult reductionOperands(int64_t axesInputSince, Value &x,
                                  SmallVector<int64_t> &axes, bool &keepdims,
                                  bool &noop);
  /// ReduceL2, ReduceLogSumExp and ReduceSumSquare, composed.
  LogicalResult importReduceL2();
  LogicalResult importReduceLogSumExp();
  LogicalResult importReduceSumSquare();
  LogicalResult importArgMax();
  LogicalResult importArgReduce(bool isMax);
  LogicalResult importArgMin();
  template <typename OpTy> LogicalResult softmax();
  template <typename OpTy> LogicalResult pool();
  LogicalResult importLeakyRelu();
  LogicalResult importLessOrEqual();
  LogicalResult importGreaterOrEqual();
  /// x <= y (or x >= y with `greater`), false where either is NaN.
  LogicalResult orEqual(bool greater);
  LogicalResult importIsNaN();
  LogicalResult importIsInf();
  LogicalResult importOr();
  LogicalResult importXor();
  LogicalResult importCastLike();
  LogicalResult importSize();
  LogicalResult importSign();
  LogicalResult importMod();
  LogicalResult importSoftplus();
  LogicalResult importElu();
  LogicalResult importSelu();
  LogicalResult importHardSigmoid();
  LogicalResult importHardSwish();
  LogicalResult importMish();
  LogicalResult importPRelu();
  /// softplus(x) = max(x, 0) + log(1 + exp(-|x|)), which never overflows.
  Value softplusOf(Value x);
  /// max(0, min(1, alpha * x + beta)).
  Value hardSigmoidOf(Value x, double alpha, double beta);
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
  /// GroupNormalization and InstanceNormalization, composed.
  LogicalResult importGroupNormalization();
  LogicalResult importInstanceNormalization();
  /// x [N, C, ...] normalized over each of `groups` groups of channels
  /// (with the spatial dims), the statistics in `compute`; scale and bias
  /// are per group (`perGroup`) or per channel and apply in x's type.
  Value groupNormalize(Value x, Value scale, Value bias, int64_t groups,
                       float eps, Type compute, bool perGroup);
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
  // ONNX data movement and loss ops (Ops/IndexingAndLosses.cpp)
  LogicalResult importGatherND();
  LogicalResult importScatterElements();
  LogicalResult importOneHot();
  LogicalResult importTile();
  LogicalResult importNonZero();
  LogicalResult importNegativeLogLikelihoodLoss();
  LogicalResult importSoftmaxCrossEntropyLoss();
  LogicalResult lossAttributes(std::string &reduction,
                               std::optional<int64_t> &ignore);
  Value negativeLogLikelihood(Value logProb, Value target, Value weight,
                              std::optional<int64_t> ignore,
                              StringRef reduction);

  // --- com.microsoft contrib ops (Ops/Contrib.cpp)
  LogicalResult importSkipLayerNormalization();
  LogicalResult importSkipSimplifiedLayerNormalization();
  LogicalResult skipNormalization(bool simplified);
  LogicalResult importSimplifiedLayerNormalization();
  LogicalResult importContribGelu();
  LogicalResult importBiasGelu();
  LogicalResult importFastGelu();
  LogicalResult importQuickGelu();
  LogicalResult importContribRotaryEmbedding();
  LogicalResult importContribAttention();
  LogicalResult importMultiHeadAttention();
  LogicalResult importGroupQueryAttention();
  /// A contrib attention's key mask (mask_index / key_padding_mask: raw
  /// [B, T] or [B, S, T] 0/1, or [B] end positions) as an i1 "keep" tensor
  /// broadcasting to [B, H, S, T]; null after an error.
  Value contribKeyMask(Value mask, StringRef name, int64_t batch, int64_t qSeq,
                       int64_t totalSeq);
  /// softmax(scale Q K^T + bias) V over [B, S, H*D] q/k/v and back to
  /// [B, S, H*Dv]; `keep` (i1) becomes an additive bias of 0 or `filter` as
  /// onnxruntime's contrib kernels apply it, `extraBias` (attention_bias) is
  /// added too, and `causal` excludes the keys after each query.
  Value contribAttention(Value q, Value k, Value v, int64_t heads,
                         int64_t kvHeads, Value keep, bool causal,
                         float filter, Value extraBias,
                         std::optional<float> scale);

  MLIRContext *ctx;
  OpBuilder b;
  const onnx::ModelProto &model;
  const onnx::GraphProto &graph;
  std::string path, modelDir;
  const ONNXImportOptions &options;
  int64_t opset = 0;
  /// The com.microsoft version the model imports (0: none).
  int64_t contribOpset = 0;
  llvm::StringMap<PayloadRange> payloads;
  llvm::StringMap<const onnx::TensorProto *> initializers;
  /// Initializers imported as nn.weight whatever their size: a training
  /// step's running statistics (ONNXImportOptions::runningStatistics) and
  /// the initializers data movement brings to the data
  /// (ONNXImportOptions::keepMovedInitializers).
  llvm::StringSet<> stateInitializers;
  llvm::StringMap<Value> values;
  SmallVector<std::pair<std::string, DenseElementsAttr>> pinnedInputs;
  func::FuncOp func;

  // The node being imported.
  const onnx::NodeProto *node = nullptr;
  /// Running statistics of training-mode BatchNormalization nodes and the
  /// initializers they update (ONNXImportOptions::runningStatistics), in
  /// node order: extra results of @main.
  llvm::SmallVector<std::pair<mlir::Value, std::string>> runningStatistics;
  std::string nodeName;
  /// The node's domain when it is not the default one, and its version.
  std::string nodeDomain;
  int64_t nodeOpset = 0;
  Location loc;
  bool attrFailed = false;
};


//===----------------------------------------------------------------------===//
// Op construction and the handlers shared by op families (templates)
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

/// ReduceSum takes its axes as an input from opset 13, ReduceMean,
/// ReduceMax, ReduceMin and ReduceProd from opset 18; before that they are
/// an attribute.
template <typename OpTy, int64_t AxesInputSince>
LogicalResult GraphImporter::reduce() {
  Value x;
  SmallVector<int64_t> axes;
  bool keepdims = true, noop = false;
  if (failed(reductionOperands(AxesInputSince, x, axes, keepdims, noop)))
    return failure();
  if (noop)
    return emit<nn::IdentityOp>({x});
  return emit<OpTy>({x}, {named("axes", b.getDenseI64ArrayAttr(axes)),
                          named("keepdims", b.getBoolAttr(keepdims))});
}

} // namespace shardflow::onnx_import

#endif // SHARDFLOW_LIB_IMPORT_ONNX_GRAPHIMPORTER_H

