//===- ImportSummary.cpp - one line about an imported model ----------------===//

#include "shardflow/Import/ONNX/ImportSummary.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <map>

using namespace mlir;
using namespace shardflow;

static std::string typeString(Type t) {
  auto rt = cast<RankedTensorType>(t);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << rt.getElementType() << "[";
  llvm::interleave(rt.getShape(), os, ",");
  os << "]";
  return s;
}

std::string shardflow::summarizeImport(ModuleOp module, StringRef path, double seconds) {
  size_t ops = 0, constants = 0;
  int64_t weightBytes = 0;
  std::map<std::string, int> kinds, storage;
  std::string ins, outs;
  module.walk([&](Operation *op) {
    if (auto w = dyn_cast<nn::WeightOp>(op)) {
      ++storage[w.getStorage().str()];
      weightBytes += nn::getTensorStorageBytes(w.getType()).value_or(0);
    } else if (isa<nn::ConstantOp>(op)) {
      ++constants;
    } else if (op->getDialect() &&
               op->getDialect()->getNamespace() == "nn") {
      ++ops;
      ++kinds[op->getName().getStringRef().str()];
    }
  });
  int weights = 0;
  std::string storageText;
  for (auto &[kind, n] : storage) {
    weights += n;
    storageText += (storageText.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
  }
  module.walk([&](func::FuncOp f) {
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto name = f.getArgAttrOfType<StringAttr>(i, "nn.name");
      ins += (ins.empty() ? "" : ", ") + (name ? name.str() : "?") + " " +
             typeString(f.getArgument(i).getType());
    }
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      auto name = f.getResultAttrOfType<StringAttr>(i, "nn.name");
      outs += (outs.empty() ? "" : ", ") + (name ? name.str() : "?") + " " +
              typeString(f.getResultTypes()[i]);
    }
  });
  auto opset = module->getAttrOfType<IntegerAttr>("nn.opset");
  return llvm::formatv("summary: {0} (opset {1}): {2} ops of {3} kinds, {4} "
                       "weights ({5:F2} MB{6}), {7} constants; inputs: {8}; "
                       "outputs: {9}; imported in {10:F3} s",
                       llvm::sys::path::filename(path),
                       opset ? opset.getInt() : 0, ops, kinds.size(), weights,
                       weightBytes / 1e6,
                       storageText.empty() ? "" : ": " + storageText,
                       constants, ins, outs, seconds)
      .str();
}
