//===- WeightFiles.h - the weight files an artifact points at --*- C++ -*-===//
//
// An artifact names where every weight's bytes lie; shard-run maps them.
// Two steps of writing an artifact deal with those files: weights that
// cannot be mapped where they are (varint-encoded, or in ONNX text) are
// written once to ARTIFACT.weights, and the CRC-32C of every slice each
// rank loads is recorded, for shard-run to check.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TARGET_WEIGHTFILES_H
#define SHARDFLOW_TARGET_WEIGHTFILES_H

#include "shardflow/Runtime/Format/Artifact.h"

#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringMap.h"

#include <string>
#include <vector>

namespace shardflow {

/// The weights of `artifact` that cannot be mapped in place (storage
/// "protobuf"), in buffer order.
std::vector<std::string> unmappableWeights(const runtime::Artifact &artifact);

/// Writes `bytes` (by weight name, as the runtime lays them out) of the
/// unmappable weights to `outputFile`.weights, 64-byte aligned, and points
/// the artifact's buffers at that file. Errors are reported at `loc`.
mlir::LogicalResult writeSideWeights(runtime::Artifact &artifact,
                                     const llvm::StringMap<std::string> &bytes,
                                     llvm::StringRef outputFile, mlir::Location loc);

/// Records in the artifact the CRC-32C of every weight slice each rank
/// loads, reading the weight files where shard-run will find them (the
/// model's folder, or next to `outputFile` for side weights).
mlir::LogicalResult addWeightChecksums(runtime::Artifact &artifact, llvm::StringRef outputFile,
                                       mlir::Location loc);

} // namespace shardflow

#endif // SHARDFLOW_TARGET_WEIGHTFILES_H
