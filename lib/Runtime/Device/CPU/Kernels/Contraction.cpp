//===- Contraction.cpp - CPU kernels: matmul, gemm, einsum -----------------===//
//
// matmul and gemm share one blocked GEMM: operands are packed into small
// contiguous panels (any row/column strides, so transposes cost nothing
// extra) and a register-blocked micro-kernel accumulates MR x NR tiles of C
// in the element type. einsum is a general loop nest over the labels.
// f16 and bf16 run through f32.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/Kernel.h"

#include "KernelSupport.h"
#include "Gemm.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// Calls fn(T{}) for the numeric element types; f16/bf16 through f32.
template <typename Fn> void dispatchNumeric(const KernelContext &ctx, DType t, Fn &&fn) {
  switch (t) {
  case DType::F32: return fn(float{}, ctx);
  case DType::F64: return fn(double{}, ctx);
  case DType::F16:
  case DType::BF16:
    return runAsF32(ctx, [&](const KernelContext &sub) { fn(float{}, sub); });
  case DType::I8: return fn(int8_t{}, ctx);
  case DType::I16: return fn(int16_t{}, ctx);
  case DType::I32: return fn(int32_t{}, ctx);
  case DType::I64: return fn(int64_t{}, ctx);
  case DType::U8: return fn(uint8_t{}, ctx);
  case DType::U16: return fn(uint16_t{}, ctx);
  case DType::U32: return fn(uint32_t{}, ctx);
  case DType::U64: return fn(uint64_t{}, ctx);
  case DType::I1: break;
  }
  fail(ctx, std::string("unsupported element type ") + dtypeName(t));
}


//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

template <typename T> void matmulTyped(const KernelContext &ctx) {
  const Tensor &lhs = ctx.inputs[0], &rhs = ctx.inputs[1], &out = ctx.outputs[0];
  std::vector<int64_t> as = lhs.shape, bs = rhs.shape;
  if (as.empty() || bs.empty())
    fail(ctx, "operands must have rank >= 1");
  // trans_a / trans_b: A or B is stored with its last two dimensions
  // swapped ([.., K, M], [.., N, K]).
  bool ta = ctx.params.getBool("trans_a", false), tb = ctx.params.getBool("trans_b", false);
  if ((ta && as.size() < 2) || (tb && bs.size() < 2))
    fail(ctx, "trans_a and trans_b need an operand of rank >= 2");
  if (ta)
    std::swap(as[as.size() - 2], as[as.size() - 1]);
  if (tb)
    std::swap(bs[bs.size() - 2], bs[bs.size() - 1]);
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  // A(m, k)'s and B(k, n)'s distances from A(0, 0) and B(0, 0).
  int64_t aRow = ta ? 1 : K, aCol = ta ? M : 1;
  int64_t bRow = tb ? 1 : N, bCol = tb ? K : 1;
  if (bs[bs.size() - 2] != K)
    fail(ctx, "contraction dimensions differ: " + std::to_string(K) + " and " +
                  std::to_string(bs[bs.size() - 2]));
  std::vector<int64_t> aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  size_t rank = std::max(aBatch.size(), bBatch.size());
  aBatch.insert(aBatch.begin(), rank - aBatch.size(), 1);
  bBatch.insert(bBatch.begin(), rank - bBatch.size(), 1);
  std::vector<int64_t> batch(rank), aStride(rank), bStride(rank);
  int64_t aAcc = M * K, bAcc = K * N, count = 1;
  for (size_t d = rank; d-- > 0;) {
    if (aBatch[d] != bBatch[d] && aBatch[d] != 1 && bBatch[d] != 1)
      fail(ctx, "batch dimensions do not broadcast");
    batch[d] = std::max(aBatch[d], bBatch[d]);
    aStride[d] = aBatch[d] == 1 ? 0 : aAcc;
    bStride[d] = bBatch[d] == 1 ? 0 : bAcc;
    aAcc *= aBatch[d];
    bAcc *= bBatch[d];
    count *= batch[d];
  }
  if (out.numel() != count * M * N)
    fail(ctx, "result has " + std::to_string(out.numel()) + " elements, expected " +
                  std::to_string(count * M * N));
  const T *a = lhs.as<const T>(), *b = rhs.as<const T>();
  T *c = out.as<T>();
  std::fill(c, c + out.numel(), T(0));
  int64_t aCount = 1, bCount = 1;
  for (size_t d = 0; d < rank; ++d) {
    aCount *= aBatch[d];
    bCount *= bBatch[d];
  }
  // A shared B under an unbroadcast A: one GEMM with the batch folded into M.
  if (bCount == 1 && aCount == count && !ta) {
    gemmAccumulate<T>(count * M, N, K, a, K, 1, b, bRow, bCol, c, N);
    return;
  }
  std::vector<int64_t> idx(rank, 0);
  int64_t aOff = 0, bOff = 0;
  for (int64_t i = 0; i < count; ++i) {
    gemmAccumulate<T>(M, N, K, a + aOff, aRow, aCol, b + bOff, bRow, bCol, c + i * M * N, N);
    for (size_t d = rank; d-- > 0;) {
      aOff += aStride[d];
      bOff += bStride[d];
      if (++idx[d] < batch[d])
        break;
      aOff -= aStride[d] * batch[d];
      bOff -= bStride[d] * batch[d];
      idx[d] = 0;
    }
  }
}

/// Operands and result of one element type, except that floats of
/// different widths (f32, f16, bf16) mix: halves run through f32, so each
/// operand is read exactly and the result rounded once to its own type.
/// Returns the type to dispatch on: a half type when any tensor is one (all
/// of them then run through f32).
DType checkContractionTypes(const KernelContext &ctx) {
  auto narrowOrF32 = [](DType t) { return t == DType::F32 || isHalf(t); };
  DType out = ctx.outputs[0].dtype;
  bool half = isHalf(out);
  for (const Tensor &t : ctx.inputs) {
    if (t.dtype != out && !(narrowOrF32(t.dtype) && narrowOrF32(out)))
      fail(ctx, std::string("operands and result must have one element type (f32, f16 and bf16 "
                            "may mix), got ") +
                    dtypeName(t.dtype) + " and " + dtypeName(out));
    half = half || isHalf(t.dtype);
  }
  return half ? DType::F16 : out;
}

void matmulKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    fail(ctx, "expects 2 inputs and 1 output");
  dispatchNumeric(ctx, checkContractionTypes(ctx),
                  [](auto t, const KernelContext &c) { matmulTyped<decltype(t)>(c); });
}

//===----------------------------------------------------------------------===//
// gemm
//===----------------------------------------------------------------------===//

template <typename T> void gemmTyped(const KernelContext &ctx) {
  const Tensor &A = ctx.inputs[0], &B = ctx.inputs[1], &Y = ctx.outputs[0];
  const Tensor *C = ctx.inputs.size() > 2 ? &ctx.inputs[2] : nullptr;
  if (A.rank() != 2 || B.rank() != 2)
    fail(ctx, "A and B must be 2-D");
  bool ta = ctx.params.getBool("trans_a", false), tb = ctx.params.getBool("trans_b", false);
  double alpha = ctx.params.getFloat("alpha", 1.0), beta = ctx.params.getFloat("beta", 1.0);
  int64_t M = A.shape[ta ? 1 : 0], K = A.shape[ta ? 0 : 1];
  int64_t K2 = B.shape[tb ? 1 : 0], N = B.shape[tb ? 0 : 1];
  if (K != K2)
    fail(ctx, "contraction dimensions differ: " + std::to_string(K) + " and " +
                  std::to_string(K2));
  if (Y.numel() != M * N)
    fail(ctx, "result must be [M, N]");
  T *y = Y.as<T>();
  std::fill(y, y + M * N, T(0));
  // A(m, k) = A[m][k], or A[k][m] transposed; likewise B.
  const T *a = A.as<const T>(), *b = B.as<const T>();
  gemmAccumulate<T>(M, N, K, a, ta ? 1 : K, ta ? M : 1, b, tb ? 1 : N, tb ? K : 1, y, N);
  T al = T(alpha), be = T(beta);
  if (al != T(1))
    for (int64_t i = 0; i < M * N; ++i)
      y[i] *= al;
  if (C && be != T(0)) {
    if (C->rank() > 2)
      fail(ctx, "C must have rank <= 2");
    int64_t cm = C->rank() == 2 ? C->shape[0] : 1;
    int64_t cn = C->rank() >= 1 ? C->shape.back() : 1;
    if ((cm != 1 && cm != M) || (cn != 1 && cn != N))
      fail(ctx, "C does not broadcast to [M, N]");
    const T *cv = C->as<const T>();
    int64_t rs = cm == 1 ? 0 : cn, cs = cn == 1 ? 0 : 1;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        y[m * N + n] += be * cv[m * rs + n * cs];
  }
}

void gemmKernel(const KernelContext &ctx) {
  if (ctx.inputs.size() < 2 || ctx.inputs.size() > 3 || ctx.outputs.size() != 1)
    fail(ctx, "expects 2 or 3 inputs and 1 output");
  DType t = checkContractionTypes(ctx);
  if (t != DType::F32 && t != DType::F64 && !isHalf(t))
    fail(ctx, std::string("unsupported element type ") + dtypeName(t));
  dispatchNumeric(ctx, t, [](auto v, const KernelContext &c) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>)
      gemmTyped<T>(c);
  });
}

//===----------------------------------------------------------------------===//
// einsum
//===----------------------------------------------------------------------===//

/// Parsed equation: one label string per input and for the output, with
/// '.' standing for the ellipsis.
struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

Equation parseEquation(const KernelContext &ctx, const std::string &eq, size_t numInputs) {
  std::string s;
  for (char c : eq)
    if (c != ' ')
      s.push_back(c);
  size_t arrow = s.find("->");
  std::string lhs = arrow == std::string::npos ? s : s.substr(0, arrow);
  auto parseTerm = [&](const std::string &term) {
    std::string labels;
    size_t dots = term.find("...");
    labels = dots == std::string::npos ? term
                                       : term.substr(0, dots) + "." + term.substr(dots + 3);
    size_t ellipses = 0;
    for (char c : labels) {
      if (c == '.')
        ++ellipses;
      else if (!std::isalpha(static_cast<unsigned char>(c)))
        fail(ctx, "malformed term '" + term + "' in equation '" + eq + "'");
    }
    if (ellipses > 1)
      fail(ctx, "malformed term '" + term + "' in equation '" + eq + "'");
    return labels;
  };
  Equation result;
  size_t pos = 0;
  while (true) {
    size_t comma = lhs.find(',', pos);
    result.inputs.push_back(parseTerm(lhs.substr(pos, comma - pos)));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  if (result.inputs.size() != numInputs)
    fail(ctx, "equation '" + eq + "' has " + std::to_string(result.inputs.size()) +
                  " terms for " + std::to_string(numInputs) + " inputs");
  if (arrow != std::string::npos) {
    result.output = parseTerm(s.substr(arrow + 2));
  } else {
    // Implicit output: the ellipsis, then the labels used once, sorted.
    std::map<char, int> counts;
    bool ellipsis = false;
    for (const std::string &in : result.inputs)
      for (char c : in)
        c == '.' ? (void)(ellipsis = true) : (void)++counts[c];
    if (ellipsis)
      result.output.push_back('.');
    for (auto [c, n] : counts)
      if (n == 1)
        result.output.push_back(c);
  }
  return result;
}

template <typename T> void einsumTyped(const KernelContext &ctx) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double,
                                 std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  Equation eq = parseEquation(ctx, ctx.params.getString("equation", ""), ctx.inputs.size());
  const Tensor &out = ctx.outputs[0];
  // Label ids: letters are 0..51; ellipsis dims (right-aligned) follow.
  auto letterId = [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ? c - 'a' : 26 + (c - 'A');
  };
  size_t ellipsisRank = 0;
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    const std::string &l = eq.inputs[i];
    bool has = l.find('.') != std::string::npos;
    size_t named = l.size() - (has ? 1 : 0);
    size_t rank = size_t(ctx.inputs[i].rank());
    if ((!has && rank != named) || (has && rank < named))
      fail(ctx, "term " + std::to_string(i) + " does not match operand rank " +
                    std::to_string(rank));
    if (has)
      ellipsisRank = std::max(ellipsisRank, rank - named);
  }
  size_t numIds = 52 + ellipsisRank;
  std::vector<int64_t> size(numIds, -1);
  std::vector<std::vector<int64_t>> stride(eq.inputs.size(), std::vector<int64_t>(numIds, 0));
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    const Tensor &t = ctx.inputs[i];
    const std::string &l = eq.inputs[i];
    bool has = l.find('.') != std::string::npos;
    size_t er = has ? size_t(t.rank()) - (l.size() - 1) : 0;
    std::vector<int64_t> ts(size_t(t.rank()));
    for (int64_t d = t.rank() - 1, acc = 1; d >= 0; --d) {
      ts[size_t(d)] = acc;
      acc *= t.shape[size_t(d)];
    }
    size_t dim = 0;
    // Ellipsis dims broadcast (a size-1 dim gets stride 0); labels must agree.
    auto bind = [&](size_t id, int64_t n, int64_t st, bool broadcastable) {
      if (broadcastable) {
        if (n == 1) {
          if (size[id] < 0)
            size[id] = 1;
          return;
        }
        if (size[id] > 1 && size[id] != n)
          fail(ctx, "broadcast dimensions " + std::to_string(size[id]) + " and " +
                        std::to_string(n) + " disagree");
      } else if (size[id] >= 0 && size[id] != n) {
        fail(ctx, "label '" + std::string(1, id < 26 ? char('a' + id) : char('A' + id - 26)) +
                      "' has sizes " + std::to_string(size[id]) + " and " + std::to_string(n));
      }
      size[id] = n;
      stride[i][id] += st;
    };
    for (char c : l) {
      if (c == '.') {
        for (size_t e = 0; e < er; ++e, ++dim)
          bind(52 + ellipsisRank - er + e, t.shape[dim], ts[dim], true);
        continue;
      }
      bind(size_t(letterId(c)), t.shape[dim], ts[dim], false);
      ++dim;
    }
  }
  // Output ids, then the summed ids.
  std::vector<size_t> outIds, sumIds;
  std::vector<bool> inOutput(numIds, false);
  for (char c : eq.output) {
    if (c == '.') {
      for (size_t e = 0; e < ellipsisRank; ++e)
        outIds.push_back(52 + e);
      continue;
    }
    size_t id = size_t(letterId(c));
    if (size[id] < 0)
      fail(ctx, std::string("output label '") + c + "' does not appear in any input");
    outIds.push_back(id);
  }
  for (size_t id : outIds) {
    inOutput[id] = true;
    if (size[id] < 0)
      size[id] = 1;
  }
  for (size_t id = 0; id < numIds; ++id)
    if (size[id] >= 0 && !inOutput[id])
      sumIds.push_back(id);
  int64_t outCount = 1, sumCount = 1;
  for (size_t id : outIds)
    outCount *= size[id];
  for (size_t id : sumIds)
    sumCount *= size[id];
  if (out.numel() != outCount)
    fail(ctx, "result has " + std::to_string(out.numel()) + " elements, the equation gives " +
                  std::to_string(outCount));
  size_t n = ctx.inputs.size();
  // Offsets of every summed position, per input.
  std::vector<std::vector<int64_t>> sumOff(n, std::vector<int64_t>(size_t(sumCount), 0));
  {
    std::vector<int64_t> idx(sumIds.size(), 0);
    std::vector<int64_t> off(n, 0);
    for (int64_t s = 0; s < sumCount; ++s) {
      for (size_t i = 0; i < n; ++i)
        sumOff[i][size_t(s)] = off[i];
      for (size_t d = sumIds.size(); d-- > 0;) {
        size_t id = sumIds[d];
        for (size_t i = 0; i < n; ++i)
          off[i] += stride[i][id];
        if (++idx[d] < size[id])
          break;
        for (size_t i = 0; i < n; ++i)
          off[i] -= stride[i][id] * size[id];
        idx[d] = 0;
      }
    }
  }
  std::vector<const T *> data(n);
  for (size_t i = 0; i < n; ++i)
    data[i] = ctx.inputs[i].as<const T>();
  T *y = out.as<T>();
  std::vector<int64_t> idx(outIds.size(), 0), off(n, 0);
  for (int64_t o = 0; o < outCount; ++o) {
    Acc acc = 0;
    if (n == 2) {
      const T *x0 = data[0] + off[0], *x1 = data[1] + off[1];
      const int64_t *s0 = sumOff[0].data(), *s1 = sumOff[1].data();
      for (int64_t s = 0; s < sumCount; ++s)
        acc += Acc(x0[s0[s]]) * Acc(x1[s1[s]]);
    } else {
      for (int64_t s = 0; s < sumCount; ++s) {
        Acc p = 1;
        for (size_t i = 0; i < n; ++i)
          p *= Acc(data[i][off[i] + sumOff[i][size_t(s)]]);
        acc += p;
      }
    }
    y[o] = T(acc);
    for (size_t d = outIds.size(); d-- > 0;) {
      size_t id = outIds[d];
      for (size_t i = 0; i < n; ++i)
        off[i] += stride[i][id];
      if (++idx[d] < size[id])
        break;
      for (size_t i = 0; i < n; ++i)
        off[i] -= stride[i][id] * size[id];
      idx[d] = 0;
    }
  }
}

void einsumKernel(const KernelContext &ctx) {
  if (ctx.inputs.empty() || ctx.outputs.size() != 1)
    fail(ctx, "expects at least 1 input and 1 output");
  dispatchNumeric(ctx, ctx.inputs[0].dtype,
                  [](auto t, const KernelContext &c) { einsumTyped<decltype(t)>(c); });
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("matmul", matmulKernel);
SHARDFLOW_REGISTER_KERNEL("gemm", gemmKernel);
SHARDFLOW_REGISTER_KERNEL("einsum", einsumKernel);
