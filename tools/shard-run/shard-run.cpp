//===- shard-run.cpp - execute a Shardflow artifact ------------------------===//
//
// Runs one rank of a compiled model: reads the artifact, maps this rank's
// weights, reads the inputs (.npy/.npz), runs the program and writes the
// outputs. Links no MLIR and no libonnx, and no CUDA library: a `target
// cuda` artifact runs on the CUDA executor, which loads the driver, cuBLASLt
// and NCCL at run time; a `target cpu` one runs on the CPU executor.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Core/ProgramRunner.h"
#include "shardflow/Runtime/Device/CPU/CpuDevice.h"
#include "shardflow/Runtime/Device/CUDA/CudaDevice.h"
#include "shardflow/Runtime/Format/FloatConversion.h"
#include "shardflow/Runtime/Format/NpyIO.h"
#include "shardflow/Runtime/Core/Profile.h"
#include "shardflow/Runtime/Format/TensorProtoIO.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>

using namespace shardflow::runtime;

static const char *kUsage = R"(usage: shard-run ARTIFACT [options]

Runs a model compiled by `shard-opt MODEL --target cpu|cuda -o ARTIFACT`.
A `target cpu` artifact runs on the CPU (no GPU or driver needed); a
`target cuda` one needs an NVIDIA GPU per rank, the driver (libcuda.so.1),
cuBLASLt (libcublasLt.so.13) and NCCL (libnccl.so.2), loaded at run time.

options:
  --weights PATH     the model file (.onnx) or its folder: weight files are
                     found there (default: the model's folder at compile time)
  --input NAME=FILE  the graph input NAME from a .npy file, or from an ONNX
                     TensorProto if FILE ends in .pb (repeat per input);
                     a bf16 input also takes float32 data, rounded to
                     bf16 (to nearest even; a note on stderr says which)
  --inputs FILE.npz  all graph inputs from one .npz (member names = inputs)
  --output FILE      write the outputs: FILE.npz (all, by name), FILE.npy or
                     FILE.pb (a single output; .pb as an ONNX TensorProto);
                     numpy has no bfloat16, so bf16 outputs go to .npy and
                     .npz as float32 (exact; a note on stderr says which);
                     without it, a summary is printed. Rank 0 writes them,
                     unless FILE contains {rank}: then every rank writes its
                     own outputs there, {rank} replaced by its rank
  --threads N        threads per rank for the kernels (default 1); GEMMs run
                     on OpenBLAS, one call per fixed tile of the product,
                     so results are the same for every N. Where OpenBLAS
                     does not know the CPU's model and would run its SSE
                     kernels, shard-run sets OPENBLAS_CORETYPE to SkylakeX
                     or Haswell (what the CPU supports) and starts again;
                     set it yourself to choose (--verbose says which ran)
  --load-threads N   threads per rank that read, check (CRC-32C) and convert
                     (--dtype) the weights while loading; CUDA artifacts
                     upload them from one thread as each is ready (default:
                     the machine's hardware threads divided by the ranks on
                     this node, from OMPI_COMM_WORLD_LOCAL_SIZE,
                     MPI_LOCALNRANKS or SLURM_NTASKS_PER_NODE, between 1
                     and 8)
  --repeat N         run the program N times (for timing; see --verbose)
  --no-verify-weights  skip the CRC-32C check of the weight bytes each rank
                     loads against the checksums recorded at compile time

CUDA artifacts:
  --device N         the GPU to use (default: the rank's local rank, from
                     OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or
                     MPI_LOCAL_RANK, modulo the number of GPUs)
  --allow-tf32       let f32 matmuls use TF32 tensor cores (faster, about
                     10 bits of mantissa in the products; default: full f32)
  --attention-kernel auto|mma|mma2|simt
                     which attention kernel runs: auto (default) takes the
                     tensor-core kernel (mma: one 16-row query tile per
                     warp) where it applies (f16/bf16, head size 64 or 128)
                     and the SIMT kernel elsewhere; mma2 takes two tiles
                     per warp (head size 64); mma and mma2 fail, naming the
                     node, where they do not apply; simt is the SIMT kernel
                     everywhere
  --cuda-graph       capture the program into a CUDA graph at the first run
                     and launch that graph at every run: one launch per run
                     instead of one per operation, which matters when the
                     operations are short (small batches); the first run
                     pays for the capture (see --repeat). Not with
                     --profile. Default: captured at the second run, for
                     programs without collectives, when not profiling (a
                     single run pays nothing; where capturing fails the
                     program runs as it is, and --verbose says why)
  --no-cuda-graph    never capture a CUDA graph
  --group-gemms      run consecutive GEMMs that read one activation with the
                     same shapes and no bias (separate query, key and value
                     projections of equal width, an MLP's gate and up) as
                     one cuBLASLt call in pointer-array batch mode: fewer
                     launches, and small GEMMs fill more of the GPU
                     together. On by default; where cuBLASLt has no such
                     algorithm they run one by one (--verbose says which)
  --no-group-gemms   run every GEMM as a call of its own
  --gemm-autotune    at load, time the best 8 algorithms cuBLASLt's
                     heuristic offers for each distinct GEMM (one warm-up
                     and 5 calls each, on the GEMM's own buffers) and keep
                     the fastest instead of the heuristic's first; costs
                     load time, and results may differ in the last bits
                     from the default's (--verbose prints every time
                     measured and the sum for one call of each GEMM).
                     Off by default: the algorithm kept depends on timings,
                     so results may change from one load to the next
  --gemm-autotune-file FILE
                     --gemm-autotune, remembering its choices in FILE: a
                     GEMM problem FILE has a choice for (on the same GPU
                     model, cuBLASLt version and candidate count) takes it
                     without timing, so every load after the first makes
                     the same choices and loads faster; the others are
                     timed and rank 0 writes FILE with them added (choices
                     for another GPU or cuBLASLt are replaced)
  --pinned-memory auto|always|never
                     page-locked host memory, which the GPU reads and
                     writes directly (pageable memory is copied through the
                     driver's staging buffers), for the weights' upload
                     (the loader threads write each weight into a staging
                     buffer of 256 MiB to 1 GiB, freed after loading) and
                     the outputs' download. Locking pages costs time too:
                     auto (default) stages the weights when the rank's come
                     to 256 MiB or more, and pins the outputs from the second
                     run on; always does both from the start; never does
                     neither. Where the driver refuses, pageable memory is
                     used (--verbose says so)
  --collective-timeout SECONDS
                     how long a rank waits for the GPU, collectives
                     included, and for NCCL to create its communicators
                     (the unique id's MPI broadcast included) and connect
                     to peers, before it aborts every rank
                     with the reason (default 600); NCCL errors abort at
                     once
  --verbose          print timings and memory figures to stderr
  --profile          time every operation and print, for rank 0, the time
                     per kind of operation (GEMMs by epilogue, attention,
                     each generated kernel, collectives) and the slowest
                     operations with their ONNX nodes, averaged over the
                     runs (all but the first when there are several; see
                     --repeat). CUDA: GPU time between CUDA events around
                     each operation on its stream, so communication that
                     overlaps compute counts in both; CPU: the host clock
  --help             this text

Launched by mpirun or srun, every rank runs its part of the program and
rank 0 writes the outputs; if any rank fails, all ranks stop with its reason.

environment:
  SHARDFLOW_TEST_FAIL_RANK=K   make rank K fail after loading (tests the
                               failure path)
)";

static std::string parentDir(const std::string &path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

static bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

int main(int argc, char **argv) {
  // OpenBLAS chose its kernels when it loaded. Where it fell back to its
  // SSE kernels on a CPU whose model it does not know, start again with
  // the ones the CPU can run (OPENBLAS_CORETYPE is read only at load).
  // Before MPI starts: the new image is the same process.
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    std::string running, core = preferredBlasCore(&running);
    if (!core.empty()) {
      setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
      setenv("SHARDFLOW_OPENBLAS_FALLBACK", running.c_str(), 1);
      execv("/proc/self/exe", argv); // on failure, go on with OpenBLAS's choice
    }
  }
  std::unique_ptr<Communicator> comm;
  try {
    comm = createWorldCommunicator(&argc, &argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "shard-run: error: %s\n", e.what());
    return 1;
  }
  std::string artifactPath, weights, output;
  std::map<std::string, std::string> inputFiles;
  std::string inputsNpz;
  int threads = 1, repeat = 1, loadThreads = 0;
  bool verbose = false, verifyWeights = true, profile = false;
  CudaOptions cudaOptions;
  DeviceSettings deviceSettings;
  RunnerSettings runnerSettings;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&](const char *flag) -> std::string {
        std::string f = flag;
        if (arg.compare(0, f.size() + 1, f + "=") == 0)
          return arg.substr(f.size() + 1);
        if (i + 1 >= argc)
          throw RuntimeError(f + " needs a value");
        return argv[++i];
      };
      auto is = [&](const char *flag) {
        return arg == flag || arg.rfind(std::string(flag) + "=", 0) == 0;
      };
      if (arg == "--help" || arg == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (is("--weights")) {
        weights = value("--weights");
      } else if (is("--input")) {
        std::string spec = value("--input");
        auto eq = spec.find('=');
        if (eq == std::string::npos || eq == 0)
          throw RuntimeError("--input expects NAME=FILE (.npy or .pb), got '" + spec + "'");
        inputFiles[spec.substr(0, eq)] = spec.substr(eq + 1);
      } else if (is("--inputs")) {
        inputsNpz = value("--inputs");
      } else if (is("--output")) {
        output = value("--output");
      } else if (is("--threads")) {
        std::string v = value("--threads");
        threads = std::atoi(v.c_str());
        if (threads < 1)
          throw RuntimeError("--threads must be a positive integer, got '" + v + "'");
      } else if (is("--load-threads")) {
        std::string v = value("--load-threads");
        char *end = nullptr;
        long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end || n < 1 || n > 1024)
          throw RuntimeError("--load-threads must be a number of threads from 1 to 1024, got '" +
                             v + "'");
        loadThreads = int(n);
      } else if (is("--repeat")) {
        std::string v = value("--repeat");
        repeat = std::atoi(v.c_str());
        if (repeat < 1)
          throw RuntimeError("--repeat must be a positive integer, got '" + v + "'");
      } else if (is("--device")) {
        std::string v = value("--device");
        char *end = nullptr;
        long d = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end || d < 0)
          throw RuntimeError("--device must be a GPU number (0, 1, ...), got '" + v + "'");
        cudaOptions.device = int(d);
      } else if (arg == "--cuda-graph") {
        cudaOptions.cudaGraph = CudaOptions::CudaGraph::Always;
      } else if (arg == "--no-cuda-graph") {
        cudaOptions.cudaGraph = CudaOptions::CudaGraph::Never;
      } else if (arg == "--group-gemms") {
        cudaOptions.groupGemms = true;
      } else if (arg == "--no-group-gemms") {
        cudaOptions.groupGemms = false;
      } else if (arg == "--gemm-autotune") {
        cudaOptions.gemmAutotune = true;
      } else if (is("--gemm-autotune-file")) {
        cudaOptions.gemmAutotune = true;
        cudaOptions.gemmAutotuneFile = value("--gemm-autotune-file");
        if (cudaOptions.gemmAutotuneFile.empty())
          throw RuntimeError("--gemm-autotune-file needs a file name");
      } else if (is("--pinned-memory")) {
        std::string v = value("--pinned-memory");
        using Pinned = CudaOptions::PinnedMemory;
        if (v == "auto")
          cudaOptions.pinnedMemory = Pinned::Auto;
        else if (v == "always")
          cudaOptions.pinnedMemory = Pinned::Always;
        else if (v == "never")
          cudaOptions.pinnedMemory = Pinned::Never;
        else
          throw RuntimeError("--pinned-memory takes auto, always or never, got '" + v + "'");
      } else if (arg == "--allow-tf32") {
        cudaOptions.allowTf32 = true;
      } else if (is("--attention-kernel")) {
        std::string v = value("--attention-kernel");
        using cuda::AttentionPath;
        if (v == "auto")
          cudaOptions.attentionKernel = AttentionPath::Auto;
        else if (v == "mma")
          cudaOptions.attentionKernel = AttentionPath::Mma;
        else if (v == "mma2")
          cudaOptions.attentionKernel = AttentionPath::Mma2;
        else if (v == "simt")
          cudaOptions.attentionKernel = AttentionPath::Simt;
        else
          throw RuntimeError("--attention-kernel takes auto, mma, mma2 or simt, got '" + v +
                             "'");
      } else if (is("--collective-timeout")) {
        std::string v = value("--collective-timeout");
        char *end = nullptr;
        double t = std::strtod(v.c_str(), &end);
        if (v.empty() || *end || !(t > 0))
          throw RuntimeError("--collective-timeout must be a positive number of seconds, got '" +
                             v + "'");
        runnerSettings.timeoutSeconds = t;
        runnerSettings.timeoutFlag = "--collective-timeout";
      } else if (arg == "--verbose") {
        verbose = true;
      } else if (arg == "--profile") {
        profile = true;
      } else if (arg == "--no-verify-weights") {
        verifyWeights = false;
      } else if (!arg.empty() && arg[0] == '-') {
        throw RuntimeError("unknown option '" + arg + "' (see --help)");
      } else if (artifactPath.empty()) {
        artifactPath = arg;
      } else {
        throw RuntimeError("more than one artifact given ('" + artifactPath +
                           "' and '" + arg + "')");
      }
    }
    if (artifactPath.empty())
      throw RuntimeError("no artifact given (see --help)");

    auto start = std::chrono::steady_clock::now();
    Artifact artifact = readArtifact(artifactPath);
    int world = comm->size();
    if (launcherWorldSize() > 1 && launcherWorldSize() != world)
      throw RuntimeError("the launcher started " +
                         std::to_string(launcherWorldSize()) +
                         " ranks but MPI reports " + std::to_string(world) +
                         ": is shard-run built against the MPI of this mpirun?");
    if (world != artifact.worldSize)
      throw RuntimeError("the artifact was compiled for " +
                         std::to_string(artifact.worldSize) +
                         " rank(s) but was launched with " + std::to_string(world));
    std::string weightsDir;
    if (!weights.empty())
      weightsDir = endsWith(weights, ".onnx") ? parentDir(weights) : weights;

    std::map<std::string, HostTensor> inputs;
    if (!inputsNpz.empty())
      for (auto &[name, t] : readNpz(inputsNpz))
        inputs[name] = std::move(t);
    for (const auto &[name, file] : inputFiles)
      inputs[name] = endsWith(file, ".pb") ? readTensorProto(file) : readNpy(file);
    // numpy has no bfloat16: a bf16 input takes float32 data, rounded to
    // nearest even here (a .pb may hold bfloat16 itself).
    for (const BufferDesc &b : artifact.buffers) {
      auto it = inputs.find(b.name);
      if (b.kind != BufferDesc::Kind::Input || b.dtype != DType::BF16 || it == inputs.end() ||
          it->second.dtype != DType::F32)
        continue;
      HostTensor &t = it->second;
      HostTensor narrow;
      narrow.dtype = DType::BF16;
      narrow.shape = t.shape;
      narrow.bytes.resize(size_t(t.view().numel()) * 2);
      convertElements(t.bytes.data(), DType::F32, narrow.bytes.data(), DType::BF16,
                      size_t(t.view().numel()), "input '" + b.name + "'");
      t = std::move(narrow);
      if (comm->rank() == 0)
        std::fprintf(stderr,
                     "shard-run: note: input '%s' is bf16, which numpy has no type for: "
                     "its float32 values were rounded to bf16 (to nearest even)\n",
                     b.name.c_str());
    }

    // The artifact's target picks the device; one runner runs either.
    deviceSettings.weightsDir = weightsDir;
    deviceSettings.verifyWeights = verifyWeights;
    deviceSettings.loadThreads = loadThreads;
    deviceSettings.threads = threads;
    deviceSettings.verbose = verbose;
    deviceSettings.timing = profile;
    deviceSettings.timeoutSeconds = runnerSettings.timeoutSeconds;
    deviceSettings.timeoutFlag = runnerSettings.timeoutFlag;
    runnerSettings.profile = profile;
    bool cuda = artifact.target == "cuda";
    std::unique_ptr<Device> device = cuda
                                         ? createCudaDevice(deviceSettings, cudaOptions, *comm)
                                         : createCpuDevice(deviceSettings, *comm);
    ProgramRunner runner(std::move(artifact), std::move(device), *comm, runnerSettings);
    auto runOnce = [&] { return runner.run(inputs); };
    // Per-operation times of the measured runs (--profile), and the
    // program's own time of each: the GPU program time, or run()'s.
    ProfileTotals profiled;
    auto addProfile = [&](double hostSeconds) {
      if (!profile)
        return;
      double device = runner.device().lastRun().deviceSeconds;
      profiled.add(runner.instructionSeconds(), device >= 0 ? device : hostSeconds);
    };
    const Artifact &loadedArtifact = runner.artifact();
    size_t weightBytes = runner.device().weightBytes();
    if (const char *fail = std::getenv("SHARDFLOW_TEST_FAIL_RANK"))
      if (std::atoi(fail) == comm->rank())
        throw RuntimeError("injected failure (SHARDFLOW_TEST_FAIL_RANK)");
    auto loaded = std::chrono::steady_clock::now();
    auto outputs = runOnce();
    auto done = std::chrono::steady_clock::now();
    double best = std::chrono::duration<double>(done - loaded).count();
    // GPU time of each run's program (no host copies); the first run also
    // pays for lazy initialization inside the libraries, so it is left out
    // when there are more.
    std::vector<double> deviceTimes;
    // The outputs' download of each run (host time), and whether it went
    // into page-locked memory, by kind: [pageable, pinned].
    std::vector<double> downloads[2];
    auto addDownload = [&] {
      RunFigures f = runner.device().lastRun();
      if (f.downloadSeconds >= 0)
        downloads[f.downloadPinned].push_back(f.downloadSeconds);
    };
    addDownload();
    if (repeat == 1 && runner.device().lastRun().deviceSeconds >= 0)
      deviceTimes.push_back(runner.device().lastRun().deviceSeconds);
    if (repeat == 1)
      addProfile(best);
    for (int i = 1; i < repeat; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      outputs = runOnce();
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (runner.device().lastRun().deviceSeconds >= 0)
        deviceTimes.push_back(runner.device().lastRun().deviceSeconds);
      addDownload();
      addProfile(seconds);
      best = std::min(best, seconds);
    }
    // Every rank has finished before rank 0 reports: a failure anywhere
    // stops the job here instead of leaving a partial result.
    comm->barrier();

    const std::string rankTag = "{rank}";
    bool perRank = output.find(rankTag) != std::string::npos;
    if (perRank)
      output.replace(output.find(rankTag), rankTag.size(), std::to_string(comm->rank()));
    if (comm->rank() != 0 && !perRank) {
      // Outputs are written once, by rank 0.
    } else if (output.empty()) {
      for (auto &[name, t] : outputs) {
        std::cout << name << ": " << dtypeName(t.dtype) << "[";
        for (size_t i = 0; i < t.shape.size(); ++i)
          std::cout << (i ? "," : "") << t.shape[i];
        std::cout << "]\n";
      }
    } else {
      bool single = endsWith(output, ".npy") || endsWith(output, ".pb");
      if (single && outputs.size() != 1)
        throw RuntimeError("the model has " + std::to_string(outputs.size()) +
                           " outputs; write them to an .npz");
      // numpy has no bfloat16: such outputs are widened to float32, which
      // holds every bf16 value exactly (.pb keeps bfloat16).
      std::vector<HostTensor> widened;
      widened.reserve(outputs.size());
      for (auto &[name, t] : outputs) {
        if (t.dtype != DType::BF16 || endsWith(output, ".pb"))
          continue;
        HostTensor &w = widened.emplace_back();
        w.dtype = DType::F32;
        w.shape = t.shape;
        w.bytes.resize(size_t(t.numel()) * sizeof(float));
        convertElements(t.data, DType::BF16, w.bytes.data(), DType::F32, size_t(t.numel()),
                        "output '" + name + "'");
        std::fprintf(stderr,
                     "shard-run: note: output '%s' is bf16, which numpy has no type for: "
                     "written as float32 (exact)\n",
                     name.c_str());
        t = w.view();
      }
      if (endsWith(output, ".pb"))
        writeTensorProto(output, outputs[0].first, outputs[0].second);
      else if (single)
        writeNpy(output, outputs[0].second);
      else
        writeNpz(output, outputs);
    }
    if (verbose) {
      using S = std::chrono::duration<double>;
      std::fprintf(stderr,
                   "shard-run: load %.3f s, first run %.3f s, best of %d runs "
                   "%.6f s; arena %lld bytes, weights %s %zu bytes\n",
                   S(loaded - start).count(), S(done - loaded).count(), repeat,
                   best, (long long)loadedArtifact.arenaBytes,
                   runner.device().weightPlace(), weightBytes);
      if (!deviceTimes.empty()) {
        std::sort(deviceTimes.begin(), deviceTimes.end());
        std::fprintf(stderr,
                     "shard-run: GPU program time: best %.3f ms, median %.3f ms over %zu "
                     "runs\n",
                     deviceTimes.front() * 1e3, deviceTimes[deviceTimes.size() / 2] * 1e3,
                     deviceTimes.size());
      }
      for (bool pinned : {false, true}) {
        std::vector<double> &d = downloads[pinned];
        if (d.empty() || !runner.device().outputBytes())
          continue;
        std::sort(d.begin(), d.end());
        std::fprintf(stderr,
                     "shard-run: outputs downloaded (%zu bytes, %s memory): best %.3f ms "
                     "(%.2f GB/s) over %zu runs\n",
                     runner.device().outputBytes(), pinned ? "page-locked" : "pageable",
                     d.front() * 1e3,
                     double(runner.device().outputBytes()) / std::max(d.front(), 1e-9) / 1e9,
                     d.size());
      }
    }
    if (profile && comm->rank() == 0)
      std::fprintf(stderr, "shard-run: %s",
                   formatProfile(loadedArtifact, profiled, "rank 0; " + runner.device().clock())
                       .c_str());
  } catch (const std::exception &e) {
    comm->abort(e.what());
  }
  return 0;
}
