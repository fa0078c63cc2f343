//===- CudaDeviceImpl.h - the CUDA device's state ---------------*- C++ -*-===//
//
// The class behind createCudaDevice (CudaDevice.h), shared by the files
// that implement it, one concept each (see CudaDevice.h). Private to
// lib/Runtime/Device/CUDA; needs the CUDA headers.
//
// Device pointers of every buffer are fixed at load (inputs have their own
// device slots), which is what lets launches and GEMMs be planned once.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_DEVICE_CUDA_CUDADEVICEIMPL_H
#define SHARDFLOW_RUNTIME_DEVICE_CUDA_CUDADEVICEIMPL_H

#include "shardflow/Runtime/Device/CUDA/CudaDevice.h"
#include "shardflow/Runtime/Device/CUDA/CudaLibraries.h"

#include "CudaGemm.h"
#include "CudaPlanning.h"

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime::cuda {

void checkCu(CUresult status, const char *call);
#define CU_CALL(fn, ...) ::shardflow::runtime::cuda::checkCu(driver().fn(__VA_ARGS__), #fn)

inline size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

/// The cuBLASLt workspace of a program with GEMMs: what cuBLASLt recommends
/// for Hopper.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

class CudaDevice final : public Device {
public:
  CudaDevice(const DeviceSettings &settings, const CudaOptions &options, Communicator &world);
  ~CudaDevice() override;

  const char *name() const override { return "CUDA"; }
  void load(const Artifact &art) override;
  void prepare(size_t n) override;
  void finishPreparing() override;
  std::unique_ptr<Communicator> createCommunicator(Communicator &world) override;
  void releaseCommunicatorWork() override;

  void beginRun(const std::vector<std::pair<size_t, const HostTensor *>> &inputs) override;
  void execute(const std::function<void()> &enqueue) override;
  void beginInstruction(size_t n) override;
  void endInstruction(size_t n) override;
  void runKernel(size_t n) override;
  void finishRun(const std::function<void()> &timedOut) override;
  std::vector<std::pair<std::string, Tensor>> outputs() override;
  void download(int buffer, void *dst) override;

  Tensor tensorOf(int buffer) const override;
  void *scratch(int which) override;
  void copy(size_t n, const std::vector<Copy2D> &copies, const void *src, void *dst) override;
  void fillZero(size_t n, void *dst, size_t bytes) override;

  const std::vector<InstructionTime> &instructionTimes() const override { return times; }
  std::vector<std::string> laneNames() const override;
  std::string clock() const override { return "GPU time per operation, CUDA events"; }
  RunFigures lastRun() const override { return figures; }
  size_t weightBytes() const override { return uploadedWeightBytes; }
  const char *weightPlace() const override { return "on the GPU"; }
  size_t outputBytes() const override { return totalOutputBytes; }

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
    std::vector<int> waits; // steps on the other stream to wait for
    CUevent done = nullptr; // recorded after the step if someone waits
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

  // CudaDevice.cpp
  void openDevice();
  /// Waits for every event, watching NCCL for errors and the deadline;
  /// ends the job (every rank) on a GPU or collective error, or on a
  /// timeout after `timedOut` had its say.
  void waitForGpu(const std::vector<CUevent> &events, const std::string &what,
                  const std::function<void()> &timedOut);
  /// Fails the run when a kernel reported bad data (an index out of range,
  /// an integer division by zero), naming the first such kernel in program
  /// order and its ONNX node.
  void checkStatusWords();
  /// Ends the job with `reason`, aborting NCCL's communicators first (the
  /// MPI communicator's abort names this rank in front of it).
  [[noreturn]] void abortJob(const std::string &reason);

  // CudaMemory.cpp
  void allocate();
  /// `bytes` of page-locked host memory, or null when the driver refuses
  /// (--verbose says so).
  uint8_t *allocatePinned(size_t bytes, const char *what);
  /// Frees what allocatePinned returned, before the device goes.
  void freePinned(void *p);
  /// Puts each output's host copy in page-locked memory where it can be had.
  void pinOutputs();
  void runCopies(const std::vector<Copy2D> &copies, CUdeviceptr src, CUdeviceptr dst,
                 CUstream stream);

  // CudaKernels.cpp
  void prepareKernel(size_t n, Step &step);
  void prepareDeviceKernel(const std::string &kernel, const Instruction &inst, Step &step);
  /// The status words of the kernels that check indices, once every such
  /// step is counted.
  void allocateStatusWords();
  CUmodule moduleNamed(const std::string &name);
  CUfunction deviceKernelFunction(const std::string &name);
  /// Lets `f` use `bytes` of dynamic shared memory, or throws naming the
  /// device's limit (sm_86/sm_89 parts allow 99 KiB, sm_80/sm_90 more).
  void allowSharedMemory(CUfunction f, unsigned bytes, const std::string &function);

  // CudaMatmul.cpp
  void prepareGemm(size_t n, Step &step, bool onnxGemm);
  /// CudaOptions::groupGemms: sibling GEMMs as one pointer-array batched call.
  void groupGemms();
  /// CudaOptions::gemmAutotune: times the kept cuBLASLt algorithms of every
  /// distinct GEMM problem on its first call's operands and keeps the
  /// fastest (before the first run: the arena holds nothing yet).
  void autotuneGemms();

  // CudaStreams.cpp
  void planStreams();
  bool rangesOverlap(int a, int b) const;
  std::vector<Access> accessesOf(const Instruction &inst) const;
  bool rangeOf(int buffer, ByteRange &range) const;

  // CudaGraph.cpp
  /// Captures `enqueue` into `graph` (CudaOptions::cudaGraph).
  void captureProgram(const std::function<void()> &enqueue);
  /// Whether this run launches a CUDA graph (captured now when there is
  /// none yet): the option, the runs so far, the program's collectives and
  /// timing.
  bool wantsGraph() const;

  CUdeviceptr pointerOf(int buffer) const { return pointers.at(size_t(buffer)); }

  DeviceSettings settings;
  CudaOptions options;
  Communicator &world;
  int rank = 0;
  const Artifact *art = nullptr;
  /// The NCCL world createCommunicator made (owned by the runner): watched
  /// for asynchronous errors while waiting, aborted with the job.
  Communicator *ncclWorld = nullptr;

  CUdevice device = 0;
  CUcontext context = nullptr;
  int ccMajor = 0, ccMinor = 0;
  int maxSharedPerBlock = 48 * 1024; // with the opt-in above 48 KiB
  std::string deviceName;
  CUstream streams[2] = {nullptr, nullptr};
  CUevent uploaded = nullptr, finished[2] = {nullptr, nullptr};
  // CudaOptions::cudaGraph: the captured program, and the events that bring
  // the communication stream into the capture and back.
  CUgraphExec graph = nullptr;
  CUevent fork = nullptr, join = nullptr;
  bool graphRefused = false; // CudaGraph::Auto: the capture failed once
  // With timing: around each instruction on its stream; with traceClock,
  // `anchor` is recorded at each run's start and waited for, which ties
  // the events to the host's clock.
  std::vector<CUevent> began, ended;
  CUevent anchor = nullptr;
  double anchorHostSeconds = 0;

  CUdeviceptr arena = 0, inputMemory = 0, weightMemory = 0, scratchMemory = 0, workspace = 0;
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
  size_t totalOutputBytes = 0, uploadedWeightBytes = 0;
  int runs = 0; // runs so far
  /// Page-locked host memory (cuMemHostAlloc), freed with the device.
  std::vector<void *> pinnedMemory;

  std::map<std::string, CUmodule> modules;
  CUmodule kernelModule = nullptr;
  std::map<std::string, CUfunction> kernelFunctions;
  std::unique_ptr<GemmRunner> gemm;

  std::vector<Step> steps;
  std::vector<InstructionTime> times;
  RunFigures figures;
  /// Cleared while GPU work is in flight: the destructor then leaves the
  /// device alone (freeing could block on a hung kernel), since the process
  /// is about to exit.
  bool idle = false;
};

} // namespace shardflow::runtime::cuda

#endif // SHARDFLOW_RUNTIME_DEVICE_CUDA_CUDADEVICEIMPL_H
