//===- CudaGemm.h - row-major GEMMs through cuBLASLt -----------*- C++ -*-===//
//
// The CUDA device's matmul and gemm kernels describe a row-major problem
// D[m,n] = alpha * op(A) op(B) + beta * C (+ bias, activation), batched or
// not; this turns it into cuBLASLt's column-major one by computing D^T =
// op(B)^T op(A)^T, which reads the same bytes with the operands swapped, so
// no transposition ever runs. Descriptors and the heuristic's algorithm
// are built once per distinct problem and reused. With autotuning, the
// heuristic's best few algorithms are kept and tune() times each on the
// problem's own operands and keeps the fastest.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CUDA_CUDAGEMM_H
#define SHARDFLOW_RUNTIME_CUDA_CUDAGEMM_H

#include "shardflow/Runtime/Device/CUDA/CudaLibraries.h"
#include "shardflow/Runtime/Format/Kernel.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shardflow::runtime::cuda {

/// One row-major GEMM problem (a batch of them when batch > 1).
struct GemmProblem {
  DType dtype = DType::F32; // A and B (and the bias)
  /// C and D: dtype, or f32 for f16/bf16 operands (accumulated in f32 and
  /// rounded once to f32; no bias epilogue then).
  DType outDtype = DType::F32;
  bool tf32 = false;        // f32 only: allow TF32 tensor cores
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false; // A stored [k,m], B stored [n,k]
  int64_t batch = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0; // elements, batch > 1
  /// batch > 1: A, B, C and D are device arrays of `batch` pointers, one
  /// matrix each, instead of strided (cuBLASLt's pointer-array batch mode).
  bool pointerArray = false;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  /// Pointer alignments in bytes (a power of two, at most 256): cuBLASLt
  /// assumes 256 unless told, and an algorithm picked for aligned pointers
  /// may fault on others.
  unsigned alignA = 256, alignB = 256, alignC = 256, alignD = 256;
  /// The bias pointer's alignment (bias epilogues): cuBLASLt's heuristic
  /// takes it from the descriptor's bias pointer, which it does not read.
  unsigned alignBias = 256;

  std::string key() const;
};

/// cudaDataType for f32, f16, bf16; throws RuntimeError for others.
cudaDataType_t gemmDataType(DType t);

/// The largest power of two (at most 256) that divides `pointer`.
unsigned pointerAlignment(CUdeviceptr pointer);

class GemmRunner {
public:
  /// `workspace` of `workspaceBytes` on the device is used by every GEMM
  /// (they run on one stream). `candidates`: how many of the heuristic's
  /// algorithms each problem keeps for tune() (1: no tuning).
  GemmRunner(CUdeviceptr workspace, size_t workspaceBytes, int candidates = 1);
  ~GemmRunner();
  GemmRunner(const GemmRunner &) = delete;
  GemmRunner &operator=(const GemmRunner &) = delete;

  struct Prepared;
  /// The descriptors and algorithm for `p`, built on first use. Returns
  /// nullptr when cuBLASLt has no algorithm for it (the caller may try
  /// another formulation); throws RuntimeError on a cuBLASLt error.
  const Prepared *prepare(const GemmProblem &p);

  /// The problem `prepared` was made for.
  static const GemmProblem &problemOf(const Prepared &prepared);

  /// Enqueues D = alpha * op(A) op(B) + beta * C (+ bias) on `stream`.
  /// C may be D (in place) or 0 when beta is 0.
  void run(const Prepared &prepared, float alpha, CUdeviceptr a, CUdeviceptr b,
           float beta, CUdeviceptr c, CUdeviceptr d, CUdeviceptr bias, CUstream stream);

  /// What tune() measured: the candidates' times (ms a call, negative for
  /// one that failed to run) and the index of the one kept.
  struct Tuning {
    std::vector<float> milliseconds;
    size_t chosen = 0;
  };
  /// Times each kept algorithm of `prepared` on these operands (`calls`
  /// calls after one warm-up, between events on `stream`, which it
  /// synchronizes) and keeps the fastest for every later run(). Writes D
  /// (and reads it again when C is D): only for buffers whose contents do
  /// not matter yet. Empty when there was nothing to choose from.
  Tuning tune(const Prepared &prepared, float alpha, CUdeviceptr a, CUdeviceptr b, float beta,
              CUdeviceptr c, CUdeviceptr d, CUdeviceptr bias, CUstream stream, int calls = 5);

  /// How many algorithms `prepared` keeps to choose from (tune()'s).
  static size_t candidateCount(const Prepared &prepared);
  /// Keeps candidate `index` of `prepared` for every later run(), as if
  /// tune() had chosen it (an --gemm-autotune-file record).
  void choose(const Prepared &prepared, size_t index);

private:
  cublasLtHandle_t handle = nullptr;
  CUdeviceptr workspace;
  size_t workspaceBytes;
  int candidates;
  std::map<std::string, std::unique_ptr<Prepared>> cache;
};

} // namespace shardflow::runtime::cuda

#endif // SHARDFLOW_RUNTIME_CUDA_CUDAGEMM_H
