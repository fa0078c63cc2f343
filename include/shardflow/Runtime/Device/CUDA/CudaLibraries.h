//===- CudaLibraries.h - the CUDA libraries, loaded at run time -*- C++ -*-===//
//
// shard-run links no CUDA library: the same binary runs CPU artifacts on a
// machine without a GPU or a driver, and a GPU machine needs only the
// driver, cuBLASLt and NCCL at run time (no toolkit to build against them;
// the headers give the types). The first CUDA artifact loads them with
// dlopen and resolves every function listed below once:
//
//   libcuda.so.1       the driver API (no CUDA runtime: cuBLASLt and NCCL
//                      use their own, and share the device's primary context)
//   libcublasLt.so.13  (else libcublasLt.so) GEMMs
//   libnccl.so.2       collectives
//
// A library that cannot be loaded, or lacks a function, is a RuntimeError
// naming it and dlerror()'s reason, raised again on every later use.
//
// The function pointers are members named as the header's functions (the
// versioned names cuda.h maps them to, e.g. cuMemAlloc -> cuMemAlloc_v2,
// are what gets resolved), so calls read like plain driver calls:
// `driver().cuMemAlloc(&ptr, bytes)`.
//
// Only compiled with SHARDFLOW_ENABLE_CUDA (it needs cuda.h, cublasLt.h and
// nccl.h for the types).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CUDALIBRARIES_H
#define SHARDFLOW_RUNTIME_CUDALIBRARIES_H

#include <cublasLt.h>
#include <cuda.h>
#include <nccl.h>

#include <string>

namespace shardflow::runtime::cuda {

// The driver functions shard-run calls. cuda.h #defines many of these to
// versioned names (cuMemAlloc_v2); the macros expand in both the member's
// name and the symbol looked up, so the two always agree.
#define SHARDFLOW_CUDA_DRIVER_FUNCTIONS(X)                                     \
  X(cuInit)                                                                    \
  X(cuDriverGetVersion)                                                        \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuDeviceGetCount)                                                          \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetAttribute)                                                      \
  X(cuDeviceGetName)                                                           \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuDevicePrimaryCtxRelease)                                                 \
  X(cuCtxSetCurrent)                                                           \
  X(cuCtxSynchronize)                                                          \
  X(cuMemGetInfo)                                                              \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemHostAlloc)                                                            \
  X(cuMemFreeHost)                                                             \
  X(cuMemcpyHtoD)                                                              \
  X(cuMemcpyDtoH)                                                              \
  X(cuMemcpyHtoDAsync)                                                         \
  X(cuMemcpyDtoDAsync)                                                         \
  X(cuMemcpy2DAsync)                                                           \
  X(cuMemsetD8Async)                                                           \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamWaitEvent)                                                         \
  X(cuEventCreate)                                                             \
  X(cuEventDestroy)                                                            \
  X(cuEventRecord)                                                             \
  X(cuEventQuery)                                                              \
  X(cuEventElapsedTime)                                                        \
  X(cuModuleLoadData)                                                          \
  X(cuModuleLoadDataEx)                                                        \
  X(cuModuleGetFunction)                                                       \
  X(cuModuleUnload)                                                            \
  X(cuFuncSetAttribute)                                                        \
  X(cuLaunchKernel)                                                            \
  X(cuStreamBeginCapture)                                                      \
  X(cuStreamEndCapture)                                                        \
  X(cuGraphInstantiate)                                                        \
  X(cuGraphLaunch)                                                             \
  X(cuGraphExecDestroy)                                                        \
  X(cuGraphDestroy)

#define SHARDFLOW_CUBLASLT_FUNCTIONS(X)                                        \
  X(cublasLtGetVersion)                                                        \
  X(cublasLtGetStatusName)                                                     \
  X(cublasLtGetStatusString)                                                   \
  X(cublasLtCreate)                                                            \
  X(cublasLtDestroy)                                                           \
  X(cublasLtMatmulDescCreate)                                                  \
  X(cublasLtMatmulDescDestroy)                                                 \
  X(cublasLtMatmulDescSetAttribute)                                            \
  X(cublasLtMatrixLayoutCreate)                                                \
  X(cublasLtMatrixLayoutDestroy)                                               \
  X(cublasLtMatrixLayoutSetAttribute)                                          \
  X(cublasLtMatmulPreferenceCreate)                                            \
  X(cublasLtMatmulPreferenceDestroy)                                           \
  X(cublasLtMatmulPreferenceSetAttribute)                                      \
  X(cublasLtMatmulAlgoGetHeuristic)                                            \
  X(cublasLtMatmul)

// NCCL 2.14 or newer has all of these (bf16 since 2.10, ncclGetLastError
// since 2.13, nonblocking communicators and ncclCommFinalize since 2.14).
#define SHARDFLOW_NCCL_FUNCTIONS(X)                                            \
  X(ncclGetVersion)                                                            \
  X(ncclGetErrorString)                                                        \
  X(ncclGetLastError)                                                          \
  X(ncclGetUniqueId)                                                           \
  X(ncclCommInitRankConfig)                                                    \
  X(ncclCommFinalize)                                                          \
  X(ncclCommDestroy)                                                           \
  X(ncclCommAbort)                                                             \
  X(ncclCommGetAsyncError)                                                     \
  X(ncclGroupStart)                                                            \
  X(ncclGroupEnd)                                                              \
  X(ncclAllReduce)                                                             \
  X(ncclBroadcast)                                                             \
  X(ncclAllGather)                                                             \
  X(ncclReduceScatter)                                                         \
  X(ncclSend)                                                                  \
  X(ncclRecv)

#define SHARDFLOW_DECLARE_FUNCTION_POINTER(fn) decltype(&::fn) fn = nullptr;

struct CudaDriver {
  SHARDFLOW_CUDA_DRIVER_FUNCTIONS(SHARDFLOW_DECLARE_FUNCTION_POINTER)
  int version = 0; // cuDriverGetVersion, e.g. 13000
};

struct CublasLt {
  SHARDFLOW_CUBLASLT_FUNCTIONS(SHARDFLOW_DECLARE_FUNCTION_POINTER)
  std::string library; // the file name that was loaded
};

struct Nccl {
  SHARDFLOW_NCCL_FUNCTIONS(SHARDFLOW_DECLARE_FUNCTION_POINTER)
  int version = 0; // ncclGetVersion, e.g. 22809
};

#undef SHARDFLOW_DECLARE_FUNCTION_POINTER

/// The driver, loaded and initialized (cuInit) on first use. Throws
/// RuntimeError when libcuda.so.1 is missing ("is the NVIDIA driver
/// installed?"), lacks a function or fails to initialize.
const CudaDriver &driver();
/// cuBLASLt, loaded on first use; its major version must be the one
/// shard-run was built against (the enums it passes are that version's).
const CublasLt &cublasLt();
/// NCCL, loaded on first use (2.14 or newer).
const Nccl &nccl();

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)": names and texts of the
/// libraries' status codes, for messages.
std::string describe(CUresult status);
std::string describe(cublasStatus_t status);
std::string describe(ncclResult_t status);

} // namespace shardflow::runtime::cuda

#endif // SHARDFLOW_RUNTIME_CUDALIBRARIES_H
