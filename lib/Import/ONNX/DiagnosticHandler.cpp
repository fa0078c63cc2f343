//===- DiagnosticHandler.cpp - diagnostics of a compile from ONNX ----------===//

#include "shardflow/Import/ONNX/DiagnosticHandler.h"

using namespace mlir;
using namespace shardflow;

ONNXDiagnosticHandler::ONNXDiagnosticHandler(MLIRContext *context, std::string displayPath,
                                             llvm::raw_ostream &os)
    : ScopedDiagnosticHandler(context), displayPath(std::move(displayPath)), os(os) {
  setHandler([this](Diagnostic &diag) { return print(diag); });
}

static const char *severityName(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Remark:
    return "remark";
  case DiagnosticSeverity::Note:
    return "note";
  }
  return "note";
}

LogicalResult ONNXDiagnosticHandler::print(Diagnostic &diag) {
  os << displayPath << ": " << severityName(diag.getSeverity()) << ": " << diag.str() << "\n";
  for (Diagnostic &note : diag.getNotes())
    os << displayPath << ": note: " << note.str() << "\n";
  return success();
}
