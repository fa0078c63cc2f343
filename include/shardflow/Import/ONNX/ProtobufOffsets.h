//===- ProtobufOffsets.h - where initializer bytes lie in a .onnx -*- C++ -*-===//
//
// The runtime maps weights at known file offsets instead of parsing
// protobuf. For initializers embedded in the model file this walks the
// protobuf wire format of ModelProto -> graph -> initializer and records
// where each tensor's little-endian payload starts.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_IMPORT_ONNX_PROTOBUFOFFSETS_H
#define SHARDFLOW_IMPORT_ONNX_PROTOBUFOFFSETS_H

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace shardflow {

/// A byte range inside the model file.
struct PayloadRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// Maps initializer name -> the range of its raw_data, or of its packed
/// float_data / double_data (which are little-endian IEEE values too).
/// Tensors stored otherwise (varints, external data) are absent. A malformed
/// buffer yields whatever was found before the malformation.
llvm::StringMap<PayloadRange> findInitializerPayloads(llvm::StringRef model);

} // namespace shardflow

#endif // SHARDFLOW_IMPORT_ONNX_PROTOBUFOFFSETS_H
