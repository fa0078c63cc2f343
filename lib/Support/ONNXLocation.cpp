//===- ONNXLocation.cpp - locations that name ONNX nodes -------------------===//

#include "shardflow/Support/ONNXLocation.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

static constexpr llvm::StringLiteral kOpType = "onnx.op_type";
static constexpr llvm::StringLiteral kOpset = "onnx.opset";

Location shardflow::getONNXNodeLoc(MLIRContext *context, StringRef nodeName, StringRef opType,
                                   int64_t opset, StringRef file) {
  Builder b(context);
  Location named = NameLoc::get(b.getStringAttr(nodeName), FileLineColLoc::get(context, file, 0, 0));
  auto metadata = b.getDictionaryAttr({b.getNamedAttr(kOpType, b.getStringAttr(opType)),
                                       b.getNamedAttr(kOpset, b.getI64IntegerAttr(opset))});
  return FusedLoc::get(context, {named}, metadata);
}

std::string shardflow::getONNXNodeName(Location loc) {
  std::string node;
  loc->walk([&](Location l) {
    if (auto named = dyn_cast<NameLoc>(l); named && node.empty())
      node = named.getName().str();
    return WalkResult::advance();
  });
  return node;
}

StringRef shardflow::getInitializerName(Location loc) {
  auto named = dyn_cast<NameLoc>(loc);
  if (!named || !isa<UnknownLoc>(named.getChildLoc()))
    return "";
  return named.getName().getValue();
}

std::string shardflow::describeONNXNode(Location loc) {
  std::string described;
  loc->walk([&](Location l) {
    auto fused = dyn_cast<FusedLoc>(l);
    auto metadata = fused ? dyn_cast_or_null<DictionaryAttr>(fused.getMetadata()) : nullptr;
    auto opType = metadata ? metadata.getAs<StringAttr>(kOpType) : nullptr;
    auto opset = metadata ? metadata.getAs<IntegerAttr>(kOpset) : nullptr;
    if (!opType || !opset)
      return WalkResult::advance();
    std::string name = getONNXNodeName(fused);
    described = "node '" + name + "' (" + opType.str() + ", opset " +
                std::to_string(opset.getInt()) + ")";
    return WalkResult::interrupt();
  });
  return described;
}

std::string shardflow::describeLocation(Location loc) {
  if (std::string node = describeONNXNode(loc); !node.empty())
    return node;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << loc;
  return text;
}
