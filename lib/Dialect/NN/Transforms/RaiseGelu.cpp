//===- RaiseGelu.cpp - written-out GELU to nn.gelu ------------------------===//
//
// Models exported before Gelu (opset 20) write it out, in the tanh form of
// GPT-2's activation and the erf form of BERT's:
//
//   0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
//   0.5 * x * (1 + erf(x / sqrt(2)))          (or x * (1 / sqrt(2)))
//
// with the products and sums in any association and operand order (x^3 as
// pow(x, 3) or x * x * x; 0.5 * x computed first, or the product scaled by
// 0.5 last). As separate ops each is a pass over the tensor (on the CPU)
// or a generated kernel of its own after the GEMM that feeds it (on CUDA);
// one nn.gelu runs in one pass, and on the CUDA target the tanh form rides
// on the GEMM as cuBLASLt's gelu_bias epilogue.
//
// Exactness is the rule: the constants must be those of the definition
// (to a relative 1e-6, so the f32 spellings of exporters match), every
// intermediate value must have no reader outside the chain, and no
// operand may broadcast the result beyond x's shape. With `explain`, each
// raised chain gets a remark.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "Matching.h"

#include "mlir/IR/Builders.h"

#include <cmath>
#include <string>

namespace shardflow::nn {
#define GEN_PASS_DEF_NNRAISEGELU
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;
using namespace shardflow::nn::matching;

namespace {

/// Whether `v` is a scalar constant equal to `want` to a relative 1e-6.
bool isConstant(Value v, double want) {
  std::optional<double> c = scalarOf(v);
  return c && std::abs(*c - want) <= 1e-6 * std::abs(want);
}

/// Whether `v` is x^3 (pow(x, 3), or a product of x three times), read
/// only once; collects its ops.
bool isCubeOf(Value v, Value x, SmallVectorImpl<Operation *> &ops) {
  if (!v.hasOneUse())
    return false;
  if (auto pow = v.getDefiningOp<nn::PowOp>()) {
    ops.push_back(pow);
    return pow.getLhs() == x && isConstant(pow.getRhs(), 3.0);
  }
  auto mul = v.getDefiningOp<nn::MulOp>();
  if (!mul)
    return false;
  ops.push_back(mul);
  Value square = mul.getLhs() == x ? mul.getRhs() : mul.getLhs();
  if (mul.getLhs() != x && mul.getRhs() != x)
    return false;
  auto sq = square.getDefiningOp<nn::MulOp>();
  if (!sq || !square.hasOneUse() || sq.getLhs() != x || sq.getRhs() != x)
    return false;
  ops.push_back(sq);
  return true;
}

/// The x of tanh's argument sqrt(2/pi) * (x + 0.044715 * x^3), or null.
Value tanhFormInput(Value arg, SmallVectorImpl<Operation *> &ops) {
  auto scaled = arg.getDefiningOp<nn::MulOp>();
  if (!scaled || !arg.hasOneUse())
    return {};
  const double c1 = std::sqrt(2.0 / M_PI);
  Value inner = isConstant(scaled.getLhs(), c1)   ? scaled.getRhs()
                : isConstant(scaled.getRhs(), c1) ? scaled.getLhs()
                                                  : Value();
  auto sum = inner ? inner.getDefiningOp<nn::AddOp>() : nn::AddOp();
  if (!sum || !inner.hasOneUse())
    return {};
  ops.append({scaled, sum});
  for (auto [x, term] : {std::pair(sum.getLhs(), sum.getRhs()),
                         std::pair(sum.getRhs(), sum.getLhs())}) {
    auto cubic = term.getDefiningOp<nn::MulOp>();
    if (!cubic || !term.hasOneUse())
      continue;
    Value cube = isConstant(cubic.getLhs(), 0.044715)   ? cubic.getRhs()
                 : isConstant(cubic.getRhs(), 0.044715) ? cubic.getLhs()
                                                        : Value();
    SmallVector<Operation *> cubeOps{cubic};
    if (cube && isCubeOf(cube, x, cubeOps)) {
      ops.append(cubeOps.begin(), cubeOps.end());
      return x;
    }
  }
  return {};
}

/// The x of erf's argument x / sqrt(2) or x * (1 / sqrt(2)), or null.
Value erfFormInput(Value arg, SmallVectorImpl<Operation *> &ops) {
  if (!arg.hasOneUse())
    return {};
  if (auto div = arg.getDefiningOp<nn::DivOp>(); div && isConstant(div.getRhs(), M_SQRT2)) {
    ops.push_back(div);
    return div.getLhs();
  }
  if (auto mul = arg.getDefiningOp<nn::MulOp>()) {
    ops.push_back(mul);
    if (isConstant(mul.getRhs(), M_SQRT1_2))
      return mul.getLhs();
    if (isConstant(mul.getLhs(), M_SQRT1_2))
      return mul.getRhs();
  }
  return {};
}

/// Adds the leaves of a product tree to `xs` (how many are x) and `scale`
/// (the product of the constants): x, scalar constants, and products of
/// them read only once. False when a leaf is anything else.
bool productLeaves(Value v, Value x, int &xs, double &scale, SmallVectorImpl<Operation *> &ops) {
  if (v == x) {
    ++xs;
    return true;
  }
  if (std::optional<double> c = scalarOf(v)) {
    scale *= *c;
    return true;
  }
  auto mul = v.getDefiningOp<nn::MulOp>();
  if (!mul || !v.hasOneUse())
    return false;
  ops.push_back(mul);
  return productLeaves(mul.getLhs(), x, xs, scale, ops) &&
         productLeaves(mul.getRhs(), x, xs, scale, ops);
}

struct Gelu {
  Value input;
  bool tanh = false;
  Operation *output = nullptr;
  SmallVector<Operation *> ops;
};

/// The chain around `activation` (a tanh or an erf), if it is a GELU.
std::optional<Gelu> match(Operation *activation) {
  Gelu g;
  g.tanh = isa<nn::TanhOp>(activation);
  Value arg = activation->getOperand(0), t = activation->getResult(0);
  g.input = g.tanh ? tanhFormInput(arg, g.ops) : erfFormInput(arg, g.ops);
  RankedTensorType xt = g.input ? typeOf(g.input) : RankedTensorType();
  if (!xt || !isa<FloatType>(xt.getElementType()) || typeOf(t) != xt)
    return std::nullopt;
  g.ops.push_back(activation);
  // 1 + t.
  auto onePlus = dyn_cast_or_null<nn::AddOp>(soleUser(t));
  if (!onePlus || !isConstant(otherOperand(onePlus, t), 1.0) ||
      typeOf(onePlus.getResult()) != xt)
    return std::nullopt;
  g.ops.push_back(onePlus);
  // Products up the single-reader chain until x and 0.5 are both in.
  Value current = onePlus.getResult();
  int xs = 0;
  double scale = 1.0;
  while (true) {
    auto mul = dyn_cast_or_null<nn::MulOp>(soleUser(current));
    if (!mul || typeOf(mul.getResult()) != xt)
      return std::nullopt;
    g.ops.push_back(mul);
    if (!productLeaves(otherOperand(mul, current), g.input, xs, scale, g.ops) || xs > 1)
      return std::nullopt;
    current = mul.getResult();
    if (xs == 1 && std::abs(scale - 0.5) <= 0.5e-6) {
      g.output = mul;
      return g;
    }
  }
}

struct NNRaiseGeluPass : public nn::impl::NNRaiseGeluBase<NNRaiseGeluPass> {
  using NNRaiseGeluBase::NNRaiseGeluBase;

  void runOnOperation() override {
    SmallVector<Operation *> activations;
    getOperation().walk([&](Operation *op) {
      if (isa<nn::TanhOp, nn::ErfOp>(op))
        activations.push_back(op);
    });
    for (Operation *activation : activations) {
      std::optional<Gelu> g = match(activation);
      if (!g)
        continue;
      OpBuilder b(g->output);
      SmallVector<Location> locs;
      for (Operation *op : g->ops)
        locs.push_back(op->getLoc());
      auto gelu = nn::GeluOp::create(b, b.getFusedLoc(locs), typeOf(g->input), g->input,
                                     b.getStringAttr(g->tanh ? "tanh" : "none"));
      g->output->getResult(0).replaceAllUsesWith(gelu.getResult());
      // Readers first: erase while anything is left without readers.
      SmallVector<Operation *> dead(g->ops.begin(), g->ops.end());
      for (bool erased = true; erased;) {
        erased = false;
        for (Operation *&op : dead)
          if (op && op->use_empty()) {
            SmallVector<Value> operands(op->getOperands());
            op->erase();
            op = nullptr;
            erased = true;
            for (Value operand : operands)
              if (auto c = operand.getDefiningOp<nn::ConstantOp>(); c && c->use_empty())
                c->erase();
          }
      }
      if (explain)
        gelu.emitRemark("raised to nn.gelu: ")
            << (g->tanh ? "tanh approximation" : "exact (erf)");
    }
  }
};

} // namespace
