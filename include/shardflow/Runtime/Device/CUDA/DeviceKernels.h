//===- DeviceKernels.h - the runtime's hand-written CUDA kernels -*- C++ -*-===//
//
// The CUDA device runs nn kernels (attention, data movement) on the GPU
// through this interface. Planning is plain host code with no CUDA API
// calls: it turns one instruction's tensors and parameters into launches of
// functions in an embedded fatbin, which the device loads once with the
// driver API. Every device function takes exactly one by-value struct, so a
// launch's `argument` bytes are that struct and the device passes
// kernelParams = { argument.data() }.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_DEVICEKERNELS_H
#define SHARDFLOW_RUNTIME_DEVICEKERNELS_H

#include "shardflow/Runtime/Format/Kernel.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardflow::runtime::cuda {

/// One kernel launch: the function's name in the fatbin (unmangled,
/// `extern "C"`), its launch geometry, dynamic shared memory in bytes, and
/// the bytes of its single by-value argument struct. `sharedBytes` may
/// exceed the default 48 KiB (attention: up to about 146 KiB for head size
/// 256): raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first.
struct DeviceLaunch {
  std::string function;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned sharedBytes = 0;
  std::vector<uint8_t> argument;
  /// Where in `argument` the kernel takes a pointer to a status word (two
  /// int64: flag, offending index) for indices it finds out of range, or
  /// -1. The device-kernel planner leaves it null; the device points it at its own.
  int statusOffset = -1;
};

/// Whether `kernel` (an nn op name as in rt.kernel / the artifact's
/// `kernel NAME` lines, or "local_slice") has a device implementation here.
bool hasDeviceKernel(std::string_view kernel);
/// Every name hasDeviceKernel accepts.
std::vector<std::string_view> deviceKernelNames();

/// Which attention kernel runs (shard-run --attention-kernel).
enum class AttentionPath {
  Auto, // tensor cores where they apply, else SIMT
  Simt, // always the SIMT kernel
  Mma,  // the tensor-core kernel; an error where it does not apply
  Mma2, // the tensor-core kernel with two query tiles per warp (D = 64)
};

/// The launches that implement one instruction, to run in order on one
/// stream. Tensors' `data` are device pointers (shapes, dtypes as in
/// Kernel.h). Throws RuntimeError naming the kernel for unsupported cases
/// (dtype, rank, attribute). `rank` is this process's rank (for
/// local_slice, whose params hold one start list per rank). An empty list
/// means there is nothing to do (e.g. an empty output).
std::vector<DeviceLaunch> planDeviceKernel(std::string_view kernel,
                                           const std::vector<Tensor> &inputs,
                                           const std::vector<Tensor> &outputs,
                                           const Params &params, int rank,
                                           AttentionPath attention = AttentionPath::Auto);

/// The embedded fatbin holding every kernel (sm_80 and sm_90 SASS +
/// compute_80 PTX); nullptr/0 when built without nvcc.
const unsigned char *deviceKernelsFatbin();
size_t deviceKernelsFatbinSize();

} // namespace shardflow::runtime::cuda

#endif // SHARDFLOW_RUNTIME_DEVICEKERNELS_H
