//===- CudaDeviceDisabled.cpp - the CUDA device in a build without CUDA ----===//
//
// Built instead of the CUDA device when SHARDFLOW_ENABLE_CUDA is off (no
// CUDA headers at build time): shard-run still builds and runs CPU
// artifacts, and refuses a CUDA one with a message that says why.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Device/CUDA/CudaDevice.h"

using namespace shardflow::runtime;

bool shardflow::runtime::cudaSupportBuiltIn() { return false; }

std::vector<std::string> shardflow::runtime::cudaDeviceKernelNames() { return {}; }

std::unique_ptr<Device> shardflow::runtime::createCudaDevice(const DeviceSettings &,
                                                             const CudaOptions &, Communicator &) {
  throw RuntimeError("this artifact targets 'cuda', but this shard-run was built without CUDA "
                     "support (rebuild it with -DSHARDFLOW_ENABLE_CUDA=ON where the CUDA "
                     "toolkit's headers are installed)");
}
