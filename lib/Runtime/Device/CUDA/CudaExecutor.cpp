//===- CudaExecutor.cpp - run a `target cuda` artifact on one GPU ----------===//
//
// Loading does all the work that does not depend on the inputs: device
// memory, weights, module code, cuBLASLt algorithms, device-kernel launch
// plans, NCCL communicators, and the stream schedule (which instruction
// waits for which). A run then uploads the inputs, enqueues every
// instruction, waits for the GPU (watching NCCL) and downloads the outputs.
//
// Device pointers of every buffer are fixed at load (inputs have their own
// device slots), which is what lets launches and GEMMs be planned once.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Device/CUDA/CudaExecutor.h"
#include "shardflow/Runtime/Format/Layout.h"

#include "shardflow/Runtime/Device/CUDA/CudaLibraries.h"
#include "shardflow/Runtime/Core/WeightLoader.h"

#include "CudaGemm.h"
#include "CudaPlanning.h"

#ifdef SHARDFLOW_HAVE_DEVICE_KERNELS
#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"
#include "shardflow/Runtime/Format/GemmAutotuneFile.h"
#endif

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <utility>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {

void checkCu(CUresult status, const char *call) {
  if (status != CUDA_SUCCESS)
    throw RuntimeError(std::string(call) + " failed: " + describe(status));
}

void checkNccl(ncclResult_t status, const char *call, ncclComm_t comm) {
  if (status == ncclSuccess)
    return;
  // NCCL keeps the text of its last error; `comm` may be null (unused).
  std::string detail;
  if (const char *last = nccl().ncclGetLastError(comm))
    if (*last)
      detail = std::string(": ") + last;
  throw RuntimeError(std::string(call) + " failed: " + describe(status) + detail);
}

#define CU_CALL(fn, ...) checkCu(driver().fn(__VA_ARGS__), #fn)

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

/// Page-locked staging for the weights' upload: at least this much (or two
/// of the largest weights), at most kStagingLimit, never more than the
/// weights take.
constexpr size_t kStagingBytes = size_t(256) << 20;
constexpr size_t kStagingLimit = size_t(1) << 30;

bool deviceKernelAvailable(std::string_view kernel) {
#ifdef SHARDFLOW_HAVE_DEVICE_KERNELS
  return hasDeviceKernel(kernel);
#else
  (void)kernel;
  return false;
#endif
}

ncclRedOp_t ncclOp(Reduction r) {
  switch (r) {
  case Reduction::Sum:
    return ncclSum;
  case Reduction::Prod:
    return ncclProd;
  case Reduction::Max:
    return ncclMax;
  case Reduction::Min:
    return ncclMin;
  }
  return ncclSum;
}

/// NCCL's type for reductions of `t`; throws for the types it lacks.
ncclDataType_t ncclReduceType(DType t, Reduction r) {
  switch (t) {
  case DType::F32:
    return ncclFloat32;
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F64:
    return ncclFloat64;
  case DType::I8:
    return ncclInt8;
  case DType::I32:
    return ncclInt32;
  case DType::I64:
    return ncclInt64;
  case DType::U8:
    return ncclUint8;
  case DType::U32:
    return ncclUint32;
  case DType::U64:
    return ncclUint64;
  case DType::I1:
    if (r == Reduction::Sum || r == Reduction::Prod)
      throw RuntimeError("i1 values can only be reduced with max (or) and min (and)");
    return ncclUint8;
  default:
    throw RuntimeError(std::string("NCCL cannot reduce ") + dtypeName(t) + " values");
  }
}

/// Weight staging in one block of page-locked memory: first fit over the
/// free ranges, which coalesce again when blocks come back. Loader threads
/// take blocks; the uploading thread gives them back once their copy has
/// completed.
class PinnedStaging final : public WeightStaging {
public:
  static constexpr size_t kAlign = 256;

  PinnedStaging(uint8_t *base, size_t size) : base(base) { freeRanges[0] = size; }

  uint8_t *acquire(size_t bytes) override {
    bytes = alignUp(std::max<size_t>(bytes, 1), kAlign);
    std::lock_guard<std::mutex> lock(m);
    for (auto it = freeRanges.begin(); it != freeRanges.end(); ++it) {
      if (it->second < bytes)
        continue;
      auto [offset, size] = *it;
      freeRanges.erase(it);
      if (size > bytes)
        freeRanges[offset + bytes] = size - bytes;
      taken[offset] = bytes;
      return base + offset;
    }
    return nullptr;
  }

  void release(uint8_t *block) override {
    std::lock_guard<std::mutex> lock(m);
    size_t offset = size_t(block - base);
    auto t = taken.find(offset);
    if (t == taken.end())
      return;
    size_t size = t->second;
    taken.erase(t);
    auto next = freeRanges.lower_bound(offset);
    if (next != freeRanges.end() && offset + size == next->first) {
      size += next->second;
      next = freeRanges.erase(next);
    }
    if (next != freeRanges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return;
      }
    }
    freeRanges[offset] = size;
  }

private:
  uint8_t *base;
  std::mutex m;
  std::map<size_t, size_t> freeRanges, taken; // offset -> bytes
};

} // namespace

//===----------------------------------------------------------------------===//
// The executor
//===----------------------------------------------------------------------===//

class CudaExecutor::Impl {
public:
  Impl(Artifact artifact, const std::string &weightsDir, Communicator *world, bool verify,
       CudaOptions options);
  ~Impl();

  std::vector<std::pair<std::string, Tensor>> run(const std::map<std::string, HostTensor> &in);

  Artifact art;
  size_t weightBytes = 0;
  double deviceSeconds = 0; // the last run's program, on the GPU
  double downloadSeconds = 0; // the last run's output downloads, host time
  bool downloadPinned = false; // ... all into page-locked memory
  size_t outputBytes = 0;
  std::vector<double> timings; // with options.profile: per instruction

private:
  enum Stream { ComputeStream = 0, CommStream = 1 };

  struct GemmCall {
    const GemmRunner::Prepared *prepared = nullptr;
    float alpha = 1, beta = 0;
    CUdeviceptr a = 0, b = 0, c = 0, d = 0, bias = 0;
  };

  /// One instruction, prepared at load.
  struct Step {
    enum class Kind { Launch, DeviceKernel, Gemm, Copies, Collective } kind = Kind::Launch;
    int stream = ComputeStream;
    std::vector<int> waits;      // steps on the other stream to wait for
    CUevent done = nullptr;      // recorded after the step if someone waits
    // Launch: a compiler-generated kernel.
    CUfunction function = nullptr;
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, shared = 0;
    std::vector<CUdeviceptr> arguments;
    int statusSlot = -1; // the step's status word (index checks), or -1
    /// DeviceKernel: (launch, byte offset in its argument) of status pointers.
    std::vector<std::pair<size_t, size_t>> statusOffsets;
    // DeviceKernel: hand-written kernels.
    std::vector<std::vector<uint8_t>> launchArguments;
    std::vector<CUfunction> launchFunctions;
    std::vector<std::array<unsigned, 7>> launchGeometry; // grid, block, shared
    // Gemm: zero fills, C broadcast into D, then the GEMMs.
    std::vector<std::pair<CUdeviceptr, size_t>> zeroFills;
    std::vector<Copy2D> copies; // also Copies (local_slice without a kernel)
    CUdeviceptr copySource = 0, copyDestination = 0;
    std::vector<GemmCall> gemms;
  };

  struct GroupComm {
    ncclComm_t comm = nullptr; // nullptr: this rank is in none of the groups
    int size = 0, rank = -1;
  };

  void openDevice();
  void allocate(const std::string &weightsDir);
  void prepareProgram();
  void prepareKernel(size_t n, Step &step);
  void prepareGemm(size_t n, Step &step, bool onnxGemm);
  void prepareDeviceKernel(const std::string &kernel, const Instruction &inst, Step &step);
  void planStreams();
  /// options.groupGemms: sibling GEMMs as one pointer-array batched call.
  void groupGemms();
  /// options.gemmAutotune: times the kept cuBLASLt algorithms of every
  /// distinct GEMM problem on its first call's operands and keeps the
  /// fastest (before the first run: the arena holds nothing yet).
  void autotuneGemms();
  void createCommunicators();
  void checkNcclHealth();
  /// Lets `f` use `bytes` of dynamic shared memory, or throws naming the
  /// device's limit (sm_86/sm_89 parts allow 99 KiB, sm_80/sm_90 more).
  void allowSharedMemory(CUfunction f, unsigned bytes, const std::string &function);
  /// Aborts every NCCL communicator (ncclCommAbort) and forgets it.
  void abortCommunicators();

  void execute(size_t n);
  /// Queues every instruction on its stream (execute), naming the
  /// instruction in an error.
  void enqueueProgram();
  /// Captures enqueueProgram into `graph` (options.cudaGraph).
  void captureProgram();
  /// Whether this run launches a CUDA graph (captured now when there is
  /// none yet): options.cudaGraph, the runs so far, the program's
  /// collectives and profiling.
  bool wantsGraph() const;
  /// Fails the run when a kernel reported bad data (an index out of range,
  /// an integer division by zero), naming the first such kernel in program
  /// order and its ONNX node.
  void checkStatusWords();
  void runCollective(const Instruction &inst, CUstream stream);
  void runCopies(const std::vector<Copy2D> &copies, CUdeviceptr src, CUdeviceptr dst,
                 CUstream stream);
  /// Waits for every event, watching NCCL for errors and the deadline;
  /// aborts the job (every rank) on a collective error or timeout.
  void waitForGpu(const std::vector<CUevent> &events, const std::string &what);
  /// Checks the result of an NCCL call on `c`. The communicators are
  /// nonblocking, so a call may return ncclInProgress while NCCL goes on in
  /// the background (creating the communicator, connecting to peers): that
  /// is waited for within --collective-timeout, and the job aborted (every
  /// rank) when it does not finish. Other failures throw RuntimeError.
  void ncclDone(ncclResult_t status, const char *call, ncclComm_t c);
  /// Finalizes and destroys a communicator, aborting it when that fails.
  void releaseComm(ncclComm_t c);
  /// Polls `c` until its pending work leaves ncclInProgress, within
  /// --collective-timeout; `status` gets its final state.
  WaitOutcome settleComm(ncclComm_t c, ncclResult_t &status);
  /// Aborts the communicators and ends the job with `reason` (the MPI
  /// communicator's abort names this rank in front of it).
  [[noreturn]] void abortJob(const std::string &reason);

  CUmodule moduleNamed(const std::string &name);
  CUfunction deviceKernelFunction(const std::string &name);
  Tensor deviceTensor(int buffer) const;
  CUdeviceptr pointerOf(int buffer) const { return pointers.at(size_t(buffer)); }
  bool rangesOverlap(int a, int b) const;
  std::vector<Access> accessesOf(const Instruction &inst) const;
  bool rangeOf(int buffer, ByteRange &range) const;

  Communicator *comm;
  std::unique_ptr<Communicator> single;
  bool verify;
  CudaOptions options;
  int rank = 0;

  CUdevice device = 0;
  CUcontext context = nullptr;
  int ccMajor = 0, ccMinor = 0;
  int maxSharedPerBlock = 48 * 1024; // with the opt-in above 48 KiB
  std::string deviceName;
  CUstream streams[2] = {nullptr, nullptr};
  CUevent uploaded = nullptr, finished[2] = {nullptr, nullptr};
  // options.cudaGraph: the captured program, and the events that bring the
  // communication stream into the capture and back.
  CUgraphExec graph = nullptr;
  CUevent fork = nullptr, join = nullptr;
  bool graphRefused = false; // CudaGraph::Auto: the capture failed once
  // With options.profile: around each instruction on its stream.
  std::vector<CUevent> began, ended;

  CUdeviceptr arena = 0, inputMemory = 0, weightMemory = 0, scratch = 0, workspace = 0,
              probe = 0;
  /// groupGemms: the pointer arrays of the grouped GEMMs.
  CUdeviceptr gemmPointers = 0;
  /// Two int64 per launch that checks indices: [flag, offending index],
  /// zeroed before each run and read after it.
  CUdeviceptr statusWords = 0;
  std::vector<size_t> checkedSteps; // step of each status slot
  size_t scratchBytes = 0, workspaceBytes = 0;
  std::vector<CUdeviceptr> pointers; // per buffer
  /// Where each output is downloaded: page-locked memory (the copy engine
  /// writes it directly), or `pageable` (not pinned yet, not to be, or
  /// refused by the driver).
  struct HostOutput {
    uint8_t *data = nullptr;
    size_t bytes = 0;
    std::vector<uint8_t> pageable;
  };
  std::vector<HostOutput> hostOutputs;
  int runs = 0; // runs so far
  /// Page-locked host memory (cuMemHostAlloc), freed with the executor.
  std::vector<void *> pinnedMemory;
  /// `bytes` of page-locked host memory, or null when the driver refuses
  /// (--verbose says so).
  uint8_t *allocatePinned(size_t bytes, const char *what);
  /// Frees what allocatePinned returned, before the executor goes.
  void freePinned(void *p);
  /// Puts each output's host copy in page-locked memory where it can be had.
  void pinOutputs();

  std::map<std::string, CUmodule> modules;
  CUmodule kernelModule = nullptr;
  std::map<std::string, CUfunction> kernelFunctions;
  std::unique_ptr<GemmRunner> gemm;

  ncclComm_t worldComm = nullptr;
  std::map<std::vector<int64_t>, GroupComm> groupComms;

  std::vector<Step> steps;
  /// Cleared while GPU work is in flight: the destructor then leaves the
  /// device alone (freeing could block on a hung kernel) and only aborts
  /// NCCL, since the process is about to exit.
  bool idle = false;
};

CudaExecutor::Impl::Impl(Artifact artifact, const std::string &weightsDir, Communicator *world,
                         bool verifyWeights, CudaOptions opts)
    : art(std::move(artifact)), comm(world), verify(verifyWeights), options(opts) {
  if (!comm) {
    single = createSingleRankCommunicator();
    comm = single.get();
  }
  rank = comm->rank();
  if (comm->size() != art.worldSize)
    throw RuntimeError("the artifact was compiled for " + std::to_string(art.worldSize) +
                       " rank(s) but runs on " + std::to_string(comm->size()));
  if (art.target != "cuda")
    throw RuntimeError("artifact targets '" + art.target +
                       "'; the CUDA executor runs cuda artifacts only");
  if (options.cudaGraph == CudaOptions::CudaGraph::Always && options.profile)
    throw RuntimeError("--cuda-graph and --profile do not go together: the profile times each "
                       "operation with events around it, which a CUDA graph's operations do "
                       "not have; profile without the graph");
  try {
    driver();
    cublasLt();
    nccl();
  } catch (const RuntimeError &e) {
    throw RuntimeError(std::string("this artifact targets 'cuda', but ") + e.what());
  }
  try {
    openDevice();
    allocate(weightsDir);
    prepareProgram();
    planStreams();
    if (options.groupGemms)
      groupGemms();
    if (options.gemmAutotune)
      autotuneGemms();
    createCommunicators();
    checkNcclHealth();
  } catch (...) {
    // No destructor runs for a half-built executor: the communicators
    // created so far are aborted here (their proxy threads would outlive
    // it); device memory goes with the process, which is about to end.
    abortCommunicators();
    throw;
  }
  idle = true;
}

void CudaExecutor::Impl::abortCommunicators() {
  const Nccl &nc = nccl();
  for (auto &[key, g] : groupComms)
    if (g.comm)
      nc.ncclCommAbort(std::exchange(g.comm, nullptr));
  if (worldComm)
    nc.ncclCommAbort(std::exchange(worldComm, nullptr));
}

CudaExecutor::Impl::~Impl() {
  if (!idle) {
    abortCommunicators();
    return;
  }
  // Unwinding from an error (a failed status check, a failed rank): the
  // other ranks may be inside a collective, so the communicators are
  // aborted; finalizing would wait for them.
  if (std::uncaught_exceptions() > 0)
    abortCommunicators();
  const CudaDriver &d = driver();
  d.cuCtxSetCurrent(context);
  // The graph holds cuBLASLt's and NCCL's work: it goes before them.
  if (graph)
    d.cuGraphExecDestroy(graph);
  gemm.reset();
  for (auto &[key, g] : groupComms)
    if (g.comm)
      releaseComm(g.comm);
  if (worldComm)
    releaseComm(worldComm);
  for (Step &s : steps)
    if (s.done)
      d.cuEventDestroy(s.done);
  for (CUevent e : {uploaded, finished[0], finished[1], fork, join})
    if (e)
      d.cuEventDestroy(e);
  for (const std::vector<CUevent> *events : {&began, &ended})
    for (CUevent e : *events)
      if (e)
        d.cuEventDestroy(e);
  for (CUstream s : streams)
    if (s)
      d.cuStreamDestroy(s);
  for (auto &[name, m] : modules)
    d.cuModuleUnload(m);
  if (kernelModule)
    d.cuModuleUnload(kernelModule);
  for (CUdeviceptr p :
       {arena, inputMemory, weightMemory, scratch, workspace, probe, statusWords, gemmPointers})
    if (p)
      d.cuMemFree(p);
  for (void *p : pinnedMemory)
    d.cuMemFreeHost(p);
  d.cuDevicePrimaryCtxRelease(device);
}

uint8_t *CudaExecutor::Impl::allocatePinned(size_t bytes, const char *what) {
  if (!bytes)
    return nullptr;
  void *p = nullptr;
  CUresult r = driver().cuMemHostAlloc(&p, bytes, 0);
  if (r != CUDA_SUCCESS) {
    if (options.verbose)
      std::fprintf(stderr,
                   "shard-run: rank %d: no page-locked host memory for %s (%zu bytes: %s); "
                   "pageable memory instead\n",
                   rank, what, bytes, describe(r).c_str());
    return nullptr;
  }
  pinnedMemory.push_back(p);
  return static_cast<uint8_t *>(p);
}

void CudaExecutor::Impl::pinOutputs() {
  // Downloaded into page-locked memory, the outputs are copied at the bus's
  // speed; pageable memory is copied through the driver's staging buffers.
  size_t pinned = 0;
  for (HostOutput &h : hostOutputs) {
    if (uint8_t *p = allocatePinned(h.bytes, "an output")) {
      h.data = p;
      h.pageable = std::vector<uint8_t>();
      pinned += h.bytes;
    } else if (h.pageable.size() != h.bytes) {
      h.pageable.resize(h.bytes);
      h.data = h.pageable.data();
    }
  }
  if (options.verbose)
    std::fprintf(stderr, "shard-run: rank %d downloads the outputs into page-locked memory "
                 "(%zu bytes)\n", rank, pinned);
}

void CudaExecutor::Impl::freePinned(void *p) {
  auto it = std::find(pinnedMemory.begin(), pinnedMemory.end(), p);
  if (it == pinnedMemory.end())
    return;
  pinnedMemory.erase(it);
  CU_CALL(cuMemFreeHost, p);
}

void CudaExecutor::Impl::openDevice() {
  const CudaDriver &d = driver();
  int count = 0;
  CU_CALL(cuDeviceGetCount, &count);
  int ordinal = chooseDevice(options.device, launcherLocalRank(), count);
  CU_CALL(cuDeviceGet, &device, ordinal);
  CU_CALL(cuDeviceGetAttribute, &ccMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  CU_CALL(cuDeviceGetAttribute, &ccMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  CU_CALL(cuDeviceGetAttribute, &maxSharedPerBlock,
          CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
  char name[256] = {};
  CU_CALL(cuDeviceGetName, name, int(sizeof(name)), device);
  deviceName = name;
  // The primary context is the one the CUDA runtime inside cuBLASLt and
  // NCCL picks up, so all three work in one context.
  CU_CALL(cuDevicePrimaryCtxRetain, &context, device);
  CU_CALL(cuCtxSetCurrent, context);
  for (CUstream &s : streams)
    CU_CALL(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  // These three time the program (lastDeviceSeconds).
  for (CUevent *e : {&uploaded, &finished[0], &finished[1]})
    CU_CALL(cuEventCreate, e, CU_EVENT_DEFAULT);
  if (options.cudaGraph != CudaOptions::CudaGraph::Never)
    for (CUevent *e : {&fork, &join})
      CU_CALL(cuEventCreate, e, CU_EVENT_DISABLE_TIMING);
  if (options.profile) {
    began.assign(art.program.size(), nullptr);
    ended.assign(art.program.size(), nullptr);
    for (std::vector<CUevent> *events : {&began, &ended})
      for (CUevent &e : *events)
        CU_CALL(cuEventCreate, &e, CU_EVENT_DEFAULT);
  }
  if (options.verbose)
    std::fprintf(stderr,
                 "shard-run: rank %d uses GPU %d (%s, sm_%d%d); driver %d, %s %zu, NCCL %d\n",
                 rank, ordinal, name, ccMajor, ccMinor, d.version,
                 cublasLt().library.c_str(), cublasLt().cublasLtGetVersion(), nccl().version);
}

namespace {
/// The cuBLASLt workspace of a program with GEMMs: what cuBLASLt recommends
/// for Hopper.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

/// Bytes as GiB with two decimals, or as bytes below 1 MiB.
std::string formatGiB(size_t bytes) {
  if (bytes < (size_t(1) << 20))
    return std::to_string(bytes) + " bytes";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  return text;
}
} // namespace

void CudaExecutor::Impl::allocate(const std::string &weightsDir) {
  const size_t kAlign = 256; // cuBLASLt's preferred alignment
  size_t inputBytes = 0, weightTotal = 0;
  std::vector<size_t> offset(art.buffers.size(), 0);
  for (size_t i = 0; i < art.buffers.size(); ++i) {
    const BufferDesc &b = art.buffers[i];
    if (b.kind == BufferDesc::Kind::Input) {
      offset[i] = inputBytes;
      inputBytes += alignUp(std::max<size_t>(b.bytes(), 1), kAlign);
    } else if (b.kind == BufferDesc::Kind::Weight || b.kind == BufferDesc::Kind::Constant) {
      offset[i] = weightTotal;
      weightTotal += alignUp(std::max<size_t>(b.bytes(), 1), kAlign);
    }
  }
  // What the program needs, against what the GPU has free: a program that
  // cannot fit fails here, naming both, before any allocation.
  size_t freeBytes = 0, totalBytes = 0;
  bool known = driver().cuMemGetInfo(&freeBytes, &totalBytes) == CUDA_SUCCESS;
  size_t workspace = 0;
  for (const Instruction &inst : art.program)
    if (inst.kernel == "matmul" || inst.kernel == "gemm")
      workspace = kGemmWorkspaceBytes;
  size_t total = size_t(art.arenaBytes) + weightTotal + inputBytes + workspace;
  std::string needs = formatGiB(total) + " (activations " + formatGiB(size_t(art.arenaBytes)) +
                      ", weights " + formatGiB(weightTotal) + ", inputs " +
                      formatGiB(inputBytes) +
                      (workspace ? ", cuBLASLt workspace " + formatGiB(workspace) : "") + ")";
  std::string has = known ? formatGiB(freeBytes) + " free of " + formatGiB(totalBytes) : "";
  if (known && total > freeBytes)
    throw RuntimeError("the program needs " + needs + " of GPU memory on rank " +
                       std::to_string(rank) + ", and " + deviceName + " has " + has +
                       ": more ranks (tensor or pipeline parallel), a smaller batch or "
                       "--dtype bf16 at compile time would fit it");
  auto alloc = [&](CUdeviceptr &p, size_t bytes, const char *what) {
    CUresult r = driver().cuMemAlloc(&p, std::max<size_t>(bytes, kAlign));
    if (r != CUDA_SUCCESS)
      throw RuntimeError("cannot allocate " + std::to_string(bytes) + " bytes of GPU memory for " +
                         what + ": " + describe(r) + " (the program needs " + needs +
                         (known ? "; " + deviceName + " had " + has + " at the start" : "") +
                         ")");
  };
  alloc(arena, size_t(art.arenaBytes), "the activation arena");
  alloc(inputMemory, inputBytes, "the inputs");
  alloc(weightMemory, weightTotal, "the weights");
  alloc(probe, kAlign, "the NCCL health check");

  pointers.assign(art.buffers.size(), 0);
  for (size_t i = 0; i < art.buffers.size(); ++i) {
    const BufferDesc &b = art.buffers[i];
    switch (b.kind) {
    case BufferDesc::Kind::Arena:
      pointers[i] = arena + CUdeviceptr(b.offset);
      break;
    case BufferDesc::Kind::Input:
      pointers[i] = inputMemory + offset[i];
      break;
    case BufferDesc::Kind::Weight:
    case BufferDesc::Kind::Constant:
      pointers[i] = weightMemory + offset[i];
      break;
    case BufferDesc::Kind::View:
      break;
    }
  }
  // Views share their source's pointer (a view of a view resolves through).
  for (size_t i = 0; i < art.buffers.size(); ++i) {
    size_t root = i;
    for (int hops = 0; art.buffers[root].kind == BufferDesc::Kind::View; ++hops) {
      if (hops > int(art.buffers.size()))
        throw RuntimeError("buffer " + std::to_string(i) + " is a view of itself");
      root = size_t(art.buffers[root].source);
    }
    pointers[i] = pointers[root];
  }

  // Weights: mapped, checked and converted on the host, then uploaded; the
  // host copies go as soon as each upload has been staged.
  CUstream s = streams[ComputeStream];
  {
    WeightLoader loader(art, weightsDir, rank, verify);
    std::vector<size_t> weights;
    size_t largest = 0, total = 0;
    for (size_t i = 0; i < art.buffers.size(); ++i)
      if (art.buffers[i].kind == BufferDesc::Kind::Weight) {
        weights.push_back(i);
        largest = std::max(largest, art.buffers[i].bytes());
        total += alignUp(art.buffers[i].bytes(), PinnedStaging::kAlign);
      }
    // The loader's threads write each weight's final bytes (the last copy,
    // conversion or permutation) into page-locked staging when a block of
    // it is free, and the GPU reads them from there directly; otherwise the
    // weight goes from pageable memory, which the driver stages itself.
    // Enough for a few of the largest weights; one larger than it all
    // always goes the pageable way.
    size_t stagingBytes = std::min({total, std::max(kStagingBytes, 2 * largest), kStagingLimit});
    using Pinned = CudaOptions::PinnedMemory;
    bool stage = options.pinnedMemory == Pinned::Always ||
                 (options.pinnedMemory == Pinned::Auto && total >= CudaOptions::kPinnedStagingFrom);
    std::unique_ptr<PinnedStaging> staging;
    uint8_t *stagingMemory = stage ? allocatePinned(stagingBytes, "weight staging") : nullptr;
    if (stagingMemory)
      staging = std::make_unique<PinnedStaging>(stagingMemory, stagingBytes);
    size_t staged = 0;
    // Read, checked and converted on the loader's threads; uploaded here,
    // so the driver is called from this thread only.
    loader.loadAll(
        weights, options.loadThreads,
        [&](size_t i, WeightBytes w) {
          if (w.bytes)
            CU_CALL(cuMemcpyHtoDAsync, pointers[i], w.data, w.bytes, s);
          weightBytes += w.bytes;
          if (w.staged) {
            // The block goes back (with `w`) once the GPU has read it.
            CU_CALL(cuStreamSynchronize, s);
            staged += w.bytes;
          }
        },
        staging.get());
    if (options.verbose)
      std::fprintf(stderr,
                   "shard-run: rank %d uploaded %zu weight bytes, %zu of them from page-locked "
                   "staging (%zu bytes of it)\n",
                   rank, weightBytes, staged, staging ? stagingBytes : size_t(0));
    // Every staged upload has completed (each was waited for).
    staging.reset();
    if (stagingMemory)
      freePinned(stagingMemory);
    for (size_t i = 0; i < art.buffers.size(); ++i) {
      const BufferDesc &b = art.buffers[i];
      if (b.kind == BufferDesc::Kind::Constant && !b.data.empty()) {
        if (b.data.size() != b.bytes())
          throw RuntimeError("constant buffer " + std::to_string(i) + " has " +
                             std::to_string(b.data.size()) + " bytes, expected " +
                             std::to_string(b.bytes()));
        CU_CALL(cuMemcpyHtoDAsync, pointers[i], b.data.data(), b.data.size(), s);
      }
    }
    CU_CALL(cuStreamSynchronize, s);
  }

  hostOutputs.resize(art.outputs.size());
  for (size_t o = 0; o < art.outputs.size(); ++o) {
    // An output with columns holds fewer bytes than its (padded) buffer.
    const BufferDesc &b = art.buffers.at(size_t(art.outputs[o].second));
    size_t elements = 1;
    for (int64_t d : outputShape(art, o))
      elements *= size_t(d);
    hostOutputs[o].bytes = elements * dtypeSize(b.dtype);
    outputBytes += hostOutputs[o].bytes;
  }
  if (options.pinnedMemory == CudaOptions::PinnedMemory::Always) {
    pinOutputs();
  } else {
    for (HostOutput &h : hostOutputs) {
      h.pageable.resize(h.bytes);
      h.data = h.pageable.data();
    }
  }

  // Collective scratch: packed pieces and received pieces (all_to_all
  // needs both), or a copy of an input that overlaps its output.
  for (const Instruction &inst : art.program) {
    if (!inst.collective || inst.inputs.empty() || inst.outputs.empty())
      continue;
    size_t bytes = std::max(art.buffers.at(size_t(inst.inputs[0])).bytes(),
                            art.buffers.at(size_t(inst.outputs[0])).bytes());
    scratchBytes = std::max(scratchBytes, 2 * alignUp(bytes, kAlign));
  }
  if (scratchBytes)
    alloc(scratch, scratchBytes, "collective scratch");
}

Tensor CudaExecutor::Impl::deviceTensor(int buffer) const {
  const BufferDesc &b = art.buffers.at(size_t(buffer));
  return Tensor{reinterpret_cast<void *>(pointerOf(buffer)), b.dtype, b.shape};
}

CUmodule CudaExecutor::Impl::moduleNamed(const std::string &name) {
  auto it = modules.find(name);
  if (it != modules.end())
    return it->second;
  const DeviceModule &m = selectModule(art.modules, name, ccMajor, ccMinor);
  CUmodule module = nullptr;
  if (m.format == "cubin") {
    CU_CALL(cuModuleLoadData, &module, m.data.data());
  } else {
    // PTX is text; the driver wants it NUL-terminated, and its compiler's
    // log says why a JIT failed.
    std::vector<uint8_t> text = m.data;
    text.push_back(0);
    char log[8192] = {};
    CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, reinterpret_cast<void *>(uintptr_t(sizeof(log)))};
    CUresult r = driver().cuModuleLoadDataEx(&module, text.data(), 2, keys, values);
    if (r != CUDA_SUCCESS)
      throw RuntimeError("the driver could not compile module '" + name + "' (" + m.arch +
                         " PTX) for sm_" + std::to_string(ccMajor * 10 + ccMinor) + ": " +
                         describe(r) + (log[0] ? std::string(": ") + log : ""));
  }
  modules[name] = module;
  return module;
}

CUfunction CudaExecutor::Impl::deviceKernelFunction(const std::string &name) {
  auto it = kernelFunctions.find(name);
  if (it != kernelFunctions.end())
    return it->second;
  if (!kernelModule) {
#ifdef SHARDFLOW_HAVE_DEVICE_KERNELS
    const unsigned char *fatbin = deviceKernelsFatbin();
#else
    const unsigned char *fatbin = nullptr;
#endif
    if (!fatbin)
      throw RuntimeError("this shard-run was built without nvcc, so it has no device kernels");
    CU_CALL(cuModuleLoadData, &kernelModule, fatbin);
  }
  CUfunction f = nullptr;
  CUresult r = driver().cuModuleGetFunction(&f, kernelModule, name.c_str());
  if (r != CUDA_SUCCESS)
    throw RuntimeError("the device kernels have no function '" + name + "' for sm_" +
                       std::to_string(ccMajor * 10 + ccMinor) + ": " + describe(r));
  kernelFunctions[name] = f;
  return f;
}

void CudaExecutor::Impl::allowSharedMemory(CUfunction f, unsigned bytes,
                                           const std::string &function) {
  if (bytes > unsigned(maxSharedPerBlock))
    throw RuntimeError(function + " needs " + std::to_string(bytes) +
                       " bytes of shared memory per block; " + deviceName + " (sm_" +
                       std::to_string(ccMajor * 10 + ccMinor) + ") allows " +
                       std::to_string(maxSharedPerBlock));
  if (bytes > 48 * 1024) // the default limit; more must be asked for
    CU_CALL(cuFuncSetAttribute, f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes));
}

void CudaExecutor::Impl::prepareDeviceKernel(const std::string &kernel, const Instruction &inst,
                                             Step &step) {
#ifdef SHARDFLOW_HAVE_DEVICE_KERNELS
  std::vector<Tensor> ins, outs;
  for (int i : inst.inputs)
    ins.push_back(deviceTensor(i));
  for (int o : inst.outputs)
    outs.push_back(deviceTensor(o));
  step.kind = Step::Kind::DeviceKernel;
  for (DeviceLaunch &l :
       planDeviceKernel(kernel, ins, outs, inst.params, rank, options.attentionKernel)) {
    CUfunction f = deviceKernelFunction(l.function);
    allowSharedMemory(f, l.sharedBytes, l.function);
    step.launchFunctions.push_back(f);
    step.launchGeometry.push_back(
        {l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.sharedBytes});
    step.launchArguments.push_back(std::move(l.argument));
    if (l.statusOffset >= 0) {
      // One status word per step; its address is patched in once every
      // checking step is counted (prepareProgram).
      if (step.statusSlot < 0) {
        step.statusSlot = int(checkedSteps.size());
        checkedSteps.push_back(size_t(&step - steps.data()));
      }
      step.statusOffsets.push_back({step.launchArguments.size() - 1, size_t(l.statusOffset)});
    }
  }
#else
  (void)inst;
  (void)step;
  throw RuntimeError("kernel " + kernel + " has no CUDA implementation in this shard-run");
#endif
}

void CudaExecutor::Impl::prepareGemm(size_t n, Step &step, bool onnxGemm) {
  const Instruction &inst = art.program[n];
  step.kind = Step::Kind::Gemm;
  if (inst.inputs.size() < 2 || inst.outputs.size() != 1)
    throw RuntimeError("needs at least two inputs and one output");
  Tensor a = deviceTensor(inst.inputs[0]), b = deviceTensor(inst.inputs[1]),
         d = deviceTensor(inst.outputs[0]);
  // One element type throughout, except that f16 and bf16 operands may
  // write f32 (a plain matmul: convert-rt-to-gpu folds the cast of a
  // returned product into it).
  bool widening = (a.dtype == DType::F16 || a.dtype == DType::BF16) && d.dtype == DType::F32 &&
                  !onnxGemm && inst.inputs.size() == 2;
  if (a.dtype != b.dtype || (a.dtype != d.dtype && !widening))
    throw RuntimeError(std::string("operands and result must have one element type (or f16/bf16 "
                                   "operands an f32 result, without a bias), got ") +
                       dtypeName(a.dtype) + ", " + dtypeName(b.dtype) + " -> " +
                       dtypeName(d.dtype));
  gemmDataType(d.dtype); // refuses other types with a message
  gemmDataType(a.dtype);
  size_t elem = dtypeSize(a.dtype), outElem = dtypeSize(d.dtype); // operands, result
  auto ptr = [](const Tensor &t) { return CUdeviceptr(reinterpret_cast<uintptr_t>(t.data)); };

  // An optional fused epilogue: act(A B + bias), the bias of shape [N].
  std::string epilogueName = inst.params.getString("epilogue", "");
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (epilogueName == "bias")
    epilogue = CUBLASLT_EPILOGUE_BIAS;
  else if (epilogueName == "relu_bias")
    epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
  else if (epilogueName == "gelu_bias")
    epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  else if (!epilogueName.empty())
    throw RuntimeError("unknown epilogue '" + epilogueName + "' (bias, relu_bias or gelu_bias)");
  // residual=i:1 (a matmul, convert-rt-to-gpu): the last input is added
  // to the product (cuBLASLt's C, beta 1), before the bias epilogue.
  bool residual = !onnxGemm && inst.params.getBool("residual", false);
  size_t operands = inst.inputs.size() - (residual ? 1 : 0);
  const Tensor *third = nullptr;
  Tensor thirdTensor, residualTensor;
  if (operands > 2) {
    thirdTensor = deviceTensor(inst.inputs[2]);
    third = &thirdTensor;
    if (third->dtype != d.dtype)
      throw RuntimeError(std::string(onnxGemm ? "C" : "the bias") + " is " +
                         dtypeName(third->dtype) + " but the result is " + dtypeName(d.dtype));
  }
  if (!onnxGemm && (operands < 2 || operands > 3 || (third != nullptr) != !epilogueName.empty()))
    throw RuntimeError("matmul takes two inputs, or three with epilogue=s:bias|relu_bias|gelu_bias"
                       ", and with residual=i:1 one more, the residual");
  if (residual) {
    residualTensor = deviceTensor(inst.inputs.back());
    if (residualTensor.dtype != d.dtype || residualTensor.shape != d.shape)
      throw RuntimeError("the residual is " + std::string(dtypeName(residualTensor.dtype)) + " " +
                         shapeText(residualTensor.shape) + " but the result is " +
                         dtypeName(d.dtype) + " " + shapeText(d.shape));
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_BIAS)
      throw RuntimeError("a residual goes with no epilogue or epilogue=s:bias (cuBLASLt "
                         "applies the activation after adding it)");
  }

  GemmProblem problem;
  problem.dtype = a.dtype;
  problem.outDtype = d.dtype;
  problem.tf32 = options.allowTf32;
  problem.epilogue = epilogue;
  float alpha = 1, beta = 0;
  CUdeviceptr bias = 0, c = 0;
  MatmulPlan plan;
  if (onnxGemm) {
    // The nn dialect's names (nn.gemm): trans_a, trans_b, alpha, beta.
    bool transA = inst.params.getBool("trans_a", false);
    bool transB = inst.params.getBool("trans_b", false);
    alpha = float(inst.params.getFloat("alpha", 1.0));
    float betaParam = float(inst.params.getFloat("beta", 1.0));
    GemmPlan g = planGemm(a.shape, b.shape, third ? &third->shape : nullptr, transA, transB,
                          d.shape);
    problem.transA = transA;
    problem.transB = transB;
    plan.m = g.m;
    plan.n = g.n;
    plan.k = g.k;
    if (third && epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      if (g.cRows != 1 || g.cCols != g.n || betaParam != 1.0f)
        throw RuntimeError("a bias epilogue needs C of shape [N] and beta 1");
      bias = ptr(*third);
    } else if (third && betaParam != 0.0f) {
      beta = betaParam;
      if (g.cRows == g.m && g.cCols == g.n) {
        c = ptr(*third);
      } else {
        // C broadcast into D first, then accumulated in place.
        step.copies = planBroadcast2D(g.cRows, g.cCols, g.m, g.n, outElem);
        step.copySource = ptr(*third);
        step.copyDestination = ptr(d);
        c = ptr(d);
      }
    } else if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      throw RuntimeError("epilogue '" + epilogueName + "' needs C as its bias");
    }
  } else {
    // trans_b: a 2-D B stored [N, K] (convert-rt-to-gpu stores a weight so
    // when that aligns its rows for cuBLASLt).
    std::vector<int64_t> bShape = b.shape;
    if (inst.params.getBool("trans_b", false)) {
      if (bShape.size() != 2)
        throw RuntimeError("trans_b needs a 2-D B, got " + shapeText(bShape));
      std::swap(bShape[0], bShape[1]);
      problem.transB = true;
    }
    plan = planMatmul(a.shape, bShape, d.shape);
    if (residual) {
      if (plan.kind != MatmulPlan::Kind::Folded)
        throw RuntimeError("a residual needs a B without batch dimensions (one GEMM), got " +
                           shapeText(b.shape));
      c = ptr(residualTensor);
      beta = 1;
    }
    if (third) {
      if (third->numel() != plan.n || third->shape.size() > 2 ||
          (third->shape.size() == 2 && third->shape[0] != 1))
        throw RuntimeError("the bias has shape " + shapeText(third->shape) + ", expected [" +
                           std::to_string(plan.n) + "]");
      bias = ptr(*third);
    }
  }
  if (plan.m == 0 || plan.n == 0)
    return;
  if (plan.k == 0) {
    // An empty sum: zeros (then C or the bias, which cuBLASLt cannot add
    // without a product).
    if (c || bias)
      throw RuntimeError("a GEMM with an empty contracted dimension and C or a bias is not "
                         "supported on the GPU");
    step.zeroFills.emplace_back(ptr(d), d.bytes());
    step.copies.clear();
    return;
  }
  problem.m = plan.m;
  problem.n = plan.n;
  problem.k = plan.k;
  problem.alignA = pointerAlignment(ptr(a));
  problem.alignB = pointerAlignment(ptr(b));
  problem.alignD = pointerAlignment(ptr(d));
  problem.alignC = c ? pointerAlignment(c) : problem.alignD;
  if (bias)
    problem.alignBias = pointerAlignment(bias);

  auto describeProblem = [&] {
    std::string types = dtypeName(a.dtype);
    if (a.dtype != d.dtype)
      types += std::string(" -> ") + dtypeName(d.dtype);
    return types + " GEMM m=" + std::to_string(plan.m) +
           " n=" + std::to_string(plan.n) + " k=" + std::to_string(plan.k) +
           (plan.batch > 1 ? " batch=" + std::to_string(plan.batch) : "");
  };
  if (plan.kind == MatmulPlan::Kind::StridedBatched) {
    GemmProblem batched = problem;
    batched.batch = plan.batch;
    batched.strideA = plan.strideA;
    batched.strideB = plan.strideB;
    batched.strideC = plan.strideC;
    // Every batch's matrices must be as aligned as the first's.
    batched.alignA = std::min(batched.alignA, pointerAlignment(CUdeviceptr(plan.strideA) * elem));
    batched.alignB = std::min(batched.alignB, pointerAlignment(CUdeviceptr(plan.strideB) * elem));
    batched.alignD =
        std::min(batched.alignD, pointerAlignment(CUdeviceptr(plan.strideC) * outElem));
    batched.alignC = c ? std::min(batched.alignC, batched.alignD) : batched.alignD;
    if (const GemmRunner::Prepared *p = gemm->prepare(batched)) {
      step.gemms.push_back({p, alpha, beta, ptr(a), ptr(b), c, ptr(d), bias});
      return;
    }
    // No algorithm for a zero (broadcast) stride: one GEMM per batch.
    plan = expandToLoop(plan);
  }
  if (plan.kind == MatmulPlan::Kind::Broadcast) {
    for (auto [oa, ob] : plan.offsets) {
      problem.alignA = std::min(problem.alignA, pointerAlignment(ptr(a) + CUdeviceptr(oa) * elem));
      problem.alignB = std::min(problem.alignB, pointerAlignment(ptr(b) + CUdeviceptr(ob) * elem));
    }
    for (size_t i = 0; i < plan.offsets.size(); ++i) {
      CUdeviceptr out = ptr(d) + CUdeviceptr(i) * CUdeviceptr(plan.m * plan.n) * outElem;
      problem.alignD = std::min(problem.alignD, pointerAlignment(out));
    }
    problem.alignC = problem.alignD;
    const GemmRunner::Prepared *p = gemm->prepare(problem);
    if (!p)
      throw RuntimeError("cuBLASLt has no algorithm for the " + describeProblem());
    for (size_t i = 0; i < plan.offsets.size(); ++i) {
      CUdeviceptr out = ptr(d) + CUdeviceptr(i) * CUdeviceptr(plan.m * plan.n) * outElem;
      step.gemms.push_back({p, alpha, beta, ptr(a) + CUdeviceptr(plan.offsets[i].first) * elem,
                            ptr(b) + CUdeviceptr(plan.offsets[i].second) * elem, 0, out, bias});
    }
    return;
  }
  const GemmRunner::Prepared *p = gemm->prepare(problem);
  if (!p)
    throw RuntimeError("cuBLASLt has no algorithm for the " + describeProblem());
  step.gemms.push_back({p, alpha, beta, ptr(a), ptr(b), c, ptr(d), bias});
}

void CudaExecutor::Impl::prepareKernel(size_t n, Step &step) {
  const Instruction &inst = art.program[n];
  if (inst.kernel == "launch") {
    std::string module = inst.params.getString("module", "");
    std::string function = inst.params.getString("function", "");
    if (module.empty() || function.empty())
      throw RuntimeError("a launch needs module=s: and function=s:");
    std::vector<int64_t> grid = inst.params.getInts("grid"), block = inst.params.getInts("block");
    if (grid.size() != 3 || block.size() != 3)
      throw RuntimeError("grid and block need three sizes each");
    int64_t shared = inst.params.getInt("shared", 0);
    step.kind = Step::Kind::Launch;
    CUresult r = driver().cuModuleGetFunction(&step.function, moduleNamed(module), function.c_str());
    if (r != CUDA_SUCCESS)
      throw RuntimeError("module '" + module + "' has no function '" + function + "': " +
                         describe(r));
    for (int i = 0; i < 3; ++i) {
      if (grid[size_t(i)] < 1 || block[size_t(i)] < 1)
        throw RuntimeError("grid and block sizes must be positive");
      step.grid[i] = unsigned(grid[size_t(i)]);
      step.block[i] = unsigned(block[size_t(i)]);
    }
    if (shared < 0 || shared > std::numeric_limits<int>::max())
      throw RuntimeError("shared memory of " + std::to_string(shared) + " bytes");
    step.shared = unsigned(shared);
    allowSharedMemory(step.function, step.shared, function);
    for (int i : inst.inputs)
      step.arguments.push_back(pointerOf(i));
    for (int o : inst.outputs)
      step.arguments.push_back(pointerOf(o));
    // Generated kernels load and store up to 16 bytes at a time from the
    // start of each buffer (the compiler's vector accesses assume it).
    for (size_t a = 0; a < step.arguments.size(); ++a)
      if (step.arguments[a] % 16 != 0) {
        int buffer = a < inst.inputs.size() ? inst.inputs[a]
                                            : inst.outputs[a - inst.inputs.size()];
        throw RuntimeError("generated kernel '" + function + "' takes buffer " +
                           std::to_string(buffer) +
                           ", which does not start at a multiple of 16 bytes; generated "
                           "kernels access memory 16 bytes at a time (an arena offset of "
                           "the artifact that is not a multiple of 16?)");
      }
    if (inst.params.getInt("checks", 0)) {
      // The status word goes last; its address is known once every
      // checking launch is counted (prepareProgram).
      step.statusSlot = int(checkedSteps.size());
      checkedSteps.push_back(n);
      step.arguments.push_back(0);
    }
    return;
  }
  if (inst.kernel == "matmul" || inst.kernel == "gemm") {
    if (!gemm) {
      workspaceBytes = kGemmWorkspaceBytes;
      CUresult r = driver().cuMemAlloc(&workspace, workspaceBytes);
      if (r != CUDA_SUCCESS)
        throw RuntimeError("cannot allocate the cuBLASLt workspace: " + describe(r));
      gemm = std::make_unique<GemmRunner>(
          workspace, workspaceBytes, options.gemmAutotune ? CudaOptions::kAutotuneCandidates : 1);
    }
    return prepareGemm(n, step, inst.kernel == "gemm");
  }
  if (!deviceKernelAvailable(inst.kernel))
    throw RuntimeError("kernel " + inst.kernel + " has no CUDA implementation in this shard-run");
  prepareDeviceKernel(inst.kernel, inst, step);
}

void CudaExecutor::Impl::prepareProgram() {
  steps.resize(art.program.size());
  for (size_t n = 0; n < art.program.size(); ++n) {
    const Instruction &inst = art.program[n];
    Step &step = steps[n];
    try {
      if (inst.collective && inst.kernel == "local_slice") {
        // No communication: a strided copy on the compute stream.
        step.stream = ComputeStream;
        if (deviceKernelAvailable("local_slice")) {
          prepareDeviceKernel("local_slice", inst, step);
        } else {
          Tensor in = deviceTensor(inst.inputs.at(0)), out = deviceTensor(inst.outputs.at(0));
          std::vector<int64_t> all = inst.params.getInts("starts");
          size_t dims = out.shape.size();
          if (all.size() != size_t(art.worldSize) * dims)
            throw RuntimeError("starts does not hold one index per dimension and rank");
          std::vector<int64_t> start(all.begin() + long(size_t(rank) * dims),
                                     all.begin() + long(size_t(rank + 1) * dims));
          step.kind = Step::Kind::Copies;
          step.copies = planBlockCopy(in.shape, out.shape, start, dtypeSize(out.dtype));
          step.copySource = pointerOf(inst.inputs[0]);
          step.copyDestination = pointerOf(inst.outputs[0]);
        }
      } else if (inst.collective) {
        step.kind = Step::Kind::Collective;
        step.stream = CommStream;
      } else {
        step.stream = ComputeStream;
        prepareKernel(n, step);
      }
    } catch (const std::exception &e) {
      throw RuntimeError(describeInstruction(art.program[n], n) + ": " + e.what());
    }
  }
  if (!checkedSteps.empty()) {
    size_t bytes = checkedSteps.size() * 2 * sizeof(int64_t);
    CUresult r = driver().cuMemAlloc(&statusWords, bytes);
    if (r != CUDA_SUCCESS)
      throw RuntimeError("cannot allocate the kernels' status words: " + describe(r));
    for (size_t slot = 0; slot < checkedSteps.size(); ++slot) {
      Step &step = steps[checkedSteps[slot]];
      CUdeviceptr word = statusWords + slot * 2 * sizeof(int64_t);
      if (step.kind == Step::Kind::Launch)
        step.arguments.back() = word;
      for (auto [launch, offset] : step.statusOffsets)
        std::memcpy(step.launchArguments[launch].data() + offset, &word, sizeof(word));
    }
  }
}

bool CudaExecutor::Impl::rangeOf(int buffer, ByteRange &range) const {
  size_t root = size_t(buffer);
  while (art.buffers[root].kind == BufferDesc::Kind::View)
    root = size_t(art.buffers[root].source);
  const BufferDesc &r = art.buffers[root];
  int64_t bytes = int64_t(art.buffers[size_t(buffer)].bytes());
  switch (r.kind) {
  case BufferDesc::Kind::Arena:
    range = {0, r.offset, r.offset + bytes};
    return true;
  case BufferDesc::Kind::Input:
    range = {1 + int(root), 0, bytes};
    return true;
  default:
    return false; // weights and constants are never written
  }
}

bool CudaExecutor::Impl::rangesOverlap(int a, int b) const {
  ByteRange ra, rb;
  return rangeOf(a, ra) && rangeOf(b, rb) && ra.overlaps(rb);
}

std::vector<Access> CudaExecutor::Impl::accessesOf(const Instruction &inst) const {
  std::vector<Access> accesses;
  ByteRange r;
  for (int i : inst.inputs)
    if (rangeOf(i, r))
      accesses.push_back({r, false});
  for (int o : inst.outputs)
    if (rangeOf(o, r))
      accesses.push_back({r, true});
  return accesses;
}

void CudaExecutor::Impl::planStreams() {
  HazardTracker tracker(2);
  for (size_t n = 0; n < steps.size(); ++n)
    steps[n].waits = tracker.add(int(n), steps[n].stream, accessesOf(art.program[n]));
  for (size_t n = 0; n < steps.size(); ++n)
    for (int w : steps[n].waits)
      if (!steps[size_t(w)].done)
        CU_CALL(cuEventCreate, &steps[size_t(w)].done, CU_EVENT_DISABLE_TIMING);
}

void CudaExecutor::Impl::groupGemms() {
  // Consecutive GEMMs on the compute stream that read one activation A with
  // the same problem, no bias, no C and no batch (attention's query, key and
  // value projections; an MLP's gate and up projections; each their own
  // weight), and read no result of another: one cuBLASLt call in
  // pointer-array batch mode, whose arrays hold each member's B and D (and
  // A, the same for all). The first member's step runs it, after every
  // member's waits; the others stay as empty steps that still record their
  // events, so what waits for them is unchanged.
  auto plain = [&](size_t n) -> const GemmCall * {
    const Step &s = steps[n];
    if (s.kind != Step::Kind::Gemm || s.stream != ComputeStream || s.gemms.size() != 1 ||
        !s.copies.empty() || !s.zeroFills.empty())
      return nullptr;
    const GemmCall &g = s.gemms[0];
    const GemmProblem &p = GemmRunner::problemOf(*g.prepared);
    if (p.batch != 1 || p.epilogue != CUBLASLT_EPILOGUE_DEFAULT || g.beta != 0 || g.c || g.bias)
      return nullptr;
    return &g;
  };
  // Alignments of B, C and D differ between members: the batch takes the least.
  auto sameProblem = [](GemmProblem x, GemmProblem y) {
    for (GemmProblem *p : {&x, &y})
      p->alignB = p->alignC = p->alignD = 0;
    return x.key() == y.key();
  };
  auto touches = [&](size_t m, size_t n) {
    // Whether instruction n reads or writes what m writes, or writes what m reads.
    const Instruction &x = art.program[m], &y = art.program[n];
    for (int out : x.outputs)
      for (const std::vector<int> *list : {&y.inputs, &y.outputs})
        for (int b : *list)
          if (rangesOverlap(out, b))
            return true;
    for (int in : x.inputs)
      for (int out : y.outputs)
        if (rangesOverlap(in, out))
          return true;
    return false;
  };
  std::vector<std::pair<size_t, size_t>> groups; // [first, end)
  for (size_t n = 0; n < steps.size();) {
    const GemmCall *head = plain(n);
    size_t end = n + 1;
    while (head && end < steps.size()) {
      const GemmCall *g = plain(end);
      if (!g || g->a != head->a || g->alpha != head->alpha ||
          !sameProblem(GemmRunner::problemOf(*g->prepared),
                       GemmRunner::problemOf(*head->prepared)))
        break;
      bool independent = true;
      for (size_t m = n; m < end && independent; ++m)
        independent = !touches(m, end);
      if (!independent)
        break;
      ++end;
    }
    if (end - n > 1)
      groups.emplace_back(n, end);
    n = end;
  }
  if (groups.empty())
    return;

  // Three arrays per group (the column-major problem's first operand, our
  // B; its second, our A; and D, which is also C), each 256-byte aligned.
  const size_t kAlign = 256;
  std::vector<size_t> base(groups.size());
  size_t bytes = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    base[i] = bytes;
    bytes += 3 * alignUp((groups[i].second - groups[i].first) * sizeof(CUdeviceptr), kAlign);
  }
  std::vector<CUdeviceptr> host(bytes / sizeof(CUdeviceptr), 0);
  CU_CALL(cuMemAlloc, &gemmPointers, bytes);
  size_t grouped = 0, calls = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    auto [first, end] = groups[i];
    size_t count = end - first, stride = alignUp(count * sizeof(CUdeviceptr), kAlign);
    CUdeviceptr arrays = gemmPointers + base[i];
    GemmProblem p = GemmRunner::problemOf(*steps[first].gemms[0].prepared);
    p.batch = int64_t(count);
    p.pointerArray = true;
    for (size_t m = first; m < end; ++m) {
      const GemmCall &g = steps[m].gemms[0];
      p.alignB = std::min(p.alignB, pointerAlignment(g.b));
      p.alignD = std::min(p.alignD, pointerAlignment(g.d));
      size_t slot = base[i] / sizeof(CUdeviceptr) + (m - first);
      host[slot] = g.b;
      host[slot + stride / sizeof(CUdeviceptr)] = g.a;
      host[slot + 2 * stride / sizeof(CUdeviceptr)] = g.d;
    }
    p.alignC = p.alignD;
    const GemmRunner::Prepared *prepared = gemm->prepare(p);
    if (!prepared) {
      if (options.verbose)
        std::fprintf(stderr,
                     "shard-run: rank %d: cuBLASLt has no pointer-array algorithm for %zu GEMMs "
                     "m=%lld n=%lld k=%lld (instructions %zu to %zu); they run one by one\n",
                     rank, count, (long long)p.m, (long long)p.n, (long long)p.k, first,
                     end - 1);
      continue;
    }
    Step &headStep = steps[first];
    float alpha = headStep.gemms[0].alpha;
    for (size_t m = first + 1; m < end; ++m) {
      headStep.waits.insert(headStep.waits.end(), steps[m].waits.begin(), steps[m].waits.end());
      steps[m].waits.clear();
      steps[m].gemms.clear();
    }
    std::sort(headStep.waits.begin(), headStep.waits.end());
    headStep.waits.erase(std::unique(headStep.waits.begin(), headStep.waits.end()),
                         headStep.waits.end());
    headStep.gemms = {{prepared, alpha, 0.0f, arrays + stride, arrays, 0, arrays + 2 * stride, 0}};
    grouped += count;
    ++calls;
  }
  // On the compute stream, waited for: a synchronous copy from pageable
  // memory may return before its DMA has landed.
  CU_CALL(cuMemcpyHtoDAsync, gemmPointers, host.data(), bytes, streams[ComputeStream]);
  CU_CALL(cuStreamSynchronize, streams[ComputeStream]);
  if (options.verbose)
    std::fprintf(stderr, "shard-run: rank %d runs %zu GEMMs as %zu pointer-array batched calls "
                 "(--group-gemms)\n", rank, grouped, calls);
}


void CudaExecutor::Impl::autotuneGemms() {
  if (!gemm)
    return;
  auto started = std::chrono::steady_clock::now();
  const std::string &file = options.gemmAutotuneFile;
  AutotuneRecords records;
  const std::string version = std::to_string(cublasLt().cublasLtGetVersion());
  bool rewrite = false;
  if (!file.empty()) {
    records = readAutotuneFile(file);
    if (!records.choices.empty() &&
        (records.gpu != deviceName || records.cublasLtVersion != version)) {
      std::fprintf(stderr,
                   "shard-run: rank %d: %s holds choices for %s with cuBLASLt %s, not %s with "
                   "%s: timing the GEMMs again%s\n",
                   rank, file.c_str(), records.gpu.c_str(), records.cublasLtVersion.c_str(),
                   deviceName.c_str(), version.c_str(), rank == 0 ? " and replacing them" : "");
      records.choices.clear();
    }
    rewrite = records.gpu != deviceName || records.cublasLtVersion != version;
    records.gpu = deviceName;
    records.cublasLtVersion = version;
  }
  std::set<const GemmRunner::Prepared *> tuned;
  size_t problems = 0, changed = 0, fromFile = 0;
  double firstTotal = 0, bestTotal = 0; // ms, one call of each problem
  for (size_t n = 0; n < steps.size(); ++n)
    for (const GemmCall &g : steps[n].gemms) {
      if (!tuned.insert(g.prepared).second)
        continue;
      const size_t count = GemmRunner::candidateCount(*g.prepared);
      if (count < 2)
        continue;
      const std::string key = GemmRunner::problemOf(*g.prepared).key();
      if (auto it = records.choices.find(key);
          it != records.choices.end() && it->second.second == count) {
        gemm->choose(*g.prepared, it->second.first);
        ++fromFile;
        continue;
      }
      // The call writes D: only where nothing lives yet (the arena, or the
      // device arrays of grouped GEMMs, which point into it).
      GemmRunner::Tuning t = gemm->tune(*g.prepared, g.alpha, g.a, g.b, g.beta, g.c, g.d,
                                        g.bias, streams[ComputeStream]);
      if (t.milliseconds.empty())
        continue;
      if (!file.empty()) {
        records.choices[key] = {t.chosen, t.milliseconds.size()};
        rewrite = true;
      }
      ++problems;
      float first = t.milliseconds[0], best = t.milliseconds[t.chosen];
      changed += t.chosen != 0;
      if (first >= 0) {
        firstTotal += first;
        bestTotal += best;
      }
      if (options.verbose) {
        const GemmProblem &p = GemmRunner::problemOf(*g.prepared);
        std::string times;
        for (float ms : t.milliseconds)
          times += (times.empty() ? "" : " ") +
                   (ms < 0 ? std::string("failed") : std::to_string(ms).substr(0, 7));
        std::fprintf(stderr,
                     "shard-run: rank %d: GEMM m=%lld n=%lld k=%lld%s (instruction %zu): "
                     "algorithm %zu of %zu kept; ms a call: %s\n",
                     rank, (long long)p.m, (long long)p.n, (long long)p.k,
                     p.batch > 1 ? (" batch=" + std::to_string(p.batch)).c_str() : "", n,
                     t.chosen + 1, t.milliseconds.size(), times.c_str());
      }
    }
  if (options.verbose)
    std::fprintf(stderr,
                 "shard-run: rank %d tuned %zu GEMM problems in %.0f ms (--gemm-autotune): "
                 "%zu changed from the heuristic's first algorithm; one call of each: "
                 "%.3f ms, against %.3f ms with the heuristic's first\n",
                 rank, problems,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                           started)
                     .count(),
                 changed, bestTotal, firstTotal);
  if (!file.empty() && options.verbose)
    std::fprintf(stderr, "shard-run: rank %d took %zu GEMM choices from %s\n", rank, fromFile,
                 file.c_str());
  if (rewrite && rank == 0)
    writeAutotuneFile(file, records);
}

void CudaExecutor::Impl::createCommunicators() {
  const Nccl &nc = nccl();
  // Every rank walks the same program, so the MPI broadcasts and splits
  // below happen in the same order everywhere. A group's communicator is
  // made from an MPI split plus a fresh unique id from its member 0, not
  // with ncclCommSplit: that works with any NCCL from 2.14 on, gives the
  // same members and ranks as the CPU executor's communicators, and ranks
  // outside every group create nothing.
  //
  // The communicators are nonblocking: creating one returns at once and
  // goes on in the background, and so does the connection setup of a
  // collective. ncclDone waits for both within the timeout, so a peer that
  // never connects (a firewall, the wrong NCCL_SOCKET_IFNAME) aborts the
  // job with a reason instead of hanging it.
  //
  // The unique id's MPI broadcast is polled under the same timeout: a rank
  // that is stuck before it (in loading, or on a dead GPU) would otherwise
  // hang the others there.
  auto initComm = [&](Communicator &members, int64_t rootRank, ncclComm_t &out) {
    ncclUniqueId id{};
    if (members.rank() == 0)
      checkNccl(nc.ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
    if (!members.broadcastWithin(Tensor{&id, DType::U8, {int64_t(sizeof(id))}}, 0,
                                 options.collectiveTimeoutSeconds))
      abortJob("waited " +
               secondsText(options.collectiveTimeoutSeconds) + " (--collective-timeout) " +
               (members.rank() == 0
                    ? std::string("for the other ranks to take NCCL's unique id")
                    : "for rank " + std::to_string(rootRank) + " to send NCCL's unique id") +
               " over MPI (a group of " + std::to_string(members.size()) +
               " ranks): some rank of the group never got there; its own error, if "
               "any, says why (a stuck weight load, a GPU that does not answer)");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = nc.ncclCommInitRankConfig(&out, members.size(), id, members.rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      // No communicator to ask for details or to wait on.
      if (out)
        nc.ncclCommAbort(out);
      out = nullptr;
      checkNccl(r, "ncclCommInitRankConfig", nullptr);
    }
    ncclDone(r, "ncclCommInitRankConfig (creating the communicator)", out);
  };
  try {
    initComm(*comm, 0, worldComm);
    for (const Instruction &inst : art.program) {
      if (!inst.collective || inst.kernel == "local_slice")
        continue;
      std::vector<int64_t> key = collectiveGroupKey(inst);
      if (key.empty() || groupComms.count(key))
        continue;
      std::vector<int64_t> groups(key.begin() + 1, key.end());
      int64_t size = key[0];
      int color = -1, order = 0;
      int64_t root = -1;
      for (size_t i = 0; i < groups.size(); ++i)
        if (groups[i] == rank) {
          color = int(int64_t(i) / size);
          order = int(int64_t(i) % size);
          root = groups[size_t(color) * size_t(size)];
        }
      std::unique_ptr<Communicator> members = comm->split(color, order);
      GroupComm &g = groupComms[key];
      if (!members)
        continue;
      initComm(*members, root, g.comm);
      g.size = members->size();
      g.rank = members->rank();
    }
  } catch (const std::exception &e) {
    throw RuntimeError(std::string("creating the NCCL communicators: ") + e.what() +
                       " (several ranks on one GPU are not supported by NCCL; check "
                       "--device and the launcher's GPU binding)");
  }
}

void CudaExecutor::Impl::checkNcclHealth() {
  // NCCL in the loop from the start: one all_reduce over the world, so a
  // broken NCCL setup fails at load with its own message, not in the middle
  // of a program (and a single-rank run exercises NCCL too).
  CUstream s = streams[CommStream];
  float one = 1.0f, sum = 0.0f;
  CU_CALL(cuMemcpyHtoDAsync, probe, &one, sizeof(one), s);
  ncclDone(nccl().ncclAllReduce(reinterpret_cast<const void *>(probe),
                                reinterpret_cast<void *>(probe), 1, ncclFloat32, ncclSum,
                                worldComm, s),
           "ncclAllReduce (NCCL health check)", worldComm);
  CU_CALL(cuEventRecord, finished[CommStream], s);
  waitForGpu({finished[CommStream]}, "the NCCL health check");
  CU_CALL(cuMemcpyDtoH, &sum, probe, sizeof(sum));
  if (sum != float(art.worldSize))
    throw RuntimeError("the NCCL health check (an all_reduce of 1 over " +
                       std::to_string(art.worldSize) + " rank(s)) gave " + std::to_string(sum));
}

[[noreturn]] void CudaExecutor::Impl::abortJob(const std::string &reason) {
  const Nccl &nc = nccl();
  for (auto &[key, g] : groupComms)
    if (g.comm)
      nc.ncclCommAbort(g.comm);
  if (worldComm)
    nc.ncclCommAbort(worldComm);
  groupComms.clear();
  worldComm = nullptr;
  comm->abort(reason);
  std::exit(1); // abort() does not return; this tells the compiler so
}

void CudaExecutor::Impl::waitForGpu(const std::vector<CUevent> &events, const std::string &what) {
  const CudaDriver &d = driver();
  const Nccl &nc = nccl();
  std::vector<ncclComm_t> comms;
  if (worldComm)
    comms.push_back(worldComm);
  for (auto &[key, g] : groupComms)
    if (g.comm)
      comms.push_back(g.comm);
  WaitOutcome outcome = pollUntil(
      [&] {
        bool done = true;
        for (CUevent e : events) {
          CUresult r = d.cuEventQuery(e);
          if (r == CUDA_ERROR_NOT_READY)
            done = false;
          else if (r != CUDA_SUCCESS)
            // A fault in a kernel: the context is lost, and so is the job.
            abortJob("the GPU failed while running " + what +
                     ": " + describe(r));
        }
        for (ncclComm_t c : comms) {
          ncclResult_t async = ncclSuccess;
          nc.ncclCommGetAsyncError(c, &async);
          if (async != ncclSuccess && async != ncclInProgress) {
            const char *last = nc.ncclGetLastError(c);
            abortJob("NCCL failed during " + what + ": " +
                     describe(async) + (last && *last ? std::string(": ") + last : ""));
          }
        }
        return done;
      },
      options.collectiveTimeoutSeconds);
  if (outcome == WaitOutcome::TimedOut)
    abortJob(what + " did not finish within " +
             secondsText(options.collectiveTimeoutSeconds) +
             " (--collective-timeout): a collective is probably waiting for a rank that never "
             "joined it");
}

void CudaExecutor::Impl::ncclDone(ncclResult_t status, const char *call, ncclComm_t c) {
  if (status == ncclInProgress && c) {
    if (settleComm(c, status) == WaitOutcome::TimedOut)
      abortJob(std::string(call) + " did not finish within " +
               secondsText(options.collectiveTimeoutSeconds) +
               " (--collective-timeout): NCCL is waiting for a peer. Check that every rank "
               "started, and NCCL's network settings (NCCL_SOCKET_IFNAME, NCCL_IB_HCA; "
               "NCCL_DEBUG=INFO shows where it stopped)");
  }
  checkNccl(status, call, c);
}

WaitOutcome CudaExecutor::Impl::settleComm(ncclComm_t c, ncclResult_t &status) {
  const Nccl &nc = nccl();
  return pollUntil(
      [&] {
        ncclResult_t query = nc.ncclCommGetAsyncError(c, &status);
        if (query != ncclSuccess)
          status = query;
        return status != ncclInProgress;
      },
      options.collectiveTimeoutSeconds);
}

void CudaExecutor::Impl::releaseComm(ncclComm_t c) {
  // Finalizing flushes the communicator's work; it may go on in the
  // background like everything else on a nonblocking communicator. A
  // communicator that cannot be finalized is aborted instead (its
  // resources are freed either way).
  const Nccl &nc = nccl();
  ncclResult_t status = nc.ncclCommFinalize(c);
  if (status == ncclInProgress && settleComm(c, status) == WaitOutcome::TimedOut)
    status = ncclInternalError;
  if (status == ncclSuccess)
    nc.ncclCommDestroy(c);
  else
    nc.ncclCommAbort(c);
}

void CudaExecutor::Impl::runCopies(const std::vector<Copy2D> &copies, CUdeviceptr src,
                                   CUdeviceptr dst, CUstream stream) {
  for (const Copy2D &c : copies) {
    CUDA_MEMCPY2D m{};
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = (c.fromDestination ? dst : src) + c.srcOffset;
    m.srcPitch = c.srcPitch;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.dstDevice = dst + c.dstOffset;
    m.dstPitch = c.dstPitch;
    m.WidthInBytes = c.width;
    m.Height = c.height;
    if (c.height == 1 || (c.srcPitch == c.width && c.dstPitch == c.width)) {
      // One contiguous run: a plain copy, which has no pitch limit (a 2-D
      // copy refuses pitches past the device's maximum, 2^31 - 1 bytes).
      CU_CALL(cuMemcpyDtoDAsync, m.dstDevice, m.srcDevice, c.width * c.height, stream);
      continue;
    }
    CU_CALL(cuMemcpy2DAsync, &m, stream);
  }
}

void CudaExecutor::Impl::runCollective(const Instruction &inst, CUstream stream) {
  const Nccl &nc = nccl();
  const std::string &op = inst.kernel;
  auto ncclCall = [&](ncclResult_t r, const char *call, ncclComm_t c) { ncclDone(r, call, c); };
  auto peerOf = [&](const char *what) {
    return int(inst.params.getInts(what).at(size_t(rank)));
  };
  auto voidPtr = [](CUdeviceptr p) { return reinterpret_cast<void *>(p); };
  if (op == "send" || op == "recv") {
    int peer = peerOf("peers");
    if (peer < 0)
      return;
    if (op == "send") {
      const BufferDesc &b = art.buffers.at(size_t(inst.inputs.at(0)));
      ncclCall(nc.ncclSend(voidPtr(pointerOf(inst.inputs[0])), b.bytes(), ncclUint8, peer,
                           worldComm, stream),
               "ncclSend", worldComm);
    } else {
      const BufferDesc &b = art.buffers.at(size_t(inst.outputs.at(0)));
      ncclCall(nc.ncclRecv(voidPtr(pointerOf(inst.outputs[0])), b.bytes(), ncclUint8, peer,
                           worldComm, stream),
               "ncclRecv", worldComm);
    }
    return;
  }
  int inBuffer = inst.inputs.at(0), outBuffer = inst.outputs.at(0);
  const BufferDesc &inDesc = art.buffers.at(size_t(inBuffer));
  const BufferDesc &outDesc = art.buffers.at(size_t(outBuffer));
  CUdeviceptr in = pointerOf(inBuffer), out = pointerOf(outBuffer);
  size_t elem = dtypeSize(inDesc.dtype);
  CUdeviceptr scratch0 = scratch, scratch1 = scratch + scratchBytes / 2;
  // NCCL reads `in` while it writes `out`: an input that overlaps its
  // output (other than exactly in place) is copied aside first.
  auto separate = [&](bool inPlaceOk) {
    if (inPlaceOk || !rangesOverlap(inBuffer, outBuffer))
      return in;
    CU_CALL(cuMemcpyDtoDAsync, scratch0, in, inDesc.bytes(), stream);
    return scratch0;
  };
  if (op == "collective_permute") {
    auto [dst, src] = permutePeers(inst, rank);
    CUdeviceptr send = dst >= 0 && src >= 0 ? separate(false) : in;
    if (src < 0)
      CU_CALL(cuMemsetD8Async, out, 0, outDesc.bytes(), stream);
    ncclCall(nc.ncclGroupStart(), "ncclGroupStart", nullptr);
    if (dst >= 0)
      ncclCall(nc.ncclSend(voidPtr(send), inDesc.bytes(), ncclUint8, dst, worldComm, stream),
               "ncclSend", worldComm);
    if (src >= 0)
      ncclCall(nc.ncclRecv(voidPtr(out), outDesc.bytes(), ncclUint8, src, worldComm, stream),
               "ncclRecv", worldComm);
    ncclCall(nc.ncclGroupEnd(), "ncclGroupEnd", worldComm);
    return;
  }
  const GroupComm &g = groupComms.at(collectiveGroupKey(inst));
  if (!g.comm)
    return; // this rank is in none of the groups
  int parts = g.size;
  auto dimParam = [&](const char *name, const std::vector<int64_t> &shape) {
    return collectiveDim(inst, name, shape.size());
  };
  if (op == "all_reduce") {
    Reduction r = parseReduction(inst.params.getString("reduction", "sum"));
    ncclDataType_t type = ncclReduceType(inDesc.dtype, r);
    CUdeviceptr send = separate(in == out);
    ncclCall(nc.ncclAllReduce(voidPtr(send), voidPtr(out), size_t(inDesc.numel()), type,
                              ncclOp(r), g.comm, stream),
             "ncclAllReduce", g.comm);
  } else if (op == "all_gather") {
    int64_t dim = dimParam("dim", inDesc.shape);
    if (splitAt(inDesc.shape, dim, elem).first == 1) {
      // Concatenation along dim is the byte order.
      CUdeviceptr send = separate(in == out + CUdeviceptr(g.rank) * inDesc.bytes());
      ncclCall(nc.ncclAllGather(voidPtr(send), voidPtr(out), inDesc.bytes(), ncclUint8, g.comm,
                                stream),
               "ncclAllGather", g.comm);
    } else {
      ncclCall(nc.ncclAllGather(voidPtr(in), voidPtr(scratch1), inDesc.bytes(), ncclUint8,
                                g.comm, stream),
               "ncclAllGather", g.comm);
      runCopies(planUnpackPieces(inDesc.shape, dim, parts, elem), scratch1, out, stream);
    }
  } else if (op == "reduce_scatter") {
    int64_t dim = dimParam("dim", inDesc.shape);
    Reduction r = parseReduction(inst.params.getString("reduction", "sum"));
    ncclDataType_t type = ncclReduceType(inDesc.dtype, r);
    if (inDesc.shape[size_t(dim)] % parts)
      throw RuntimeError("reduce_scatter: dimension " + std::to_string(dim) +
                         " does not split into " + std::to_string(parts) + " pieces");
    CUdeviceptr send;
    if (splitAt(inDesc.shape, dim, elem).first == 1) {
      send = separate(out == in + CUdeviceptr(g.rank) * outDesc.bytes());
    } else {
      runCopies(planPackPieces(inDesc.shape, dim, parts, elem), in, scratch1, stream);
      send = scratch1;
    }
    ncclCall(nc.ncclReduceScatter(voidPtr(send), voidPtr(out), size_t(outDesc.numel()), type,
                                  ncclOp(r), g.comm, stream),
             "ncclReduceScatter", g.comm);
  } else if (op == "all_to_all") {
    int64_t split = dimParam("split_dim", inDesc.shape),
            concat = dimParam("concat_dim", inDesc.shape);
    if (inDesc.shape[size_t(split)] % parts)
      throw RuntimeError("all_to_all: dimension " + std::to_string(split) +
                         " does not split into " + std::to_string(parts) + " pieces");
    runCopies(planPackPieces(inDesc.shape, split, parts, elem), in, scratch0, stream);
    size_t piece = inDesc.bytes() / size_t(parts);
    ncclCall(nc.ncclGroupStart(), "ncclGroupStart", nullptr);
    for (int j = 0; j < parts; ++j) {
      ncclCall(nc.ncclSend(voidPtr(scratch0 + j * piece), piece, ncclUint8, j, g.comm, stream),
               "ncclSend", g.comm);
      ncclCall(nc.ncclRecv(voidPtr(scratch1 + j * piece), piece, ncclUint8, j, g.comm, stream),
               "ncclRecv", g.comm);
    }
    ncclCall(nc.ncclGroupEnd(), "ncclGroupEnd", g.comm);
    std::vector<int64_t> pieceShape = inDesc.shape;
    pieceShape[size_t(split)] /= parts;
    runCopies(planUnpackPieces(pieceShape, concat, parts, elem), scratch1, out, stream);
  } else {
    throw RuntimeError("unknown collective '" + op + "'");
  }
}

void CudaExecutor::Impl::execute(size_t n) {
  Step &step = steps[n];
  CUstream stream = streams[step.stream];
  for (int w : step.waits)
    CU_CALL(cuStreamWaitEvent, stream, steps[size_t(w)].done, 0);
  if (options.profile)
    CU_CALL(cuEventRecord, began[n], stream);
  switch (step.kind) {
  case Step::Kind::Launch: {
    std::vector<void *> args;
    for (CUdeviceptr &p : step.arguments)
      args.push_back(&p);
    CU_CALL(cuLaunchKernel, step.function, step.grid[0], step.grid[1], step.grid[2],
            step.block[0], step.block[1], step.block[2], step.shared, stream,
            args.empty() ? nullptr : args.data(), nullptr);
    break;
  }
  case Step::Kind::DeviceKernel:
    for (size_t i = 0; i < step.launchFunctions.size(); ++i) {
      const auto &geo = step.launchGeometry[i];
      void *args[] = {step.launchArguments[i].data()};
      CU_CALL(cuLaunchKernel, step.launchFunctions[i], geo[0], geo[1], geo[2], geo[3], geo[4],
              geo[5], geo[6], stream, args, nullptr);
    }
    break;
  case Step::Kind::Gemm:
    for (auto [pointer, bytes] : step.zeroFills)
      CU_CALL(cuMemsetD8Async, pointer, 0, bytes, stream);
    runCopies(step.copies, step.copySource, step.copyDestination, stream);
    for (const GemmCall &g : step.gemms)
      gemm->run(*g.prepared, g.alpha, g.a, g.b, g.beta, g.c, g.d, g.bias, stream);
    break;
  case Step::Kind::Copies:
    runCopies(step.copies, step.copySource, step.copyDestination, stream);
    break;
  case Step::Kind::Collective:
    runCollective(art.program[n], stream);
    break;
  }
  if (options.profile)
    CU_CALL(cuEventRecord, ended[n], stream);
  if (step.done)
    CU_CALL(cuEventRecord, step.done, stream);
}

void CudaExecutor::Impl::enqueueProgram() {
  for (size_t n = 0; n < art.program.size(); ++n) {
    try {
      execute(n);
    } catch (const std::exception &e) {
      throw RuntimeError(describeInstruction(art.program[n], n) + ": " + e.what());
    }
  }
}

bool CudaExecutor::Impl::wantsGraph() const {
  using Graph = CudaOptions::CudaGraph;
  if (options.cudaGraph == Graph::Always)
    return true;
  if (options.cudaGraph == Graph::Never || options.profile || graphRefused || runs < 2)
    return false;
  // Collectives inside a graph (NCCL's capture support) are not yet
  // checked on GPUs: Auto leaves such programs as they are.
  return std::none_of(art.program.begin(), art.program.end(), [](const Instruction &inst) {
    return inst.collective && inst.kernel != "local_slice";
  });
}

void CudaExecutor::Impl::captureProgram() {
  const CudaDriver &d = driver();
  CUstream compute = streams[ComputeStream], communication = streams[CommStream];
  // Global mode: a call that would synchronize during the capture (from
  // any thread) fails instead of breaking it silently.
  CU_CALL(cuStreamBeginCapture, compute, CU_STREAM_CAPTURE_MODE_GLOBAL);
  CUgraph captured = nullptr;
  try {
    CU_CALL(cuEventRecord, fork, compute);
    CU_CALL(cuStreamWaitEvent, communication, fork, 0);
    enqueueProgram();
    CU_CALL(cuEventRecord, join, communication);
    CU_CALL(cuStreamWaitEvent, compute, join, 0);
  } catch (...) {
    // The streams leave the capture whatever went wrong in it.
    if (d.cuStreamEndCapture(compute, &captured) == CUDA_SUCCESS && captured)
      d.cuGraphDestroy(captured);
    throw;
  }
  CUresult r = d.cuStreamEndCapture(compute, &captured);
  if (r != CUDA_SUCCESS)
    throw RuntimeError("capturing the program into a CUDA graph failed: " + describe(r) +
                       " (run without --cuda-graph)");
  r = d.cuGraphInstantiate(&graph, captured, 0);
  d.cuGraphDestroy(captured);
  if (r != CUDA_SUCCESS) {
    graph = nullptr;
    throw RuntimeError("instantiating the program's CUDA graph failed: " + describe(r) +
                       " (run without --cuda-graph)");
  }
  if (options.verbose)
    std::fprintf(stderr, "shard-run: rank %d captured %zu operations into a CUDA graph\n", rank,
                 art.program.size());
}

/// The ONNX node of checking operation `ordinal` of an instruction: line
/// `ordinal` of its `checking_nodes`, else its `node`.
static std::string checkingNode(const Params &params, uint64_t ordinal) {
  std::string all = params.getString("checking_nodes", "");
  size_t start = 0;
  for (uint64_t i = 0; i < ordinal && start != std::string::npos; ++i) {
    start = all.find('\n', start);
    if (start != std::string::npos)
      ++start;
  }
  if (all.empty() || start == std::string::npos)
    return params.getString("node", "");
  std::string line = all.substr(start, all.find('\n', start) - start);
  return line.empty() ? params.getString("node", "") : line;
}

void CudaExecutor::Impl::checkStatusWords() {
  if (!statusWords)
    return;
  std::vector<int64_t> words(checkedSteps.size() * 2);
  CU_CALL(cuMemcpyDtoH, words.data(), statusWords, words.size() * sizeof(int64_t));
  for (size_t slot = 0; slot < checkedSteps.size(); ++slot) {
    if (!words[2 * slot])
      continue;
    size_t n = checkedSteps[slot];
    const Instruction &inst = art.program[n];
    std::string what = inst.kernel == "launch"
                           ? "generated kernel '" + inst.params.getString("function", "") + "'"
                           : "kernel '" + inst.kernel + "'";
    // Codes as in lib/Conversion/RTToGPU/Emitter.h (StatusCode): the low
    // 8 bits, above them the ordinal of the fused operation that reported,
    // whose node is that line of `checking_nodes`.
    int64_t code = words[2 * slot] & 0xff, value = words[2 * slot + 1];
    std::string node = checkingNode(inst.params, uint64_t(words[2 * slot]) >> 8);
    std::string problem =
        code == 1   ? "index " + std::to_string(value) + " read from the data is out of range"
        : code == 2 ? "integer division by zero (element " + std::to_string(value) +
                          " of the result)"
                    : "unknown error code " + std::to_string(code) + " in the status word";
    throw RuntimeError(what + (node.empty() ? std::string() : " (ONNX node '" + node + "')") +
                       ", instruction " + std::to_string(n) + ": " + problem +
                       "; the outputs of this run are not valid");
  }
}

std::vector<std::pair<std::string, Tensor>>
CudaExecutor::Impl::run(const std::map<std::string, HostTensor> &inputs) {
  CU_CALL(cuCtxSetCurrent, context);
  std::vector<std::pair<size_t, const HostTensor *>> uploads = bindInputs(art, inputs);
  // Pinning the outputs pays from the second download on.
  if (++runs == 2 && options.pinnedMemory == CudaOptions::PinnedMemory::Auto)
    pinOutputs();
  // From here on the GPU is busy until the end of the run.
  idle = false;
  CUstream compute = streams[ComputeStream];
  if (statusWords) // generated kernels run on the compute stream, after this
    CU_CALL(cuMemsetD8Async, statusWords, 0, checkedSteps.size() * 2 * sizeof(int64_t), compute);
  for (auto [i, t] : uploads)
    if (!t->bytes.empty())
      CU_CALL(cuMemcpyHtoDAsync, pointers[i], t->bytes.data(), art.buffers[i].bytes(), compute);
  CU_CALL(cuEventRecord, uploaded, compute);
  if (!graph && wantsGraph()) {
    if (options.cudaGraph == CudaOptions::CudaGraph::Always) {
      captureProgram();
    } else {
      try {
        captureProgram();
      } catch (const RuntimeError &e) {
        graphRefused = true; // run as it is from now on
        if (options.verbose)
          std::fprintf(stderr, "shard-run: rank %d runs the program without a CUDA graph: %s\n",
                       rank, e.what());
      }
    }
  }
  if (graph) {
    // The graph starts after the uploads on the compute stream, and its
    // communication operations after a fork from there; it ends when both
    // have joined back, so the compute stream's end is the program's.
    CU_CALL(cuGraphLaunch, graph, compute);
    for (CUevent &e : finished)
      CU_CALL(cuEventRecord, e, compute);
  } else {
    // Collectives may read inputs: the communication stream starts after
    // the uploads (the previous run ended with both streams idle).
    CU_CALL(cuStreamWaitEvent, streams[CommStream], uploaded, 0);
    enqueueProgram();
    for (int s : {ComputeStream, CommStream})
      CU_CALL(cuEventRecord, finished[s], streams[s]);
  }
  waitForGpu({finished[0], finished[1]}, "the program");
  deviceSeconds = 0;
  for (CUevent end : finished) {
    float ms = 0;
    CU_CALL(cuEventElapsedTime, &ms, uploaded, end);
    deviceSeconds = std::max(deviceSeconds, double(ms) / 1e3);
  }
  if (options.profile) {
    timings.assign(art.program.size(), 0.0);
    for (size_t n = 0; n < art.program.size(); ++n) {
      float ms = 0;
      CU_CALL(cuEventElapsedTime, &ms, began[n], ended[n]);
      timings[n] = double(ms) / 1e3;
    }
  }
  // Both streams are idle: plain synchronous copies are safe.
  auto downloadStart = std::chrono::steady_clock::now();
  downloadPinned = true;
  for (size_t o = 0; o < art.outputs.size(); ++o)
    if (hostOutputs[o].bytes) {
      CUdeviceptr source = pointers[size_t(art.outputs[o].second)];
      if (int64_t columns = outputColumnsOf(art, o)) {
        // The leading `columns` elements of each padded row, packed.
        const BufferDesc &b = art.buffers[size_t(art.outputs[o].second)];
        size_t elem = dtypeSize(b.dtype), width = size_t(columns) * elem;
        CUDA_MEMCPY2D m{};
        m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m.srcDevice = source;
        m.srcPitch = size_t(b.shape.back()) * elem;
        m.dstMemoryType = CU_MEMORYTYPE_HOST;
        m.dstHost = hostOutputs[o].data;
        m.dstPitch = width;
        m.WidthInBytes = width;
        m.Height = hostOutputs[o].bytes / width;
        CU_CALL(cuMemcpy2DAsync, &m, streams[ComputeStream]);
        CU_CALL(cuStreamSynchronize, streams[ComputeStream]);
      } else {
        CU_CALL(cuMemcpyDtoH, hostOutputs[o].data, source, hostOutputs[o].bytes);
      }
      downloadPinned = downloadPinned && hostOutputs[o].pageable.empty();
    }
  downloadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - downloadStart).count();
  idle = true;
  checkStatusWords();

  std::vector<std::pair<std::string, Tensor>> outputs;
  for (size_t o = 0; o < art.outputs.size(); ++o) {
    const BufferDesc &b = art.buffers[size_t(art.outputs[o].second)];
    outputs.emplace_back(art.outputs[o].first,
                         Tensor{hostOutputs[o].data, b.dtype, outputShape(art, o)});
  }
  return outputs;
}

//===----------------------------------------------------------------------===//
// The public face
//===----------------------------------------------------------------------===//

bool shardflow::runtime::cudaSupportBuiltIn() { return true; }

CudaExecutor::CudaExecutor(Artifact artifact, std::string weightsDir, Communicator *comm,
                           bool verifyWeights, CudaOptions options)
    : impl(std::make_unique<Impl>(std::move(artifact), weightsDir, comm, verifyWeights,
                                  options)) {}

CudaExecutor::~CudaExecutor() = default;

std::vector<std::pair<std::string, Tensor>>
CudaExecutor::run(const std::map<std::string, HostTensor> &inputs) {
  return impl->run(inputs);
}

const Artifact &CudaExecutor::artifact() const { return impl->art; }

size_t CudaExecutor::mappedWeightBytes() const { return impl->weightBytes; }

double CudaExecutor::lastDeviceSeconds() const { return impl->deviceSeconds; }

double CudaExecutor::lastDownloadSeconds() const { return impl->downloadSeconds; }

bool CudaExecutor::lastDownloadPinned() const { return impl->downloadPinned; }

size_t CudaExecutor::outputBytes() const { return impl->outputBytes; }

const std::vector<double> &CudaExecutor::instructionSeconds() const { return impl->timings; }
