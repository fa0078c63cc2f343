//===- ImportSummary.h - one line about an imported model ------*- C++ -*-===//
//
// shard-opt --summary: ops, weights, inputs, outputs and the import time of
// a model as imported into nn.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_IMPORT_ONNX_IMPORTSUMMARY_H
#define SHARDFLOW_IMPORT_ONNX_IMPORTSUMMARY_H

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace shardflow {

/// "summary: model.onnx (opset 17): 12 ops of 5 kinds, 4 weights (...)".
std::string summarizeImport(mlir::ModuleOp module, llvm::StringRef path, double seconds);

} // namespace shardflow

#endif // SHARDFLOW_IMPORT_ONNX_IMPORTSUMMARY_H
