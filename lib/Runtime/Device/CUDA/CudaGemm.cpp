//===- CudaGemm.cpp - row-major GEMMs through cuBLASLt ---------------------===//

#include "CudaGemm.h"

#include <algorithm>
#include <cstdint>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {
void checkLt(cublasStatus_t status, const char *call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string(call) + " failed: " + describe(status));
}
} // namespace

#define LT_CALL(fn, ...) checkLt(cublasLt().fn(__VA_ARGS__), #fn)

std::string GemmProblem::key() const {
  std::string text;
  for (int64_t v : {int64_t(dtype), int64_t(outDtype), int64_t(tf32), m, n, k, int64_t(transA),
                    int64_t(transB), batch, strideA, strideB, strideC,
                    int64_t(pointerArray), int64_t(epilogue),
                    int64_t(alignA), int64_t(alignB), int64_t(alignC), int64_t(alignD),
                    int64_t(alignBias)})
    text += std::to_string(v) + ",";
  return text;
}

cudaDataType_t cuda::gemmDataType(DType t) {
  switch (t) {
  case DType::F32:
    return CUDA_R_32F;
  case DType::F16:
    return CUDA_R_16F;
  case DType::BF16:
    return CUDA_R_16BF;
  default:
    throw RuntimeError(std::string("GEMMs on the GPU take f32, f16 or bf16, not ") +
                       dtypeName(t));
  }
}

unsigned cuda::pointerAlignment(CUdeviceptr pointer) {
  unsigned a = 256;
  while (a > 1 && pointer % a)
    a /= 2;
  return a;
}

struct GemmRunner::Prepared {
  cublasLtMatmulDesc_t desc = nullptr;
  // First and second operand of the column-major problem (our B, then A),
  // and C = D's layout.
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspaceBytes = 0;
  /// The heuristic's algorithms in its order, with their workspace sizes
  /// (algo is one of them: the first until tune() picks another).
  std::vector<std::pair<cublasLtMatmulAlgo_t, size_t>> candidates;
  bool hasBias = false;
  GemmProblem problem;

  ~Prepared() {
    const CublasLt &lt = cublasLt();
    if (desc)
      lt.cublasLtMatmulDescDestroy(desc);
    for (cublasLtMatrixLayout_t l : {first, second, result})
      if (l)
        lt.cublasLtMatrixLayoutDestroy(l);
  }
};

GemmRunner::GemmRunner(CUdeviceptr workspace, size_t workspaceBytes, int candidates)
    : workspace(workspace), workspaceBytes(workspaceBytes), candidates(std::max(candidates, 1)) {
  LT_CALL(cublasLtCreate, &handle);
}

GemmRunner::~GemmRunner() {
  cache.clear();
  if (handle)
    cublasLt().cublasLtDestroy(handle);
}

const GemmRunner::Prepared *GemmRunner::prepare(const GemmProblem &p) {
  std::string key = p.key();
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second.get();
  cudaDataType_t type = gemmDataType(p.dtype), outType = gemmDataType(p.outDtype);
  bool widening = p.outDtype == DType::F32 && p.dtype != DType::F32 &&
                  p.epilogue == CUBLASLT_EPILOGUE_DEFAULT;
  if (p.outDtype != p.dtype && !widening)
    throw RuntimeError(std::string("a GEMM of ") + dtypeName(p.dtype) + " operands writes " +
                       dtypeName(p.dtype) + ", or f32 without an epilogue, not " +
                       dtypeName(p.outDtype));
  auto prepared = std::make_unique<Prepared>();
  cublasComputeType_t compute =
      p.dtype == DType::F32 && p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LT_CALL(cublasLtMatmulDescCreate, &prepared->desc, compute, CUDA_R_32F);
  // Column-major view: D^T[n,m] = op(B)^T[n,k] op(A)^T[k,m]. Row-major B
  // [k,n] is column-major B^T [n,k] with ld n; transB means it is stored
  // [n,k], i.e. column-major [k,n], which needs a transpose. Same for A.
  cublasOperation_t opFirst = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CALL(cublasLtMatmulDescSetAttribute, prepared->desc, CUBLASLT_MATMUL_DESC_TRANSA,
          &opFirst, sizeof(opFirst));
  LT_CALL(cublasLtMatmulDescSetAttribute, prepared->desc, CUBLASLT_MATMUL_DESC_TRANSB,
          &opSecond, sizeof(opSecond));
  cublasLtEpilogue_t epilogue = p.epilogue;
  LT_CALL(cublasLtMatmulDescSetAttribute, prepared->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
          &epilogue, sizeof(epilogue));
  prepared->hasBias = p.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  if (prepared->hasBias) {
    // The heuristic below takes the expected bias alignment from this
    // pointer's value (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER) and
    // does not dereference it: a placeholder with exactly the alignment of
    // the biases this problem runs with. Left unset (null, aligned to
    // anything), it may pick an algorithm that faults on a bias slice at an
    // odd offset; run() sets the real pointer.
    void *placeholder = reinterpret_cast<void *>(uintptr_t(p.alignBias));
    LT_CALL(cublasLtMatmulDescSetAttribute, prepared->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
            &placeholder, sizeof(placeholder));
  }

  auto layout = [&](cublasLtMatrixLayout_t &l, int64_t rows, int64_t cols, int64_t ld,
                    int64_t stride, cudaDataType_t elementType) {
    LT_CALL(cublasLtMatrixLayoutCreate, &l, elementType, uint64_t(rows), uint64_t(cols), ld);
    if (p.batch > 1) {
      int32_t count = int32_t(p.batch);
      LT_CALL(cublasLtMatrixLayoutSetAttribute, l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
              sizeof(count));
      if (p.pointerArray) {
        uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
        LT_CALL(cublasLtMatrixLayoutSetAttribute, l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode,
                sizeof(mode));
      } else {
        LT_CALL(cublasLtMatrixLayoutSetAttribute, l,
                CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
      }
    }
  };
  if (p.transB)
    layout(prepared->first, p.k, p.n, p.k, p.strideB, type);
  else
    layout(prepared->first, p.n, p.k, p.n, p.strideB, type);
  if (p.transA)
    layout(prepared->second, p.m, p.k, p.m, p.strideA, type);
  else
    layout(prepared->second, p.k, p.m, p.k, p.strideA, type);
  layout(prepared->result, p.n, p.m, p.n, p.strideC, outType);

  cublasLtMatmulPreference_t preference = nullptr;
  LT_CALL(cublasLtMatmulPreferenceCreate, &preference);
  struct PreferenceGuard {
    cublasLtMatmulPreference_t p;
    ~PreferenceGuard() { cublasLt().cublasLtMatmulPreferenceDestroy(p); }
  } guard{preference};
  uint64_t limit = workspaceBytes;
  LT_CALL(cublasLtMatmulPreferenceSetAttribute, preference,
          CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof(limit));
  // The first operand of the column-major problem is our B.
  uint32_t aligns[4] = {p.alignB, p.alignA, p.alignC, p.alignD};
  const cublasLtMatmulPreferenceAttributes_t alignAttrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    LT_CALL(cublasLtMatmulPreferenceSetAttribute, preference, alignAttrs[i], &aligns[i],
            sizeof(uint32_t));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(candidates));
  int returned = 0;
  cublasStatus_t status = cublasLt().cublasLtMatmulAlgoGetHeuristic(
      handle, prepared->desc, prepared->first, prepared->second, prepared->result,
      prepared->result, preference, candidates, results.data(), &returned);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && returned == 0))
    return nullptr;
  checkLt(status, "cublasLtMatmulAlgoGetHeuristic");
  for (int i = 0; i < std::min(returned, candidates); ++i)
    if (results[size_t(i)].state == CUBLAS_STATUS_SUCCESS &&
        results[size_t(i)].workspaceSize <= workspaceBytes)
      prepared->candidates.emplace_back(results[size_t(i)].algo, results[size_t(i)].workspaceSize);
  if (prepared->candidates.empty())
    return nullptr;
  prepared->algo = prepared->candidates[0].first;
  prepared->workspaceBytes = prepared->candidates[0].second;
  prepared->problem = p;
  return cache.emplace(key, std::move(prepared)).first->second.get();
}

const GemmProblem &GemmRunner::problemOf(const Prepared &prepared) { return prepared.problem; }

size_t GemmRunner::candidateCount(const Prepared &prepared) {
  return prepared.candidates.size();
}

void GemmRunner::choose(const Prepared &prepared, size_t index) {
  auto owned = cache.find(prepared.problem.key());
  if (owned == cache.end() || owned->second.get() != &prepared)
    throw RuntimeError("GemmRunner::choose: a problem this runner did not prepare");
  Prepared &p = *owned->second;
  if (index >= p.candidates.size())
    throw RuntimeError("GemmRunner::choose: algorithm " + std::to_string(index) + " of " +
                       std::to_string(p.candidates.size()));
  p.algo = p.candidates[index].first;
  p.workspaceBytes = p.candidates[index].second;
}

GemmRunner::Tuning GemmRunner::tune(const Prepared &prepared, float alpha, CUdeviceptr a,
                                     CUdeviceptr b, float beta, CUdeviceptr c, CUdeviceptr d,
                                     CUdeviceptr bias, CUstream stream, int calls) {
  Tuning tuning;
  auto owned = cache.find(prepared.problem.key());
  if (owned == cache.end() || owned->second.get() != &prepared)
    throw RuntimeError("GemmRunner::tune: a problem this runner did not prepare");
  Prepared &p = *owned->second;
  if (p.candidates.size() < 2)
    return tuning;
  const CudaDriver &drv = driver();
  CUevent start = nullptr, end = nullptr;
  auto check = [](CUresult r, const char *what) {
    if (r != CUDA_SUCCESS)
      throw RuntimeError(std::string(what) + " failed while timing GEMM algorithms: " +
                         describe(r));
  };
  check(drv.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  struct EventGuard {
    CUevent &s, &e;
    ~EventGuard() {
      if (s)
        driver().cuEventDestroy(s);
      if (e)
        driver().cuEventDestroy(e);
    }
  } guard{start, end};
  check(drv.cuEventCreate(&end, CU_EVENT_DEFAULT), "cuEventCreate");
  float best = -1;
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    p.algo = p.candidates[i].first;
    p.workspaceBytes = p.candidates[i].second;
    float ms = -1;
    try {
      run(p, alpha, a, b, beta, c, d, bias, stream); // warm-up
      check(drv.cuEventRecord(start, stream), "cuEventRecord");
      for (int r = 0; r < calls; ++r)
        run(p, alpha, a, b, beta, c, d, bias, stream);
      check(drv.cuEventRecord(end, stream), "cuEventRecord");
      check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize");
      check(drv.cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime");
      ms /= float(calls);
    } catch (const RuntimeError &) {
      // cuBLASLt refused this algorithm at enqueue: skip it. (A failure on
      // the device would have surfaced as an error of the synchronize.)
      ms = -1;
      check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize");
    }
    tuning.milliseconds.push_back(ms);
    if (ms >= 0 && (best < 0 || ms < best)) {
      best = ms;
      tuning.chosen = i;
    }
  }
  if (best < 0)
    throw RuntimeError("no cuBLASLt algorithm ran for the GEMM m=" + std::to_string(p.problem.m) +
                       " n=" + std::to_string(p.problem.n) + " k=" + std::to_string(p.problem.k));
  p.algo = p.candidates[tuning.chosen].first;
  p.workspaceBytes = p.candidates[tuning.chosen].second;
  return tuning;
}

void GemmRunner::run(const Prepared &p, float alpha, CUdeviceptr a, CUdeviceptr b, float beta,
                     CUdeviceptr c, CUdeviceptr d, CUdeviceptr bias, CUstream stream) {
  if (p.hasBias) {
    // Per call: the descriptor is shared by every GEMM of this shape, and
    // cuBLASLt reads the attribute when the call is enqueued.
    void *pointer = reinterpret_cast<void *>(bias);
    LT_CALL(cublasLtMatmulDescSetAttribute, p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
            &pointer, sizeof(pointer));
  }
  // C is only read when beta != 0; cuBLASLt still wants a valid pointer.
  CUdeviceptr cPointer = c ? c : d;
  LT_CALL(cublasLtMatmul, handle, p.desc, &alpha, reinterpret_cast<const void *>(b), p.first,
          reinterpret_cast<const void *>(a), p.second, &beta,
          reinterpret_cast<const void *>(cPointer), p.result, reinterpret_cast<void *>(d),
          p.result, &p.algo, reinterpret_cast<void *>(workspace), p.workspaceBytes,
          reinterpret_cast<cudaStream_t>(stream));
}
