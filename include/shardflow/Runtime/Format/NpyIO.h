//===- NpyIO.h - numpy .npy/.npz and ONNX TensorProto files ---*- C++ -*-===//
//
// Tensors in and out of shard-run. .npy follows numpy's format
// specification (versions 1-3, C order, little-endian); .npz is a zip of
// .npy members as numpy.savez writes them (stored, not compressed).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_NPYIO_H
#define SHARDFLOW_RUNTIME_NPYIO_H

#include "shardflow/Runtime/Format/Kernel.h"

#include <string>
#include <vector>

namespace shardflow::runtime {

/// A tensor that owns its bytes.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  Tensor view() { return Tensor{bytes.data(), dtype, shape}; }
};

/// A whole file's bytes; throws RuntimeError naming the file.
std::string readWholeFile(const std::string &path);

/// Reads one .npy file. Throws RuntimeError naming the file.
HostTensor readNpy(const std::string &path);
HostTensor parseNpy(const std::string &data, const std::string &what);
/// Reads every member of an .npz file, by name (without ".npy").
std::vector<std::pair<std::string, HostTensor>> readNpz(const std::string &path);
/// The members of the .npz bytes `zip`; `what` names it in errors.
std::vector<std::pair<std::string, HostTensor>> parseNpz(const std::string &zip,
                                                         const std::string &what);

std::string serializeNpy(const Tensor &t);
void writeNpy(const std::string &path, const Tensor &t);
/// Writes an .npz (stored zip) with one member per named tensor.
void writeNpz(const std::string &path,
              const std::vector<std::pair<std::string, Tensor>> &tensors);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_NPYIO_H
