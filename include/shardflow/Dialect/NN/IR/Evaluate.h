//===- Evaluate.h - nn ops on constants, by the CPU kernels ---*- C++ -*-===//
//
// The compile-time evaluator: an nn op whose operands are all constants is
// computed by the CPU runtime's kernel for it, so that what a model derives
// from shapes and constants alone (shape arithmetic, causal masks, rotary
// tables, position ids) becomes a constant with exactly the semantics the
// program would have at run time. There is no second statement of an op's
// semantics for folding. The nn dialect's fold interface calls it, so the
// importer (which folds every op as it builds it) and canonicalization
// both use it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_IR_EVALUATE_H
#define SHARDFLOW_DIALECT_NN_IR_EVALUATE_H

#include "shardflow/Runtime/Format/Kernel.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"

#include <optional>
#include <vector>

namespace shardflow::nn {

/// The size policy: a result of more bytes than this is not folded; the
/// ops that make it stay in the program and compute it at run time (from
/// constants, once per run). 1 MiB holds a causal mask of 1,024 positions
/// or a float32 rotary table of 4,096 positions by 64.
inline constexpr int64_t kMaxFoldedBytes = int64_t(1) << 20;

/// A dense constant's bytes as the runtime lays them out: little-endian,
/// bools one byte each, splats expanded.
std::vector<uint8_t> getRuntimeBytes(mlir::DenseElementsAttr attr);

/// The dense constant of `type` holding `bytes` in the runtime's layout.
mlir::DenseElementsAttr getFromRuntimeBytes(mlir::RankedTensorType type,
                                            llvm::ArrayRef<uint8_t> bytes);

/// The runtime's element type for `type`, if it has one.
std::optional<runtime::DType> getRuntimeDType(mlir::Type type);

/// Sets kernel parameter `name` from an op attribute, as an artifact
/// writes it; false for a kind of attribute no parameter has.
bool setKernelParam(runtime::Params &params, llvm::StringRef name,
                    mlir::Attribute value);

/// Computes `op`'s results from `operands` (one attribute per operand, as
/// fold hooks receive them) with the CPU runtime's kernel of the same
/// name. Fails, with no diagnostic, when an operand is not a dense
/// constant, the op has no CPU kernel or draws random numbers, a result
/// exceeds kMaxFoldedBytes, or the kernel reports an error (an index out of
/// range, say, which the program then reports at run time).
mlir::LogicalResult evaluate(mlir::Operation *op,
                             llvm::ArrayRef<mlir::Attribute> operands,
                             llvm::SmallVectorImpl<mlir::OpFoldResult> &results,
                             int64_t maxBytes = kMaxFoldedBytes);

/// The value of `v` when it is computed from constants alone -- nn ops all
/// the way up, no function argument, weight or random op -- by the same
/// kernels, without changing the IR; null otherwise, or when a value on the
/// way is over `maxBytes`. For passes that inspect a value the size policy
/// kept from folding (raise-attention reading a long causal mask).
mlir::DenseElementsAttr evaluateValue(mlir::Value v,
                                      int64_t maxBytes = kMaxFoldedBytes);

} // namespace shardflow::nn

#endif // SHARDFLOW_DIALECT_NN_IR_EVALUATE_H
