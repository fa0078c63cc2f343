//===- Optimizer.cpp - one training step: clip, schedule, update -----------===//
//
// nn-optimizer: from a loss and its gradients (nn-differentiate's results)
// to the step that updates the weights, in nn ops, so that the update is
// sharded and lowered like the rest. Persistent state is read by nn.weight
// (the weights, and zero-initialized moments and step counter) and written
// by results marked `nn.state`. The arithmetic follows PyTorch's
// single-tensor implementations of SGD and AdamW.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Autodiff/Training.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/GlobPattern.h"

#include <cmath>

namespace shardflow::nn {
#define GEN_PASS_DEF_NNOPTIMIZER
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Scalar f32 arithmetic and the elementwise ops of an update, at one
/// location.
struct Arith {
  OpBuilder &b;
  Location loc;

  Value constant(double v, Type elem) {
    return nn::ConstantOp::create(
        b, loc, DenseElementsAttr::get(RankedTensorType::get({}, elem),
                                       b.getFloatAttr(elem, v)));
  }
  Value f32(double v) { return constant(v, b.getF32Type()); }
  Value add(Value x, Value y) { return nn::AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return nn::SubOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return nn::MulOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return nn::DivOp::create(b, loc, x, y); }
  Value sqrt(Value x) { return nn::SqrtOp::create(b, loc, x); }
  Value min(Value x, Value y) { return nn::MinOp::create(b, loc, x, y); }
  Value max(Value x, Value y) { return nn::MaxOp::create(b, loc, x, y); }
  Value cos(Value x) { return nn::CosOp::create(b, loc, x); }
  Value pow(Value x, Value y) { return nn::PowOp::create(b, loc, x, y); }
  Value greater(Value x, Value y) { return nn::GreaterOp::create(b, loc, x, y); }
  Value where(Value c, Value x, Value y) { return nn::WhereOp::create(b, loc, c, x, y); }
  /// x · c for a compile-time factor, in x's element type.
  Value scale(Value x, double c) { return mul(x, constant(c, typeOf(x).getElementType())); }
  /// The sum of every element of x, as a scalar.
  Value sumAll(Value x) { return nn::sumAll(b, loc, x); }
  /// A scalar f32 in x's element type (x is f32 today: weights train in
  /// f32).
  Value like(Value scalar, Value x) {
    Type elem = typeOf(x).getElementType();
    if (typeOf(scalar).getElementType() == elem)
      return scalar;
    return nn::CastOp::create(b, loc, scalar, TypeAttr::get(elem));
  }
};

/// One trained initializer: the value read (nn.weight) and its gradient.
struct Trained {
  std::string name;
  Value weight;
  Value grad;
};

bool isZeroConstant(Value v) {
  auto c = v.getDefiningOp<nn::ConstantOp>();
  auto dense = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : DenseElementsAttr();
  return dense && dense.isSplat() && dense.getSplatValue<APFloat>().isZero();
}

struct NNOptimizerPass : public nn::impl::NNOptimizerBase<NNOptimizerPass> {
  using NNOptimizerBase::NNOptimizerBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>("main");
    if (!fn) {
      module.emitError("nn-optimizer: no function @main");
      return signalPassFailure();
    }
    if (failed(checkOptions(fn)) || failed(buildStep(fn)))
      signalPassFailure();
  }

  LogicalResult checkOptions(func::FuncOp fn) {
    auto fail = [&](const Twine &message) { return fn.emitError("nn-optimizer: " + message); };
    if (optimizer != "sgd" && optimizer != "adamw")
      return fail("optimizer must be sgd or adamw, got '" + optimizer + "'");
    if (!(lr > 0) || !std::isfinite(lr))
      return fail("lr must be positive, got " + std::to_string(double(lr)));
    if (momentum < 0 || (nesterov && momentum <= 0))
      return fail("momentum must be non-negative, and positive with nesterov");
    if (optimizer == "adamw" && (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1))
      return fail("betas must lie in [0, 1)");
    if (!(eps >= 0))
      return fail("eps must be non-negative");
    if (clipGradNorm < 0)
      return fail("clip-grad-norm must be non-negative (0: no clipping)");
    if (warmupSteps < 0)
      return fail("warmup-steps must be non-negative");
    if (schedule != "constant" && schedule != "linear" && schedule != "cosine")
      return fail("schedule must be constant, linear or cosine, got '" + schedule + "'");
    if (schedule != "constant" && totalSteps <= warmupSteps)
      return fail("schedule " + schedule + " needs total-steps greater than warmup-steps (" +
                  Twine(int64_t(warmupSteps)) + "), got " + Twine(int64_t(totalSteps)));
    for (auto [option, globs] : {std::pair<StringRef, ArrayRef<std::string>>("no-decay", noDecay),
                                  {"freeze", freeze},
                                  {"trainable", trainable}})
      for (const std::string &glob : globs)
        if (auto pattern = llvm::GlobPattern::create(glob); !pattern)
          return fail(option + " '" + glob + "' is not a valid glob: " +
                      llvm::toString(pattern.takeError()));
    return success();
  }

  double decay() const {
    if (weightDecay >= 0)
      return weightDecay;
    return optimizer == "adamw" ? 1e-2 : 0.0;
  }

  static bool matches(ArrayRef<std::string> globs, StringRef name) {
    for (const std::string &glob : globs)
      if (auto pattern = llvm::GlobPattern::create(glob); pattern && pattern->match(name))
        return true;
    return false;
  }
  bool decays(StringRef name) const { return !matches(noDecay, name); }

  /// The value of initializer `name` as a weight: its nn.weight, or the
  /// nn.constant the importer embedded it as, turned into an nn.weight.
  FailureOr<Value> weightNamed(func::FuncOp fn, StringRef name) {
    return nn::initializerAsWeight(fn, name);
  }

  /// A zero-initialized persistent tensor (a moment, the step counter).
  Value zeroState(OpBuilder &b, Location loc, StringRef name, RankedTensorType type) {
    return nn::WeightOp::create(b, loc, type, b.getStringAttr(name), b.getStringAttr("zeros"),
                                StringAttr(), IntegerAttr(), IntegerAttr(), DenseI64ArrayAttr(),
                                ArrayAttr(), DenseI64ArrayAttr());
  }

  /// The learning rate of step t (1-based, f32 scalar).
  Value learningRate(Arith &a, Value t) {
    Value peak = a.f32(lr);
    Value after = peak;
    double w = double(warmupSteps), T = double(totalSteps);
    if (schedule == "linear") {
      // lr·max(0, T - t)/(T - W)
      Value left = a.max(a.sub(a.f32(T), t), a.f32(0));
      after = a.mul(peak, a.div(left, a.f32(T - w)));
    } else if (schedule == "cosine") {
      Value progress = a.min(a.div(a.sub(t, a.f32(w)), a.f32(T - w)), a.f32(1));
      Value wave = a.add(a.f32(1), a.cos(a.mul(a.f32(M_PI), progress)));
      after = a.add(a.f32(minLr), a.mul(a.f32(0.5 * (lr - minLr)), wave));
    }
    if (warmupSteps == 0)
      return after;
    Value warm = a.mul(peak, a.div(t, a.f32(w)));
    return a.where(a.greater(t, a.f32(w)), after, warm);
  }

  LogicalResult buildStep(func::FuncOp fn) {
    Block &body = fn.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Value lossValue;
    SmallVector<std::pair<std::string, Value>> grads;
    // Running statistics (training-mode BatchNormalization) by the
    // initializer each updates; an initializer two nodes update (an
    // exporter that wrote equal buffers once) stays as it is.
    llvm::StringMap<SmallVector<Value, 1>> running;
    SmallVector<std::string> runningOrder;
    for (unsigned i = 0; i < fn.getNumResults(); ++i) {
      if (auto r = fn.getResultAttrOfType<StringAttr>(i, "nn.running_statistic")) {
        auto &updates = running[r.getValue()];
        if (updates.empty())
          runningOrder.push_back(r.getValue().str());
        updates.push_back(ret.getOperand(i));
      }
      auto name = fn.getResultAttrOfType<StringAttr>(i, "nn.name");
      if (!name)
        continue;
      if (name.getValue() == loss)
        lossValue = ret.getOperand(i);
      else if (name.getValue().starts_with("grad:"))
        grads.emplace_back(name.getValue().drop_front(5).str(), ret.getOperand(i));
    }
    if (!lossValue)
      return fn.emitError("nn-optimizer: @main has no result named '") << loss << "'";
    if (typeOf(lossValue).getNumElements() != 1)
      return fn.emitError("nn-optimizer: the loss must be a scalar, got ") << lossValue.getType();

    // What trains: the initializers whose gradient is not zero by
    // construction, less the frozen ones.
    SmallVector<Trained> trained;
    llvm::StringSet<> names;
    SmallVector<NamedAttribute> report[3]; // trained, frozen, held
    auto elements = [&](Value g) {
      return IntegerAttr::get(IntegerType::get(fn.getContext(), 64),
                              typeOf(g).getNumElements());
    };
    for (auto [option, globs] : {std::pair<StringRef, ArrayRef<std::string>>("freeze", freeze),
                                 {"trainable", trainable}})
      for (const std::string &glob : globs)
        if (llvm::none_of(grads, [&](auto &e) {
              return !isZeroConstant(e.second) && matches(ArrayRef<std::string>(glob), e.first);
            }))
          return fn.emitError("nn-optimizer: ")
                 << option << " '" << glob << "' matches no initializer that has a gradient";
    // Tied initializers (one parameter an exporter wrote twice): a copy's
    // gradient joins its source's, and the copy becomes the source's new
    // value, transposed where it holds the source transposed.
    llvm::StringMap<Value> gradOf;
    for (auto &[name, g] : grads)
      gradOf[name] = g;
    llvm::StringMap<std::pair<std::string, bool>> copies;
    llvm::StringMap<SmallVector<std::pair<std::string, bool>>> copiesOf;
    OpBuilder tb(ret);
    Location tieLoc = NameLoc::get(tb.getStringAttr("optimizer"), fn.getLoc());
    auto transposed = [&](Value v) {
      return nn::TransposeOp::create(tb, tieLoc, ValueRange{v},
                                     {tb.getNamedAttr("perm", tb.getDenseI64ArrayAttr({1, 0}))})
          ->getResult(0);
    };
    for (const std::string &spec : tie) {
      auto [copy, source] = StringRef(spec).split('=');
      bool flip = source.consume_back("^T");
      auto bad = [&](const Twine &why) {
        return fn.emitError("nn-optimizer: tie '") << spec << "': " << why;
      };
      if (copy.empty() || source.empty() || copy == source)
        return bad("expected COPY=SOURCE or COPY=SOURCE^T");
      for (StringRef n : {copy, source})
        if (!gradOf.count(n))
          return bad("'" + n + "' is no float initializer the loss is differentiated against");
      if (copies.count(copy) || copies.count(source) || copiesOf.count(copy))
        return bad("an initializer is tied twice, or a copy is another's source");
      ArrayRef<int64_t> cs = typeOf(gradOf[copy]).getShape(), ss = typeOf(gradOf[source]).getShape();
      bool swapped = cs.size() == 2 && ss.size() == 2 && cs[0] == ss[1] && cs[1] == ss[0];
      if (!flip && cs != ss && swapped)
        flip = true;
      if ((flip && !swapped) || (!flip && cs != ss))
        return bad("the shapes do not match" + Twine(flip ? " transposed" : ""));
      copies[copy] = {source.str(), flip};
      copiesOf[source].push_back({copy.str(), flip});
      Value gCopy = gradOf[copy];
      if (isZeroConstant(gCopy))
        continue;
      Value joined = flip ? transposed(gCopy) : gCopy;
      Value &gSource = gradOf[source];
      gSource = isZeroConstant(gSource)
                    ? joined
                    : nn::AddOp::create(tb, tieLoc, gSource, joined).getResult();
    }
    SmallVector<NamedAttribute> tiedReport;
    for (auto &[name, original] : grads) {
      Value g = gradOf[name];
      names.insert(name);
      StringAttr key = StringAttr::get(fn.getContext(), name);
      if (auto c = copies.find(name); c != copies.end()) {
        tiedReport.push_back(NamedAttribute(
            key, StringAttr::get(fn.getContext(), c->second.first + (c->second.second ? "^T" : ""))));
        continue;
      }
      // A running statistic is a buffer, as PyTorch's: held, even where
      // another node reads it on the way to the loss; the step writes its
      // blended value.
      if (isZeroConstant(g) || running.count(name)) {
        report[2].push_back(NamedAttribute(key, elements(g)));
        continue;
      }
      if (matches(freeze, name) || (!trainable.empty() && !matches(trainable, name))) {
        report[1].push_back(NamedAttribute(key, elements(g)));
        continue;
      }
      report[0].push_back(NamedAttribute(key, elements(g)));
      auto w = weightNamed(fn, name);
      if (failed(w))
        return failure();
      if (!typeOf(*w).getElementType().isF32())
        return w->getDefiningOp()->emitError("nn-optimizer: initializer '")
               << name << "' is " << typeOf(*w).getElementType()
               << "; weights train in f32 (mixed-precision training is not built yet)";
      trained.push_back({name, *w, g});
    }
    if (trained.empty())
      return fn.emitError("nn-optimizer: no initializer's gradient depends on the loss")
             << (report[1].empty() ? ": nothing to train" : " and is not frozen: nothing to train");
    {
      Builder b(fn.getContext());
      fn->getParentOfType<ModuleOp>()->setAttr(
          "nn.training", b.getDictionaryAttr({b.getNamedAttr("trained", b.getDictionaryAttr(report[0])),
                                              b.getNamedAttr("frozen", b.getDictionaryAttr(report[1])),
                                              b.getNamedAttr("held", b.getDictionaryAttr(report[2])),
                                              b.getNamedAttr("tied", b.getDictionaryAttr(tiedReport))}));
    }
    auto stateName = [&](StringRef weight, StringRef what) { return (weight + "." + what).str(); };
    for (const Trained &t : trained)
      for (StringRef what : {"exp_avg", "exp_avg_sq", "momentum_buffer"})
        if (names.contains(stateName(t.name, what)))
          return fn.emitError("nn-optimizer: the optimizer state '")
                 << stateName(t.name, what) << "' has the name of an initializer";
    if (names.contains("optimizer.step"))
      return fn.emitError("nn-optimizer: an initializer is named 'optimizer.step', the name of "
                          "the step counter");

    OpBuilder b(ret);
    Arith a{b, NameLoc::get(b.getStringAttr("optimizer"), fn.getLoc())};
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> attrs;
    auto named = [&](StringRef key, StringRef value) {
      return b.getDictionaryAttr(b.getNamedAttr(key, b.getStringAttr(value)));
    };
    // A step whose loss or gradient norm is not finite changes nothing but
    // the counter: each new value is where(finite, new, old) (x - x is 0
    // exactly for finite x, NaN otherwise). Set once the norm is known.
    Value finite;
    auto addState = [&](StringRef name, Value v, Value old = Value()) {
      if (finite && old)
        v = nn::WhereOp::create(b, v.getLoc(), finite, v, old);
      results.push_back(v);
      attrs.push_back(b.getDictionaryAttr({b.getNamedAttr("nn.name", b.getStringAttr(name)),
                                           b.getNamedAttr("nn.state", b.getStringAttr(name))}));
    };

    // A tied copy's new value: its source's, transposed where it holds
    // the source transposed.
    auto addCopy = [&](StringRef copy, bool flip, Value updated) -> LogicalResult {
      auto oldCopy = weightNamed(fn, copy);
      if (failed(oldCopy))
        return failure();
      Value v = updated;
      if (flip)
        v = nn::TransposeOp::create(b, updated.getLoc(), ValueRange{updated},
                                    {b.getNamedAttr("perm", b.getDenseI64ArrayAttr({1, 0}))})
                ->getResult(0);
      addState(copy, v, *oldCopy);
      return success();
    };

    // The step counter, 1-based for this step's arithmetic.
    Value step = a.add(nn::stepCounter(fn), a.f32(1));
    Value rate = learningRate(a, step);

    // The gradients' global 2-norm, before clipping: of @main's, or given.
    Value sumSquares;
    if (!gradNormSquared.empty()) {
      for (unsigned i = 0; i < fn.getNumArguments() && !sumSquares; ++i)
        if (auto name = fn.getArgAttrOfType<StringAttr>(i, "nn.name");
            name && name.getValue() == gradNormSquared)
          sumSquares = fn.getArgument(i);
      auto type = sumSquares ? dyn_cast<RankedTensorType>(sumSquares.getType()) : nullptr;
      if (!type || type.getNumElements() != 1 || !type.getElementType().isF32())
        return fn.emitError("nn-optimizer: grad-norm-squared names no f32 scalar argument '")
               << gradNormSquared << "' of @main";
    }
    for (const Trained &t : trained) {
      if (!gradNormSquared.empty())
        break;
      Value s = a.sumAll(a.mul(t.grad, t.grad));
      sumSquares = sumSquares ? a.add(sumSquares, s) : s;
    }
    Value norm = a.sqrt(sumSquares);
    {
      auto isFinite = [&](Value x) {
        Value f32 = a.like(x, norm);
        return nn::EqualOp::create(b, a.loc, a.sub(f32, f32), a.f32(0)).getResult();
      };
      finite = nn::AndOp::create(b, a.loc, isFinite(norm), isFinite(lossValue)).getResult();
    }
    Value clip;
    if (clipGradNorm > 0)
      clip = a.min(a.div(a.f32(clipGradNorm), a.add(norm, a.f32(1e-6))), a.f32(1));

    results.push_back(lossValue);
    attrs.push_back(named("nn.name", "loss"));
    results.push_back(norm);
    attrs.push_back(named("nn.name", "grad_norm"));
    results.push_back(rate);
    attrs.push_back(named("nn.name", "lr"));

    double wd = decay();
    for (const Trained &t : trained) {
      Arith u{b, NameLoc::get(b.getStringAttr("optimizer:" + t.name), fn.getLoc())};
      Value w = t.weight, g = t.grad;
      if (clip)
        g = u.mul(g, u.like(clip, g));
      Value lrT = u.like(rate, w);
      double decayT = decays(t.name) ? wd : 0.0;
      RankedTensorType type = typeOf(w);
      Value updated;
      if (optimizer == "sgd") {
        if (decayT != 0)
          g = u.add(g, u.scale(w, decayT));
        if (momentum > 0) {
          // torch starts the buffer at the first gradient: with dampening
          // 0, momentum·0 + g is that.
          std::string bufName = stateName(t.name, "momentum_buffer");
          Value oldBuf = zeroState(b, u.loc, bufName, type);
          Value buf = u.add(u.scale(oldBuf, momentum), g);
          addState(bufName, buf, oldBuf);
          g = nesterov ? u.add(g, u.scale(buf, momentum)) : buf;
        }
        updated = u.sub(w, u.mul(lrT, g));
      } else if (fusedUpdates) {
        std::string mName = stateName(t.name, "exp_avg"), vName = stateName(t.name, "exp_avg_sq");
        Value oldM = zeroState(b, u.loc, mName, type), oldV = zeroState(b, u.loc, vName, type);
        auto f32 = [&](double v) { return b.getF64FloatAttr(v); };
        auto fused = nn::AdamWUpdateOp::create(
            b, u.loc, t.weight, t.grad, oldM, oldV, rate, step, clip ? clip : u.f32(1), finite,
            f32(beta1), f32(beta2), f32(eps), f32(decayT));
        addState(mName, fused.getNewExpAvg());
        addState(vName, fused.getNewExpAvgSq());
        addState(t.name, fused.getNewParam());
        for (auto &[copy, flip] : copiesOf.lookup(t.name))
          if (failed(addCopy(copy, flip, fused.getNewParam())))
            return failure();
        continue;
      } else {
        // Decoupled decay first, then the bias-corrected moments.
        if (decayT != 0)
          w = u.mul(w, u.sub(u.f32(1), u.scale(lrT, decayT)));
        std::string mName = stateName(t.name, "exp_avg"), vName = stateName(t.name, "exp_avg_sq");
        Value oldM = zeroState(b, u.loc, mName, type), oldV = zeroState(b, u.loc, vName, type);
        Value m = u.add(u.scale(oldM, beta1), u.scale(g, 1 - beta1));
        Value v = u.add(u.scale(oldV, beta2), u.scale(u.mul(g, g), 1 - beta2));
        addState(mName, m, oldM);
        addState(vName, v, oldV);
        Value correction1 = u.sub(u.f32(1), u.pow(u.f32(beta1), step));
        Value correction2 = u.sqrt(u.sub(u.f32(1), u.pow(u.f32(beta2), step)));
        Value stepSize = u.div(rate, correction1);
        Value denom = u.add(u.div(u.sqrt(v), u.like(correction2, v)), u.constant(eps, type.getElementType()));
        updated = u.sub(w, u.mul(u.like(stepSize, w), u.div(m, denom)));
      }
      addState(t.name, updated, t.weight);
      for (auto &[copy, flip] : copiesOf.lookup(t.name))
        if (failed(addCopy(copy, flip, updated)))
          return failure();
    }
    for (const std::string &name : runningOrder) {
      ArrayRef<Value> updates = running[name];
      if (updates.size() > 1) {
        fn.emitWarning("nn-optimizer: initializer '")
            << name << "' holds the running statistic of " << updates.size()
            << " BatchNormalization nodes (an exporter wrote equal buffers once): it is "
            << "not updated";
        continue;
      }
      auto old = weightNamed(fn, name);
      if (failed(old))
        return failure();
      if (typeOf(*old) != typeOf(updates.front()))
        return fn.emitError("nn-optimizer: the running statistic of '")
               << name << "' is " << updates.front().getType() << ", the initializer "
               << old->getType();
      addState(name, updates.front(), *old);
    }
    addState("optimizer.step", step);

    ret->setOperands(results);
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(), types));
    fn.setAllResultAttrs(attrs);
    // The model's outputs and the gradients are no longer results: what
    // only they read goes.
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops))
      if (op->use_empty() && isa<nn::NNDialect>(op->getDialect()))
        op->erase();
    return success();
  }
};

} // namespace

FailureOr<Value> shardflow::nn::initializerAsWeight(func::FuncOp fn, StringRef name) {
  Value found;
  SmallVector<Operation *> embedded;
  fn.walk([&](Operation *op) {
    if (auto w = dyn_cast<nn::WeightOp>(op); w && w.getName() == name) {
      if (!found)
        found = w.getResult();
    } else if (auto c = dyn_cast<nn::ConstantOp>(op)) {
      if (getInitializerName(c->getLoc()) == name)
        embedded.push_back(c);
    }
  });
  for (Operation *op : embedded) {
    auto c = cast<nn::ConstantOp>(op);
    if (!found) {
      OpBuilder b(op);
      RankedTensorType type = c.getType();
      int64_t bytes = type.getNumElements() * (type.getElementTypeBitWidth() / 8);
      auto w = nn::WeightOp::create(b, c.getLoc(), type, b.getStringAttr(name),
                                    b.getStringAttr("protobuf"), StringAttr(), IntegerAttr(),
                                    b.getI64IntegerAttr(bytes), DenseI64ArrayAttr(),
                                    ArrayAttr(), DenseI64ArrayAttr());
      if (Attribute shape = c->getAttr("nn.model_shape"))
        w->setAttr("nn.model_shape", shape);
      found = w.getResult();
    }
    if (found.getType() != c.getType())
      return c.emitError("initializer '") << name << "' is read with two types";
    c.getResult().replaceAllUsesWith(found);
    c.erase();
  }
  if (!found)
    return fn.emitError("no initializer '") << name << "' in @" << fn.getName();
  return found;
}

Value shardflow::nn::sumAll(OpBuilder &b, Location loc, Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < type.getRank(); ++d)
    axes.push_back(d);
  if (axes.empty())
    return x;
  return nn::ReduceSumOp::create(b, loc, ValueRange{x},
                                 {b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
                                  b.getNamedAttr("keepdims", b.getBoolAttr(false))})
      ->getResult(0);
}

Value shardflow::nn::stepCounter(func::FuncOp fn) {
  Value found;
  fn.walk([&](nn::WeightOp w) {
    if (w.getName() == "optimizer.step" && w.getStorage() == "zeros")
      found = w.getResult();
  });
  if (found)
    return found;
  OpBuilder b = OpBuilder::atBlockBegin(&fn.getBody().front());
  return nn::WeightOp::create(b, NameLoc::get(b.getStringAttr("optimizer"), fn.getLoc()),
                              RankedTensorType::get({}, b.getF32Type()),
                              b.getStringAttr("optimizer.step"), b.getStringAttr("zeros"),
                              StringAttr(), IntegerAttr(), IntegerAttr(), DenseI64ArrayAttr(),
                              ArrayAttr(), DenseI64ArrayAttr());
}

void shardflow::nn::printTrainingReport(ModuleOp module, llvm::raw_ostream &os) {
  auto training = module->getAttrOfType<DictionaryAttr>("nn.training");
  if (!training)
    return;
  auto kind = [&](StringRef key) {
    auto d = training.getAs<DictionaryAttr>(key);
    return d ? d : DictionaryAttr::get(module.getContext());
  };
  auto total = [](DictionaryAttr d) {
    int64_t n = 0;
    for (NamedAttribute a : d)
      n += cast<IntegerAttr>(a.getValue()).getInt();
    return n;
  };
  DictionaryAttr trained = kind("trained"), frozen = kind("frozen"), held = kind("held");
  os << "training step: " << trained.size() << " initializers train (" << total(trained)
     << " parameters), " << frozen.size() << " frozen (" << total(frozen) << "), "
     << held.size() << " held (" << total(held)
     << "; no gradient reaches them, or running statistics: buffers)\n";
  for (auto [title, d] : {std::pair<StringRef, DictionaryAttr>("trains", trained),
                          {"frozen", frozen},
                          {"held", held}})
    for (NamedAttribute a : d)
      os << "  " << title << "  " << a.getName().getValue() << " ("
         << cast<IntegerAttr>(a.getValue()).getInt() << ")\n";
  for (NamedAttribute a : kind("tied"))
    os << "  tied    " << a.getName().getValue() << " = "
       << cast<StringAttr>(a.getValue()).getValue() << " (trains as one parameter)\n";
}
