//===- TensorProtoIO.h - ONNX TensorProto .pb files -----------*- C++ -*-===//
//
// Reads and writes single ONNX TensorProto messages (the `input_0.pb` /
// `output_0.pb` files of ONNX's backend tests) without libonnx or protobuf:
// a small bounds-checked walk of the protobuf wire format. Understood
// fields: dims (1, packed or not), data_type (2), float_data (4),
// int32_data (5), int64_data (7), name (8), raw_data (9), double_data (10),
// uint64_data (11). Other known fields (segment, doc_string, metadata) are
// skipped; string data and external data are refused with a RuntimeError
// that names the file.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_TENSORPROTOIO_H
#define SHARDFLOW_RUNTIME_TENSORPROTOIO_H

#include "shardflow/Runtime/Format/NpyIO.h"

#include <optional>
#include <string>

namespace shardflow::runtime {

/// The element type of an ONNX TensorProto.DataType value, or nullopt for
/// types the runtime does not have (string, complex, float8, 4-bit).
std::optional<DType> dtypeFromOnnx(int32_t onnxType);
/// The ONNX TensorProto.DataType value of an element type.
int32_t onnxFromDType(DType t);

/// Reads one TensorProto file. Throws RuntimeError naming the file. When
/// `name` is given it receives the tensor's name (empty if it has none).
HostTensor readTensorProto(const std::string &path, std::string *name = nullptr);
/// Parses a serialized TensorProto; `what` names it in errors.
HostTensor parseTensorProto(const std::string &data, const std::string &what,
                            std::string *name = nullptr);

/// Serializes `t` as a TensorProto with dims, data_type, name and raw_data.
std::string serializeTensorProto(const std::string &name, const Tensor &t);
void writeTensorProto(const std::string &path, const std::string &name, const Tensor &t);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_TENSORPROTOIO_H
