//===- ONNXLocation.h - locations that name ONNX nodes ---------*- C++ -*-===//
//
// Every op the importer creates for an ONNX node carries the node in its
// location: its name (a NameLoc inside, which the runtime reports when a
// kernel fails) and, as the fused location's metadata, its op type and the
// model's opset. The location survives every pass (fusion fuses locations,
// it never drops them), so a diagnostic long after import still names the
// node the way the importer's own errors do:
//
//   loc(fused<{onnx.op_type = "ReduceSum", onnx.opset = 17 : i64}>
//       ["/model/ReduceSum"("model.onnx":0:0)])
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_SUPPORT_ONNXLOCATION_H
#define SHARDFLOW_SUPPORT_ONNXLOCATION_H

#include "mlir/IR/Location.h"

#include <string>

namespace shardflow {

/// The location of the ops imported from node `nodeName` of `file`.
mlir::Location getONNXNodeLoc(mlir::MLIRContext *context, llvm::StringRef nodeName,
                              llvm::StringRef opType, int64_t opset, llvm::StringRef file);

/// The first ONNX node (or initializer) name in `loc`, or "".
std::string getONNXNodeName(mlir::Location loc);

/// "node 'NAME' (OP_TYPE, opset N)", as the importer's errors name a node,
/// for the first node in `loc`; "" when `loc` names no node (an
/// initializer's NameLoc, a location of MLIR input).
std::string describeONNXNode(mlir::Location loc);

/// The name of the initializer (or pinned `--input-value` input) that an
/// op was imported from as a constant: the importer locates those at a bare
/// NameLoc of that name. "" for any other location.
llvm::StringRef getInitializerName(mlir::Location loc);

/// How messages name the place of an op: describeONNXNode(loc) for an
/// imported node, else the location as MLIR prints it (`loc("f.mlir":3:8)`).
std::string describeLocation(mlir::Location loc);

} // namespace shardflow

#endif // SHARDFLOW_SUPPORT_ONNXLOCATION_H
