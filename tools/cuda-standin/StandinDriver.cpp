//===- StandinDriver.cpp - libcuda.so.1 for machines without a GPU --------===//
//
// The part of the CUDA driver API that shard-run calls, implemented on the
// host from the driver API's documented semantics, so that shard-run's CUDA
// device (stream schedule, events, copies, launch arguments, shared
// memory opt-in, error paths) runs in the test suite. "Device" memory is
// host memory, filled with 0xff bytes (NaN as floats) when allocated, so a
// read of memory nothing wrote shows. The runtime's own kernels run through
// their host emulation (lib/Runtime/Device/CUDA/Kernels/EmulatedKernels.h);
// kernels the compiler generated run by interpreting their PTX
// (StandinPtx.h), which shard-run loads on sm_86 and sm_89 (set with
// SHARDFLOW_STANDIN_SM); a cubin cannot run, and launching one of its
// kernels fails with CUDA_ERROR_NOT_SUPPORTED and a note.
//
// Work on a stream is deferred, as on a GPU: it runs when the host waits
// (cuEventQuery, cuStreamSynchronize, ...), one operation at a time, taken
// from the first stream whose next operation may start (its awaited event
// has completed). SHARDFLOW_STANDIN_ORDER=last prefers the most recently
// created stream instead: running a program both ways shows a missing
// cuStreamWaitEvent as wrong results. Not thread-safe: shard-run calls the
// driver from one thread.
//
// Stream capture (cuStreamBeginCapture ... cuStreamEndCapture) records the
// operations instead of queueing them, with the streams that join the
// capture by waiting on an event recorded in it; cuGraphLaunch queues them
// again, in the order they were captured: the origin stream's on the stream
// launched on, each joined stream's on a stream of the graph's own. What
// the driver refuses in a capture is refused here too: synchronizing with a
// capturing stream, a synchronous copy during a capture, waiting on an event
// recorded outside it, and ending it with a joined stream not joined back.
//
// Environment: SHARDFLOW_STANDIN_ORDER (first|last), SHARDFLOW_STANDIN_SM
// (80, 86, 89 or 90: the compute capability and its shared-memory limit),
// SHARDFLOW_STANDIN_TRACE (a file that gets one line per operation run),
// SHARDFLOW_STANDIN_GPUS (how many devices there are, default 1; a process
// uses one of them, as shard-run does), SHARDFLOW_STANDIN_PINNED_LIMIT (the
// bytes of page-locked host memory cuMemHostAlloc grants in all, default no
// limit; beyond it, CUDA_ERROR_OUT_OF_MEMORY), SHARDFLOW_STANDIN_MEMORY (the
// device's bytes, default 80 GiB; cuMemAlloc past them fails the same way).
//
// Page-locked host memory (cuMemHostAlloc) is what the GPU's copy engines
// read directly: an asynchronous copy from it reads the host bytes when it
// runs, not when it is queued, so a caller that reuses such a buffer before
// the copy has completed sends the wrong bytes, here as on a GPU. (From
// pageable memory the bytes are staged when the call is made.)
//
//===----------------------------------------------------------------------===//

#include "Standin.h"
#include "StandinPtx.h"

#include "EmulatedKernels.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

using namespace shardflow;
using Clock = std::chrono::steady_clock;

namespace {

struct Op {
  enum class Kind { Work, Record, Wait } kind = Kind::Work;
  std::string what;
  std::function<void()> work;
  std::function<bool()> step; // a polled operation: true once it is done
  CUevent event = nullptr;
  uint64_t generation = 0;
  uintptr_t readsHost = 0; // a copy from page-locked memory: its start
};

/// An operation recorded by a stream capture, queued again at each launch.
struct Captured {
  CUstream origin = nullptr; // the stream it was captured on
  Op::Kind kind = Op::Kind::Work;
  std::string what;
  std::function<void()> work;
  std::function<shardflow::standin::Polled()> makePolled; // a polled operation
  CUevent event = nullptr;
};

} // namespace

struct CUgraph_st {
  CUstream origin = nullptr;     // the stream the capture began on
  std::vector<CUstream> joined;  // streams that joined it, in order
  std::vector<Captured> ops;
  bool capturing = true;
};

struct CUgraphExec_st {
  CUstream origin = nullptr;
  std::vector<Captured> ops;
  std::map<CUstream, CUstream> replay; // joined stream -> the graph's own
};

struct CUstream_st {
  int id = 0;
  std::deque<Op> ops;
  CUgraph_st *capture = nullptr; // the capture this stream takes part in
};

struct CUevent_st {
  CUgraph_st *capturedIn = nullptr; // its latest record was captured there
  bool timing = true;
  uint64_t recorded = 0;  // generation of the latest cuEventRecord
  uint64_t completed = 0; // generation the stream has reached
  Clock::time_point time;
};

struct CUfunc_st {
  std::string name;
  size_t argumentBytes = 0; // the runtime's kernels: their argument struct
  const shardflow::standin::ptx::Kernel *ptx = nullptr; // a generated kernel's PTX
  std::string ptxProblem; // why the PTX cannot be interpreted
  int maxDynamicShared = 48 * 1024;
};

struct CUmod_st {
  enum class Kind { Fatbin, Cubin, Ptx } kind = Kind::Ptx;
  std::string bytes; // cubin or PTX, searched for function names
  std::unique_ptr<shardflow::standin::ptx::Module> ptx; // Kind::Ptx, parsed
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
};

struct CUctx_st {
  int retained = 0;
};

namespace {

struct State {
  bool initialized = false;
  std::string failure; // non-empty once a stream operation has failed
  // What every call returns then: a kernel's misaligned or illegal access
  // is a sticky error of its own on a GPU, anything else an unspecified
  // launch failure.
  CUresult failureCode = CUDA_ERROR_LAUNCH_FAILED;
  int ccMajor = 9, ccMinor = 0, sharedOptin = 232448;
  int devices = 1;     // SHARDFLOW_STANDIN_GPUS
  int device = -1;     // the one whose primary context is retained
  bool preferLast = false;
  FILE *trace = nullptr;
  int nextStream = 1;
  CUstream_st legacy;
  std::vector<CUstream> streams{&legacy}; // creation order
  std::map<uintptr_t, size_t> allocations; // base -> bytes
  size_t allocated = 0;
  std::map<uintptr_t, size_t> pinned; // cuMemHostAlloc: base -> bytes
  size_t pinnedBytes = 0, pinnedLimit = SIZE_MAX;
  size_t totalMemory = size_t(80) << 30; // SHARDFLOW_STANDIN_MEMORY
  CUctx_st primary;

  State() {
    if (const char *order = std::getenv("SHARDFLOW_STANDIN_ORDER"))
      preferLast = std::strcmp(order, "last") == 0;
    if (const char *sm = std::getenv("SHARDFLOW_STANDIN_SM")) {
      int v = std::atoi(sm);
      ccMajor = v / 10;
      ccMinor = v % 10;
      sharedOptin = v == 80 ? 166912 : v >= 90 ? 232448 : 101376;
    }
    if (const char *path = std::getenv("SHARDFLOW_STANDIN_TRACE"))
      trace = std::fopen(path, "a");
    if (const char *gpus = std::getenv("SHARDFLOW_STANDIN_GPUS"))
      devices = std::max(1, std::atoi(gpus));
    if (const char *limit = std::getenv("SHARDFLOW_STANDIN_PINNED_LIMIT"))
      pinnedLimit = size_t(std::strtoull(limit, nullptr, 10));
    if (const char *memory = std::getenv("SHARDFLOW_STANDIN_MEMORY"))
      totalMemory = size_t(std::strtoull(memory, nullptr, 10));
  }
};

State &state() {
  static State s;
  return s;
}


/// The stream a handle names; 0 and the legacy/per-thread handles are the
/// one default stream.
CUstream_st *streamOf(CUstream s) {
  if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
    return &state().legacy;
  return s;
}

bool ready(const Op &op) {
  return op.kind != Op::Kind::Wait || op.event->completed >= op.generation;
}

void fail(const std::string &what, CUresult code = CUDA_ERROR_LAUNCH_FAILED) {
  State &st = state();
  st.failure = what;
  st.failureCode = code;
  standin::note("a stream operation failed, the context is lost: " + what);
  for (CUstream s : st.streams)
    s->ops.clear();
}

/// Runs the next operation the schedule picks; false when none could run
/// (none is left, or those at the streams' heads wait for events or for
/// other processes).
bool runOne() {
  State &st = state();
  size_t n = st.streams.size();
  for (size_t i = 0; i < n; ++i) {
    CUstream s = st.streams[st.preferLast ? n - 1 - i : i];
    if (s->ops.empty() || !ready(s->ops.front()))
      continue;
    if (s->ops.front().step) {
      // A polled operation stays at its stream's head until it is done;
      // meanwhile other streams go on, as on a GPU.
      bool done = false;
      try {
        done = s->ops.front().step();
      } catch (const std::exception &e) {
        fail(s->ops.front().what + ": " + e.what());
        return true;
      }
      if (!done)
        continue;
      if (st.trace) {
        std::fprintf(st.trace, "stream %d: %s\n", s->id, s->ops.front().what.c_str());
        std::fflush(st.trace);
      }
      s->ops.pop_front();
      return true;
    }
    Op op = std::move(s->ops.front());
    s->ops.pop_front();
    switch (op.kind) {
    case Op::Kind::Work:
      if (st.trace) {
        std::fprintf(st.trace, "stream %d: %s\n", s->id, op.what.c_str());
        std::fflush(st.trace);
      }
      try {
        op.work();
      } catch (const standin::ptx::Fault &e) {
        using Kind = standin::ptx::Fault::Kind;
        fail(op.what + ": " + e.what(), e.kind == Kind::Misaligned       ? CUDA_ERROR_MISALIGNED_ADDRESS
                                        : e.kind == Kind::IllegalAddress ? CUDA_ERROR_ILLEGAL_ADDRESS
                                                                         : CUDA_ERROR_LAUNCH_FAILED);
      } catch (const std::exception &e) {
        fail(op.what + ": " + e.what());
      }
      break;
    case Op::Kind::Record:
      op.event->completed = op.generation;
      op.event->time = Clock::now();
      break;
    case Op::Kind::Wait:
      break;
    }
    return true;
  }
  return false;
}

bool idle(CUstream_st *s) { return s->ops.empty(); }

/// Whether some stream's next operation is a polled one (it waits for
/// another process, which will get there: its own timeout ends it if not).
bool polling() {
  for (CUstream s : state().streams)
    if (!s->ops.empty() && s->ops.front().step && ready(s->ops.front()))
      return true;
  return false;
}

/// Runs operations until `done` or none can run; waits while one polls.
template <typename Done> void runUntil(Done done) {
  while (!done()) {
    if (runOne())
      continue;
    if (!polling())
      return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void drain(CUstream_st *s) {
  runUntil([s] { return idle(s); });
}

void drainAll() {
  runUntil([] { return false; });
}

bool eventDone(CUevent e) { return e->completed >= e->recorded; }

/// A stream the scheduler runs, numbered in creation order.
CUstream newStream() {
  auto *s = new CUstream_st;
  s->id = state().nextStream++;
  state().streams.push_back(s);
  return s;
}

/// Whether some stream is being captured.
bool anyCapture() {
  for (CUstream s : state().streams)
    if (s->capture)
      return true;
  return false;
}

/// What the driver answers a call that a stream capture does not allow.
CUresult captureRefuses(const std::string &what) {
  standin::note(what + " is not allowed (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)");
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

std::string hex(uintptr_t p) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(p));
  return text;
}

// Every call but the error texts starts with these: the driver must be
// initialized, and a failed stream operation poisons the context.
#define STANDIN_ENTER()                                                                            \
  do {                                                                                             \
    if (!state().initialized)                                                                      \
      return CUDA_ERROR_NOT_INITIALIZED;                                                           \
    if (!state().failure.empty())                                                                  \
      return state().failureCode;                                                                  \
  } while (0)

CUresult invalid(const std::string &why) {
  standin::note(why);
  return CUDA_ERROR_INVALID_VALUE;
}

/// Whether [p, p + bytes) lies in page-locked host memory (cuMemHostAlloc).
bool isPinned(const void *p, size_t bytes) {
  const std::map<uintptr_t, size_t> &pinned = state().pinned;
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = pinned.upper_bound(a);
  if (it == pinned.begin())
    return false;
  --it;
  return a + bytes <= it->first + it->second;
}

/// The operation just queued on `stream`; null when it was captured or the
/// context has failed.
Op *queuedLast(CUstream stream) {
  CUstream_st *s = streamOf(stream);
  return s->capture || s->ops.empty() ? nullptr : &s->ops.back();
}

/// A synchronous copy's line in the trace (the host waits for it).
void traceHostCopy(const std::string &what) {
  if (FILE *trace = state().trace) {
    std::fprintf(trace, "stream %d: %s\n", state().legacy.id, what.c_str());
    std::fflush(trace);
  }
}

CUresult checkDevice(uintptr_t pointer, size_t bytes, const char *what) {
  std::string problem = standin::checkRange(pointer, bytes, what);
  if (problem.empty())
    return CUDA_SUCCESS;
  standin::note(problem);
  return CUDA_ERROR_INVALID_VALUE;
}

bool overlaps(uintptr_t a, uintptr_t b, size_t bytes) {
  return bytes && a < b + bytes && b < a + bytes;
}

/// Whether a row of one 2-D range shares a byte with a row of the other
/// (interleaved columns do not).
bool rowsOverlap(uintptr_t a, size_t aPitch, uintptr_t b, size_t bPitch, size_t width,
                 size_t height) {
  struct Run {
    uintptr_t start;
    bool first;
  };
  std::vector<Run> runs;
  runs.reserve(2 * height);
  for (size_t row = 0; row < height; ++row) {
    runs.push_back({a + row * aPitch, true});
    runs.push_back({b + row * bPitch, false});
  }
  std::sort(runs.begin(), runs.end(), [](const Run &x, const Run &y) { return x.start < y.start; });
  // Runs of one range never overlap each other (width <= pitch), so an
  // overlap shows between neighbours in start order.
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i].start < runs[i - 1].start + width && runs[i].first != runs[i - 1].first)
      return true;
  return false;
}

} // namespace

//===----------------------------------------------------------------------===//
// What the other stand-ins use
//===----------------------------------------------------------------------===//

namespace shardflow::standin {

bool inAllocation(uintptr_t pointer, size_t bytes) {
  if (!bytes)
    return true;
  const auto &all = state().allocations;
  auto it = all.upper_bound(pointer);
  if (it == all.begin())
    return false;
  --it;
  return pointer - it->first <= it->second && bytes <= it->second - (pointer - it->first);
}

std::string checkRange(uintptr_t pointer, size_t bytes, const char *what) {
  if (inAllocation(pointer, bytes))
    return "";
  return std::string(what) + ": [" + hex(pointer) + ", +" + std::to_string(bytes) +
         ") is not inside one device allocation";
}

/// Appends `op` to `stream`; false (and nothing queued) once the context
/// has failed.
static bool push(CUstream stream, Op op) {
  if (!state().failure.empty())
    return false;
  streamOf(stream)->ops.push_back(std::move(op));
  return true;
}

/// Records `op` in the capture `stream` takes part in.
static bool capture(CUstream stream, Captured op) {
  if (!state().failure.empty())
    return false;
  op.origin = stream;
  stream->capture->ops.push_back(std::move(op));
  return true;
}

bool enqueue(CUstream stream, std::string what, std::function<void()> work) {
  if (streamOf(stream)->capture) {
    Captured op;
    op.what = std::move(what);
    op.work = std::move(work);
    return capture(stream, std::move(op));
  }
  Op op;
  op.what = std::move(what);
  op.work = std::move(work);
  return push(stream, std::move(op));
}

bool enqueuePolled(CUstream stream, std::function<Polled()> make) {
  if (streamOf(stream)->capture) {
    Captured op;
    op.makePolled = std::move(make);
    return capture(stream, std::move(op));
  }
  Polled polled = make();
  Op op;
  op.what = std::move(polled.what);
  op.step = std::move(polled.step);
  return push(stream, std::move(op));
}

int currentDevice() { return state().device; }

void note(const std::string &message) {
  std::fprintf(stderr, "cuda stand-in: %s\n", message.c_str());
}

} // namespace shardflow::standin

//===----------------------------------------------------------------------===//
// The driver API
//===----------------------------------------------------------------------===//

namespace {

/// A generated kernel: its PTX runs through the interpreter when the
/// stream reaches the launch.
CUresult launchPtx(const CUfunc_st &f, std::array<unsigned, 3> grid,
                   std::array<unsigned, 3> block, unsigned sharedMemBytes, CUstream hStream,
                   void **kernelParams) {
  const standin::ptx::Kernel &k = *f.ptx;
  unsigned threads = block[0] * block[1] * block[2];
  if (k.maxThreads[0]) {
    unsigned most = k.maxThreads[0] * k.maxThreads[1] * k.maxThreads[2];
    bool exact = block[0] == k.maxThreads[0] && block[1] == k.maxThreads[1] &&
                 block[2] == k.maxThreads[2];
    if (k.exactThreads ? !exact : threads > most)
      return invalid("cuLaunchKernel " + f.name + ": a block of " + std::to_string(threads) +
                     " threads, but its PTX " +
                     (k.exactThreads ? "requires " : "allows at most ") +
                     std::to_string(k.maxThreads[0]) + "x" + std::to_string(k.maxThreads[1]) +
                     "x" + std::to_string(k.maxThreads[2]));
  }
  if (k.staticShared > 48 * 1024 ||
      k.staticShared + sharedMemBytes > size_t(std::max(f.maxDynamicShared, 48 * 1024)))
    return invalid("cuLaunchKernel " + f.name + ": " + std::to_string(k.staticShared) +
                   " bytes of static and " + std::to_string(sharedMemBytes) +
                   " of dynamic shared memory exceed what the function may use");
  if (!k.parameters.empty() && !kernelParams)
    return invalid("cuLaunchKernel " + f.name + ": no kernel parameters");
  standin::ptx::Launch launch;
  for (int d = 0; d < 3; ++d) {
    launch.grid[d] = grid[d];
    launch.block[d] = block[d];
  }
  launch.dynamicShared = sharedMemBytes;
  // The parameters are copied at launch, as the driver does.
  launch.parameters.assign(k.parameterBytes, 0);
  for (size_t i = 0; i < k.parameters.size(); ++i) {
    if (!kernelParams[i])
      return invalid("cuLaunchKernel " + f.name + ": parameter " + std::to_string(i) +
                     " is null");
    std::memcpy(launch.parameters.data() + k.parameters[i].offset, kernelParams[i],
                k.parameters[i].bytes);
  }
  std::string what = "launch " + f.name + " grid " + std::to_string(grid[0]) + "x" +
                     std::to_string(grid[1]) + "x" + std::to_string(grid[2]) + " block " +
                     std::to_string(block[0]) + "x" + std::to_string(block[1]) + "x" +
                     std::to_string(block[2]) + " shared " + std::to_string(sharedMemBytes) +
                     " (PTX)";
  standin::enqueue(hStream, what, [&k, launch] {
    standin::ptx::run(k, launch, [](uint64_t address, size_t bytes) {
      return standin::inAllocation(uintptr_t(address), bytes);
    });
  });
  return CUDA_SUCCESS;
}

} // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned int Flags) {
  if (Flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  state().initialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
  if (!driverVersion)
    return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  static const std::map<CUresult, const char *> names = {
#define STANDIN_NAME(code) {code, #code},
      STANDIN_NAME(CUDA_SUCCESS) STANDIN_NAME(CUDA_ERROR_INVALID_VALUE)
          STANDIN_NAME(CUDA_ERROR_OUT_OF_MEMORY) STANDIN_NAME(CUDA_ERROR_NOT_INITIALIZED)
              STANDIN_NAME(CUDA_ERROR_INVALID_DEVICE) STANDIN_NAME(CUDA_ERROR_INVALID_IMAGE)
                  STANDIN_NAME(CUDA_ERROR_INVALID_CONTEXT) STANDIN_NAME(CUDA_ERROR_INVALID_HANDLE)
                      STANDIN_NAME(CUDA_ERROR_NOT_FOUND) STANDIN_NAME(CUDA_ERROR_NOT_READY)
                          STANDIN_NAME(CUDA_ERROR_LAUNCH_FAILED)
                              STANDIN_NAME(CUDA_ERROR_NOT_SUPPORTED)
                                  STANDIN_NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
                                      STANDIN_NAME(CUDA_ERROR_MISALIGNED_ADDRESS)
#undef STANDIN_NAME
  };
  auto it = names.find(error);
  if (!pStr || it == names.end()) {
    if (pStr)
      *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pStr = it->second;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  static const std::map<CUresult, const char *> texts = {
      {CUDA_SUCCESS, "no error"},
      {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
      {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
      {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
      {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
      {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
      {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
      {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
      {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
      {CUDA_ERROR_NOT_READY, "device not ready"},
      {CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"},
      {CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"},
      {CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"},
      {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
  };
  auto it = texts.find(error);
  if (!pStr || it == texts.end()) {
    if (pStr)
      *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pStr = it->second;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
  STANDIN_ENTER();
  if (!count)
    return CUDA_ERROR_INVALID_VALUE;
  *count = state().devices;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  STANDIN_ENTER();
  if (!device)
    return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= state().devices)
    return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  STANDIN_ENTER();
  if (!pi)
    return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= state().devices)
    return CUDA_ERROR_INVALID_DEVICE;
  const State &st = state();
  switch (attrib) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *pi = st.ccMajor;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *pi = st.ccMinor;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *pi = st.sharedOptin;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    *pi = 48 * 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *pi = 132;
    break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
    *pi = 32;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *pi = 1024;
    break;
  default:
    return invalid("cuDeviceGetAttribute: attribute " + std::to_string(int(attrib)) +
                   " is not known to the stand-in");
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
  STANDIN_ENTER();
  if (!name || len <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= state().devices)
    return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, size_t(len), "Shardflow CUDA stand-in (host emulation, sm_%d%d)",
                state().ccMajor, state().ccMinor);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  STANDIN_ENTER();
  if (!pctx)
    return CUDA_ERROR_INVALID_VALUE;
  State &st = state();
  if (dev < 0 || dev >= st.devices)
    return CUDA_ERROR_INVALID_DEVICE;
  if (st.primary.retained > 0 && st.device != dev)
    return invalid("cuDevicePrimaryCtxRetain: device " + std::to_string(dev) +
                   " while device " + std::to_string(st.device) +
                   "'s context is retained; the stand-in runs one device per process");
  st.device = dev;
  ++state().primary.retained;
  *pctx = &state().primary;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  STANDIN_ENTER();
  if (dev != state().device)
    return CUDA_ERROR_INVALID_DEVICE;
  if (state().primary.retained <= 0)
    return invalid("cuDevicePrimaryCtxRelease: the primary context is not retained");
  --state().primary.retained;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  STANDIN_ENTER();
  if (ctx && (ctx != &state().primary || state().primary.retained <= 0))
    return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  STANDIN_ENTER();
  if (anyCapture())
    return captureRefuses("cuCtxSynchronize during a stream capture");
  drainAll();
  return state().failure.empty() ? CUDA_SUCCESS : state().failureCode;
}

CUresult CUDAAPI cuMemGetInfo(size_t *free, size_t *total) {
  STANDIN_ENTER();
  if (!free || !total)
    return CUDA_ERROR_INVALID_VALUE;
  *total = state().totalMemory;
  *free = state().totalMemory - std::min(state().totalMemory, state().allocated);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
  STANDIN_ENTER();
  if (!dptr || bytesize == 0)
    return CUDA_ERROR_INVALID_VALUE;
  State &st = state();
  if (bytesize > st.totalMemory - std::min(st.totalMemory, st.allocated))
    return CUDA_ERROR_OUT_OF_MEMORY;
  size_t rounded = (bytesize + 255) / 256 * 256;
  void *p = std::aligned_alloc(256, rounded);
  if (!p)
    return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(p, 0xff, rounded);
  st.allocations[reinterpret_cast<uintptr_t>(p)] = bytesize;
  st.allocated += bytesize;
  *dptr = reinterpret_cast<uintptr_t>(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  STANDIN_ENTER();
  State &st = state();
  auto it = st.allocations.find(uintptr_t(dptr));
  if (it == st.allocations.end())
    return invalid("cuMemFree: " + hex(dptr) + " is not an allocation's start");
  drainAll(); // cuMemFree waits for the device
  st.allocated -= it->second;
  st.allocations.erase(it);
  std::free(reinterpret_cast<void *>(dptr));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  STANDIN_ENTER();
  if (!pp || bytesize == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (Flags & ~unsigned(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                        CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  State &st = state();
  if (bytesize > st.pinnedLimit - std::min(st.pinnedLimit, st.pinnedBytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  void *p = std::malloc(bytesize);
  if (!p)
    return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(p, 0xff, bytesize);
  st.pinned[reinterpret_cast<uintptr_t>(p)] = bytesize;
  st.pinnedBytes += bytesize;
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void *p) {
  STANDIN_ENTER();
  State &st = state();
  auto it = st.pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == st.pinned.end())
    return invalid("cuMemFreeHost: " + hex(reinterpret_cast<uintptr_t>(p)) +
                   " is not the start of page-locked memory from cuMemHostAlloc");
  // A copy still queued from this memory would read freed bytes: the
  // caller must have waited for it.
  for (CUstream s : st.streams)
    for (const Op &op : s->ops)
      if (op.readsHost && op.readsHost >= it->first && op.readsHost < it->first + it->second)
        return invalid("cuMemFreeHost: a queued copy (" + op.what +
                       ") still reads this memory; synchronize first");
  st.pinnedBytes -= it->second;
  st.pinned.erase(it);
  std::free(p);
  return CUDA_SUCCESS;
}

// The synchronous copies and memset run in the legacy stream: after its
// earlier work, but not after non-blocking streams' work, which they do not
// wait for (a caller must synchronize with those itself, as on a GPU).

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  STANDIN_ENTER();
  if (CUresult r = checkDevice(dstDevice, ByteCount, "cuMemcpyHtoD destination"))
    return r;
  if (anyCapture())
    return captureRefuses("a synchronous copy during a stream capture");
  drain(&state().legacy);
  if (ByteCount)
    std::memcpy(reinterpret_cast<void *>(dstDevice), srcHost, ByteCount);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  STANDIN_ENTER();
  if (CUresult r = checkDevice(srcDevice, ByteCount, "cuMemcpyDtoH source"))
    return r;
  if (anyCapture())
    return captureRefuses("a synchronous copy during a stream capture");
  drain(&state().legacy);
  traceHostCopy("copy device to host " + std::to_string(ByteCount) + " B" +
                (isPinned(dstHost, ByteCount) ? " (pinned)" : ""));
  if (ByteCount)
    std::memcpy(dstHost, reinterpret_cast<const void *>(srcDevice), ByteCount);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream) {
  STANDIN_ENTER();
  if (CUresult r = checkDevice(dstDevice, ByteCount, "cuMemcpyHtoDAsync destination"))
    return r;
  if (isPinned(srcHost, ByteCount)) {
    // Read when the copy runs: the caller must not reuse the memory before
    // the copy has completed.
    auto *src = static_cast<const uint8_t *>(srcHost);
    standin::enqueue(hStream, "copy host to device " + std::to_string(ByteCount) + " B (pinned)",
                     [dstDevice, src, ByteCount] {
                       std::memcpy(reinterpret_cast<void *>(dstDevice), src, ByteCount);
                     });
    if (Op *op = queuedLast(hStream))
      op->readsHost = reinterpret_cast<uintptr_t>(srcHost);
    return CUDA_SUCCESS;
  }
  // Pageable host memory: the bytes are staged before the call returns,
  // and the caller may reuse its buffer at once.
  auto staged = std::make_shared<std::vector<uint8_t>>(
      static_cast<const uint8_t *>(srcHost), static_cast<const uint8_t *>(srcHost) + ByteCount);
  standin::enqueue(hStream, "copy host to device " + std::to_string(ByteCount) + " B",
                   [dstDevice, staged] {
                     if (!staged->empty())
                       std::memcpy(reinterpret_cast<void *>(dstDevice), staged->data(),
                                   staged->size());
                   });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream) {
  STANDIN_ENTER();
  if (CUresult r = checkDevice(srcDevice, ByteCount, "cuMemcpyDtoDAsync source"))
    return r;
  if (CUresult r = checkDevice(dstDevice, ByteCount, "cuMemcpyDtoDAsync destination"))
    return r;
  if (overlaps(srcDevice, dstDevice, ByteCount))
    return invalid("cuMemcpyDtoDAsync: source and destination overlap (undefined on a GPU)");
  standin::enqueue(hStream, "copy device to device " + std::to_string(ByteCount) + " B",
                   [=] {
                     if (ByteCount)
                       std::memcpy(reinterpret_cast<void *>(dstDevice),
                                   reinterpret_cast<const void *>(srcDevice), ByteCount);
                   });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *pCopy, CUstream hStream) {
  STANDIN_ENTER();
  if (!pCopy)
    return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY2D c = *pCopy;
  bool toHost = c.dstMemoryType == CU_MEMORYTYPE_HOST;
  if (c.srcMemoryType != CU_MEMORYTYPE_DEVICE ||
      (c.dstMemoryType != CU_MEMORYTYPE_DEVICE && !toHost))
    return invalid("cuMemcpy2DAsync: the stand-in copies device to device or to host only");
  const size_t maxPitch = 2147483647; // CU_DEVICE_ATTRIBUTE_MAX_PITCH
  if (c.srcPitch > maxPitch || c.dstPitch > maxPitch)
    return invalid("cuMemcpy2DAsync: a pitch above the device's maximum (2^31 - 1)");
  if (c.WidthInBytes > c.srcPitch || c.WidthInBytes > c.dstPitch)
    return invalid("cuMemcpy2DAsync: the width exceeds a pitch");
  if (!c.WidthInBytes || !c.Height)
    return CUDA_SUCCESS;
  uintptr_t src = c.srcDevice + c.srcY * c.srcPitch + c.srcXInBytes;
  uintptr_t dst = (toHost ? reinterpret_cast<uintptr_t>(c.dstHost) : c.dstDevice) +
                  c.dstY * c.dstPitch + c.dstXInBytes;
  size_t srcSpan = (c.Height - 1) * c.srcPitch + c.WidthInBytes;
  size_t dstSpan = (c.Height - 1) * c.dstPitch + c.WidthInBytes;
  if (CUresult r = checkDevice(src, srcSpan, "cuMemcpy2DAsync source"))
    return r;
  // Runs when the copy does; to host, the caller waits for the stream.
  auto rows = [=] {
    for (size_t row = 0; row < c.Height; ++row)
      std::memcpy(reinterpret_cast<void *>(dst + row * c.dstPitch),
                  reinterpret_cast<const void *>(src + row * c.srcPitch), c.WidthInBytes);
  };
  std::string size = std::to_string(c.Height) + " x " + std::to_string(c.WidthInBytes) + " B";
  if (toHost) {
    standin::enqueue(hStream,
                     "copy 2D device to host " + size +
                         (isPinned(reinterpret_cast<void *>(dst), dstSpan) ? " (pinned)" : ""),
                     rows);
    return CUDA_SUCCESS;
  }
  if (CUresult r = checkDevice(dst, dstSpan, "cuMemcpy2DAsync destination"))
    return r;
  if (src < dst + dstSpan && dst < src + srcSpan &&
      rowsOverlap(src, c.srcPitch, dst, c.dstPitch, c.WidthInBytes, c.Height))
    return invalid("cuMemcpy2DAsync: source and destination overlap (undefined on a GPU)");
  standin::enqueue(hStream, "copy 2D " + size, rows);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  STANDIN_ENTER();
  if (CUresult r = checkDevice(dstDevice, N, "cuMemsetD8 destination"))
    return r;
  drain(&state().legacy);
  if (N)
    std::memset(reinterpret_cast<void *>(dstDevice), uc, N);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream) {
  STANDIN_ENTER();
  if (CUresult r = checkDevice(dstDevice, N, "cuMemsetD8Async destination"))
    return r;
  standin::enqueue(hStream, "memset " + std::to_string(N) + " B", [=] {
    if (N)
      std::memset(reinterpret_cast<void *>(dstDevice), uc, N);
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  STANDIN_ENTER();
  if (!phStream || (Flags & ~unsigned(CU_STREAM_NON_BLOCKING)))
    return CUDA_ERROR_INVALID_VALUE;
  *phStream = newStream();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  STANDIN_ENTER();
  State &st = state();
  auto it = std::find(st.streams.begin(), st.streams.end(), hStream);
  if (!hStream || it == st.streams.end() || hStream == &st.legacy)
    return CUDA_ERROR_INVALID_HANDLE;
  // Work still queued completes first, as the driver lets it.
  drain(hStream);
  st.streams.erase(std::find(st.streams.begin(), st.streams.end(), hStream));
  delete hStream;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  STANDIN_ENTER();
  if (streamOf(hStream)->capture)
    return captureRefuses("cuStreamSynchronize on a stream that is being captured");
  drain(streamOf(hStream));
  return state().failure.empty() ? CUDA_SUCCESS : state().failureCode;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  STANDIN_ENTER();
  if (!hEvent || Flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  CUstream_st *stream = streamOf(hStream);
  if (hEvent->capturedIn && hEvent->capturedIn->capturing) {
    // Waiting on an event recorded in a capture joins it.
    CUgraph_st *g = hEvent->capturedIn;
    if (stream->capture && stream->capture != g)
      return captureRefuses("cuStreamWaitEvent joins two captures");
    if (!stream->capture) {
      if (stream == &state().legacy)
        return captureRefuses("the legacy stream cannot join a capture");
      stream->capture = g;
      g->joined.push_back(stream);
    }
    Captured op;
    op.kind = Op::Kind::Wait;
    op.event = hEvent;
    standin::capture(stream, std::move(op));
    return CUDA_SUCCESS;
  }
  if (stream->capture) {
    standin::note("cuStreamWaitEvent: a capturing stream waits on an event recorded outside "
                  "the capture");
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  // Waits for the event's latest record as of this call; an event never
  // recorded is complete.
  Op op;
  op.kind = Op::Kind::Wait;
  op.event = hEvent;
  op.generation = hEvent->recorded;
  stream->ops.push_back(std::move(op));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  STANDIN_ENTER();
  if (!phEvent ||
      (Flags & ~unsigned(CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC)))
    return CUDA_ERROR_INVALID_VALUE;
  auto *e = new CUevent_st;
  e->timing = !(Flags & CU_EVENT_DISABLE_TIMING);
  *phEvent = e;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
  STANDIN_ENTER();
  if (!hEvent)
    return CUDA_ERROR_INVALID_HANDLE;
  // Waits already enqueued still refer to it: it is kept (a few bytes).
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  STANDIN_ENTER();
  if (!hEvent)
    return CUDA_ERROR_INVALID_HANDLE;
  if (CUstream_st *stream = streamOf(hStream); stream->capture) {
    Captured op;
    op.kind = Op::Kind::Record;
    op.event = hEvent;
    hEvent->capturedIn = stream->capture;
    standin::capture(stream, std::move(op));
    return CUDA_SUCCESS;
  }
  hEvent->capturedIn = nullptr;
  Op op;
  op.kind = Op::Kind::Record;
  op.event = hEvent;
  op.generation = ++hEvent->recorded;
  streamOf(hStream)->ops.push_back(std::move(op));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  STANDIN_ENTER();
  if (!hEvent)
    return CUDA_ERROR_INVALID_HANDLE;
  if (hEvent->capturedIn && hEvent->capturedIn->capturing)
    return captureRefuses("cuEventQuery on an event recorded in a capture");
  // One operation per query: the caller's polling loop runs the program.
  if (!eventDone(hEvent))
    runOne();
  if (!state().failure.empty())
    return state().failureCode;
  return eventDone(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  STANDIN_ENTER();
  if (!pMilliseconds || !hStart || !hEnd)
    return CUDA_ERROR_INVALID_VALUE;
  if (!hStart->timing || !hEnd->timing || !hStart->recorded || !hEnd->recorded ||
      hStart->capturedIn || hEnd->capturedIn)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!eventDone(hStart) || !eventDone(hEnd))
    return CUDA_ERROR_NOT_READY;
  *pMilliseconds =
      std::chrono::duration<float, std::milli>(hEnd->time - hStart->time).count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
  STANDIN_ENTER();
  if (!module || !image)
    return CUDA_ERROR_INVALID_VALUE;
  const auto *bytes = static_cast<const uint8_t *>(image);
  auto m = std::make_unique<CUmod_st>();
  uint32_t magic;
  std::memcpy(&magic, bytes, sizeof(magic));
  if (magic == 0xBA55ED50u) {
    m->kind = CUmod_st::Kind::Fatbin; // nvcc's fatbin: the runtime's kernels
  } else if (std::memcmp(bytes, "\x7f" "ELF", 4) == 0 && bytes[4] == 2) {
    // A 64-bit ELF cubin ends with its section headers.
    uint64_t shoff;
    uint16_t shentsize, shnum;
    std::memcpy(&shoff, bytes + 0x28, 8);
    std::memcpy(&shentsize, bytes + 0x3A, 2);
    std::memcpy(&shnum, bytes + 0x3C, 2);
    m->kind = CUmod_st::Kind::Cubin;
    m->bytes.assign(reinterpret_cast<const char *>(bytes), shoff + size_t(shentsize) * shnum);
  } else if (std::strstr(static_cast<const char *>(image), ".version")) {
    m->kind = CUmod_st::Kind::Ptx;
    m->bytes = static_cast<const char *>(image);
    m->ptx = standin::ptx::parse(m->bytes);
  } else {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  *module = m.release();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues) {
  STANDIN_ENTER();
  for (unsigned i = 0; i < numOptions; ++i) {
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER && optionValues[i])
      static_cast<char *>(optionValues[i])[0] = 0;
    else if (options[i] != CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES &&
             options[i] != CU_JIT_ERROR_LOG_BUFFER)
      return invalid("cuModuleLoadDataEx: JIT option " + std::to_string(int(options[i])) +
                     " is not known to the stand-in");
  }
  return cuModuleLoadData(module, image);
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  STANDIN_ENTER();
  if (!hfunc || !hmod || !name)
    return CUDA_ERROR_INVALID_VALUE;
  auto &slot = hmod->functions[name];
  if (!slot) {
    size_t argumentBytes = 0;
    bool found = false;
    if (hmod->kind == CUmod_st::Kind::Fatbin) {
      argumentBytes = runtime::cuda::emulatedArgumentBytes(name);
      found = argumentBytes > 0;
    } else if (hmod->kind == CUmod_st::Kind::Ptx) {
      std::string entry = std::string(".entry ") + name;
      size_t at = hmod->bytes.find(entry);
      found = at != std::string::npos &&
              std::strchr("( \t\r\n", hmod->bytes[at + entry.size()]) != nullptr;
    } else {
      found = hmod->bytes.find(std::string(name) + '\0') != std::string::npos;
    }
    if (!found) {
      hmod->functions.erase(name);
      return CUDA_ERROR_NOT_FOUND;
    }
    slot = std::make_unique<CUfunc_st>();
    slot->name = name;
    slot->argumentBytes = argumentBytes;
    if (hmod->ptx) {
      auto it = hmod->ptx->kernels.find(name);
      if (!hmod->ptx->problem.empty())
        slot->ptxProblem = hmod->ptx->problem;
      else if (it == hmod->ptx->kernels.end())
        slot->ptxProblem = "the PTX parser did not find it";
      else if (!it->second.problem.empty())
        slot->ptxProblem = it->second.problem;
      else
        slot->ptx = &it->second;
    }
  }
  *hfunc = slot.get();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  STANDIN_ENTER();
  if (!hmod)
    return CUDA_ERROR_INVALID_HANDLE;
  drainAll(); // launches of its functions may still be queued
  delete hmod;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  STANDIN_ENTER();
  if (!hfunc)
    return CUDA_ERROR_INVALID_HANDLE;
  if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    return invalid("cuFuncSetAttribute: attribute " + std::to_string(int(attrib)) +
                   " is not known to the stand-in");
  if (value < 0 || value > state().sharedOptin)
    return invalid("cuFuncSetAttribute: " + std::to_string(value) +
                   " bytes of dynamic shared memory for " + hfunc->name + "; the device allows " +
                   std::to_string(state().sharedOptin));
  hfunc->maxDynamicShared = value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra) {
  STANDIN_ENTER();
  if (!f)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ ||
      gridDimX > 2147483647u || gridDimY > 65535 || gridDimZ > 65535 || blockDimX > 1024 ||
      blockDimY > 1024 || blockDimZ > 64 ||
      uint64_t(blockDimX) * blockDimY * blockDimZ > 1024)
    return invalid("cuLaunchKernel " + f->name + ": grid or block out of range");
  if (int64_t(sharedMemBytes) > f->maxDynamicShared)
    return invalid("cuLaunchKernel " + f->name + ": " + std::to_string(sharedMemBytes) +
                   " bytes of dynamic shared memory, but the function allows " +
                   std::to_string(f->maxDynamicShared) +
                   " (cuFuncSetAttribute raises the 48 KiB default)");
  if (extra)
    return invalid("cuLaunchKernel: the stand-in takes kernelParams, not extra");
  if (f->ptx)
    return launchPtx(*f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ},
                     sharedMemBytes, hStream, kernelParams);
  if (!f->argumentBytes) {
    if (!f->ptxProblem.empty())
      standin::note("cannot run generated kernel '" + f->name + "': its PTX " +
                    f->ptxProblem);
    else
      standin::note("cannot run generated kernel '" + f->name +
                    "': it was loaded from a cubin, which runs only on a GPU (the stand-in "
                    "interprets PTX, which shard-run loads where the artifact has no cubin "
                    "for the device: SHARDFLOW_STANDIN_SM=86)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (!kernelParams || !kernelParams[0])
    return invalid("cuLaunchKernel " + f->name + ": no kernel parameters");
  runtime::cuda::DeviceLaunch launch;
  launch.function = f->name;
  launch.grid[0] = gridDimX;
  launch.grid[1] = gridDimY;
  launch.grid[2] = gridDimZ;
  launch.block[0] = blockDimX;
  launch.block[1] = blockDimY;
  launch.block[2] = blockDimZ;
  launch.sharedBytes = sharedMemBytes;
  // The parameters are copied at launch, as the driver does.
  const auto *argument = static_cast<const uint8_t *>(kernelParams[0]);
  launch.argument.assign(argument, argument + f->argumentBytes);
  std::string what = "launch " + f->name + " grid " + std::to_string(gridDimX) + " block " +
                     std::to_string(blockDimX) + " shared " + std::to_string(sharedMemBytes);
  standin::enqueue(hStream, what, [launch] { runtime::cuda::runEmulated(launch); });
  return CUDA_SUCCESS;
}

//===----------------------------------------------------------------------===//
// Stream capture and graphs
//===----------------------------------------------------------------------===//

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
  STANDIN_ENTER();
  CUstream_st *stream = streamOf(hStream);
  if (stream == &state().legacy)
    return captureRefuses("capturing the legacy stream");
  if (stream->capture)
    return CUDA_ERROR_ILLEGAL_STATE;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  auto *g = new CUgraph_st;
  g->origin = stream;
  stream->capture = g;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  STANDIN_ENTER();
  CUstream_st *stream = streamOf(hStream);
  if (!phGraph)
    return CUDA_ERROR_INVALID_VALUE;
  CUgraph_st *g = stream->capture;
  if (!g || g->origin != stream)
    return CUDA_ERROR_ILLEGAL_STATE;
  // Every joined stream must be joined back: its last captured operation
  // a record that the origin stream waits on later.
  std::string unjoined;
  for (CUstream j : g->joined) {
    size_t last = g->ops.size();
    for (size_t i = 0; i < g->ops.size(); ++i)
      if (g->ops[i].origin == j)
        last = i;
    bool back = false;
    if (last < g->ops.size() && g->ops[last].kind == Op::Kind::Record)
      for (size_t i = last + 1; i < g->ops.size() && !back; ++i)
        back = g->ops[i].origin == stream && g->ops[i].kind == Op::Kind::Wait &&
               g->ops[i].event == g->ops[last].event;
    if (!back)
      unjoined += (unjoined.empty() ? "" : ", ") + std::to_string(j->id);
  }
  for (CUstream j : g->joined)
    j->capture = nullptr;
  stream->capture = nullptr;
  g->capturing = false;
  for (Captured &op : g->ops)
    if (op.kind == Op::Kind::Record)
      op.event->capturedIn = nullptr; // the graph's records are its own
  if (!unjoined.empty()) {
    standin::note("cuStreamEndCapture: stream(s) " + unjoined +
                  " joined the capture and were not joined back to the origin stream");
    delete g;
    *phGraph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  *phGraph = g;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                    unsigned long long flags) {
  STANDIN_ENTER();
  if (!phGraphExec || !hGraph || hGraph->capturing || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  auto *exec = new CUgraphExec_st;
  exec->origin = hGraph->origin;
  exec->ops = hGraph->ops;
  *phGraphExec = exec;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  STANDIN_ENTER();
  if (!hGraphExec)
    return CUDA_ERROR_INVALID_VALUE;
  CUstream_st *launch = streamOf(hStream);
  if (launch->capture)
    return captureRefuses("cuGraphLaunch into a capture");
  // The origin stream's operations go on the launch stream, each joined
  // stream's on a stream of the graph's own; they start after the work
  // queued before the launch because the first joins wait on events
  // recorded on the launch stream, as they were captured.
  auto streamFor = [&](CUstream origin) -> CUstream {
    if (origin == hGraphExec->origin)
      return launch;
    CUstream &own = hGraphExec->replay[origin];
    if (!own)
      own = newStream();
    return own;
  };
  for (const Captured &c : hGraphExec->ops) {
    CUstream target = streamFor(c.origin);
    Op op;
    op.kind = c.kind;
    op.event = c.event;
    switch (c.kind) {
    case Op::Kind::Record:
      op.generation = ++c.event->recorded;
      c.event->capturedIn = nullptr;
      break;
    case Op::Kind::Wait:
      op.generation = c.event->recorded;
      break;
    case Op::Kind::Work:
      if (c.makePolled) {
        standin::Polled polled = c.makePolled();
        op.what = "graph: " + polled.what;
        op.step = std::move(polled.step);
      } else {
        op.what = "graph: " + c.what;
        op.work = c.work;
      }
      break;
    }
    if (!standin::push(target, std::move(op)))
      return state().failureCode;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  STANDIN_ENTER();
  if (!hGraphExec)
    return CUDA_ERROR_INVALID_VALUE;
  State &st = state();
  for (auto &[origin, own] : hGraphExec->replay) {
    drain(own); // a launch still running completes first
    st.streams.erase(std::find(st.streams.begin(), st.streams.end(), own));
    delete own;
  }
  delete hGraphExec;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  STANDIN_ENTER();
  if (!hGraph || hGraph->capturing)
    return CUDA_ERROR_INVALID_VALUE;
  delete hGraph;
  return CUDA_SUCCESS;
}

} // extern "C"
