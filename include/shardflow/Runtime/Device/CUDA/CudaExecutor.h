//===- CudaExecutor.h - run a `target cuda` artifact on one GPU -*- C++ -*-===//
//
// The GPU counterpart of Executor (same shape: built from an artifact, run
// with host inputs, returns host outputs). One process per rank, one GPU
// per process: the rank's local rank (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID, MPI_LOCAL_RANK) modulo the GPUs, or `--device N`.
//
// Loading: the CUDA libraries are opened at run time (CudaLibraries.h);
// one device allocation holds the activation arena of the planned size,
// others the inputs and the weights. Weights are mapped and checked as on
// the CPU (WeightLoader.h), converted on the host when their file type
// differs (`source-dtype`), and uploaded once. Module code (`module`
// lines) is loaded per name: the cubin for the GPU's exact architecture,
// else the PTX, compiled by the driver.
//
// Instructions:
//   kernel launch   module=s:M function=s:F grid=is:x,y,z block=is:x,y,z
//                   shared=i:BYTES; arguments: one device pointer per `in`
//                   then per `out` buffer.
//   kernel matmul   ONNX MatMul (batch broadcasting, 1-D operands), and
//   kernel gemm     ONNX Gemm (trans_a, trans_b, alpha, beta, C broadcast to
//                   [M,N]), through cuBLASLt; f32, f16 and bf16 operands
//                   and results of one type, accumulated in f32 (f32 without
//                   TF32 unless allowTf32). Optional `epilogue=s:bias`,
//                   `relu_bias` or `gelu_bias` with a third input, a bias of
//                   the result's type and shape [N], fuses
//                   act(A B + bias) into the GEMM (gelu_bias is cuBLASLt's
//                   tanh approximation); on gemm the third input is then C
//                   as that bias, with beta 1.
//   kernel NAME     a hand-written device kernel (DeviceKernels.h), else an
//                   error naming NAME.
//   collective ...  through NCCL (see Executor.h for each one's meaning);
//                   local_slice as a strided device copy.
//
// Streams: kernels run on a compute stream, collectives on a communication
// stream; events order the two only where their byte ranges overlap, so a
// collective overlaps with the compute that does not touch its buffers.
// Waiting for the GPU polls NCCL for asynchronous errors and gives up after
// `collectiveTimeoutSeconds`, aborting every rank with the reason.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CUDAEXECUTOR_H
#define SHARDFLOW_RUNTIME_CUDAEXECUTOR_H

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime {

struct CudaOptions {
  /// The GPU to use; -1: the local rank modulo the number of GPUs.
  int device = -1;
  /// Let f32 GEMMs use TF32 tensor cores (faster, about 10 mantissa bits).
  bool allowTf32 = false;
  /// How long a host wait for the GPU (collectives included) may take.
  double collectiveTimeoutSeconds = 600;
  /// Print the chosen device and library versions to stderr.
  bool verbose = false;
  /// Time every instruction (CUDA events around it on its stream).
  bool profile = false;
  /// Which attention kernel runs (Auto: tensor cores where they apply).
  cuda::AttentionPath attentionKernel = cuda::AttentionPath::Auto;
  /// Capture the program into a CUDA graph and launch the graph: one
  /// launch a run instead of one per operation. Always: captured at the
  /// first run (not with `profile`, whose events a graph cannot time).
  /// Auto: captured at the second run, for a program without collectives
  /// and without `profile`, and run as it is where capturing fails (a
  /// single run pays nothing for the capture; NCCL inside a graph is not
  /// yet checked on GPUs). Never: no graph.
  enum class CudaGraph { Auto, Always, Never } cudaGraph = CudaGraph::Auto;
  /// Run consecutive GEMMs that read one activation with the same shapes
  /// (separate query, key and value projections; gate and up) as one
  /// cuBLASLt call in pointer-array batch mode.
  bool groupGemms = true;
  /// At load, time the heuristic's best kAutotuneCandidates cuBLASLt
  /// algorithms of every distinct GEMM problem and keep the fastest.
  bool gemmAutotune = false;
  static constexpr int kAutotuneCandidates = 8;
  /// With gemmAutotune: a file of earlier choices (problem, GPU, cuBLASLt
  /// version, the heuristic's algorithm count) that are taken instead of
  /// timed, so that loads after the first make the same choices; problems
  /// not in it are timed and rank 0 writes the file with them added.
  std::string gemmAutotuneFile;
  /// Host threads that read, check and convert the weights before their
  /// upload (0: defaultLoadThreads() in WeightLoader.h).
  int loadThreads = 0;
  /// Page-locked host memory (cuMemHostAlloc), which the GPU reads and
  /// writes directly, for staging the weights' upload and for the outputs'
  /// download; pageable memory where it is not used or the driver refuses.
  /// Pinning costs time too (the pages are locked when allocated), so Auto
  /// stages the weights when this rank's come to kPinnedStagingFrom bytes or
  /// more, and pins the outputs from the second run on (a single run
  /// downloads them once, from pageable memory). Always: both from the
  /// start; Never: neither.
  enum class PinnedMemory { Auto, Always, Never } pinnedMemory = PinnedMemory::Auto;
  static constexpr size_t kPinnedStagingFrom = size_t(256) << 20;
};

/// True when this shard-run was built with CUDA support (it may still lack
/// a driver at run time).
bool cudaSupportBuiltIn();

class CudaExecutor {
public:
  /// As Executor. Throws RuntimeError when the CUDA libraries cannot be
  /// loaded ("this artifact targets 'cuda', but libcuda.so.1 could not be
  /// loaded ..."), or when shard-run was built without CUDA support.
  CudaExecutor(Artifact artifact, std::string weightsDir, Communicator *comm = nullptr,
               bool verifyWeights = true, CudaOptions options = {});
  ~CudaExecutor();

  /// Inputs by name, each matching the artifact's shape and type. Returns
  /// the outputs by name, in the artifact's order, as views of host
  /// buffers the executor owns (valid until the next run).
  std::vector<std::pair<std::string, Tensor>>
  run(const std::map<std::string, HostTensor> &inputs);

  const Artifact &artifact() const;
  /// Bytes of weights this rank holds on its GPU.
  size_t mappedWeightBytes() const;
  /// GPU time of the last run's program, from after the input uploads to
  /// the end of its last instruction on either stream (no host copies).
  double lastDeviceSeconds() const;
  /// Host time the last run took to download its outputs, and their bytes.
  double lastDownloadSeconds() const;
  size_t outputBytes() const;
  /// Whether the last run downloaded its outputs into page-locked memory
  /// (all of them; see CudaOptions::pinnedMemory).
  bool lastDownloadPinned() const;
  /// With CudaOptions::profile: the last run's GPU seconds per instruction,
  /// from when its stream reached it (its waits met) to its end.
  const std::vector<double> &instructionSeconds() const;

  class Impl;

private:
  std::unique_ptr<Impl> impl;
};

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_CUDAEXECUTOR_H
