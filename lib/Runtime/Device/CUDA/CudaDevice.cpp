//===- CudaDevice.cpp - the GPU, its context and a run ---------------------===//
//
// Loading does all the work that does not depend on the inputs (device
// memory, weights, module code, cuBLASLt algorithms, device-kernel launch
// plans, the stream schedule; the runner then makes the NCCL
// communicators). A run uploads the inputs, enqueues every instruction (or
// launches the program's CUDA graph), waits for the GPU (watching NCCL)
// and downloads the outputs.
//
//===----------------------------------------------------------------------===//

#include "CudaDeviceImpl.h"

#include "shardflow/Runtime/Comm/NCCL/NcclCommunicator.h"
#include "shardflow/Runtime/Format/Layout.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

void cuda::checkCu(CUresult status, const char *call) {
  if (status != CUDA_SUCCESS)
    throw RuntimeError(std::string(call) + " failed: " + describe(status));
}

//===----------------------------------------------------------------------===//
// The device
//===----------------------------------------------------------------------===//

CudaDevice::CudaDevice(const DeviceSettings &settings, const CudaOptions &options,
                       Communicator &world)
    : settings(settings), options(options), world(world), rank(world.rank()) {
  if (options.cudaGraph == CudaOptions::CudaGraph::Always && settings.timing) {
    std::string what = settings.timingFlag.substr(settings.timingFlag.find_first_not_of('-'));
    throw RuntimeError("--cuda-graph and " + settings.timingFlag + " do not go together: the " +
                       what +
                       " times each operation with events around it, which a CUDA "
                       "graph's operations do not have; " +
                       what + " without the graph");
  }
  try {
    driver();
    cublasLt();
    cuda::nccl();
  } catch (const RuntimeError &e) {
    throw RuntimeError(std::string("this artifact targets 'cuda', but ") + e.what());
  }
}

CudaDevice::~CudaDevice() {
  // Work still in flight (unwinding from a failed run): the device is left
  // alone, as freeing could block on a hung kernel; the process is about
  // to exit. (The NCCL communicators are aborted as they go.)
  if (!idle)
    return;
  const CudaDriver &d = driver();
  d.cuCtxSetCurrent(context);
  // The graph holds cuBLASLt's work: it goes before it.
  if (graph)
    d.cuGraphExecDestroy(graph);
  gemm.reset();
  for (Step &s : steps)
    if (s.done)
      d.cuEventDestroy(s.done);
  for (CUevent e : {uploaded, finished[0], finished[1], fork, join, anchor})
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
       {arena, inputMemory, weightMemory, scratchMemory, workspace, statusWords, gemmPointers})
    if (p)
      d.cuMemFree(p);
  for (void *p : pinnedMemory)
    d.cuMemFreeHost(p);
  d.cuDevicePrimaryCtxRelease(device);
}

void CudaDevice::load(const Artifact &artifact) {
  art = &artifact;
  if (art->target != "cuda")
    throw RuntimeError("artifact targets '" + art->target +
                       "'; the CUDA device runs cuda artifacts only");
  openDevice();
  allocate();
  steps.resize(art->program.size());
}

void CudaDevice::finishPreparing() {
  allocateStatusWords();
  planStreams();
  if (options.groupGemms)
    groupGemms();
  if (options.gemmAutotune)
    autotuneGemms();
}

std::unique_ptr<Communicator> CudaDevice::createCommunicator(Communicator &bootstrap) {
  std::unique_ptr<Communicator> created = createNcclWorld(
      bootstrap, streams[CommStream], NcclSettings{settings.timeoutSeconds, settings.timeoutFlag});
  ncclWorld = created.get();
  // Loading is complete and nothing is in flight.
  idle = true;
  return created;
}

void CudaDevice::releaseCommunicatorWork() {
  // The graph holds NCCL's work: it goes before the communicators.
  if (idle && graph) {
    driver().cuCtxSetCurrent(context);
    driver().cuGraphExecDestroy(graph);
    graph = nullptr;
  }
  ncclWorld = nullptr;
}

void CudaDevice::openDevice() {
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
  // These three time the program (RunFigures::deviceSeconds).
  for (CUevent *e : {&uploaded, &finished[0], &finished[1]})
    CU_CALL(cuEventCreate, e, CU_EVENT_DEFAULT);
  if (options.cudaGraph != CudaOptions::CudaGraph::Never)
    for (CUevent *e : {&fork, &join})
      CU_CALL(cuEventCreate, e, CU_EVENT_DISABLE_TIMING);
  times.assign(art->program.size(), InstructionTime{});
  if (settings.timing) {
    began.assign(art->program.size(), nullptr);
    ended.assign(art->program.size(), nullptr);
    for (std::vector<CUevent> *events : {&began, &ended})
      for (CUevent &e : *events)
        CU_CALL(cuEventCreate, &e, CU_EVENT_DEFAULT);
    if (settings.traceClock)
      CU_CALL(cuEventCreate, &anchor, CU_EVENT_DEFAULT);
  }
  if (settings.verbose)
    std::fprintf(stderr,
                 "shard-run: rank %d uses GPU %d (%s, sm_%d%d); driver %d, %s %zu, NCCL %d\n", rank,
                 ordinal, name, ccMajor, ccMinor, d.version, cublasLt().library.c_str(),
                 cublasLt().cublasLtGetVersion(), cuda::nccl().version);
}

std::vector<std::string> CudaDevice::laneNames() const {
  return {"compute stream", "communication stream"};
}

//===----------------------------------------------------------------------===//
// A run
//===----------------------------------------------------------------------===//

void CudaDevice::beginRun(const std::vector<std::pair<size_t, const HostTensor *>> &uploads) {
  CU_CALL(cuCtxSetCurrent, context);
  // Pinning the outputs pays from the second download on.
  if (++runs == 2 && options.pinnedMemory == CudaOptions::PinnedMemory::Auto)
    pinOutputs();
  // From here on the GPU is busy until the end of the run.
  idle = false;
  CUstream compute = streams[ComputeStream];
  if (anchor) {
    // Both streams are idle: an event reached now is now on the host's
    // clock, and the run's events are placed from it.
    CU_CALL(cuEventRecord, anchor, compute);
    CU_CALL(cuStreamSynchronize, compute);
    anchorHostSeconds = hostClockSeconds();
  }
  if (statusWords) // generated kernels run on the compute stream, after this
    CU_CALL(cuMemsetD8Async, statusWords, 0, checkedSteps.size() * 2 * sizeof(int64_t), compute);
  for (auto [i, t] : uploads)
    if (!t->bytes.empty())
      CU_CALL(cuMemcpyHtoDAsync, pointers[i], t->bytes.data(), art->buffers[i].bytes(), compute);
  CU_CALL(cuEventRecord, uploaded, compute);
}

void CudaDevice::execute(const std::function<void()> &enqueue) {
  if (!graph && wantsGraph()) {
    if (options.cudaGraph == CudaOptions::CudaGraph::Always) {
      captureProgram(enqueue);
    } else {
      try {
        captureProgram(enqueue);
      } catch (const RuntimeError &e) {
        graphRefused = true; // run as it is from now on
        if (settings.verbose)
          std::fprintf(stderr, "shard-run: rank %d runs the program without a CUDA graph: %s\n",
                       rank, e.what());
      }
    }
  }
  CUstream compute = streams[ComputeStream];
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
    enqueue();
    for (int s : {ComputeStream, CommStream})
      CU_CALL(cuEventRecord, finished[s], streams[s]);
  }
}

void CudaDevice::beginInstruction(size_t n) {
  Step &step = steps[n];
  CUstream stream = streams[step.stream];
  for (int w : step.waits)
    CU_CALL(cuStreamWaitEvent, stream, steps[size_t(w)].done, 0);
  if (settings.timing)
    CU_CALL(cuEventRecord, began[n], stream);
}

void CudaDevice::endInstruction(size_t n) {
  Step &step = steps[n];
  CUstream stream = streams[step.stream];
  if (settings.timing)
    CU_CALL(cuEventRecord, ended[n], stream);
  if (step.done)
    CU_CALL(cuEventRecord, step.done, stream);
}

void CudaDevice::finishRun(const std::function<void()> &timedOut) {
  waitForGpu({finished[0], finished[1]}, "the program", timedOut);
  figures.deviceSeconds = 0;
  for (CUevent end : finished) {
    float ms = 0;
    CU_CALL(cuEventElapsedTime, &ms, uploaded, end);
    figures.deviceSeconds = std::max(figures.deviceSeconds, double(ms) / 1e3);
  }
  if (settings.timing) {
    for (size_t n = 0; n < art->program.size(); ++n) {
      float ms = 0;
      CU_CALL(cuEventElapsedTime, &ms, began[n], ended[n]);
      times[n].seconds = double(ms) / 1e3;
      times[n].lane = steps[n].stream;
      if (anchor) {
        CU_CALL(cuEventElapsedTime, &ms, anchor, began[n]);
        times[n].start = anchorHostSeconds + double(ms) / 1e3;
      }
    }
  }
  if (anchor) {
    float ms = 0;
    CU_CALL(cuEventElapsedTime, &ms, anchor, uploaded);
    figures.uploadStart = anchorHostSeconds;
    figures.uploadSeconds = double(ms) / 1e3;
    figures.downloadStart = hostClockSeconds();
  }
  // Both streams are idle: plain synchronous copies are safe.
  auto downloadStart = std::chrono::steady_clock::now();
  figures.downloadPinned = true;
  for (size_t o = 0; o < art->outputs.size(); ++o)
    if (hostOutputs[o].bytes) {
      CUdeviceptr source = pointers[size_t(art->outputs[o].second)];
      if (int64_t columns = outputColumnsOf(*art, o)) {
        // The leading `columns` elements of each padded row, packed.
        const BufferDesc &b = art->buffers[size_t(art->outputs[o].second)];
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
      figures.downloadPinned = figures.downloadPinned && hostOutputs[o].pageable.empty();
    }
  figures.downloadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - downloadStart).count();
  idle = true;
}

void CudaDevice::download(int buffer, void *dst) {
  CU_CALL(cuMemcpyDtoH, dst, pointers[size_t(buffer)], art->buffers[size_t(buffer)].bytes());
}

std::vector<std::pair<std::string, Tensor>> CudaDevice::outputs() {
  checkStatusWords();
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t o = 0; o < art->outputs.size(); ++o) {
    const BufferDesc &b = art->buffers[size_t(art->outputs[o].second)];
    out.emplace_back(art->outputs[o].first,
                     Tensor{hostOutputs[o].data, b.dtype, outputShape(*art, o)});
  }
  return out;
}

[[noreturn]] void CudaDevice::abortJob(const std::string &reason) {
  if (ncclWorld)
    ncclWorld->abort(reason);
  world.abort(reason);
  std::exit(1); // abort() does not return; this tells the compiler so
}

void CudaDevice::waitForGpu(const std::vector<CUevent> &events, const std::string &what,
                            const std::function<void()> &timedOut) {
  const CudaDriver &d = driver();
  WaitOutcome outcome = pollUntil(
      [&] {
        bool done = true;
        for (CUevent e : events) {
          CUresult r = d.cuEventQuery(e);
          if (r == CUDA_ERROR_NOT_READY)
            done = false;
          else if (r != CUDA_SUCCESS)
            // A fault in a kernel: the context is lost, and so is the job.
            abortJob("the GPU failed while running " + what + ": " + describe(r));
        }
        if (ncclWorld)
          ncclWorld->checkBackgroundErrors(what);
        return done;
      },
      settings.timeoutSeconds);
  if (outcome == WaitOutcome::TimedOut) {
    if (timedOut)
      timedOut();
    abortJob(what + " did not finish within " + secondsText(settings.timeoutSeconds) + " (" +
             settings.timeoutFlag +
             "): a collective is probably waiting for a rank that never joined it");
  }
}

/// The ONNX node of checking operation `ordinal` of an instruction: line
/// `ordinal` of its `checking_nodes`, else its `node`.
static std::string checkingNode(const Params &params, uint64_t ordinal) {
  // Only a generated launch groups several checking operations; a runtime
  // kernel's parameters are its signature's.
  std::string all = params.boundSignature() ? "" : params.getString("checking_nodes", "");
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

void CudaDevice::checkStatusWords() {
  if (!statusWords)
    return;
  std::vector<int64_t> words(checkedSteps.size() * 2);
  CU_CALL(cuMemcpyDtoH, words.data(), statusWords, words.size() * sizeof(int64_t));
  for (size_t slot = 0; slot < checkedSteps.size(); ++slot) {
    if (!words[2 * slot])
      continue;
    size_t n = checkedSteps[slot];
    const Instruction &inst = art->program[n];
    std::string what = inst.kernel == "launch"
                           ? "generated kernel '" + inst.params.getString("function", "") + "'"
                           : "kernel '" + inst.kernel + "'";
    // Codes as in lib/Conversion/RTToGPU/Emitter.h (StatusCode): the low
    // 8 bits, above them the ordinal of the fused operation that reported,
    // whose node is that line of `checking_nodes`.
    int64_t code = words[2 * slot] & 0xff, value = words[2 * slot + 1];
    std::string node = checkingNode(inst.params, uint64_t(words[2 * slot]) >> 8);
    std::string problem =
        code == 1 ? "index " + std::to_string(value) + " read from the data is out of range"
        : code == 2
            ? "integer division by zero (element " + std::to_string(value) + " of the result)"
        : code == 3
            ? "integer modulo by zero (element " + std::to_string(value) + " of the result)"
            : "unknown error code " + std::to_string(code) + " in the status word";
    throw RuntimeError(what + (node.empty() ? std::string() : " (ONNX node '" + node + "')") +
                       ", instruction " + std::to_string(n) + ": " + problem +
                       "; the outputs of this run are not valid");
  }
}

//===----------------------------------------------------------------------===//
// The public face
//===----------------------------------------------------------------------===//

bool shardflow::runtime::cudaSupportBuiltIn() { return true; }

std::unique_ptr<Device> shardflow::runtime::createCudaDevice(const DeviceSettings &settings,
                                                             const CudaOptions &options,
                                                             Communicator &world) {
  return std::make_unique<CudaDevice>(settings, options, world);
}
