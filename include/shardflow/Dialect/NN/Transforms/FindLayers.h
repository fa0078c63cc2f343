//===- FindLayers.h - the repeated blocks of a model -----------*- C++ -*-===//
//
// The layer structure of an nn program: the runs of structurally identical
// blocks (a transformer's layers), each reading weights of its own, with the
// prologue before them (embeddings) and the epilogue after (final norm,
// head, pooler). Recomputation, ZeRO-3 prefetching and pipeline stages cut
// along these blocks; nn-find-layers records what it finds on the module
// (`nn.layers`) and shard-opt --report prints it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_TRANSFORMS_FINDLAYERS_H
#define SHARDFLOW_DIALECT_NN_TRANSFORMS_FINDLAYERS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace shardflow::nn {

/// One block of a stack: its ops in program order, and the initializers it
/// alone reads, by name (names are for printing: the analysis never looks
/// at them).
struct LayerBlock {
  llvm::SmallVector<mlir::Operation *> ops;
  llvm::SmallVector<std::string> weights;
};

/// K >= 2 consecutive blocks of the same ops (names, attributes other than
/// names and locations, types) wired the same way, block k+1 reading what
/// block k computes.
struct LayerStack {
  std::vector<LayerBlock> blocks;
  /// Per boundary k (between blocks k and k+1): the values computed in
  /// blocks 0..k and read after it, by blocks k+1.. (the residual stream).
  llvm::SmallVector<llvm::SmallVector<mlir::Value>> carried;
  /// Values computed before the stack (or arguments) that every block
  /// reads: an attention mask, rotary tables, an encoder's output. Not
  /// scalar constants.
  llvm::SmallVector<mlir::Value> shared;
};

/// The stacks in program order (usually one; an encoder-decoder has two),
/// the ops before the first (prologue), between consecutive stacks, and
/// after the last (epilogue). Every op of the function but its terminator
/// is in exactly one of them.
struct LayerStructure {
  std::vector<LayerStack> stacks;
  llvm::SmallVector<mlir::Operation *> prologue, epilogue;
  llvm::SmallVector<llvm::SmallVector<mlir::Operation *>> between;
};

/// Finds the repeated blocks of `fn`'s body; failure when it has no run of
/// two or more (a one-layer model, a program without layers).
mlir::FailureOr<LayerStructure> findLayers(mlir::func::FuncOp fn);

/// Prints the `nn.layers` that nn-find-layers recorded on `module`, one
/// line (nothing for a module without it).
void printLayerReport(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace shardflow::nn

#endif // SHARDFLOW_DIALECT_NN_TRANSFORMS_FINDLAYERS_H
