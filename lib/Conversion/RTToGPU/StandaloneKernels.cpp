//===- StandaloneKernels.cpp - generated kernels that are not fused -------===//
//
// Kernels whose threads do not map one-to-one onto output elements of an
// elementwise loop, each generated as a launch of its own:
//
//  - reduce_sum / reduce_mean / reduce_max over axes that are not one
//    contiguous block, or of integers: one thread per output, walking the
//    reduced elements with one loop per run of adjacent reduced axes.
//    Floats accumulate in f32 (f64 for f64), integers in 64 bits (wrapping
//    to the element type on store, as the CPU kernel does; unsigned ones
//    zero-extended, divided and compared unsigned); max propagates NaN.
//  - cumsum: one thread per line along the axis (neighbouring threads take
//    neighbouring lines, so loads coalesce when the axis is not the last),
//    or, for lines along the last axis and for a few long lines, one block
//    per line scanning it in tiles (a block-wide scan in shared memory per
//    tile); accumulating in the same types.
//  - gather_elements: one thread per output element.
//  - scatter_nd_updates (what cuda-split-scatters makes of scatter_nd,
//    after a copy of the data): one thread per element of an update slice,
//    taking the index tuples in order, so duplicate indices resolve as on
//    the CPU (the last one wins, or the reduction applies in order).
//  - einsum (what is not the megatron preset's projection, which becomes a
//    matmul): one thread per output element, one loop per summed label,
//    any number of inputs, ellipsis broadcasting and diagonals included.
//  - topk: one block per line and k rounds; round r finds, with two block
//    reductions (the best key, then the lowest index holding it), the
//    element that comes next in the order after round r - 1's. Keys are
//    integers that order floats totally, with NaN above every number and
//    -0 equal to +0, so ties go to the lower index as on the CPU.
//
// gather_elements, scatter_nd_updates (and rotary positions, in the fused
// kernels) read indices from data: an index outside its dimension is
// reported through the kernel's status word.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

using namespace mlir;
using namespace shardflow;
using namespace shardflow::rtgpu;

namespace {

constexpr int64_t kBlock = 256;

int64_t paramInt(rt::KernelOp k, StringRef name, int64_t dflt) {
  auto a = dyn_cast_or_null<IntegerAttr>(k.getParam(name));
  return a ? a.getInt() : dflt;
}
bool paramBool(rt::KernelOp k, StringRef name, bool dflt) {
  auto a = k.getParam(name);
  if (auto b = dyn_cast_or_null<BoolAttr>(a))
    return b.getValue();
  if (auto i = dyn_cast_or_null<IntegerAttr>(a))
    return i.getInt() != 0;
  return dflt;
}

/// The reduced axes of a reduction kernel (sorted, in range), or none.
std::optional<SmallVector<int64_t>> reducedAxes(rt::KernelOp k) {
  int64_t rank = shapeOf(k.getInputs()[0]).size();
  SmallVector<int64_t> axes;
  if (k.getKernel() == "global_average_pool") {
    for (int64_t d = 2; d < rank; ++d)
      axes.push_back(d);
    return axes;
  }
  auto attr = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam("axes"));
  if (!attr)
    return std::nullopt;
  for (int64_t a : attr.asArrayRef()) {
    if (a < 0)
      a += rank;
    if (a < 0 || a >= rank)
      return std::nullopt;
    axes.push_back(a);
  }
  llvm::sort(axes);
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

/// Splits `shape` around `axis` into [outer, n, inner].
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
std::optional<AxisSplit> splitAround(ArrayRef<int64_t> shape, int64_t axis) {
  int64_t rank = shape.size();
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  AxisSplit s;
  for (int64_t d = 0; d < axis; ++d)
    s.outer *= shape[d];
  s.n = shape[axis];
  for (int64_t d = axis + 1; d < rank; ++d)
    s.inner *= shape[d];
  return s;
}

/// The flat position of element 0 of line `line` (numbered outer-major)
/// of a tensor split as `s`: lines are `inner` apart within an outer slice.
Value lineStart(EmitterBase &e, Value line, const AxisSplit &s, int64_t n) {
  OpBuilder &b = e.b;
  Value o = arith::DivUIOp::create(b, e.loc, line, e.index(s.inner));
  Value in = arith::RemUIOp::create(b, e.loc, line, e.index(s.inner));
  return arith::AddIOp::create(
      b, e.loc, arith::MulIOp::create(b, e.loc, o, e.index(n * s.inner)), in);
}

SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    s[d - 1] = s[d] * shape[d];
  return s;
}

int64_t blocksFor(int64_t n) { return (n + kBlock - 1) / kBlock; }

/// The accumulator type of a sum or scan over data of type `t`.
Type accumulatorType(Type t) {
  if (isa<FloatType>(t))
    return computeType(t);
  return IntegerType::get(t.getContext(), 64);
}

/// Widens loaded value `v` (stored as `storage`, which says whether an
/// integer is unsigned) to accumulator type `acc`.
Value toAccumulator(EmitterBase &e, Value v, Type storage, Type acc) {
  if (v.getType() == acc)
    return v;
  if (isa<FloatType>(acc))
    return e.toCompute(v);
  if (storage.isInteger(1) || storage.isUnsignedInteger())
    return arith::ExtUIOp::create(e.b, e.loc, acc, v);
  return arith::ExtSIOp::create(e.b, e.loc, acc, v);
}

/// Stores accumulator `v` into `buf` of element type `storage`: floats
/// round once, integers wrap.
void storeAccumulator(EmitterBase &e, Value v, Value buf, Value idx) {
  Type storage = elemOf(buf);
  if (isa<IntegerType>(storage) && v.getType() != storage)
    v = arith::TruncIOp::create(e.b, e.loc, storage, v);
  e.store(v, buf, idx);
}

/// Floats and integers other than booleans (signless or unsigned).
bool isNumeric(Type t) {
  return isSupportedElement(t) && !t.isInteger(1);
}

/// The flat index of this thread in a kernel of one thread per item, over
/// `count` items; leaves the builder inside the `if` that idles the grid's
/// excess threads (the caller restores the insertion point).
Value threadPerItem(EmitterBase &e, int64_t count) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value idx = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, bid, e.index(kBlock)),
                                    tid);
  Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, idx, e.index(count));
  auto guard = scf::IfOp::create(b, loc, inRange, /*withElseRegion=*/false);
  b.setInsertionPointToStart(&guard.getThenRegion().front());
  return idx;
}

//===----------------------------------------------------------------------===//
// Reductions over any axes
//===----------------------------------------------------------------------===//

LogicalResult emitReduce(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value x = k.getInputs()[0], out = k.getOutputs()[0];
  ArrayRef<int64_t> shape = shapeOf(x);
  SmallVector<int64_t> strides = stridesOf(shape);
  SmallVector<int64_t> axes = *reducedAxes(k);
  StringRef name = k.getKernel();
  bool isMax = name == "reduce_max", isMin = name == "reduce_min";
  bool isProd = name == "reduce_prod";
  bool isMean = name == "reduce_mean" || name == "global_average_pool";
  Type elem = elemOf(x);
  bool isUnsigned = elem.isUnsignedInteger();
  Type acc = (isMax || isMin) && isa<FloatType>(elem) ? computeType(elem) : accumulatorType(elem);

  // Kept dimensions give the output coordinate; runs of adjacent reduced
  // dimensions become one loop each (size, stride of the run's last dim).
  SmallVector<int64_t> keptShape, keptStrides;
  SmallVector<std::pair<int64_t, int64_t>> loops;
  int64_t count = 1;
  for (int64_t d = 0, rank = shape.size(); d < rank; ++d) {
    bool reduced = llvm::is_contained(axes, d);
    if (!reduced) {
      keptShape.push_back(shape[d]);
      keptStrides.push_back(strides[d]);
      continue;
    }
    count *= shape[d];
    bool continues = d > 0 && llvm::is_contained(axes, d - 1) && !loops.empty();
    if (continues) {
      loops.back().first *= shape[d];
      loops.back().second = strides[d];
    } else {
      loops.push_back({shape[d], strides[d]});
    }
  }

  OpBuilder::InsertionGuard ig(b);
  Value idx = threadPerItem(e, numel(out));
  Value base = e.index(0);
  if (!keptShape.empty()) {
    SmallVector<Value> coords = e.delinearize(idx, keptShape);
    for (auto [c, s] : llvm::zip(coords, keptStrides))
      base = arith::AddIOp::create(b, loc, base, arith::MulIOp::create(b, loc, c, e.index(s)));
  }
  // The empty max is the type's lowest value (-inf for floats), the empty
  // min its largest, the empty product 1.
  Value init;
  unsigned width = isa<FloatType>(elem) ? 0 : elem.getIntOrFloatBitWidth();
  if (isMax) {
    if (isa<FloatType>(acc))
      init = e.floatConst(acc, -INFINITY);
    else if (elem.isInteger(1) || isUnsigned)
      init = e.intConst(acc, 0);
    else
      init = e.intConst(acc, APInt::getSignedMinValue(width).getSExtValue());
  } else if (isMin) {
    if (isa<FloatType>(acc))
      init = e.floatConst(acc, INFINITY);
    else if (elem.isInteger(1) || isUnsigned)
      init = e.intConst(acc, int64_t(APInt::getMaxValue(width).getZExtValue()));
    else
      init = e.intConst(acc, APInt::getSignedMaxValue(width).getSExtValue());
  } else if (isProd) {
    init = isa<FloatType>(acc) ? e.floatConst(acc, 1.0) : e.intConst(acc, 1);
  } else {
    init = isa<FloatType>(acc) ? e.floatConst(acc, 0.0) : e.intConst(acc, 0);
  }
  // Nested loops, outermost run first; the innermost combines.
  std::function<Value(size_t, Value, Value)> walk = [&](size_t level, Value offset,
                                                        Value a) -> Value {
    if (level == loops.size()) {
      Value v = toAccumulator(
          e, memref::LoadOp::create(b, loc, args.lookup(x), ValueRange{offset}), elem, acc);
      if (isa<FloatType>(acc)) {
        if (isMax)
          return arith::MaximumFOp::create(b, loc, a, v).getResult();
        if (isMin)
          return arith::MinimumFOp::create(b, loc, a, v).getResult();
        if (isProd)
          return arith::MulFOp::create(b, loc, a, v).getResult();
        return arith::AddFOp::create(b, loc, a, v).getResult();
      }
      bool zeroExtended = isUnsigned || elem.isInteger(1);
      if (isMax)
        return zeroExtended ? arith::MaxUIOp::create(b, loc, a, v).getResult()
                            : arith::MaxSIOp::create(b, loc, a, v).getResult();
      if (isMin)
        return zeroExtended ? arith::MinUIOp::create(b, loc, a, v).getResult()
                            : arith::MinSIOp::create(b, loc, a, v).getResult();
      if (isProd)
        return arith::MulIOp::create(b, loc, a, v).getResult();
      return arith::AddIOp::create(b, loc, a, v);
    }
    auto [size, stride] = loops[level];
    auto loop = scf::ForOp::create(b, loc, e.index(0), e.index(size), e.index(1), ValueRange{a});
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(loop.getBody());
    Value at = arith::AddIOp::create(
        b, loc, offset, arith::MulIOp::create(b, loc, loop.getInductionVar(), e.index(stride)));
    scf::YieldOp::create(b, loc, walk(level + 1, at, loop.getRegionIterArgs()[0]));
    return loop.getResult(0);
  };
  Value r = walk(0, base, init);
  if (isMean) {
    if (isa<FloatType>(acc))
      r = arith::DivFOp::create(b, loc, r, e.floatConst(acc, double(count)));
    else if (!count)
      r = e.intConst(acc, 0);
    else if (isUnsigned)
      r = arith::DivUIOp::create(b, loc, r, e.intConst(acc, count));
    else
      r = arith::DivSIOp::create(b, loc, r, e.intConst(acc, count));
  }
  storeAccumulator(e, r, args.lookup(out), idx);
  return success();
}

//===----------------------------------------------------------------------===//
// arg_max, arg_min
//===----------------------------------------------------------------------===//

/// One thread per output walks its line along the axis, keeping the most
/// extreme value and its index: the first one, or the last with
/// select_last_index; a NaN is more extreme than any number and the first
/// NaN stays (as the CPU kernel).
LogicalResult emitArgReduce(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value x = k.getInputs()[0], out = k.getOutputs()[0];
  AxisSplit s = *splitAround(shapeOf(x), paramInt(k, "axis", 0));
  bool isMax = k.getKernel() == "arg_max";
  auto lastAttr = dyn_cast_or_null<BoolAttr>(k.getParam("select_last_index"));
  bool last = lastAttr && lastAttr.getValue();
  Type elem = elemOf(x);
  bool isFloat = isa<FloatType>(elem);
  Type acc = accumulatorType(elem);

  OpBuilder::InsertionGuard ig(b);
  Value idx = threadPerItem(e, s.outer * s.inner);
  Value inner = e.index(s.inner);
  Value o = arith::DivUIOp::create(b, loc, idx, inner);
  Value j = arith::RemUIOp::create(b, loc, idx, inner);
  Value base = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, o, e.index(s.n * s.inner)), j);
  auto loadAt = [&](Value i) {
    Value at = arith::AddIOp::create(b, loc, base, arith::MulIOp::create(b, loc, i, inner));
    return toAccumulator(e, memref::LoadOp::create(b, loc, args.lookup(x), ValueRange{at}), elem,
                         acc);
  };
  Value first = loadAt(e.index(0));
  Value zero64 = e.intConst(b.getI64Type(), 0);
  auto loop = scf::ForOp::create(b, loc, e.index(1), e.index(s.n), e.index(1),
                                 ValueRange{first, zero64});
  {
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(loop.getBody());
    Value i = loop.getInductionVar();
    Value best = loop.getRegionIterArgs()[0], at = loop.getRegionIterArgs()[1];
    Value v = loadAt(i);
    Value better;
    if (isFloat) {
      auto pred = isMax ? (last ? arith::CmpFPredicate::OGE : arith::CmpFPredicate::OGT)
                        : (last ? arith::CmpFPredicate::OLE : arith::CmpFPredicate::OLT);
      Value beats = arith::CmpFOp::create(b, loc, pred, v, best);
      Value vNaN = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, v, v);
      Value bestNumber = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ORD, best, best);
      better = arith::AndIOp::create(b, loc, bestNumber,
                                     arith::OrIOp::create(b, loc, beats, vNaN));
    } else {
      bool zeroExtended = elem.isUnsignedInteger() || elem.isInteger(1);
      arith::CmpIPredicate pred =
          isMax ? (last ? (zeroExtended ? arith::CmpIPredicate::uge : arith::CmpIPredicate::sge)
                        : (zeroExtended ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt))
                : (last ? (zeroExtended ? arith::CmpIPredicate::ule : arith::CmpIPredicate::sle)
                        : (zeroExtended ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt));
      better = arith::CmpIOp::create(b, loc, pred, v, best);
    }
    Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), i);
    scf::YieldOp::create(b, loc,
                         ValueRange{arith::SelectOp::create(b, loc, better, v, best).getResult(),
                                    arith::SelectOp::create(b, loc, better, i64, at).getResult()});
  }
  memref::StoreOp::create(b, loc, loop.getResult(1), args.lookup(out), ValueRange{idx});
  return success();
}

//===----------------------------------------------------------------------===//
// cumsum
//===----------------------------------------------------------------------===//

/// How a cumsum is laid out on the GPU. One thread per line walks its
/// line serially: right for many short lines, and its loads coalesce when
/// the axis is not the last (neighbouring threads take neighbouring
/// lines). A few long lines would leave the GPU idle that way (the
/// position ids of a batch of 8 sequences of 1024 are 8 threads walking
/// 1024 steps each), and lines along the last axis would be read one cache
/// line per thread: those get one block per line instead, which scans the
/// line in tiles of `block` elements (a block-wide scan per tile, plus the
/// running total of the tiles before).
struct CumsumPlan {
  AxisSplit split;
  bool blockScan = false;
  int64_t block = kBlock;
};
std::optional<CumsumPlan> cumsumPlan(rt::KernelOp k) {
  auto s = splitAround(shapeOf(k.getInputs()[0]), paramInt(k, "axis", 0));
  if (!s)
    return std::nullopt;
  CumsumPlan p;
  p.split = *s;
  int64_t lines = s->outer * s->inner;
  // Along the last axis, any line of a warp's width or more; along another
  // axis, only when there are too few lines to fill a GPU (a few thousand
  // threads) and each is long.
  p.blockScan = s->inner == 1 ? s->n >= 32 : lines < 2048 && s->n >= 256;
  if (p.blockScan)
    p.block = std::min<int64_t>(kBlock, (s->n + 31) / 32 * 32);
  return p;
}

/// One thread per line.
void emitCumsumPerThread(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args,
                         const AxisSplit &s) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value x = k.getInputs()[0], out = k.getOutputs()[0];
  bool exclusive = paramBool(k, "exclusive", false), reverse = paramBool(k, "reverse", false);
  Type acc = accumulatorType(elemOf(x));

  OpBuilder::InsertionGuard ig(b);
  Value base = lineStart(e, threadPerItem(e, s.outer * s.inner), s, s.n);
  Value zero = isa<FloatType>(acc) ? e.floatConst(acc, 0.0) : e.intConst(acc, 0);
  auto loop = scf::ForOp::create(b, loc, e.index(0), e.index(s.n), e.index(1), ValueRange{zero});
  b.setInsertionPointToStart(loop.getBody());
  Value i = loop.getInductionVar();
  if (reverse)
    i = arith::SubIOp::create(b, loc, e.index(s.n - 1), i);
  Value at = arith::AddIOp::create(b, loc, base, arith::MulIOp::create(b, loc, i, e.index(s.inner)));
  Value a = loop.getRegionIterArgs()[0];
  Value v = toAccumulator(e, memref::LoadOp::create(b, loc, args.lookup(x), ValueRange{at}),
                          elemOf(x), acc);
  Value next = isa<FloatType>(acc) ? arith::AddFOp::create(b, loc, a, v).getResult()
                                   : arith::AddIOp::create(b, loc, a, v).getResult();
  storeAccumulator(e, exclusive ? a : next, args.lookup(out), at);
  scf::YieldOp::create(b, loc, next);
}

/// One block of `block` threads per line. Tile t covers the line's
/// positions [t*block, (t+1)*block) in scan order (from the end when
/// `reverse`); thread i takes position t*block + i. Each tile is scanned in
/// shared memory by doubling (Hillis-Steele: log2(block) steps, a barrier
/// between every read and write of the buffer), then offset by the running
/// total of the earlier tiles, which every thread carries. Floats add in a
/// different order than the serial scan (within rounding); integers wrap
/// and so are exact.
void emitCumsumPerBlock(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args,
                        const AxisSplit &s, int64_t block) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value x = k.getInputs()[0], out = k.getOutputs()[0];
  bool exclusive = paramBool(k, "exclusive", false), reverse = paramBool(k, "reverse", false);
  Type acc = accumulatorType(elemOf(x));
  bool isFloat = isa<FloatType>(acc);
  auto add = [&](Value l, Value r) -> Value {
    return isFloat ? arith::AddFOp::create(b, loc, l, r).getResult()
                   : arith::AddIOp::create(b, loc, l, r).getResult();
  };
  auto select = [&](Value c, Value t, Value f) -> Value {
    return arith::SelectOp::create(b, loc, c, t, f);
  };
  auto cmp = [&](arith::CmpIPredicate p, Value l, Value r) -> Value {
    return arith::CmpIOp::create(b, loc, p, l, r);
  };
  auto barrier = [&] { gpu::BarrierOp::create(b, loc); };

  auto fn = b.getBlock()->getParent()->getParentOfType<gpu::GPUFuncOp>();
  auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  Value tile = fn.addWorkgroupAttribution(
      MemRefType::get({block}, acc, MemRefLayoutAttrInterface{}, space), loc);

  Value line = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value base = lineStart(e, line, s, s.n);
  Value zero = isFloat ? e.floatConst(acc, 0.0) : e.intConst(acc, 0);
  int64_t tiles = (s.n + block - 1) / block;
  auto loop = scf::ForOp::create(b, loc, e.index(0), e.index(tiles), e.index(1), ValueRange{zero});
  OpBuilder::InsertionGuard ig(b);
  b.setInsertionPointToStart(loop.getBody());
  Value carry = loop.getRegionIterArgs()[0];
  Value i = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, loop.getInductionVar(), e.index(block)), tid);
  Value inLine = cmp(arith::CmpIPredicate::ult, i, e.index(s.n));
  // Threads past the line's end read position 0 and add 0.
  Value pos = select(inLine, i, e.index(0));
  if (reverse)
    pos = arith::SubIOp::create(b, loc, e.index(s.n - 1), pos);
  Value at = arith::AddIOp::create(b, loc, base,
                                   arith::MulIOp::create(b, loc, pos, e.index(s.inner)));
  Value loaded = toAccumulator(
      e, memref::LoadOp::create(b, loc, args.lookup(x), ValueRange{at}), elemOf(x), acc);
  Value v = select(inLine, loaded, zero);
  memref::StoreOp::create(b, loc, v, tile, ValueRange{tid});
  barrier();
  for (int64_t off = 1; off < block; off *= 2) {
    Value has = cmp(arith::CmpIPredicate::uge, tid, e.index(off));
    Value from = select(has, arith::SubIOp::create(b, loc, tid, e.index(off)), tid);
    Value other = memref::LoadOp::create(b, loc, tile, ValueRange{from});
    barrier();
    v = add(v, select(has, other, zero));
    memref::StoreOp::create(b, loc, v, tile, ValueRange{tid});
    barrier();
  }
  // The tile is scanned: thread i holds positions 0..i of it.
  Value result = v;
  if (exclusive) {
    Value has = cmp(arith::CmpIPredicate::uge, tid, e.index(1));
    Value from = select(has, arith::SubIOp::create(b, loc, tid, e.index(1)), tid);
    result = select(has, memref::LoadOp::create(b, loc, tile, ValueRange{from}), zero);
  }
  result = add(carry, result);
  Value total = memref::LoadOp::create(b, loc, tile, ValueRange{e.index(block - 1)});
  {
    auto write = scf::IfOp::create(b, loc, inLine, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard wg(b);
    b.setInsertionPointToStart(&write.getThenRegion().front());
    storeAccumulator(e, result, args.lookup(out), at);
  }
  // Everyone has read the tile before the next one overwrites it.
  barrier();
  scf::YieldOp::create(b, loc, add(carry, total));
}

LogicalResult emitCumsum(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args) {
  CumsumPlan p = *cumsumPlan(k);
  if (p.blockScan)
    emitCumsumPerBlock(e, k, args, p.split, p.block);
  else
    emitCumsumPerThread(e, k, args, p.split);
  return success();
}

//===----------------------------------------------------------------------===//
// gather_elements
//===----------------------------------------------------------------------===//

LogicalResult emitGatherElements(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value x = k.getInputs()[0], indices = k.getInputs()[1], out = k.getOutputs()[0];
  ArrayRef<int64_t> inShape = shapeOf(x), idxShape = shapeOf(indices);
  int64_t axis = paramInt(k, "axis", 0);
  if (axis < 0)
    axis += inShape.size();
  SmallVector<int64_t> strides = stridesOf(inShape);

  OpBuilder::InsertionGuard ig(b);
  Value idx = threadPerItem(e, numel(out));
  SmallVector<Value> coords = e.delinearize(idx, idxShape);
  Value i = e.indexValue(memref::LoadOp::create(b, loc, args.lookup(indices), ValueRange{idx}));
  coords[axis] = e.checkedIndex(i, inShape[axis]);
  Value at = e.index(0);
  for (auto [c, s] : llvm::zip(coords, strides))
    at = arith::AddIOp::create(b, loc, at, arith::MulIOp::create(b, loc, c, e.index(s)));
  Value v = memref::LoadOp::create(b, loc, args.lookup(x), ValueRange{at});
  memref::StoreOp::create(b, loc, v, args.lookup(out), ValueRange{idx});
  return success();
}

//===----------------------------------------------------------------------===//
// scatter_nd_updates
//===----------------------------------------------------------------------===//

/// Shape facts of scatter_nd_updates(indices, updates) -> out.
struct ScatterShape {
  int64_t q = 0, count = 0, slice = 1;
};
std::optional<ScatterShape> scatterShape(rt::KernelOp k) {
  ArrayRef<int64_t> idxShape = shapeOf(k.getInputs()[0]), outShape = shapeOf(k.getOutputs()[0]);
  if (idxShape.empty())
    return std::nullopt;
  ScatterShape s;
  s.q = idxShape.back();
  if (s.q < 1 || s.q > int64_t(outShape.size()))
    return std::nullopt;
  s.count = 1;
  for (int64_t d : idxShape.drop_back())
    s.count *= d;
  for (int64_t d : outShape.drop_front(s.q))
    s.slice *= d;
  if (numel(k.getInputs()[1]) != s.count * s.slice)
    return std::nullopt;
  return s;
}

LogicalResult emitScatter(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value indices = k.getInputs()[0], updates = k.getInputs()[1], out = k.getOutputs()[0];
  ArrayRef<int64_t> outShape = shapeOf(out);
  SmallVector<int64_t> strides = stridesOf(outShape);
  ScatterShape s = *scatterShape(k);
  auto redAttr = dyn_cast_or_null<StringAttr>(k.getParam("reduction"));
  StringRef red = redAttr ? redAttr.getValue() : "none";
  Type elem = elemOf(out);

  OpBuilder::InsertionGuard ig(b);
  Value j = threadPerItem(e, s.slice);
  auto loop = scf::ForOp::create(b, loc, e.index(0), e.index(s.count), e.index(1));
  b.setInsertionPointToStart(loop.getBody());
  Value n = loop.getInductionVar();
  Value offset = e.index(0);
  Value ok = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  for (int64_t d = 0; d < s.q; ++d) {
    Value at = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, n, e.index(s.q)),
                                     e.index(d));
    Value i = e.indexValue(memref::LoadOp::create(b, loc, args.lookup(indices), ValueRange{at}));
    // Checked per component; one bad component skips the whole update.
    Value neg = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, i, e.i64(0));
    Value norm = arith::SelectOp::create(b, loc, neg,
                                         arith::AddIOp::create(b, loc, i, e.i64(outShape[d])), i);
    Value inside = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, norm, e.i64(0)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, norm, e.i64(outShape[d])));
    e.reportUnless(inside, i);
    ok = arith::AndIOp::create(b, loc, ok, inside);
    Value c = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                         arith::SelectOp::create(b, loc, inside, norm, e.i64(0)));
    offset = arith::AddIOp::create(b, loc, offset,
                                   arith::MulIOp::create(b, loc, c, e.index(strides[d])));
  }
  auto apply = scf::IfOp::create(b, loc, ok, /*withElseRegion=*/false);
  b.setInsertionPointToStart(&apply.getThenRegion().front());
  Value dst = arith::AddIOp::create(b, loc, offset, j);
  Value src = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, n, e.index(s.slice)), j);
  Value u = memref::LoadOp::create(b, loc, args.lookup(updates), ValueRange{src});
  if (red == "none") {
    memref::StoreOp::create(b, loc, u, args.lookup(out), ValueRange{dst});
    return success();
  }
  Value cur = memref::LoadOp::create(b, loc, args.lookup(out), ValueRange{dst});
  Value r;
  if (elem.isInteger(1)) {
    // Booleans: add and max are "or", mul and min "and".
    r = red == "add" || red == "max" ? arith::OrIOp::create(b, loc, cur, u).getResult()
                                     : arith::AndIOp::create(b, loc, cur, u).getResult();
    memref::StoreOp::create(b, loc, r, args.lookup(out), ValueRange{dst});
    return success();
  }
  if (isa<FloatType>(elem)) {
    Value a = e.toCompute(cur), c = e.toCompute(u);
    if (red == "add")
      r = arith::AddFOp::create(b, loc, a, c);
    else if (red == "mul")
      r = arith::MulFOp::create(b, loc, a, c);
    else if (red == "max") // std::max(a, c) and std::min(a, c), NaN included
      r = arith::SelectOp::create(
          b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, a, c), c, a);
    else
      r = arith::SelectOp::create(
          b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, c, a), c, a);
    e.store(r, args.lookup(out), dst);
    return success();
  }
  if (red == "add")
    r = arith::AddIOp::create(b, loc, cur, u);
  else if (red == "mul")
    r = arith::MulIOp::create(b, loc, cur, u);
  else if (red == "max")
    r = elem.isUnsignedInteger() ? arith::MaxUIOp::create(b, loc, cur, u).getResult()
                                 : arith::MaxSIOp::create(b, loc, cur, u).getResult();
  else
    r = elem.isUnsignedInteger() ? arith::MinUIOp::create(b, loc, cur, u).getResult()
                                 : arith::MinSIOp::create(b, loc, cur, u).getResult();
  memref::StoreOp::create(b, loc, r, args.lookup(out), ValueRange{dst});
  return success();
}

//===----------------------------------------------------------------------===//
// topk
//===----------------------------------------------------------------------===//

/// The key type topk compares for elements of type `elem`: as wide as the
/// compute type for floats; at least 32 bits for integers, and 64 for a
/// 32-bit unsigned one (its values do not fit a signed i32).
Type keyType(Type elem) {
  MLIRContext *ctx = elem.getContext();
  if (isa<FloatType>(elem))
    return IntegerType::get(ctx, computeType(elem).getIntOrFloatBitWidth());
  unsigned w = elem.getIntOrFloatBitWidth();
  if (elem.isUnsignedInteger() && w == 32)
    w = 64;
  return IntegerType::get(ctx, std::max(32u, w));
}

/// A signed key (of keyType(storage)) that orders like element `v` stored
/// as `storage`: floats through their bits (NaN the largest, -0 as +0),
/// integers as themselves (extended to the key's width; a 64-bit unsigned
/// one with its top bit flipped, so that signed order is unsigned order).
Value orderKey(EmitterBase &e, Value v, Type storage) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type t = v.getType();
  if (!isa<FloatType>(t)) {
    Type kt = keyType(storage);
    if (storage.isUnsignedInteger() && t == kt)
      return arith::XOrIOp::create(b, loc, v,
                                   e.intConst(kt, std::numeric_limits<int64_t>::min()));
    if (t == kt)
      return v;
    if (storage.isUnsignedInteger())
      return arith::ExtUIOp::create(b, loc, kt, v);
    return arith::ExtSIOp::create(b, loc, kt, v);
  }
  Value f = e.toCompute(v);
  unsigned width = f.getType().getIntOrFloatBitWidth();
  Type it = b.getIntegerType(width);
  Value bits = arith::BitcastOp::create(b, loc, it, f);
  int64_t magnitude = width == 64 ? std::numeric_limits<int64_t>::max()
                                  : std::numeric_limits<int32_t>::max();
  // Negative floats: flip the magnitude bits, so larger magnitudes order lower.
  Value neg = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, bits, e.intConst(it, 0));
  Value key = arith::SelectOp::create(
      b, loc, neg, arith::XOrIOp::create(b, loc, bits, e.intConst(it, magnitude)), bits);
  Value isZero = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, f,
                                       e.floatConst(f.getType(), 0.0));
  key = arith::SelectOp::create(b, loc, isZero, e.intConst(it, 0), key);
  Value isNan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, f, f);
  return arith::SelectOp::create(b, loc, isNan, e.intConst(it, magnitude), key);
}


struct TopKShape {
  AxisSplit split;
  int64_t k = 0, block = 0;
};
std::optional<TopKShape> topkShape(rt::KernelOp k) {
  auto s = splitAround(shapeOf(k.getInputs()[0]), paramInt(k, "axis", -1));
  if (!s)
    return std::nullopt;
  TopKShape t;
  t.split = *s;
  t.k = paramInt(k, "k", -1);
  if (t.k < 0 || t.k > s->n || s->n >= (int64_t(1) << 31))
    return std::nullopt;
  t.block = std::clamp<int64_t>((s->n + 31) / 32 * 32, 32, kBlock);
  return t;
}

LogicalResult emitTopK(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value x = k.getInputs()[0], vals = k.getOutputs()[0], idxs = k.getOutputs()[1];
  TopKShape shape = *topkShape(k);
  AxisSplit s = shape.split;
  bool largest = paramBool(k, "largest", true);
  Type kt = keyType(elemOf(x)), i32 = b.getI32Type();
  unsigned kw = kt.getIntOrFloatBitWidth();
  int64_t keyMax = kw == 64 ? std::numeric_limits<int64_t>::max()
                            : std::numeric_limits<int32_t>::max();
  int64_t keyMin = kw == 64 ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int32_t>::min();
  // "key comes after prev": smaller keys when largest, larger otherwise.
  arith::CmpIPredicate later = largest ? arith::CmpIPredicate::slt : arith::CmpIPredicate::sgt;

  Value line = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value step = gpu::BlockDimOp::create(b, loc, gpu::Dimension::x);
  Value base = lineStart(e, line, s, s.n);
  Value outBase = lineStart(e, line, s, shape.k);
  auto elementAt = [&](Value i) {
    return arith::AddIOp::create(b, loc, base, arith::MulIOp::create(b, loc, i, e.index(s.inner)))
        .getResult();
  };
  // Before round 0 everything comes after the (virtual) previous pick.
  Value startKey = e.intConst(kt, largest ? keyMax : keyMin);
  Value startIdx = e.intConst(i32, -1);
  auto rounds = scf::ForOp::create(b, loc, e.index(0), e.index(shape.k), e.index(1),
                                   ValueRange{startKey, startIdx});
  OpBuilder::InsertionGuard ig(b);
  b.setInsertionPointToStart(rounds.getBody());
  Value r = rounds.getInductionVar();
  Value prevKey = rounds.getRegionIterArgs()[0], prevIdx = rounds.getRegionIterArgs()[1];
  // Whether element (key, i) comes after the previous pick in the order.
  auto after = [&](Value key, Value i32Idx) {
    Value strictly = arith::CmpIOp::create(b, loc, later, key, prevKey);
    Value tie = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, key, prevKey),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, i32Idx, prevIdx));
    return arith::OrIOp::create(b, loc, strictly, tie).getResult();
  };
  // A strided pass of the block's threads over the line.
  auto pass = [&](Value init, function_ref<Value(Value acc, Value key, Value i32Idx)> fn) {
    auto loop = scf::ForOp::create(b, loc, tid, e.index(s.n), step, ValueRange{init});
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(loop.getBody());
    Value i = loop.getInductionVar();
    Value key = orderKey(
        e, memref::LoadOp::create(b, loc, args.lookup(x), ValueRange{elementAt(i)}), elemOf(x));
    Value i32Idx = arith::IndexCastOp::create(b, loc, i32, i);
    scf::YieldOp::create(b, loc, fn(loop.getRegionIterArgs()[0], key, i32Idx));
    return loop.getResult(0);
  };
  auto reduce = [&](Value v, gpu::AllReduceOperation op) {
    return gpu::AllReduceOp::create(b, loc, v, gpu::AllReduceOperationAttr::get(b.getContext(), op),
                                    /*uniform=*/true)
        .getResult();
  };
  Value none = e.intConst(kt, largest ? keyMin : keyMax);
  Value bestPart = pass(none, [&](Value acc, Value key, Value i) -> Value {
    Value cand = arith::SelectOp::create(b, loc, after(key, i), key, none);
    return largest ? arith::MaxSIOp::create(b, loc, acc, cand).getResult()
                   : arith::MinSIOp::create(b, loc, acc, cand).getResult();
  });
  Value best = reduce(bestPart, largest ? gpu::AllReduceOperation::MAXSI
                                        : gpu::AllReduceOperation::MINSI);
  Value noIdx = e.intConst(i32, std::numeric_limits<int32_t>::max());
  Value idxPart = pass(noIdx, [&](Value acc, Value key, Value i) -> Value {
    Value hit = arith::AndIOp::create(
        b, loc, after(key, i), arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, key, best));
    return arith::MinSIOp::create(b, loc, acc, arith::SelectOp::create(b, loc, hit, i, noIdx));
  });
  Value bestIdx = reduce(idxPart, gpu::AllReduceOperation::MINSI);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, e.index(0));
  auto write = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard wg(b);
    b.setInsertionPointToStart(&write.getThenRegion().front());
    Value at = arith::IndexCastOp::create(b, loc, b.getIndexType(), bestIdx);
    Value v = memref::LoadOp::create(b, loc, args.lookup(x), ValueRange{elementAt(at)});
    Value dst = arith::AddIOp::create(b, loc, outBase,
                                      arith::MulIOp::create(b, loc, r, e.index(s.inner)));
    memref::StoreOp::create(b, loc, v, args.lookup(vals), ValueRange{dst});
    memref::StoreOp::create(b, loc, arith::ExtSIOp::create(b, loc, b.getI64Type(), bestIdx),
                            args.lookup(idxs), ValueRange{dst});
  }
  scf::YieldOp::create(b, loc, ValueRange{best, bestIdx});
  return success();
}

//===----------------------------------------------------------------------===//
// einsum (any equation the megatron rewrite did not turn into a matmul)
//===----------------------------------------------------------------------===//

/// An einsum as loops: every label with its size and, per input, the
/// stride it advances (0 where the input lacks it or broadcasts it; the
/// sum of strides for a label repeated in one term, a diagonal).
struct EinsumPlan {
  struct Label {
    int64_t size = -1;
    SmallVector<int64_t> strides; // per input
  };
  SmallVector<Label> out, summed;
};

/// The labels of one term, '.' standing for the ellipsis; false when
/// malformed.
bool parseTerm(StringRef term, std::string &labels) {
  labels.clear();
  size_t dots = term.find("...");
  std::string t = dots == StringRef::npos
                      ? term.str()
                      : (term.substr(0, dots) + "." + term.substr(dots + 3)).str();
  int ellipses = 0;
  for (char c : t) {
    if (c == '.')
      ++ellipses;
    else if (!std::isalpha(static_cast<unsigned char>(c)))
      return false;
  }
  labels = t;
  return ellipses <= 1;
}

std::optional<EinsumPlan> planEinsum(rt::KernelOp k, std::string &why) {
  auto eqAttr = dyn_cast_or_null<StringAttr>(k.getParam("equation"));
  if (!eqAttr)
    return why = "no equation", std::nullopt;
  std::string eq;
  for (char c : eqAttr.getValue())
    if (c != ' ')
      eq.push_back(c);
  size_t arrow = eq.find("->");
  StringRef lhs = StringRef(eq).substr(0, arrow);
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  size_t n = k.getInputs().size();
  if (terms.size() != n)
    return why = "the equation has " + std::to_string(terms.size()) + " terms for " +
                 std::to_string(n) + " inputs",
           std::nullopt;
  SmallVector<std::string> inputs(n);
  for (size_t i = 0; i < n; ++i)
    if (!parseTerm(terms[i], inputs[i]))
      return why = "malformed term '" + terms[i].str() + "'", std::nullopt;
  std::string output;
  if (arrow != std::string::npos) {
    if (!parseTerm(StringRef(eq).substr(arrow + 2), output))
      return why = "malformed output term", std::nullopt;
  } else {
    // Implicit output: the ellipsis, then the labels used once, sorted.
    std::map<char, int> counts;
    bool ellipsis = false;
    for (const std::string &in : inputs)
      for (char c : in)
        c == '.' ? (void)(ellipsis = true) : (void)++counts[c];
    if (ellipsis)
      output.push_back('.');
    for (auto [c, count] : counts)
      if (count == 1)
        output.push_back(c);
  }
  // Ids: letters 0..51, then the ellipsis dimensions (right-aligned).
  auto letterId = [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ? c - 'a' : 26 + (c - 'A');
  };
  size_t ellipsisRank = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t rank = shapeOf(k.getInputs()[i]).size();
    bool has = inputs[i].find('.') != std::string::npos;
    size_t named = inputs[i].size() - (has ? 1 : 0);
    if ((!has && rank != named) || (has && rank < named))
      return why = "term " + std::to_string(i) + " does not match operand rank " +
                   std::to_string(rank),
             std::nullopt;
    if (has)
      ellipsisRank = std::max(ellipsisRank, rank - named);
  }
  SmallVector<EinsumPlan::Label> labels(52 + ellipsisRank);
  for (auto &l : labels)
    l.strides.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    ArrayRef<int64_t> shape = shapeOf(k.getInputs()[i]);
    SmallVector<int64_t> strides = stridesOf(shape);
    const std::string &term = inputs[i];
    bool has = term.find('.') != std::string::npos;
    size_t er = has ? shape.size() - (term.size() - 1) : 0, dim = 0;
    auto bind = [&](size_t id, bool broadcastable) {
      EinsumPlan::Label &l = labels[id];
      int64_t size = shape[dim], stride = strides[dim];
      ++dim;
      if (broadcastable && size == 1) {
        if (l.size < 0)
          l.size = 1;
        return true;
      }
      if (l.size >= 0 && l.size != size && !(broadcastable && l.size == 1))
        return false;
      l.size = size;
      l.strides[i] += stride;
      return true;
    };
    for (char c : term) {
      bool ok = true;
      if (c == '.') {
        for (size_t d = 0; d < er && ok; ++d)
          ok = bind(52 + ellipsisRank - er + d, true);
      } else {
        ok = bind(size_t(letterId(c)), false);
      }
      if (!ok)
        return why = "dimension sizes of the operands disagree", std::nullopt;
    }
  }
  EinsumPlan plan;
  SmallVector<bool> inOutput(labels.size(), false);
  for (char c : output) {
    SmallVector<size_t> ids;
    if (c == '.')
      for (size_t d = 0; d < ellipsisRank; ++d)
        ids.push_back(52 + d);
    else
      ids.push_back(size_t(letterId(c)));
    for (size_t id : ids) {
      if (c != '.' && labels[id].size < 0)
        return why = std::string("output label '") + c + "' is in no input", std::nullopt;
      if (labels[id].size < 0)
        labels[id].size = 1;
      inOutput[id] = true;
      plan.out.push_back(labels[id]);
    }
  }
  for (size_t id = 0; id < labels.size(); ++id)
    if (labels[id].size >= 0 && !inOutput[id])
      plan.summed.push_back(labels[id]);
  int64_t count = 1;
  for (auto &l : plan.out)
    count *= l.size;
  if (count != numel(k.getOutputs()[0]))
    return why = "the result's size does not match the equation", std::nullopt;
  return plan;
}

/// One thread per output element; one loop per summed label, accumulating
/// the product of the inputs (f32 for floats, f64 for f64, i64 for
/// integers).
LogicalResult emitEinsum(EmitterBase &e, rt::KernelOp k, DenseMap<Value, Value> &args) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  std::string why;
  EinsumPlan plan = *planEinsum(k, why);
  Value out = k.getOutputs()[0];
  Type acc = accumulatorType(elemOf(out));
  size_t n = k.getInputs().size();
  OpBuilder::InsertionGuard ig(b);
  Value idx = threadPerItem(e, numel(out));
  SmallVector<int64_t> outShape;
  for (auto &l : plan.out)
    outShape.push_back(l.size);
  SmallVector<Value> base(n, e.index(0));
  if (!outShape.empty()) {
    SmallVector<Value> coords = e.delinearize(idx, outShape);
    for (auto [c, l] : llvm::zip(coords, plan.out))
      for (size_t i = 0; i < n; ++i)
        if (l.strides[i])
          base[i] = arith::AddIOp::create(b, loc, base[i],
                                          arith::MulIOp::create(b, loc, c, e.index(l.strides[i])));
  }
  bool isFloat = isa<FloatType>(acc);
  std::function<Value(size_t, SmallVector<Value>, Value)> walk =
      [&](size_t level, SmallVector<Value> offsets, Value a) -> Value {
    if (level == plan.summed.size()) {
      Value p;
      for (size_t i = 0; i < n; ++i) {
        Value v = toAccumulator(
            e, memref::LoadOp::create(b, loc, args.lookup(k.getInputs()[i]), ValueRange{offsets[i]}),
            elemOf(k.getInputs()[i]), acc);
        p = !p ? v
               : isFloat ? arith::MulFOp::create(b, loc, p, v).getResult()
                         : arith::MulIOp::create(b, loc, p, v).getResult();
      }
      return isFloat ? arith::AddFOp::create(b, loc, a, p).getResult()
                     : arith::AddIOp::create(b, loc, a, p).getResult();
    }
    const EinsumPlan::Label &l = plan.summed[level];
    auto loop = scf::ForOp::create(b, loc, e.index(0), e.index(l.size), e.index(1), ValueRange{a});
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = loop.getInductionVar();
    for (size_t i = 0; i < n; ++i)
      if (l.strides[i])
        offsets[i] = arith::AddIOp::create(b, loc, offsets[i],
                                           arith::MulIOp::create(b, loc, j, e.index(l.strides[i])));
    scf::YieldOp::create(b, loc, walk(level + 1, offsets, loop.getRegionIterArgs()[0]));
    return loop.getResult(0);
  };
  Value zero = isFloat ? e.floatConst(acc, 0.0) : e.intConst(acc, 0);
  storeAccumulator(e, walk(0, base, zero), args.lookup(out), idx);
  return success();
}

} // namespace

bool shardflow::rtgpu::checksData(rt::KernelOp k) {
  StringRef name = k.getKernel();
  return name == "gather_elements" || name == "scatter_nd_updates" ||
         (name == "rotary_embedding" && k.getInputs().size() > 3) ||
         ((name == "div" || name == "mod") && isa<IntegerType>(elemOf(k.getOutputs()[0])));
}

FailureOr<LaunchShape> shardflow::rtgpu::standaloneShape(rt::KernelOp k) {
  StringRef name = k.getKernel();
  auto fail = [&](const Twine &why) -> FailureOr<LaunchShape> {
    return k.emitOpError("cannot be generated for CUDA: ") << why, failure();
  };
  for (Value v : llvm::concat<Value>(k.getInputs(), k.getOutputs())) {
    Type t = elemOf(v);
    if (!isSupportedElement(t))
      return k.emitOpError("element type ") << t << " of kernel '" << name
                                            << "' is not supported on the CUDA target yet",
             failure();
  }
  LaunchShape shape;
  if (isReduction(name)) {
    if (k.getInputs().size() != 1 || k.getOutputs().size() != 1)
      return fail("a reduction reads one buffer and writes one");
    Type t = elemOf(k.getInputs()[0]);
    if (!isNumeric(t) && !(t.isInteger(1) && (name == "reduce_max" || name == "reduce_min")))
      return fail("a " + name + " of booleans");
    if (!reducedAxes(k))
      return fail("reduction axes out of range");
    shape.grid = blocksFor(numel(k.getOutputs()[0]));
  } else if (name == "cumsum") {
    auto p = cumsumPlan(k);
    if (!p || !isNumeric(elemOf(k.getInputs()[0])))
      return fail("cumsum needs a numeric input and an axis in range");
    int64_t lines = p->split.outer * p->split.inner;
    if (p->blockScan) {
      shape.grid = lines;
      shape.block = p->block;
      return shape;
    }
    shape.grid = blocksFor(lines);
  } else if (name == "gather_elements") {
    ArrayRef<int64_t> in = shapeOf(k.getInputs()[0]), idx = shapeOf(k.getInputs()[1]);
    int64_t axis = paramInt(k, "axis", 0);
    if (axis < 0)
      axis += in.size();
    if (in.size() != idx.size() || axis < 0 || axis >= int64_t(in.size()) ||
        !elemOf(k.getInputs()[1]).isSignlessInteger() || elemOf(k.getInputs()[1]).isInteger(1))
      return fail("gather_elements needs integer indices of the input's rank and an axis in "
                  "range");
    shape.grid = blocksFor(numel(k.getOutputs()[0]));
  } else if (name == "scatter_nd_updates") {
    auto s = scatterShape(k);
    if (!s)
      return fail("scatter_nd indices and updates do not match the data");
    shape.grid = blocksFor(s->slice);
  } else if (name == "einsum") {
    std::string why;
    if (k.getOutputs().size() != 1 || k.getInputs().empty() || !planEinsum(k, why))
      return fail(why.empty() ? std::string("einsum needs inputs and one result") : why);
    for (Value v : llvm::concat<Value>(k.getInputs(), k.getOutputs()))
      if (!isNumeric(elemOf(v)))
        return fail("einsum of booleans");
    shape.grid = blocksFor(numel(k.getOutputs()[0]));
  } else if (name == "arg_max" || name == "arg_min") {
    auto split = splitAround(shapeOf(k.getInputs()[0]), paramInt(k, "axis", 0));
    if (!split || split->n == 0 || !elemOf(k.getOutputs()[0]).isInteger(64))
      return fail(name + " needs an axis in range, not empty, and an i64 result");
    shape.grid = blocksFor(split->outer * split->inner);
  } else if (name == "topk") {
    auto t = topkShape(k);
    if (!t || elemOf(k.getInputs()[0]).isInteger(1))
      return fail("topk needs a numeric input, an axis in range and k at most its size");
    shape.grid = t->split.outer * t->split.inner;
    shape.block = t->block;
    if (t->k == 0)
      shape.grid = 0;
    return shape;
  }
  shape.block = kBlock;
  return shape;
}

LogicalResult shardflow::rtgpu::emitStandalone(EmitterBase &e, rt::KernelOp k,
                                               DenseMap<Value, Value> &args) {
  StringRef name = k.getKernel();
  if (isReduction(name))
    return emitReduce(e, k, args);
  if (name == "arg_max" || name == "arg_min")
    return emitArgReduce(e, k, args);
  if (name == "cumsum")
    return emitCumsum(e, k, args);
  if (name == "gather_elements")
    return emitGatherElements(e, k, args);
  if (name == "scatter_nd_updates")
    return emitScatter(e, k, args);
  if (name == "einsum")
    return emitEinsum(e, k, args);
  return emitTopK(e, k, args);
}
