//===- Training.h - what a training step trains ----------------*- C++ -*-===//
//
// nn-optimizer records on the module (`nn.training`) which initializers
// train, which are frozen (--freeze, --trainable) and which are held (no
// gradient reaches them: a rotary table); shard-opt --report prints it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_AUTODIFF_TRAINING_H
#define SHARDFLOW_DIALECT_NN_AUTODIFF_TRAINING_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace shardflow::nn {

/// Prints the training step's initializers by kind (nothing for a module
/// that is no training step).
void printTrainingReport(mlir::ModuleOp module, llvm::raw_ostream &os);

/// The training step counter `fn` reads: its nn.weight "optimizer.step"
/// (f32 scalar, storage zeros: the steps done before this one), made at
/// the top of `fn` when it has none yet. nn-optimizer advances it;
/// nn-keyed-dropout keys its masks by it.
mlir::Value stepCounter(mlir::func::FuncOp fn);

/// The sum of every element of `x`, as a scalar of its element type (x
/// itself when it is one).
mlir::Value sumAll(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);

/// Initializer `name` of `fn` as one state tensor: its nn.weight, or, for
/// an initializer embedded in the model as `nn.constant`s (a bias, a norm's
/// scale), an nn.weight of storage `protobuf` that replaces them (state a
/// step writes, not a constant). Null with a diagnostic when `fn` reads no
/// such initializer or reads it with two types.
mlir::FailureOr<mlir::Value> initializerAsWeight(mlir::func::FuncOp fn, llvm::StringRef name);

} // namespace shardflow::nn

#endif // SHARDFLOW_DIALECT_NN_AUTODIFF_TRAINING_H
