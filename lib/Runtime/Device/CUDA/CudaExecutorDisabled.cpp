//===- CudaExecutorDisabled.cpp - CudaExecutor in a build without CUDA -----===//
//
// Built instead of CudaExecutor.cpp when SHARDFLOW_ENABLE_CUDA is off (no
// CUDA headers at build time): shard-run still builds and runs CPU
// artifacts, and refuses a CUDA one with a message that says why.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Device/CUDA/CudaExecutor.h"

using namespace shardflow::runtime;

class CudaExecutor::Impl {};

bool shardflow::runtime::cudaSupportBuiltIn() { return false; }

CudaExecutor::CudaExecutor(Artifact artifact, std::string, Communicator *, bool, CudaOptions) {
  throw RuntimeError("this artifact targets '" + artifact.target +
                     "', but this shard-run was built without CUDA support (rebuild it with "
                     "-DSHARDFLOW_ENABLE_CUDA=ON where the CUDA toolkit's headers are "
                     "installed)");
}

CudaExecutor::~CudaExecutor() = default;

std::vector<std::pair<std::string, Tensor>>
CudaExecutor::run(const std::map<std::string, HostTensor> &) {
  throw RuntimeError("this shard-run was built without CUDA support");
}

const Artifact &CudaExecutor::artifact() const {
  throw RuntimeError("this shard-run was built without CUDA support");
}

size_t CudaExecutor::mappedWeightBytes() const { return 0; }

double CudaExecutor::lastDeviceSeconds() const { return 0; }

double CudaExecutor::lastDownloadSeconds() const { return 0; }

size_t CudaExecutor::outputBytes() const { return 0; }

bool CudaExecutor::lastDownloadPinned() const { return false; }

const std::vector<double> &CudaExecutor::instructionSeconds() const {
  static const std::vector<double> none;
  return none;
}
