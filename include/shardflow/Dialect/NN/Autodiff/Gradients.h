//===- Gradients.h - gradient rules of nn ops -----------------*- C++ -*-===//
//
// Reverse-mode rules, one per nn op, keyed by op name like the sharding
// rules: given the cotangents of an op's results, a rule builds the
// cotangents of the operands it is asked for, as nn ops again (so the
// backward is propagated, resharded and partitioned like the forward).
// Each operand's cotangent is built on its own: a weight's gradient never
// waits for the input's (zero-bubble schedules run them apart).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_AUTODIFF_GRADIENTS_H
#define SHARDFLOW_DIALECT_NN_AUTODIFF_GRADIENTS_H

#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <string>

namespace shardflow::nn {

/// A unit attribute on an op whose results nn-differentiate gives no
/// cotangent, because the differentiated function does not depend on them
/// (nn-append-loss marks the row maximum its log-sum-exp subtracts for
/// range only: the exact cotangent through it is zero, and computing it
/// would cost a max's backward over the logits to add rounding noise).
inline constexpr llvm::StringLiteral kStopGradientAttr = "nn.stop_gradient";

/// What a rule reads and writes.
class GradientBuilder {
public:
  GradientBuilder(mlir::OpBuilder &b, mlir::Operation *op, llvm::ArrayRef<mlir::Value> resultGrads,
                  llvm::ArrayRef<bool> wanted)
      : b(b), loc(op->getLoc()), op(op), resultGrads(resultGrads), wanted(wanted),
        operandGrads(op->getNumOperands()), held(op->getNumOperands(), false) {}

  mlir::OpBuilder &b;
  mlir::Location loc;
  mlir::Operation *op;
  /// The fused backward ops to write, by kind ("attention": nn.attention_grad,
  /// "gelu": nn.gelu_grad, "normalization": nn.normalization_grad and
  /// nn.normalization_scale_grad, "cross-entropy":
  /// nn.softmax_cross_entropy_grad), where the target has kernels for them.
  llvm::ArrayRef<std::string> fusedKinds;
  bool fuses(llvm::StringRef kind) const { return llvm::is_contained(fusedKinds, kind); }

  /// The cotangent of result `i` (zeros when nothing reads it).
  mlir::Value grad(unsigned i = 0);
  /// Whether operand `i`'s cotangent is asked for.
  bool wants(unsigned i) const { return i < wanted.size() && wanted[i]; }
  /// Sets operand `i`'s cotangent; it must have the operand's type.
  void set(unsigned i, mlir::Value g);
  /// Operand `i` is a constant of the op by convention (a rotary table): no
  /// cotangent flows to it, and what reaches the loss only through it gets
  /// none.
  void setNone(unsigned i) { held[i] = true; }
  mlir::Value operandGrad(unsigned i) const { return operandGrads[i]; }
  bool isHeld(unsigned i) const { return held[i]; }

  // Helpers for rules.
  /// `g` summed over the dims along which `like`'s type was broadcast to
  /// `g`'s (numpy rules), in `like`'s shape.
  mlir::Value unbroadcast(mlir::Value g, mlir::Type like);
  /// A rank-0 constant of `like`'s element type.
  mlir::Value scalar(mlir::Value like, double v);
  template <typename OpTy>
  mlir::Value make(mlir::ValueRange operands, llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    return OpTy::create(b, loc, operands, attrs)->getResult(0);
  }
  mlir::Value reshape(mlir::Value v, mlir::Type to);
  mlir::Value expand(mlir::Value v, mlir::Type to);
  /// reduce_sum over `axes` with keepdims.
  mlir::Value sumKeep(mlir::Value v, llvm::ArrayRef<int64_t> axes);
  /// nn.slice with every attribute given (default-valued attributes are
  /// not filled in before type inference).
  mlir::Value slice(mlir::Value v, llvm::ArrayRef<int64_t> starts, llvm::ArrayRef<int64_t> ends,
                    llvm::ArrayRef<int64_t> axes, llvm::ArrayRef<int64_t> steps);
  /// nn.pad with zeros (`pads`: the begin pads of every dim, then the end
  /// pads; negative ones crop).
  mlir::Value padZeros(mlir::Value v, llvm::ArrayRef<int64_t> pads);

private:
  llvm::ArrayRef<mlir::Value> resultGrads;
  llvm::ArrayRef<bool> wanted;
  llvm::SmallVector<mlir::Value> operandGrads;
  llvm::SmallVector<bool> held;
};

using GradientFn = mlir::LogicalResult (*)(GradientBuilder &);

/// An op's entry: a rule, or why it has none. Only ops without float
/// results (comparisons, shapes, indices) or whose float results are
/// piecewise constant (floor, ceil, round) are non-differentiable.
struct GradientRule {
  GradientFn fn = nullptr;
  /// Non-differentiable: the reason ("no float result", "piecewise
  /// constant").
  const char *nonDifferentiable = nullptr;
};

/// The entry of op `name` ("nn.add"), or null when it has none yet.
const GradientRule *lookupGradientRule(llvm::StringRef name);

/// nn.softmax_cross_entropy as the ops it stands for (its gradient rule
/// needs it whole; sharding and the kernels take the parts): valid *
/// (lse - sum(where(onehot, logits, 0))). Returns the replacement of its
/// result.
mlir::Value expandSoftmaxCrossEntropy(mlir::OpBuilder &b, SoftmaxCrossEntropyOp op);

/// Every entry, for the completeness test.
void forEachGradientRule(llvm::function_ref<void(llvm::StringRef, const GradientRule &)> fn);

} // namespace shardflow::nn

#endif // SHARDFLOW_DIALECT_NN_AUTODIFF_GRADIENTS_H
