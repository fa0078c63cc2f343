//===- ImportFuzzer.cpp - libFuzzer target for the ONNX importer -----------===//
//
// Feeds arbitrary bytes to shardflow::importONNXBuffer. Bytes that start with
// '<' (after whitespace and '#' comments) take the ONNX text path, anything
// else the binary protobuf path; the importer picks by content. Diagnostics
// are discarded: a rejected input is the expected outcome, and only a crash,
// a sanitizer report, a hang or runaway memory counts as a finding.
//
// Built by tools/fuzz-smoke.sh (clang, -DSHARDFLOW_ENABLE_FUZZER=ON).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Import/ONNX/ONNXImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace {

/// A context shared by consecutive inputs. Types and attributes uniqued in
/// it are never freed, so it is replaced every kRunsPerContext inputs to keep
/// memory bounded; nothing else in it depends on earlier inputs.
class FuzzContext {
public:
  mlir::MLIRContext &get() {
    if (!context || ++runs > kRunsPerContext) {
      runs = 0;
      context = std::make_unique<mlir::MLIRContext>(
          mlir::MLIRContext::Threading::DISABLED);
      shardflow::registerImportDialects(*context);
      context->getDiagEngine().registerHandler(
          [](mlir::Diagnostic &) { return mlir::success(); });
    }
    return *context;
  }

private:
  static constexpr int kRunsPerContext = 5000;
  std::unique_ptr<mlir::MLIRContext> context;
  int runs = 0;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FuzzContext fuzzContext;
  mlir::MLIRContext &context = fuzzContext.get();
  shardflow::ONNXImportOptions options;
  // A folder that does not exist: external-data references never resolve to
  // files on the fuzzing machine, so runs do not depend on its disk.
  llvm::StringRef path = "/nonexistent-shardflow-fuzz/model.onnx";
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      shardflow::importONNXBuffer(&context, bytes, path, options);
  (void)module;
  return 0;
}
