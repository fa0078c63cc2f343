//===- NNTraits.h - op facts declared in the nn ODS ------------*- C++ -*-===//
//
// The C++ side of the traits NNBase.td declares (see there for what each
// means), and the questions the passes ask with them. A pass asks
// `nn::isViewLike(op)`, never `isa<nn::ReshapeOp, ...>`: an op added to the
// dialect states its facts where it is defined.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_IR_NNTRAITS_H
#define SHARDFLOW_DIALECT_NN_IR_NNTRAITS_H

#include "mlir/IR/OpDefinition.h"

namespace shardflow::nn {

#define SHARDFLOW_NN_TRAIT(Name)                                                \
  template <typename ConcreteType>                                             \
  class Name : public mlir::OpTrait::TraitBase<ConcreteType, Name> {};
SHARDFLOW_NN_TRAIT(Elementwise)
SHARDFLOW_NN_TRAIT(ViewLike)
SHARDFLOW_NN_TRAIT(Additive)
SHARDFLOW_NN_TRAIT(LinearInEachOperand)
SHARDFLOW_NN_TRAIT(LinearInFirstOperand)
SHARDFLOW_NN_TRAIT(MadeFromAttributes)
SHARDFLOW_NN_TRAIT(KeepsColumnsApart)
SHARDFLOW_NN_TRAIT(Random)
#undef SHARDFLOW_NN_TRAIT

/// Draws from a random stream: never evaluated at compile time.
inline bool isRandom(mlir::Operation *op) { return op->hasTrait<Random>(); }

/// Each result element from the operands' elements at its position.
inline bool isElementwise(mlir::Operation *op) { return op->hasTrait<Elementwise>(); }

/// The result is the first operand reshaped: the same buffer serves both.
inline bool isViewLike(mlir::Operation *op) { return op->hasTrait<ViewLike>(); }

/// Whether the op is linear in operand `i` with the others fixed, so that a
/// partial sum in that operand stays one through it.
inline bool isLinearIn(mlir::Operation *op, unsigned i) {
  return op->hasTrait<Additive>() || op->hasTrait<LinearInEachOperand>() ||
         (i == 0 && op->hasTrait<LinearInFirstOperand>());
}

/// Whether several operands may be partial sums at once (a sum of them);
/// whole operands must then be added in 1/n parts.
inline bool isAdditive(mlir::Operation *op) { return op->hasTrait<Additive>(); }

/// Made whole on every rank from attributes alone.
inline bool isMadeFromAttributes(mlir::Operation *op) {
  return op->hasTrait<MadeFromAttributes>();
}

/// A column-parallel split stays useful through the op (Megatron's
/// tensor-parallel region): elementwise, or declared so.
inline bool keepsColumnsApart(mlir::Operation *op) {
  return isElementwise(op) || op->hasTrait<KeepsColumnsApart>();
}

} // namespace shardflow::nn

#endif // SHARDFLOW_DIALECT_NN_IR_NNTRAITS_H
