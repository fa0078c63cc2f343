//===- DiagnosticHandler.cpp - diagnostics of a compile from ONNX ----------===//

#include "shardflow/Import/ONNX/DiagnosticHandler.h"
#include "shardflow/Support/ONNXLocation.h"

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

/// `message`, naming the ONNX node of an error or warning at `loc` unless
/// it does already (the importer's own errors start with the node);
/// remarks word their places themselves.
static std::string withNode(const Diagnostic &diag) {
  std::string message = diag.str();
  if (diag.getSeverity() != DiagnosticSeverity::Error &&
      diag.getSeverity() != DiagnosticSeverity::Warning)
    return message;
  std::string node = describeONNXNode(diag.getLocation());
  if (node.empty() || llvm::StringRef(message).starts_with("node '"))
    return message;
  return node + ": " + message;
}

LogicalResult ONNXDiagnosticHandler::print(Diagnostic &diag) {
  os << displayPath << ": " << severityName(diag.getSeverity()) << ": "
     << withNode(diag) << "\n";
  for (Diagnostic &note : diag.getNotes())
    os << displayPath << ": note: " << note.str() << "\n";
  return success();
}
