//===- EmulatedKernels.h - the CUDA kernels run on the host, by name -*- C++ -*-===//
//
// The device kernels of this folder compiled as host code (HostEmulation.h)
// and looked up by the names the device-kernel planner gives its launches, so a tool can
// run a planned DeviceLaunch on the CPU exactly as the driver would run it
// on a GPU: tools/cuda-kernel-check --emulate.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CUDA_EMULATEDKERNELS_H
#define SHARDFLOW_RUNTIME_KERNELS_CUDA_EMULATEDKERNELS_H

#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"

namespace shardflow::runtime::cuda {

/// Runs `launch` (a planned device kernel: its function name, geometry,
/// dynamic shared memory and argument bytes) with every pointer in its
/// argument a host pointer. Throws RuntimeError for an unknown function, a
/// launch geometry the emulation does not take (y or z extents), or a
/// misuse the emulation detects (threads waiting at different barriers,
/// misaligned ldmatrix or cp.async addresses).
void runEmulated(const DeviceLaunch &launch);

/// The size of the argument struct of the emulated kernel `function`, or 0
/// when there is no such kernel (a launch through the driver API passes
/// the argument by address, without its size).
size_t emulatedArgumentBytes(const std::string &function);

} // namespace shardflow::runtime::cuda

#endif // SHARDFLOW_RUNTIME_KERNELS_CUDA_EMULATEDKERNELS_H
