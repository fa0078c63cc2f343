//===- Matching.h - helpers of the raising passes' matchers ---*- C++ -*-===//
//
// What the raising passes (nn-raise-normalization, nn-raise-gelu,
// nn-raise-rotate-half) ask of the ops they match:
// scalar constants, sole readers, the other operand of a binary op.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_DIALECT_NN_TRANSFORMS_MATCHING_H
#define SHARDFLOW_LIB_DIALECT_NN_TRANSFORMS_MATCHING_H

#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include <optional>

namespace shardflow::nn::matching {

inline mlir::RankedTensorType typeOf(mlir::Value v) {
  return mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
}

/// The value of a float constant with one distinct element (a scalar, or a
/// splat).
inline std::optional<double> scalarOf(mlir::Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = mlir::dyn_cast<mlir::DenseFPElementsAttr>(c.getValue());
  if (!dense || dense.getNumElements() == 0 || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<llvm::APFloat>().convertToDouble();
}

/// The one reader of `v`, if it has exactly one use.
inline mlir::Operation *soleUser(mlir::Value v) {
  if (!v.hasOneUse())
    return nullptr;
  return *v.getUsers().begin();
}

/// The other operand of a binary op whose operand `v` is.
template <typename Op> mlir::Value otherOperand(Op op, mlir::Value v) {
  return op.getLhs() == v ? op.getRhs() : op.getLhs();
}

} // namespace shardflow::nn::matching

#endif // SHARDFLOW_LIB_DIALECT_NN_TRANSFORMS_MATCHING_H
