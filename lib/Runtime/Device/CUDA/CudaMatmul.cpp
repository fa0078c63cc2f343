//===- CudaMatmul.cpp - matmul and gemm instructions through cuBLASLt ------===//
//
// Each matmul or gemm instruction as cuBLASLt calls (CudaGemm.h), planned
// once: shapes, transposes, epilogues, C broadcast, alignments. Then, over
// the whole program, sibling GEMMs grouped into one pointer-array call and
// the autotuned choice of algorithm (remembered in GemmAutotuneFile.h's
// file).
//
//===----------------------------------------------------------------------===//

#include "CudaDeviceImpl.h"

#include "shardflow/Runtime/Format/GemmAutotuneFile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

void CudaDevice::prepareGemm(size_t n, Step &step, bool onnxGemm) {
  const Instruction &inst = art->program[n];
  step.kind = Step::Kind::Gemm;
  if (inst.inputs.size() < 2 || inst.outputs.size() != 1)
    throw RuntimeError("needs at least two inputs and one output");
  Tensor a = tensorOf(inst.inputs[0]), b = tensorOf(inst.inputs[1]), d = tensorOf(inst.outputs[0]);
  // One element type throughout, except that f16 and bf16 operands may
  // write f32 (a plain matmul: convert-rt-to-gpu folds the cast of a
  // returned product into it).
  bool widening = (a.dtype == DType::F16 || a.dtype == DType::BF16) && d.dtype == DType::F32 &&
                  !onnxGemm && inst.inputs.size() == 2;
  if (a.dtype != b.dtype || (a.dtype != d.dtype && !widening))
    throw RuntimeError(std::string("operands and result must have one element type (or f16/bf16 "
                                   "operands an f32 result, without a bias), got ") +
                       dtypeName(a.dtype) + ", " + dtypeName(b.dtype) + " -> " +
                       dtypeName(d.dtype));
  gemmDataType(d.dtype); // refuses other types with a message
  gemmDataType(a.dtype);
  size_t elem = dtypeSize(a.dtype), outElem = dtypeSize(d.dtype); // operands, result
  auto ptr = [](const Tensor &t) { return CUdeviceptr(reinterpret_cast<uintptr_t>(t.data)); };

  // An optional fused epilogue: act(A B + bias), the bias of shape [N].
  std::string epilogueName = inst.params.getString("epilogue", "");
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (epilogueName == "bias")
    epilogue = CUBLASLT_EPILOGUE_BIAS;
  else if (epilogueName == "relu_bias")
    epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
  else if (epilogueName == "gelu_bias")
    epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  else if (!epilogueName.empty())
    throw RuntimeError("unknown epilogue '" + epilogueName + "' (bias, relu_bias or gelu_bias)");
  // residual=i:1 (a matmul, convert-rt-to-gpu): the last input is added
  // to the product (cuBLASLt's C, beta 1), before the bias epilogue.
  bool residual = !onnxGemm && inst.params.getBool("residual", false);
  size_t operands = inst.inputs.size() - (residual ? 1 : 0);
  const Tensor *third = nullptr;
  Tensor thirdTensor, residualTensor;
  if (operands > 2) {
    thirdTensor = tensorOf(inst.inputs[2]);
    third = &thirdTensor;
    if (third->dtype != d.dtype)
      throw RuntimeError(std::string(onnxGemm ? "C" : "the bias") + " is " +
                         dtypeName(third->dtype) + " but the result is " + dtypeName(d.dtype));
  }
  if (!onnxGemm && (operands < 2 || operands > 3 || (third != nullptr) != !epilogueName.empty()))
    throw RuntimeError("matmul takes two inputs, or three with epilogue=s:bias|relu_bias|gelu_bias"
                       ", and with residual=i:1 one more, the residual");
  if (residual) {
    residualTensor = tensorOf(inst.inputs.back());
    if (residualTensor.dtype != d.dtype || residualTensor.shape != d.shape)
      throw RuntimeError("the residual is " + std::string(dtypeName(residualTensor.dtype)) + " " +
                         shapeList(residualTensor.shape) + " but the result is " +
                         dtypeName(d.dtype) + " " + shapeList(d.shape));
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_BIAS)
      throw RuntimeError("a residual goes with no epilogue or epilogue=s:bias (cuBLASLt "
                         "applies the activation after adding it)");
  }

  GemmProblem problem;
  problem.dtype = a.dtype;
  problem.outDtype = d.dtype;
  problem.tf32 = options.allowTf32;
  problem.epilogue = epilogue;
  float alpha = 1, beta = 0;
  CUdeviceptr bias = 0, c = 0;
  MatmulPlan plan;
  if (onnxGemm) {
    // The nn dialect's names (nn.gemm): trans_a, trans_b, alpha, beta.
    bool transA = inst.params.getBool("trans_a", false);
    bool transB = inst.params.getBool("trans_b", false);
    alpha = float(inst.params.getFloat("alpha", 1.0));
    float betaParam = float(inst.params.getFloat("beta", 1.0));
    GemmPlan g =
        planGemm(a.shape, b.shape, third ? &third->shape : nullptr, transA, transB, d.shape);
    problem.transA = transA;
    problem.transB = transB;
    plan.m = g.m;
    plan.n = g.n;
    plan.k = g.k;
    if (third && epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      if (g.cRows != 1 || g.cCols != g.n || betaParam != 1.0f)
        throw RuntimeError("a bias epilogue needs C of shape [N] and beta 1");
      bias = ptr(*third);
    } else if (third && betaParam != 0.0f) {
      beta = betaParam;
      if (g.cRows == g.m && g.cCols == g.n) {
        c = ptr(*third);
      } else {
        // C broadcast into D first, then accumulated in place.
        step.copies = planBroadcast2D(g.cRows, g.cCols, g.m, g.n, outElem);
        step.copySource = ptr(*third);
        step.copyDestination = ptr(d);
        c = ptr(d);
      }
    } else if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      throw RuntimeError("epilogue '" + epilogueName + "' needs C as its bias");
    }
  } else {
    // trans_b: a 2-D B stored [N, K] (convert-rt-to-gpu stores a weight so
    // when that aligns its rows for cuBLASLt).
    std::vector<int64_t> bShape = b.shape;
    if (inst.params.getBool("trans_b", false)) {
      if (bShape.size() != 2)
        throw RuntimeError("trans_b needs a 2-D B, got " + shapeList(bShape));
      std::swap(bShape[0], bShape[1]);
      problem.transB = true;
    }
    plan = planMatmul(a.shape, bShape, d.shape);
    if (residual) {
      if (plan.kind != MatmulPlan::Kind::Folded)
        throw RuntimeError("a residual needs a B without batch dimensions (one GEMM), got " +
                           shapeList(b.shape));
      c = ptr(residualTensor);
      beta = 1;
    }
    if (third) {
      if (third->numel() != plan.n || third->shape.size() > 2 ||
          (third->shape.size() == 2 && third->shape[0] != 1))
        throw RuntimeError("the bias has shape " + shapeList(third->shape) + ", expected [" +
                           std::to_string(plan.n) + "]");
      bias = ptr(*third);
    }
  }
  if (plan.m == 0 || plan.n == 0)
    return;
  if (plan.k == 0) {
    // An empty sum: zeros (then C or the bias, which cuBLASLt cannot add
    // without a product).
    if (c || bias)
      throw RuntimeError("a GEMM with an empty contracted dimension and C or a bias is not "
                         "supported on the GPU");
    step.zeroFills.emplace_back(ptr(d), d.bytes());
    step.copies.clear();
    return;
  }
  problem.m = plan.m;
  problem.n = plan.n;
  problem.k = plan.k;
  problem.alignA = pointerAlignment(ptr(a));
  problem.alignB = pointerAlignment(ptr(b));
  problem.alignD = pointerAlignment(ptr(d));
  problem.alignC = c ? pointerAlignment(c) : problem.alignD;
  if (bias)
    problem.alignBias = pointerAlignment(bias);

  auto describeProblem = [&] {
    std::string types = dtypeName(a.dtype);
    if (a.dtype != d.dtype)
      types += std::string(" -> ") + dtypeName(d.dtype);
    return types + " GEMM m=" + std::to_string(plan.m) + " n=" + std::to_string(plan.n) +
           " k=" + std::to_string(plan.k) +
           (plan.batch > 1 ? " batch=" + std::to_string(plan.batch) : "");
  };
  if (plan.kind == MatmulPlan::Kind::StridedBatched) {
    GemmProblem batched = problem;
    batched.batch = plan.batch;
    batched.strideA = plan.strideA;
    batched.strideB = plan.strideB;
    batched.strideC = plan.strideC;
    // Every batch's matrices must be as aligned as the first's.
    batched.alignA = std::min(batched.alignA, pointerAlignment(CUdeviceptr(plan.strideA) * elem));
    batched.alignB = std::min(batched.alignB, pointerAlignment(CUdeviceptr(plan.strideB) * elem));
    batched.alignD =
        std::min(batched.alignD, pointerAlignment(CUdeviceptr(plan.strideC) * outElem));
    batched.alignC = c ? std::min(batched.alignC, batched.alignD) : batched.alignD;
    if (const GemmRunner::Prepared *p = gemm->prepare(batched)) {
      step.gemms.push_back({p, alpha, beta, ptr(a), ptr(b), c, ptr(d), bias});
      return;
    }
    // No algorithm for a zero (broadcast) stride: one GEMM per batch.
    plan = expandToLoop(plan);
  }
  if (plan.kind == MatmulPlan::Kind::Broadcast) {
    for (auto [oa, ob] : plan.offsets) {
      problem.alignA = std::min(problem.alignA, pointerAlignment(ptr(a) + CUdeviceptr(oa) * elem));
      problem.alignB = std::min(problem.alignB, pointerAlignment(ptr(b) + CUdeviceptr(ob) * elem));
    }
    for (size_t i = 0; i < plan.offsets.size(); ++i) {
      CUdeviceptr out = ptr(d) + CUdeviceptr(i) * CUdeviceptr(plan.m * plan.n) * outElem;
      problem.alignD = std::min(problem.alignD, pointerAlignment(out));
    }
    problem.alignC = problem.alignD;
    const GemmRunner::Prepared *p = gemm->prepare(problem);
    if (!p)
      throw RuntimeError("cuBLASLt has no algorithm for the " + describeProblem());
    for (size_t i = 0; i < plan.offsets.size(); ++i) {
      CUdeviceptr out = ptr(d) + CUdeviceptr(i) * CUdeviceptr(plan.m * plan.n) * outElem;
      step.gemms.push_back({p, alpha, beta, ptr(a) + CUdeviceptr(plan.offsets[i].first) * elem,
                            ptr(b) + CUdeviceptr(plan.offsets[i].second) * elem, 0, out, bias});
    }
    return;
  }
  const GemmRunner::Prepared *p = gemm->prepare(problem);
  if (!p)
    throw RuntimeError("cuBLASLt has no algorithm for the " + describeProblem());
  step.gemms.push_back({p, alpha, beta, ptr(a), ptr(b), c, ptr(d), bias});
}

void CudaDevice::groupGemms() {
  // Consecutive GEMMs on the compute stream that read one activation A with
  // the same problem, no bias, no C and no batch (attention's query, key and
  // value projections; an MLP's gate and up projections; each their own
  // weight), and read no result of another: one cuBLASLt call in
  // pointer-array batch mode, whose arrays hold each member's B and D (and
  // A, the same for all). The first member's step runs it, after every
  // member's waits; the others stay as empty steps that still record their
  // events, so what waits for them is unchanged.
  auto plain = [&](size_t n) -> const GemmCall * {
    const Step &s = steps[n];
    if (s.kind != Step::Kind::Gemm || s.stream != ComputeStream || s.gemms.size() != 1 ||
        !s.copies.empty() || !s.zeroFills.empty())
      return nullptr;
    const GemmCall &g = s.gemms[0];
    const GemmProblem &p = GemmRunner::problemOf(*g.prepared);
    if (p.batch != 1 || p.epilogue != CUBLASLT_EPILOGUE_DEFAULT || g.beta != 0 || g.c || g.bias)
      return nullptr;
    return &g;
  };
  // Alignments of B, C and D differ between members: the batch takes the least.
  auto sameProblem = [](GemmProblem x, GemmProblem y) {
    for (GemmProblem *p : {&x, &y})
      p->alignB = p->alignC = p->alignD = 0;
    return x.key() == y.key();
  };
  auto touches = [&](size_t m, size_t n) {
    // Whether instruction n reads or writes what m writes, or writes what m reads.
    const Instruction &x = art->program[m], &y = art->program[n];
    for (int out : x.outputs)
      for (const std::vector<int> *list : {&y.inputs, &y.outputs})
        for (int b : *list)
          if (rangesOverlap(out, b))
            return true;
    for (int in : x.inputs)
      for (int out : y.outputs)
        if (rangesOverlap(in, out))
          return true;
    return false;
  };
  std::vector<std::pair<size_t, size_t>> groups; // [first, end)
  for (size_t n = 0; n < steps.size();) {
    const GemmCall *head = plain(n);
    size_t end = n + 1;
    while (head && end < steps.size()) {
      const GemmCall *g = plain(end);
      if (!g || g->a != head->a || g->alpha != head->alpha ||
          !sameProblem(GemmRunner::problemOf(*g->prepared), GemmRunner::problemOf(*head->prepared)))
        break;
      bool independent = true;
      for (size_t m = n; m < end && independent; ++m)
        independent = !touches(m, end);
      if (!independent)
        break;
      ++end;
    }
    if (end - n > 1)
      groups.emplace_back(n, end);
    n = end;
  }
  if (groups.empty())
    return;

  // Three arrays per group (the column-major problem's first operand, our
  // B; its second, our A; and D, which is also C), each 256-byte aligned.
  const size_t kAlign = 256;
  std::vector<size_t> base(groups.size());
  size_t bytes = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    base[i] = bytes;
    bytes += 3 * alignUp((groups[i].second - groups[i].first) * sizeof(CUdeviceptr), kAlign);
  }
  std::vector<CUdeviceptr> host(bytes / sizeof(CUdeviceptr), 0);
  CU_CALL(cuMemAlloc, &gemmPointers, bytes);
  size_t grouped = 0, calls = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    auto [first, end] = groups[i];
    size_t count = end - first, stride = alignUp(count * sizeof(CUdeviceptr), kAlign);
    CUdeviceptr arrays = gemmPointers + base[i];
    GemmProblem p = GemmRunner::problemOf(*steps[first].gemms[0].prepared);
    p.batch = int64_t(count);
    p.pointerArray = true;
    for (size_t m = first; m < end; ++m) {
      const GemmCall &g = steps[m].gemms[0];
      p.alignB = std::min(p.alignB, pointerAlignment(g.b));
      p.alignD = std::min(p.alignD, pointerAlignment(g.d));
      size_t slot = base[i] / sizeof(CUdeviceptr) + (m - first);
      host[slot] = g.b;
      host[slot + stride / sizeof(CUdeviceptr)] = g.a;
      host[slot + 2 * stride / sizeof(CUdeviceptr)] = g.d;
    }
    p.alignC = p.alignD;
    const GemmRunner::Prepared *prepared = gemm->prepare(p);
    if (!prepared) {
      if (settings.verbose)
        std::fprintf(stderr,
                     "shard-run: rank %d: cuBLASLt has no pointer-array algorithm for %zu GEMMs "
                     "m=%lld n=%lld k=%lld (instructions %zu to %zu); they run one by one\n",
                     rank, count, (long long)p.m, (long long)p.n, (long long)p.k, first, end - 1);
      continue;
    }
    Step &headStep = steps[first];
    float alpha = headStep.gemms[0].alpha;
    for (size_t m = first + 1; m < end; ++m) {
      headStep.waits.insert(headStep.waits.end(), steps[m].waits.begin(), steps[m].waits.end());
      steps[m].waits.clear();
      steps[m].gemms.clear();
    }
    std::sort(headStep.waits.begin(), headStep.waits.end());
    headStep.waits.erase(std::unique(headStep.waits.begin(), headStep.waits.end()),
                         headStep.waits.end());
    headStep.gemms = {{prepared, alpha, 0.0f, arrays + stride, arrays, 0, arrays + 2 * stride, 0}};
    grouped += count;
    ++calls;
  }
  // On the compute stream, waited for: a synchronous copy from pageable
  // memory may return before its DMA has landed.
  CU_CALL(cuMemcpyHtoDAsync, gemmPointers, host.data(), bytes, streams[ComputeStream]);
  CU_CALL(cuStreamSynchronize, streams[ComputeStream]);
  if (settings.verbose)
    std::fprintf(stderr,
                 "shard-run: rank %d runs %zu GEMMs as %zu pointer-array batched calls "
                 "(--group-gemms)\n",
                 rank, grouped, calls);
}

void CudaDevice::autotuneGemms() {
  if (!gemm)
    return;
  auto started = std::chrono::steady_clock::now();
  const std::string &file = options.gemmAutotuneFile;
  AutotuneRecords records;
  const std::string version = std::to_string(cublasLt().cublasLtGetVersion());
  bool rewrite = false;
  if (!file.empty()) {
    records = readAutotuneFile(file);
    if (!records.choices.empty() &&
        (records.gpu != deviceName || records.cublasLtVersion != version)) {
      std::fprintf(stderr,
                   "shard-run: rank %d: %s holds choices for %s with cuBLASLt %s, not %s with "
                   "%s: timing the GEMMs again%s\n",
                   rank, file.c_str(), records.gpu.c_str(), records.cublasLtVersion.c_str(),
                   deviceName.c_str(), version.c_str(), rank == 0 ? " and replacing them" : "");
      records.choices.clear();
    }
    rewrite = records.gpu != deviceName || records.cublasLtVersion != version;
    records.gpu = deviceName;
    records.cublasLtVersion = version;
  }
  std::set<const GemmRunner::Prepared *> tuned;
  size_t problems = 0, changed = 0, fromFile = 0;
  double firstTotal = 0, bestTotal = 0; // ms, one call of each problem
  for (size_t n = 0; n < steps.size(); ++n)
    for (const GemmCall &g : steps[n].gemms) {
      if (!tuned.insert(g.prepared).second)
        continue;
      const size_t count = GemmRunner::candidateCount(*g.prepared);
      if (count < 2)
        continue;
      const std::string key = GemmRunner::problemOf(*g.prepared).key();
      if (auto it = records.choices.find(key);
          it != records.choices.end() && it->second.second == count) {
        gemm->choose(*g.prepared, it->second.first);
        ++fromFile;
        continue;
      }
      // The call writes D: only where nothing lives yet (the arena, or the
      // device arrays of grouped GEMMs, which point into it).
      GemmRunner::Tuning t = gemm->tune(*g.prepared, g.alpha, g.a, g.b, g.beta, g.c, g.d, g.bias,
                                        streams[ComputeStream]);
      if (t.milliseconds.empty())
        continue;
      if (!file.empty()) {
        records.choices[key] = {t.chosen, t.milliseconds.size()};
        rewrite = true;
      }
      ++problems;
      float first = t.milliseconds[0], best = t.milliseconds[t.chosen];
      changed += t.chosen != 0;
      if (first >= 0) {
        firstTotal += first;
        bestTotal += best;
      }
      if (settings.verbose) {
        const GemmProblem &p = GemmRunner::problemOf(*g.prepared);
        std::string times;
        for (float ms : t.milliseconds)
          times += (times.empty() ? "" : " ") +
                   (ms < 0 ? std::string("failed") : std::to_string(ms).substr(0, 7));
        std::fprintf(stderr,
                     "shard-run: rank %d: GEMM m=%lld n=%lld k=%lld%s (instruction %zu): "
                     "algorithm %zu of %zu kept; ms a call: %s\n",
                     rank, (long long)p.m, (long long)p.n, (long long)p.k,
                     p.batch > 1 ? (" batch=" + std::to_string(p.batch)).c_str() : "", n,
                     t.chosen + 1, t.milliseconds.size(), times.c_str());
      }
    }
  if (settings.verbose)
    std::fprintf(
        stderr,
        "shard-run: rank %d tuned %zu GEMM problems in %.0f ms (--gemm-autotune): "
        "%zu changed from the heuristic's first algorithm; one call of each: "
        "%.3f ms, against %.3f ms with the heuristic's first\n",
        rank, problems,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count(),
        changed, bestTotal, firstTotal);
  if (!file.empty() && settings.verbose)
    std::fprintf(stderr, "shard-run: rank %d took %zu GEMM choices from %s\n", rank, fromFile,
                 file.c_str());
  if (rewrite && rank == 0)
    writeAutotuneFile(file, records);
}
