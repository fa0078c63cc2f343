//===- RaiseAttention.cpp - materialized attention to nn.attention --------===//
//
// Exported transformers compute attention as matmul(Q, K^T), a scale, an
// optional soft-cap and mask, softmax and matmul(., V). As separate ops the
// [B, H, Sq, Skv] score tensor is written and read four or five times; as
// one nn.attention a backend runs a fused kernel (blocks of scores in cache
// on the CPU, flash attention on GPUs) and never materializes it. This pass
// finds such chains, checks that nn.attention computes exactly the same
// function, and replaces them.
//
// Exactness is the rule: a causal mask is recognized only when its
// constant is the lower triangle with nn.attention's convention (query i
// sees keys j <= i), a where-mask's fill value must be small enough that a
// masked score contributes exactly 0, and no intermediate value of the
// chain may be read elsewhere. Anything else stays as it was, and with
// `explain` a remark on the softmax says why.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/Evaluate.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <limits>
#include <variant>

namespace shardflow::nn {
#define GEN_PASS_DEF_NNRAISEATTENTION
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

/// A where-mask's fill at or below this (or -inf) makes a masked score's
/// exponential exactly 0 in f32 and absorbs any finite score added to it.
constexpr double kMaskFillLimit = -1e30;

/// Constant masks are evaluated at compile time (by the constant evaluator,
/// nn/IR/Evaluate.h) up to this many bytes: a causal mask of 4,096
/// positions.
constexpr int64_t kMaxEvaluatedBytes = int64_t(1) << 24;

RankedTensorType tensorType(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

/// The value of a constant whose elements are all equal.
std::optional<double> splatValue(Value v) {
  auto c = v.getDefiningOp<nn::ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseFPElementsAttr>(c.getValue());
  if (!dense || dense.getNumElements() == 0)
    return std::nullopt;
  if (dense.isSplat())
    return dense.getSplatValue<APFloat>().convertToDouble();
  if (dense.getNumElements() > 1024)
    return std::nullopt;
  auto values = dense.getValues<APFloat>();
  double first = (*values.begin()).convertToDouble();
  for (APFloat x : values)
    if (x.convertToDouble() != first)
      return std::nullopt;
  return first;
}

bool isMaskFill(double fill) {
  return fill == -std::numeric_limits<double>::infinity() ||
         fill <= kMaskFillLimit;
}

//===----------------------------------------------------------------------===//
// Constant masks
//===----------------------------------------------------------------------===//

/// The elements of a constant as doubles (booleans as 0 and 1), row-major.
std::optional<std::vector<double>> valuesOf(DenseElementsAttr dense) {
  std::vector<double> data;
  data.reserve(dense.getNumElements());
  Type elem = dense.getElementType();
  if (elem.isInteger(1)) {
    for (bool b : dense.getValues<bool>())
      data.push_back(b ? 1.0 : 0.0);
  } else if (isa<FloatType>(elem)) {
    for (APFloat x : dense.getValues<APFloat>())
      data.push_back(x.convertToDouble());
  } else if (isa<IntegerType>(elem)) {
    for (APInt x : dense.getValues<APInt>())
      data.push_back(double(x.getSExtValue()));
  } else {
    return std::nullopt;
  }
  return data;
}

/// Whether `mask` (broadcast to the scores, whose last two dimensions are
/// [sq, skv]) keeps exactly the keys j <= i of query i in every slice.
/// `keep(x)` says whether element value x keeps its key.
template <typename Keep>
bool isCausal(Value mask, int64_t sq, int64_t skv, Keep keep) {
  DenseElementsAttr dense = nn::evaluateValue(mask, kMaxEvaluatedBytes);
  if (!dense)
    return false;
  auto shape = dense.getType().getShape();
  auto data = valuesOf(dense);
  if (!data || shape.size() < 2 || shape[shape.size() - 2] != sq ||
      shape.back() != skv)
    return false;
  for (int64_t at = 0, n = data->size(); at < n; ++at) {
    int64_t i = at / skv % sq, j = at % skv;
    if (keep((*data)[at]) != (j <= i))
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Matching the chain
//===----------------------------------------------------------------------===//

enum class MaskKind { None, Causal, Bool, Float };

struct Chain {
  nn::MatMulOp scores, output;
  /// The scores matmul's operands with any splat scale peeled off: exporters
  /// of PyTorch's scaled_dot_product_attention scale Q and K^T each by the
  /// square root of the scale.
  Value query, keyT;
  nn::SoftmaxOp softmax;
  double scale = 1.0, softcap = 0.0;
  MaskKind maskKind = MaskKind::None;
  /// Bool: the mask value; `invert` when it marks the dropped keys.
  /// Float: the additive mask, or with `fill` set the bool `mask` to turn
  /// into where(keep, 0, fill).
  Value mask, fillValue;
  /// Float: further additive terms of the mask (T5 adds its position bias,
  /// then the padding mask).
  SmallVector<Value> extraTerms;
  bool invert = false;
  /// The chain's ops, first to last; each but the last has one user.
  SmallVector<Operation *> ops;
  std::string description;
};

/// A failure with its reason, for `explain`.
struct Mismatch {
  std::string reason;
};

using MatchResult = std::variant<Chain, Mismatch>;

/// `v` is read only by `user`.
bool onlyUsedBy(Value v, Operation *user) {
  return llvm::all_of(v.getUsers(), [&](Operation *u) { return u == user; });
}

/// Matches v = [softcap]([scale](matmul(Q, K^T))) into `chain`.
std::optional<std::string> matchScores(Value v, Chain &chain) {
  auto scoresType = tensorType(v);
  SmallVector<Operation *> ops;
  auto sameType = [&](Value x) { return tensorType(x) == scoresType; };
  // Soft-cap: t * tanh(x / t).
  if (auto mul = v.getDefiningOp<nn::MulOp>()) {
    for (int side = 0; side < 2; ++side) {
      auto tanh = mul->getOperand(side).getDefiningOp<nn::TanhOp>();
      auto cap = splatValue(mul->getOperand(1 - side));
      if (!tanh || !cap)
        continue;
      auto div = tanh.getInput().getDefiningOp<nn::DivOp>();
      if (!div || splatValue(div.getRhs()) != cap || *cap <= 0 ||
          !sameType(div.getLhs()) || !sameType(mul.getResult()))
        continue;
      if (!onlyUsedBy(tanh.getResult(), mul) ||
          !onlyUsedBy(div.getResult(), tanh))
        return std::string("a soft-cap intermediate has other users");
      chain.softcap = *cap;
      ops.append({mul, tanh, div});
      v = div.getLhs();
      break;
    }
  }
  // Scale: x * c, c * x or x / c with a splat constant c.
  Operation *scaleOp = v.getDefiningOp();
  if (scaleOp && isa<nn::MulOp, nn::DivOp>(scaleOp)) {
    bool isDiv = isa<nn::DivOp>(scaleOp);
    for (int side = 0; side < (isDiv ? 1 : 2); ++side) {
      Value x = scaleOp->getOperand(side), c = scaleOp->getOperand(1 - side);
      if (!x.getDefiningOp<nn::MatMulOp>() || !sameType(x))
        continue;
      auto factor = splatValue(c);
      if (!factor)
        return std::string("the scores are scaled by a value that is not a "
                           "splat constant");
      if (*factor == 0.0 || !std::isfinite(*factor))
        return std::string("the scale constant is zero or not finite");
      if (!ops.empty() && !onlyUsedBy(v, ops.back()))
        return std::string("the scaled scores have other users");
      chain.scale = isDiv ? 1.0 / *factor : *factor;
      ops.push_back(scaleOp);
      v = x;
      break;
    }
  }
  auto matmul = v.getDefiningOp<nn::MatMulOp>();
  if (!matmul)
    return std::string("the scores are not matmul(Q, K^T), optionally "
                       "scaled by a splat constant and soft-capped");
  if (!ops.empty() && !onlyUsedBy(v, ops.back()))
    return std::string("the scores matmul has other users");
  // Q and K^T each scaled by a splat constant (x * c or c * x).
  chain.query = matmul.getLhs();
  chain.keyT = matmul.getRhs();
  SmallVector<Operation *> operandScales;
  for (Value *operand : {&chain.query, &chain.keyT}) {
    auto mul = operand->getDefiningOp<nn::MulOp>();
    if (!mul || !onlyUsedBy(mul.getResult(), matmul) ||
        mul.getLhs() == mul.getRhs())
      continue;
    for (int side = 0; side < 2; ++side) {
      auto factor = splatValue(mul->getOperand(1 - side));
      Value x = mul->getOperand(side);
      if (!factor || *factor == 0.0 || !std::isfinite(*factor) ||
          tensorType(x) != tensorType(mul.getResult()))
        continue;
      chain.scale *= *factor;
      operandScales.push_back(mul);
      *operand = x;
      break;
    }
  }
  ops.push_back(matmul);
  ops.append(operandScales.begin(), operandScales.end());
  chain.scores = matmul;
  // Program order: the matmul first.
  chain.ops.append(ops.rbegin(), ops.rend());
  return std::nullopt;
}

/// Matches the mask stage in front of the softmax, then the scores.
std::optional<std::string> matchMaskAndScores(Value v, Chain &chain) {
  auto type = tensorType(v);
  int64_t sq = type.getDimSize(2), skv = type.getDimSize(3);
  Operation *def = v.getDefiningOp();
  auto finish = [&](Value scores, Operation *maskOp,
                    Chain &into) -> std::optional<std::string> {
    if (tensorType(scores) != type)
      return std::string("the mask broadcasts the scores to a larger shape");
    if (!onlyUsedBy(scores, maskOp))
      return std::string("the scores before the mask have other users");
    if (auto why = matchScores(scores, into))
      return why;
    into.ops.push_back(maskOp);
    return std::nullopt;
  };
  // Boolean mask: where(keep, s, fill) or where(drop, fill, s).
  if (auto where = dyn_cast_or_null<nn::WhereOp>(def)) {
    for (int side = 0; side < 2; ++side) {
      Value scores = side == 0 ? where.getX() : where.getY();
      Value fillValue = side == 0 ? where.getY() : where.getX();
      auto fill = splatValue(fillValue);
      if (!fill)
        continue;
      if (!isMaskFill(*fill)) {
        std::string text;
        llvm::raw_string_ostream os(text);
        os << "the where-mask fills " << *fill
           << ", which is neither -inf nor at most -1e30";
        return text;
      }
      chain.invert = side == 1;
      chain.mask = where.getCondition();
      bool invert = chain.invert;
      if (isCausal(chain.mask, sq, skv,
                   [&](double x) { return (x != 0.0) != invert; })) {
        chain.maskKind = MaskKind::Causal;
      } else if (std::isinf(*fill)) {
        chain.maskKind = MaskKind::Bool;
      } else {
        chain.maskKind = MaskKind::Float;
        chain.fillValue = fillValue;
      }
      return finish(scores, where, chain);
    }
    return std::string("the where before the softmax does not select "
                       "between the scores and a splat constant");
  }
  // Additive mask: s + bias or bias + s. Either operand may be a mul or
  // a div (a scaled score, or a mask like bert's (1 - m) * -10000), so
  // each side is tried; the reason given is that of a side with the
  // scores' shape.
  if (auto add = dyn_cast_or_null<nn::AddOp>(def)) {
    std::optional<std::string> reason;
    for (int side = 0; side < 2; ++side) {
      Value scores = add->getOperand(side), bias = add->getOperand(1 - side);
      Chain trial = chain;
      trial.mask = bias;
      trial.maskKind =
          isCausal(bias, sq, skv, [](double x) { return x == 0.0; }) &&
                  isCausal(bias, sq, skv,
                           [](double x) { return !isMaskFill(x); })
              ? MaskKind::Causal
              : MaskKind::Float;
      std::optional<std::string> why = finish(scores, add, trial);
      if (!why) {
        chain = std::move(trial);
        return std::nullopt;
      }
      // Two additive terms: (s + a) + b or b + (a + s), a float mask a + b.
      auto inner = scores.getDefiningOp<nn::AddOp>();
      if (inner && tensorType(scores) == type && onlyUsedBy(scores, add)) {
        for (int innerSide = 0; innerSide < 2 && why; ++innerSide) {
          Value innerScores = inner->getOperand(innerSide);
          Chain twoTerms = chain;
          twoTerms.mask = bias;
          twoTerms.extraTerms.push_back(inner->getOperand(1 - innerSide));
          twoTerms.maskKind = MaskKind::Float;
          if (tensorType(innerScores) != type || matchScores(innerScores, twoTerms))
            continue;
          twoTerms.ops.append({inner, add});
          chain = std::move(twoTerms);
          return std::nullopt;
        }
      }
      if (!reason || tensorType(scores) == type)
        reason = why;
    }
    return reason;
  }
  return matchScores(v, chain);
}

/// If `v` is K or V repeated per query-head group ([B, Hkv, S, D] ->
/// unsqueeze or reshape to [B, Hkv, 1, S, D] -> expand to [B, Hkv, g, S, D]
/// -> reshape to [B, Hkv * g, S, D]), returns the unrepeated value and g.
std::optional<std::pair<Value, int64_t>> peelRepeatedHeads(Value v) {
  auto merge = v.getDefiningOp<nn::ReshapeOp>();
  if (!merge)
    return std::nullopt;
  auto expand = merge.getInput().getDefiningOp<nn::ExpandOp>();
  if (!expand)
    return std::nullopt;
  Value single = expand.getInput();
  Operation *insert = single.getDefiningOp();
  if (!insert || !isa<nn::UnsqueezeOp, nn::ReshapeOp>(insert))
    return std::nullopt;
  Value source = insert->getOperand(0);
  auto out = tensorType(v), grouped = tensorType(expand.getResult()),
       one = tensorType(single), in = tensorType(source);
  if (!out || !grouped || !one || !in || in.getRank() != 4 ||
      grouped.getRank() != 5 || one.getRank() != 5)
    return std::nullopt;
  ArrayRef<int64_t> s = in.getShape();
  int64_t g = grouped.getDimSize(2);
  if (one.getShape() != ArrayRef<int64_t>{s[0], s[1], 1, s[2], s[3]} ||
      grouped.getShape() != ArrayRef<int64_t>{s[0], s[1], g, s[2], s[3]} ||
      out.getShape() != ArrayRef<int64_t>{s[0], s[1] * g, s[2], s[3]})
    return std::nullopt;
  return std::make_pair(source, g);
}

/// The key in [B, H, Skv, D] layout from K^T: the source and permutation of
/// a transpose to build (empty: the source itself is the key).
struct KeySource {
  Value source;
  SmallVector<int64_t> perm;
};

KeySource keyFromTransposed(Value keyT) {
  // K^T as dynamo writes it: K [B, H, S, D] reshaped to [B*H, S, D],
  // transposed to [B*H, D, S] and reshaped to [B, H, D, S].
  if (auto outer = keyT.getDefiningOp<nn::ReshapeOp>())
    if (auto t = outer.getInput().getDefiningOp<nn::TransposeOp>())
      if (auto inner = t.getInput().getDefiningOp<nn::ReshapeOp>()) {
        auto k = tensorType(inner.getInput()), merged = tensorType(inner.getResult()),
             kt = tensorType(keyT);
        if (k && merged && kt && k.getRank() == 4 && merged.getRank() == 3 &&
            kt.getRank() == 4 && llvm::equal(t.getPerm(), ArrayRef<int64_t>{0, 2, 1}) &&
            merged.getDimSize(0) == k.getDimSize(0) * k.getDimSize(1) &&
            merged.getDimSize(1) == k.getDimSize(2) &&
            merged.getDimSize(2) == k.getDimSize(3) &&
            kt.getDimSize(0) == k.getDimSize(0) && kt.getDimSize(1) == k.getDimSize(1) &&
            kt.getDimSize(2) == k.getDimSize(3) && kt.getDimSize(3) == k.getDimSize(2))
          return {inner.getInput(), {}};
      }
  if (auto t = keyT.getDefiningOp<nn::TransposeOp>()) {
    // K^T dim i is X dim p[i]; K = K^T with its last two dims swapped.
    SmallVector<int64_t> p(t.getPerm());
    std::swap(p[2], p[3]);
    bool identity = llvm::equal(p, ArrayRef<int64_t>{0, 1, 2, 3});
    return {t.getInput(), identity ? SmallVector<int64_t>{} : p};
  }
  return {keyT, {0, 1, 3, 2}};
}

/// The ops of where(isnan(p), 0, p) -- equal(p, p), not, where, in program
/// order -- when they are all p's users and read only by each other.
std::optional<SmallVector<Operation *>> matchNaNGuard(Value p) {
  nn::WhereOp where;
  nn::EqualOp equal;
  for (Operation *user : p.getUsers()) {
    if (auto w = dyn_cast<nn::WhereOp>(user))
      where = w;
    else if (auto e = dyn_cast<nn::EqualOp>(user))
      equal = e;
    else
      return std::nullopt;
  }
  if (!where || !equal || equal.getLhs() != p || equal.getRhs() != p ||
      where.getY() != p || !equal.getResult().hasOneUse())
    return std::nullopt;
  auto isNaN = dyn_cast<nn::NotOp>(*equal.getResult().getUsers().begin());
  auto zero = splatValue(where.getX());
  if (!isNaN || where.getCondition() != isNaN.getResult() ||
      !isNaN.getResult().hasOneUse() || !zero || *zero != 0.0 ||
      tensorType(where.getResult()) != tensorType(p))
    return std::nullopt;
  return SmallVector<Operation *>{equal, isNaN, where};
}

MatchResult matchChain(nn::SoftmaxOp softmax) {
  Chain chain;
  chain.softmax = softmax;
  auto type = tensorType(softmax.getResult());
  if (!type || type.getRank() != 4)
    return Mismatch{"the softmax is not over 4-D scores [B, H, Sq, Skv]"};
  int64_t axis = softmax.getAxisAttr().getInt();
  if (axis != 3 && axis != -1)
    return Mismatch{"the softmax is not over the last axis (the keys)"};
  // Forward: softmax -> [inference dropout] -> matmul(probs, V).
  Value probs = softmax.getResult();
  SmallVector<Operation *> tail;
  // PyTorch's attention export guards the probabilities:
  // where(isnan(p), 0, p), isnan(p) imported as not(equal(p, p)). A NaN
  // comes out of the softmax only for a row whose every score is -inf (a
  // fully masked row, given finite inputs), which nn.attention makes 0.
  if (auto guard = matchNaNGuard(probs)) {
    tail.append(*guard);
    probs = guard->back()->getResult(0);
  }
  if (!probs.hasOneUse())
    return Mismatch{"the probabilities have other users"};
  Operation *user = *probs.getUsers().begin();
  if (auto dropout = dyn_cast<nn::DropoutOp>(user)) {
    tail.push_back(dropout);
    probs = dropout.getResult();
    if (!probs.hasOneUse())
      return Mismatch{"the probabilities have other users"};
    user = *probs.getUsers().begin();
  }
  auto output = dyn_cast<nn::MatMulOp>(user);
  if (!output || output.getLhs() != probs || output.getRhs() == probs)
    return Mismatch{"the probabilities are not the left operand of a matmul"};
  chain.output = output;
  // Backward: mask, soft-cap, scale, scores.
  if (!softmax.getInput().hasOneUse())
    return Mismatch{"the softmax's input has other users"};
  if (auto why = matchMaskAndScores(softmax.getInput(), chain))
    return Mismatch{*why};
  chain.ops.push_back(softmax);
  chain.ops.append(tail);
  chain.ops.push_back(output);

  auto q = tensorType(chain.query),
       kT = tensorType(chain.keyT), v = tensorType(output.getRhs());
  if (!q || !kT || !v || q.getRank() != 4 || kT.getRank() != 4 ||
      v.getRank() != 4)
    return Mismatch{"query, key and value are not all 4-D [B, H, S, D]"};
  if (q.getElementType() != type.getElementType() ||
      kT.getElementType() != type.getElementType() ||
      v.getElementType() != type.getElementType())
    return Mismatch{"query, key and value element types differ"};
  if (q.getDimSize(0) != type.getDimSize(0) ||
      q.getDimSize(1) != type.getDimSize(1))
    return Mismatch{"the query broadcasts its batch or heads against the key"};
  if (kT.getDimSize(0) != q.getDimSize(0) || v.getDimSize(0) != q.getDimSize(0))
    return Mismatch{"key or value broadcasts the batch dimension"};
  return chain;
}

//===----------------------------------------------------------------------===//
// Rewriting
//===----------------------------------------------------------------------===//

/// Erases the ops in `roots` that have no users, then their producers that
/// are left without users (nn ops are pure).
void eraseDead(SmallVector<Operation *> roots) {
  llvm::SetVector<Operation *> work(roots.begin(), roots.end());
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!op->use_empty() || !isa_and_nonnull<nn::NNDialect>(op->getDialect()))
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        work.insert(def);
    op->erase();
  }
}

/// The head count of `source` transposed by `perm` (empty: none).
int64_t headsOf(Value source, ArrayRef<int64_t> perm) {
  return tensorType(source).getDimSize(perm.empty() ? 1 : perm[1]);
}

/// Replaces the matched chain by nn.attention; fails, changing nothing,
/// when key and value do not have the same heads.
FailureOr<nn::AttentionOp> rewrite(Chain &chain) {
  KeySource key = keyFromTransposed(chain.keyT);
  Value value = chain.output.getRhs();
  // Grouped-query attention: K and V unrepeated when both repeat their
  // heads by the same factor (and the key's transpose keeps batch and
  // heads in place, so that it can move behind the repeat).
  int64_t group = 1;
  std::optional<std::pair<Value, int64_t>> kRep, vRep;
  if (key.perm.empty() || (key.perm[0] == 0 && key.perm[1] == 1))
    kRep = peelRepeatedHeads(key.source);
  vRep = peelRepeatedHeads(value);
  if (kRep && vRep && kRep->second == vRep->second) {
    key.source = kRep->first;
    value = vRep->first;
    group = kRep->second;
  }
  if (headsOf(key.source, key.perm) != tensorType(value).getDimSize(1))
    return failure();

  OpBuilder b(chain.output);
  Location loc = FusedLoc::get(
      b.getContext(),
      {chain.scores.getLoc(), chain.softmax.getLoc(), chain.output.getLoc()});
  Value k = key.source;
  if (!key.perm.empty())
    k = nn::TransposeOp::create(b, loc, k, b.getDenseI64ArrayAttr(key.perm));
  Value mask;
  if (chain.maskKind == MaskKind::Bool) {
    mask = chain.invert ? Value(nn::NotOp::create(b, loc, chain.mask))
                        : chain.mask;
  } else if (chain.maskKind == MaskKind::Float && chain.fillValue) {
    // where(keep, s, fill) as the additive mask where(keep, 0, fill).
    auto fillType = tensorType(chain.fillValue);
    Value zero = nn::ConstantOp::create(
        b, loc,
        DenseElementsAttr::get(fillType, ArrayRef<Attribute>{b.getFloatAttr(
                                             fillType.getElementType(), 0.0)}));
    mask = chain.invert
               ? nn::WhereOp::create(b, loc, chain.mask, chain.fillValue, zero)
               : nn::WhereOp::create(b, loc, chain.mask, zero, chain.fillValue);
  } else if (chain.maskKind == MaskKind::Float) {
    mask = chain.mask;
    for (Value term : chain.extraTerms)
      mask = nn::AddOp::create(b, loc, term, mask);
  }
  auto attention = nn::AttentionOp::create(
      b, loc, chain.query, k, value, mask,
      b.getBoolAttr(chain.maskKind == MaskKind::Causal), b.getI64IntegerAttr(0),
      b.getI64IntegerAttr(0), b.getF32FloatAttr(float(chain.scale)),
      b.getF32FloatAttr(float(chain.softcap)), b.getBoolAttr(false));
  chain.output.getResult().replaceAllUsesWith(attention.getResult());

  const char *maskText[] = {"no mask", "causal", "boolean mask", "float mask"};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "scale " << chain.scale << ", " << maskText[int(chain.maskKind)];
  if (chain.softcap > 0)
    os << ", softcap " << chain.softcap;
  if (group > 1)
    os << ", " << group << " query heads per key/value head";
  chain.description = text;

  // The chain, last op first, then whatever only it read (K^T's transpose,
  // the repeats, the mask's constants).
  SmallVector<Operation *> producers;
  for (Operation *op : llvm::reverse(chain.ops)) {
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (!llvm::is_contained(chain.ops, def))
          producers.push_back(def);
    op->erase();
  }
  eraseDead(producers);
  return attention;
}

struct NNRaiseAttentionPass
    : public nn::impl::NNRaiseAttentionBase<NNRaiseAttentionPass> {
  using NNRaiseAttentionBase::NNRaiseAttentionBase;

  void runOnOperation() override {
    SmallVector<nn::SoftmaxOp> softmaxes;
    getOperation().walk([&](nn::SoftmaxOp op) { softmaxes.push_back(op); });
    for (nn::SoftmaxOp softmax : softmaxes) {
      MatchResult match = matchChain(softmax);
      if (auto *mismatch = std::get_if<Mismatch>(&match)) {
        if (explain)
          softmax.emitRemark("not raised to nn.attention: ")
              << mismatch->reason;
        continue;
      }
      Chain &chain = std::get<Chain>(match);
      Location loc = softmax.getLoc();
      auto raised = rewrite(chain);
      if (failed(raised)) {
        if (explain)
          emitRemark(loc, "not raised to nn.attention: key and value have "
                          "different head counts");
        continue;
      }
      if (explain)
        raised->emitRemark("raised to nn.attention: ") << chain.description;
    }
  }
};

} // namespace
