//===- ONNXImporter.h - ONNX models into the nn dialect -------*- C++ -*-===//
//
// Imports an ONNX model (binary protobuf with optional external data, or
// ONNX text) into a module holding one `func.func @main` of nn ops. Shapes
// come out static: symbolic input dims are pinned by the caller and the
// shape arithmetic exporters emit is folded on the way in. Errors are
// reported as diagnostics that name the ONNX node (name, op type, opset).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_IMPORT_ONNX_ONNXIMPORTER_H
#define SHARDFLOW_IMPORT_ONNX_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace shardflow {

struct ONNXImportOptions {
  /// Shapes that replace the declared shapes of graph inputs, by name.
  llvm::StringMap<llvm::SmallVector<int64_t>> inputShapes;
  /// Graph inputs pinned to a value (a .npy or TensorProto .pb file), by
  /// name: they become constants, so inputs that decide shapes (axes, k,
  /// split sizes) fold like initializers.
  llvm::StringMap<std::string> inputValueFiles;
  /// Initializers of at most this many bytes become nn.constant; larger ones
  /// become nn.weight references.
  int64_t embedLimitBytes = 1024;
  /// Training-mode BatchNormalization blends the batch's statistics into
  /// its running mean and variance: with this set (a training step), each
  /// running statistic held by an initializer also becomes a result of
  /// @main named `running:<initializer>` and marked
  /// `nn.running_statistic = "<initializer>"`, which nn-optimizer keeps as
  /// the initializer's new state.
  bool runningStatistics = false;
  /// A training step: a float initializer (of more than one element) that
  /// reaches graph-input data through data movement only (Expand, Gather
  /// with constant indices, Slice, Reshape, Concat, Where's values, ...: a
  /// ViT's class token expanded to the batch, a T5 relative position bias
  /// gathered by constant buckets) stays a weight whatever its size, so that those ops
  /// do not fold it into a constant: it trains, as the PyTorch parameter
  /// does. One that meets only constants through arithmetic first (a
  /// rotary frequency table: a buffer) folds as before.
  bool keepMovedInitializers = false;
  /// Pipeline micro-batches: dimension 0 (the batch) of every graph input
  /// of rank 1 or more is divided by this, so that the program is the one
  /// a stage runs per micro-batch.
  int64_t batchDivisor = 1;
};

/// Parses one `--input-value` value, `name=FILE.npy` or `name=FILE.pb`.
/// Returns an error message, or an empty string.
std::string parseInputValueSpec(llvm::StringRef spec, ONNXImportOptions &options);

/// Parses one `--input-shape` value, `name=d0,d1,...` (also `name=d0xd1`),
/// into `options`. Returns an error message, or an empty string.
std::string parseInputShapeSpec(llvm::StringRef spec, ONNXImportOptions &options);

/// The supported default-domain opset range.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 23;

/// Imports a `.onnx` (binary) or `.onnxtxt` (ONNX text) file. The format is
/// chosen by content: text starts with '<' after optional whitespace or
/// comments. Returns null after emitting diagnostics on failure.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXFile(mlir::MLIRContext *context, llvm::StringRef path,
               const ONNXImportOptions &options);

/// Imports from bytes already in memory; `path` names the model for
/// diagnostics and locates external data files (its directory).
mlir::OwningOpRef<mlir::ModuleOp>
importONNXBuffer(mlir::MLIRContext *context, llvm::StringRef bytes,
                 llvm::StringRef path, const ONNXImportOptions &options);

/// The bytes of the named initializers of a model file as the runtime lays
/// them out (little-endian, bools one byte each): for weights that cannot be
/// mapped in place (storage "protobuf"), which the compiler writes to a file
/// next to the artifact once.
mlir::LogicalResult readInitializerBytes(mlir::MLIRContext *context,
                                         llvm::StringRef path,
                                         llvm::ArrayRef<std::string> names,
                                         llvm::StringMap<std::string> &out);

/// Initializers that hold the same tensor as another (a tied parameter that
/// an exporter wrote twice: TorchScript writes a language model's head as
/// a transposed copy of its token embedding), among the float
/// initializers `names`: one "COPY=SOURCE" (same shape and bytes) or
/// "COPY=SOURCE^T" (a 2-D copy holding the source transposed) per copy,
/// SOURCE the first of its group in `names`' order. Reads each
/// initializer's bytes once.
mlir::FailureOr<std::vector<std::string>>
findTiedInitializers(mlir::MLIRContext *context, llvm::StringRef path,
                     llvm::ArrayRef<std::string> names);

/// Prints the ops the importer supports, per domain (the default domain,
/// then com.microsoft), each with the first version of its domain that has
/// it: the handler tables, which are the single list.
void printSupportedOps(llvm::raw_ostream &os);

/// Registers the dialects the importer creates ops of.
void registerImportDialects(mlir::MLIRContext &context);

} // namespace shardflow

#endif // SHARDFLOW_IMPORT_ONNX_ONNXIMPORTER_H
