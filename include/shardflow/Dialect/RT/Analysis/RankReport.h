//===- RankReport.h - what each rank holds and sends -----------*- C++ -*-===//
//
// shard-opt --report: for a compiled per-rank rt program, the parameter
// bytes each rank holds (split and whole weights, zero padding), its peak
// activation bytes, and every collective with its bytes and what a rank
// sends for it. The planner reads the same figures.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_RT_ANALYSIS_RANKREPORT_H
#define SHARDFLOW_DIALECT_RT_ANALYSIS_RANKREPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace shardflow::rt {

/// Prints the report of every function of `module` (rt, memory planned).
void printRankReport(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace shardflow::rt

#endif // SHARDFLOW_DIALECT_RT_ANALYSIS_RANKREPORT_H
