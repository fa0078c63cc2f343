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
  // y * (g - sum(g * y))
  Value y = s.getResult();
  int64_t axis = axisOf(y, s.getAxis());
  Value dot = g.sumKeep(g.make<nn::MulOp>({g.grad(), y}), {axis});
  g.set(0, g.make<nn::MulOp>({y, g.make<nn::SubOp>({g.grad(), dot})}));
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

//===----------------------------------------------------------------------===//
// The registry
//===----------------------------------------------------------------------===//

constexpr const char *kNoFloatResult = "no float result";
constexpr const char *kPiecewiseConstant = "piecewise constant";
constexpr const char *kSource = "a source (constants have no cotangent; weights are leaves)";

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
    rule("nn.matmul", matmulGrad);
    for (const char *name : {"nn.equal", "nn.less", "nn.greater", "nn.and", "nn.not", "nn.shape",
                             "nn.arg_max", "nn.arg_min"})
      none(name, kNoFloatResult);
    for (const char *name : {"nn.floor", "nn.ceil", "nn.round"})
      none(name, kPiecewiseConstant);
    for (const char *name : {"nn.constant", "nn.weight", "nn.range", "nn.constant_of_shape"})
      none(name, kSource);
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
