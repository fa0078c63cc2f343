//===- RaiseNormalization.cpp - written-out norms to nn norm ops ----------===//
//
// Models exported before LayerNormalization (opset 17) and RMSNormalization
// (opset 23) existed, and models that write their norms by hand (Llama's
// RMSNorm in every exporter), compute them as chains of reductions and
// elementwise ops:
//
//   layer norm:  m = mean(x); d = x - m; v = mean(d^2)   [over trailing axes]
//                y = d / sqrt(v + eps)  [* gamma] [+ beta]
//   RMS norm:    y = x / sqrt(mean(x^2) + eps)  [* w]
//
// (d^2 as pow(d, 2) or d * d; the division also as a product with the
// reciprocal of the square root, or with 1 / sqrt). As separate ops they
// read the row several times and write the intermediate tensors; as one
// nn.layer_normalization or nn.rms_normalization each backend runs one
// kernel per row (the CUDA target's row reduction, which also takes a
// residual add before it as prologue).
//
// Exactness is the rule: the reductions cover the same trailing block of
// axes, eps is a scalar constant, gamma and beta broadcast within the
// normalized dimensions only, every element type is the same float type,
// and no intermediate value of the chain has a reader outside it. Without
// a gamma the scale is a constant of ones. With `explain`, each raised
// chain gets a remark, and so does each chain that has the core (a mean,
// plus eps, a square root) but is not raised, with the reason.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "Matching.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <iterator>
#include <optional>
#include <string>

namespace shardflow::nn {
#define GEN_PASS_DEF_NNRAISENORMALIZATION
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;
using namespace shardflow::nn::matching;

namespace {

/// Whether `v` is `x` squared: pow(x, 2) or x * x.
bool isSquareOf(Value v, Value x) {
  if (auto pow = v.getDefiningOp<nn::PowOp>())
    return pow.getLhs() == x && scalarOf(pow.getRhs()) == 2.0;
  if (auto mul = v.getDefiningOp<nn::MulOp>())
    return mul.getLhs() == x && mul.getRhs() == x;
  return false;
}

/// What a raising found, before anything changes.
struct Norm {
  bool layer = false;             // layer norm (else RMS norm)
  Value input;                    // x
  int64_t axis = 0;               // first normalized dimension
  double epsilon = 0;
  Value scale, bias;              // gamma, beta (null: none)
  Operation *output = nullptr;    // the last op of the chain
  SmallVector<Operation *> ops;   // the chain, in program order of matching
};

/// Whether `p` (gamma or beta) broadcasts within the normalized dimensions
/// [axis, rank) of `x`: no more dimensions than those, each 1 or theirs.
bool withinNormalized(Value p, Value x, int64_t axis) {
  RankedTensorType pt = typeOf(p), xt = typeOf(x);
  if (!pt || !pt.hasStaticShape() || pt.getElementType() != xt.getElementType())
    return false;
  int64_t rank = xt.getRank(), pr = pt.getRank();
  if (pr > rank - axis)
    return false;
  for (int64_t i = 0; i < pr; ++i) {
    int64_t d = pt.getDimSize(i), want = xt.getDimSize(rank - pr + i);
    if (d != 1 && d != want)
      return false;
  }
  return true;
}

/// Matches the chain that ends the mean `mean` (of x^2 for RMS norm, of d^2
/// for layer norm) and fills `norm`; returns the reason it is not one.
std::optional<std::string> matchFromVariance(nn::ReduceMeanOp variance, Norm &norm) {
  auto fail = [](const char *why) { return std::optional<std::string>(why); };
  RankedTensorType vt = typeOf(variance.getResult());
  Value squared = variance.getInput();
  RankedTensorType st = typeOf(squared);
  if (!vt || !st || !st.hasStaticShape() || !isa<FloatType>(st.getElementType()))
    return fail("the mean is not of a float tensor of static shape");
  int64_t rank = st.getRank();
  ArrayRef<int64_t> axes = variance.getAxes();
  if (!variance.getKeepdims() || axes.empty() || axes.back() != rank - 1 ||
      int64_t(axes.size()) != rank - axes.front())
    return fail("the mean is not over a trailing block of axes with keepdims");
  norm.axis = axes.front();
  // + eps, then the square root.
  auto addEps = dyn_cast_or_null<nn::AddOp>(soleUser(variance.getResult()));
  if (!addEps)
    return fail("the mean's only reader is not an add");
  std::optional<double> eps = scalarOf(otherOperand(addEps, variance.getResult()));
  if (!eps || typeOf(addEps.getResult()) != vt)
    return fail("what is added to the mean is not a scalar constant");
  norm.epsilon = *eps;
  auto sqrt = dyn_cast_or_null<nn::SqrtOp>(soleUser(addEps.getResult()));
  if (!sqrt)
    return fail("the mean plus eps is not only read by a square root");

  // x (or d) over the root: div(x, s), or x * r with r = 1 / s as
  // reciprocal(s) or div(1, s).
  Operation *quotient = nullptr;
  Value numerator;
  SmallVector<Operation *> inverse;
  Operation *reader = soleUser(sqrt.getResult());
  auto div = dyn_cast_or_null<nn::DivOp>(reader);
  if (div && div.getRhs() != sqrt.getResult())
    div = nullptr;
  bool oneOver = div && scalarOf(div.getLhs()) == 1.0 && typeOf(div.getResult()) == vt;
  if (div && !oneOver) {
    quotient = div;
    numerator = div.getLhs();
  } else {
    Value r;
    if (auto rec = dyn_cast_or_null<nn::ReciprocalOp>(reader)) {
      r = rec.getResult();
      inverse.push_back(rec);
    } else if (oneOver) {
      r = div.getResult();
      inverse.push_back(div);
    } else {
      return fail("the square root is not only read by a division or a reciprocal");
    }
    auto mul = dyn_cast_or_null<nn::MulOp>(soleUser(r));
    if (!mul)
      return fail("the reciprocal square root is not only read by a product");
    quotient = mul;
    numerator = otherOperand(mul, r);
  }
  if (typeOf(quotient->getResult(0)) != st)
    return fail("the normalized value does not have the input's shape");

  // RMS norm: the square is of the numerator itself. Layer norm: the
  // numerator is x - mean(x) over the same axes.
  norm.ops = {squared.getDefiningOp(), variance, addEps, sqrt};
  norm.ops.append(inverse.begin(), inverse.end());
  norm.ops.push_back(quotient);
  if (!squared.getDefiningOp() || !squared.hasOneUse())
    return fail("the square is read elsewhere");
  if (isSquareOf(squared, numerator)) {
    auto sub = numerator.getDefiningOp<nn::SubOp>();
    auto mean = sub ? sub.getRhs().getDefiningOp<nn::ReduceMeanOp>() : nn::ReduceMeanOp();
    if (mean && mean.getInput() == sub.getLhs()) {
      // d = x - mean(x): a layer norm when its mean matches and d is read
      // only by the square and the quotient.
      if (mean.getAxes() != axes || !mean.getKeepdims() || !mean.getResult().hasOneUse())
        return fail("the centring mean is not over the same axes, or is read elsewhere");
      // pow(d, 2) reads d once, d * d twice; the quotient once.
      auto readers = std::distance(numerator.getUses().begin(), numerator.getUses().end());
      int expected = isa<nn::MulOp>(squared.getDefiningOp()) ? 3 : 2;
      if (readers != expected)
        return fail("the centred value is read elsewhere");
      norm.layer = true;
      norm.input = sub.getLhs();
      norm.ops.insert(norm.ops.begin(), {mean, sub});
    } else {
      norm.input = numerator;
    }
  } else {
    return fail("the quotient's numerator is not what is squared");
  }
  if (typeOf(norm.input) != st)
    return fail("the input does not have the normalized value's type");

  // Optional gamma (any order of the product), then beta for a layer norm.
  Value y = quotient->getResult(0);
  if (auto mul = dyn_cast_or_null<nn::MulOp>(soleUser(y))) {
    Value gamma = otherOperand(mul, y);
    if (gamma != y && withinNormalized(gamma, norm.input, norm.axis) &&
        typeOf(mul.getResult()) == st) {
      norm.scale = gamma;
      norm.ops.push_back(mul);
      y = mul.getResult();
    }
  }
  if (norm.layer)
    if (auto add = dyn_cast_or_null<nn::AddOp>(soleUser(y))) {
      Value beta = otherOperand(add, y);
      if (beta != y && withinNormalized(beta, norm.input, norm.axis) &&
          typeOf(add.getResult()) == st) {
        norm.bias = beta;
        norm.ops.push_back(add);
        y = add.getResult();
      }
    }
  norm.output = y.getDefiningOp();
  return std::nullopt;
}

/// Replaces the chain by one op; returns it.
Operation *rewrite(Norm &norm) {
  OpBuilder b(norm.output);
  SmallVector<Location> locs;
  for (Operation *op : norm.ops)
    locs.push_back(op->getLoc());
  Location loc = b.getFusedLoc(locs);
  RankedTensorType xt = typeOf(norm.input);
  Value scale = norm.scale;
  if (!scale) {
    // No gamma: a scale of ones over the normalized dimensions.
    auto type = RankedTensorType::get(xt.getShape().drop_front(norm.axis), xt.getElementType());
    scale = nn::ConstantOp::create(
        b, loc, DenseElementsAttr::get(type, b.getFloatAttr(xt.getElementType(), 1.0)));
  }
  Operation *raised;
  if (norm.layer)
    raised = nn::LayerNormalizationOp::create(b, loc, xt, norm.input, scale, norm.bias,
                                              b.getI64IntegerAttr(norm.axis),
                                              b.getF32FloatAttr(float(norm.epsilon)));
  else
    raised = nn::RMSNormalizationOp::create(b, loc, xt, norm.input, scale,
                                            b.getI64IntegerAttr(norm.axis),
                                            b.getF32FloatAttr(float(norm.epsilon)));
  norm.output->getResult(0).replaceAllUsesWith(raised->getResult(0));
  // The chain, last op first (each then has no reader), and the constants
  // only it read (eps, the exponent, the 1 of 1 / sqrt).
  SmallVector<Operation *> constants;
  for (Operation *op : llvm::reverse(norm.ops)) {
    for (Value operand : op->getOperands())
      if (auto c = operand.getDefiningOp<nn::ConstantOp>())
        constants.push_back(c);
    if (op->use_empty())
      op->erase();
  }
  for (Operation *c : constants)
    if (c->use_empty())
      c->erase();
  return raised;
}

struct NNRaiseNormalizationPass
    : public nn::impl::NNRaiseNormalizationBase<NNRaiseNormalizationPass> {
  using NNRaiseNormalizationBase::NNRaiseNormalizationBase;

  void runOnOperation() override {
    SmallVector<nn::ReduceMeanOp> means;
    getOperation().walk([&](nn::ReduceMeanOp op) { means.push_back(op); });
    llvm::SmallPtrSet<Operation *, 16> erased;
    for (nn::ReduceMeanOp mean : means) {
      if (erased.contains(mean))
        continue;
      // Only means of a square start a chain (the centring mean of a layer
      // norm is found from its variance).
      Operation *square = mean.getInput().getDefiningOp();
      if (!square || !isa<nn::PowOp, nn::MulOp>(square))
        continue;
      Norm norm;
      if (std::optional<std::string> why = matchFromVariance(mean, norm)) {
        // A near miss is worth a remark once the mean is followed by + eps
        // and a square root (a norm's core); anything else is not a norm.
        auto add = dyn_cast_or_null<nn::AddOp>(soleUser(mean.getResult()));
        if (explain && add && isa_and_nonnull<nn::SqrtOp>(soleUser(add.getResult())))
          mean.emitRemark("not raised to a normalization: ") << *why;
        continue;
      }
      for (Operation *op : norm.ops)
        erased.insert(op);
      Operation *raised = rewrite(norm);
      if (explain) {
        std::string text;
        llvm::raw_string_ostream os(text);
        os << "raised to " << raised->getName().getStringRef() << ": axis " << norm.axis
           << ", epsilon " << norm.epsilon << (norm.scale ? ", scale" : ", no scale")
           << (norm.bias ? ", bias" : "");
        raised->emitRemark(text);
      }
    }
  }
};

} // namespace
