//===- ShardingRules.cpp - the sharding rule of every nn op ----------------===//
//
// The rule builders the op registry (OpRegistry.cpp) names in each op's
// entry. Rules are built on verified ops: the builders rely on the shapes
// the op verifiers guarantee.
//
// The guiding principle for the rules below: a factor is Parallel only when
// every rank computes a correct slice of every result from the slices of
// the operands that the factor gives it, with no knowledge of where its
// slice lies in the global tensor. Anything that needs global positions
// (causal masks, triangles, random streams, gathers along an axis, flat
// indices) gets no factor or a NeedReplication one. A dimension that
// corresponds one to one across tensors but must stay whole gets a shared
// NeedReplication factor; a dimension with no counterpart of equal size
// gets no factor.
//
//===----------------------------------------------------------------------===//

#include "OpFactBuilders.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

#include <map>
#include <numeric>

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

//===----------------------------------------------------------------------===//
// ShardingRule
//===----------------------------------------------------------------------===//

int64_t ShardingRule::addFactor(int64_t size, FactorKind kind) {
  factorSizes.push_back(size);
  factorKinds.push_back(kind);
  return static_cast<int64_t>(factorSizes.size()) - 1;
}

/// i, j, ..., z, then a, ..., h, then f26, f27, ...: the first names read
/// like the index letters of an einsum.
static std::string factorName(int64_t f) {
  if (f >= 0 && f < 26)
    return std::string(1, static_cast<char>('a' + (f + 8) % 26));
  return "f" + std::to_string(f);
}

LogicalResult ShardingRule::verify(Operation *op) const {
  auto error = [&]() {
    InFlightDiagnostic diag = op->emitOpError("has an invalid sharding rule: ");
    return diag;
  };
  int64_t n = numFactors();
  if (static_cast<int64_t>(factorKinds.size()) != n)
    return error() << n << " factor sizes but " << factorKinds.size()
                   << " factor kinds";
  for (int64_t f = 0; f < n; ++f)
    if (factorSizes[f] < 0)
      return error() << "factor " << factorName(f) << " has size "
                     << factorSizes[f];
  if (operands.size() != op->getNumOperands())
    return error() << operands.size() << " operand entries for "
                   << op->getNumOperands() << " operands";
  if (results.size() != op->getNumResults())
    return error() << results.size() << " result entries for "
                   << op->getNumResults() << " results";

  auto checkTensor = [&](bool isResult, unsigned index, Type type,
                         const TensorFactors &tensor) -> LogicalResult {
    StringRef what = isResult ? "result #" : "operand #";
    auto ranked = dyn_cast<RankedTensorType>(type);
    if (!ranked || !ranked.hasStaticShape())
      return error() << what << index << " is not a statically shaped tensor";
    if (static_cast<int64_t>(tensor.size()) != ranked.getRank())
      return error() << what << index << " has rank " << ranked.getRank()
                     << " but the rule gives " << tensor.size() << " dims";
    llvm::SmallSet<int64_t, 8> seen;
    for (auto [d, factors] : llvm::enumerate(tensor)) {
      int64_t product = 1;
      for (int64_t f : factors) {
        if (f < 0 || f >= n)
          return error() << what << index << " dim " << d << " names factor "
                         << f << " of " << n;
        if (!seen.insert(f).second)
          return error() << what << index << " holds factor " << factorName(f)
                         << " twice";
        if (isResult && factorKinds[f] == FactorKind::Reduction)
          return error() << what << index << " dim " << d
                         << " holds reduction factor " << factorName(f);
        product *= factorSizes[f];
      }
      // A factor-less dim is replicated whatever its size.
      if (!factors.empty() && product != ranked.getDimSize(d))
        return error() << what << index << " dim " << d << " has size "
                       << ranked.getDimSize(d) << " but its factors multiply to "
                       << product;
    }
    return success();
  };
  for (auto [i, tensor] : llvm::enumerate(operands))
    if (failed(checkTensor(false, i, op->getOperand(i).getType(), tensor)))
      return failure();
  for (auto [i, tensor] : llvm::enumerate(results))
    if (failed(checkTensor(true, i, op->getResult(i).getType(), tensor)))
      return failure();
  return success();
}

void ShardingRule::print(llvm::raw_ostream &os) const {
  auto printTensors = [&](ArrayRef<TensorFactors> tensors) {
    os << '(';
    llvm::interleaveComma(tensors, os, [&](const TensorFactors &tensor) {
      os << '[';
      llvm::interleaveComma(tensor, os, [&](ArrayRef<int64_t> factors) {
        if (factors.empty())
          os << '1';
        else
          llvm::interleave(
              factors, os, [&](int64_t f) { os << factorName(f); }, "*");
      });
      os << ']';
    });
    os << ')';
  };
  printTensors(operands);
  os << " -> ";
  printTensors(results);
  os << " {";
  for (int64_t f = 0, n = numFactors(); f < n; ++f) {
    os << (f ? ", " : "") << factorName(f) << '=' << factorSizes[f];
    if (f < static_cast<int64_t>(factorKinds.size())) {
      if (factorKinds[f] == FactorKind::Reduction)
        os << " reduction";
      else if (factorKinds[f] == FactorKind::NeedReplication)
        os << " need_replication";
    }
  }
  os << '}';
}

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

namespace shardflow::dist {

/// Normalizes an axis that the op verifier has already range-checked.
static int64_t normalizeAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

/// Operands and results of one shape: dim d of all of them shares one
/// factor of kind `kinds(d)`.
void sameShapeRule(RuleBuilder &b,
                          llvm::function_ref<FactorKind(int64_t)> kinds) {
  ArrayRef<int64_t> shape = b.resultShape(0);
  for (auto [d, size] : llvm::enumerate(shape)) {
    int64_t f = b.factor(size, kinds(d));
    for (unsigned i = 0; i < b.numOperands(); ++i)
      b.operand(i, d, f);
    for (unsigned i = 0; i < b.numResults(); ++i)
      b.result(i, d, f);
  }
}

void elementwiseRule(RuleBuilder &b) {
  sameShapeRule(b, [](int64_t) { return kParallel; });
}

void tensorsAndScalarsRule(RuleBuilder &b) {
  ArrayRef<int64_t> shape = b.resultShape(0);
  for (auto [d, size] : llvm::enumerate(shape)) {
    int64_t f = b.factor(size);
    for (unsigned i = 0; i < b.numOperands(); ++i)
      if (b.operandShape(i).size() == shape.size())
        b.operand(i, d, f);
    for (unsigned i = 0; i < b.numResults(); ++i)
      b.result(i, d, f);
  }
}

/// Places the dims of operand `operand`, right-aligned against `target`
/// whose dim t has factors `targetFactors[t]`: a dim of the target's size
/// takes the target's factors, a size-1 dim broadcast against a larger one
/// none.
static void assignBroadcast(RuleBuilder &b, unsigned operand,
                            ArrayRef<int64_t> target,
                            ArrayRef<SmallVector<int64_t, 2>> targetFactors) {
  ArrayRef<int64_t> shape = b.operandShape(operand);
  int64_t offset = static_cast<int64_t>(target.size()) -
                   static_cast<int64_t>(shape.size());
  for (auto [d, size] : llvm::enumerate(shape)) {
    int64_t t = static_cast<int64_t>(d) + offset;
    if (t >= 0 && size == target[t])
      b.operand(operand, d, targetFactors[t]);
  }
}

/// ONNX multidirectional broadcasting: one Parallel factor per result dim.
void broadcastRule(RuleBuilder &b) {
  ArrayRef<int64_t> shape = b.resultShape(0);
  SmallVector<SmallVector<int64_t, 2>> factors;
  for (auto [d, size] : llvm::enumerate(shape)) {
    factors.push_back({b.factor(size)});
    b.result(0, d, factors.back());
  }
  for (unsigned i = 0; i < b.numOperands(); ++i)
    assignBroadcast(b, i, shape, factors);
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

void matmulRule(RuleBuilder &b) {
  ArrayRef<int64_t> lhs = b.operandShape(0), rhs = b.operandShape(1),
                    res = b.resultShape(0);
  bool lhsVector = lhs.size() == 1, rhsVector = rhs.size() == 1;
  int64_t lhsRank = lhs.size(), rhsRank = rhs.size();
  // Batch dims broadcast right-aligned; a 1-D operand has none.
  int64_t lhsBatch = lhsVector ? 0 : lhsRank - 2;
  int64_t rhsBatch = rhsVector ? 0 : rhsRank - 2;
  int64_t batch = static_cast<int64_t>(res.size()) - (lhsVector ? 0 : 1) -
                  (rhsVector ? 0 : 1);
  for (int64_t d = 0; d < batch; ++d) {
    int64_t f = b.factor(res[d]);
    b.result(0, d, f);
    int64_t l = d - (batch - lhsBatch), r = d - (batch - rhsBatch);
    if (l >= 0 && lhs[l] == res[d])
      b.operand(0, l, f);
    if (r >= 0 && rhs[r] == res[d])
      b.operand(1, r, f);
  }
  if (!lhsVector) {
    int64_t m = b.factor(lhs[lhsRank - 2]);
    b.operand(0, lhsRank - 2, m);
    b.result(0, batch, m);
  }
  int64_t k = b.factor(lhs.back(), kReduction);
  b.operand(0, lhsRank - 1, k);
  b.operand(1, rhsVector ? 0 : rhsRank - 2, k);
  if (!rhsVector) {
    int64_t n = b.factor(rhs.back());
    b.operand(1, rhsRank - 1, n);
    b.result(0, res.size() - 1, n);
  }
}

/// With a bias term (gemm's beta * C, conv's bias) a rank holding part of
/// the contraction would add the whole bias to its partial product, and the
/// parts would no longer sum to the result: the contraction stays whole.
static FactorKind contractionKind(bool addsBias) {
  return addsBias ? kNeedReplication : kReduction;
}

void gemmRule(RuleBuilder &b, nn::GemmOp op) {
  ArrayRef<int64_t> a = b.operandShape(0);
  bool transA = op.getTransA(), transB = op.getTransB();
  bool addsC = op.getC() && !op.getBeta().isZero();
  int64_t m = b.factor(a[transA ? 1 : 0]);
  int64_t k = b.factor(a[transA ? 0 : 1], contractionKind(addsC));
  int64_t n = b.factor(b.resultShape(0)[1]);
  b.operand(0, transA ? 1 : 0, m);
  b.operand(0, transA ? 0 : 1, k);
  b.operand(1, transB ? 1 : 0, k);
  b.operand(1, transB ? 0 : 1, n);
  b.result(0, 0, m);
  b.result(0, 1, n);
  if (op.getC())
    assignBroadcast(b, 2, b.resultShape(0), {{m}, {n}});
}

LogicalResult einsumRule(RuleBuilder &b, nn::EinsumOp op) {
  std::string why;
  FailureOr<nn::EinsumEquation> eq =
      nn::parseEinsumEquation(op.getEquation(), b.numOperands(), why);
  if (failed(eq))
    return op.emitOpError("invalid equation '")
           << op.getEquation() << "': " << why;

  // The ellipsis dims of all inputs broadcast right-aligned into one shape.
  SmallVector<int64_t> ellipsisRanks;
  int64_t ellipsisRank = 0;
  for (auto [i, labels] : llvm::enumerate(eq->inputs)) {
    int64_t named = labels.size() - llvm::count(labels, '.');
    int64_t rank = labels.find('.') == std::string::npos
                       ? 0
                       : static_cast<int64_t>(b.operandShape(i).size()) - named;
    ellipsisRanks.push_back(rank);
    ellipsisRank = std::max(ellipsisRank, rank);
  }
  SmallVector<int64_t> ellipsisShape(ellipsisRank, 1);
  for (auto [i, labels] : llvm::enumerate(eq->inputs)) {
    size_t dots = labels.find('.');
    if (dots == std::string::npos)
      continue;
    ArrayRef<int64_t> part =
        b.operandShape(i).slice(dots, ellipsisRanks[i]);
    for (auto [k, size] : llvm::enumerate(part))
      if (size != 1)
        ellipsisShape[ellipsisRank - ellipsisRanks[i] + k] = size;
  }

  // A label repeated within one term takes a diagonal; a sharding cannot
  // put one mesh axis on two dims of a tensor, so such labels stay whole.
  llvm::SmallSet<char, 8> repeated;
  auto noteRepeats = [&](StringRef labels) {
    for (char c : labels)
      if (c != '.' && llvm::count(labels, c) > 1)
        repeated.insert(c);
  };
  for (const std::string &labels : eq->inputs)
    noteRepeats(labels);
  noteRepeats(eq->output);

  // Labels and ellipsis dims missing from the output are summed over.
  bool outputEllipsis = eq->output.find('.') != std::string::npos;
  SmallVector<int64_t> ellipsisFactors;
  for (int64_t size : ellipsisShape)
    ellipsisFactors.push_back(
        b.factor(size, outputEllipsis ? kParallel : kReduction));
  std::map<char, int64_t> labelFactors;
  for (auto [i, labels] : llvm::enumerate(eq->inputs)) {
    int64_t dim = 0;
    for (char c : labels) {
      if (c == '.') {
        for (int64_t k = 0; k < ellipsisRanks[i]; ++k, ++dim) {
          int64_t g = ellipsisRank - ellipsisRanks[i] + k;
          if (b.operandShape(i)[dim] == ellipsisShape[g])
            b.operand(i, dim, ellipsisFactors[g]);
        }
        continue;
      }
      if (!repeated.contains(c)) {
        auto [it, inserted] = labelFactors.try_emplace(c, -1);
        if (inserted)
          it->second = b.factor(b.operandShape(i)[dim],
                                eq->output.find(c) != std::string::npos
                                    ? kParallel
                                    : kReduction);
        b.operand(i, dim, it->second);
      }
      ++dim;
    }
  }
  int64_t dim = 0;
  for (char c : eq->output) {
    if (c == '.') {
      for (int64_t g = 0; g < ellipsisRank; ++g)
        b.result(0, dim++, ellipsisFactors[g]);
      continue;
    }
    auto it = labelFactors.find(c);
    if (it != labelFactors.end())
      b.result(0, dim, it->second);
    ++dim;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Normalizations, reductions, scans
//===----------------------------------------------------------------------===//

/// Softmax, log-softmax, cumsum: the axis stays whole.
void axisRule(RuleBuilder &b, int64_t axis) {
  int64_t rank = b.resultShape(0).size();
  if (rank == 0)
    return; // Softmax of a scalar: nothing to shard.
  axis = normalizeAxis(axis, rank);
  sameShapeRule(b, [&](int64_t d) {
    return d == axis ? kNeedReplication : kParallel;
  });
}

/// Layer and RMS normalization over [axis, rank); the parameters broadcast
/// right-aligned to the normalized shape.
void normalizationRule(RuleBuilder &b, int64_t axis) {
  ArrayRef<int64_t> shape = b.operandShape(0);
  axis = normalizeAxis(axis, shape.size());
  SmallVector<SmallVector<int64_t, 2>> factors;
  for (auto [d, size] : llvm::enumerate(shape)) {
    factors.push_back({b.factor(
        size, static_cast<int64_t>(d) >= axis ? kNeedReplication : kParallel)});
    b.operand(0, d, factors.back());
    b.result(0, d, factors.back());
  }
  for (unsigned i = 1; i < b.numOperands(); ++i)
    assignBroadcast(b, i, shape, factors);
}

/// normalization_scale_grad: the rows (dims before `axis`) are summed,
/// so a split of them gives partial sums; the normalized dims are the
/// result's and stay whole, as the forward's.
void normalizationScaleGradRule(RuleBuilder &b, int64_t axis) {
  ArrayRef<int64_t> shape = b.operandShape(0);
  axis = normalizeAxis(axis, shape.size());
  for (auto [d, size] : llvm::enumerate(shape)) {
    bool row = static_cast<int64_t>(d) < axis;
    int64_t f = b.factor(size, row ? kReduction : kNeedReplication);
    b.operand(0, d, f);
    b.operand(1, d, f);
    if (!row)
      b.result(0, static_cast<int64_t>(d) - axis, f);
  }
}

void batchNormalizationRule(RuleBuilder &b) {
  ArrayRef<int64_t> shape = b.operandShape(0);
  for (auto [d, size] : llvm::enumerate(shape)) {
    int64_t f = b.factor(size);
    b.operand(0, d, f);
    b.result(0, d, f);
    if (d == 1)
      for (unsigned i = 1; i < b.numOperands(); ++i)
        b.operand(i, 0, f);
  }
}

/// reduce_sum: reduced axes are Reduction (partial sums add up). Means and
/// maxima of parts are not sums of parts: reduce_mean and reduce_max keep
/// their reduced axes whole. A kept size-1 dim has no factor.
void reduceRule(RuleBuilder &b, ArrayRef<int64_t> axesAttr,
                       bool keepdims, FactorKind reducedKind) {
  ArrayRef<int64_t> shape = b.operandShape(0);
  llvm::SmallSet<int64_t, 4> axes;
  for (int64_t a : axesAttr)
    axes.insert(normalizeAxis(a, shape.size()));
  int64_t out = 0;
  for (auto [d, size] : llvm::enumerate(shape)) {
    bool reduced = axes.contains(d);
    int64_t f = b.factor(size, reduced ? reducedKind : kParallel);
    b.operand(0, d, f);
    if (!reduced)
      b.result(0, out, f);
    if (!reduced || keepdims)
      ++out;
  }
}

/// The selected axis stays whole; the values and indices share a k-sized
/// factor there, which has no counterpart in the input.
void topkRule(RuleBuilder &b, nn::TopKOp op) {
  ArrayRef<int64_t> shape = b.operandShape(0);
  int64_t axis = normalizeAxis(op.getAxis(), shape.size());
  for (auto [d, size] : llvm::enumerate(shape)) {
    if (static_cast<int64_t>(d) == axis) {
      int64_t k = b.factor(b.resultShape(0)[d], kNeedReplication);
      b.result(0, d, k);
      b.result(1, d, k);
      continue;
    }
    int64_t f = b.factor(size);
    b.operand(0, d, f);
    b.result(0, d, f);
    b.result(1, d, f);
  }
}

//===----------------------------------------------------------------------===//
// Convolution, pooling
//===----------------------------------------------------------------------===//

/// Spatial dims get no factors: a sliding window over a split dim needs a
/// halo from the neighbour. Input channels are summed over, unless a bias is
/// added (see contractionKind). With groups, an output channel reads only its
/// group's input channels, which a split of either channel dim would
/// misplace, so the channels stay whole too.
void convRule(RuleBuilder &b, nn::ConvOp op) {
  ArrayRef<int64_t> x = b.operandShape(0), w = b.operandShape(1);
  int64_t n = b.factor(x[0]);
  b.operand(0, 0, n);
  b.result(0, 0, n);
  if (op.getGroup() != 1)
    return;
  int64_t m = b.factor(w[0]);
  int64_t c = b.factor(x[1], contractionKind(static_cast<bool>(op.getBias())));
  b.operand(0, 1, c);
  b.operand(1, 0, m);
  b.operand(1, 1, c);
  if (op.getBias())
    b.operand(2, 0, m);
  b.result(0, 1, m);
}

/// Batch and channels are independent; windows need whole spatial dims.
void poolRule(RuleBuilder &b) {
  ArrayRef<int64_t> x = b.operandShape(0);
  for (int64_t d = 0; d < 2; ++d) {
    int64_t f = b.factor(x[d]);
    b.operand(0, d, f);
    b.result(0, d, f);
  }
}

//===----------------------------------------------------------------------===//
// Attention, rotary embedding
//===----------------------------------------------------------------------===//

/// The sizes of an attention's query, key and value (operands 0 to 2),
/// 3-D ([B, S, H*D], head counts from the attributes) or 4-D.
struct AttentionDims {
  int64_t batch, hq, hkv, sq, skv, d, dv;
  bool threeD;
};
static AttentionDims attentionDims(RuleBuilder &b, int64_t qHeads, int64_t kvHeads) {
  ArrayRef<int64_t> q = b.operandShape(0), k = b.operandShape(1), v = b.operandShape(2);
  if (q.size() == 3)
    return {q[0], qHeads, kvHeads, q[1], k[1], q[2] / qHeads, v[2] / kvHeads, true};
  return {q[0], q[1], k[1], q[2], k[2], q[3], v[3], false};
}

/// Query head h * g + r reads key/value head h (g query heads per kv
/// head), so the query head dim is the compound (Hkv, g). Softmax runs over
/// the key positions and the scores sum over the feature dim, so both stay
/// whole; so do the query positions under a causal mask, which compares
/// global positions.
void attentionRule(RuleBuilder &b, nn::AttentionOp op) {
  auto [batch, hq, hkv, sq, skv, d, dv, threeD] = attentionDims(
      b, static_cast<int64_t>(op.getQNumHeads()), static_cast<int64_t>(op.getKvNumHeads()));
  int64_t fb = b.factor(batch);
  int64_t fh = b.factor(hkv);
  int64_t fg = b.factor(hq / hkv);
  int64_t fsq = b.factor(sq, op.getIsCausal() ? kNeedReplication : kParallel);
  int64_t fskv = b.factor(skv, kNeedReplication);
  int64_t fd = b.factor(d, kNeedReplication);
  int64_t fdv = b.factor(dv);
  if (threeD) {
    b.operand(0, {{fb}, {fsq}, {fh, fg, fd}});
    b.operand(1, {{fb}, {fskv}, {fh, fd}});
    b.operand(2, {{fb}, {fskv}, {fh, fdv}});
    b.result(0, {{fb}, {fsq}, {fh, fg, fdv}});
  } else {
    b.operand(0, {{fb}, {fh, fg}, {fsq}, {fd}});
    b.operand(1, {{fb}, {fh}, {fskv}, {fd}});
    b.operand(2, {{fb}, {fh}, {fskv}, {fdv}});
    b.result(0, {{fb}, {fh, fg}, {fsq}, {fdv}});
  }
  // The saved log-sum-exp, [B, Hq, Sq].
  if (op.getLse())
    b.result(1, {{fb}, {fh, fg}, {fsq}});
  // The mask broadcasts to the scores, [B, Hq, Sq, Skv].
  if (op.getMask())
    assignBroadcast(b, 3, {batch, hq, sq, skv},
                    {{fb}, {fh, fg}, {fsq}, {fskv}});
}

/// The backward of attention: batch and key/value heads shard as in the
/// forward; every other dim is contracted or summed over by some
/// cotangent (dK and dV sum over the query positions and the group's
/// heads, dQ over the keys, dP = dY V^T over the value features), so it
/// stays whole.
void attentionGradRule(RuleBuilder &b, nn::AttentionGradOp op) {
  auto [batch, hq, hkv, sq, skv, d, dv, threeD] = attentionDims(
      b, static_cast<int64_t>(op.getQNumHeads()), static_cast<int64_t>(op.getKvNumHeads()));
  int64_t fb = b.factor(batch);
  int64_t fh = b.factor(hkv);
  int64_t fg = b.factor(hq / hkv, kNeedReplication);
  int64_t fsq = b.factor(sq, kNeedReplication);
  int64_t fskv = b.factor(skv, kNeedReplication);
  int64_t fd = b.factor(d, kNeedReplication);
  int64_t fdv = b.factor(dv, kNeedReplication);
  SmallVector<SmallVector<int64_t, 2>> qDims, kDims, vDims, yDims;
  if (threeD) {
    qDims = {{fb}, {fsq}, {fh, fg, fd}};
    kDims = {{fb}, {fskv}, {fh, fd}};
    vDims = {{fb}, {fskv}, {fh, fdv}};
    yDims = {{fb}, {fsq}, {fh, fg, fdv}};
  } else {
    qDims = {{fb}, {fh, fg}, {fsq}, {fd}};
    kDims = {{fb}, {fh}, {fskv}, {fd}};
    vDims = {{fb}, {fh}, {fskv}, {fdv}};
    yDims = {{fb}, {fh, fg}, {fsq}, {fdv}};
  }
  b.operand(0, qDims);
  b.operand(1, kDims);
  b.operand(2, vDims);
  b.operand(3, yDims);
  b.operand(4, {{fb}, {fh, fg}, {fsq}});
  b.result(0, qDims);
  b.result(1, kDims);
  b.result(2, vDims);
  if (op.getMask())
    assignBroadcast(b, 5, {batch, hq, sq, skv}, {{fb}, {fh, fg}, {fsq}, {fskv}});
}

/// The rotation mixes the two halves (or pairs) of a head's features, so
/// the feature dim stays whole. Positions come from position_ids, which
/// index whole caches, or from caches laid out like the input.
void rotaryEmbeddingRule(RuleBuilder &b, nn::RotaryEmbeddingOp op) {
  ArrayRef<int64_t> x = b.operandShape(0);
  bool threeD = x.size() == 3;
  int64_t heads = threeD ? static_cast<int64_t>(op.getNumHeads()) : x[1];
  int64_t seq = threeD ? x[1] : x[2];
  int64_t headSize = threeD ? x[2] / heads : x[3];
  int64_t fb = b.factor(x[0]), fh = b.factor(heads), fs = b.factor(seq);
  int64_t fd = b.factor(headSize, kNeedReplication);
  SmallVector<SmallVector<int64_t, 2>> dims =
      threeD ? SmallVector<SmallVector<int64_t, 2>>{{fb}, {fs}, {fh, fd}}
             : SmallVector<SmallVector<int64_t, 2>>{{fb}, {fh}, {fs}, {fd}};
  b.operand(0, dims);
  b.result(0, dims);
  if (op.getPositionIds()) {
    b.operand(3, 0, fb);
    b.operand(3, 1, fs);
    return;
  }
  for (unsigned cache : {1u, 2u}) {
    b.operand(cache, 0, fb);
    b.operand(cache, 1, fs);
  }
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

/// Reshape-like ops: the element order is unchanged, so a run of input dims
/// and a run of result dims with equal products hold the same elements.
/// Walking both shapes from the major end, the next shared factor is the
/// common part of the two current dim remainders: all of the smaller one
/// when it divides the larger ([2,6] -> [4,3]: 2, 2, 3), else their gcd,
/// after which the remainders are coprime and the rest of the run cannot be
/// split the same way on both sides: each side's remaining dims there get
/// their own NeedReplication factors. Size-1 dims get no factor.
void reshapeRule(RuleBuilder &b) {
  ArrayRef<int64_t> in = b.operandShape(0), out = b.resultShape(0);
  // With no elements there is nothing to split.
  if (llvm::is_contained(in, 0) || llvm::is_contained(out, 0))
    return;
  SmallVector<int64_t> inDims, outDims;
  for (auto [d, size] : llvm::enumerate(in))
    if (size != 1)
      inDims.push_back(d);
  for (auto [d, size] : llvm::enumerate(out))
    if (size != 1)
      outDims.push_back(d);

  if (inDims.empty() || outDims.empty())
    return;

  // inDims[i] and outDims[j] are the current dims; inRest and outRest what
  // is left of them; inEnd and outEnd the element counts of the prefixes
  // through them, so the two sides' dim boundaries meet where they agree.
  size_t i = 0, j = 0;
  int64_t inRest = in[inDims[0]], outRest = out[outDims[0]];
  int64_t inEnd = inRest, outEnd = outRest;
  auto nextIn = [&] {
    if (++i < inDims.size()) {
      inRest = in[inDims[i]];
      inEnd *= inRest;
    }
  };
  auto nextOut = [&] {
    if (++j < outDims.size()) {
      outRest = out[outDims[j]];
      outEnd *= outRest;
    }
  };
  auto shared = [&](int64_t size) {
    int64_t f = b.factor(size);
    b.operand(0, inDims[i], f);
    b.result(0, outDims[j], f);
    inRest /= size;
    outRest /= size;
  };
  while (i < inDims.size() && j < outDims.size()) {
    if (inRest == outRest) {
      shared(inRest);
      nextIn();
      nextOut();
    } else if (outRest % inRest == 0) {
      shared(inRest);
      nextIn();
    } else if (inRest % outRest == 0) {
      shared(outRest);
      nextOut();
    } else {
      int64_t g = std::gcd(inRest, outRest);
      if (g > 1)
        shared(g);
      // The remainders are now coprime: up to where the dim boundaries
      // meet again, each side is split its own way.
      b.operand(0, inDims[i], b.factor(inRest, kNeedReplication));
      b.result(0, outDims[j], b.factor(outRest, kNeedReplication));
      while (inEnd != outEnd) {
        if (inEnd < outEnd) {
          nextIn();
          b.operand(0, inDims[i], b.factor(inRest, kNeedReplication));
        } else {
          nextOut();
          b.result(0, outDims[j], b.factor(outRest, kNeedReplication));
        }
      }
      nextIn();
      nextOut();
    }
  }
}

/// A size-1 input dim broadcast against a larger result dim has no factor.
void expandRule(RuleBuilder &b) { broadcastRule(b); }

void transposeRule(RuleBuilder &b, nn::TransposeOp op) {
  ArrayRef<int64_t> in = b.operandShape(0);
  SmallVector<int64_t> factors;
  for (auto [d, size] : llvm::enumerate(in)) {
    factors.push_back(b.factor(size));
    b.operand(0, d, factors.back());
  }
  for (auto [d, p] : llvm::enumerate(op.getPerm()))
    b.result(0, d, factors[p]);
}

/// Every operand and result has one shape outside `axis`, which has no
/// factor (its parts have different sizes, or the op reads it whole).
void allButAxisRule(RuleBuilder &b, int64_t axis) {
  ArrayRef<int64_t> shape = b.operandShape(0);
  axis = normalizeAxis(axis, shape.size());
  for (auto [d, size] : llvm::enumerate(shape)) {
    if (static_cast<int64_t>(d) == axis)
      continue;
    int64_t f = b.factor(size);
    for (unsigned i = 0; i < b.numOperands(); ++i)
      b.operand(i, d, f);
    for (unsigned i = 0; i < b.numResults(); ++i)
      b.result(i, d, f);
  }
}

/// Same-rank input and result where the dims in `whole` have no factor
/// (their bounds are positions in the global dim) and the others share one.
static void keepUnlessRule(RuleBuilder &b,
                           llvm::function_ref<bool(int64_t)> whole) {
  ArrayRef<int64_t> in = b.operandShape(0);
  for (auto [d, size] : llvm::enumerate(in)) {
    if (whole(d))
      continue;
    int64_t f = b.factor(size);
    b.operand(0, d, f);
    b.result(0, d, f);
  }
}

void sliceRule(RuleBuilder &b, nn::SliceOp op) {
  ArrayRef<int64_t> in = b.operandShape(0), out = b.resultShape(0);
  llvm::SmallSet<int64_t, 4> sliced;
  // An axis taken whole in order (step 1, all elements) is not sliced: its
  // bounds clamp to any local size.
  for (auto [axis, step] : llvm::zip(op.getAxes(), op.getSteps())) {
    int64_t d = normalizeAxis(axis, in.size());
    if (step != 1 || in[d] != out[d])
      sliced.insert(d);
  }
  keepUnlessRule(b, [&](int64_t d) { return sliced.contains(d); });
}

void padRule(RuleBuilder &b, nn::PadOp op) {
  ArrayRef<int64_t> pads = op.getPads();
  int64_t rank = b.operandShape(0).size();
  keepUnlessRule(b, [&](int64_t d) {
    return pads[d] != 0 || pads[d + rank] != 0;
  });
}

/// The triangle is cut by global row and column positions.
void triluRule(RuleBuilder &b) {
  int64_t rank = b.resultShape(0).size();
  sameShapeRule(b, [&](int64_t d) {
    return d >= rank - 2 ? kNeedReplication : kParallel;
  });
}

/// Every index picks its slice independently. The table axis may be split
/// (a vocabulary-parallel embedding): partitioning then gives the op its
/// block's place in the axis (`axis_starts`), each rank reads the rows it
/// holds and zeros for the others, and the ranks' results sum to the
/// gather: a reduction factor. Not for i1 tables, whose all_reduce has no
/// sum; those keep the axis whole.
void gatherRule(RuleBuilder &b, nn::GatherOp op) {
  ArrayRef<int64_t> x = b.operandShape(0), idx = b.operandShape(1);
  int64_t axis = normalizeAxis(op.getAxis(), x.size());
  int64_t q = idx.size();
  Type element = cast<RankedTensorType>(op.getInput().getType()).getElementType();
  if (!element.isInteger(1))
    b.operand(0, axis, b.factor(x[axis], kReduction));
  for (auto [d, size] : llvm::enumerate(x)) {
    int64_t dd = static_cast<int64_t>(d);
    if (dd == axis)
      continue;
    int64_t f = b.factor(size);
    b.operand(0, d, f);
    b.result(0, dd < axis ? dd : dd - 1 + q, f);
  }
  for (auto [d, size] : llvm::enumerate(idx)) {
    int64_t f = b.factor(size);
    b.operand(1, d, f);
    b.result(0, axis + d, f);
  }
}

/// Outside the axis, result (i, j, ...) reads input (i, j, ...) at the same
/// global coordinates, so a dim splits alike only where input and indices
/// have the same size.
void gatherElementsRule(RuleBuilder &b, nn::GatherElementsOp op) {
  ArrayRef<int64_t> x = b.operandShape(0), idx = b.operandShape(1);
  int64_t axis = normalizeAxis(op.getAxis(), x.size());
  for (auto [d, size] : llvm::enumerate(x)) {
    if (static_cast<int64_t>(d) == axis || size != idx[d])
      continue;
    int64_t f = b.factor(size);
    b.operand(0, d, f);
    b.operand(1, d, f);
    b.result(0, d, f);
  }
}

/// The indexed leading dims of the input are written at global positions,
/// and the update rows may land anywhere, so only the trailing slice dims,
/// copied whole per update, split.
void scatterNDRule(RuleBuilder &b) {
  ArrayRef<int64_t> x = b.operandShape(0), idx = b.operandShape(1);
  int64_t q = idx.back();
  int64_t updateOffset = static_cast<int64_t>(idx.size()) - 1 - q;
  for (int64_t d = q, rank = x.size(); d < rank; ++d) {
    int64_t f = b.factor(x[d]);
    b.operand(0, d, f);
    b.operand(2, d + updateOffset, f);
    b.result(0, d, f);
  }
}

} // namespace shardflow::dist
