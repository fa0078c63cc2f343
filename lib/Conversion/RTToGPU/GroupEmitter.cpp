//===- GroupEmitter.cpp - a fusion group as a generated kernel ------------===//
//
// Loop groups run 256 threads per block, each thread taking one element
// or, with vector accesses, a run of consecutive elements of every
// member's output; siblings take their own ranges of blocks. Row groups
// run one block per row, or one warp per row for short contiguous rows,
// the row kept in shared memory between passes when it fits. Standalone
// kernels have launch shapes of their own (StandaloneKernels.cpp).
//
//===----------------------------------------------------------------------===//

#include "GroupEmitter.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace shardflow;
using namespace shardflow::rtgpu;

namespace {

constexpr int64_t kLoopBlock = 256; // threads per block, elementwise kernels
constexpr int64_t kRowBlock = 256;  // threads per block (one row), reductions
constexpr int64_t kMaxCachedRow = 8192; // rows up to this many elements stay in shared memory
constexpr int64_t kWarpRowMax = 1024;   // contiguous rows up to this long: one warp per row
constexpr int64_t kUnrolledRowSteps = 8; // a row loop of at most this many steps: unrolled
constexpr int64_t kWarpsPerBlock = 8;   // rows per block in that layout

/// Short contiguous rows (the hidden size of a transformer) run one warp
/// per row, several rows per block: the reductions are warp shuffles, with
/// no shared memory and no barrier, and a row's latency chain is not
/// stretched over a block that has little to do. Longer or strided rows
/// run one block per row. f64 rows stay on blocks (32-bit shuffles).
bool warpPerRow(const RowGeometry &g, Type computeElem) {
  return g.inner == 1 && g.length <= kWarpRowMax && computeElem.isF32();
}

/// Pads a reduction's partial value across the block: every thread of the
/// block takes part.
Value blockReduce(OpBuilder &b, Location loc, Value v, gpu::AllReduceOperation op) {
  return gpu::AllReduceOp::create(b, loc, v, gpu::AllReduceOperationAttr::get(b.getContext(), op),
                                  /*uniform=*/true)
      .getResult();
}

/// The same across one warp: a butterfly of xor shuffles (16, 8, 4, 2, 1),
/// after which every lane holds the result. Every lane of the warp takes
/// part.
Value warpReduce(OpBuilder &b, Location loc, Value v, gpu::AllReduceOperation op) {
  Value width = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 32);
  for (int offset = 16; offset >= 1; offset /= 2) {
    Value off = arith::ConstantIntOp::create(b, loc, b.getI32Type(), offset);
    Value other = gpu::ShuffleOp::create(b, loc, v, off, width, gpu::ShuffleMode::XOR)
                      .getShuffleResult();
    switch (op) {
    case gpu::AllReduceOperation::MAXIMUMF:
      v = arith::MaximumFOp::create(b, loc, v, other);
      break;
    case gpu::AllReduceOperation::MINIMUMF:
      v = arith::MinimumFOp::create(b, loc, v, other);
      break;
    case gpu::AllReduceOperation::MUL:
      v = arith::MulFOp::create(b, loc, v, other);
      break;
    default:
      v = arith::AddFOp::create(b, loc, v, other);
    }
  }
  return v;
}

} // namespace

int64_t GroupEmitter::laneCount(const Group &g, int64_t elements) const {
  if (!vectorize || elements < 2)
    return 1;
  int64_t narrowest = kVectorBytes;
  for (rt::KernelOp k : g.members)
    for (Value v : llvm::concat<Value>(k.getInputs(), k.getOutputs())) {
      Type t = elemOf(v);
      if (!t.isIntOrFloat() || t.getIntOrFloatBitWidth() % 8 != 0)
        return 1;
      narrowest = std::min<int64_t>(narrowest, nn::getElementStorageBytes(t));
    }
  int64_t width = std::min(kMaxLanes, kVectorBytes / narrowest);
  while (width > 1 && elements % width != 0)
    width /= 2;
  return width;
}

LogicalResult GroupEmitter::emitLoopBody(KernelEmitter &e, ArrayRef<rt::KernelOp> members,
                                         const Group &g, Value base, int64_t width,
                                         DenseMap<Value, Value> &args,
                                         DenseMap<Value, Lanes> &values, bool store) {
  for (rt::KernelOp k : members) {
    Value out = k.getOutputs()[0];
    e.checker = e.checkers.lookup(k);
    if (readsNeighbours(k.getKernel())) {
      // Each lane reads its own neighbourhood.
      StringRef kind = k.getKernel();
      Lanes results, indices; // indices: max_pool_with_indices' second result
      // Batch normalization reads its input element for element: from a
      // register when an earlier member computes it.
      const Lanes *fused = nullptr;
      if (kind == "batch_normalization")
        if (auto it = values.find(rootOf(k.getInputs()[0])); it != values.end())
          fused = &it->second;
      for (int64_t i = 0; i < width; ++i) {
        Value idx = e.lane(base, i), laneIndices;
        FailureOr<Value> r = kind == "rotary_embedding" ? e.rotary(k, args, idx)
                             : kind == "rotate_half"    ? e.rotateHalf(k, args, idx)
                             : kind == "batch_normalization"
                                 ? e.batchNorm(k, args, idx, fused ? (*fused)[size_t(i)] : Value())
                             : kind == "im2col"              ? e.im2col(k, args, idx)
                             : kind == "keyed_dropout"       ? e.keyedDropout(k, args, idx)
                                                             : e.pool(k, args, idx, &laneIndices);
        if (failed(r))
          return failure();
        results.push_back(*r);
        if (laneIndices)
          indices.push_back(laneIndices);
      }
      if (store && !isInternal(g, out))
        e.storeLanes(results, args.lookup(out), base);
      if (!indices.empty() && store)
        e.storeLanes(indices, args.lookup(k.getOutputs()[1]), base);
      values[out] = std::move(results);
      continue;
    }
    SmallVector<Lanes> operands;
    for (Value in : k.getInputs()) {
      auto it = values.find(rootOf(in));
      if (it != values.end()) {
        // Computed by an earlier member, read element for element.
        operands.push_back(it->second);
        continue;
      }
      operands.push_back(e.loadLanes(args.lookup(in), shapeOf(out), shapeOf(in), base, width));
    }
    Lanes results;
    for (int64_t i = 0; i < width; ++i) {
      SmallVector<Value> laneOperands;
      for (const Lanes &o : operands)
        laneOperands.push_back(o[size_t(i)]);
      FailureOr<Value> r = e.elementwise(k, laneOperands, e.lane(base, i));
      if (failed(r))
        return failure();
      results.push_back(*r);
    }
    if (store && !isInternal(g, out))
      e.storeLanes(results, args.lookup(out), base);
    values[out] = std::move(results);
  }
  return success();
}

FailureOr<Value> GroupEmitter::emitRowBody(KernelEmitter &e, Group &g,
                                           DenseMap<Value, Value> &args) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  rt::KernelOp k = g.row;
  size_t at = llvm::find(g.members, k) - g.members.begin();
  ArrayRef<rt::KernelOp> prologue = ArrayRef<rt::KernelOp>(g.members).take_front(at),
                         epilogue = ArrayRef<rt::KernelOp>(g.members).drop_front(at + 1);
  StringRef name = k.getKernel();
  Value x = k.getInputs()[0], out = k.getOutputs()[0];
  bool xFromPrologue = llvm::any_of(
      prologue, [&](rt::KernelOp m) { return m.getOutputs()[0] == rootOf(x); });
  ArrayRef<int64_t> shape = shapeOf(x);
  RowGeometry geometry = *rowGeometry(k);
  int64_t length = geometry.length, inner = geometry.inner;
  Type ft = computeType(elemOf(out));
  // Each thread takes `width` consecutive elements of a contiguous row.
  int64_t width = inner == 1 ? laneCount(g, length) : 1;
  // Ops made below land before whatever follows the body (gpu.return),
  // also when the body sits in a guard.
  OpBuilder::InsertionGuard bodyGuard(b);

  Value row, tid, step, warp;
  bool warps = warpPerRow(geometry, ft);
  if (warps) {
    // Warp w of block b takes row b * W + w; its lanes stride the row.
    int64_t perBlock = std::min(kWarpsPerBlock, geometry.rows);
    Value thread = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    warp = arith::DivUIOp::create(b, loc, thread, e.index(32));
    tid = arith::RemUIOp::create(b, loc, thread, e.index(32));
    step = e.index(32);
    row = arith::AddIOp::create(
        b, loc,
        arith::MulIOp::create(b, loc, gpu::BlockIdOp::create(b, loc, gpu::Dimension::x),
                              e.index(perBlock)),
        warp);
    if (geometry.rows % perBlock) {
      // The last block's spare warps have no row (whole warps: the
      // shuffles see no partial warp).
      Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row,
                                            e.index(geometry.rows));
      auto ifOp = scf::IfOp::create(b, loc, inRange, /*withElseRegion=*/false);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    }
  } else {
    row = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    step = gpu::BlockDimOp::create(b, loc, gpu::Dimension::x);
  }
  auto reduce = [&](Value v, gpu::AllReduceOperation op) {
    return warps ? warpReduce(b, loc, v, op) : blockReduce(b, loc, v, op);
  };
  Value base;
  if (inner == 1)
    base = arith::MulIOp::create(b, loc, row, e.index(length));
  else {
    Value outer = arith::DivUIOp::create(b, loc, row, e.index(inner));
    Value in = arith::RemUIOp::create(b, loc, row, e.index(inner));
    base = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, outer, e.index(length * inner)), in);
  }
  auto elementIndex = [&](OpBuilder &lb, Value j) -> Value {
    Value off = inner == 1 ? j : arith::MulIOp::create(lb, loc, j, e.index(inner)).getResult();
    return arith::AddIOp::create(lb, loc, base, off);
  };
  // x at this row's elements j .. j + width - 1, computed by the prologue
  // when there is one.
  auto valueAt = [&](Value flat, bool store) -> FailureOr<Lanes> {
    if (!xFromPrologue)
      return e.loadLanes(args.lookup(x), shape, shape, flat, width);
    DenseMap<Value, Lanes> values;
    if (failed(emitLoopBody(e, prologue, g, flat, width, args, values, store)))
      return failure();
    return values.lookup(rootOf(x));
  };
  // A strided loop of the row's threads over the row, `width` elements a
  // step, folding `fn`. When all of the row's threads (a warp, or the
  // block of the launch's known size) take the same few steps (the row a
  // multiple of threads x width, at most kUnrolledRowSteps of them), the
  // steps are unrolled: their loads are independent and the backend can
  // issue them together, where a loop waits for each load before the next
  // (GPT-2's layer norm of 768 bf16 elements, a warp: 3 steps; Llama's
  // RMS norm of 4096, a block of 256: 2). The folds happen in the same
  // order either way.
  int64_t rowThreads = 32;
  if (!warps) {
    auto fn = b.getBlock()->getParent()->getParentOfType<gpu::GPUFuncOp>();
    auto known = fn ? fn.getKnownBlockSizeAttr() : DenseI32ArrayAttr();
    rowThreads = known ? known[0] : 0;
  }
  auto rowLoop = [&](Value init,
                     function_ref<FailureOr<Value>(Value acc, Value flat, Value j)> fn)
      -> FailureOr<Value> {
    Value from = width == 1 ? tid : arith::MulIOp::create(b, loc, tid, e.index(width)).getResult();
    if (int64_t perStep = rowThreads * width;
        perStep > 0 && length % perStep == 0 && length / perStep <= kUnrolledRowSteps) {
      Value acc = init;
      for (int64_t i = 0; i < length / perStep; ++i) {
        Value j = i == 0 ? from
                         : arith::AddIOp::create(b, loc, from, e.index(i * perStep)).getResult();
        FailureOr<Value> next = fn(acc, elementIndex(b, j), j);
        if (failed(next))
          return failure();
        acc = *next;
      }
      return acc;
    }
    Value by = step;
    if (width > 1)
      by = warps ? e.index(32 * width)
                 : arith::MulIOp::create(b, loc, step, e.index(width)).getResult();
    auto loop = scf::ForOp::create(b, loc, from, e.index(length), by, ValueRange{init});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = loop.getInductionVar();
    FailureOr<Value> next = fn(loop.getRegionIterArgs()[0], elementIndex(b, j), j);
    if (failed(next))
      return failure();
    scf::YieldOp::create(b, loc, *next);
    return loop.getResult(0);
  };
  // The first pass reads (or computes) each element once and keeps it in
  // shared memory when the row fits: the later passes read it back from
  // there. Each thread reads back only what it wrote (the same j), so no
  // barrier is needed. Longer rows are read (or recomputed) again. The
  // prologue's stores (outputs that leave the group) happen in the first
  // pass only.
  // With a warp per row, each warp has its own stretch of the cache.
  Value cache;
  if (length <= kMaxCachedRow && !isReduction(name)) { // a reduction reads once
    auto fn = b.getBlock()->getParent()->getParentOfType<gpu::GPUFuncOp>();
    auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    int64_t rowsHere = warps ? std::min(kWarpsPerBlock, geometry.rows) : 1;
    cache = fn.addWorkgroupAttribution(
        MemRefType::get({rowsHere * length}, ft, MemRefLayoutAttrInterface{}, space), loc);
    // Vector accesses need the cache aligned to their size.
    if (width > 1)
      fn.setWorkgroupAttributionAttr(fn.getNumWorkgroupAttributions() - 1,
                                   b.getStringAttr("llvm.align"),
                                   b.getI64IntegerAttr(kVectorBytes));
  }
  auto cacheIndex = [&](Value j) -> Value {
    if (!warps)
      return j;
    return arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, warp, e.index(length)),
                                 j);
  };
  bool firstPass = true;
  auto xAt = [&](Value flat, Value j) -> FailureOr<Lanes> {
    if (cache && !firstPass) {
      Value at = cacheIndex(j);
      if (width == 1)
        return Lanes{memref::LoadOp::create(b, loc, cache, ValueRange{at}).getResult()};
      Value v = vector::LoadOp::create(b, loc, VectorType::get({width}, ft), cache,
                                       ValueRange{at}, /*nontemporal=*/false,
                                       laneAlignment(ft, width));
      Lanes out;
      for (int64_t i = 0; i < width; ++i)
        out.push_back(vector::ExtractOp::create(b, loc, v, i));
      return out;
    }
    FailureOr<Lanes> v = valueAt(flat, /*store=*/firstPass);
    if (succeeded(v) && cache)
      e.storeLanes(*v, cache, cacheIndex(j));
    return v;
  };
  // Folds `fn` over the lanes of x at (flat, j).
  auto foldLanes = [&](Value acc, Value flat, Value j,
                       function_ref<Value(Value acc, Value x)> fn) -> FailureOr<Value> {
    FailureOr<Lanes> v = xAt(flat, j);
    if (failed(v))
      return failure();
    for (Value xi : *v)
      acc = fn(acc, xi);
    return acc;
  };
  Value zero = e.floatConst(ft, 0.0);
  Value lengthF = e.floatConst(ft, double(length));
  auto add = [&](Value acc, Value v) { return arith::AddFOp::create(b, loc, acc, v).getResult(); };
  auto max = [&](Value acc, Value v) {
    return arith::MaximumFOp::create(b, loc, acc, v).getResult();
  };

  if (isReduction(name)) {
    // One pass; thread 0 writes the row's result (results are in row order).
    // Sums (and means), maxima, minima, products.
    gpu::AllReduceOperation kind = name == "reduce_max"    ? gpu::AllReduceOperation::MAXIMUMF
                                   : name == "reduce_min"  ? gpu::AllReduceOperation::MINIMUMF
                                   : name == "reduce_prod" ? gpu::AllReduceOperation::MUL
                                                           : gpu::AllReduceOperation::ADD;
    Value init = kind == gpu::AllReduceOperation::MAXIMUMF   ? e.floatConst(ft, -INFINITY)
                 : kind == gpu::AllReduceOperation::MINIMUMF ? e.floatConst(ft, INFINITY)
                 : kind == gpu::AllReduceOperation::MUL      ? e.floatConst(ft, 1.0)
                                                             : zero;
    FailureOr<Value> partial = rowLoop(init, [&](Value acc, Value flat, Value j) {
      return foldLanes(acc, flat, j, [&](Value a, Value v) -> Value {
        switch (kind) {
        case gpu::AllReduceOperation::MAXIMUMF:
          return max(a, v);
        case gpu::AllReduceOperation::MINIMUMF:
          return arith::MinimumFOp::create(b, loc, a, v).getResult();
        case gpu::AllReduceOperation::MUL:
          return arith::MulFOp::create(b, loc, a, v).getResult();
        default:
          return add(a, v);
        }
      });
    });
    if (failed(partial))
      return failure();
    Value r = reduce(*partial, kind);
    if (name == "reduce_mean" || name == "global_average_pool")
      r = arith::DivFOp::create(b, loc, r, lengthF);
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, e.index(0));
    auto ifOp = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    e.store(r, args.lookup(out), row);
    return Value();
  }

  // The last pass: computes each lane's result from x, runs the epilogue
  // on it, and stores what leaves the group.
  auto storePass = [&](function_ref<Value(Value x, Value j, int64_t i)> fn) -> LogicalResult {
    return rowLoop(zero, [&](Value acc, Value flat, Value j) -> FailureOr<Value> {
      FailureOr<Lanes> v = xAt(flat, j);
      if (failed(v))
        return failure();
      Lanes r;
      for (auto [i, xi] : llvm::enumerate(*v))
        r.push_back(fn(xi, j, int64_t(i)));
      if (!isInternal(g, out))
        e.storeLanes(r, args.lookup(out), flat);
      if (!epilogue.empty()) {
        DenseMap<Value, Lanes> values;
        values[rootOf(out)] = std::move(r);
        if (failed(emitLoopBody(e, epilogue, g, flat, width, args, values, /*store=*/true)))
          return failure();
      }
      return acc;
    });
  };

  if (name == "softmax" || name == "log_softmax") {
    Value lowest = e.floatConst(ft, -INFINITY);
    FailureOr<Value> partialMax = rowLoop(lowest, [&](Value acc, Value flat, Value j) {
      return foldLanes(acc, flat, j, max);
    });
    if (failed(partialMax))
      return failure();
    firstPass = false;
    Value m = reduce(*partialMax, gpu::AllReduceOperation::MAXIMUMF);
    FailureOr<Value> partialSum = rowLoop(zero, [&](Value acc, Value flat, Value j) {
      return foldLanes(acc, flat, j, [&](Value acc, Value v) {
        Value ex = math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, v, m));
        return add(acc, ex);
      });
    });
    if (failed(partialSum))
      return failure();
    Value s = reduce(*partialSum, gpu::AllReduceOperation::ADD);
    Value logS = name == "log_softmax" ? math::LogOp::create(b, loc, s).getResult() : Value();
    Value invS = name == "softmax"
                     ? arith::DivFOp::create(b, loc, e.floatConst(ft, 1.0), s).getResult()
                     : Value();
    if (failed(storePass([&](Value v, Value, int64_t) -> Value {
          Value shifted = arith::SubFOp::create(b, loc, v, m);
          return name == "softmax"
                     ? arith::MulFOp::create(b, loc, math::ExpOp::create(b, loc, shifted), invS)
                           .getResult()
                     : arith::SubFOp::create(b, loc, shifted, logS).getResult();
        })))
      return failure();
    return Value();
  }

  // Layer / RMS normalization over the trailing `length` elements.
  auto epsAttr = dyn_cast_or_null<FloatAttr>(k.getParam("epsilon"));
  Value eps = e.floatConst(ft, epsAttr ? epsAttr.getValueAsDouble() : 1e-5);
  Value scale = k.getInputs()[1];
  auto mulF = [&](Value a, Value c) { return arith::MulFOp::create(b, loc, a, c).getResult(); };
  auto subF = [&](Value a, Value c) { return arith::SubFOp::create(b, loc, a, c).getResult(); };
  ArrayRef<int64_t> normalized = shape.drop_front(geometry.first);
  bool backward = name == "normalization_grad";
  auto rmsAttr = backward ? dyn_cast_or_null<BoolAttr>(k.getParam("rms")) : BoolAttr();
  bool rms = backward ? rmsAttr && rmsAttr.getValue() : name == "rms_normalization";
  // The row's statistics (the backward recomputes the forward's): the mean
  // (layer norm), then r = 1 / sqrt(var + eps).
  Value mean;
  if (!rms) {
    FailureOr<Value> partial = rowLoop(zero, [&](Value acc, Value flat, Value j) {
      return foldLanes(acc, flat, j, add);
    });
    if (failed(partial))
      return failure();
    firstPass = false;
    mean = arith::DivFOp::create(b, loc, reduce(*partial, gpu::AllReduceOperation::ADD),
                                 lengthF);
  }
  FailureOr<Value> partialSq = rowLoop(zero, [&](Value acc, Value flat, Value j) {
    return foldLanes(acc, flat, j, [&](Value acc, Value v) {
      Value d = mean ? subF(v, mean) : v;
      return add(acc, mulF(d, d));
    });
  });
  if (failed(partialSq))
    return failure();
  firstPass = false;
  Value var = arith::DivFOp::create(
      b, loc, reduce(*partialSq, gpu::AllReduceOperation::ADD), lengthF);
  Value inv = math::RsqrtOp::create(b, loc, arith::AddFOp::create(b, loc, var, eps));

  if (backward) {
    // The norms' backward: the row sums of g = dy * scale and of g * xhat,
    // then dx = r (g - mean(g) - xhat mean(g xhat)) (RMS: no mean(g)).
    Value dy = k.getInputs()[2];
    // g at this step's lanes (dy from memory, the scale broadcast).
    auto gAt = [&](Value flat, Value j) {
      Lanes dys = e.loadLanes(args.lookup(dy), shape, shape, flat, width);
      Lanes scales = e.loadLanes(args.lookup(scale), normalized, shapeOf(scale), j, width);
      Lanes g;
      for (auto [d, s] : llvm::zip(dys, scales))
        g.push_back(mulF(d, s));
      return g;
    };
    auto xhatOf = [&](Value v) { return mulF(mean ? subF(v, mean) : v, inv); };
    Value meanG;
    if (!rms) {
      FailureOr<Value> partialG = rowLoop(zero, [&](Value acc, Value flat, Value j) -> FailureOr<Value> {
        for (Value gi : gAt(flat, j))
          acc = add(acc, gi);
        return acc;
      });
      if (failed(partialG))
        return failure();
      meanG = arith::DivFOp::create(b, loc, reduce(*partialG, gpu::AllReduceOperation::ADD),
                                    lengthF);
    }
    FailureOr<Value> partialGX = rowLoop(zero, [&](Value acc, Value flat, Value j) -> FailureOr<Value> {
      FailureOr<Lanes> xs = xAt(flat, j);
      if (failed(xs))
        return failure();
      for (auto [gi, xi] : llvm::zip(gAt(flat, j), *xs))
        acc = add(acc, mulF(gi, xhatOf(xi)));
      return acc;
    });
    if (failed(partialGX))
      return failure();
    Value meanGX = arith::DivFOp::create(
        b, loc, reduce(*partialGX, gpu::AllReduceOperation::ADD), lengthF);
    // g for the last pass, loaded with each step's first lane.
    Lanes gs;
    if (failed(storePass([&](Value v, Value j, int64_t i) -> Value {
          if (i == 0)
            gs = gAt(elementIndex(b, j), j);
          Value inner = subF(gs[size_t(i)], mulF(xhatOf(v), meanGX));
          if (meanG)
            inner = subF(inner, meanG);
          return mulF(inv, inner);
        })))
      return failure();
    return Value();
  }

  Value bias = k.getInputs().size() > 2 ? k.getInputs()[2] : Value();
  // Scale and bias at this step's elements, loaded with its first lane.
  Lanes scales, biases;
  if (failed(storePass([&](Value v, Value j, int64_t i) -> Value {
        if (i == 0) {
          scales = e.loadLanes(args.lookup(scale), normalized, shapeOf(scale), j, width);
          if (bias)
            biases = e.loadLanes(args.lookup(bias), normalized, shapeOf(bias), j, width);
        }
        Value d = mean ? arith::SubFOp::create(b, loc, v, mean).getResult() : v;
        Value y = arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, d, inv),
                                        scales[size_t(i)]);
        if (bias)
          y = arith::AddFOp::create(b, loc, y, biases[size_t(i)]);
        return y;
      })))
    return failure();
  return Value();
}

LogicalResult GroupEmitter::emitGroup(Group &g, gpu::GPUModuleOp module, int id) {
  // The groups this launch runs: its siblings (Loop groups, each in its
  // own range of blocks), then g.
  SmallVector<Group *> parts(g.siblings.begin(), g.siblings.end());
  parts.push_back(&g);
  SmallVector<rt::KernelOp> members; // of every part, in program order
  for (Group *p : parts)
    members.append(p->members.begin(), p->members.end());
  llvm::sort(members, [](rt::KernelOp a, rt::KernelOp b) { return a->isBeforeInBlock(b); });
  // Arguments: buffers read from outside the group, then buffers written
  // that outlive it, each once.
  llvm::SetVector<Value> ins, outs;
  for (Group *p : parts) {
    llvm::SmallPtrSet<Value, 16> produced; // computed in the kernel itself
    for (rt::KernelOp k : p->members)
      produced.insert(k.getOutputs().begin(), k.getOutputs().end());
    for (rt::KernelOp k : p->members) {
      for (Value in : k.getInputs())
        if (!produced.contains(rootOf(in)))
          ins.insert(in);
      for (Value out : k.getOutputs())
        if (!isInternal(*p, out))
          outs.insert(out);
    }
  }
  rt::KernelOp last = g.members.back();
  std::string name = "k" + std::to_string(id);
  for (rt::KernelOp k : members) {
    if (name.size() > 48)
      break;
    name += "_" + k.getKernel().str();
  }
  Location loc = last.getLoc();
  OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
  SmallVector<Value> buffers(ins.begin(), ins.end());
  buffers.append(outs.begin(), outs.end());
  SmallVector<Type> argTypes;
  for (Value v : buffers)
    argTypes.push_back(MemRefType::get({numel(v)}, signlessOf(elemOf(v))));
  // Kernels that check their data take the status word last.
  bool checks = llvm::any_of(members, [](rt::KernelOp k) { return checksData(k); });
  if (checks)
    argTypes.push_back(statusType(mb.getContext()));
  auto fn = gpu::GPUFuncOp::create(mb, loc, name, mb.getFunctionType(argTypes, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), mb.getUnitAttr());
  int64_t block, grid;
  // Loop groups: each thread takes `lanes` consecutive elements; each part
  // has blocks of its own, after those of the parts before it.
  struct Segment {
    Group *group;
    int64_t lanes, threads, firstBlock, blocks;
  };
  SmallVector<Segment> segments;
  if (g.kind == Group::Kind::Loop) {
    block = kLoopBlock;
    grid = 0;
    for (Group *p : parts) {
      int64_t lanes = laneCount(*p, p->iterations), threads = p->iterations / lanes;
      int64_t blocks = (threads + block - 1) / block;
      segments.push_back({p, lanes, threads, grid, blocks});
      grid += blocks;
    }
  } else if (g.kind == Group::Kind::Standalone) {
    FailureOr<LaunchShape> shape = standaloneShape(last);
    if (failed(shape)) {
      fn.erase();
      return failure();
    }
    grid = shape->grid, block = shape->block;
  } else {
    // One block per row (every element outside the reduced extent), or
    // one warp per row and several rows per block for short contiguous rows.
    RowGeometry geometry = *rowGeometry(g.row);
    int64_t length = geometry.length;
    Value rowOut = g.row.getOutputs()[0];
    if (warpPerRow(geometry, computeType(elemOf(rowOut)))) {
      int64_t perBlock = std::min(kWarpsPerBlock, geometry.rows);
      block = 32 * perBlock;
      grid = numel(rowOut) ? (geometry.rows + perBlock - 1) / perBlock : 0;
    } else {
      grid = numel(rowOut) ? geometry.rows : 0;
      // Short rows get fewer threads, long rows stride. A power of two:
      // gpu.all_reduce's block reduction lowers to a shared-memory race
      // (benign only on real hardware's timing) for other block sizes,
      // e.g. 96 or 160 threads; the spare threads fold no element.
      block = std::clamp<int64_t>(int64_t(llvm::PowerOf2Ceil(uint64_t(length))), 32, kRowBlock);
    }
  }
  if (grid < 1) {
    // Empty tensors: nothing to compute, nothing to launch.
    fn.erase();
    for (rt::KernelOp k : members)
      k.erase();
    return success();
  }
  if (grid > (int64_t(1) << 31) - 1)
    return last.emitOpError("needs more than 2^31 - 1 thread blocks"), failure();
  fn.setKnownBlockSizeAttr(mb.getDenseI32ArrayAttr({int32_t(block), 1, 1}));
  fn.setKnownGridSizeAttr(mb.getDenseI32ArrayAttr({int32_t(grid), 1, 1}));

  OpBuilder b = OpBuilder::atBlockBegin(&fn.getBody().front());
  KernelEmitter e(b, loc);
  DenseMap<Value, Value> args;
  for (auto [i, v] : llvm::enumerate(buffers))
    args[v] = fn.getArgument(i);
  if (checks)
    e.status = fn.getArgument(buffers.size());
  for (rt::KernelOp k : members)
    if (checksData(k))
      e.checkers.try_emplace(k, int64_t(e.checkers.size()));
  if (g.kind == Group::Kind::Standalone) {
    if (failed(emitStandalone(e, last, args)))
      return failure();
  } else if (g.kind == Group::Kind::Loop) {
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    for (const Segment &seg : segments) {
      if (!seg.blocks)
        continue;
      // A part's blocks: the block-uniform branch its threads alone take.
      Value local = bid;
      scf::IfOp part;
      if (segments.size() > 1) {
        if (seg.firstBlock)
          local = arith::SubIOp::create(b, loc, bid, e.index(seg.firstBlock));
        Value mine = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, local,
                                           e.index(seg.blocks));
        part = scf::IfOp::create(b, loc, mine, /*withElseRegion=*/false);
        b.setInsertionPointToStart(&part.getThenRegion().front());
      }
      Value idx = arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, local, e.index(block)), tid);
      Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, idx,
                                            e.index(seg.threads));
      auto ifOp = scf::IfOp::create(b, loc, inRange, /*withElseRegion=*/false);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      Value first = seg.lanes == 1
                        ? idx
                        : arith::MulIOp::create(b, loc, idx, e.index(seg.lanes)).getResult();
      DenseMap<Value, Lanes> values;
      if (failed(emitLoopBody(e, seg.group->members, *seg.group, first, seg.lanes, args, values,
                              /*store=*/true)))
        return failure();
      b.setInsertionPointAfter(part ? part.getOperation() : ifOp.getOperation());
    }
  } else if (failed(emitRowBody(e, g, args))) {
    return failure();
  }
  gpu::ReturnOp::create(b, loc);

  // The call, where the group's last member stood. A launch that checks
  // data carries the locations (ONNX nodes) of the members that check, in
  // the order of their ordinals, which the runtime names when one reports.
  OpBuilder cb(last);
  SmallVector<Location> checking;
  SmallVector<std::string> checkingNodes;
  for (rt::KernelOp k : members)
    if (checksData(k)) {
      checking.push_back(k.getLoc());
      checkingNodes.push_back(rt::onnxNodeName(k.getLoc()));
    }
  Location launchLoc = checking.empty() ? loc : cb.getFusedLoc(checking);
  auto launch = rt::LaunchOp::create(
      cb, launchLoc,
      SymbolRefAttr::get(cb.getStringAttr(kModuleName), {FlatSymbolRefAttr::get(fn.getNameAttr())}),
      cb.getDenseI64ArrayAttr({grid, 1, 1}), cb.getDenseI64ArrayAttr({block, 1, 1}),
      cb.getI64IntegerAttr(0), /*checks=*/UnitAttr(), /*checking_nodes=*/ArrayAttr(),
      ins.getArrayRef(), outs.getArrayRef());
  if (checks) {
    launch.setChecks(true);
    if (checkingNodes.size() > 1 &&
        llvm::any_of(checkingNodes, [](const std::string &n) { return !n.empty(); }))
      launch.setCheckingNodesAttr(cb.getStrArrayAttr(
          SmallVector<StringRef>(checkingNodes.begin(), checkingNodes.end())));
  }
  for (rt::KernelOp k : llvm::reverse(members))
    k.erase();
  // Internal buffers: views first, then their allocations.
  SmallVector<Operation *> dead;
  for (Group *p : parts)
    dead.append(p->internal.begin(), p->internal.end());
  llvm::sort(dead, [](Operation *a, Operation *b) { return b->isBeforeInBlock(a); });
  for (Operation *op : dead)
    if (op->use_empty())
      op->erase();
  return success();
}
