//===- RTToGPU.cpp - fuse rt kernels into generated GPU kernels -------------===//
//
// For the CUDA target, every rt.kernel that is elementwise (arithmetic,
// comparisons, select, unary math, activations, casts, fills) or a row
// reduction (softmax, log-softmax, layer and RMS normalization) becomes
// code the compiler generates, in one `gpu.module @shardflow_kernels`, and
// is called by rt.launch. Contractions and attention stay rt.kernel calls:
// the runtime runs them with cuBLASLt and its attention kernel, as it runs
// data movement (transpose, slice, concat, split, expand, gather, pad).
//
// Fusion is producer-consumer over buffers: an elementwise kernel joins the
// group that computes one of its operands when that operand's buffer (seen
// through views) has no other reader, is not returned, and is read element
// for element (no broadcast). The buffer then never exists: the value stays
// in a register. A row reduction takes such a group as its prologue (the
// residual add before a layer norm). A group is emitted where its last
// member stood, so a group closes as soon as anything else reads one of
// its outputs, and at any instruction that is not a kernel call (a
// collective may write a buffer in place).
//
// Reductions that are not row reductions, cumsum, gather_elements,
// scatter_nd and topk are generated as launches of their own
// (StandaloneKernels.cpp); kernels that read indices from data report an
// out-of-range one through a status word (Emitter.h).
//
// Generated code computes in f32 for f16/bf16/f32 data (f64 stays f64) and
// rounds once when it stores. Every argument is a flat memref of its
// buffer's element count (the launch ABI passes bare pointers), so indexing
// is linear and views cost nothing.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include "shardflow/Conversion/Passes.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"
#include "shardflow/Runtime/Format/NumpyRandom.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>

namespace shardflow {
#define GEN_PASS_DEF_CONVERTRTTOGPU
#include "shardflow/Conversion/Passes.h.inc"
} // namespace shardflow

using namespace mlir;
using namespace shardflow;
using namespace shardflow::rtgpu;

namespace {

constexpr StringLiteral kModuleName = "shardflow_kernels";
constexpr int64_t kLoopBlock = 256; // threads per block, elementwise kernels
constexpr int64_t kRowBlock = 256;  // threads per block (one row), reductions
constexpr int64_t kMaxCachedRow = 8192; // rows up to this many elements stay in shared memory
constexpr int64_t kWarpRowMax = 1024;   // contiguous rows up to this long: one warp per row
constexpr int64_t kUnrolledRowSteps = 8; // a row loop of at most this many steps: unrolled
constexpr int64_t kWarpsPerBlock = 8;   // rows per block in that layout

/// Kernels the CUDA runtime implements itself (cuBLASLt, its attention
/// kernel, strided copies): they stay rt.kernel calls.
bool isRuntimeKernel(StringRef name) {
  static const llvm::StringSet<> names = {"matmul", "gemm",  "attention", "transpose",
                                          "slice",  "concat", "split",    "expand",
                                          "gather", "pad"};
  return names.contains(name);
}

bool isElementwise(StringRef name) {
  static const llvm::StringSet<> names = {
      "add",     "sub",        "mul",  "div",   "pow",  "min",  "max",   "equal",
      "less",    "greater",    "and",  "where", "sqrt", "exp",  "log",   "tanh",
      "sigmoid", "erf",        "reciprocal",    "relu", "neg",  "abs",   "not",
      "identity", "leaky_relu", "gelu", "clip", "cast", "dropout", "constant_of_shape",
      "range", "trilu", "masked_scale"};
  return names.contains(name);
}

/// Elementwise in its output, but reading its inputs at other positions
/// (a rotation partner, a pooling window, an im2col patch, a channel's
/// statistics): it reads buffers, never a fused producer's register
/// (except batch normalization's input, read at the element's own index).
bool readsNeighbours(StringRef name) {
  return name == "rotary_embedding" || name == "rotate_half" ||
         name == "batch_normalization" || name == "max_pool" ||
         name == "max_pool_with_indices" || name == "average_pool" || name == "im2col";
}

/// Where a row reduction's rows lie in its input: `rows` rows of `length`
/// elements `inner` apart (the reduced dimensions are one contiguous block
/// of axes; the rows enumerate the others in row-major order, which is
/// also the order of a reduction's results).
struct RowGeometry {
  int64_t rows = 0, length = 1, inner = 1;
  int64_t first = 0; // the first reduced axis
};

/// Short contiguous rows (the hidden size of a transformer) run one warp
/// per row, several rows per block: the reductions are warp shuffles, with
/// no shared memory and no barrier, and a row's latency chain is not
/// stretched over a block that has little to do. Longer or strided rows
/// run one block per row. f64 rows stay on blocks (32-bit shuffles).
bool warpPerRow(const RowGeometry &g, Type computeElem) {
  return g.inner == 1 && g.length <= kWarpRowMax && computeElem.isF32();
}

/// The geometry of `k` when it is a row reduction generated code handles:
/// softmax/log_softmax over one axis, layer/RMS norm over [axis, rank),
/// reduce_sum/mean/max of floats over a contiguous block of axes.
std::optional<RowGeometry> rowGeometry(rt::KernelOp k) {
  StringRef name = k.getKernel();
  bool softmax = name == "softmax" || name == "log_softmax";
  bool norm = name == "layer_normalization" || name == "rms_normalization";
  if (!softmax && !norm && !isReduction(name))
    return std::nullopt;
  ArrayRef<int64_t> shape = cast<MemRefType>(k.getInputs()[0].getType()).getShape();
  int64_t rank = shape.size(), first, last;
  if (name == "global_average_pool") {
    if (rank < 3)
      return std::nullopt;
    first = 2, last = rank - 1; // every spatial dimension
  } else if (isReduction(name)) {
    if (!isa<FloatType>(cast<MemRefType>(k.getInputs()[0].getType()).getElementType()))
      return std::nullopt;
    auto axes = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get("axes"));
    if (!axes || axes.empty())
      return std::nullopt;
    ArrayRef<int64_t> a = axes.asArrayRef();
    for (size_t i = 1; i < a.size(); ++i)
      if (a[i] != a[i - 1] + 1)
        return std::nullopt; // not one contiguous block
    first = a.front(), last = a.back();
  } else {
    auto axisAttr = dyn_cast_or_null<IntegerAttr>(k.getParams().get("axis"));
    int64_t axis = axisAttr ? axisAttr.getInt() : -1;
    if (axis < 0)
      axis += rank;
    first = axis;
    last = softmax ? axis : rank - 1;
  }
  if (first < 0 || last >= rank || first > last)
    return std::nullopt;
  RowGeometry g;
  g.first = first;
  for (int64_t d = first; d <= last; ++d)
    g.length *= shape[d];
  for (int64_t d = last + 1; d < rank; ++d)
    g.inner *= shape[d];
  // Rows are the positions outside the reduced extent, even when that
  // extent is empty (a reduction of nothing still writes its identity).
  g.rows = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (d < first || d > last)
      g.rows *= shape[d];
  return g;
}

bool isRowReduction(rt::KernelOp k) { return rowGeometry(k).has_value(); }

/// A fusion group: kernels emitted as one generated kernel.
struct Group {
  enum class Kind { Loop, Row, Standalone } kind = Kind::Loop;
  /// Program order. A Row group's members are its prologue (elementwise
  /// producers of the row's input), the row kernel `row`, and its epilogue
  /// (elementwise consumers of the row's result, element for element).
  SmallVector<rt::KernelOp> members;
  rt::KernelOp row;
  llvm::SmallPtrSet<Operation *, 8> internal; // allocs (and views) that vanish
  int64_t iterations = 0; // Loop: elements of every member's output
  bool closed = false;
  /// sibling-fusion: earlier Loop groups launched with this one, each in
  /// its own range of blocks (program order); they are `absorbed`.
  SmallVector<Group *> siblings;
  bool absorbed = false;
};

//===----------------------------------------------------------------------===//
// Scalar code for one elementwise kernel
//===----------------------------------------------------------------------===//

/// The values of one kernel output at the consecutive flat positions a
/// thread computes (one lane each; a single lane without vectorization).
using Lanes = SmallVector<Value, 8>;

constexpr int64_t kVectorBytes = 16; // widest load or store of one thread
constexpr int64_t kMaxLanes = 8;     // elements per thread at most

/// How many elements of `to`'s trailing dimensions an operand of shape
/// `from` (right-aligned, numpy broadcasting) reads consecutively
/// (`matched`: its dimensions equal `to`'s there) or not at all (its
/// dimensions are 1 or absent there).
int64_t trailingExtent(ArrayRef<int64_t> to, ArrayRef<int64_t> from, bool matched) {
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

/// The byte alignment of `lanes` consecutive elements of type `t` at an
/// element index that is a multiple of `lanes`, in a buffer whose start is
/// 16-byte aligned (the runtime checks that it is).
llvm::Align laneAlignment(Type t, int64_t lanes) {
  int64_t bytes = t.getIntOrFloatBitWidth() / 8 * lanes;
  return llvm::Align(uint64_t(std::min(bytes, kVectorBytes)));
}

class KernelEmitter : public EmitterBase {
public:
  using EmitterBase::EmitterBase;

  /// The launch's members that check their data, each with its ordinal
  /// (program order), which its reports carry (`checker`).
  llvm::DenseMap<Operation *, int64_t> checkers;

  /// Flat index `base + i`.
  Value lane(Value base, int64_t i) {
    return i == 0 ? base : arith::AddIOp::create(b, loc, base, index(i)).getResult();
  }

  /// The `width` elements at flat positions base .. base + width - 1 of
  /// shape `to` of an operand of shape `from` (broadcast to `to`), in the
  /// compute type; `base` is a multiple of `width`. One vector load when
  /// they are consecutive in the operand, one scalar load when they are
  /// all the same element, one load each otherwise.
  Lanes loadLanes(Value buf, ArrayRef<int64_t> to, ArrayRef<int64_t> from, Value base,
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

  /// Stores compute values `lanes` at flat positions base, base + 1, ...
  /// of `buf` (`base` a multiple of their number), rounding each once: one
  /// vector store when there are several.
  void storeLanes(ArrayRef<Value> lanes, Value buf, Value base) {
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

  /// The element of an operand of shape `from` that broadcasts (numpy rules,
  /// right-aligned) to linear index `idx` of shape `to`.
  Value broadcastIndex(Value idx, ArrayRef<int64_t> to, ArrayRef<int64_t> from) {
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

  /// Float `x` converted to integers of type `storage` as the CPU kernels
  /// convert (truncToInt in ElementwiseSupport.h): toward zero, and out of
  /// range (NaN included) the lowest int32 for types of up to 32 bits
  /// other than ui32, the lowest int64 for 64-bit types and ui32, wrapped
  /// to the width; ui64 also takes [2^63, 2^64), and 0 beyond. Only
  /// in-range values reach the conversion (out of range it is poison).
  Value truncToInt(Value x, Type storage) {
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

  /// Integer division as the CPU kernel divides: truncating, INT_MIN / -1
  /// wrapping to INT_MIN, and a zero divisor reported through the status
  /// word (with the result position), the quotient then being x.
  Value intDiv(Value x, Value y, bool isUnsigned, Value idx) {
    Type t = x.getType();
    Value one = intConst(t, 1), zero = intConst(t, 0);
    reportUnless(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, y, zero),
                 arith::IndexCastOp::create(b, loc, b.getI64Type(), idx), kDivisionByZero);
    Value byZero = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, y, zero);
    if (isUnsigned)
      return arith::DivUIOp::create(b, loc, x, arith::SelectOp::create(b, loc, byZero, one, y));
    Value byMinusOne = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, y, intConst(t, -1));
    Value safe = arith::SelectOp::create(
        b, loc, arith::OrIOp::create(b, loc, byZero, byMinusOne), one, y);
    return arith::SelectOp::create(b, loc, byMinusOne, arith::SubIOp::create(b, loc, zero, x),
                                   arith::DivSIOp::create(b, loc, x, safe));
  }

  /// Integer base `x` to the power `y` as the CPU kernel computes it: an
  /// integer exponent by squaring (wrapping products; a negative one gives
  /// the truncated real result, 0 unless |x| = 1), a float exponent through
  /// f64 pow and truncToInt.
  Value intPow(Value x, Value y, Type baseStorage, Type expStorage) {
    Type t = x.getType(), f64 = b.getF64Type(), i64t = b.getI64Type();
    bool baseUnsigned = baseStorage.isUnsignedInteger();
    if (isa<FloatType>(y.getType())) {
      Value xd = baseUnsigned ? arith::UIToFPOp::create(b, loc, f64, x).getResult()
                              : arith::SIToFPOp::create(b, loc, f64, x).getResult();
      Value yd = y.getType() == f64 ? y : arith::ExtFOp::create(b, loc, f64, y).getResult();
      return truncToInt(math::PowFOp::create(b, loc, xd, yd), baseStorage);
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

  /// Integer clip as the CPU kernel clips: a fractional bound rounds inward
  /// and saturates to the type; a NaN bound is no bound.
  Value intClip(Value x, Type storage, DictionaryAttr params) {
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

  /// The scalar result of elementwise kernel `k` on compute-typed operands,
  /// at flat index `idx` of its output (for ops that depend on position).
  /// Operands and results are signless; whether an integer is unsigned
  /// comes from the kernel's buffer types.
  FailureOr<Value> elementwise(rt::KernelOp k, ArrayRef<Value> in, Value idx) {
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

  /// Rotary embedding at flat output index `idx`: the element and its
  /// rotation partner (the other half, or the other of a pair) times the
  /// cos/sin of the position. A position id outside the cache is reported
  /// through the status word (and position 0 read instead).
  FailureOr<Value> rotary(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx) {
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

  /// rotate_half at flat index `idx`: the element half a row away, negated
  /// in the first half.
  FailureOr<Value> rotateHalf(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx) {
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

  /// Inference batch normalization at flat index `idx`: the channel is
  /// dimension 1, its statistics are [C] vectors. `fused`, when set, is
  /// the input's element at `idx`, computed by an earlier group member.
  FailureOr<Value> batchNorm(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx,
                             Value fused = {}) {
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
    auto epsAttr = dyn_cast_or_null<FloatAttr>(k.getParams().get("epsilon"));
    Value eps = floatConst(x.getType(), epsAttr ? epsAttr.getValueAsDouble() : 1e-5);
    Value inv = math::RsqrtOp::create(b, loc, arith::AddFOp::create(b, loc, var, eps));
    Value y = arith::MulFOp::create(
        b, loc, arith::MulFOp::create(b, loc, arith::SubFOp::create(b, loc, x, mean), inv), scale);
    return arith::AddFOp::create(b, loc, y, bias).getResult();
  }

  /// Walks a window of `kernel` positions (unrolled: windows are small) for
  /// output spatial coordinates `out`; `fn(valid, padded, inputSpatialIndex)`
  /// gets whether the position lies inside the input (not in the padding),
  /// whether it lies inside the padded input (ceil mode's windows reach past
  /// it), and the flat index of the position within one spatial plane
  /// (clamped to 0 when outside).
  LogicalResult forEachWindowPosition(rt::KernelOp k, ArrayRef<Value> out,
                                      ArrayRef<int64_t> inSpatial, ArrayRef<int64_t> kernel,
                                      function_ref<void(Value valid, Value padded, Value plane)> fn) {
    size_t n = inSpatial.size();
    auto ints = [&](StringRef name, int64_t dflt, size_t count) -> SmallVector<int64_t> {
      auto a = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get(name));
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

  /// Max or average pooling at flat output index `idx` ([N, C, spatial...]).
  /// Positions in the padding are skipped (max) or, with
  /// `count_include_pad`, counted as zeros (average). Max pooling takes any
  /// numeric type; with `indices` (max_pool_with_indices) it also sets the
  /// flat input index of the window's first maximum (the first NaN wins; -1
  /// for a window with no input position), row-major, or column-major over
  /// the last two spatial dimensions with `storage_order` 1, as the CPU
  /// kernel does.
  FailureOr<Value> pool(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx,
                        Value *indices = nullptr) {
    Value x = k.getInputs()[0];
    ArrayRef<int64_t> inShape = shapeOf(x), outShape = shapeOf(k.getOutputs()[0]);
    if (inShape.size() < 3)
      return k.emitOpError("pooling needs [N, C, spatial...]"), failure();
    auto kernelAttr = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get("kernel_shape"));
    if (!kernelAttr)
      return k.emitOpError("pooling without kernel_shape"), failure();
    bool isMax = k.getKernel() != "average_pool";
    bool withIndices = k.getKernel() == "max_pool_with_indices";
    auto cip = dyn_cast_or_null<BoolAttr>(k.getParams().get("count_include_pad"));
    bool countPad = cip && cip.getValue();
    auto order = dyn_cast_or_null<IntegerAttr>(k.getParams().get("storage_order"));
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

  /// The flat index (i64) in [N, C, spatial...] of window position `at`
  /// (row-major within the plane at `planeBase`): column-major over the
  /// last two spatial dimensions when `columnMajor`.
  Value flatInputIndex(Value planeBase, Value at, ArrayRef<int64_t> inSpatial, bool columnMajor) {
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

  /// im2col at flat index `idx` of its [N, G, (C/G)*K..., P] output: the
  /// input element under kernel position k of output position p, 0 in the
  /// padding. Params: strides, pads, dilations, group, kernel_shape.
  FailureOr<Value> im2col(rt::KernelOp k, DenseMap<Value, Value> &args, Value idx) {
    Value x = k.getInputs()[0];
    ArrayRef<int64_t> inShape = shapeOf(x);
    auto kernelAttr = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get("kernel_shape"));
    auto outAttr = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get("out_spatial"));
    auto groupAttr = dyn_cast_or_null<IntegerAttr>(k.getParams().get("group"));
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
      auto a = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get(name));
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

};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct ConvertRTToGPU : shardflow::impl::ConvertRTToGPUBase<ConvertRTToGPU> {
  using ConvertRTToGPUBase::ConvertRTToGPUBase;
  void runOnOperation() override;

private:
  LogicalResult formGroups(func::FuncOp fn, SmallVectorImpl<std::unique_ptr<Group>> &groups);
  /// sibling-fusion: gives runs of neighbouring independent Loop groups to
  /// the last of each run as its siblings.
  void fuseSiblings(SmallVectorImpl<std::unique_ptr<Group>> &groups) const;
  LogicalResult emitGroup(Group &g, gpu::GPUModuleOp module, int id);
  /// Values of a Loop group's members at the `width` consecutive flat
  /// indices from `base` (a multiple of `width`); stores the outputs that
  /// leave the group when `store` is set.
  LogicalResult emitLoopBody(KernelEmitter &e, ArrayRef<rt::KernelOp> members,
                             const Group &g, Value base, int64_t width,
                             DenseMap<Value, Value> &args, DenseMap<Value, Lanes> &values,
                             bool store);
  /// How many consecutive elements one thread takes in a group whose
  /// threads split `elements` (a Loop group's iterations, a row's length)
  /// into equal runs: as many as fit in 16 bytes of the group's narrowest
  /// element type (at most 8), halved until they divide `elements`; 1
  /// without `vectorize`, or when a buffer holds booleans or other types
  /// narrower than a byte.
  int64_t laneCount(const Group &g, int64_t elements) const;
  FailureOr<Value> emitRowBody(KernelEmitter &e, Group &g, DenseMap<Value, Value> &args);

  bool isInternal(const Group &g, Value v) const {
    return g.internal.contains(rootOf(v).getDefiningOp());
  }
};

int64_t ConvertRTToGPU::laneCount(const Group &g, int64_t elements) const {
  if (!vectorize || elements < 2)
    return 1;
  int64_t narrowest = kVectorBytes;
  for (rt::KernelOp k : g.members)
    for (Value v : llvm::concat<Value>(k.getInputs(), k.getOutputs())) {
      Type t = elemOf(v);
      if (!t.isIntOrFloat() || t.getIntOrFloatBitWidth() % 8 != 0)
        return 1;
      narrowest = std::min<int64_t>(narrowest, t.getIntOrFloatBitWidth() / 8);
    }
  int64_t width = std::min(kMaxLanes, kVectorBytes / narrowest);
  while (width > 1 && elements % width != 0)
    width /= 2;
  return width;
}

/// Whether `operand` can take its value from the register of the group
/// member that computes it: it is read element for element (no broadcast)
/// and its buffer has exactly one writer.
bool readsElementwise(Value operand, ArrayRef<int64_t> readShape) {
  if (shapeOf(operand) != readShape)
    return false;
  auto alloc = rootOf(operand).getDefiningOp<rt::AllocOp>();
  if (!alloc)
    return false;
  int writers = 0;
  for (Operation *user : alloc.getResult().getUsers())
    if (auto k = dyn_cast<rt::KernelOp>(user);
        k && llvm::is_contained(k.getOutputs(), alloc.getResult()))
      ++writers;
  return writers == 1;
}

/// Every operation that reads `buffer`, through views (the views excluded).
void collectReaders(Value buffer, SmallVectorImpl<Operation *> &readers,
                    SmallVectorImpl<Operation *> &views) {
  for (Operation *user : buffer.getUsers()) {
    if (auto view = dyn_cast<rt::ViewOp>(user)) {
      views.push_back(view);
      collectReaders(view.getResult(), readers, views);
    } else if (auto k = dyn_cast<rt::KernelOp>(user);
               !k || !llvm::is_contained(k.getOutputs(), buffer)) {
      readers.push_back(user);
    }
  }
}

rt::KernelOp writerOf(Value v) {
  Value root = rootOf(v);
  for (Operation *user : root.getUsers())
    if (auto k = dyn_cast<rt::KernelOp>(user); k && llvm::is_contained(k.getOutputs(), root))
      return k;
  return {};
}

LogicalResult ConvertRTToGPU::formGroups(func::FuncOp fn,
                                         SmallVectorImpl<std::unique_ptr<Group>> &groups) {
  DenseMap<Operation *, Group *> groupOf; // kernel -> its group
  auto closeAll = [&] {
    for (auto &g : groups)
      g->closed = true;
  };
  for (Operation &op : fn.getBody().front()) {
    auto k = dyn_cast<rt::KernelOp>(&op);
    if (!k) {
      if (!isa<rt::AllocOp, rt::ViewOp, rt::WeightOp, rt::ConstantOp, func::ReturnOp>(op))
        closeAll();
      continue;
    }
    StringRef name = k.getKernel();
    bool elementwise = isElementwise(name) || readsNeighbours(name),
         row = isRowReduction(k);
    // Anything this kernel reads from an open group that it does not join
    // closes that group (the group is emitted at its last member).
    auto closeReadGroups = [&](Group *except) {
      for (Value in : k.getInputs())
        if (rt::KernelOp w = writerOf(in))
          if (Group *g = groupOf.lookup(w); g && g != except)
            g->closed = true;
    };
    if (!elementwise && !row && isStandalone(k)) {
      // A launch of its own. Groups that write what it writes end before
      // it (scatter_nd_updates writes into the copy `identity` made).
      closeReadGroups(nullptr);
      for (auto &g : groups)
        for (rt::KernelOp m : g->members)
          for (Value mo : m.getOutputs())
            for (Value o : k.getOutputs())
              if (rootOf(mo) == rootOf(o))
                g->closed = true;
      groups.push_back(std::make_unique<Group>());
      Group *g = groups.back().get();
      g->kind = Group::Kind::Standalone;
      g->members.push_back(k);
      g->closed = true;
      groupOf[k] = g;
      continue;
    }
    if (!elementwise && !row) {
      closeReadGroups(nullptr);
      if (!isRuntimeKernel(name))
        return k.emitOpError("kernel '")
               << name << "' has no CUDA implementation yet (neither generated code "
               << "nor a runtime kernel); compile with --target cpu";
      continue;
    }
    if ((name == "average_pool" || name == "batch_normalization") &&
        !isa<FloatType>(elemOf(k.getOutputs()[0])))
      return k.emitOpError("kernel '") << name << "' of " << elemOf(k.getOutputs()[0])
                                       << " has no CUDA implementation yet (floats only)";
    for (Value v : llvm::concat<Value>(k.getInputs(), k.getOutputs()))
      if (!isSupportedElement(elemOf(v)))
        return k.emitOpError("element type ") << elemOf(v) << " of kernel '" << name
                                              << "' is not supported on the CUDA target yet";
    // Producer groups this kernel can join: open elementwise groups all of
    // whose buffers it reads are read element for element (anything else
    // would read another thread's result).
    Value out = k.getOutputs()[0];
    SmallVector<Group *> producers, refused;
    for (auto [i, in] : llvm::enumerate(k.getInputs())) {
      rt::KernelOp w = writerOf(in);
      Group *g = w ? groupOf.lookup(w) : nullptr;
      if (!g || g->closed)
        continue;
      if (g->kind == Group::Kind::Row) {
        // An epilogue member: elementwise, reading the row's result (or an
        // earlier epilogue member's) element for element, never a value
        // of the prologue (which lives in no register there).
        bool ok = isElementwise(name) && k.getOutputs().size() == 1 &&
                  !w->isBeforeInBlock(g->row) &&
                  numel(out) == numel(g->row.getOutputs()[0]) &&
                  readsElementwise(in, shapeOf(out));
        (ok ? producers : refused).push_back(g);
        continue;
      }
      if (g->kind != Group::Kind::Loop)
        continue;
      // Batch normalization reads its input (not its statistics) element
      // for element.
      bool neighbours = readsNeighbours(name) && !(name == "batch_normalization" && i == 0);
      bool ok = !neighbours && (!row || i == 0) &&
                numel(rootOf(in)) == g->iterations &&
                readsElementwise(in, row ? shapeOf(in) : shapeOf(out)) &&
                (row || g->iterations == numel(out));
      if (!ok) {
        refused.push_back(g);
        continue;
      }
      if (!llvm::is_contained(producers, g))
        producers.push_back(g);
    }
    llvm::erase_if(producers, [&](Group *g) { return llvm::is_contained(refused, g); });
    // A Row group takes an epilogue member only when it is the one group
    // that member joins (Loop members merged in would run after the row).
    if (producers.size() > 1 || row)
      llvm::erase_if(producers, [](Group *g) { return g->kind == Group::Kind::Row; });
    // max_pool_with_indices writes values and indices: a group of its own
    // that nothing joins (a consumer would find the indices in no register).
    bool twoOutputs = name == "max_pool_with_indices";
    if (elementwise && k.getOutputs().size() != (twoOutputs ? 2 : 1))
      return k.emitOpError("elementwise kernel with ") << k.getOutputs().size() << " outputs";
    Group *target;
    if (producers.empty()) {
      groups.push_back(std::make_unique<Group>());
      target = groups.back().get();
      target->iterations = numel(out);
    } else {
      target = producers.front();
      for (Group *other : ArrayRef<Group *>(producers).drop_front()) {
        llvm::append_range(target->members, other->members);
        for (rt::KernelOp m : other->members)
          groupOf[m] = target;
        other->members.clear();
        other->closed = true;
      }
      llvm::sort(target->members, [](rt::KernelOp a, rt::KernelOp b) {
        return a->isBeforeInBlock(b);
      });
    }
    closeReadGroups(target);
    target->members.push_back(k);
    groupOf[k] = target;
    if (row) {
      // Open for an epilogue, unless the row's result is one value a row
      // (a reduction, written by one thread).
      target->kind = Group::Kind::Row;
      target->row = k;
      target->closed = isReduction(name);
    }
    if (twoOutputs)
      target->closed = true;
  }
  llvm::erase_if(groups, [](const std::unique_ptr<Group> &g) { return g->members.empty(); });
  // A buffer a member writes never exists in memory when only members of
  // its group read it (and the function does not return it).
  for (auto &g : groups) {
    llvm::SmallPtrSet<Operation *, 16> members;
    for (rt::KernelOp m : g->members)
      members.insert(m);
    for (rt::KernelOp m : g->members) {
      Value out = m.getOutputs()[0];
      SmallVector<Operation *> readers, views;
      collectReaders(out, readers, views);
      if (!out.getDefiningOp<rt::AllocOp>() || readers.empty() ||
          !llvm::all_of(readers, [&](Operation *r) { return members.contains(r); }))
        continue;
      g->internal.insert(out.getDefiningOp());
      g->internal.insert(views.begin(), views.end());
    }
  }
  return success();
}

/// The buffers (roots) a group's members read from outside the group, and
/// those they write.
void buffersOf(const Group &g, llvm::SmallPtrSetImpl<Value> &reads,
               llvm::SmallPtrSetImpl<Value> &writes) {
  for (rt::KernelOp k : g.members)
    for (Value out : k.getOutputs())
      writes.insert(rootOf(out));
  for (rt::KernelOp k : g.members)
    for (Value in : k.getInputs())
      if (!writes.contains(rootOf(in)))
        reads.insert(rootOf(in));
}

void ConvertRTToGPU::fuseSiblings(SmallVectorImpl<std::unique_ptr<Group>> &groups) const {
  // A launch takes at most this many groups (its code holds all of them).
  constexpr size_t kMaxSiblings = 8;
  // Groups in the order of their launches (each at its last member).
  SmallVector<Group *> order;
  for (auto &g : groups)
    order.push_back(g.get());
  llvm::sort(order, [](Group *a, Group *b) {
    return a->members.back()->isBeforeInBlock(b->members.back());
  });
  // Whether `next` can join the run: only allocations, views and members
  // of `next` lie between the run's last launch and next's (so moving the
  // run's launches to next's changes what no other operation sees), and
  // neither writes what the other reads or writes.
  auto joins = [&](ArrayRef<Group *> run, Group *next) {
    if (run.size() >= kMaxSiblings)
      return false;
    Operation *end = next->members.back();
    for (Operation *op = run.back()->members.back()->getNextNode(); op != end;
         op = op->getNextNode()) {
      if (isa<rt::AllocOp, rt::ViewOp, rt::WeightOp, rt::ConstantOp>(op))
        continue;
      auto k = dyn_cast<rt::KernelOp>(op);
      if (!k || !llvm::is_contained(next->members, k))
        return false;
    }
    llvm::SmallPtrSet<Value, 16> nextReads, nextWrites;
    buffersOf(*next, nextReads, nextWrites);
    for (Group *g : run) {
      llvm::SmallPtrSet<Value, 16> reads, writes;
      buffersOf(*g, reads, writes);
      for (Value w : writes)
        if (nextReads.contains(w) || nextWrites.contains(w))
          return false;
      for (Value w : nextWrites)
        if (reads.contains(w))
          return false;
    }
    return true;
  };
  SmallVector<Group *> run;
  auto finish = [&] {
    if (run.size() > 1) {
      run.back()->siblings.assign(run.begin(), run.end() - 1);
      for (Group *g : ArrayRef<Group *>(run).drop_back())
        g->absorbed = true;
    }
    run.clear();
  };
  for (Group *g : order) {
    if (g->kind != Group::Kind::Loop || g->iterations == 0) {
      finish();
      continue;
    }
    if (run.empty() || !joins(run, g))
      finish();
    run.push_back(g);
  }
  finish();
}

LogicalResult ConvertRTToGPU::emitLoopBody(KernelEmitter &e, ArrayRef<rt::KernelOp> members,
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
    v = op == gpu::AllReduceOperation::MAXIMUMF
            ? arith::MaximumFOp::create(b, loc, v, other).getResult()
            : arith::AddFOp::create(b, loc, v, other).getResult();
  }
  return v;
}

FailureOr<Value> ConvertRTToGPU::emitRowBody(KernelEmitter &e, Group &g,
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
    bool isMax = name == "reduce_max";
    Value init = isMax ? e.floatConst(ft, -INFINITY) : zero;
    FailureOr<Value> partial = rowLoop(init, [&](Value acc, Value flat, Value j) {
      return foldLanes(acc, flat, j,
                       [&](Value a, Value v) { return isMax ? max(a, v) : add(a, v); });
    });
    if (failed(partial))
      return failure();
    Value r = reduce(*partial,
                     isMax ? gpu::AllReduceOperation::MAXIMUMF : gpu::AllReduceOperation::ADD);
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
  auto epsAttr = dyn_cast_or_null<FloatAttr>(k.getParams().get("epsilon"));
  Value eps = e.floatConst(ft, epsAttr ? epsAttr.getValueAsDouble() : 1e-5);
  Value scale = k.getInputs()[1];
  Value bias = k.getInputs().size() > 2 ? k.getInputs()[2] : Value();
  ArrayRef<int64_t> normalized = shape.drop_front(geometry.first);
  Value mean;
  if (name == "layer_normalization") {
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
      Value d = mean ? arith::SubFOp::create(b, loc, v, mean).getResult() : v;
      return add(acc, arith::MulFOp::create(b, loc, d, d));
    });
  });
  if (failed(partialSq))
    return failure();
  firstPass = false;
  Value var = arith::DivFOp::create(
      b, loc, reduce(*partialSq, gpu::AllReduceOperation::ADD), lengthF);
  Value inv = math::RsqrtOp::create(b, loc, arith::AddFOp::create(b, loc, var, eps));
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

LogicalResult ConvertRTToGPU::emitGroup(Group &g, gpu::GPUModuleOp module, int id) {
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
      // Short rows get fewer threads (whole warps), long rows stride.
      block = std::clamp<int64_t>((length + 31) / 32 * 32, 32, kRowBlock);
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

/// The calls of runtime kernel `name` in `fn`, in program order (a copy:
/// the caller may rewrite them).
SmallVector<rt::KernelOp> kernelsNamed(func::FuncOp fn, StringRef name) {
  SmallVector<rt::KernelOp> found;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == name)
      found.push_back(k);
  });
  return found;
}

/// A split along the last dimension of a [B, S, W] buffer whose three
/// pieces only one attention reads, as its query, key and value
/// (nn-split-fused-projections leaves GPT-2's fused QKV so): the attention
/// reads the pieces where they are, the buffer passed three times with
/// `packed_qkv` giving the pieces' widths (the runtime offsets the
/// pointers and steps rows by W), and the split's copy disappears.
void readAttentionInputsInPlace(func::FuncOp fn) {
  for (rt::KernelOp split : kernelsNamed(fn, "split")) {
    if (split.getInputs().size() != 1 || split.getOutputs().size() != 3)
      continue;
    Value fused = split.getInputs()[0];
    ArrayRef<int64_t> shape = shapeOf(fused);
    auto axis = dyn_cast_or_null<IntegerAttr>(split.getParams().get("axis"));
    if (shape.size() != 3 || !axis || (axis.getInt() != 2 && axis.getInt() != -1))
      continue;
    rt::KernelOp attention;
    bool ok = true;
    for (auto [i, piece] : llvm::enumerate(split.getOutputs())) {
      // Used twice: written by the split, read by the attention (no view).
      Operation *other = nullptr;
      int uses = 0;
      for (Operation *user : piece.getUsers())
        if (user != split)
          other = user, ++uses;
      auto reader = uses == 1 ? dyn_cast<rt::KernelOp>(other) : rt::KernelOp();
      ok = ok && piece.getDefiningOp<rt::AllocOp>() && reader &&
           reader.getKernel() == "attention" && (!attention || reader == attention) &&
           reader.getInputs().size() > i && reader.getInputs()[i] == piece;
      attention = reader;
    }
    if (!ok)
      continue;
    SmallVector<int64_t> widths;
    for (Value piece : split.getOutputs())
      widths.push_back(shapeOf(piece)[2]);
    SmallVector<Value> inputs(attention.getInputs());
    for (int i = 0; i < 3; ++i)
      inputs[i] = fused;
    OpBuilder b(attention);
    NamedAttrList params(attention.getParams());
    params.set("packed_qkv", b.getDenseI64ArrayAttr(widths));
    attention.getInputsMutable().assign(inputs);
    attention.setParamsAttr(params.getDictionary(b.getContext()));
    SmallVector<Value> pieces(split.getOutputs());
    split.erase();
    for (Value piece : pieces)
      piece.getDefiningOp()->erase();
  }
}

/// Training dropout: the mask depends only on the seed and the shape (the
/// CPU kernel reseeds numpy's generator on every call), so it is drawn here,
/// once, into a constant: the mask output is a copy of it and the result a
/// `masked_scale` of the input, both elementwise.
LogicalResult precomputeDropoutMasks(func::FuncOp fn) {
  SmallVector<rt::KernelOp> dropouts;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "training_dropout" && k.getInputs().size() == 1 &&
        k.getOutputs().size() == 2)
      dropouts.push_back(k);
  });
  // A mask is one byte per element in the artifact (two hex digits).
  constexpr int64_t kMaxMask = int64_t(1) << 24;
  for (rt::KernelOp k : dropouts) {
    Value x = k.getInputs()[0], y = k.getOutputs()[0], mask = k.getOutputs()[1];
    auto ratioAttr = dyn_cast_or_null<FloatAttr>(k.getParams().get("ratio"));
    auto seedAttr = dyn_cast_or_null<IntegerAttr>(k.getParams().get("seed"));
    Type t = elemOf(x);
    if (!ratioAttr || !isa<FloatType>(t) || shapeOf(mask) != shapeOf(x) ||
        !elemOf(mask).isInteger(1))
      continue; // left for the error that names it
    double ratio = ratioAttr.getValueAsDouble();
    if (!(ratio >= 0.0 && ratio < 1.0))
      return k.emitOpError("training_dropout ratio ") << ratio << " is outside [0, 1)";
    if (numel(x) > kMaxMask)
      return k.emitOpError("training_dropout of ")
             << numel(x) << " elements: the CUDA target draws the mask at compile time, "
             << "for at most " << kMaxMask << " elements; compile with --target cpu";
    std::mt19937 gen = runtime::numpyGenerator(seedAttr ? seedAttr.getInt() : 0);
    SmallVector<bool> keep(numel(x));
    for (auto &&bit : keep)
      bit = runtime::numpyUniform(gen) >= ratio;
    // The scale as the CPU kernel computes it, in the element type:
    // 1 / (1 - ratio), ratio first rounded to f32, then to the type.
    const llvm::fltSemantics &sem = cast<FloatType>(t).getFloatSemantics();
    bool lost;
    APFloat r{float(ratio)}, one{1.0};
    r.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    one.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    APFloat denominator = one;
    denominator.subtract(r, APFloat::rmNearestTiesToEven);
    APFloat scale = one;
    scale.divide(denominator, APFloat::rmNearestTiesToEven);
    OpBuilder b(k);
    auto maskType = RankedTensorType::get(shapeOf(mask), b.getI1Type());
    Value bits = rt::ConstantOp::create(b, k.getLoc(), cast<MemRefType>(mask.getType()),
                                        DenseElementsAttr::get(maskType, ArrayRef<bool>(keep)));
    rt::KernelOp::create(b, k.getLoc(), b.getStringAttr("identity"), ValueRange{bits},
                         ValueRange{mask}, b.getDictionaryAttr({}));
    rt::KernelOp::create(
        b, k.getLoc(), b.getStringAttr("masked_scale"), ValueRange{x, bits}, ValueRange{y},
        b.getDictionaryAttr(
            {b.getNamedAttr("scale", b.getF64FloatAttr(scale.convertToDouble()))}));
    k.erase();
  }
  return success();
}

/// Element types cuBLASLt multiplies for the runtime.
bool isGemmType(Type t) { return t.isF32() || t.isF16() || t.isBF16(); }

/// A matmul of another element type (integers, f64) becomes the einsum it
/// is, which is generated as loops.
void lowerNonGemmMatmuls(func::FuncOp fn) {
  SmallVector<rt::KernelOp> matmuls;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "matmul" && k.getInputs().size() == 2 && k.getOutputs().size() == 1 &&
        !isGemmType(elemOf(k.getOutputs()[0])))
      matmuls.push_back(k);
  });
  for (rt::KernelOp k : matmuls) {
    bool vecA = shapeOf(k.getInputs()[0]).size() == 1,
         vecB = shapeOf(k.getInputs()[1]).size() == 1;
    std::string eq = std::string(vecA ? "j" : "...ij") + "," + (vecB ? "j" : "...jk") + "->" +
                     (vecA && vecB ? "" : "...") + (vecA ? "" : "i") + (vecB ? "" : "k");
    if (vecA && vecB)
      eq = "j,j->";
    OpBuilder b(k);
    rt::KernelOp::create(b, k.getLoc(), b.getStringAttr("einsum"), k.getInputs(),
                         k.getOutputs(),
                         b.getDictionaryAttr({b.getNamedAttr("equation", b.getStringAttr(eq))}));
    k.erase();
  }
}

/// The one operation that reads `buffer` (through views), or null.
Operation *soleReader(Value buffer) {
  SmallVector<Operation *> readers, views;
  collectReaders(buffer, readers, views);
  return readers.size() == 1 && views.empty() ? readers.front() : nullptr;
}

/// Whether an op strictly between `from` and `to` may write one of the
/// buffers `operands` belong to: a kernel writes its outputs; any other op
/// but allocations, views, weights and constants (a collective, which may
/// reduce in place, a receive) is taken to write every buffer it names.
/// A fusion that moves `from`'s work to `to` needs none to.
bool writtenBetween(Operation *from, Operation *to, ValueRange operands) {
  llvm::SmallPtrSet<Value, 4> roots;
  for (Value v : operands)
    roots.insert(rootOf(v));
  for (Operation *op = from->getNextNode(); op && op != to; op = op->getNextNode()) {
    if (isa<rt::AllocOp, rt::ViewOp, rt::WeightOp, rt::ConstantOp>(op))
      continue;
    auto k = dyn_cast<rt::KernelOp>(op);
    ValueRange written = k ? ValueRange(k.getOutputs()) : ValueRange(op->getOperands());
    if (llvm::any_of(written, [&](Value v) {
          return isa<MemRefType>(v.getType()) && roots.contains(rootOf(v));
        }))
      return true;
  }
  return false;
}

/// The matmuls of `fn` without an epilogue: two operands, one result, its
/// own buffer; the product's element type is that of both operands.
SmallVector<rt::KernelOp> plainMatmuls(func::FuncOp fn) {
  SmallVector<rt::KernelOp> matmuls;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "matmul" && k.getInputs().size() == 2 && k.getOutputs().size() == 1 &&
        k.getOutputs()[0].getDefiningOp<rt::AllocOp>() &&
        elemOf(k.getInputs()[0]) == elemOf(k.getOutputs()[0]) &&
        elemOf(k.getInputs()[1]) == elemOf(k.getOutputs()[0]))
      matmuls.push_back(k);
  });
  return matmuls;
}

/// A matmul whose result only a bias add reads ([N], the result's last
/// dimension), and that add's result only a tanh gelu or a relu, becomes one
/// matmul with cuBLASLt's epilogue (`bias`, `gelu_bias`, `relu_bias`): the
/// product is written once, with the bias (and activation) applied. The
/// matmul moves to the last op it absorbs, unless something in between may
/// write one of its operands.
void fuseGemmEpilogues(func::FuncOp fn) {
  for (rt::KernelOp mm : plainMatmuls(fn)) {
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!isGemmType(elem) || shapeOf(product).size() < 2)
      continue;
    auto add = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!add || add.getKernel() != "add" || add.getInputs().size() != 2)
      continue;
    Value bias = add.getInputs()[0] == product ? add.getInputs()[1] : add.getInputs()[0];
    if (bias == product || shapeOf(bias).size() != 1 ||
        shapeOf(bias)[0] != shapeOf(product).back() || elemOf(bias) != elem ||
        shapeOf(add.getOutputs()[0]) != shapeOf(product) ||
        !add.getOutputs()[0].getDefiningOp<rt::AllocOp>())
      continue;
    StringRef epilogue = "bias";
    rt::KernelOp last = add;
    if (auto act = dyn_cast_or_null<rt::KernelOp>(soleReader(add.getOutputs()[0]));
        act && act.getInputs().size() == 1 && act.getInputs()[0] == add.getOutputs()[0] &&
        act.getOutputs()[0].getDefiningOp<rt::AllocOp>()) {
      auto approx = dyn_cast_or_null<StringAttr>(act.getParams().get("approximate"));
      if (act.getKernel() == "gelu" && approx && approx.getValue() == "tanh") {
        epilogue = "gelu_bias"; // cuBLASLt's GELU is the tanh form
        last = act;
      } else if (act.getKernel() == "relu") {
        epilogue = "relu_bias";
        last = act;
      }
    }
    Value result = last.getOutputs()[0];
    // The matmul moves to `last`, where the bias is ready.
    if (writtenBetween(mm, last, mm.getInputs()))
      continue;
    OpBuilder b(last);
    rt::KernelOp::create(
        b, last.getLoc(), b.getStringAttr("matmul"),
        ValueRange{mm.getInputs()[0], mm.getInputs()[1], bias}, ValueRange{result},
        b.getDictionaryAttr({b.getNamedAttr("epilogue", b.getStringAttr(epilogue))}));
    SmallVector<Operation *> dead = {last.getOperation()};
    if (last != add) {
      dead.push_back(add);
      dead.push_back(add.getOutputs()[0].getDefiningOp());
    }
    dead.push_back(mm);
    dead.push_back(product.getDefiningOp());
    for (Operation *op : dead)
      op->erase();
  }
}

/// A matmul of a 2-D B (one GEMM: A's batch folds into M), plain or with
/// the bias epilogue, whose result only an add of another buffer of its
/// shape reads (a transformer's residual stream, `x + attn(x)`), takes that
/// buffer as cuBLASLt's C (`residual`: the last input, added with beta 1
/// before the bias) and writes the sum itself: the product is neither
/// written nor read again. The matmul moves to the add, where the residual
/// is ready, unless something in between may write one of its operands.
void fuseGemmResiduals(func::FuncOp fn) {
  for (rt::KernelOp mm : kernelsNamed(fn, "matmul")) {
    auto epilogue = dyn_cast_or_null<StringAttr>(mm.getParams().get("epilogue"));
    bool bias = epilogue && epilogue.getValue() == "bias";
    if ((epilogue && !bias) || mm.getParams().size() != (epilogue ? 1 : 0) ||
        mm.getInputs().size() != (bias ? 3u : 2u) || mm.getOutputs().size() != 1)
      continue;
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!isGemmType(elem) || elemOf(mm.getInputs()[0]) != elem ||
        shapeOf(mm.getInputs()[1]).size() != 2 || !product.getDefiningOp<rt::AllocOp>())
      continue;
    auto add = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!add || add.getKernel() != "add" || add.getInputs().size() != 2 ||
        add.getOutputs().size() != 1)
      continue;
    Value residual = add.getInputs()[0] == product ? add.getInputs()[1] : add.getInputs()[0];
    Value result = add.getOutputs()[0];
    if (residual == product || shapeOf(residual) != shapeOf(product) ||
        elemOf(residual) != elem || shapeOf(result) != shapeOf(product) ||
        elemOf(result) != elem || !result.getDefiningOp<rt::AllocOp>())
      continue;
    // Nothing between the two may write what the matmul reads.
    if (writtenBetween(mm, add, mm.getInputs()))
      continue;
    SmallVector<Value> inputs(mm.getInputs());
    inputs.push_back(residual);
    NamedAttrList params(mm.getParams());
    OpBuilder b(add);
    params.set("residual", b.getBoolAttr(true));
    rt::KernelOp::create(b, add.getLoc(), b.getStringAttr("matmul"), inputs, ValueRange{result},
                         params.getDictionary(b.getContext()));
    add.erase();
    mm.erase();
    product.getDefiningOp()->erase();
  }
}

/// A plain f16 or bf16 matmul whose result only a cast to f32 reads, where
/// no kernel reads the cast's result (it is returned, or only collectives
/// read it: the logits of a `--dtype bf16` program), writes f32 directly:
/// cuBLASLt accumulates in f32 and rounds once to the output type, so the
/// half-precision product is neither written nor read again, and the
/// result is rounded once instead of twice. A cast that a generated kernel
/// reads is left alone: it fuses into that kernel, which then reads the
/// narrower product.
void fuseGemmOutputCasts(func::FuncOp fn) {
  for (rt::KernelOp mm : plainMatmuls(fn)) {
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!(elem.isBF16() || elem.isF16()))
      continue;
    auto cast = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!cast || cast.getKernel() != "cast" || cast.getInputs().size() != 1 ||
        cast.getInputs()[0] != product || cast.getOutputs().size() != 1)
      continue;
    Value result = cast.getOutputs()[0];
    auto resultAlloc = result.getDefiningOp<rt::AllocOp>();
    if (!resultAlloc || !elemOf(result).isF32() || shapeOf(result) != shapeOf(product))
      continue;
    SmallVector<Operation *> readers, views;
    collectReaders(result, readers, views);
    if (llvm::any_of(readers, [](Operation *op) { return isa<rt::KernelOp>(op); }))
      continue;
    // The matmul stays where it was (an in-place collective between it and
    // the cast may write one of its operands); the result's buffer is
    // allocated before it.
    if (mm->isBeforeInBlock(resultAlloc))
      resultAlloc->moveBefore(mm);
    OpBuilder b(mm);
    rt::KernelOp::create(b, mm.getLoc(), b.getStringAttr("matmul"), mm.getInputs(),
                         ValueRange{result}, mm.getParamsAttr());
    Operation *alloc = product.getDefiningOp();
    cast.erase();
    mm.erase();
    alloc->erase();
  }
}

/// A 2-D weight [K, N] that only matmuls read, as their B, whose rows
/// are not 16-byte aligned (N elements of its type are not a multiple of
/// 16 bytes: GPT-2's [768, 50257] vocabulary projection) while its columns
/// would be, is stored transposed ([N, K], `permutation = [1, 0]`, applied
/// once at load) and read with `trans_b`. cuBLASLt's fastest kernels
/// (TMA on sm_90, 16-byte asynchronous copies on sm_80) need 16-byte
/// aligned leading dimensions; the transposed operand has them, and the
/// GEMM is the same "TN" form as a framework's [out, in] linear weight.
/// A weight already loaded transposed (an ONNX Transpose of an
/// initializer) is then loaded as stored.
void transposeMisalignedGemmWeights(func::FuncOp fn) {
  SmallVector<rt::WeightOp> weights(fn.getOps<rt::WeightOp>());
  for (rt::WeightOp w : weights) {
    auto type = cast<MemRefType>(w.getType());
    Type elem = type.getElementType();
    if (type.getRank() != 2 || !isGemmType(elem) || w->use_empty())
      continue;
    int64_t bytes = elem.getIntOrFloatBitWidth() / 8, k = type.getDimSize(0),
            n = type.getDimSize(1);
    if ((n * bytes) % 16 == 0 || (k * bytes) % 16 != 0)
      continue;
    bool onlyGemmB = llvm::all_of(w->getUses(), [](OpOperand &use) {
      auto mm = dyn_cast<rt::KernelOp>(use.getOwner());
      return mm && mm.getKernel() == "matmul" && use.getOperandNumber() == 1 &&
             mm.getInputs().size() >= 2 && mm.getInputs()[0] != mm.getInputs()[1] &&
             !mm.getParams().get("trans_b");
    });
    if (!onlyGemmB)
      continue;
    OpBuilder b(w);
    auto perm = w.getPermutationAttr();
    if (perm && perm.asArrayRef()[0] == 1)
      w.removePermutationAttr(); // [1, 0] twice
    else
      w.setPermutationAttr(b.getDenseI64ArrayAttr({1, 0}));
    w.getResult().setType(MemRefType::get({n, k}, elem));
    SmallVector<Operation *> users(w->getUsers());
    for (Operation *user : users) {
      auto mm = cast<rt::KernelOp>(user);
      SmallVector<NamedAttribute> params(mm.getParams().getValue());
      params.push_back(b.getNamedAttr("trans_b", b.getBoolAttr(true)));
      mm.setParamsAttr(b.getDictionaryAttr(params));
    }
  }
}

/// A plain matmul of a 2-D weight of N >= 64 columns whose result rows are
/// not 16-byte aligned (GPT-2's [tokens, 50257] logits, in f32 or bf16)
/// writes a result padded to a multiple of 64 columns (8 below 1024)
/// instead, whose rows are, and a `slice` copies the N real columns into
/// the result. cuBLASLt's fast kernels need every leading dimension
/// aligned, the result's too: on an H200 the 8192 x 50257 x 768 bf16
/// projection ran at about 95 TFLOP/s, against 480 to 730 for the aligned
/// GEMMs of the same program (2026-11-26). The
/// weight grows to the padded width at load: a slice of the stored tensor
/// with `zero_padded` (what lies past the tensor reads as zeros). Its
/// extra columns only make the result columns the slice leaves out, so
/// a sharded weight's slice may read its neighbour's columns there.
///
/// A result that only the function returns needs no slice: the padded
/// buffer is returned, its result attribute `rt.columns` saying how many
/// leading elements of each row are the output (the runtime downloads them
/// with one 2-D copy), so neither the copy nor a second buffer of the
/// result's size is needed.
void padMisalignedGemmResults(func::FuncOp fn) {
  auto worldAttr = fn->getAttrOfType<IntegerAttr>("rt.world_size");
  int64_t world = worldAttr ? worldAttr.getInt() : 1;
  for (rt::KernelOp mm : kernelsNamed(fn, "matmul")) {
    if (mm.getInputs().size() != 2 || mm.getOutputs().size() != 1)
      continue;
    auto transB = dyn_cast_or_null<BoolAttr>(mm.getParams().get("trans_b"));
    if (mm.getParams().size() != (transB ? 1u : 0u))
      continue;
    auto w = mm.getInputs()[1].getDefiningOp<rt::WeightOp>();
    Value y = mm.getOutputs()[0];
    if (!w || !w->hasOneUse() || mm.getInputs()[0] == mm.getInputs()[1] ||
        !y.getDefiningOp<rt::AllocOp>())
      continue;
    auto wType = cast<MemRefType>(w.getType());
    ArrayRef<int64_t> ys = shapeOf(y);
    if (wType.getRank() != 2 || ys.empty() || !isGemmType(wType.getElementType()) ||
        !isGemmType(elemOf(y)))
      continue;
    int64_t nDim = transB && transB.getValue() ? 0 : 1, n = ys.back();
    int64_t outBytes = elemOf(y).getIntOrFloatBitWidth() / 8;
    if (wType.getDimSize(nDim) != n || n < 64 || (n * outBytes) % 16 == 0)
      continue;
    int64_t padded = llvm::alignTo(n, n >= 1024 ? 64 : 8);
    // The stored tensor's shape and the weight's start on each rank: its
    // own slice when sharded, else the whole tensor from the origin.
    SmallVector<int64_t> stored(wType.getShape());
    if (auto perm = w.getPermutationAttr())
      for (auto [i, d] : llvm::enumerate(perm.asArrayRef()))
        stored[d] = wType.getDimSize(int64_t(i));
    OpBuilder b(w);
    if (!w.getGlobalShapeAttr()) {
      w.setGlobalShapeAttr(b.getDenseI64ArrayAttr(stored));
      SmallVector<Attribute> starts(size_t(world),
                                    b.getDenseI64ArrayAttr(SmallVector<int64_t>(2, 0)));
      w.setStartsAttr(b.getArrayAttr(starts));
    }
    w.setZeroPadded(true);
    SmallVector<int64_t> wShape(wType.getShape());
    wShape[size_t(nDim)] = padded;
    w.getResult().setType(MemRefType::get(wShape, wType.getElementType()));

    b.setInsertionPoint(mm);
    SmallVector<int64_t> pShape(ys);
    pShape.back() = padded;
    Value product = rt::AllocOp::create(b, mm.getLoc(), MemRefType::get(pShape, elemOf(y)),
                                        IntegerAttr());
    mm.getOutputsMutable().assign(product);
    if (y.hasOneUse() && isa<func::ReturnOp>(*y.getUsers().begin())) {
      OpOperand &use = *y.getUses().begin();
      unsigned result = use.getOperandNumber();
      use.set(product);
      y.getDefiningOp()->erase();
      SmallVector<Type> results(fn.getFunctionType().getResults());
      results[result] = product.getType();
      fn.setType(FunctionType::get(fn.getContext(), fn.getFunctionType().getInputs(), results));
      fn.setResultAttr(result, "rt.columns", b.getI64IntegerAttr(n));
      continue;
    }
    b.setInsertionPointAfter(mm);
    int64_t axis = int64_t(ys.size()) - 1;
    NamedAttribute params[] = {
        b.getNamedAttr("starts", b.getDenseI64ArrayAttr({0})),
        b.getNamedAttr("ends", b.getDenseI64ArrayAttr({n})),
        b.getNamedAttr("axes", b.getDenseI64ArrayAttr({axis})),
        b.getNamedAttr("steps", b.getDenseI64ArrayAttr({1}))};
    rt::KernelOp::create(b, mm.getLoc(), b.getStringAttr("slice"), ValueRange{product},
                         ValueRange{y}, b.getDictionaryAttr(params));
  }
}

/// Whether convolution `k` with window `kernel` reads each input position
/// once, in place: every window dimension 1, every stride 1, no padding
/// (the dilations then do not matter).
bool isPointwise(rt::KernelOp k, ArrayRef<int64_t> kernel) {
  auto all = [&](StringRef name, int64_t value) {
    auto a = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get(name));
    return !a || llvm::all_of(a.asArrayRef(), [&](int64_t v) { return v == value; });
  };
  return llvm::all_of(kernel, [](int64_t d) { return d == 1; }) && all("strides", 1) &&
         all("pads", 0);
}

/// Convolution as im2col and a GEMM: `im2col` (generated) writes, per
/// image and group, the [(C/G) * window, output positions] patch matrix,
/// and a matmul of the [G, M/G, (C/G) * window] weight view with it gives
/// [N, G, M/G, positions], which is the NCHW result's layout. The bias is
/// an elementwise add over the channel dimension.
void lowerConvolutions(func::FuncOp fn) {
  SmallVector<rt::KernelOp> convs;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "conv" && k.getOutputs().size() == 1 &&
        (k.getInputs().size() == 2 || k.getInputs().size() == 3))
      convs.push_back(k);
  });
  for (rt::KernelOp k : convs) {
    Value x = k.getInputs()[0], w = k.getInputs()[1], y = k.getOutputs()[0];
    Value bias = k.getInputs().size() > 2 ? k.getInputs()[2] : Value();
    ArrayRef<int64_t> xs = shapeOf(x), ws = shapeOf(w), ys = shapeOf(y);
    auto groupAttr = dyn_cast_or_null<IntegerAttr>(k.getParams().get("group"));
    int64_t group = groupAttr ? groupAttr.getInt() : 1;
    Type elem = elemOf(y);
    if (xs.size() < 3 || ws.size() != xs.size() || ys.size() != xs.size() || group < 1 ||
        xs[1] % group || ws[0] % group || elemOf(x) != elem || elemOf(w) != elem ||
        !isa<FloatType>(elem) || !y.getDefiningOp<rt::AllocOp>())
      continue; // left for the error that names it
    int64_t window = 1, positions = 1;
    for (int64_t d : ws.drop_front(2))
      window *= d;
    for (int64_t d : ys.drop_front(2))
      positions *= d;
    int64_t patch = (xs[1] / group) * window, n = xs[0], m = ws[0];
    OpBuilder b(k);
    Location loc = k.getLoc();
    auto colType = MemRefType::get({n, group, patch, positions}, elem);
    Value col;
    if (isPointwise(k, ws.drop_front(2))) {
      // A 1x1 window at stride 1 without padding: the patch matrix of an
      // image and group is its [C/G, positions] block of the input itself.
      col = rt::ViewOp::create(b, loc, colType, x);
    } else {
      col = rt::AllocOp::create(b, loc, colType, IntegerAttr());
      SmallVector<NamedAttribute> params(k.getParams().getValue());
      params.push_back(b.getNamedAttr("kernel_shape", b.getDenseI64ArrayAttr(ws.drop_front(2))));
      params.push_back(b.getNamedAttr("out_spatial", b.getDenseI64ArrayAttr(ys.drop_front(2))));
      if (!groupAttr)
        params.push_back(b.getNamedAttr("group", b.getI64IntegerAttr(1)));
      rt::KernelOp::create(b, loc, b.getStringAttr("im2col"), ValueRange{x}, ValueRange{col},
                           b.getDictionaryAttr(params));
    }
    Value wv = rt::ViewOp::create(b, loc, MemRefType::get({group, m / group, patch}, elem), w);
    auto product = rt::AllocOp::create(
        b, loc, MemRefType::get({n, group, m / group, positions}, elem), IntegerAttr());
    rt::KernelOp::create(b, loc, b.getStringAttr("matmul"), ValueRange{wv, col},
                         ValueRange{product}, b.getDictionaryAttr({}));
    Value result = rt::ViewOp::create(b, loc, cast<MemRefType>(y.getType()), product);
    if (bias) {
      SmallVector<int64_t> biasShape(ys.size() - 1, 1);
      biasShape[0] = m;
      Value bv = rt::ViewOp::create(b, loc, MemRefType::get(biasShape, elemOf(bias)), bias);
      rt::KernelOp::create(b, loc, b.getStringAttr("add"), ValueRange{result, bv}, ValueRange{y},
                           b.getDictionaryAttr({}));
      k.erase();
      continue;
    }
    Operation *alloc = y.getDefiningOp();
    y.replaceAllUsesWith(result);
    k.erase();
    if (alloc->use_empty())
      alloc->erase();
  }
}

void ConvertRTToGPU::runOnOperation() {
  ModuleOp module = getOperation();
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (!fn.isExternal()) {
      rt::rewriteEinsumsAsMatmuls(fn);
      readAttentionInputsInPlace(fn);
      lowerConvolutions(fn);
      lowerNonGemmMatmuls(fn);
      splitScatters(fn);
      if (failed(precomputeDropoutMasks(fn)))
        return signalPassFailure();
      if (gemmEpilogues)
        fuseGemmEpilogues(fn);
      if (gemmResiduals)
        fuseGemmResiduals(fn);
      fuseGemmOutputCasts(fn);
      transposeMisalignedGemmWeights(fn);
      if (gemmPadding)
        padMisalignedGemmResults(fn);
    }
  SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
  gpu::GPUModuleOp kernels;
  int id = 0;
  for (func::FuncOp fn : fns) {
    if (fn.isExternal())
      continue;
    SmallVector<std::unique_ptr<Group>> groups;
    if (failed(formGroups(fn, groups)))
      return signalPassFailure();
    if (groups.empty())
      continue;
    if (!kernels) {
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      UnitAttr::get(module.getContext()));
      OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
      kernels = gpu::GPUModuleOp::create(b, module.getLoc(), kModuleName);
    }
    if (siblingFusion)
      fuseSiblings(groups);
    for (auto &g : groups)
      if (!g->absorbed && failed(emitGroup(*g, kernels, id++)))
        return signalPassFailure();
  }
}

} // namespace
