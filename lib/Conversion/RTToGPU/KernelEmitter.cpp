//===- KernelEmitter.cpp - scalar code of fused kernels --------------------===//
//
// Generated code computes in f32 for f16/bf16/f32 data (f64 stays f64) and
// rounds once when it stores; integers follow the CPU kernels' semantics
// (wrapping, truncating division, the CPU's float-to-integer conversion).
//
//===----------------------------------------------------------------------===//

#include "KernelEmitter.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace shardflow;
using namespace shardflow::rtgpu;

int64_t shardflow::rtgpu::trailingExtent(ArrayRef<int64_t> to, ArrayRef<int64_t> from,
                                         bool matched) {
  if (from.size() > to.size())
    return 1;
  size_t offset = to.size() - from.size();
  int64_t extent = 1;
  for (size_t d = to.size(); d-- > 0;) {
    bool present = d >= offset;
    int64_t f = present ? from[d - offset] : 1;
    if (matched ? (!present || f != to[d]) : f != 1)
      break;
    extent *= to[d];
  }
  return extent;
}

llvm::Align shardflow::rtgpu::laneAlignment(Type t, int64_t lanes) {
  int64_t bytes = nn::getElementStorageBytes(t) * lanes;
  return llvm::Align(uint64_t(std::min(bytes, kVectorBytes)));
}

Value KernelEmitter::lane(Value base, int64_t i) {
  return i == 0 ? base : arith::AddIOp::create(b, loc, base, index(i)).getResult();
}

Lanes KernelEmitter::loadLanes(Value buf, ArrayRef<int64_t> to, ArrayRef<int64_t> from, Value base,
                               int64_t width) {
  Lanes out;
  if (width == 1) {
    out.push_back(load(buf, broadcastIndex(base, to, from)));
    return out;
  }
  if (trailingExtent(to, from, /*matched=*/true) % width == 0) {
    Type storage = elemOf(buf);
    Value v = vector::LoadOp::create(b, loc, VectorType::get({width}, storage), buf,
                                     ValueRange{broadcastIndex(base, to, from)},
                                     /*nontemporal=*/false, laneAlignment(storage, width));
    for (int64_t i = 0; i < width; ++i)
      out.push_back(toCompute(vector::ExtractOp::create(b, loc, v, i)));
    return out;
  }
  if (trailingExtent(to, from, /*matched=*/false) % width == 0) {
    out.assign(width, load(buf, broadcastIndex(base, to, from)));
    return out;
  }
  for (int64_t i = 0; i < width; ++i)
    out.push_back(load(buf, broadcastIndex(lane(base, i), to, from)));
  return out;
}

void KernelEmitter::storeLanes(ArrayRef<Value> lanes, Value buf, Value base) {
  if (lanes.size() == 1) {
    store(lanes[0], buf, base);
    return;
  }
  Type storage = cast<MemRefType>(buf.getType()).getElementType();
  SmallVector<Value> narrow;
  for (Value v : lanes)
    narrow.push_back(v.getType() == storage
                         ? v
                         : arith::TruncFOp::create(b, loc, storage, v).getResult());
  int64_t width = int64_t(lanes.size());
  Value v =
      vector::FromElementsOp::create(b, loc, VectorType::get({width}, storage), narrow);
  vector::StoreOp::create(b, loc, v, buf, ValueRange{base}, /*nontemporal=*/false,
                          laneAlignment(storage, width));
}

Value KernelEmitter::broadcastIndex(Value idx, ArrayRef<int64_t> to, ArrayRef<int64_t> from) {
  if (to == from)
    return idx;
  int64_t fromCount = 1;
  for (int64_t d : from)
    fromCount *= d;
  if (fromCount == 1)
    return index(0);
  // Walk dimensions from the innermost: coordinate = (idx / strideTo) % dim.
  Value result;
  int64_t strideTo = 1, strideFrom = 1;
  size_t offset = to.size() - from.size();
  for (size_t d = to.size(); d-- > 0;) {
    int64_t dim = to[d];
    bool present = d >= offset && from[d - offset] != 1;
    if (present && dim != 1) {
      Value coord = idx;
      if (strideTo != 1)
        coord = arith::DivUIOp::create(b, loc, coord, index(strideTo));
      // The outermost dimension needs no remainder.
      bool outermost = true;
      for (size_t e = 0; e < d; ++e)
        outermost &= to[e] == 1;
      if (!outermost)
        coord = arith::RemUIOp::create(b, loc, coord, index(dim));
      if (strideFrom != 1)
        coord = arith::MulIOp::create(b, loc, coord, index(strideFrom));
      result = result ? arith::AddIOp::create(b, loc, result, coord).getResult() : coord;
    }
    strideTo *= dim;
    if (d >= offset)
      strideFrom *= from[d - offset];
  }
  return result ? result : index(0);
}

Value KernelEmitter::truncToInt(Value x, Type storage) {
  Type f64 = b.getF64Type(), i32 = b.getI32Type(), i64 = b.getI64Type();
  if (x.getType() != f64)
    x = arith::ExtFOp::create(b, loc, f64, x);
  unsigned w = storage.getIntOrFloatBitWidth();
  bool wide = w == 64 || (storage.isUnsignedInteger() && w == 32);
  auto cmp = [&](arith::CmpFPredicate p, double c) {
    return arith::CmpFOp::create(b, loc, p, x, floatConst(f64, c)).getResult();
  };
  auto convert = [&](Value ok, Type t, bool isUnsigned) -> Value {
    Value safe = arith::SelectOp::create(b, loc, ok, x, floatConst(f64, 0.0));
    if (isUnsigned)
      return arith::FPToUIOp::create(b, loc, t, safe);
    return arith::FPToSIOp::create(b, loc, t, safe);
  };
  Value r;
  if (wide) {
    Value ok = arith::AndIOp::create(b, loc, cmp(arith::CmpFPredicate::OGE, -0x1p63),
                                     cmp(arith::CmpFPredicate::OLT, 0x1p63));
    r = arith::SelectOp::create(b, loc, ok, convert(ok, i64, false),
                                intConst(i64, std::numeric_limits<int64_t>::min()));
    if (storage.isUnsignedInteger() && w == 64) {
      Value big = arith::AndIOp::create(b, loc, cmp(arith::CmpFPredicate::OGE, 0x1p63),
                                        cmp(arith::CmpFPredicate::OLT, 0x1p64));
      Value high = arith::SelectOp::create(b, loc, big, convert(big, i64, true), this->i64(0));
      r = arith::SelectOp::create(b, loc, cmp(arith::CmpFPredicate::OGE, 0x1p63), high, r);
    }
  } else {
    Value ok = arith::AndIOp::create(b, loc, cmp(arith::CmpFPredicate::OGT, -2147483649.0),
                                     cmp(arith::CmpFPredicate::OLT, 2147483648.0));
    r = arith::SelectOp::create(b, loc, ok, convert(ok, i32, false),
                                intConst(i32, std::numeric_limits<int32_t>::min()));
  }
  Type t = signlessOf(storage);
  if (t.getIntOrFloatBitWidth() < r.getType().getIntOrFloatBitWidth())
    r = arith::TruncIOp::create(b, loc, t, r);
  return r;
}

/// y with 0 (after reporting `code` for its position) and, signed, -1
/// replaced by 1: what an integer division or remainder may divide by
/// without trapping (INT_MIN / -1). Also returns whether y was -1.
std::pair<Value, Value> KernelEmitter::safeDivisor(Value y, bool isUnsigned, Value idx,
                                                   StatusCode code) {
  Type t = y.getType();
  Value one = intConst(t, 1), zero = intConst(t, 0);
  reportUnless(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, y, zero),
               arith::IndexCastOp::create(b, loc, b.getI64Type(), idx), code);
  Value byZero = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, y, zero);
  if (isUnsigned)
    return {arith::SelectOp::create(b, loc, byZero, one, y), Value()};
  Value byMinusOne = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, y, intConst(t, -1));
  Value safe = arith::SelectOp::create(
      b, loc, arith::OrIOp::create(b, loc, byZero, byMinusOne), one, y);
  return {safe, byMinusOne};
}

Value KernelEmitter::intDiv(Value x, Value y, bool isUnsigned, Value idx) {
  auto [safe, byMinusOne] = safeDivisor(y, isUnsigned, idx, kDivisionByZero);
  if (isUnsigned)
    return arith::DivUIOp::create(b, loc, x, safe);
  Value zero = intConst(x.getType(), 0);
  return arith::SelectOp::create(b, loc, byMinusOne, arith::SubIOp::create(b, loc, zero, x),
                                 arith::DivSIOp::create(b, loc, x, safe));
}

/// The remainder with the dividend's sign (fmod) or the divisor's (the
/// remainder by -1 is 0, computed as that by 1).
Value KernelEmitter::intMod(Value x, Value y, bool isUnsigned, bool fmod, Value idx) {
  Value safe = safeDivisor(y, isUnsigned, idx, kModuloByZero).first;
  if (isUnsigned)
    return arith::RemUIOp::create(b, loc, x, safe);
  Value r = arith::RemSIOp::create(b, loc, x, safe);
  if (fmod)
    return r;
  // Python's %: a non-zero remainder whose sign differs from the divisor's
  // moves by one divisor.
  Value zero = intConst(x.getType(), 0);
  Value nonZero = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, r, zero);
  Value rNeg = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, r, zero);
  Value yNeg = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, y, zero);
  Value adjust = arith::AndIOp::create(b, loc, nonZero, arith::XOrIOp::create(b, loc, rNeg, yNeg));
  return arith::SelectOp::create(b, loc, adjust, arith::AddIOp::create(b, loc, r, y), r);
}

Value KernelEmitter::intPow(Value x, Value y, Type baseStorage, Type expStorage) {
  Type t = x.getType(), f64 = b.getF64Type(), i64t = b.getI64Type();
  bool baseUnsigned = baseStorage.isUnsignedInteger();
  if (isa<FloatType>(y.getType())) {
    Value xd = baseUnsigned ? arith::UIToFPOp::create(b, loc, f64, x).getResult()
                            : arith::SIToFPOp::create(b, loc, f64, x).getResult();
    Value yd = y.getType() == f64 ? y : arith::ExtFOp::create(b, loc, f64, y).getResult();
    // libdevice's pow is not correctly rounded: pow(3, 1) and pow(9, 0.5)
    // come out as 3 - 2^-51, which truncation would make 2. A result within
    // a few ulps of an integer is taken as that integer (what the exact
    // power is, for integer bases), any other one truncated, as ONNX says.
    Value p = math::PowFOp::create(b, loc, xd, yd);
    Value nearest = math::RoundOp::create(b, loc, p);
    Value off = math::AbsFOp::create(b, loc, arith::SubFOp::create(b, loc, p, nearest));
    Value ulps = arith::MulFOp::create(b, loc, math::AbsFOp::create(b, loc, nearest),
                                       arith::ConstantOp::create(b, loc, b.getF64FloatAttr(0x1p-50)));
    Value close = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, off, ulps);
    return truncToInt(arith::SelectOp::create(b, loc, close, nearest, p), baseStorage);
  }
  bool expUnsigned = expStorage.isUnsignedInteger() || expStorage.isInteger(1);
  unsigned ew = y.getType().getIntOrFloatBitWidth();
  Value e = y;
  if (ew < 64)
    e = expUnsigned ? arith::ExtUIOp::create(b, loc, i64t, y).getResult()
                    : arith::ExtSIOp::create(b, loc, i64t, y).getResult();
  // One round per exponent bit: r *= p where the bit is set, p *= p.
  auto loop = scf::ForOp::create(b, loc, index(0), index(ew), index(1),
                                 ValueRange{intConst(t, 1), x});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value r = loop.getRegionIterArgs()[0], p = loop.getRegionIterArgs()[1];
    Value shift = arith::IndexCastOp::create(b, loc, i64t, loop.getInductionVar());
    Value bit = arith::TruncIOp::create(b, loc, b.getI1Type(),
                                        arith::ShRUIOp::create(b, loc, e, shift));
    Value next = arith::SelectOp::create(b, loc, bit, arith::MulIOp::create(b, loc, r, p), r);
    scf::YieldOp::create(b, loc, ValueRange{next, arith::MulIOp::create(b, loc, p, p)});
  }
  Value r = loop.getResult(0);
  if (expUnsigned)
    return r;
  // A negative exponent: 1 for x = 1, +-1 for x = -1 (signed), else 0.
  Value one = intConst(t, 1);
  Value isOne = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x, one);
  Value negResult = arith::SelectOp::create(b, loc, isOne, one, intConst(t, 0));
  if (!baseUnsigned) {
    Value isMinusOne = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x,
                                             intConst(t, -1));
    Value odd = arith::TruncIOp::create(b, loc, b.getI1Type(), e);
    Value sign = arith::SelectOp::create(b, loc, odd, intConst(t, -1), one);
    negResult = arith::SelectOp::create(b, loc, isMinusOne, sign, negResult);
  }
  Value negative = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, e, i64(0));
  return arith::SelectOp::create(b, loc, negative, negResult, r);
}

Value KernelEmitter::intClip(Value x, Type storage, DictionaryAttr params) {
  unsigned w = storage.getIntOrFloatBitWidth();
  bool isUnsigned = storage.isUnsignedInteger();
  int64_t minI, maxI; // bit patterns
  double minD, maxD;
  if (isUnsigned) {
    uint64_t m = w == 64 ? ~uint64_t(0) : (uint64_t(1) << w) - 1;
    minI = 0, maxI = int64_t(m), minD = 0, maxD = double(m);
  } else {
    minI = w == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (w - 1));
    maxI = w == 64 ? std::numeric_limits<int64_t>::max() : (int64_t(1) << (w - 1)) - 1;
    minD = double(minI), maxD = double(maxI);
  }
  auto bound = [&](double v) -> int64_t {
    if (v <= minD)
      return minI;
    if (v >= maxD)
      return maxI;
    return isUnsigned ? int64_t(uint64_t(v)) : int64_t(v);
  };
  // The constant's bits in the signless type of width w.
  auto constant = [&](int64_t bits) {
    if (w < 64)
      bits = int64_t(uint64_t(bits) << (64 - w)) >> (64 - w);
    return intConst(x.getType(), bits);
  };
  // r = bound where r lies beyond it (below the min, above the max).
  Value r = x;
  auto clampTo = [&](StringRef param, bool isMin) {
    auto attr = dyn_cast_or_null<FloatAttr>(params.get(param));
    if (!attr || std::isnan(attr.getValueAsDouble()))
      return;
    double v = attr.getValueAsDouble();
    Value limit = constant(bound(isMin ? std::ceil(v) : std::floor(v)));
    auto pred = isMin ? (isUnsigned ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt)
                      : (isUnsigned ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt);
    Value beyond = arith::CmpIOp::create(b, loc, pred, r, limit);
    r = arith::SelectOp::create(b, loc, beyond, limit, r);
  };
  clampTo("min", /*isMin=*/true);
  clampTo("max", /*isMin=*/false);
  return r;
}

FailureOr<Value> KernelEmitter::elementwise(rt::KernelOp k, ArrayRef<Value> in, Value idx) {
  StringRef name = k.getKernel();
  DictionaryAttr params = k.getParams();
  Type outStorage = elemOf(k.getOutputs()[0]);
  Type ct = computeType(outStorage);
  auto isFloat = [](Value v) { return isa<FloatType>(v.getType()); };
  auto storageOf = [&](size_t i) {
    return i < k.getInputs().size() ? elemOf(k.getInputs()[i]) : outStorage;
  };
  bool isUnsigned = storageOf(0).isUnsignedInteger();
  auto fail = [&](const Twine &why) -> FailureOr<Value> {
    return k.emitOpError("cannot be generated for CUDA: ") << why, failure();
  };
  if (name == "add" || name == "sub" || name == "mul" || name == "div" || name == "min" ||
      name == "max" || name == "pow") {
    Value x = in[0], y = in[1];
    if (isFloat(x)) {
      if (name == "add")
        return arith::AddFOp::create(b, loc, x, y).getResult();
      if (name == "sub")
        return arith::SubFOp::create(b, loc, x, y).getResult();
      if (name == "mul")
        return arith::MulFOp::create(b, loc, x, y).getResult();
      if (name == "div")
        return arith::DivFOp::create(b, loc, x, y).getResult();
      if (name == "min")
        return arith::MinimumFOp::create(b, loc, x, y).getResult();
      if (name == "max")
        return arith::MaximumFOp::create(b, loc, x, y).getResult();
      // Pow's exponent may be of another type (an integer, a wider float).
      if (!isFloat(y))
        y = y.getType().isInteger(1) || storageOf(1).isUnsignedInteger()
                ? arith::UIToFPOp::create(b, loc, x.getType(), y).getResult()
                : arith::SIToFPOp::create(b, loc, x.getType(), y).getResult();
      else if (y.getType() != x.getType())
        y = y.getType().getIntOrFloatBitWidth() > x.getType().getIntOrFloatBitWidth()
                ? arith::TruncFOp::create(b, loc, x.getType(), y).getResult()
                : arith::ExtFOp::create(b, loc, x.getType(), y).getResult();
      return math::PowFOp::create(b, loc, x, y).getResult();
    }
    if (x.getType().isInteger(1))
      return fail("boolean arithmetic");
    if (name == "add")
      return arith::AddIOp::create(b, loc, x, y).getResult();
    if (name == "sub")
      return arith::SubIOp::create(b, loc, x, y).getResult();
    if (name == "mul")
      return arith::MulIOp::create(b, loc, x, y).getResult();
    if (name == "min")
      return isUnsigned ? arith::MinUIOp::create(b, loc, x, y).getResult()
                        : arith::MinSIOp::create(b, loc, x, y).getResult();
    if (name == "max")
      return isUnsigned ? arith::MaxUIOp::create(b, loc, x, y).getResult()
                        : arith::MaxSIOp::create(b, loc, x, y).getResult();
    if (name == "div")
      return intDiv(x, y, isUnsigned, idx);
    return intPow(x, y, storageOf(0), storageOf(1));
  }
  if (name == "mod") {
    Value x = in[0], y = in[1];
    auto fmodAttr = dyn_cast_or_null<BoolAttr>(params.get("fmod"));
    bool fmod = fmodAttr && fmodAttr.getValue();
    if (isFloat(x)) {
      if (!fmod)
        return fail("a float remainder needs fmod");
      return arith::RemFOp::create(b, loc, x, y).getResult();
    }
    if (x.getType().isInteger(1))
      return fail("boolean arithmetic");
    return intMod(x, y, isUnsigned, fmod, idx);
  }
  if (name == "equal" || name == "less" || name == "greater") {
    Value x = in[0], y = in[1];
    if (isFloat(x)) {
      auto pred = name == "equal"  ? arith::CmpFPredicate::OEQ
                  : name == "less" ? arith::CmpFPredicate::OLT
                                   : arith::CmpFPredicate::OGT;
      return arith::CmpFOp::create(b, loc, pred, x, y).getResult();
    }
    auto pred = name == "equal" ? arith::CmpIPredicate::eq
                : name == "less"
                    ? (isUnsigned ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt)
                    : (isUnsigned ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt);
    return arith::CmpIOp::create(b, loc, pred, x, y).getResult();
  }
  if (name == "and")
    return arith::AndIOp::create(b, loc, in[0], in[1]).getResult();
  if (name == "not")
    return arith::XOrIOp::create(b, loc, in[0],
                                 arith::ConstantOp::create(b, loc, b.getBoolAttr(true)))
        .getResult();
  if (name == "where")
    return arith::SelectOp::create(b, loc, in[0], in[1], in[2]).getResult();
  if (name == "identity" || name == "dropout")
    return in[0];
  if (name == "gelu_grad") {
    // result_grad * gelu'(input), the CPU kernel's arithmetic.
    Value x = in[0], dy = in[1];
    if (!isFloat(x))
      return fail("gelu_grad needs float data");
    Type ft = x.getType();
    auto c = [&](double v) { return floatConst(ft, v); };
    auto mul = [&](Value a, Value b2) { return arith::MulFOp::create(b, loc, a, b2).getResult(); };
    auto add = [&](Value a, Value b2) { return arith::AddFOp::create(b, loc, a, b2).getResult(); };
    auto approx = dyn_cast_or_null<StringAttr>(params.get("approximate"));
    Value d;
    if (approx && approx.getValue() == "tanh") {
      const double k = 0.044715, sq = std::sqrt(2.0 / M_PI);
      Value x2 = mul(x, x);
      Value th = math::TanhOp::create(b, loc, mul(c(sq), add(x, mul(c(k), mul(x2, x)))));
      Value left = mul(c(0.5), add(c(1.0), th));
      Value du = mul(c(sq), add(c(1.0), mul(c(3 * k), x2)));
      Value sech2 = arith::SubFOp::create(b, loc, c(1.0), mul(th, th));
      d = add(left, mul(mul(c(0.5), x), mul(sech2, du)));
    } else {
      Value cdf = mul(c(0.5), add(c(1.0), math::ErfOp::create(b, loc, mul(x, c(M_SQRT1_2)))));
      Value pdf = mul(c(0.39894228040143267794),
                      math::ExpOp::create(b, loc, mul(c(-0.5), mul(x, x))));
      d = add(cdf, mul(x, pdf));
    }
    return mul(dy, d);
  }
  if (name == "softmax_cross_entropy_grad") {
    // (exp(x - lse) - [label == class]) * dy, 0 where the label is the
    // ignored one: the CPU kernel's arithmetic.
    Value x = in[0], lse = in[1], label = in[2], cls = in[3], dy = in[4];
    auto ignore = dyn_cast_or_null<IntegerAttr>(params.get("ignore_index"));
    if (!isFloat(x) || !ignore || !label.getType().isInteger(64))
      return fail("softmax_cross_entropy_grad needs float logits, int64 labels and ignore_index");
    Type ft = x.getType();
    Value p = math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, x, lse));
    Value hit = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, label, cls);
    Value shifted = arith::SelectOp::create(
        b, loc, hit, arith::SubFOp::create(b, loc, p, floatConst(ft, 1.0)), p);
    Value d = arith::MulFOp::create(b, loc, shifted, dy);
    Value ignored = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq, label,
        arith::ConstantOp::create(b, loc, b.getI64Type(), b.getI64IntegerAttr(ignore.getInt())));
    return arith::SelectOp::create(b, loc, ignored, floatConst(ft, 0.0), d).getResult();
  }
  if (name == "masked_scale") {
    // x * scale where the mask holds, 0 elsewhere (training dropout).
    auto scale = dyn_cast_or_null<FloatAttr>(params.get("scale"));
    if (!scale || !isFloat(in[0]))
      return fail("masked_scale needs float data and a scale");
    Value scaled = arith::MulFOp::create(b, loc, in[0], floatConst(ct, scale.getValueAsDouble()));
    return arith::SelectOp::create(b, loc, in[1], scaled, floatConst(ct, 0.0)).getResult();
  }
  if (name == "range") {
    // start + i * delta: in f64 for floats, in integers for integers.
    auto start = dyn_cast_or_null<FloatAttr>(params.get("start"));
    auto delta = dyn_cast_or_null<FloatAttr>(params.get("delta"));
    if (!start || !delta)
      return fail("range without start and delta");
    Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), idx);
    if (isa<FloatType>(ct)) {
      Type f64 = b.getF64Type();
      Value v = arith::AddFOp::create(
          b, loc, floatConst(f64, start.getValueAsDouble()),
          arith::MulFOp::create(b, loc, arith::SIToFPOp::create(b, loc, f64, i64),
                                floatConst(f64, delta.getValueAsDouble())));
      if (ct == f64)
        return v;
      return toCompute(arith::TruncFOp::create(b, loc, outStorage, v));
    }
    auto i64Const = [&](double v) {
      return arith::ConstantOp::create(b, loc, b.getI64Type(),
                                       b.getI64IntegerAttr(int64_t(v)));
    };
    Value v = arith::AddIOp::create(
        b, loc, i64Const(start.getValueAsDouble()),
        arith::MulIOp::create(b, loc, i64, i64Const(delta.getValueAsDouble())));
    if (ct.getIntOrFloatBitWidth() < 64)
      v = arith::TruncIOp::create(b, loc, ct, v);
    return v;
  }
  if (name == "trilu") {
    // upper keeps column j >= row i + k; lower keeps j <= i + k.
    ArrayRef<int64_t> shape = shapeOf(k.getOutputs()[0]);
    if (shape.size() < 2)
      return fail("trilu needs rank 2 or more");
    int64_t rows = shape[shape.size() - 2], cols = shape[shape.size() - 1];
    auto upper = dyn_cast_or_null<BoolAttr>(params.get("upper"));
    auto kAttr = dyn_cast_or_null<IntegerAttr>(params.get("k"));
    Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), idx);
    auto c = [&](int64_t v) {
      return arith::ConstantOp::create(b, loc, b.getI64Type(), b.getI64IntegerAttr(v));
    };
    Value col = arith::RemSIOp::create(b, loc, i64, c(cols));
    Value row = arith::RemSIOp::create(b, loc, arith::DivSIOp::create(b, loc, i64, c(cols)),
                                       c(rows));
    Value diag = arith::AddIOp::create(b, loc, row, c(kAttr ? kAttr.getInt() : 0));
    bool isUpper = !upper || upper.getValue();
    Value keep = arith::CmpIOp::create(
        b, loc, isUpper ? arith::CmpIPredicate::sge : arith::CmpIPredicate::sle, col, diag);
    Type t = in[0].getType();
    Value zero = isa<FloatType>(t) ? floatConst(t, 0.0)
                                   : arith::ConstantOp::create(b, loc, t,
                                                               b.getIntegerAttr(t, 0))
                                         .getResult();
    return arith::SelectOp::create(b, loc, keep, in[0], zero).getResult();
  }
  if (name == "constant_of_shape") {
    auto value = dyn_cast_or_null<TypedAttr>(params.get("value"));
    if (!value)
      return fail("no fill value");
    double v = 0;
    if (auto f = dyn_cast<FloatAttr>(value))
      v = f.getValueAsDouble();
    else if (auto i = dyn_cast<IntegerAttr>(value)) {
      if (!isa<FloatType>(ct))
        return arith::ConstantOp::create(b, loc, ct, b.getIntegerAttr(ct, i.getInt()))
            .getResult();
      v = double(i.getInt());
    } else if (auto d = dyn_cast<DenseElementsAttr>(value)) {
      if (!d.isSplat())
        return fail("a fill value that is not a scalar");
      if (isa<FloatType>(d.getElementType()))
        v = d.getSplatValue<APFloat>().convertToDouble();
      else {
        int64_t iv = d.getSplatValue<APInt>().getSExtValue();
        if (!isa<FloatType>(ct))
          return arith::ConstantOp::create(b, loc, ct, b.getIntegerAttr(ct, iv)).getResult();
        v = double(iv);
      }
    } else
      return fail("an unknown fill value");
    if (!isa<FloatType>(ct))
      return arith::ConstantOp::create(b, loc, ct, b.getIntegerAttr(ct, int64_t(v)))
          .getResult();
    return floatConst(ct, v);
  }
  if (name == "cast") {
    Value x = in[0];
    Type from = x.getType();
    bool fromFloat = isa<FloatType>(from), toFloat = isa<FloatType>(ct);
    if (fromFloat && toFloat) {
      // A cast to a narrower float rounds even inside a fused kernel,
      // where the value then goes on in the compute type.
      if (outStorage != ct) {
        Value narrow = outStorage.getIntOrFloatBitWidth() < from.getIntOrFloatBitWidth()
                           ? arith::TruncFOp::create(b, loc, outStorage, x).getResult()
                           : arith::ExtFOp::create(b, loc, outStorage, x).getResult();
        return toCompute(narrow);
      }
      if (from == ct)
        return x;
      return from.getIntOrFloatBitWidth() < ct.getIntOrFloatBitWidth()
                 ? arith::ExtFOp::create(b, loc, ct, x).getResult()
                 : arith::TruncFOp::create(b, loc, ct, x).getResult();
    }
    if (from == ct)
      return x;
    bool zeroExtend = from.isInteger(1) || isUnsigned;
    if (!fromFloat && toFloat)
      return zeroExtend ? arith::UIToFPOp::create(b, loc, ct, x).getResult()
                        : arith::SIToFPOp::create(b, loc, ct, x).getResult();
    if (fromFloat && ct.isInteger(1))
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, x,
                                   floatConst(from, 0.0))
          .getResult();
    if (fromFloat)
      return truncToInt(x, outStorage);
    if (ct.isInteger(1))
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, x,
                                   arith::ConstantOp::create(b, loc, from,
                                                             b.getIntegerAttr(from, 0)))
          .getResult();
    unsigned fw = from.getIntOrFloatBitWidth(), tw = ct.getIntOrFloatBitWidth();
    if (fw < tw)
      return zeroExtend ? arith::ExtUIOp::create(b, loc, ct, x).getResult()
                        : arith::ExtSIOp::create(b, loc, ct, x).getResult();
    return arith::TruncIOp::create(b, loc, ct, x).getResult();
  }
  // Unary operations.
  Value x = in[0];
  if (!isFloat(x)) {
    Value zero = arith::ConstantOp::create(b, loc, x.getType(), b.getIntegerAttr(x.getType(), 0));
    if (name == "neg")
      return arith::SubIOp::create(b, loc, zero, x).getResult();
    if ((name == "abs" || name == "relu") && isUnsigned)
      return x;
    if (name == "abs")
      return math::AbsIOp::create(b, loc, x).getResult();
    if (name == "relu")
      return arith::MaxSIOp::create(b, loc, x, zero).getResult();
    if (name == "clip")
      return intClip(x, storageOf(0), params);
    return fail("integer " + name);
  }
  Type ft = x.getType();
  Value one = floatConst(ft, 1.0), zero = floatConst(ft, 0.0);
  if (name == "sqrt")
    return math::SqrtOp::create(b, loc, x).getResult();
  if (name == "exp")
    return math::ExpOp::create(b, loc, x).getResult();
  if (name == "log")
    return math::LogOp::create(b, loc, x).getResult();
  if (name == "tanh")
    return math::TanhOp::create(b, loc, x).getResult();
  if (name == "erf")
    return math::ErfOp::create(b, loc, x).getResult();
  if (name == "cos")
    return math::CosOp::create(b, loc, x).getResult();
  if (name == "sin")
    return math::SinOp::create(b, loc, x).getResult();
  if (name == "floor")
    return math::FloorOp::create(b, loc, x).getResult();
  if (name == "ceil")
    return math::CeilOp::create(b, loc, x).getResult();
  if (name == "round")
    return math::RoundEvenOp::create(b, loc, x).getResult();
  if (name == "reciprocal")
    return arith::DivFOp::create(b, loc, one, x).getResult();
  if (name == "neg")
    return arith::NegFOp::create(b, loc, x).getResult();
  if (name == "abs")
    return math::AbsFOp::create(b, loc, x).getResult();
  if (name == "relu") {
    // relu(NaN) is NaN: select on x > 0 would give 0.
    Value neg = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x, zero);
    return arith::SelectOp::create(b, loc, neg, zero, x).getResult();
  }
  if (name == "sigmoid") {
    Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x));
    return arith::DivFOp::create(b, loc, one, arith::AddFOp::create(b, loc, one, e))
        .getResult();
  }
  if (name == "leaky_relu") {
    auto alpha = dyn_cast_or_null<FloatAttr>(params.get("alpha"));
    Value a = floatConst(ft, alpha ? alpha.getValueAsDouble() : 0.01);
    Value neg = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x, zero);
    return arith::SelectOp::create(b, loc, neg, arith::MulFOp::create(b, loc, a, x), x)
        .getResult();
  }
  if (name == "gelu") {
    auto approx = dyn_cast_or_null<StringAttr>(params.get("approximate"));
    Value half = floatConst(ft, 0.5);
    Value inner;
    if (approx && approx.getValue() == "tanh") {
      // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      Value x3 = arith::MulFOp::create(b, loc, x, arith::MulFOp::create(b, loc, x, x));
      Value poly = arith::AddFOp::create(
          b, loc, x, arith::MulFOp::create(b, loc, floatConst(ft, 0.044715), x3));
      Value arg = arith::MulFOp::create(b, loc, floatConst(ft, std::sqrt(2.0 / M_PI)), poly);
      inner = math::TanhOp::create(b, loc, arg);
    } else {
      // 0.5 x (1 + erf(x / sqrt(2)))
      inner = math::ErfOp::create(
          b, loc, arith::MulFOp::create(b, loc, x, floatConst(ft, M_SQRT1_2)));
    }
    Value t = arith::AddFOp::create(b, loc, one, inner);
    return arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, half, x), t)
        .getResult();
  }
  if (name == "clip") {
    // min(max(x, lo), hi); NaN stays NaN; lo > hi gives hi.
    Value r = x;
    if (auto lo = dyn_cast_or_null<FloatAttr>(params.get("min"))) {
      Value l = floatConst(ft, lo.getValueAsDouble());
      Value below = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, r, l);
      r = arith::SelectOp::create(b, loc, below, l, r);
    }
    if (auto hi = dyn_cast_or_null<FloatAttr>(params.get("max"))) {
      Value h = floatConst(ft, hi.getValueAsDouble());
      Value above = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, r, h);
      r = arith::SelectOp::create(b, loc, above, h, r);
    }
    return r;
  }
  return fail("no code generation for '" + name + "'");
}

FailureOr<Value> KernelEmitter::rotary(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx) {
  DictionaryAttr params = k.getParams();
  Value x = k.getInputs()[0], cosCache = k.getInputs()[1], sinCache = k.getInputs()[2];
  Value pos = k.getInputs().size() > 3 ? k.getInputs()[3] : Value();
  ArrayRef<int64_t> shape = shapeOf(x);
  auto intParam = [&](StringRef n) {
    auto a = dyn_cast_or_null<IntegerAttr>(params.get(n));
    return a ? a.getInt() : int64_t(0);
  };
  auto interleavedAttr = dyn_cast_or_null<BoolAttr>(params.get("interleaved"));
  bool interleaved = interleavedAttr && interleavedAttr.getValue();
  int64_t heads, seq, dim; // the batch index is what remains of idx
  bool fourD = shape.size() == 4;
  if (fourD) {
    heads = shape[1], seq = shape[2], dim = shape[3];
  } else if (shape.size() == 3 && intParam("num_heads") > 0 &&
             shape[2] % intParam("num_heads") == 0) {
    seq = shape[1], heads = intParam("num_heads");
    dim = shape[2] / heads;
  } else {
    return k.emitOpError("rotary_embedding needs [B, H, S, D], or [B, S, H*D] with "
                         "num_heads"),
           failure();
  }
  int64_t rot = intParam("rotary_embedding_dim");
  if (rot == 0)
    rot = dim;
  if (rot < 0 || rot > dim || rot % 2)
    return k.emitOpError("rotary_embedding_dim must be even and at most the head size"),
           failure();
  int64_t half = rot / 2;
  int64_t positions = numel(cosCache) / std::max<int64_t>(half, 1);
  auto div = [&](Value v, int64_t by) { return arith::DivUIOp::create(b, loc, v, index(by)); };
  auto rem = [&](Value v, int64_t by) { return arith::RemUIOp::create(b, loc, v, index(by)); };
  Value d = rem(idx, dim);
  Value s, bIdx;
  if (fourD) {
    s = rem(div(idx, dim), seq);
    bIdx = div(idx, dim * seq * heads);
  } else {
    s = rem(div(idx, dim * heads), seq);
    bIdx = div(idx, dim * heads * seq);
  }
  Value row = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, bIdx, index(seq)), s);
  Value p = row;
  if (pos) {
    Value id = indexValue(memref::LoadOp::create(b, loc, args.lookup(pos), ValueRange{row}));
    Value ok = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, i64(0)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id, i64(positions)));
    reportUnless(ok, id);
    p = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                   arith::SelectOp::create(b, loc, ok, id, i64(0)));
  }
  Value xv = load(args.lookup(x), idx);
  Value inRot = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, d, index(rot));
  // j: the cache column; first: whether this is the first of its pair.
  Value j, first, partner;
  if (interleaved) {
    j = div(d, 2);
    first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rem(d, 2), index(0));
    partner = arith::SelectOp::create(b, loc, first,
                                      arith::AddIOp::create(b, loc, idx, index(1)),
                                      arith::SubIOp::create(b, loc, idx, index(1)));
  } else {
    first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, d, index(half));
    j = arith::SelectOp::create(b, loc, first, d, arith::SubIOp::create(b, loc, d, index(half)));
    partner = arith::SelectOp::create(b, loc, first,
                                      arith::AddIOp::create(b, loc, idx, index(half)),
                                      arith::SubIOp::create(b, loc, idx, index(half)));
  }
  // Outside the rotated features every index stays in range: use idx.
  Value safeJ = arith::SelectOp::create(b, loc, inRot, j, index(0));
  Value safePartner = arith::SelectOp::create(b, loc, inRot, partner, idx);
  Value cacheIdx = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, p, index(half)),
                                         safeJ);
  Value c = load(args.lookup(cosCache), cacheIdx);
  Value sn = load(args.lookup(sinCache), cacheIdx);
  Value other = load(args.lookup(x), safePartner);
  // first: c x - s partner; second: s partner + c x.
  Value cx = arith::MulFOp::create(b, loc, c, xv);
  Value sp = arith::MulFOp::create(b, loc, sn, other);
  Value rotated = arith::SelectOp::create(b, loc, first, arith::SubFOp::create(b, loc, cx, sp),
                                          arith::AddFOp::create(b, loc, sp, cx));
  return arith::SelectOp::create(b, loc, inRot, rotated, xv).getResult();
}

FailureOr<Value> KernelEmitter::rotateHalf(rt::KernelOp k, DenseMap<Value, Value> &args,
                                           Value idx) {
  Value x = k.getInputs()[0];
  ArrayRef<int64_t> shape = shapeOf(x);
  if (shape.empty() || shape.back() % 2)
    return k.emitOpError("rotate_half needs an even last dimension"), failure();
  int64_t half = shape.back() / 2;
  Value d = arith::RemUIOp::create(b, loc, idx, index(shape.back()));
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, d, index(half));
  Value partner = arith::SelectOp::create(b, loc, first,
                                          arith::AddIOp::create(b, loc, idx, index(half)),
                                          arith::SubIOp::create(b, loc, idx, index(half)));
  Value v = load(args.lookup(x), partner);
  return arith::SelectOp::create(b, loc, first, arith::NegFOp::create(b, loc, v), v)
      .getResult();
}

FailureOr<Value> KernelEmitter::keyedDropout(rt::KernelOp k, DenseMap<Value, Value> &args,
                                             Value idx) {
  Value x = k.getInputs()[0], step = k.getInputs()[1];
  ArrayRef<int64_t> shape = shapeOf(x);
  int64_t dims = shape.size();
  auto ratioAttr = dyn_cast_or_null<FloatAttr>(k.getParam("ratio"));
  auto seedAttr = dyn_cast_or_null<IntegerAttr>(k.getParam("seed"));
  auto idAttr = dyn_cast_or_null<IntegerAttr>(k.getParam("dropout_id"));
  auto globalAttr = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam("global_shape"));
  Type elem = elemOf(x);
  if (!ratioAttr || !seedAttr || !idAttr || !isa<FloatType>(elem))
    return k.emitOpError("keyed_dropout needs float data, a ratio, a seed and a dropout_id"),
           failure();
  float ratio = float(ratioAttr.getValueAsDouble());
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return k.emitOpError("keyed_dropout ratio ") << ratio << " is outside [0, 1)", failure();
  SmallVector<int64_t> global(shape);
  if (globalAttr) {
    if (int64_t(globalAttr.size()) != dims)
      return k.emitOpError("keyed_dropout global_shape must have the input's rank"), failure();
    global.assign(globalAttr.asArrayRef().begin(), globalAttr.asArrayRef().end());
  }
  bool hasStarts = k.getInputs().size() > 2;
  if (k.getParam("starts") && !hasStarts)
    return k.emitOpError("keyed_dropout with per-rank starts needs this rank's start as its "
                         "third input (cuda-keyed-dropout-starts)"),
           failure();
  Type i32 = b.getI32Type(), i64t = b.getI64Type();
  auto c32 = [&](uint32_t v) { return intConst(i32, int64_t(int32_t(v))); };
  // The element's index in the whole tensor (i64).
  Value e;
  if (!globalAttr) {
    e = arith::IndexCastOp::create(b, loc, i64t, idx);
  } else {
    SmallVector<Value> coords = delinearize(idx, shape);
    e = i64(0);
    int64_t stride = 1;
    SmallVector<int64_t> strides(dims, 1);
    for (int64_t d = dims - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= global[d];
    }
    for (int64_t d = 0; d < dims; ++d) {
      Value c = arith::IndexCastOp::create(b, loc, i64t, coords[d]);
      if (hasStarts) {
        Value start = memref::LoadOp::create(b, loc, args.lookup(k.getInputs()[2]),
                                             ValueRange{index(d)});
        c = arith::AddIOp::create(b, loc, c, start);
      }
      e = arith::AddIOp::create(b, loc, e, arith::MulIOp::create(b, loc, c, i64(strides[d])));
    }
  }
  Value block = arith::ShRUIOp::create(b, loc, e, i64(2));
  Value stepF = memref::LoadOp::create(b, loc, args.lookup(step), ValueRange{index(0)});
  SmallVector<Value, 4> c{
      arith::TruncIOp::create(b, loc, i32, block),
      arith::TruncIOp::create(b, loc, i32, arith::ShRUIOp::create(b, loc, block, i64(32))),
      arith::FPToUIOp::create(b, loc, i32, stepF), c32(uint32_t(idAttr.getInt()))};
  // Philox4x32-10 with the seed's words as the key (known here: the round
  // keys are constants).
  uint64_t seed = uint64_t(seedAttr.getInt());
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    auto p0 = arith::MulUIExtendedOp::create(b, loc, c32(0xD2511F53u), c[0]);
    auto p1 = arith::MulUIExtendedOp::create(b, loc, c32(0xCD9E8D57u), c[2]);
    auto xor3 = [&](Value a, Value m, uint32_t key) {
      return arith::XOrIOp::create(b, loc, arith::XOrIOp::create(b, loc, a, m), c32(key))
          .getResult();
    };
    c = {xor3(p1.getHigh(), c[1], k0), p1.getLow(), xor3(p0.getHigh(), c[3], k1), p0.getLow()};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // Word e mod 4, its top 24 bits over 2^24.
  Value which = arith::TruncIOp::create(b, loc, i32, arith::AndIOp::create(b, loc, e, i64(3)));
  Value word = c[3];
  for (int w = 2; w >= 0; --w)
    word = arith::SelectOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, which, c32(uint32_t(w))),
        c[w], word);
  Type f32 = b.getF32Type();
  Value u = arith::MulFOp::create(
      b, loc, arith::UIToFPOp::create(b, loc, f32, arith::ShRUIOp::create(b, loc, word, c32(8))),
      floatConst(f32, 1.0 / 16777216.0));
  Value keep = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, u, floatConst(f32, ratio));
  // The scale as the CPU kernel computes it: 1 / (1 - ratio) in the
  // element type.
  const llvm::fltSemantics &sem = cast<FloatType>(elem).getFloatSemantics();
  bool lost;
  APFloat r{ratio}, one{1.0};
  r.convert(sem, APFloat::rmNearestTiesToEven, &lost);
  one.convert(sem, APFloat::rmNearestTiesToEven, &lost);
  APFloat denominator = one;
  denominator.subtract(r, APFloat::rmNearestTiesToEven);
  APFloat scale = one;
  scale.divide(denominator, APFloat::rmNearestTiesToEven);
  Value xv = load(args.lookup(x), idx);
  Type ct = xv.getType();
  Value scaled = arith::MulFOp::create(b, loc, xv, floatConst(ct, scale.convertToDouble()));
  return arith::SelectOp::create(b, loc, keep, scaled, floatConst(ct, 0.0)).getResult();
}

FailureOr<Value> KernelEmitter::batchNorm(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx,
                                          Value fused) {
  ArrayRef<int64_t> shape = shapeOf(k.getInputs()[0]);
  if (shape.size() < 2)
    return k.emitOpError("batch_normalization needs [N, C, ...]"), failure();
  int64_t spatial = 1;
  for (int64_t d : shape.drop_front(2))
    spatial *= d;
  Value c = arith::RemUIOp::create(
      b, loc, spatial == 1 ? idx : arith::DivUIOp::create(b, loc, idx, index(spatial)).getResult(),
      index(shape[1]));
  auto at = [&](int i, Value where) { return load(args.lookup(k.getInputs()[i]), where); };
  Value x = fused ? fused : at(0, idx), scale = at(1, c), bias = at(2, c), mean = at(3, c),
        var = at(4, c);
  auto epsAttr = dyn_cast_or_null<FloatAttr>(k.getParam("epsilon"));
  Value eps = floatConst(x.getType(), epsAttr ? epsAttr.getValueAsDouble() : 1e-5);
  Value inv = math::RsqrtOp::create(b, loc, arith::AddFOp::create(b, loc, var, eps));
  Value y = arith::MulFOp::create(
      b, loc, arith::MulFOp::create(b, loc, arith::SubFOp::create(b, loc, x, mean), inv), scale);
  return arith::AddFOp::create(b, loc, y, bias).getResult();
}

LogicalResult KernelEmitter::forEachWindowPosition(
    rt::KernelOp k, ArrayRef<Value> out, ArrayRef<int64_t> inSpatial, ArrayRef<int64_t> kernel,
    function_ref<void(Value valid, Value padded, Value plane)> fn) {
  size_t n = inSpatial.size();
  auto ints = [&](StringRef name, int64_t dflt, size_t count) -> SmallVector<int64_t> {
    auto a = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam(name));
    if (a)
      return SmallVector<int64_t>(a.asArrayRef());
    return SmallVector<int64_t>(count, dflt);
  };
  SmallVector<int64_t> strides = ints("strides", 1, n), dil = ints("dilations", 1, n),
                       pads = ints("pads", 0, 2 * n);
  if (strides.size() != n || dil.size() != n || pads.size() != 2 * n || kernel.size() != n)
    return k.emitOpError("window attributes do not match ") << n << " spatial dimensions";
  int64_t positions = 1;
  for (int64_t w : kernel)
    positions *= w;
  if (positions > 1024)
    return k.emitOpError("windows of more than 1024 positions are not generated"), failure();
  Value trueV = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  // Input coordinate = out * stride - pad + k * dilation, computed in i64
  // so that the padding's negative coordinates compare correctly.
  auto i64 = [&](Value v) { return arith::IndexCastOp::create(b, loc, b.getI64Type(), v); };
  auto c64 = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64Type(), b.getI64IntegerAttr(v));
  };
  SmallVector<Value> base(n);
  for (size_t d = 0; d < n; ++d)
    base[d] = arith::SubIOp::create(b, loc, arith::MulIOp::create(b, loc, i64(out[d]), c64(strides[d])),
                                    c64(pads[d]));
  SmallVector<int64_t> pos(n, 0);
  for (int64_t p = 0; p < positions; ++p) {
    Value valid = trueV, padded = trueV, plane = c64(0);
    for (size_t d = 0; d < n; ++d) {
      Value coord = arith::AddIOp::create(b, loc, base[d], c64(pos[d] * dil[d]));
      Value inside = arith::AndIOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, coord, c64(0)),
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, coord, c64(inSpatial[d])));
      valid = arith::AndIOp::create(b, loc, valid, inside);
      Value insidePadded = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, coord,
                                                 c64(inSpatial[d] + pads[n + d]));
      padded = arith::AndIOp::create(b, loc, padded, insidePadded);
      plane = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, plane, c64(inSpatial[d])),
                                    coord);
    }
    Value safe = arith::SelectOp::create(b, loc, valid, plane, c64(0));
    fn(valid, padded, arith::IndexCastOp::create(b, loc, b.getIndexType(), safe));
    for (size_t d = n; d-- > 0;) {
      if (++pos[d] < kernel[d])
        break;
      pos[d] = 0;
    }
  }
  return success();
}

FailureOr<Value> KernelEmitter::pool(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx,
                                     Value *indices) {
  Value x = k.getInputs()[0];
  ArrayRef<int64_t> inShape = shapeOf(x), outShape = shapeOf(k.getOutputs()[0]);
  if (inShape.size() < 3)
    return k.emitOpError("pooling needs [N, C, spatial...]"), failure();
  auto kernelAttr = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam("kernel_shape"));
  if (!kernelAttr)
    return k.emitOpError("pooling without kernel_shape"), failure();
  bool isMax = k.getKernel() != "average_pool";
  bool withIndices = k.getKernel() == "max_pool_with_indices";
  // Each kernel's own parameters: count_include_pad is average_pool's,
  // storage_order max_pool_with_indices'.
  BoolAttr cip = isMax ? BoolAttr() : dyn_cast_or_null<BoolAttr>(k.getParam("count_include_pad"));
  bool countPad = cip && cip.getValue();
  auto order = withIndices ? dyn_cast_or_null<IntegerAttr>(k.getParam("storage_order"))
                           : IntegerAttr();
  bool columnMajor = order && order.getInt() == 1;
  SmallVector<Value> coords = delinearize(idx, outShape);
  ArrayRef<int64_t> inSpatial = inShape.drop_front(2);
  int64_t plane = 1;
  for (int64_t d : inSpatial)
    plane *= d;
  // (n, c) select the plane; the window walks inside it.
  Value planeBase = arith::MulIOp::create(
      b, loc, arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, coords[0], index(inShape[1])),
                                    coords[1]),
      index(plane));
  Type storage = elemOf(x), ft = computeType(storage);
  bool isFloatData = isa<FloatType>(ft), isUnsigned = storage.isUnsignedInteger();
  Value acc, count, one;
  if (isFloatData) {
    acc = floatConst(ft, isMax ? -INFINITY : 0.0);
    count = floatConst(ft, 0.0), one = floatConst(ft, 1.0);
  } else {
    unsigned w = ft.getIntOrFloatBitWidth();
    acc = intConst(ft, isUnsigned ? 0 : w == 64 ? std::numeric_limits<int64_t>::min()
                                                : -(int64_t(1) << (w - 1)));
  }
  Value best = i64(-1), found = arith::ConstantOp::create(b, loc, b.getBoolAttr(false));
  LogicalResult ok = forEachWindowPosition(
      k, ArrayRef<Value>(coords).drop_front(2), inSpatial, kernelAttr.asArrayRef(),
      [&](Value valid, Value padded, Value at) {
        Value v = load(args.lookup(x), arith::AddIOp::create(b, loc, planeBase, at));
        if (withIndices) {
          // Take v when it is the first valid value, greater, or the first
          // NaN; nothing replaces a NaN.
          Value greater, take;
          if (isFloatData) {
            greater = arith::OrIOp::create(
                b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, acc),
                arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, v, v));
            Value accNaN = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, acc, acc);
            greater = arith::AndIOp::create(
                b, loc, greater,
                arith::XOrIOp::create(b, loc, accNaN,
                                      arith::ConstantOp::create(b, loc, b.getBoolAttr(true))));
          } else {
            greater = arith::CmpIOp::create(
                b, loc, isUnsigned ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt, v,
                acc);
          }
          Value first = arith::XOrIOp::create(
              b, loc, found, arith::ConstantOp::create(b, loc, b.getBoolAttr(true)));
          take = arith::AndIOp::create(b, loc, valid,
                                       arith::OrIOp::create(b, loc, first, greater));
          acc = arith::SelectOp::create(b, loc, take, v, acc);
          best = arith::SelectOp::create(b, loc, take, flatInputIndex(planeBase, at, inSpatial,
                                                                      columnMajor),
                                         best);
          found = arith::OrIOp::create(b, loc, found, valid);
          return;
        }
        if (isMax) {
          Value m = isFloatData ? arith::MaximumFOp::create(b, loc, acc, v).getResult()
                    : isUnsigned ? arith::MaxUIOp::create(b, loc, acc, v).getResult()
                                 : arith::MaxSIOp::create(b, loc, acc, v).getResult();
          acc = arith::SelectOp::create(b, loc, valid, m, acc);
          return;
        }
        acc = arith::SelectOp::create(b, loc, valid, arith::AddFOp::create(b, loc, acc, v), acc);
        // count_include_pad counts the padding, never what a ceil-mode
        // window reaches past the padded input.
        count = arith::SelectOp::create(b, loc, countPad ? padded : valid,
                                        arith::AddFOp::create(b, loc, count, one), count);
      });
  if (failed(ok))
    return failure();
  if (indices)
    *indices = withIndices ? best : Value();
  if (isMax)
    return acc;
  return arith::DivFOp::create(b, loc, acc, count).getResult();
}

Value KernelEmitter::flatInputIndex(Value planeBase, Value at, ArrayRef<int64_t> inSpatial,
                                    bool columnMajor) {
  Value within = at;
  size_t n = inSpatial.size();
  if (columnMajor && n >= 2) {
    int64_t h = inSpatial[n - 2], w = inSpatial[n - 1];
    Value outer = arith::DivUIOp::create(b, loc, at, index(h * w));
    Value rest = arith::RemUIOp::create(b, loc, at, index(h * w));
    Value row = arith::DivUIOp::create(b, loc, rest, index(w));
    Value col = arith::RemUIOp::create(b, loc, rest, index(w));
    within = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, outer, index(h * w)),
        arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, col, index(h)), row));
  }
  return arith::IndexCastOp::create(b, loc, b.getI64Type(),
                                    arith::AddIOp::create(b, loc, planeBase, within));
}

FailureOr<Value> KernelEmitter::im2col(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx) {
  Value x = k.getInputs()[0];
  ArrayRef<int64_t> inShape = shapeOf(x);
  auto kernelAttr = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam("kernel_shape"));
  auto outAttr = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam("out_spatial"));
  auto groupAttr = dyn_cast_or_null<IntegerAttr>(k.getParam("group"));
  if (!kernelAttr || !outAttr || !groupAttr)
    return k.emitOpError("im2col needs kernel_shape, out_spatial and group"), failure();
  ArrayRef<int64_t> kernel = kernelAttr.asArrayRef(), outSpatial = outAttr.asArrayRef();
  int64_t group = groupAttr.getInt(), channels = inShape[1] / group;
  int64_t window = 1, positions = 1, plane = 1;
  for (int64_t w : kernel)
    window *= w;
  for (int64_t o : outSpatial)
    positions *= o;
  for (int64_t d : inShape.drop_front(2))
    plane *= d;
  // idx -> (n, g, cw, p) with cw = c * window + kernel offset.
  SmallVector<Value> c4 = delinearize(idx, {inShape[0], group, channels * window, positions});
  Value c = arith::DivUIOp::create(b, loc, c4[2], index(window));
  Value kOffset = arith::RemUIOp::create(b, loc, c4[2], index(window));
  SmallVector<Value> kPos = delinearize(kOffset, kernel);
  SmallVector<Value> oPos = delinearize(c4[3], outSpatial);
  // The plane of channel (g * channels + c) of image n.
  Value channel = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, c4[1], index(channels)), c);
  Value planeBase = arith::MulIOp::create(
      b, loc,
      arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, c4[0], index(inShape[1])),
                            channel),
      index(plane));
  // One window position per output element: the coordinate arithmetic
  // of forEachWindowPosition with the kernel offset as a value.
  size_t n = kernel.size();
  auto ints = [&](StringRef name, int64_t dflt, size_t count) -> SmallVector<int64_t> {
    auto a = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam(name));
    return a ? SmallVector<int64_t>(a.asArrayRef()) : SmallVector<int64_t>(count, dflt);
  };
  SmallVector<int64_t> strides = ints("strides", 1, n), dil = ints("dilations", 1, n),
                       pads = ints("pads", 0, 2 * n);
  auto i64 = [&](Value v) { return arith::IndexCastOp::create(b, loc, b.getI64Type(), v); };
  auto c64 = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64Type(), b.getI64IntegerAttr(v));
  };
  Value valid = arith::ConstantOp::create(b, loc, b.getBoolAttr(true)), at = c64(0);
  ArrayRef<int64_t> inSpatial = inShape.drop_front(2);
  for (size_t d = 0; d < n; ++d) {
    Value coord = arith::AddIOp::create(
        b, loc,
        arith::SubIOp::create(b, loc, arith::MulIOp::create(b, loc, i64(oPos[d]), c64(strides[d])),
                              c64(pads[d])),
        arith::MulIOp::create(b, loc, i64(kPos[d]), c64(dil[d])));
    Value inside = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, coord, c64(0)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, coord, c64(inSpatial[d])));
    valid = arith::AndIOp::create(b, loc, valid, inside);
    at = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, at, c64(inSpatial[d])), coord);
  }
  Value safe = arith::IndexCastOp::create(
      b, loc, b.getIndexType(), arith::SelectOp::create(b, loc, valid, at, c64(0)));
  Value v = load(args.lookup(x), arith::AddIOp::create(b, loc, planeBase, safe));
  return arith::SelectOp::create(b, loc, valid, v, floatConst(v.getType(), 0.0)).getResult();
}
