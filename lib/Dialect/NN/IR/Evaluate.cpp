//===- Evaluate.cpp - nn ops on constants, by the CPU kernels -------------===//
//
// See Evaluate.h. Kernels report bad input by throwing RuntimeError; this
// file is compiled with exceptions so that such an op is simply not folded.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/IR/Evaluate.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/NN/IR/NNTraits.h"
#include "shardflow/Runtime/Format/KernelSignature.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <exception>

using namespace mlir;
namespace rtm = shardflow::runtime;

namespace shardflow::nn {

std::vector<uint8_t> getRuntimeBytes(DenseElementsAttr attr) {
  std::vector<uint8_t> out;
  Type elem = attr.getElementType();
  int64_t n = attr.getNumElements();
  if (elem.isInteger(1)) {
    out.reserve(size_t(n));
    for (bool b : attr.getValues<bool>())
      out.push_back(b ? 1 : 0);
    return out;
  }
  size_t width = size_t(getElementStorageBytes(elem));
  ArrayRef<char> raw = attr.getRawData();
  if (!attr.isSplat())
    return std::vector<uint8_t>(raw.begin(), raw.end());
  out.reserve(size_t(n) * width);
  for (int64_t i = 0; i < n; ++i)
    out.insert(out.end(), raw.begin(), raw.begin() + width);
  return out;
}

DenseElementsAttr getFromRuntimeBytes(RankedTensorType type,
                                      ArrayRef<uint8_t> bytes) {
  if (type.getElementType().isInteger(1)) {
    SmallVector<bool> values;
    values.reserve(bytes.size());
    for (uint8_t b : bytes)
      values.push_back(b != 0);
    return DenseElementsAttr::get(type, values);
  }
  return DenseElementsAttr::getFromRawBuffer(
      type, ArrayRef<char>(reinterpret_cast<const char *>(bytes.data()),
                           bytes.size()));
}

std::optional<rtm::DType> getRuntimeDType(Type type) {
  std::string name;
  llvm::raw_string_ostream os(name);
  os << type;
  return rtm::parseDType(name);
}

bool setKernelParam(rtm::Params &params, StringRef name, Attribute value) {
  std::string key = name.str();
  if (auto b = dyn_cast<BoolAttr>(value))
    params.set(key, int64_t(b.getValue()));
  else if (auto i = dyn_cast<IntegerAttr>(value))
    params.set(key, i.getType().isUnsignedInteger()
                        ? int64_t(i.getValue().getZExtValue())
                        : i.getValue().getSExtValue());
  else if (auto f = dyn_cast<FloatAttr>(value))
    params.set(key, f.getValueAsDouble());
  else if (auto s = dyn_cast<StringAttr>(value))
    params.set(key, s.str());
  else if (auto arr = dyn_cast<DenseI64ArrayAttr>(value))
    params.set(key, std::vector<int64_t>(arr.asArrayRef().begin(),
                                         arr.asArrayRef().end()));
  else if (auto t = dyn_cast<TypeAttr>(value)) {
    auto d = getRuntimeDType(t.getValue());
    if (!d)
      return false;
    params.set(key, *d);
  } else
    return false;
  return true;
}

LogicalResult evaluate(Operation *op, ArrayRef<Attribute> operands,
                       SmallVectorImpl<OpFoldResult> &results,
                       int64_t maxBytes) {
  if (isRandom(op) || operands.size() != op->getNumOperands())
    return failure();
  StringRef opName = op->getName().getStringRef();
  if (!opName.consume_front("nn."))
    return failure();
  const rtm::KernelSignature *signature = rtm::findKernelSignature(opName);
  rtm::KernelFn kernel = rtm::findKernel(opName);
  if (!signature || !signature->cpu || !kernel)
    return failure();

  rtm::Params params;
  for (NamedAttribute attr : op->getAttrs()) {
    if (attr.getName().getValue().starts_with("dist."))
      return failure(); // A rank's part of a sharded value: not folded.
    if (!setKernelParam(params, attr.getName().getValue(), attr.getValue()))
      return failure();
  }
  params.bind(signature);

  std::vector<std::vector<uint8_t>> inBytes, outBytes;
  std::vector<rtm::Tensor> inputs, outputs;
  auto tensorOf = [](RankedTensorType type, std::vector<uint8_t> &bytes,
                     rtm::DType dtype) {
    return rtm::Tensor{bytes.empty() ? nullptr : bytes.data(), dtype,
                       std::vector<int64_t>(type.getShape().begin(),
                                            type.getShape().end())};
  };
  for (Attribute a : operands) {
    auto dense = dyn_cast_or_null<DenseElementsAttr>(a);
    if (!dense)
      return failure();
    auto type = dyn_cast<RankedTensorType>(dense.getType());
    auto dtype = type ? getRuntimeDType(type.getElementType()) : std::nullopt;
    if (!dtype)
      return failure();
    inBytes.push_back(getRuntimeBytes(dense));
  }
  for (Value result : op->getResults()) {
    auto type = dyn_cast<RankedTensorType>(result.getType());
    if (!type || !type.hasStaticShape())
      return failure();
    auto bytes = getTensorStorageBytes(type);
    if (!bytes || *bytes > maxBytes ||
        !getRuntimeDType(type.getElementType()))
      return failure();
    outBytes.emplace_back(size_t(*bytes), 0);
  }
  for (auto [a, bytes] : llvm::zip(operands, inBytes)) {
    auto type = cast<RankedTensorType>(cast<DenseElementsAttr>(a).getType());
    inputs.push_back(tensorOf(type, bytes, *getRuntimeDType(type.getElementType())));
  }
  for (auto [result, bytes] : llvm::zip(op->getResults(), outBytes)) {
    auto type = cast<RankedTensorType>(result.getType());
    outputs.push_back(tensorOf(type, bytes, *getRuntimeDType(type.getElementType())));
  }

  // rank -1: a kernel reading a per-rank parameter refuses to run.
  rtm::KernelContext ctx{opName, std::move(inputs), std::move(outputs), params,
                         /*threads=*/1, /*rank=*/-1};
  try {
    kernel(ctx);
  } catch (const std::exception &) {
    return failure();
  }
  for (auto [result, bytes] : llvm::zip(op->getResults(), outBytes))
    results.push_back(
        getFromRuntimeBytes(cast<RankedTensorType>(result.getType()), bytes));
  return success();
}

/// evaluateValue's walk: `memo` holds the values computed so far.
static DenseElementsAttr evaluateValue(Value v, int64_t maxBytes, int depth,
                                       llvm::DenseMap<Value, DenseElementsAttr> &memo) {
  if (auto it = memo.find(v); it != memo.end())
    return it->second;
  Operation *op = v.getDefiningOp();
  // Deep chains are not what masks and tables are made of.
  if (!op || depth > 64 || op->getNumRegions() != 0)
    return {};
  Attribute constant;
  if (matchPattern(v, m_Constant(&constant)))
    return memo[v] = dyn_cast<DenseElementsAttr>(constant);
  // Ops whose value needs no operand value (nn.shape reads a type).
  SmallVector<OpFoldResult> own;
  if (succeeded(op->fold(SmallVector<Attribute>(op->getNumOperands()), own)) &&
      own.size() == op->getNumResults()) {
    auto i = cast<OpResult>(v).getResultNumber();
    if (auto d = dyn_cast_or_null<DenseElementsAttr>(
            dyn_cast_if_present<Attribute>(own[i])))
      return memo[v] = d;
  }
  auto type = dyn_cast<RankedTensorType>(v.getType());
  auto bytes = type ? getTensorStorageBytes(type) : std::nullopt;
  if (!bytes || *bytes > maxBytes)
    return {};
  SmallVector<Attribute> operands;
  for (Value operand : op->getOperands()) {
    DenseElementsAttr in = evaluateValue(operand, maxBytes, depth + 1, memo);
    if (!in)
      return {};
    operands.push_back(in);
  }
  // A view is its operand, reshaped.
  if (isViewLike(op) && op->getNumResults() == 1)
    return memo[v] = cast<DenseElementsAttr>(operands[0]).reshape(type);
  SmallVector<OpFoldResult> results;
  if (failed(evaluate(op, operands, results, maxBytes)))
    return {};
  for (auto [result, folded] : llvm::zip(op->getResults(), results))
    memo[result] = dyn_cast_or_null<DenseElementsAttr>(
        dyn_cast_if_present<Attribute>(folded));
  return memo[v];
}

DenseElementsAttr evaluateValue(Value v, int64_t maxBytes) {
  llvm::DenseMap<Value, DenseElementsAttr> memo;
  return evaluateValue(v, maxBytes, 0, memo);
}

} // namespace shardflow::nn
