//===- DevicePlanner.h - planner internals for tests and checks -*- C++ -*-===//
//
// Private to the CUDA kernels, their unit tests and tools/cuda-kernel-check:
// the attention planner with its path forced, so that the GPU check can run
// the SIMT kernel and the tensor-core kernel on the same inputs.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CUDA_DEVICEPLANNER_H
#define SHARDFLOW_RUNTIME_KERNELS_CUDA_DEVICEPLANNER_H

#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"

namespace shardflow::runtime::cuda {

std::vector<DeviceLaunch> planAttention(std::string_view kernel, const std::vector<Tensor> &inputs,
                                        const std::vector<Tensor> &outputs, const Params &params,
                                        AttentionPath path);

} // namespace shardflow::runtime::cuda

#endif // SHARDFLOW_RUNTIME_KERNELS_CUDA_DEVICEPLANNER_H
