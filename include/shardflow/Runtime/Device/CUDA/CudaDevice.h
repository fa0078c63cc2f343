//===- CudaDevice.h - one NVIDIA GPU as a device ----------------*- C++ -*-===//
//
// The device for `target cuda` artifacts (Core/Device.h). One process per
// rank, one GPU per process: the rank's local rank
// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCAL_RANK) modulo the
// GPUs, or `--device N`. The CUDA libraries are opened at run time
// (CudaLibraries.h); shard-run links none.
//
// Loading does all the work that does not depend on the inputs, in files
// by concept (lib/Runtime/Device/CUDA):
//
//   CudaMemory.cpp   one device allocation for the activation arena of the
//                    planned size, others for the inputs and the weights,
//                    after checking that the program fits the GPU's free
//                    memory; weights mapped and checked as on the CPU
//                    (WeightLoader.h), converted on the host where their
//                    file type differs, and uploaded once, through
//                    page-locked staging when they are large; page-locked
//                    outputs; collective scratch.
//   CudaKernels.cpp  module code (`module` lines) loaded per name: the
//                    cubin for the GPU's exact architecture, else the PTX,
//                    compiled by the driver; generated kernels (`launch`)
//                    and the hand-written ones (DeviceKernels.h) planned
//                    once, with their status words (index checks).
//   CudaMatmul.cpp   matmul and gemm through cuBLASLt (CudaGemm.h):
//                    descriptors and algorithms chosen once; sibling GEMMs
//                    grouped into one pointer-array call; autotuning, with
//                    its choices remembered in a file (GemmAutotuneFile.h).
//   CudaStreams.cpp  the two-stream schedule: kernels on a compute stream,
//                    collectives on a communication stream, events between
//                    them only where their byte ranges overlap, so a
//                    collective overlaps with the compute that does not
//                    touch its buffers.
//   CudaGraph.cpp    the program captured into a CUDA graph and replayed
//                    (CudaOptions::cudaGraph).
//   CudaDevice.cpp   the device and its context, a run (uploads, the wait,
//                    downloads, status words) and its timing.
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
//   local_slice     the hand-written strided copy, else 2-D copies.
//   collectives     through NCCL (Comm/NCCL), which createCommunicator makes
//                   on the communication stream.
//
// Waiting for the GPU polls NCCL for asynchronous errors and gives up after
// DeviceSettings::timeoutSeconds, ending the job with the reason.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_DEVICE_CUDA_CUDADEVICE_H
#define SHARDFLOW_RUNTIME_DEVICE_CUDA_CUDADEVICE_H

#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Core/Device.h"
#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"

#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime {

struct CudaOptions {
  /// The GPU to use; -1: the local rank modulo the number of GPUs.
  int device = -1;
  /// Let f32 GEMMs use TF32 tensor cores (faster, about 10 mantissa bits).
  bool allowTf32 = false;
  /// Which attention kernel runs (Auto: tensor cores where they apply).
  cuda::AttentionPath attentionKernel = cuda::AttentionPath::Auto;
  /// Capture the program into a CUDA graph and launch the graph: one
  /// launch a run instead of one per operation. Always: captured at the
  /// first run (not with instruction timing, whose events a graph cannot
  /// take). Auto: captured at the second run, for a program without
  /// collectives and without timing, and run as it is where capturing
  /// fails (a single run pays nothing for the capture; NCCL inside a graph
  /// is not yet checked on GPUs). Never: no graph.
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

/// The rt kernels the CUDA device runs itself (cuBLASLt GEMMs and its
/// hand-written kernels), sorted; empty in a build without CUDA. Every
/// other kernel of a CUDA artifact is generated code (a launch). The kernel
/// signature table's CudaImpl::Runtime must name the same ones.
std::vector<std::string> cudaDeviceKernelNames();

/// The GPU of rank `world.rank()` (`world` outlives it). Throws
/// RuntimeError when the CUDA libraries cannot be loaded ("this artifact
/// targets 'cuda', but libcuda.so.1 could not be loaded ..."), or when
/// shard-run was built without CUDA support.
std::unique_ptr<Device> createCudaDevice(const DeviceSettings &settings, const CudaOptions &options,
                                         Communicator &world);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_DEVICE_CUDA_CUDADEVICE_H
