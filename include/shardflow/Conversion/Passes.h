//===- Passes.h - conversions between Shardflow dialects ------*- C++ -*-===//

#ifndef SHARDFLOW_CONVERSION_PASSES_H
#define SHARDFLOW_CONVERSION_PASSES_H

#include "shardflow/Dialect/RT/IR/RTDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace shardflow {

#define GEN_PASS_DECL
#include "shardflow/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "shardflow/Conversion/Passes.h.inc"

} // namespace shardflow

#endif // SHARDFLOW_CONVERSION_PASSES_H
