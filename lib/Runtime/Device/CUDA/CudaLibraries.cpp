//===- CudaLibraries.cpp - dlopen the driver, cuBLASLt and NCCL ------------===//
//
// Each library is loaded and resolved once, under std::call_once; a failure
// is remembered and reported again on every later use, so the first error
// message is the one every caller sees.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Device/CUDA/CudaLibraries.h"

#include "shardflow/Runtime/Format/Kernel.h"

#include <dlfcn.h>
#include <mutex>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

#define SHARDFLOW_STRINGIFY_EXPANDED(x) #x
// Expands macros first: cuMemAlloc -> "cuMemAlloc_v2".
#define SHARDFLOW_STRINGIFY(x) SHARDFLOW_STRINGIFY_EXPANDED(x)

namespace {

std::string dlerrorText() {
  const char *e = dlerror();
  return e ? e : "unknown reason";
}

/// Resolves `name` in `handle` into `fn`; throws naming the library.
template <typename Fn>
void resolve(void *handle, const char *library, const char *name, Fn &fn, const char *hint) {
  dlerror();
  void *p = dlsym(handle, name);
  if (!p)
    throw RuntimeError(std::string(library) + " has no function '" + name + "' (" +
                       dlerrorText() + "): " + hint);
  fn = reinterpret_cast<Fn>(p);
}

/// A library loaded at most once; `error` holds why it failed, if it did.
template <typename T> struct Loaded {
  std::once_flag once;
  T functions;
  std::string error;

  template <typename LoadFn> const T &get(LoadFn &&load) {
    std::call_once(once, [&] {
      try {
        load(functions);
      } catch (const std::exception &e) {
        error = e.what();
      }
    });
    if (!error.empty())
      throw RuntimeError(error);
    return functions;
  }
};

std::string describeWith(const CudaDriver &d, CUresult status) {
  const char *name = nullptr, *text = nullptr;
  d.cuGetErrorName(status, &name);
  d.cuGetErrorString(status, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(int(status))) +
         (text ? std::string(" (") + text + ")" : "");
}

void loadDriver(CudaDriver &d) {
  const char *library = "libcuda.so.1";
  void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!h)
    throw RuntimeError(std::string(library) + " could not be loaded (" + dlerrorText() +
                       "): is the NVIDIA driver installed?");
  const char *hint = "the NVIDIA driver is older than this shard-run needs (CUDA 12 or newer)";
#define SHARDFLOW_RESOLVE(fn) resolve(h, library, SHARDFLOW_STRINGIFY(fn), d.fn, hint);
  SHARDFLOW_CUDA_DRIVER_FUNCTIONS(SHARDFLOW_RESOLVE)
#undef SHARDFLOW_RESOLVE
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS)
    throw RuntimeError(std::string(library) + " was loaded but cuInit failed: " +
                       describeWith(d, r) +
                       " (is a GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  d.cuDriverGetVersion(&d.version);
}

void loadCublasLt(CublasLt &c) {
  // The attribute and enum values shard-run passes are those of the
  // headers it was built with; they change between major versions. So the
  // library of that major version is tried first, and a library of another
  // one is closed again and the next name tried.
  const std::string names[] = {"libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR),
                               "libcublasLt.so"};
  void *h = nullptr;
  std::string reasons;
  for (const std::string &name : names) {
    void *candidate = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!candidate) {
      reasons += (reasons.empty() ? "" : "; ") + dlerrorText();
      continue;
    }
    dlerror();
    auto getVersion =
        reinterpret_cast<size_t (*)()>(dlsym(candidate, "cublasLtGetVersion"));
    size_t version = getVersion ? getVersion() : 0;
    if (version / 10000 != CUBLAS_VER_MAJOR) {
      reasons += (reasons.empty() ? "" : "; ") + name + " is version " +
                 (getVersion ? std::to_string(version) : std::string("unknown"));
      dlclose(candidate);
      continue;
    }
    h = candidate;
    c.library = name;
    break;
  }
  if (!h)
    throw RuntimeError("cuBLASLt " + std::to_string(CUBLAS_VER_MAJOR) +
                       ".x, which this shard-run was built against, could not be loaded (" +
                       names[0] + ", " + names[1] + ": " + reasons +
                       "): add the CUDA toolkit's lib64 folder to LD_LIBRARY_PATH");
  const char *hint = "this cuBLASLt is older than the one shard-run was built against";
#define SHARDFLOW_RESOLVE(fn) resolve(h, c.library.c_str(), SHARDFLOW_STRINGIFY(fn), c.fn, hint);
  SHARDFLOW_CUBLASLT_FUNCTIONS(SHARDFLOW_RESOLVE)
#undef SHARDFLOW_RESOLVE
}

void loadNccl(Nccl &n) {
  const char *library = "libnccl.so.2";
  void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!h)
    throw RuntimeError(std::string(library) + " could not be loaded (" + dlerrorText() +
                       "): install NCCL or add its folder to LD_LIBRARY_PATH");
  const char *hint = "NCCL 2.14 or newer is needed";
#define SHARDFLOW_RESOLVE(fn) resolve(h, library, SHARDFLOW_STRINGIFY(fn), n.fn, hint);
  SHARDFLOW_NCCL_FUNCTIONS(SHARDFLOW_RESOLVE)
#undef SHARDFLOW_RESOLVE
  n.ncclGetVersion(&n.version);
  if (n.version < 21400)
    throw RuntimeError(std::string(library) + " is NCCL " + std::to_string(n.version) +
                       "; shard-run needs NCCL 2.14 or newer");
}

} // namespace

const CudaDriver &cuda::driver() {
  static Loaded<CudaDriver> loaded;
  return loaded.get(loadDriver);
}

const CublasLt &cuda::cublasLt() {
  static Loaded<CublasLt> loaded;
  return loaded.get(loadCublasLt);
}

const Nccl &cuda::nccl() {
  static Loaded<Nccl> loaded;
  return loaded.get(loadNccl);
}

std::string cuda::describe(CUresult status) {
  // Only called with a status the loaded driver returned.
  return describeWith(driver(), status);
}

std::string cuda::describe(cublasStatus_t status) {
  const CublasLt &c = cublasLt();
  const char *name = c.cublasLtGetStatusName(status);
  const char *text = c.cublasLtGetStatusString(status);
  return std::string(name ? name : "cuBLAS status " + std::to_string(int(status))) +
         (text ? std::string(" (") + text + ")" : "");
}

std::string cuda::describe(ncclResult_t status) {
  const char *text = nccl().ncclGetErrorString(status);
  return "NCCL error " + std::to_string(int(status)) + (text ? std::string(" (") + text + ")" : "");
}
