//===- DiagnosticHandler.h - diagnostics of a compile from ONNX -*- C++ -*-===//
//
// A model file has no line numbers: diagnostics of a compile that started
// from an ONNX model are printed as `model.onnx: error: MESSAGE`, with the
// notes after them, and a diagnostic at an op imported from a node names
// that node as the importer's errors do, whatever pass emitted it:
//
//   model.onnx: error: node 'sum' (ReduceSum, opset 17): 'rt.kernel' op ...
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_IMPORT_ONNX_DIAGNOSTICHANDLER_H
#define SHARDFLOW_IMPORT_ONNX_DIAGNOSTICHANDLER_H

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace shardflow {

class ONNXDiagnosticHandler : public mlir::ScopedDiagnosticHandler {
public:
  /// Prints to `os`, naming the model as `displayPath`.
  ONNXDiagnosticHandler(mlir::MLIRContext *context, std::string displayPath,
                        llvm::raw_ostream &os = llvm::errs());

private:
  mlir::LogicalResult print(mlir::Diagnostic &diag);

  std::string displayPath;
  llvm::raw_ostream &os;
};

} // namespace shardflow

#endif // SHARDFLOW_IMPORT_ONNX_DIAGNOSTICHANDLER_H
