//===- GradientRules.cpp - the reverse-mode rules of nn ops ----------------===//
//
// One entry per nn op: a rule building the cotangents of the operands it is
// asked for from the cotangents of the results, or the reason the op has
// none (no float result, or a piecewise-constant one). Rules build nn ops
// only; broadcasting operands get their cotangent summed back to their
// shape (GradientBuilder::unbroadcast).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Autodiff/Gradients.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>

using namespace mlir;
using namespace shardflow;
using namespace shardflow::nn;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

} // namespace

//===----------------------------------------------------------------------===//
// GradientBuilder
//===----------------------------------------------------------------------===//

Value GradientBuilder::grad(unsigned i) {
  if (i < resultGrads.size() && resultGrads[i])
    return resultGrads[i];
  auto type = typeOf(op->getResult(i));
  Attribute zero = b.getZeroAttr(type.getElementType());
  return nn::ConstantOp::create(b, loc, DenseElementsAttr::get(type, zero));
}

void GradientBuilder::set(unsigned i, Value g) {
  assert(g.getType() == op->getOperand(i).getType() && "cotangent of another type");
  operandGrads[i] = g;
}

Value GradientBuilder::scalar(Value like, double v) {
  Type elem = typeOf(like).getElementType();
  auto type = RankedTensorType::get({}, elem);
  return nn::ConstantOp::create(b, loc, DenseElementsAttr::get(type, b.getFloatAttr(elem, v)));
}

Value GradientBuilder::reshape(Value v, Type to) {
  if (v.getType() == to)
    return v;
  return nn::ReshapeOp::create(b, loc, to, v);
}

Value GradientBuilder::expand(Value v, Type to) {
  if (v.getType() == to)
    return v;
  return nn::ExpandOp::create(b, loc, to, v);
}

Value GradientBuilder::sumKeep(Value v, ArrayRef<int64_t> axes) {
  if (axes.empty())
    return v;
  return make<nn::ReduceSumOp>({v}, {b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
                                     b.getNamedAttr("keepdims", b.getBoolAttr(true))});
}

Value GradientBuilder::slice(Value v, ArrayRef<int64_t> starts, ArrayRef<int64_t> ends,
                             ArrayRef<int64_t> axes, ArrayRef<int64_t> steps) {
  return make<nn::SliceOp>({v}, {b.getNamedAttr("starts", b.getDenseI64ArrayAttr(starts)),
                                 b.getNamedAttr("ends", b.getDenseI64ArrayAttr(ends)),
                                 b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
                                 b.getNamedAttr("steps", b.getDenseI64ArrayAttr(steps))});
}

Value GradientBuilder::padZeros(Value v, ArrayRef<int64_t> pads) {
  return make<nn::PadOp>({v}, {b.getNamedAttr("pads", b.getDenseI64ArrayAttr(pads)),
                               b.getNamedAttr("mode", b.getStringAttr("constant")),
                               b.getNamedAttr("value", b.getF64FloatAttr(0.0))});
}

Value GradientBuilder::unbroadcast(Value g, Type like) {
  auto to = cast<RankedTensorType>(like);
  auto from = typeOf(g);
  if (from.getShape() == to.getShape())
    return g;
  int64_t lead = from.getRank() - to.getRank();
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < from.getRank(); ++d)
    if (d < lead || (to.getDimSize(d - lead) == 1 && from.getDimSize(d) != 1))
      axes.push_back(d);
  return reshape(sumKeep(g, axes), to);
}

//===----------------------------------------------------------------------===//
// The rules
//===----------------------------------------------------------------------===//

namespace {

using G = GradientBuilder;

/// The shape of `v` with a trailing 1.
RankedTensorType withColumn(Value v, Type elem = {}) {
  auto t = typeOf(v);
  SmallVector<int64_t> shape(t.getShape());
  shape.push_back(1);
  return RankedTensorType::get(shape, elem ? elem : t.getElementType());
}

/// For nn.softmax_cross_entropy's label column `labels` [..., 1]: whether
/// each class is the label (i1), and whether the row counts (in `elem`).
std::pair<Value, Value> crossEntropyMasks(OpBuilder &b, Location loc, Value labels,
                                          Value classes, int64_t ignoreIndex, Type elem) {
  auto toElem = [&](Value v) { return nn::CastOp::create(b, loc, v, TypeAttr::get(elem)); };
  Value ignore = nn::ConstantOp::create(
      b, loc,
      DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()),
                             b.getI64IntegerAttr(ignoreIndex)));
  Value hit = nn::EqualOp::create(b, loc, labels, classes);
  Value counted = toElem(nn::NotOp::create(b, loc, nn::EqualOp::create(b, loc, labels, ignore)));
  return {hit, counted};
}

// Elementwise, binary (broadcasting).
LogicalResult addGrad(G &g) {
  for (unsigned i = 0; i < 2; ++i)
    if (g.wants(i))
      g.set(i, g.unbroadcast(g.grad(), g.op->getOperand(i).getType()));
  return success();
}
LogicalResult subGrad(G &g) {
  if (g.wants(0))
    g.set(0, g.unbroadcast(g.grad(), g.op->getOperand(0).getType()));
  if (g.wants(1))
    g.set(1, g.unbroadcast(g.make<nn::NegOp>({g.grad()}), g.op->getOperand(1).getType()));
  return success();
}
LogicalResult mulGrad(G &g) {
  for (unsigned i = 0; i < 2; ++i)
    if (g.wants(i))
      g.set(i, g.unbroadcast(g.make<nn::MulOp>({g.grad(), g.op->getOperand(1 - i)}),
                             g.op->getOperand(i).getType()));
  return success();
}
LogicalResult divGrad(G &g) {
  auto div = cast<nn::DivOp>(g.op);
  if (!isa<FloatType>(typeOf(div.getLhs()).getElementType()))
    return div.emitOpError("has no gradient: integer division");
  // d(x/y)/dx = 1/y; d(x/y)/dy = -(x/y)/y.
  if (g.wants(0))
    g.set(0, g.unbroadcast(g.make<nn::DivOp>({g.grad(), div.getRhs()}), div.getLhs().getType()));
  if (g.wants(1)) {
    Value q = g.make<nn::DivOp>({div.getResult(), div.getRhs()});
    Value d = g.make<nn::NegOp>({g.make<nn::MulOp>({g.grad(), q})});
    g.set(1, g.unbroadcast(d, div.getRhs().getType()));
  }
  return success();
}
LogicalResult powGrad(G &g) {
  auto pow = cast<nn::PowOp>(g.op);
  Value x = pow.getLhs(), e = pow.getRhs();
  if (!isa<FloatType>(typeOf(x).getElementType()) || typeOf(e).getElementType() != typeOf(x).getElementType())
    return pow.emitOpError("has a gradient only for a float base and exponent of its type");
  // d/dx = e * x^(e-1); d/de = x^e * log(x).
  if (g.wants(0)) {
    Value em1 = g.make<nn::SubOp>({e, g.scalar(e, 1.0)});
    Value d = g.make<nn::MulOp>({e, g.make<nn::PowOp>({x, em1})});
    g.set(0, g.unbroadcast(g.make<nn::MulOp>({g.grad(), d}), x.getType()));
  }
  if (g.wants(1)) {
    Value d = g.make<nn::MulOp>({pow.getResult(), g.make<nn::LogOp>({x})});
    g.set(1, g.unbroadcast(g.make<nn::MulOp>({g.grad(), d}), e.getType()));
  }
  return success();
}
/// max/min: the cotangent goes to the chosen operand; a tie goes to lhs.
template <bool IsMax> LogicalResult extremumGrad(G &g) {
  Value x = g.op->getOperand(0), y = g.op->getOperand(1);
  // lhs chosen where not (x < y) for max, not (y < x) for min.
  Value lost = IsMax ? g.make<nn::LessOp>({x, y}) : g.make<nn::LessOp>({y, x});
  Value zero = g.scalar(x, 0.0);
  if (g.wants(0))
    g.set(0, g.unbroadcast(g.make<nn::WhereOp>({lost, zero, g.grad()}), x.getType()));
  if (g.wants(1))
    g.set(1, g.unbroadcast(g.make<nn::WhereOp>({lost, g.grad(), zero}), y.getType()));
  return success();
}
LogicalResult whereGrad(G &g) {
  auto w = cast<nn::WhereOp>(g.op);
  Value zero = g.scalar(w.getResult(), 0.0);
  if (g.wants(1))
    g.set(1, g.unbroadcast(g.make<nn::WhereOp>({w.getCondition(), g.grad(), zero}),
                           w.getX().getType()));
  if (g.wants(2))
    g.set(2, g.unbroadcast(g.make<nn::WhereOp>({w.getCondition(), zero, g.grad()}),
                           w.getY().getType()));
  return success();
}

// Elementwise, unary: d = g * f'(x), f' written with x or the result y.
template <typename Fn> LogicalResult unary(G &g, Fn derivative) {
  if (g.wants(0))
    g.set(0, g.make<nn::MulOp>({g.grad(), derivative(g.op->getOperand(0), g.op->getResult(0))}));
  return success();
}
LogicalResult negGrad(G &g) {
  if (g.wants(0))
    g.set(0, g.make<nn::NegOp>({g.grad()}));
  return success();
}
LogicalResult identityGrad(G &g) {
  if (g.wants(0))
    g.set(0, g.grad());
  return success();
}
LogicalResult expGrad(G &g) {
  return unary(g, [](Value, Value y) { return y; });
}
LogicalResult logGrad(G &g) {
  if (g.wants(0))
    g.set(0, g.make<nn::DivOp>({g.grad(), g.op->getOperand(0)}));
  return success();
}
LogicalResult sqrtGrad(G &g) {
  // g / (2 y)
  if (g.wants(0)) {
    Value y = g.op->getResult(0);
    g.set(0, g.make<nn::DivOp>({g.grad(), g.make<nn::MulOp>({y, g.scalar(y, 2.0)})}));
  }
  return success();
}
LogicalResult reciprocalGrad(G &g) {
  return unary(g, [&](Value, Value y) {
    return g.make<nn::NegOp>({g.make<nn::MulOp>({y, y})});
  });
}
LogicalResult tanhGrad(G &g) {
  return unary(g, [&](Value, Value y) {
    return g.make<nn::SubOp>({g.scalar(y, 1.0), g.make<nn::MulOp>({y, y})});
  });
}
LogicalResult sigmoidGrad(G &g) {
  return unary(g, [&](Value, Value y) {
    return g.make<nn::MulOp>({y, g.make<nn::SubOp>({g.scalar(y, 1.0), y})});
  });
}
LogicalResult erfGrad(G &g) {
  // 2/sqrt(pi) exp(-x^2)
  return unary(g, [&](Value x, Value) {
    Value e = g.make<nn::ExpOp>({g.make<nn::NegOp>({g.make<nn::MulOp>({x, x})})});
    return g.make<nn::MulOp>({e, g.scalar(x, 2.0 / std::sqrt(M_PI))});
  });
}
LogicalResult sinGrad(G &g) {
  return unary(g, [&](Value x, Value) { return g.make<nn::CosOp>({x}); });
}
LogicalResult cosGrad(G &g) {
  return unary(g, [&](Value x, Value) { return g.make<nn::NegOp>({g.make<nn::SinOp>({x})}); });
}
LogicalResult reluGrad(G &g) {
  if (!g.wants(0))
    return success();
  Value x = g.op->getOperand(0);
  if (!isa<FloatType>(typeOf(x).getElementType()))
    return g.op->emitOpError("has no gradient: integer input");
  Value positive = g.make<nn::GreaterOp>({x, g.scalar(x, 0.0)});
  g.set(0, g.make<nn::WhereOp>({positive, g.grad(), g.scalar(x, 0.0)}));
  return success();
}
LogicalResult absGrad(G &g) {
  if (!g.wants(0))
    return success();
  Value x = g.op->getOperand(0);
  if (!isa<FloatType>(typeOf(x).getElementType()))
    return g.op->emitOpError("has no gradient: integer input");
  // sign(x) * g, 0 at 0 (PyTorch's choice).
  Value zero = g.scalar(x, 0.0);
  Value neg = g.make<nn::NegOp>({g.grad()});
  Value negative = g.make<nn::WhereOp>({g.make<nn::LessOp>({x, zero}), neg, zero});
  g.set(0, g.make<nn::WhereOp>({g.make<nn::GreaterOp>({x, zero}), g.grad(), negative}));
  return success();
}
LogicalResult castGrad(G &g) {
  auto c = cast<nn::CastOp>(g.op);
  if (!g.wants(0))
    return success();
  if (!isa<FloatType>(typeOf(c.getInput()).getElementType()))
    return c.emitOpError("has no gradient: its input is not a float tensor");
  g.set(0, nn::CastOp::create(g.b, g.loc, g.grad(),
                              TypeAttr::get(typeOf(c.getInput()).getElementType())));
  return success();
}

// Views and data movement.
LogicalResult reshapeLikeGrad(G &g) {
  if (g.wants(0))
    g.set(0, g.reshape(g.grad(), g.op->getOperand(0).getType()));
  return success();
}
LogicalResult transposeGrad(G &g) {
  auto t = cast<nn::TransposeOp>(g.op);
  if (!g.wants(0))
    return success();
  ArrayRef<int64_t> perm = t.getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = int64_t(i);
  g.set(0, g.make<nn::TransposeOp>({g.grad()},
                                   {g.b.getNamedAttr("perm", g.b.getDenseI64ArrayAttr(inverse))}));
  return success();
}
LogicalResult expandGrad(G &g) {
  if (g.wants(0))
    g.set(0, g.unbroadcast(g.grad(), g.op->getOperand(0).getType()));
  return success();
}

// Reductions.
/// The reduced axes of a reduce op, sorted and non-negative.
template <typename OpTy> LogicalResult reduceSumLike(G &g, bool mean) {
  auto r = cast<OpTy>(g.op);
  if (!g.wants(0))
    return success();
  auto in = typeOf(r.getInput());
  if (!isa<FloatType>(in.getElementType()))
    return r.emitOpError("has no gradient: integer input");
  SmallVector<int64_t> keptShape(in.getShape());
  int64_t count = 1;
  for (int64_t a : r.getAxes()) {
    keptShape[a] = 1;
    count *= in.getDimSize(a);
  }
  Value d = g.reshape(g.grad(), RankedTensorType::get(keptShape, in.getElementType()));
  if (mean)
    d = g.make<nn::DivOp>({d, g.scalar(d, double(count))});
  g.set(0, g.expand(d, in));
  return success();
}
LogicalResult reduceSumGrad(G &g) { return reduceSumLike<nn::ReduceSumOp>(g, false); }
LogicalResult reduceMeanGrad(G &g) { return reduceSumLike<nn::ReduceMeanOp>(g, true); }

// Softmax family over one axis.
int64_t axisOf(Value v, int64_t axis) { return axis < 0 ? axis + typeOf(v).getRank() : axis; }
LogicalResult softmaxGrad(G &g) {
  auto s = cast<nn::SoftmaxOp>(g.op);
  if (!g.wants(0))
    return success();
  // y * (g - sum(g * y)). A row of -inf scores (a fully masked query) has
  // NaN probabilities, which exporters' guard where(isnan(p), 0, p) turns
  // into zeros, a constant: its cotangent is zero, not NaN.
  Value y = s.getResult();
  y = g.make<nn::WhereOp>({g.make<nn::EqualOp>({y, y}), y, g.scalar(y, 0.0)});
  int64_t axis = axisOf(y, s.getAxis());
  Value dot = g.sumKeep(g.make<nn::MulOp>({g.grad(), y}), {axis});
  g.set(0, g.make<nn::MulOp>({y, g.make<nn::SubOp>({g.grad(), dot})}));
  return success();
}
/// Softmax cross-entropy: (softmax - onehot) * dy on the counted rows,
/// the lse being the logits' own (nothing flows to it).
LogicalResult softmaxCrossEntropyGrad(G &g) {
  auto ce = cast<nn::SoftmaxCrossEntropyOp>(g.op);
  g.setNone(1);
  if (!g.wants(0))
    return success();
  Value x = ce.getLogits(), lse = ce.getLse();
  Value labels = g.reshape(ce.getLabels(), withColumn(ce.getLabels()));
  Value dy = g.reshape(g.grad(), lse.getType());
  if (g.fuses("cross-entropy")) {
    g.set(0, nn::SoftmaxCrossEntropyGradOp::create(g.b, g.loc, x, lse, labels, ce.getClasses(), dy,
                                                   ce.getIgnoreIndexAttr()));
    return success();
  }
  auto [hit, counted] = crossEntropyMasks(g.b, g.loc, labels, ce.getClasses(),
                                          ce.getIgnoreIndex(), typeOf(x).getElementType());
  Value p = g.make<nn::ExpOp>({g.make<nn::SubOp>({x, lse})});
  Value onehot = nn::CastOp::create(g.b, g.loc, hit, TypeAttr::get(typeOf(x).getElementType()));
  g.set(0, g.make<nn::MulOp>({g.make<nn::SubOp>({p, onehot}), g.make<nn::MulOp>({dy, counted})}));
  return success();
}
LogicalResult logSoftmaxGrad(G &g) {
  auto s = cast<nn::LogSoftmaxOp>(g.op);
  if (!g.wants(0))
    return success();
  // g - exp(y) * sum(g)
  Value y = s.getResult();
  int64_t axis = axisOf(y, s.getAxis());
  Value total = g.sumKeep(g.grad(), {axis});
  g.set(0, g.make<nn::SubOp>({g.grad(), g.make<nn::MulOp>({g.make<nn::ExpOp>({y}), total})}));
  return success();
}

// Contractions.
Value transposeLastTwo(G &g, Value v) {
  int64_t rank = typeOf(v).getRank();
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    perm.push_back(d);
  std::swap(perm[rank - 1], perm[rank - 2]);
  return g.make<nn::TransposeOp>({v}, {g.b.getNamedAttr("perm", g.b.getDenseI64ArrayAttr(perm))});
}
LogicalResult matmulGrad(G &g) {
  auto m = cast<nn::MatMulOp>(g.op);
  Value a = m.getLhs(), bv = m.getRhs();
  if (typeOf(a).getRank() < 2 || typeOf(bv).getRank() < 2)
    return m.emitOpError("has no gradient rule yet for 1-D operands");
  if (!isa<FloatType>(typeOf(a).getElementType()))
    return m.emitOpError("has no gradient: integer operands");
  // dA = g B^T, dB = A^T g, each summed over the batch dims it was
  // broadcast along.
  if (g.wants(0))
    g.set(0, g.unbroadcast(g.make<nn::MatMulOp>({g.grad(), transposeLastTwo(g, bv)}),
                           a.getType()));
  if (g.wants(1))
    g.set(1, g.unbroadcast(g.make<nn::MatMulOp>({transposeLastTwo(g, a), g.grad()}),
                           bv.getType()));
  return success();
}

LogicalResult gemmGrad(G &g) {
  auto m = cast<nn::GemmOp>(g.op);
  // Y = alpha op(A) op(B) + beta C, op the optional transpose.
  Value a = m.getA(), bv = m.getB();
  Value alpha = g.scalar(m.getResult(), m.getAlpha().convertToDouble());
  Value ga = g.make<nn::MulOp>({g.grad(), alpha});
  auto t = [&](Value v) { return transposeLastTwo(g, v); };
  Value opA = m.getTransA() ? t(a) : a, opB = m.getTransB() ? t(bv) : bv;
  if (g.wants(0)) {
    Value d = g.make<nn::MatMulOp>({ga, t(opB)});
    g.set(0, m.getTransA() ? t(d) : d);
  }
  if (g.wants(1)) {
    Value d = g.make<nn::MatMulOp>({t(opA), ga});
    g.set(1, m.getTransB() ? t(d) : d);
  }
  if (m.getC() && g.wants(2)) {
    Value beta = g.scalar(m.getResult(), m.getBeta().convertToDouble());
    g.set(2, g.unbroadcast(g.make<nn::MulOp>({g.grad(), beta}), m.getC().getType()));
  }
  return success();
}

// More elementwise ops.
LogicalResult leakyReluGrad(G &g) {
  auto l = cast<nn::LeakyReluOp>(g.op);
  if (!g.wants(0))
    return success();
  Value x = l.getInput();
  Value scaled = g.make<nn::MulOp>({g.grad(), g.scalar(x, l.getAlpha().convertToDouble())});
  g.set(0, g.make<nn::WhereOp>({g.make<nn::GreaterOp>({x, g.scalar(x, 0.0)}), g.grad(), scaled}));
  return success();
}
LogicalResult clipGrad(G &g) {
  auto c = cast<nn::ClipOp>(g.op);
  if (!g.wants(0))
    return success();
  Value x = c.getInput();
  if (!isa<FloatType>(typeOf(x).getElementType()))
    return c.emitOpError("has no gradient: integer input");
  // The cotangent passes where min <= x <= max (PyTorch's clamp).
  Value zero = g.scalar(x, 0.0), d = g.grad();
  if (auto hi = c.getMax())
    d = g.make<nn::WhereOp>({g.make<nn::GreaterOp>({x, g.scalar(x, hi->convertToDouble())}), zero, d});
  if (auto lo = c.getMin())
    d = g.make<nn::WhereOp>({g.make<nn::LessOp>({x, g.scalar(x, lo->convertToDouble())}), zero, d});
  g.set(0, d);
  return success();
}
LogicalResult geluGrad(G &g) {
  auto gelu = cast<nn::GeluOp>(g.op);
  if (!g.wants(0))
    return success();
  Value x = gelu.getInput();
  if (g.fuses("gelu")) {
    g.set(0, nn::GeluGradOp::create(g.b, g.loc, x, g.grad(), gelu.getApproximateAttr()));
    return success();
  }
  auto c = [&](double v) { return g.scalar(x, v); };
  auto mul = [&](Value a, Value b) { return g.make<nn::MulOp>({a, b}); };
  auto add = [&](Value a, Value b) { return g.make<nn::AddOp>({a, b}); };
  Value d;
  if (gelu.getApproximate() == "tanh") {
    // 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 k x^2), t = tanh(u).
    const double k = 0.044715, s = std::sqrt(2.0 / M_PI);
    Value x2 = mul(x, x);
    Value u = mul(c(s), add(x, mul(c(k), mul(x2, x))));
    Value th = g.make<nn::TanhOp>({u});
    Value left = mul(c(0.5), add(c(1.0), th));
    Value sech2 = g.make<nn::SubOp>({c(1.0), mul(th, th)});
    Value du = mul(c(s), add(c(1.0), mul(c(3 * k), x2)));
    d = add(left, mul(mul(c(0.5), x), mul(sech2, du)));
  } else {
    // Phi(x) + x phi(x).
    Value cdf = mul(c(0.5), add(c(1.0), g.make<nn::ErfOp>({mul(x, c(1.0 / std::sqrt(2.0)))})));
    Value pdf = mul(c(1.0 / std::sqrt(2.0 * M_PI)),
                    g.make<nn::ExpOp>({mul(c(-0.5), mul(x, x))}));
    d = add(cdf, mul(x, pdf));
  }
  g.set(0, mul(g.grad(), d));
  return success();
}

// Normalizations over [axis, rank), recomputing the statistics.
SmallVector<int64_t> trailingAxes(Value x, int64_t axis) {
  int64_t rank = typeOf(x).getRank();
  if (axis < 0)
    axis += rank;
  SmallVector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d)
    axes.push_back(d);
  return axes;
}
Value meanKeep(G &g, Value v, ArrayRef<int64_t> axes) {
  return g.make<nn::ReduceMeanOp>({v}, {g.b.getNamedAttr("axes", g.b.getDenseI64ArrayAttr(axes)),
                                       g.b.getNamedAttr("keepdims", g.b.getBoolAttr(true))});
}
/// dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), without the middle
/// term for RMS norm.
LogicalResult normalizationGrad(G &g, Value x, Value scale, Value bias, int64_t axis,
                                double epsilon, bool centered) {
  if (g.fuses("normalization")) {
    auto attrs = [&] {
      return SmallVector<NamedAttribute>{
          g.b.getNamedAttr("axis", g.b.getI64IntegerAttr(axis)),
          g.b.getNamedAttr("epsilon", g.b.getF32FloatAttr(float(epsilon))),
          g.b.getNamedAttr("rms", g.b.getBoolAttr(!centered))};
    };
    if (g.wants(1))
      g.set(1, g.unbroadcast(
                   g.make<nn::NormalizationScaleGradOp>({x, g.grad()}, attrs()), scale.getType()));
    if (bias && g.wants(2))
      g.set(2, g.unbroadcast(g.grad(), bias.getType()));
    if (g.wants(0))
      g.set(0, g.make<nn::NormalizationGradOp>({x, scale, g.grad()}, attrs()));
    return success();
  }
  SmallVector<int64_t> axes = trailingAxes(x, axis);
  auto mul = [&](Value a, Value b) { return g.make<nn::MulOp>({a, b}); };
  auto sub = [&](Value a, Value b) { return g.make<nn::SubOp>({a, b}); };
  Value xc = centered ? sub(x, meanKeep(g, x, axes)) : x;
  Value var = meanKeep(g, mul(xc, xc), axes);
  Value r = g.make<nn::ReciprocalOp>(
      {g.make<nn::SqrtOp>({g.make<nn::AddOp>({var, g.scalar(x, epsilon)})})});
  Value xhat = mul(xc, r);
  if (g.wants(1))
    g.set(1, g.unbroadcast(mul(g.grad(), xhat), scale.getType()));
  if (bias && g.wants(2))
    g.set(2, g.unbroadcast(g.grad(), bias.getType()));
  if (g.wants(0)) {
    Value dxhat = mul(g.grad(), scale);
    Value inner = sub(dxhat, mul(xhat, meanKeep(g, mul(dxhat, xhat), axes)));
    if (centered)
      inner = sub(inner, meanKeep(g, dxhat, axes));
    g.set(0, mul(r, inner));
  }
  return success();
}
LogicalResult layerNormGrad(G &g) {
  auto n = cast<nn::LayerNormalizationOp>(g.op);
  return normalizationGrad(g, n.getInput(), n.getScale(), n.getBias(), n.getAxis(),
                           n.getEpsilon().convertToDouble(), /*centered=*/true);
}
LogicalResult rmsNormGrad(G &g) {
  auto n = cast<nn::RMSNormalizationOp>(g.op);
  return normalizationGrad(g, n.getInput(), n.getScale(), Value(), n.getAxis(),
                           n.getEpsilon().convertToDouble(), /*centered=*/false);
}

// Rotations: their transposes are the rotations by the opposite angle.
LogicalResult rotaryGrad(G &g) {
  auto r = cast<nn::RotaryEmbeddingOp>(g.op);
  // The cos/sin tables are functions of the positions, not trained (PyTorch
  // keeps them as buffers), even when an exporter writes them as
  // initializers.
  g.setNone(1);
  g.setNone(2);
  if (!g.wants(0))
    return success();
  SmallVector<Value> operands(r->getOperands());
  operands[0] = g.grad();
  operands[2] = g.make<nn::NegOp>({r.getSinCache()});
  g.set(0, nn::RotaryEmbeddingOp::create(g.b, g.loc, r.getType(), operands, r->getAttrs())
               .getResult());
  return success();
}
LogicalResult rotateHalfGrad(G &g) {
  if (g.wants(0))
    g.set(0, g.make<nn::NegOp>({g.make<nn::RotateHalfOp>({g.grad()})}));
  return success();
}
/// A keyed dropout's mask is a function of its attributes and the step:
/// the same op on the cotangent multiplies it by the same mask and scale.
LogicalResult keyedDropoutGrad(G &g) {
  auto d = cast<nn::KeyedDropoutOp>(g.op);
  g.setNone(1);
  if (!g.wants(0))
    return success();
  SmallVector<Value> operands{g.grad(), d.getStep()};
  g.set(0, nn::KeyedDropoutOp::create(g.b, g.loc, d.getType(), operands, d->getAttrs())
               .getResult());
  return success();
}
LogicalResult cumsumGrad(G &g) {
  auto c = cast<nn::CumSumOp>(g.op);
  if (!g.wants(0))
    return success();
  // The sums run the other way: each input reaches the outputs after it.
  g.set(0, g.make<nn::CumSumOp>({g.grad()},
                                {g.b.getNamedAttr("axis", c.getAxisAttr()),
                                 g.b.getNamedAttr("exclusive", c.getExclusiveAttr()),
                                 g.b.getNamedAttr("reverse", g.b.getBoolAttr(!c.getReverse()))}));
  return success();
}
LogicalResult triluGrad(G &g) {
  auto t = cast<nn::TriluOp>(g.op);
  if (g.wants(0))
    g.set(0, g.make<nn::TriluOp>({g.grad()}, {g.b.getNamedAttr("upper", g.b.getBoolAttr(t.getUpper())),
                                             g.b.getNamedAttr("k", g.b.getI64IntegerAttr(t.getK()))}));
  return success();
}
/// reduce_max / reduce_min: the cotangent is shared among the elements equal
/// to the result (PyTorch's amax/amin).
template <typename OpTy> LogicalResult extremumReduceGrad(G &g) {
  auto r = cast<OpTy>(g.op);
  if (!g.wants(0))
    return success();
  auto in = typeOf(r.getInput());
  if (!isa<FloatType>(in.getElementType()))
    return r.emitOpError("has no gradient: integer input");
  SmallVector<int64_t> keptShape(in.getShape());
  for (int64_t a : r.getAxes())
    keptShape[a] = 1;
  auto kept = RankedTensorType::get(keptShape, in.getElementType());
  Value y = g.expand(g.reshape(r.getResult(), kept), in);
  Value hit = g.make<nn::EqualOp>({r.getInput(), y});
  Value ones = nn::CastOp::create(g.b, g.loc, hit, TypeAttr::get(in.getElementType()));
  Value count = g.sumKeep(ones, r.getAxes());
  Value share = g.make<nn::DivOp>({g.reshape(g.grad(), kept), count});
  g.set(0, g.make<nn::MulOp>({ones, g.expand(share, in)}));
  return success();
}

// Data movement.
Value sliceAlong(G &g, Value v, int64_t axis, int64_t begin, int64_t size) {
  return g.slice(v, {begin}, {begin + size}, {axis}, {1});
}
LogicalResult concatGrad(G &g) {
  auto c = cast<nn::ConcatOp>(g.op);
  int64_t axis = axisOf(c.getResult(), c.getAxis()), at = 0;
  for (auto [i, in] : llvm::enumerate(c.getInputs())) {
    int64_t size = typeOf(in).getDimSize(axis);
    if (g.wants(unsigned(i)))
      g.set(unsigned(i), sliceAlong(g, g.grad(), axis, at, size));
    at += size;
  }
  return success();
}
LogicalResult splitGrad(G &g) {
  auto s = cast<nn::SplitOp>(g.op);
  if (!g.wants(0))
    return success();
  SmallVector<Value> pieces;
  for (unsigned i = 0; i < s->getNumResults(); ++i)
    pieces.push_back(g.grad(i));
  g.set(0, g.make<nn::ConcatOp>(pieces, {g.b.getNamedAttr("axis", s.getAxisAttr())}));
  return success();
}
LogicalResult sliceGrad(G &g) {
  auto s = cast<nn::SliceOp>(g.op);
  if (!g.wants(0))
    return success();
  auto in = typeOf(s.getInput()), out = typeOf(s.getResult());
  int64_t rank = in.getRank();
  SmallVector<int64_t> pads(2 * rank, 0);
  for (auto [i, axisRaw] : llvm::enumerate(s.getAxes())) {
    int64_t axis = axisRaw < 0 ? axisRaw + rank : axisRaw;
    if (s.getSteps()[i] != 1)
      return s.emitOpError("has no gradient rule yet for steps other than 1");
    int64_t dim = in.getDimSize(axis), start = s.getStarts()[i];
    if (start < 0)
      start += dim;
    start = std::clamp<int64_t>(start, 0, dim);
    pads[axis] = start;
    pads[axis + rank] = dim - start - out.getDimSize(axis);
  }
  g.set(0, g.padZeros(g.grad(), pads));
  return success();
}
LogicalResult gatherGrad(G &g) {
  auto gather = cast<nn::GatherOp>(g.op);
  if (!g.wants(0))
    return success();
  auto data = typeOf(gather.getInput());
  if (gather.getAxis() != 0 || gather.getAxisSizeAttr())
    return gather.emitOpError("has no gradient rule yet along an axis other than 0");
  // Rows gathered are rows scattered back, added where an index repeats.
  Value idx = gather.getIndices();
  auto idxType = typeOf(idx);
  Value i64 = idxType.getElementType().isInteger(64)
                  ? idx
                  : nn::CastOp::create(g.b, g.loc, idx, TypeAttr::get(g.b.getI64Type()));
  auto scalarI64 = RankedTensorType::get({}, g.b.getI64Type());
  Value zero = nn::ConstantOp::create(g.b, g.loc, DenseElementsAttr::get(scalarI64, int64_t(0)));
  Value dim = nn::ConstantOp::create(g.b, g.loc,
                                     DenseElementsAttr::get(scalarI64, data.getDimSize(0)));
  Value wrapped = g.make<nn::WhereOp>(
      {g.make<nn::LessOp>({i64, zero}), g.make<nn::AddOp>({i64, dim}), i64});
  SmallVector<int64_t> tupleShape(idxType.getShape());
  tupleShape.push_back(1);
  Value tuples = g.reshape(wrapped, RankedTensorType::get(tupleShape, g.b.getI64Type()));
  Value zeros = nn::ConstantOp::create(
      g.b, g.loc, DenseElementsAttr::get(data, g.b.getZeroAttr(data.getElementType())));
  g.set(0, g.make<nn::ScatterNDOp>({zeros, tuples, g.grad()},
                                   {g.b.getNamedAttr("reduction", g.b.getStringAttr("add"))}));
  return success();
}

LogicalResult padGrad(G &g) {
  auto p = cast<nn::PadOp>(g.op);
  if (!g.wants(0))
    return success();
  if (p.getMode() != "constant")
    return p.emitOpError("has no gradient rule yet for mode '") << p.getMode() << "'";
  // The cotangent of the interior; pads may be negative (a crop), whose
  // cotangent is zero-padded back.
  auto in = typeOf(p.getInput());
  int64_t rank = in.getRank();
  ArrayRef<int64_t> pads = p.getPads();
  SmallVector<int64_t> starts, ends, axes, steps, back(2 * rank, 0);
  for (int64_t d = 0; d < rank; ++d) {
    int64_t before = pads[d], after = pads[d + rank];
    starts.push_back(std::max<int64_t>(before, 0));
    ends.push_back(std::max<int64_t>(before, 0) + in.getDimSize(d) + std::min<int64_t>(before, 0) +
                   std::min<int64_t>(after, 0));
    axes.push_back(d);
    steps.push_back(1);
    back[d] = std::max<int64_t>(-before, 0);
    back[d + rank] = std::max<int64_t>(-after, 0);
  }
  Value d = g.slice(g.grad(), starts, ends, axes, steps);
  if (llvm::any_of(back, [](int64_t v) { return v != 0; }))
    d = g.padZeros(d, back);
  g.set(0, d);
  return success();
}
LogicalResult modGrad(G &g) {
  auto m = cast<nn::ModOp>(g.op);
  if (!isa<FloatType>(typeOf(m.getLhs()).getElementType()))
    return m.emitOpError("has no gradient: integer operands");
  // r = x - y trunc(x / y): dr/dx = 1, dr/dy = -trunc(x / y) (PyTorch's
  // fmod).
  if (g.wants(0))
    g.set(0, g.unbroadcast(g.grad(), m.getLhs().getType()));
  if (g.wants(1)) {
    Value q = g.make<nn::DivOp>({m.getLhs(), m.getRhs()});
    Value zero = g.scalar(q, 0.0);
    Value trunc = g.make<nn::WhereOp>(
        {g.make<nn::LessOp>({q, zero}), g.make<nn::CeilOp>({q}), g.make<nn::FloorOp>({q})});
    Value d = g.make<nn::NegOp>({g.make<nn::MulOp>({g.grad(), trunc})});
    g.set(1, g.unbroadcast(d, m.getRhs().getType()));
  }
  return success();
}
LogicalResult reduceProdGrad(G &g) {
  auto r = cast<nn::ReduceProdOp>(g.op);
  if (!g.wants(0))
    return success();
  Value x = r.getInput();
  auto in = typeOf(x);
  if (!isa<FloatType>(in.getElementType()))
    return r.emitOpError("has no gradient: integer input");
  // The product of the other elements: y / x where no element is zero;
  // with one zero, the product of the others at the zero and 0 elsewhere;
  // with more, 0.
  SmallVector<int64_t> keptShape(in.getShape());
  for (int64_t a : r.getAxes())
    keptShape[a] = 1;
  auto kept = RankedTensorType::get(keptShape, in.getElementType());
  auto attrs = [&] {
    return SmallVector<NamedAttribute>{g.b.getNamedAttr("axes", r.getAxesAttr()),
                                       g.b.getNamedAttr("keepdims", g.b.getBoolAttr(true))};
  };
  Value zero = g.scalar(x, 0.0), one = g.scalar(x, 1.0);
  Value isZero = g.make<nn::EqualOp>({x, zero});
  Value zeros = g.sumKeep(nn::CastOp::create(g.b, g.loc, isZero, TypeAttr::get(in.getElementType())),
                          r.getAxes());
  Value nonZero = g.make<nn::WhereOp>({isZero, one, x});
  Value others = g.make<nn::ReduceProdOp>({nonZero}, attrs()); // product of the non-zeros
  Value y = g.reshape(r.getResult(), kept);
  Value noZero = g.make<nn::EqualOp>({zeros, zero});
  Value oneZero = g.make<nn::EqualOp>({zeros, one});
  Value atNonZero = g.make<nn::WhereOp>({noZero, g.make<nn::DivOp>({y, nonZero}), zero});
  Value atZero = g.make<nn::WhereOp>({oneZero, others, zero});
  Value d = g.make<nn::WhereOp>({isZero, g.expand(atZero, in), atNonZero});
  g.set(0, g.make<nn::MulOp>({d, g.expand(g.reshape(g.grad(), kept), in)}));
  return success();
}
LogicalResult trainingDropoutGrad(G &g) {
  auto d = cast<nn::TrainingDropoutOp>(g.op);
  if (!g.wants(0))
    return success();
  // The same mask and scale as the forward.
  Value scale = g.scalar(d.getResult(), 1.0 / (1.0 - d.getRatio().convertToDouble()));
  Value kept = g.make<nn::WhereOp>({d.getMask(), g.grad(), g.scalar(d.getResult(), 0.0)});
  g.set(0, g.make<nn::MulOp>({kept, scale}));
  return success();
}

/// Adds `g` into zeros of type `into` at the positions that `positions`
/// (i64, g's shape) names along `axis`, each other coordinate its own: the
/// cotangent of an op that reads `into` at those positions (gather_elements,
/// topk's values).
Value scatterAlongAxis(G &g, Value grad, Value positions, int64_t axis, RankedTensorType into) {
  auto type = typeOf(grad);
  int64_t rank = type.getRank();
  auto i64 = g.b.getI64Type();
  SmallVector<int64_t> column(type.getShape());
  column.push_back(1);
  auto columnType = RankedTensorType::get(column, i64);
  SmallVector<Value> coordinates;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis) {
      coordinates.push_back(g.reshape(positions, columnType));
      continue;
    }
    int64_t n = type.getDimSize(d);
    Value iota = nn::RangeOp::create(g.b, g.loc, RankedTensorType::get({n}, i64),
                                     g.b.getF64FloatAttr(0), g.b.getF64FloatAttr(double(n)),
                                     g.b.getF64FloatAttr(1));
    SmallVector<int64_t> along(rank + 1, 1);
    along[d] = n;
    coordinates.push_back(g.expand(g.reshape(iota, RankedTensorType::get(along, i64)), columnType));
  }
  Value tuples =
      g.make<nn::ConcatOp>(coordinates, {g.b.getNamedAttr("axis", g.b.getI64IntegerAttr(rank))});
  Value zeros = nn::ConstantOp::create(
      g.b, g.loc, DenseElementsAttr::get(into, g.b.getZeroAttr(into.getElementType())));
  return g.make<nn::ScatterNDOp>({zeros, tuples, grad},
                                 {g.b.getNamedAttr("reduction", g.b.getStringAttr("add"))});
}

/// topk's values: the cotangent goes back to the positions the indices
/// name (the indices are integers).
LogicalResult topkGrad(G &g) {
  auto t = cast<nn::TopKOp>(g.op);
  if (!g.wants(0))
    return success();
  auto in = typeOf(t.getInput());
  if (!isa<FloatType>(in.getElementType()))
    return t.emitOpError("has no gradient: integer input");
  int64_t axis = axisOf(t.getInput(), static_cast<int64_t>(t.getAxis()));
  g.set(0, scatterAlongAxis(g, g.grad(0), t.getIndices(), axis, in));
  return success();
}

LogicalResult gatherElementsGrad(G &g) {
  auto ge = cast<nn::GatherElementsOp>(g.op);
  if (!g.wants(0))
    return success();
  auto in = typeOf(ge.getInput());
  if (!isa<FloatType>(in.getElementType()))
    return ge.emitOpError("has no gradient: integer input");
  int64_t axis = axisOf(ge.getInput(), static_cast<int64_t>(ge.getAxis()));
  // Negative indices count from the end of the axis.
  Value idx = ge.getIndices();
  auto i64 = g.b.getI64Type();
  if (!typeOf(idx).getElementType().isInteger(64))
    idx = nn::CastOp::create(g.b, g.loc, idx, TypeAttr::get(i64));
  auto scalarI64 = RankedTensorType::get({}, i64);
  Value zero = nn::ConstantOp::create(g.b, g.loc, DenseElementsAttr::get(scalarI64, int64_t(0)));
  Value dim = nn::ConstantOp::create(g.b, g.loc,
                                     DenseElementsAttr::get(scalarI64, in.getDimSize(axis)));
  idx = g.make<nn::WhereOp>({g.make<nn::LessOp>({idx, zero}), g.make<nn::AddOp>({idx, dim}), idx});
  g.set(0, scatterAlongAxis(g, g.grad(), idx, axis, in));
  return success();
}

/// Max pooling: the cotangent goes to each window's first maximum, whose
/// flat position in the input max_pool_with_indices gives (recomputed for
/// nn.max_pool).
LogicalResult maxPoolGrad(G &g) {
  Operation *op = g.op;
  if (!g.wants(0))
    return success();
  Value x = op->getOperand(0);
  auto in = typeOf(x);
  if (!isa<FloatType>(in.getElementType()))
    return op->emitOpError("has no gradient: integer input");
  Value indices;
  if (auto withIndices = dyn_cast<nn::MaxPoolWithIndicesOp>(op)) {
    if (withIndices.getStorageOrder() != 0)
      return op->emitOpError("has no gradient rule yet for storage_order 1");
    indices = withIndices.getIndices();
  } else {
    auto p = cast<nn::MaxPoolOp>(op);
    auto b = g.b;
    indices = nn::MaxPoolWithIndicesOp::create(
                  b, g.loc, ValueRange{x},
                  {b.getNamedAttr("kernel_shape", p.getKernelShapeAttr()),
                   b.getNamedAttr("strides", p.getStridesAttr()),
                   b.getNamedAttr("pads", p.getPadsAttr()),
                   b.getNamedAttr("dilations", p.getDilationsAttr()),
                   b.getNamedAttr("ceil_mode", b.getBoolAttr(p.getCeilMode())),
                   b.getNamedAttr("storage_order", b.getI64IntegerAttr(0))})
                  ->getResult(1);
  }
  auto out = typeOf(op->getResult(0));
  SmallVector<int64_t> column(out.getShape());
  column.push_back(1);
  Value tuples = g.reshape(indices, RankedTensorType::get(column, g.b.getI64Type()));
  auto flat = RankedTensorType::get({in.getNumElements()}, in.getElementType());
  Value zeros = nn::ConstantOp::create(
      g.b, g.loc, DenseElementsAttr::get(flat, g.b.getZeroAttr(in.getElementType())));
  Value scattered = g.make<nn::ScatterNDOp>(
      {zeros, tuples, g.grad(0)}, {g.b.getNamedAttr("reduction", g.b.getStringAttr("add"))});
  g.set(0, g.reshape(scattered, in));
  return success();
}

/// Attention: fused (nn.attention_grad, which keeps no [Sq, Skv] matrix)
/// where the target has its kernel and no trained float mask wants a
/// cotangent; else composed (4-D): the probabilities recomputed, then the
/// cotangents of V, of the scores and of Q and K, with grouped-query heads
/// summed back onto their key/value head.
LogicalResult attentionGrad(G &g) {
  auto a = cast<nn::AttentionOp>(g.op);
  Value q = a.getQuery(), k = a.getKey(), v = a.getValue(), mask = a.getMask();
  auto qt = typeOf(q), kt = typeOf(k), vt = typeOf(v);
  if (g.fuses("attention") && !(mask && g.wants(3))) {
    // The backward reads the forward's log-sum-exp: the forward is written
    // again with save_lse in its place and takes over its uses
    // (nn-differentiate erases the unused original afterwards).
    nn::AttentionOp forward = a;
    SmallVector<NamedAttribute> attrs;
    for (NamedAttribute attr : a->getAttrs())
      if (attr.getName() != a.getSaveLseAttrName())
        attrs.push_back(attr);
    if (!a.getSaveLseAttr() || !a.getSaveLseAttr().getValue()) {
      OpBuilder::InsertionGuard guard(g.b);
      g.b.setInsertionPoint(a);
      SmallVector<NamedAttribute> saving(attrs);
      saving.push_back(g.b.getNamedAttr(a.getSaveLseAttrName(), g.b.getBoolAttr(true)));
      forward = nn::AttentionOp::create(g.b, a.getLoc(), a->getOperands(), saving);
      a.getResult().replaceAllUsesWith(forward.getResult());
    }
    SmallVector<Value> operands{q, k, v, g.grad(), forward.getLse()};
    if (mask)
      operands.push_back(mask);
    auto fused = nn::AttentionGradOp::create(g.b, g.loc, TypeRange{qt, kt, vt}, operands, attrs);
    for (unsigned i = 0; i < 3; ++i)
      if (g.wants(i))
        g.set(i, fused->getResult(i));
    return success();
  }
  if (qt.getRank() != 4)
    return a.emitOpError("has no gradient rule yet for 3-D inputs");
  if (mask && g.wants(3) && !isa<FloatType>(typeOf(mask).getElementType()))
    return a.emitOpError("has no gradient for a boolean mask");
  Type elem = qt.getElementType();
  int64_t batch = qt.getDimSize(0), hq = qt.getDimSize(1), sq = qt.getDimSize(2);
  int64_t hkv = kt.getDimSize(1), skv = kt.getDimSize(2), group = hq / hkv;
  auto b = g.b;
  auto mul = [&](Value x, Value y) { return g.make<nn::MulOp>({x, y}); };
  auto matmul = [&](Value x, Value y) { return g.make<nn::MatMulOp>({x, y}); };
  // K and V with their heads repeated per query-head group, and back.
  auto repeat = [&](Value x) -> Value {
    if (group == 1)
      return x;
    auto t = typeOf(x);
    int64_t s = t.getDimSize(2), d = t.getDimSize(3);
    Value r = g.reshape(x, RankedTensorType::get({batch, hkv, 1, s, d}, elem));
    r = g.expand(r, RankedTensorType::get({batch, hkv, group, s, d}, elem));
    return g.reshape(r, RankedTensorType::get({batch, hq, s, d}, elem));
  };
  auto fold = [&](Value x, RankedTensorType to) -> Value {
    if (group == 1)
      return x;
    int64_t s = to.getDimSize(2), d = to.getDimSize(3);
    Value r = g.reshape(x, RankedTensorType::get({batch, hkv, group, s, d}, elem));
    return g.reshape(g.sumKeep(r, {2}), to);
  };
  Value kr = repeat(k), vr = repeat(v);
  double scale = a.getScale() ? a.getScale()->convertToDouble()
                              : 1.0 / std::sqrt(double(qt.getDimSize(3)));
  double softcap = a.getSoftcap().convertToDouble();
  Value scores = mul(matmul(q, transposeLastTwo(g, kr)), g.scalar(q, scale));
  Value capped = scores, tanhCap;
  if (softcap > 0) {
    tanhCap = g.make<nn::TanhOp>({mul(scores, g.scalar(q, 1.0 / softcap))});
    capped = mul(tanhCap, g.scalar(q, softcap));
  }
  Value biased = capped;
  Value negInf = g.scalar(q, -INFINITY), zero = g.scalar(q, 0.0);
  if (mask) {
    if (typeOf(mask).getElementType().isInteger(1))
      biased = g.make<nn::AddOp>({biased, g.make<nn::WhereOp>({mask, zero, negInf})});
    else
      biased = g.make<nn::AddOp>({biased, mask});
  }
  if (a.getIsCausal()) {
    SmallVector<bool> keep(sq * skv);
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < skv; ++j)
        keep[i * skv + j] = j <= i;
    Value causal = nn::ConstantOp::create(
        b, g.loc, DenseElementsAttr::get(RankedTensorType::get({sq, skv}, b.getI1Type()),
                                         ArrayRef<bool>(keep)));
    biased = g.make<nn::AddOp>({biased, g.make<nn::WhereOp>({causal, zero, negInf})});
  }
  Value p = g.make<nn::SoftmaxOp>({biased}, {b.getNamedAttr("axis", b.getI64IntegerAttr(3))});
  // A fully masked row is zeros.
  p = g.make<nn::WhereOp>({g.make<nn::EqualOp>({p, p}), p, zero});
  if (g.wants(2))
    g.set(2, fold(matmul(transposeLastTwo(g, p), g.grad()), vt));
  if (!g.wants(0) && !g.wants(1) && !(mask && g.wants(3)))
    return success();
  Value dp = matmul(g.grad(), transposeLastTwo(g, vr));
  Value dBiased = mul(p, g.make<nn::SubOp>({dp, g.sumKeep(mul(dp, p), {3})}));
  if (mask && g.wants(3))
    g.set(3, g.unbroadcast(dBiased, mask.getType()));
  Value dScores = dBiased;
  if (softcap > 0)
    dScores = mul(dBiased, g.make<nn::SubOp>({g.scalar(q, 1.0), mul(tanhCap, tanhCap)}));
  dScores = mul(dScores, g.scalar(q, scale));
  if (g.wants(0))
    g.set(0, matmul(dScores, kr));
  if (g.wants(1))
    g.set(1, fold(matmul(transposeLastTwo(g, dScores), q), kt));
  return success();
}

/// `v` ([N, C, O...]) with stride - 1 zeros between its elements along
/// each spatial dimension: element i where a window with stride s starts,
/// at i * s.
Value spreadByStrides(G &g, Value v, ArrayRef<int64_t> strides) {
  for (auto [d, s] : llvm::enumerate(strides)) {
    if (s == 1)
      continue;
    auto t = typeOf(v);
    int64_t rank = t.getRank(), dim = 2 + int64_t(d);
    SmallVector<int64_t> split(t.getShape());
    split.insert(split.begin() + dim + 1, 1);
    v = g.reshape(v, RankedTensorType::get(split, t.getElementType()));
    SmallVector<int64_t> spread(2 * (rank + 1), 0);
    spread[rank + 1 + dim + 1] = s - 1;
    v = g.padZeros(v, spread);
    SmallVector<int64_t> merged(t.getShape());
    merged[dim] *= s;
    v = g.reshape(v, RankedTensorType::get(merged, t.getElementType()));
    SmallVector<int64_t> crop(2 * rank, 0);
    crop[rank + dim] = -(s - 1);
    v = g.padZeros(v, crop);
  }
  return v;
}

/// The cotangent of a windowed op's input `in` ([N, C, D...]; `pads` the
/// spatial begin pads then end pads) from its output `out`'s: at each
/// kernel offset o, `contribution(o)` (shaped like `out`) lands where the
/// windows read, from o * dilation in steps of the stride, in the padded
/// input; the pads are cropped. Fails when the windows reach past the
/// padded input (ceil_mode's partial windows).
FailureOr<Value> scatterWindows(G &g, RankedTensorType in, RankedTensorType out,
                                ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                                ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations,
                                function_ref<Value(ArrayRef<int64_t>)> contribution) {
  int64_t rank = in.getRank(), spatial = rank - 2;
  SmallVector<int64_t> padded(in.getShape());
  for (int64_t d = 0; d < spatial; ++d) {
    padded[2 + d] += pads[d] + pads[spatial + d];
    if ((out.getDimSize(2 + d) - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 >
        padded[2 + d])
      return g.op->emitOpError("has no gradient rule yet for windows past the padding "
                               "(ceil_mode)");
  }
  int64_t taps = 1;
  for (int64_t k : kernel)
    taps *= k;
  Value total;
  for (int64_t i = 0; i < taps; ++i) {
    SmallVector<int64_t> o(spatial);
    for (int64_t d = spatial - 1, r = i; d >= 0; --d) {
      o[d] = r % kernel[d];
      r /= kernel[d];
    }
    Value c = spreadByStrides(g, contribution(o), strides);
    SmallVector<int64_t> place(2 * rank, 0);
    for (int64_t d = 0; d < spatial; ++d) {
      int64_t at = o[d] * dilations[d];
      place[2 + d] = at;
      place[rank + 2 + d] = padded[2 + d] - at - typeOf(c).getDimSize(2 + d);
    }
    c = g.padZeros(c, place);
    total = total ? g.make<nn::AddOp>({total, c}) : c;
  }
  if (llvm::any_of(pads, [](int64_t p) { return p != 0; })) {
    SmallVector<int64_t> crop(2 * rank, 0);
    for (int64_t d = 0; d < spatial; ++d) {
      crop[2 + d] = -pads[d];
      crop[rank + 2 + d] = -pads[spatial + d];
    }
    total = g.padZeros(total, crop);
  }
  return total;
}

/// Convolution (group 1), one kernel offset at a time: at offset k the
/// output reads the padded input strided from k, so the weight's cotangent
/// there is the contraction of the output's cotangent with that strided
/// view, and the input's cotangent gets the output's cotangent times the
/// weight's slice, where the windows read (scatterWindows).
LogicalResult convGrad(G &g) {
  auto c = cast<nn::ConvOp>(g.op);
  if (c.getGroup() != 1)
    return c.emitOpError("has no gradient rule yet for group > 1");
  Value x = c.getInput(), w = c.getWeight();
  auto xt = typeOf(x), wt = typeOf(w), yt = typeOf(c.getResult());
  int64_t spatial = xt.getRank() - 2;
  if (spatial < 1 || spatial > 2)
    return c.emitOpError("has no gradient rule yet for ") << spatial << "-D convolution";
  ArrayRef<int64_t> strides = c.getStrides(), pads = c.getPads(), dilations = c.getDilations();
  auto b = g.b;
  Type elem = xt.getElementType();
  int64_t rank = xt.getRank();
  // The padded input.
  SmallVector<int64_t> allPads(2 * rank, 0);
  for (int64_t d = 0; d < spatial; ++d) {
    allPads[2 + d] = pads[d];
    allPads[rank + 2 + d] = pads[spatial + d];
  }
  bool anyPad = llvm::any_of(pads, [](int64_t v) { return v != 0; });
  Value xp = anyPad ? g.padZeros(x, allPads) : x;
  // Kernel offsets, row-major.
  SmallVector<SmallVector<int64_t>> offsets;
  int64_t kernel = 1;
  for (int64_t d = 0; d < spatial; ++d)
    kernel *= wt.getDimSize(2 + d);
  for (int64_t i = 0; i < kernel; ++i) {
    SmallVector<int64_t> o(spatial);
    for (int64_t d = spatial - 1, r = i; d >= 0; --d) {
      o[d] = r % wt.getDimSize(2 + d);
      r /= wt.getDimSize(2 + d);
    }
    offsets.push_back(o);
  }
  const char *sp = spatial == 1 ? "h" : "hw";
  auto einsum = [&](ValueRange in, std::string eq) {
    return g.make<nn::EinsumOp>(in, {b.getNamedAttr("equation", b.getStringAttr(eq))});
  };
  if (g.wants(1)) {
    SmallVector<Value> pieces;
    for (auto &o : offsets) {
      SmallVector<int64_t> starts, ends, axes, steps;
      for (int64_t d = 0; d < spatial; ++d) {
        int64_t start = o[d] * dilations[d];
        starts.push_back(start);
        ends.push_back(start + (yt.getDimSize(2 + d) - 1) * strides[d] + 1);
        axes.push_back(2 + d);
        steps.push_back(strides[d]);
      }
      Value view = g.slice(xp, starts, ends, axes, steps);
      Value piece = einsum({g.grad(), view}, std::string("no") + sp + ",nc" + sp + "->oc");
      pieces.push_back(g.reshape(piece, RankedTensorType::get(
                                            {wt.getDimSize(0), wt.getDimSize(1), 1}, elem)));
    }
    Value all = pieces.size() == 1
                    ? pieces.front()
                    : g.make<nn::ConcatOp>(pieces, {b.getNamedAttr("axis", b.getI64IntegerAttr(2))});
    g.set(1, g.reshape(all, wt));
  }
  if (c.getBias() && g.wants(2)) {
    SmallVector<int64_t> axes = {0};
    for (int64_t d = 0; d < spatial; ++d)
      axes.push_back(2 + d);
    g.set(2, g.reshape(g.sumKeep(g.grad(), axes), c.getBias().getType()));
  }
  if (g.wants(0)) {
    SmallVector<int64_t> window(wt.getShape().drop_front(2));
    auto total = scatterWindows(g, xt, yt, window, strides, pads, dilations,
                                [&](ArrayRef<int64_t> o) {
      // The weight at this offset, [M, C].
      SmallVector<int64_t> starts = {0, 0}, ends = {wt.getDimSize(0), wt.getDimSize(1)},
                           axes = {0, 1}, steps = {1, 1};
      for (int64_t d = 0; d < spatial; ++d) {
        starts.push_back(o[d]);
        ends.push_back(o[d] + 1);
        axes.push_back(2 + d);
        steps.push_back(1);
      }
      Value tap = g.slice(w, starts, ends, axes, steps);
      tap = g.reshape(tap, RankedTensorType::get({wt.getDimSize(0), wt.getDimSize(1)}, elem));
      return einsum({g.grad(), tap}, std::string("no") + sp + ",oc->nc" + sp);
    });
    if (failed(total))
      return failure();
    g.set(0, *total);
  }
  return success();
}

/// Average pooling: each output's cotangent, divided by its window's
/// count (the kernel's size, or with count_include_pad false the input
/// elements the window covers), goes back to every element of its window.
LogicalResult averagePoolGrad(G &g) {
  auto p = cast<nn::AveragePoolOp>(g.op);
  if (!g.wants(0))
    return success();
  auto in = typeOf(p.getInput()), out = typeOf(p.getResult());
  int64_t spatial = in.getRank() - 2;
  ArrayRef<int64_t> kernel = p.getKernelShape(), strides = p.getStrides(), pads = p.getPads();
  SmallVector<int64_t> dilations(p.getDilations());
  if (dilations.empty())
    dilations.assign(spatial, 1);
  Value share;
  if (p.getCountIncludePad()) {
    int64_t count = 1;
    for (int64_t k : kernel)
      count *= k;
    share = g.make<nn::DivOp>({g.grad(), g.scalar(p.getResult(), double(count))});
  } else {
    // The count of each output's window, [1, 1, O...], from the shapes.
    SmallVector<int64_t> shape = {1, 1};
    for (int64_t d = 0; d < spatial; ++d)
      shape.push_back(out.getDimSize(2 + d));
    int64_t outputs = 1;
    for (int64_t d = 0; d < spatial; ++d)
      outputs *= shape[2 + d];
    SmallVector<double> counts(outputs, 1.0);
    for (int64_t i = 0; i < outputs; ++i) {
      int64_t r = i;
      for (int64_t d = spatial - 1; d >= 0; --d) {
        int64_t at = r % shape[2 + d];
        r /= shape[2 + d];
        int64_t covered = 0;
        for (int64_t k = 0; k < kernel[d]; ++k) {
          int64_t x = at * strides[d] + k * dilations[d] - pads[d];
          covered += x >= 0 && x < in.getDimSize(2 + d);
        }
        counts[i] *= double(covered);
      }
    }
    auto countType = RankedTensorType::get(shape, in.getElementType());
    SmallVector<Attribute> values;
    for (double c : counts)
      values.push_back(g.b.getFloatAttr(in.getElementType(), c));
    Value count =
        nn::ConstantOp::create(g.b, g.loc, DenseElementsAttr::get(countType, values));
    share = g.make<nn::DivOp>({g.grad(), count});
  }
  auto total = scatterWindows(g, in, out, kernel, strides, pads, dilations,
                              [&](ArrayRef<int64_t>) { return share; });
  if (failed(total))
    return failure();
  g.set(0, *total);
  return success();
}

/// ScatterND: the input's cotangent is the result's, zero where `none`
/// overwrote it (kept whole for `add`); the updates' cotangent is the
/// result's at the index tuples (GatherND composed: the tuples as row
/// numbers into the result's cotangent viewed as [rows, rest...]).
LogicalResult scatterNDGrad(G &g) {
  auto s = cast<nn::ScatterNDOp>(g.op);
  StringRef reduction = s.getReduction();
  if (reduction != "none" && reduction != "add")
    return s.emitOpError("has no gradient rule yet for reduction '") << reduction << "'";
  auto in = typeOf(s.getInput()), idx = typeOf(s.getIndices()), up = typeOf(s.getUpdates());
  if (g.wants(0)) {
    if (reduction == "add") {
      g.set(0, g.grad());
    } else {
      Value zeros = nn::ConstantOp::create(
          g.b, g.loc, DenseElementsAttr::get(up, g.b.getZeroAttr(up.getElementType())));
      g.set(0, g.make<nn::ScatterNDOp>({g.grad(), s.getIndices(), zeros},
                                       {g.b.getNamedAttr("reduction", g.b.getStringAttr("none"))}));
    }
  }
  if (g.wants(2)) {
    int64_t q = idx.getRank(), k = idx.getDimSize(q - 1);
    SmallVector<int64_t> rowShape = {1}, lead(idx.getShape().drop_back());
    int64_t rows = 1;
    for (int64_t d = 0; d < k; ++d)
      rows *= in.getDimSize(d);
    rowShape[0] = rows;
    rowShape.append(in.getShape().begin() + k, in.getShape().end());
    Type i64 = g.b.getI64Type();
    // Entry j of each tuple picks its row offset from [0, stride_j, ...]
    // (negative entries counted from the end, as the scatter reads them).
    Value linear;
    for (int64_t j = 0, stride = rows; j < k; ++j) {
      stride /= in.getDimSize(j);
      Value entry = g.slice(s.getIndices(), {j}, {j + 1}, {q - 1}, {1});
      entry = g.reshape(entry, RankedTensorType::get(lead, i64));
      SmallVector<int64_t> offsets;
      for (int64_t i = 0; i < in.getDimSize(j); ++i)
        offsets.push_back(i * stride);
      Value table = nn::ConstantOp::create(
          g.b, g.loc,
          DenseElementsAttr::get(RankedTensorType::get({in.getDimSize(j)}, i64),
                                 ArrayRef<int64_t>(offsets)));
      Value scaled = g.make<nn::GatherOp>({table, entry},
                                          {g.b.getNamedAttr("axis", g.b.getI64IntegerAttr(0))});
      linear = linear ? g.make<nn::AddOp>({linear, scaled}) : scaled;
    }
    Value flat = g.reshape(g.grad(), RankedTensorType::get(rowShape, in.getElementType()));
    Value picked = g.make<nn::GatherOp>({flat, linear},
                                        {g.b.getNamedAttr("axis", g.b.getI64IntegerAttr(0))});
    g.set(2, g.reshape(picked, up));
  }
  return success();
}

LogicalResult globalAveragePoolGrad(G &g) {
  auto p = cast<nn::GlobalAveragePoolOp>(g.op);
  if (!g.wants(0))
    return success();
  auto in = typeOf(p.getInput());
  int64_t count = 1;
  for (int64_t d = 2; d < in.getRank(); ++d)
    count *= in.getDimSize(d);
  Value share = g.make<nn::DivOp>({g.grad(), g.scalar(p.getResult(), double(count))});
  g.set(0, g.expand(share, in));
  return success();
}

/// Batch normalization with given statistics: per channel (dim 1), y =
/// (x - mean) * r * scale + bias with r = 1 / sqrt(var + eps).
LogicalResult batchNormGrad(G &g) {
  auto n = cast<nn::BatchNormalizationOp>(g.op);
  Value x = n.getInput();
  auto in = typeOf(x);
  // The [C] parameters as [C, 1, ...] against [N, C, ...].
  SmallVector<int64_t> perChannel(in.getRank() - 1, 1);
  perChannel[0] = in.getDimSize(1);
  auto channelType = RankedTensorType::get(perChannel, in.getElementType());
  auto channel = [&](Value v) { return g.reshape(v, channelType); };
  auto mul = [&](Value a, Value b) { return g.make<nn::MulOp>({a, b}); };
  Value r = g.make<nn::ReciprocalOp>({g.make<nn::SqrtOp>(
      {g.make<nn::AddOp>({channel(n.getVariance()),
                          g.scalar(x, n.getEpsilon().convertToDouble())})})});
  Value centered = g.make<nn::SubOp>({x, channel(n.getMean())});
  Value scaleR = mul(channel(n.getScale()), r);
  SmallVector<int64_t> axes = {0};
  for (int64_t d = 2; d < in.getRank(); ++d)
    axes.push_back(d);
  auto perC = [&](Value v, Value like) { return g.reshape(g.sumKeep(v, axes), like.getType()); };
  if (g.wants(0))
    g.set(0, mul(g.grad(), scaleR));
  if (g.wants(1))
    g.set(1, perC(mul(g.grad(), mul(centered, r)), n.getScale()));
  if (g.wants(2))
    g.set(2, perC(g.grad(), n.getBias()));
  if (g.wants(3))
    g.set(3, perC(g.make<nn::NegOp>({mul(g.grad(), scaleR)}), n.getMean()));
  if (g.wants(4)) {
    // d r / d var = -r^3 / 2.
    Value dr = mul(g.scalar(x, -0.5), mul(r, mul(r, r)));
    g.set(4, perC(mul(mul(g.grad(), centered), mul(channel(n.getScale()), dr)), n.getVariance()));
  }
  return success();
}

/// Einsum (its "..." spelled as letters) without a letter repeated in one
/// operand: the
/// cotangent of operand i is the einsum of the result's cotangent with
/// the other operands into operand i's letters, when each of them appears
/// in the result or another operand (a letter summed away inside operand i
/// alone would need a broadcast back).
LogicalResult einsumGrad(G &g) {
  auto e = cast<nn::EinsumOp>(g.op);
  StringRef equation = e.getEquation();
  std::string eq;
  for (char ch : equation)
    if (ch != ' ')
      eq.push_back(ch);
  size_t arrow = eq.find("->");
  if (arrow == std::string::npos)
    return e.emitOpError("has no gradient rule yet for an implicit output");
  SmallVector<StringRef> terms;
  StringRef(eq).substr(0, arrow).split(terms, ',');
  std::string out = eq.substr(arrow + 2);
  if (terms.size() != e.getInputs().size())
    return e.emitOpError("has an equation whose operand count differs from its inputs'");
  // "..." becomes letters of its own, right-aligned across the operands
  // (dims of equal sizes: a broadcast one would need summing back).
  SmallVector<std::string> spelled;
  if (eq.find("...") != std::string::npos) {
    std::string unused;
    for (char c = 'a'; c <= 'z'; ++c)
      if (eq.find(c) == std::string::npos)
        unused.push_back(c);
    SmallVector<int64_t> ellipsisDims(terms.size(), 0);
    SmallVector<int64_t> sizes; // of the ellipsis letters, outermost first
    int64_t most = 0;
    for (auto [i, t] : llvm::enumerate(terms))
      if (t.contains("..."))
        most = std::max(most, typeOf(e.getInputs()[i]).getRank() - int64_t(t.size() - 3));
    if (most > int64_t(unused.size()))
      return e.emitOpError("has too many dims under '...' to differentiate");
    sizes.assign(most, -1);
    for (auto [i, t] : llvm::enumerate(terms)) {
      std::string term = t.str();
      size_t at = term.find("...");
      if (at != std::string::npos) {
        ArrayRef<int64_t> shape = typeOf(e.getInputs()[i]).getShape();
        int64_t n = int64_t(shape.size()) - int64_t(term.size() - 3);
        for (int64_t k = 0; k < n; ++k) {
          int64_t slot = most - n + k, size = shape[at + k];
          if (sizes[slot] >= 0 && sizes[slot] != size)
            return e.emitOpError("has no gradient rule yet for dims under '...' that broadcast");
          sizes[slot] = size;
        }
        term.replace(at, 3, unused.substr(most - n, n));
      }
      spelled.push_back(term);
    }
    if (size_t at = out.find("..."); at != std::string::npos)
      out.replace(at, 3, unused.substr(0, most));
    terms.clear();
    for (const std::string &t : spelled)
      terms.push_back(t);
  }
  for (unsigned i = 0; i < terms.size(); ++i) {
    if (!g.wants(i))
      continue;
    std::string mine = terms[i].str();
    if (!isa<FloatType>(typeOf(e.getInputs()[i]).getElementType()))
      return e.emitOpError("has no gradient: integer operands");
    SmallVector<Value> operands = {g.grad()};
    std::string lhs = out, others = out;
    for (unsigned j = 0; j < terms.size(); ++j)
      if (j != i) {
        operands.push_back(e.getInputs()[j]);
        lhs += "," + terms[j].str();
        others += terms[j].str();
      }
    for (size_t a = 0; a < mine.size(); ++a) {
      if (mine.find(mine[a]) != a)
        return e.emitOpError("has no gradient rule yet for a letter repeated in one operand");
      if (others.find(mine[a]) == std::string::npos)
        return e.emitOpError("has no gradient rule yet for a letter summed inside one operand");
    }
    g.set(i, g.make<nn::EinsumOp>(operands, {g.b.getNamedAttr(
                                                "equation", g.b.getStringAttr(lhs + "->" + mine))}));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// The registry
//===----------------------------------------------------------------------===//

constexpr const char *kNoFloatResult = "no float result";
constexpr const char *kPiecewiseConstant = "piecewise constant";
constexpr const char *kSource = "a source (constants have no cotangent; weights are leaves)";
constexpr const char *kUpdate = "an optimizer's update, written after the backward";
constexpr const char *kBackward = "a backward op, written by nn-differentiate";

const llvm::StringMap<GradientRule> &registry() {
  static const llvm::StringMap<GradientRule> table = [] {
    llvm::StringMap<GradientRule> t;
    auto rule = [&](StringRef name, GradientFn fn) { t[name] = GradientRule{fn, nullptr}; };
    auto none = [&](StringRef name, const char *why) { t[name] = GradientRule{nullptr, why}; };
    rule("nn.add", addGrad);
    rule("nn.sub", subGrad);
    rule("nn.mul", mulGrad);
    rule("nn.div", divGrad);
    rule("nn.pow", powGrad);
    rule("nn.max", extremumGrad<true>);
    rule("nn.min", extremumGrad<false>);
    rule("nn.where", whereGrad);
    rule("nn.neg", negGrad);
    rule("nn.identity", identityGrad);
    // A sharding constraint (dist-annotate's, seeded on the forward
    // program of a sharded training step) is the identity on values;
    // propagation decides the cotangent's sharding.
    rule("dist.constraint", identityGrad);
    rule("nn.dropout", identityGrad); // inference dropout is the identity
    rule("nn.exp", expGrad);
    rule("nn.log", logGrad);
    rule("nn.sqrt", sqrtGrad);
    rule("nn.reciprocal", reciprocalGrad);
    rule("nn.tanh", tanhGrad);
    rule("nn.sigmoid", sigmoidGrad);
    rule("nn.erf", erfGrad);
    rule("nn.sin", sinGrad);
    rule("nn.cos", cosGrad);
    rule("nn.relu", reluGrad);
    rule("nn.abs", absGrad);
    rule("nn.cast", castGrad);
    rule("nn.reshape", reshapeLikeGrad);
    rule("nn.flatten", reshapeLikeGrad);
    rule("nn.squeeze", reshapeLikeGrad);
    rule("nn.unsqueeze", reshapeLikeGrad);
    rule("nn.transpose", transposeGrad);
    rule("nn.expand", expandGrad);
    rule("nn.reduce_sum", reduceSumGrad);
    rule("nn.reduce_mean", reduceMeanGrad);
    rule("nn.softmax", softmaxGrad);
    rule("nn.log_softmax", logSoftmaxGrad);
    rule("nn.softmax_cross_entropy", softmaxCrossEntropyGrad);
    rule("nn.matmul", matmulGrad);
    rule("nn.gemm", gemmGrad);
    rule("nn.leaky_relu", leakyReluGrad);
    rule("nn.clip", clipGrad);
    rule("nn.gelu", geluGrad);
    rule("nn.layer_normalization", layerNormGrad);
    rule("nn.rms_normalization", rmsNormGrad);
    rule("nn.rotary_embedding", rotaryGrad);
    rule("nn.rotate_half", rotateHalfGrad);
    rule("nn.cumsum", cumsumGrad);
    rule("nn.trilu", triluGrad);
    rule("nn.reduce_max", extremumReduceGrad<nn::ReduceMaxOp>);
    rule("nn.reduce_min", extremumReduceGrad<nn::ReduceMinOp>);
    rule("nn.concat", concatGrad);
    rule("nn.split", splitGrad);
    rule("nn.slice", sliceGrad);
    rule("nn.gather", gatherGrad);
    rule("nn.pad", padGrad);
    rule("nn.mod", modGrad);
    rule("nn.reduce_prod", reduceProdGrad);
    rule("nn.training_dropout", trainingDropoutGrad);
    rule("nn.keyed_dropout", keyedDropoutGrad);
    rule("nn.topk", topkGrad);
    rule("nn.gather_elements", gatherElementsGrad);
    rule("nn.max_pool", maxPoolGrad);
    rule("nn.max_pool_with_indices", maxPoolGrad);
    rule("nn.attention", attentionGrad);
    rule("nn.conv", convGrad);
    rule("nn.global_average_pool", globalAveragePoolGrad);
    rule("nn.average_pool", averagePoolGrad);
    rule("nn.scatter_nd", scatterNDGrad);
    rule("nn.batch_normalization", batchNormGrad);
    rule("nn.einsum", einsumGrad);
    for (const char *name : {"nn.equal", "nn.less", "nn.greater", "nn.and", "nn.not", "nn.shape",
                             "nn.arg_max", "nn.arg_min"})
      none(name, kNoFloatResult);
    for (const char *name : {"nn.floor", "nn.ceil", "nn.round"})
      none(name, kPiecewiseConstant);
    for (const char *name : {"nn.constant", "nn.weight", "nn.range", "nn.constant_of_shape"})
      none(name, kSource);
    none("nn.adamw_update", kUpdate);
    none("nn.attention_grad", kBackward);
    none("nn.gelu_grad", kBackward);
    none("nn.softmax_cross_entropy_grad", kBackward);
    none("nn.normalization_grad", kBackward);
    none("nn.normalization_scale_grad", kBackward);
    return t;
  }();
  return table;
}

} // namespace

const GradientRule *shardflow::nn::lookupGradientRule(StringRef name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

void shardflow::nn::forEachGradientRule(
    function_ref<void(StringRef, const GradientRule &)> fn) {
  for (const auto &entry : registry())
    fn(entry.getKey(), entry.getValue());
}

Value shardflow::nn::expandSoftmaxCrossEntropy(OpBuilder &b, SoftmaxCrossEntropyOp op) {
  Location loc = op.getLoc();
  Value x = op.getLogits(), labels = op.getLabels();
  auto xType = typeOf(x);
  Type elem = xType.getElementType();
  int64_t rank = xType.getRank();
  Value column = ReshapeOp::create(b, loc, withColumn(labels), labels);
  auto [hit, counted] =
      crossEntropyMasks(b, loc, column, op.getClasses(), op.getIgnoreIndex(), elem);
  // The label's logit: a sum over the classes, so partial where they are
  // split.
  Value zero = ConstantOp::create(
      b, loc, DenseElementsAttr::get(RankedTensorType::get({}, elem), b.getFloatAttr(elem, 0.0)));
  Value picked = ReduceSumOp::create(b, loc, ValueRange{WhereOp::create(b, loc, hit, x, zero)},
                                     {b.getNamedAttr("axes", b.getDenseI64ArrayAttr({rank - 1})),
                                      b.getNamedAttr("keepdims", b.getBoolAttr(false))})
                     ->getResult(0);
  Value lse = ReshapeOp::create(b, loc, op.getType(), op.getLse());
  Value rows = ReshapeOp::create(b, loc, op.getType(), counted);
  return MulOp::create(b, loc, SubOp::create(b, loc, lse, picked), rows);
}
