//===- Options.cpp - shard-run's command line ------------------------------===//

#include "Options.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

using namespace shardflow::runtime;

namespace {

const char *kUsage = R"(usage: shard-run ARTIFACT [options]

Runs a model compiled by `shard-opt MODEL --target cpu|cuda -o ARTIFACT`.
A `target cpu` artifact runs on the CPU (no GPU or driver needed); a
`target cuda` one needs an NVIDIA GPU per rank, the driver (libcuda.so.1),
cuBLASLt (libcublasLt.so.13) and NCCL (libnccl.so.2), loaded at run time.

A pipeline artifact (shard-opt --mesh pp=N,...) runs under mpirun with
pp times each stage's ranks: every rank runs its stages' part of the
schedule over the whole batch's inputs, cut into the compiled
micro-batches, and rank 0 writes the outputs; --trace records its
actions (python -m shardflow.timeline draws them). A training pipeline
(with --train) takes --data and --steps as a training step does, and
--verbose adds each stage's peak of micro-batches in flight. Not with
--profile.

options:
  --weights PATH     the model file (.onnx) or its folder: weights stored in
                     the model are read from that file, whatever its name,
                     and external weight files are found in its folder
                     (default: the compiled model, in its folder at compile
                     time)
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
  --timeout SECONDS  how long a rank waits in a collective, a send or a
                     receive (over MPI on the CPU; on a GPU, for the GPU,
                     its NCCL collectives included), and for NCCL to create
                     its communicators (the unique id's broadcast included)
                     and connect to peers, before it ends the whole job with
                     a message that names the rank, the operation (the
                     collective, its instruction and ONNX node) and the
                     ranks it waited for (default 600); NCCL errors end the
                     job at once
  --collective-timeout SECONDS
                     the same as --timeout (its older name)
  --verbose          print timings and memory figures to stderr
  --profile          time every operation and print, for rank 0, the time
                     per kind of operation (GEMMs by epilogue, attention,
                     each generated kernel, collectives) and the slowest
                     operations with their ONNX nodes, averaged over the
                     runs (all but the first when there are several; see
                     --repeat; a training run's steps). CUDA: GPU time
                     between CUDA events around
                     each operation on its stream, so communication that
                     overlaps compute counts in both; CPU: the host clock
  --trace FILE       record every rank's operations of every run or training
                     step (kernels by
                     name, generated kernels by function, collectives by
                     kind, copies; each with its ONNX node, instruction
                     number and bytes) with their start and duration, and
                     write them all, from rank 0, to FILE as Chrome trace
                     JSON (one process per rank, one thread per lane: the
                     CPU, or a CUDA stream; and the host's runs and
                     copies), which Perfetto (ui.perfetto.dev) and
                     chrome://tracing open. Ranks' clocks are lined up by
                     offsets rank 0 measures at the start. CUDA: times from
                     CUDA events around each operation, as with --profile
                     (so no CUDA graph)
  --help             this text

Training (an artifact compiled with shard-opt --train: one step whose
weights, optimizer moments and step counter persist from step to step):
  --data FILE.npz    the batches: for each input of the step (labels
                     included) an array [S, ...the input's shape]; step t
                     (from 1) takes entry (t-1) mod S
  --steps N          run steps until the step counter reaches N. Rank 0
                     prints each step's loss (before its update), gradient
                     norm (before clipping), learning rate, tokens per
                     second (the elements of the first integer input, else
                     samples) and the time left on stderr: a live line on a
                     terminal, a line per step otherwise. A step whose loss
                     or gradient norm is not finite changes no weight and
                     stops the run, naming the step
  --skip-nonfinite   go on past such steps instead (each is reported; the
                     step counter advances)
  --log FILE.jsonl   one JSON object per step: step, loss, grad_norm, lr,
                     step_seconds, tokens_per_second
  --save-weights FILE.safetensors|FILE.npz
                     after the last step, write the trained weights, whole,
                     by ONNX initializer name (loadable with the safetensors
                     package, or numpy)

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

Launched by mpirun or srun, every rank runs its part of the program and
rank 0 writes the outputs; if any rank fails, all ranks stop with its reason.

environment:
  SHARDFLOW_TEST_FAIL_RANK=K   make rank K fail after loading (tests the
                               failure path)
  SHARDFLOW_TEST_STALL_RANK=K  make rank K sleep after loading instead of
                               running, as a rank that never joins the
                               first collective (tests --timeout)
)";

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string parentDir(const std::string &path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

/// A positive number of seconds for `flag`.
double seconds(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  double t = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(t > 0))
    throw RuntimeError(flag + " must be a positive number of seconds, got '" + v + "'");
  return t;
}

} // namespace

std::optional<Options> shardflow::runtime::parseOptions(int argc, char **argv) {
  Options o;
  CudaOptions &cuda = o.cuda;
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
      return std::nullopt;
    } else if (is("--weights")) {
      o.weights = value("--weights");
    } else if (is("--input")) {
      std::string spec = value("--input");
      auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0)
        throw RuntimeError("--input expects NAME=FILE (.npy or .pb), got '" + spec + "'");
      o.inputFiles[spec.substr(0, eq)] = spec.substr(eq + 1);
    } else if (is("--inputs")) {
      o.inputsNpz = value("--inputs");
    } else if (is("--output")) {
      o.output = value("--output");
    } else if (is("--threads")) {
      std::string v = value("--threads");
      o.device.threads = std::atoi(v.c_str());
      if (o.device.threads < 1)
        throw RuntimeError("--threads must be a positive integer, got '" + v + "'");
    } else if (is("--load-threads")) {
      std::string v = value("--load-threads");
      char *end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 1024)
        throw RuntimeError("--load-threads must be a number of threads from 1 to 1024, got '" + v +
                           "'");
      o.device.loadThreads = int(n);
    } else if (is("--repeat")) {
      std::string v = value("--repeat");
      o.repeat = std::atoi(v.c_str());
      if (o.repeat < 1)
        throw RuntimeError("--repeat must be a positive integer, got '" + v + "'");
    } else if (is("--device")) {
      std::string v = value("--device");
      char *end = nullptr;
      long d = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || d < 0)
        throw RuntimeError("--device must be a GPU number (0, 1, ...), got '" + v + "'");
      cuda.device = int(d);
    } else if (arg == "--cuda-graph") {
      cuda.cudaGraph = CudaOptions::CudaGraph::Always;
    } else if (arg == "--no-cuda-graph") {
      cuda.cudaGraph = CudaOptions::CudaGraph::Never;
    } else if (arg == "--group-gemms") {
      cuda.groupGemms = true;
    } else if (arg == "--no-group-gemms") {
      cuda.groupGemms = false;
    } else if (arg == "--gemm-autotune") {
      cuda.gemmAutotune = true;
    } else if (is("--gemm-autotune-file")) {
      cuda.gemmAutotune = true;
      cuda.gemmAutotuneFile = value("--gemm-autotune-file");
      if (cuda.gemmAutotuneFile.empty())
        throw RuntimeError("--gemm-autotune-file needs a file name");
    } else if (is("--pinned-memory")) {
      std::string v = value("--pinned-memory");
      using Pinned = CudaOptions::PinnedMemory;
      if (v == "auto")
        cuda.pinnedMemory = Pinned::Auto;
      else if (v == "always")
        cuda.pinnedMemory = Pinned::Always;
      else if (v == "never")
        cuda.pinnedMemory = Pinned::Never;
      else
        throw RuntimeError("--pinned-memory takes auto, always or never, got '" + v + "'");
    } else if (arg == "--allow-tf32") {
      cuda.allowTf32 = true;
    } else if (is("--attention-kernel")) {
      std::string v = value("--attention-kernel");
      using cuda::AttentionPath;
      if (v == "auto")
        cuda.attentionKernel = AttentionPath::Auto;
      else if (v == "mma")
        cuda.attentionKernel = AttentionPath::Mma;
      else if (v == "mma2")
        cuda.attentionKernel = AttentionPath::Mma2;
      else if (v == "simt")
        cuda.attentionKernel = AttentionPath::Simt;
      else
        throw RuntimeError("--attention-kernel takes auto, mma, mma2 or simt, got '" + v + "'");
    } else if (is("--timeout") || is("--collective-timeout")) {
      std::string flag = is("--timeout") ? "--timeout" : "--collective-timeout";
      o.runner.timeoutSeconds = seconds(flag, value(flag.c_str()));
      o.runner.timeoutFlag = flag;
    } else if (arg == "--verbose") {
      o.verbose = true;
    } else if (arg == "--profile") {
      o.profile = true;
    } else if (is("--trace")) {
      o.trace = value("--trace");
      if (o.trace.empty())
        throw RuntimeError("--trace needs a file name");
    } else if (is("--data")) {
      o.data = value("--data");
    } else if (is("--steps")) {
      std::string v = value("--steps");
      char *end = nullptr;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1)
        throw RuntimeError("--steps must be a positive integer, got '" + v + "'");
      o.steps = n;
    } else if (is("--log")) {
      o.log = value("--log");
      if (o.log.empty())
        throw RuntimeError("--log needs a file name");
    } else if (arg == "--skip-nonfinite") {
      o.skipNonfinite = true;
    } else if (is("--save-weights")) {
      o.saveWeights = value("--save-weights");
    } else if (arg == "--no-verify-weights") {
      o.device.verifyWeights = false;
    } else if (!arg.empty() && arg[0] == '-') {
      throw RuntimeError("unknown option '" + arg + "' (see --help)");
    } else if (o.artifact.empty()) {
      o.artifact = arg;
    } else {
      throw RuntimeError("more than one artifact given ('" + o.artifact + "' and '" + arg + "')");
    }
  }
  if (o.artifact.empty())
    throw RuntimeError("no artifact given (see --help)");
  // What the device and the runner take from the flags.
  if (!o.weights.empty()) {
    o.device.weightsDir = endsWith(o.weights, ".onnx") ? parentDir(o.weights) : o.weights;
    if (endsWith(o.weights, ".onnx"))
      o.device.weightsModel = o.weights;
  }
  o.device.verbose = o.verbose;
  o.runner.profile = o.profile;
  o.runner.trace = !o.trace.empty();
  o.device.timing = o.profile || o.runner.trace;
  o.device.traceClock = o.runner.trace;
  o.device.timingFlag = o.profile ? "--profile" : "--trace";
  o.device.timeoutSeconds = o.runner.timeoutSeconds;
  o.device.timeoutFlag = o.runner.timeoutFlag;
  return o;
}
