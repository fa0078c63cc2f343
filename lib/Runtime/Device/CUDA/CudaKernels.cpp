//===- CudaKernels.cpp - what runs a kernel instruction on the GPU ---------===//
//
// Preparing each instruction once (the generated kernels' functions and
// arguments, the hand-written kernels' launch plans, local_slice's copies,
// the GEMMs in CudaMatmul.cpp) and launching it at each run.
//
//===----------------------------------------------------------------------===//

#include "CudaDeviceImpl.h"

#include "shardflow/Runtime/Format/Layout.h"

#ifdef SHARDFLOW_HAVE_DEVICE_KERNELS
#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"
#endif

#include <cstring>
#include <algorithm>
#include <limits>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {
/// The kernels cuBLASLt runs (CudaMatmul.cpp): ONNX MatMul and Gemm.
constexpr const char *kCublasKernels[] = {"gemm", "matmul"};

bool isCublasKernel(std::string_view kernel) {
  return std::find(std::begin(kCublasKernels), std::end(kCublasKernels), kernel) !=
         std::end(kCublasKernels);
}

bool deviceKernelAvailable(std::string_view kernel) {
#ifdef SHARDFLOW_HAVE_DEVICE_KERNELS
  return hasDeviceKernel(kernel);
#else
  (void)kernel;
  return false;
#endif
}
} // namespace

std::vector<std::string> shardflow::runtime::cudaDeviceKernelNames() {
  std::vector<std::string> names(std::begin(kCublasKernels), std::end(kCublasKernels));
#ifdef SHARDFLOW_HAVE_DEVICE_KERNELS
  for (std::string_view name : deviceKernelNames())
    if (name != "local_slice") // a collective's copy, not an rt kernel
      names.emplace_back(name);
#endif
  std::sort(names.begin(), names.end());
  return names;
}

void CudaDevice::prepare(size_t n) {
  const Instruction &inst = art->program[n];
  Step &step = steps[n];
  if (inst.collective && inst.collectiveKind == CollectiveKind::LocalSlice) {
    // No communication: a strided copy on the compute stream.
    step.stream = ComputeStream;
    // The hand-written strided copy, registered under the collective's name.
    std::string kernel = collectiveKindName(CollectiveKind::LocalSlice);
    if (deviceKernelAvailable(kernel)) {
      prepareDeviceKernel(kernel, inst, step);
    } else {
      Tensor in = tensorOf(inst.inputs.at(0)), out = tensorOf(inst.outputs.at(0));
      std::vector<int64_t> all = inst.params.getInts("starts");
      size_t dims = out.shape.size();
      if (all.size() != size_t(art->worldSize) * dims)
        throw RuntimeError("starts does not hold one index per dimension and rank");
      std::vector<int64_t> start(all.begin() + long(size_t(rank) * dims),
                                 all.begin() + long(size_t(rank + 1) * dims));
      step.kind = Step::Kind::Copies;
      step.copies = planBlockCopy(in.shape, out.shape, start, dtypeSize(out.dtype));
      step.copySource = pointerOf(inst.inputs[0]);
      step.copyDestination = pointerOf(inst.outputs[0]);
    }
  } else if (inst.collective) {
    // The runner's, through NCCL on the communication stream.
    step.kind = Step::Kind::Collective;
    step.stream = CommStream;
  } else {
    step.stream = ComputeStream;
    prepareKernel(n, step);
  }
}

void CudaDevice::allocateStatusWords() {
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

void CudaDevice::runKernel(size_t n) {
  Step &step = steps[n];
  CUstream stream = streams[step.stream];
  switch (step.kind) {
  case Step::Kind::Launch: {
    std::vector<void *> args;
    for (CUdeviceptr &p : step.arguments)
      args.push_back(&p);
    CU_CALL(cuLaunchKernel, step.function, step.grid[0], step.grid[1], step.grid[2], step.block[0],
            step.block[1], step.block[2], step.shared, stream, args.empty() ? nullptr : args.data(),
            nullptr);
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
    throw RuntimeError("a collective is not a kernel");
  }
}

CUmodule CudaDevice::moduleNamed(const std::string &name) {
  auto it = modules.find(name);
  if (it != modules.end())
    return it->second;
  const DeviceModule &m = selectModule(art->modules, name, ccMajor, ccMinor);
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

CUfunction CudaDevice::deviceKernelFunction(const std::string &name) {
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

void CudaDevice::allowSharedMemory(CUfunction f, unsigned bytes, const std::string &function) {
  if (bytes > unsigned(maxSharedPerBlock))
    throw RuntimeError(function + " needs " + std::to_string(bytes) +
                       " bytes of shared memory per block; " + deviceName + " (sm_" +
                       std::to_string(ccMajor * 10 + ccMinor) + ") allows " +
                       std::to_string(maxSharedPerBlock));
  if (bytes > 48 * 1024) // the default limit; more must be asked for
    CU_CALL(cuFuncSetAttribute, f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes));
}

void CudaDevice::prepareDeviceKernel(const std::string &kernel, const Instruction &inst,
                                     Step &step) {
#ifdef SHARDFLOW_HAVE_DEVICE_KERNELS
  std::vector<Tensor> ins, outs;
  for (int i : inst.inputs)
    ins.push_back(tensorOf(i));
  for (int o : inst.outputs)
    outs.push_back(tensorOf(o));
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

void CudaDevice::prepareKernel(size_t n, Step &step) {
  const Instruction &inst = art->program[n];
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
    CUresult r =
        driver().cuModuleGetFunction(&step.function, moduleNamed(module), function.c_str());
    if (r != CUDA_SUCCESS)
      throw RuntimeError("module '" + module + "' has no function '" + function +
                         "': " + describe(r));
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
        int buffer = a < inst.inputs.size() ? inst.inputs[a] : inst.outputs[a - inst.inputs.size()];
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
  if (isCublasKernel(inst.kernel)) {
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
