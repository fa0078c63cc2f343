//===- StandinCublasLt.cpp - libcublasLt for machines without a GPU -------===//
//
// The cuBLASLt calls shard-run makes, computed on the host from cuBLASLt's
// documented semantics (cublasLt.h and the cuBLAS guide), independently of
// how shard-run maps its row-major GEMMs onto them:
//
//   D = act(alpha * op(A) op(B) + beta * C + bias)
//
// with column-major (or row-major, CUBLASLT_MATRIX_LAYOUT_ORDER) layouts
// of (rows, cols, ld), strided batches, op(X) = X or X^T, a bias of D's
// row count (the same for every batch), GELU in its tanh form, products
// accumulated in f32 (operands rounded to TF32 first under
// CUBLAS_COMPUTE_32F_FAST_TF32) and rounded once to D's type.
//
// It is strict where a real cuBLASLt may fail or fault: shapes that do not
// agree, a leading dimension below the row count, type combinations
// cuBLASLt does not offer, matrices that reach outside their device
// allocation, pointers less aligned than the alignment the algorithm was
// chosen for (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, 256 unless set;
// for the bias, the alignment of the bias pointer the heuristic saw),
// a workspace smaller than the algorithm asked for. Each such call fails
// with a status and a note on stderr saying why.
//
//===----------------------------------------------------------------------===//

#include "Standin.h"

#include "shardflow/Runtime/Format/FloatConversion.h"

#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace shardflow;

struct cublasLtContext {
  int live = 1;
};

namespace {

struct Layout {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;
  uint32_t batchMode = CUBLASLT_BATCH_MODE_STRIDED;

  bool pointerArray() const { return batchMode == CUBLASLT_BATCH_MODE_POINTER_ARRAY; }
  /// Element offset of (i, j) in batch b (pointer arrays: from the batch's
  /// own matrix).
  int64_t at(uint64_t i, uint64_t j, int64_t b) const {
    int64_t base = pointerArray() ? 0 : b * stride;
    return base + (order == CUBLASLT_ORDER_COL ? int64_t(i) + int64_t(j) * ld
                                               : int64_t(i) * ld + int64_t(j));
  }
  /// Elements from the first to one past the last that (i, j, b) reach.
  int64_t span() const {
    if (!rows || !cols)
      return 0;
    return at(rows - 1, cols - 1, pointerArray() ? 0 : batch - 1) + 1;
  }
};

struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int32_t biasType = -1; // -1: D's type
  int32_t pointerMode = CUBLASLT_POINTER_MODE_HOST;
};

struct Preference {
  uint64_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D
};

// The stand-in's algorithm, in cublasLtMatmulAlgo_t's bytes: the
// alignments it was chosen for and the workspace it needs.
struct Algo {
  uint64_t magic;
  uint64_t align[4];
  uint64_t workspace;
  // The bias pointer's alignment when the heuristic ran: cublasLt.h says
  // the heuristic takes the expected bias alignment from its value then.
  uint64_t biasAlign;
  // SHARDFLOW_STANDIN_CUBLASLT_ALGOS: how long each call of this algorithm
  // waits before it computes (the heuristic's later ones are faster).
  uint64_t delayMicroseconds;
};
constexpr uint64_t kAlgoMagic = 0x5348415244464c57ull;
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

Desc *desc(cublasLtMatmulDesc_t d) { return reinterpret_cast<Desc *>(d); }
Layout *layout(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout *>(l); }
Preference *preference(cublasLtMatmulPreference_t p) { return reinterpret_cast<Preference *>(p); }

size_t typeSize(cudaDataType t) {
  switch (t) {
  case CUDA_R_32F:
    return 4;
  case CUDA_R_16F:
  case CUDA_R_16BF:
    return 2;
  default:
    return 0;
  }
}

const char *typeName(cudaDataType t) {
  switch (t) {
  case CUDA_R_32F:
    return "f32";
  case CUDA_R_16F:
    return "f16";
  case CUDA_R_16BF:
    return "bf16";
  default:
    return "an unsupported type";
  }
}

float load(const void *base, int64_t index, cudaDataType t) {
  switch (t) {
  case CUDA_R_32F:
    return static_cast<const float *>(base)[index];
  case CUDA_R_16F:
    return runtime::halfBitsToFloat(static_cast<const uint16_t *>(base)[index]);
  default:
    return runtime::bf16BitsToFloat(static_cast<const uint16_t *>(base)[index]);
  }
}

void store(void *base, int64_t index, cudaDataType t, float v) {
  switch (t) {
  case CUDA_R_32F:
    static_cast<float *>(base)[index] = v;
    break;
  case CUDA_R_16F:
    static_cast<uint16_t *>(base)[index] = runtime::floatToHalfBits(v);
    break;
  default:
    static_cast<uint16_t *>(base)[index] = runtime::floatToBf16Bits(v);
    break;
  }
}

/// f32 rounded to TF32's 10 mantissa bits (to nearest, ties away).
float toTf32(float v) {
  if (!std::isfinite(v))
    return v;
  uint32_t bits = runtime::floatToBits(v);
  bits = (bits + 0x1000u) & ~0x1fffu;
  return runtime::bitsToFloat(bits);
}

cublasStatus_t refuse(cublasStatus_t status, const std::string &why) {
  standin::note("cublasLt: " + why);
  return status;
}

std::string dims(const Layout &l) {
  return std::to_string(l.rows) + "x" + std::to_string(l.cols) + " ld " + std::to_string(l.ld) +
         (l.batch > 1 ? " batch " + std::to_string(l.batch) +
                            (l.pointerArray() ? " (pointer array)"
                                              : " stride " + std::to_string(l.stride))
                      : "");
}

/// The problem's sizes, or a reason it is not one cuBLASLt takes.
struct Problem {
  uint64_t m = 0, n = 0, k = 0;
  std::string error;
};

Problem check(const Desc &d, const Layout &a, const Layout &b, const Layout &c,
              const Layout &out) {
  Problem p;
  auto bad = [&](std::string why) {
    p.error = std::move(why);
    return p;
  };
  for (const Layout *l : {&a, &b, &c, &out}) {
    if (!typeSize(l->type))
      return bad("a matrix of an unsupported type");
    uint64_t leading = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
    if (l->ld < int64_t(std::max<uint64_t>(leading, 1)))
      return bad("leading dimension " + std::to_string(l->ld) + " below " +
                 std::to_string(leading) + " (" + dims(*l) + ")");
  }
  if (d.scale != CUDA_R_32F)
    return bad("scale type other than f32");
  if (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32) {
    if (a.type != CUDA_R_32F || b.type != CUDA_R_32F || out.type != CUDA_R_32F)
      return bad("TF32 compute takes f32 matrices only");
  } else if (d.compute != CUBLAS_COMPUTE_32F) {
    return bad("compute type " + std::to_string(int(d.compute)) + " (the stand-in has 32F and "
               "32F_FAST_TF32)");
  }
  if (a.type != b.type)
    return bad(std::string("A is ") + typeName(a.type) + " but B is " + typeName(b.type));
  if (c.type != out.type)
    return bad("C and D differ in type");
  if (out.type != a.type && out.type != CUDA_R_32F)
    return bad(std::string(typeName(a.type)) + " operands cannot write " + typeName(out.type));
  p.m = d.transA == CUBLAS_OP_N ? a.rows : a.cols;
  p.k = d.transA == CUBLAS_OP_N ? a.cols : a.rows;
  uint64_t kb = d.transB == CUBLAS_OP_N ? b.rows : b.cols;
  p.n = d.transB == CUBLAS_OP_N ? b.cols : b.rows;
  if (kb != p.k)
    return bad("op(A) is " + std::to_string(p.m) + "x" + std::to_string(p.k) + " but op(B) is " +
               std::to_string(kb) + "x" + std::to_string(p.n));
  if (out.rows != p.m || out.cols != p.n || c.rows != p.m || c.cols != p.n)
    return bad("D is " + std::to_string(out.rows) + "x" + std::to_string(out.cols) +
               " but op(A) op(B) is " + std::to_string(p.m) + "x" + std::to_string(p.n));
  if (a.batch != out.batch || b.batch != out.batch || c.batch != out.batch)
    return bad("batch counts differ");
  if (a.batchMode != out.batchMode || b.batchMode != out.batchMode ||
      c.batchMode != out.batchMode)
    return bad("batch modes differ (strided and pointer array)");
  if (d.transA != CUBLAS_OP_N && d.transA != CUBLAS_OP_T)
    return bad("transA other than N or T");
  if (d.transB != CUBLAS_OP_N && d.transB != CUBLAS_OP_T)
    return bad("transB other than N or T");
  switch (d.epilogue) {
  case CUBLASLT_EPILOGUE_DEFAULT:
  case CUBLASLT_EPILOGUE_RELU:
  case CUBLASLT_EPILOGUE_GELU:
    break;
  case CUBLASLT_EPILOGUE_BIAS:
  case CUBLASLT_EPILOGUE_RELU_BIAS:
  case CUBLASLT_EPILOGUE_GELU_BIAS:
    if (d.biasType != -1 && d.biasType != out.type)
      return bad("a bias type other than D's");
    break;
  default:
    return bad("epilogue " + std::to_string(d.epilogue) + " (the stand-in has bias, relu and "
               "gelu)");
  }
  if (d.pointerMode != CUBLASLT_POINTER_MODE_HOST)
    return bad("alpha and beta on the device");
  return p;
}

unsigned alignmentOf(uintptr_t pointer) {
  unsigned a = 256;
  while (a > 1 && pointer % a)
    a /= 2;
  return a;
}

const char *epilogueName(uint32_t e) {
  switch (e) {
  case CUBLASLT_EPILOGUE_BIAS:
    return " bias";
  case CUBLASLT_EPILOGUE_RELU_BIAS:
    return " relu_bias";
  case CUBLASLT_EPILOGUE_GELU_BIAS:
    return " gelu_bias";
  case CUBLASLT_EPILOGUE_RELU:
    return " relu";
  case CUBLASLT_EPILOGUE_GELU:
    return " gelu";
  default:
    return "";
  }
}

template <typename T>
cublasStatus_t setValue(T &field, const void *buf, size_t size, const char *what) {
  if (!buf || size != sizeof(T))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(what) + ": " + std::to_string(size) +
                                                   " bytes, the attribute takes " +
                                                   std::to_string(sizeof(T)));
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" {

size_t CUBLASWINAPI cublasLtGetVersion(void) { return CUBLAS_VERSION; }

const char *CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  default:
    return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char *CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "the library was not initialized";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an invalid numeric value was used as an argument";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "the functionality requested is not supported";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "the GPU program failed to execute";
  default:
    return "unknown error";
  }
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle)
    return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle || !lightHandle->live)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  lightHandle->live = 0; // kept: work queued with it may still run
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                                     cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  if (!matmulDesc)
    return CUBLAS_STATUS_INVALID_VALUE;
  auto *d = new Desc;
  d->compute = computeType;
  d->scale = scaleType;
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete desc(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void *buf, size_t sizeInBytes) {
  if (!matmulDesc)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  Desc &d = *desc(matmulDesc);
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
    return setValue(d.transA, buf, sizeInBytes, "TRANSA");
  case CUBLASLT_MATMUL_DESC_TRANSB:
    return setValue(d.transB, buf, sizeInBytes, "TRANSB");
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return setValue(d.epilogue, buf, sizeInBytes, "EPILOGUE");
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return setValue(d.bias, buf, sizeInBytes, "BIAS_POINTER");
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    return setValue(d.biasType, buf, sizeInBytes, "BIAS_DATA_TYPE");
  case CUBLASLT_MATMUL_DESC_POINTER_MODE:
    return setValue(d.pointerMode, buf, sizeInBytes, "POINTER_MODE");
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    return setValue(d.scale, buf, sizeInBytes, "SCALE_TYPE");
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
    return setValue(d.compute, buf, sizeInBytes, "COMPUTE_TYPE");
  default:
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "matmul descriptor attribute " + std::to_string(int(attr)) +
                      " is not known to the stand-in");
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  if (!matLayout)
    return CUBLAS_STATUS_INVALID_VALUE;
  auto *l = new Layout;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete layout(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void *buf,
                                                             size_t sizeInBytes) {
  if (!matLayout)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  Layout &l = *layout(matLayout);
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    if (cublasStatus_t s = setValue(l.batch, buf, sizeInBytes, "BATCH_COUNT"))
      return s;
    return l.batch >= 1 ? CUBLAS_STATUS_SUCCESS
                        : refuse(CUBLAS_STATUS_INVALID_VALUE, "a batch count below 1");
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    return setValue(l.stride, buf, sizeInBytes, "STRIDED_BATCH_OFFSET");
  case CUBLASLT_MATRIX_LAYOUT_ORDER:
    return setValue(l.order, buf, sizeInBytes, "ORDER");
  case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE:
    if (cublasStatus_t s = setValue(l.batchMode, buf, sizeInBytes, "BATCH_MODE"))
      return s;
    return l.batchMode == CUBLASLT_BATCH_MODE_STRIDED ||
                   l.batchMode == CUBLASLT_BATCH_MODE_POINTER_ARRAY
               ? CUBLAS_STATUS_SUCCESS
               : refuse(CUBLAS_STATUS_INVALID_VALUE,
                        "batch mode " + std::to_string(l.batchMode) +
                            " (the stand-in has strided and pointer array)");
  default:
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "matrix layout attribute " +
                                                   std::to_string(int(attr)) +
                                                   " is not known to the stand-in");
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref)
    return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete preference(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
    size_t sizeInBytes) {
  if (!pref)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  Preference &p = *preference(pref);
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    return setValue(p.workspace, buf, sizeInBytes, "MAX_WORKSPACE_BYTES");
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
    uint32_t &field = p.align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES];
    if (cublasStatus_t s = setValue(field, buf, sizeInBytes, "MIN_ALIGNMENT"))
      return s;
    return field && !(field & (field - 1))
               ? CUBLAS_STATUS_SUCCESS
               : refuse(CUBLAS_STATUS_INVALID_VALUE, "an alignment that is not a power of two");
  }
  default:
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "preference attribute " +
                                                   std::to_string(int(attr)) +
                                                   " is not known to the stand-in");
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
    cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t pref, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount) {
  if (!lightHandle || !lightHandle->live)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!operationDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !pref ||
      requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  Problem p = check(*desc(operationDesc), *layout(Adesc), *layout(Bdesc), *layout(Cdesc),
                    *layout(Ddesc));
  if (!p.error.empty())
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: " + p.error);
  // SHARDFLOW_STANDIN_CUBLASLT=no-zero-stride: no algorithm for a batch
  // that repeats one matrix (stride 0), so the caller's fallback runs.
  // SHARDFLOW_STANDIN_CUBLASLT=no-pointer-array: none for pointer arrays
  // (a cuBLASLt from before that mode, or without an algorithm for it).
  const char *mode = std::getenv("SHARDFLOW_STANDIN_CUBLASLT");
  for (cublasLtMatrixLayout_t l : {Adesc, Bdesc, Cdesc, Ddesc}) {
    const Layout &x = *layout(l);
    bool refused = mode && ((std::strcmp(mode, "no-zero-stride") == 0 && x.batch > 1 &&
                             !x.pointerArray() && x.stride == 0) ||
                            (std::strcmp(mode, "no-pointer-array") == 0 && x.pointerArray()));
    if (refused) {
      *returnAlgoCount = 0;
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  const Preference &pr = *preference(pref);
  Algo algo{kAlgoMagic, {pr.align[0], pr.align[1], pr.align[2], pr.align[3]}, 0,
            alignmentOf(reinterpret_cast<uintptr_t>(desc(operationDesc)->bias))};
  // Ask for some workspace when allowed, so that passing it on is checked.
  algo.workspace = std::min<uint64_t>(pr.workspace, uint64_t(1) << 20);
  // SHARDFLOW_STANDIN_CUBLASLT_ALGOS=N: N algorithms (as many as asked
  // for at most), all computing the same; algorithm i waits 20 (N - 1 - i)
  // ms a call, so that timing them finds the last one fastest (with 5 ms a
  // busy 2-core machine's jitter once made the second look faster).
  const char *algos = std::getenv("SHARDFLOW_STANDIN_CUBLASLT_ALGOS");
  int count = std::clamp(algos ? std::atoi(algos) : 1, 1, requestedAlgoCount);
  for (int i = 0; i < count; ++i) {
    algo.delayMicroseconds = uint64_t(count - 1 - i) * 20000;
    cublasLtMatmulHeuristicResult_t &r = heuristicResultsArray[i];
    std::memset(&r, 0, sizeof(r));
    std::memcpy(&r.algo, &algo, sizeof(algo));
    r.workspaceSize = algo.workspace;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
  }
  *returnAlgoCount = count;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
    const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
    const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
    size_t workspaceSizeInBytes, cudaStream_t stream) {
  if (!lightHandle || !lightHandle->live)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!computeDesc || !alpha || !beta || !Adesc || !Bdesc || !Cdesc || !Ddesc)
    return CUBLAS_STATUS_INVALID_VALUE;
  // Everything is read now: the descriptors may change once this returns.
  Desc d = *desc(computeDesc);
  Layout a = *layout(Adesc), b = *layout(Bdesc), c = *layout(Cdesc), out = *layout(Ddesc);
  Problem p = check(d, a, b, c, out);
  if (!p.error.empty())
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: " + p.error);
  Algo chosen{};
  if (!algo)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul without an algorithm: the "
                                               "stand-in takes the heuristic's");
  std::memcpy(&chosen, algo, sizeof(chosen));
  if (chosen.magic != kAlgoMagic)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "an algorithm the heuristic did not return");
  float alphaValue = *static_cast<const float *>(alpha);
  float betaValue = *static_cast<const float *>(beta);
  bool hasBias = d.epilogue & CUBLASLT_EPILOGUE_BIAS;
  const char *names[4] = {"A", "B", "C", "D"};
  const void *pointers[4] = {A, B, C, D};
  const Layout *layouts[4] = {&a, &b, &c, &out};
  // Pointer arrays: each argument is a device array of one matrix pointer
  // per batch, which the GPU reads when the call runs; so are the matrices
  // checked then (checkMatrix), from the pointers found there.
  auto checkMatrix = [chosen, names](int i, const Layout &l, uintptr_t base,
                                     int32_t batch) -> std::string {
    unsigned have = alignmentOf(base);
    if (have < chosen.align[i])
      return std::string("cublasLtMatmul: ") + names[i] + " of batch " +
             std::to_string(batch) + " is " + std::to_string(have) +
             "-byte aligned, but the algorithm was chosen for " +
             std::to_string(chosen.align[i]) + " (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_" +
             names[i] + "_BYTES)";
    return standin::checkRange(base, size_t(l.span()) * typeSize(l.type),
                               (std::string("cublasLtMatmul ") + names[i] + " (" + dims(l) + ")")
                                   .c_str());
  };
  for (int i = 0; i < 4; ++i) {
    if (i == 2 && betaValue == 0.0f)
      continue; // C is not read
    const Layout &l = *layouts[i];
    uintptr_t base = reinterpret_cast<uintptr_t>(pointers[i]);
    size_t elem = typeSize(l.type);
    if (l.pointerArray()) {
      std::string problem = standin::checkRange(
          base, size_t(l.batch) * sizeof(void *),
          (std::string("cublasLtMatmul ") + names[i] + "'s pointer array").c_str());
      if (!problem.empty() || base % alignof(void *))
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      problem.empty() ? std::string("cublasLtMatmul: ") + names[i] +
                                            "'s pointer array is not 8-byte aligned"
                                      : problem);
      continue;
    }
    for (int32_t batch = 0; batch < l.batch; ++batch) {
      unsigned have = alignmentOf(base + uintptr_t(batch * l.stride) * elem);
      if (have < chosen.align[i])
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      std::string("cublasLtMatmul: ") + names[i] + " of batch " +
                          std::to_string(batch) + " is " + std::to_string(have) +
                          "-byte aligned, but the algorithm was chosen for " +
                          std::to_string(chosen.align[i]) +
                          " (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_" + names[i] + "_BYTES)");
    }
    std::string problem =
        standin::checkRange(base, size_t(l.span()) * elem, (std::string("cublasLtMatmul ") +
                                                            names[i] + " (" + dims(l) + ")")
                                                               .c_str());
    if (!problem.empty())
      return refuse(CUBLAS_STATUS_INVALID_VALUE, problem);
  }
  if (hasBias) {
    std::string problem = standin::checkRange(reinterpret_cast<uintptr_t>(d.bias),
                                              p.m * typeSize(out.type), "cublasLtMatmul bias");
    if (!d.bias || !problem.empty())
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    d.bias ? problem : "cublasLtMatmul: a bias epilogue without a bias pointer");
    unsigned have = alignmentOf(reinterpret_cast<uintptr_t>(d.bias));
    if (have < chosen.biasAlign)
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    "cublasLtMatmul: the bias is " + std::to_string(have) +
                        "-byte aligned, but the heuristic ran with a bias pointer aligned to " +
                        std::to_string(chosen.biasAlign));
  }
  if (workspaceSizeInBytes < chosen.workspace)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "cublasLtMatmul: " + std::to_string(workspaceSizeInBytes) +
                      " bytes of workspace, the algorithm needs " +
                      std::to_string(chosen.workspace));
  std::string problem = standin::checkRange(reinterpret_cast<uintptr_t>(workspace),
                                            workspaceSizeInBytes, "cublasLtMatmul workspace");
  if (!problem.empty())
    return refuse(CUBLAS_STATUS_INVALID_VALUE, problem);

  bool tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  std::string what = std::string("gemm ") + typeName(a.type) + (out.type != a.type ? "->" : "") +
                     (out.type != a.type ? typeName(out.type) : "") +
                     " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                     " k=" + std::to_string(p.k) + (d.transA == CUBLAS_OP_T ? " transA" : "") +
                     (d.transB == CUBLAS_OP_T ? " transB" : "") +
                     (out.batch > 1 ? " batch=" + std::to_string(out.batch) : "") +
                     (out.pointerArray() ? " (pointer array)" : "") +
                     (betaValue != 0.0f ? " +C" : "") + epilogueName(d.epilogue);
  bool enqueued = standin::enqueue(stream, what, [=] {
    if (chosen.delayMicroseconds)
      std::this_thread::sleep_for(std::chrono::microseconds(chosen.delayMicroseconds));
    std::vector<float> column(p.k);
    const Layout *layouts4[4] = {&a, &b, &c, &out}; // this operation's copies
    for (int32_t batch = 0; batch < out.batch; ++batch) {
      // This batch's matrices: the arguments, or (pointer arrays) the
      // pointers read from them now.
      const void *A = pointers[0], *B = pointers[1], *C = pointers[2];
      void *D = const_cast<void *>(pointers[3]);
      if (out.pointerArray()) {
        const void *const *arrays[4];
        for (int i = 0; i < 4; ++i)
          arrays[i] = static_cast<const void *const *>(pointers[i]);
        A = arrays[0][batch];
        B = arrays[1][batch];
        C = arrays[2][batch];
        D = const_cast<void *>(arrays[3][batch]);
        const void *matrices[4] = {A, B, C, D};
        for (int i = 0; i < 4; ++i) {
          if (i == 2 && betaValue == 0.0f)
            continue;
          std::string problem =
              checkMatrix(i, *layouts4[i], reinterpret_cast<uintptr_t>(matrices[i]), batch);
          if (!problem.empty())
            throw std::runtime_error(problem);
        }
      }
      for (uint64_t j = 0; j < p.n; ++j) {
        for (uint64_t kk = 0; kk < p.k; ++kk) {
          int64_t at = d.transB == CUBLAS_OP_N ? b.at(kk, j, batch) : b.at(j, kk, batch);
          float v = load(B, at, b.type);
          column[kk] = tf32 ? toTf32(v) : v;
        }
        for (uint64_t i = 0; i < p.m; ++i) {
          float sum = 0;
          for (uint64_t kk = 0; kk < p.k; ++kk) {
            int64_t at = d.transA == CUBLAS_OP_N ? a.at(i, kk, batch) : a.at(kk, i, batch);
            float v = load(A, at, a.type);
            sum += (tf32 ? toTf32(v) : v) * column[kk];
          }
          float v = alphaValue * sum;
          if (betaValue != 0.0f)
            v += betaValue * load(C, c.at(i, j, batch), c.type);
          if (hasBias)
            v += load(d.bias, int64_t(i), out.type);
          if (d.epilogue & CUBLASLT_EPILOGUE_RELU)
            v = v > 0 ? v : 0;
          if (d.epilogue & CUBLASLT_EPILOGUE_GELU)
            v = 0.5f * v *
                (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
          store(D, out.at(i, j, batch), out.type, v);
        }
      }
    }
  });
  return enqueued ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // extern "C"
