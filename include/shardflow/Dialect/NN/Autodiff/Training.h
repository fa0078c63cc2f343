//===- Training.h - what a training step trains ----------------*- C++ -*-===//
//
// nn-optimizer records on the module (`nn.training`) which initializers
// train, which are frozen (--freeze, --trainable) and which are held (no
// gradient reaches them: a rotary table); shard-opt --report prints it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_AUTODIFF_TRAINING_H
#define SHARDFLOW_DIALECT_NN_AUTODIFF_TRAINING_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace shardflow::nn {

/// Prints the training step's initializers by kind (nothing for a module
/// that is no training step).
void printTrainingReport(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace shardflow::nn

#endif // SHARDFLOW_DIALECT_NN_AUTODIFF_TRAINING_H
