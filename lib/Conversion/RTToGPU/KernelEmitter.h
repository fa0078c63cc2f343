//===- KernelEmitter.h - scalar code of fused kernels ----------*- C++ -*-===//
//
// What one thread of a generated kernel computes for one member of its
// group: the arithmetic of an elementwise kernel in its compute type, lane
// by lane (several consecutive elements with vector accesses), loads and
// stores of consecutive elements as vectors where the operands allow, and
// the kernels that read their inputs at other positions (rotary
// embedding, rotate_half, batch normalization, pooling windows, im2col
// patches). GroupEmitter strings the members of a group together.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_CONVERSION_RTTOGPU_KERNELEMITTER_H
#define SHARDFLOW_LIB_CONVERSION_RTTOGPU_KERNELEMITTER_H

#include "Emitter.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Alignment.h"

namespace shardflow::rtgpu {

/// The values of one kernel output at the consecutive flat positions a
/// thread computes (one lane each; a single lane without vectorization).
using Lanes = llvm::SmallVector<mlir::Value, 8>;

constexpr int64_t kVectorBytes = 16; // widest load or store of one thread
constexpr int64_t kMaxLanes = 8;     // elements per thread at most

/// How many elements of `to`'s trailing dimensions an operand of shape
/// `from` (right-aligned, numpy broadcasting) reads consecutively
/// (`matched`: its dimensions equal `to`'s there) or not at all (its
/// dimensions are 1 or absent there).
int64_t trailingExtent(llvm::ArrayRef<int64_t> to, llvm::ArrayRef<int64_t> from, bool matched);

/// The byte alignment of `lanes` consecutive elements of type `t` at an
/// element index that is a multiple of `lanes`, in a buffer whose start is
/// 16-byte aligned (the runtime checks that it is).
llvm::Align laneAlignment(mlir::Type t, int64_t lanes);

class KernelEmitter : public EmitterBase {
public:
  using EmitterBase::EmitterBase;

  /// The launch's members that check their data, each with its ordinal
  /// (program order), which its reports carry (`checker`).
  llvm::DenseMap<mlir::Operation *, int64_t> checkers;

  /// Flat index `base + i`.
  mlir::Value lane(mlir::Value base, int64_t i);

  /// The `width` elements at flat positions base .. base + width - 1 of
  /// shape `to` of an operand of shape `from` (broadcast to `to`), in the
  /// compute type; `base` is a multiple of `width`. One vector load when
  /// they are consecutive in the operand, one scalar load when they are
  /// all the same element, one load each otherwise.
  Lanes loadLanes(mlir::Value buf, llvm::ArrayRef<int64_t> to, llvm::ArrayRef<int64_t> from,
                  mlir::Value base, int64_t width);

  /// Stores compute values `lanes` at flat positions base, base + 1, ...
  /// of `buf` (`base` a multiple of their number), rounding each once: one
  /// vector store when there are several.
  void storeLanes(llvm::ArrayRef<mlir::Value> lanes, mlir::Value buf, mlir::Value base);

  /// The element of an operand of shape `from` that broadcasts (numpy rules,
  /// right-aligned) to linear index `idx` of shape `to`.
  mlir::Value broadcastIndex(mlir::Value idx, llvm::ArrayRef<int64_t> to,
                             llvm::ArrayRef<int64_t> from);

  /// Float `x` converted to integers of type `storage` as the CPU kernels
  /// convert (truncToInt in ElementwiseSupport.h): toward zero, and out of
  /// range (NaN included) the lowest int32 for types of up to 32 bits
  /// other than ui32, the lowest int64 for 64-bit types and ui32, wrapped
  /// to the width; ui64 also takes [2^63, 2^64), and 0 beyond. Only
  /// in-range values reach the conversion (out of range it is poison).
  mlir::Value truncToInt(mlir::Value x, mlir::Type storage);

  /// Integer division as the CPU kernel divides: truncating, INT_MIN / -1
  /// wrapping to INT_MIN, and a zero divisor reported through the status
  /// word (with the result position), the quotient then being x.
  std::pair<mlir::Value, mlir::Value> safeDivisor(mlir::Value y, bool isUnsigned,
                                                  mlir::Value idx, StatusCode code);
  mlir::Value intDiv(mlir::Value x, mlir::Value y, bool isUnsigned, mlir::Value idx);
  mlir::Value intMod(mlir::Value x, mlir::Value y, bool isUnsigned, bool fmod, mlir::Value idx);

  /// Integer base `x` to the power `y` as the CPU kernel computes it: an
  /// integer exponent by squaring (wrapping products; a negative one gives
  /// the truncated real result, 0 unless |x| = 1), a float exponent through
  /// f64 pow (a result within a few ulps of an integer taken as it) and
  /// truncToInt.
  mlir::Value intPow(mlir::Value x, mlir::Value y, mlir::Type baseStorage, mlir::Type expStorage);

  /// Integer clip as the CPU kernel clips: a fractional bound rounds inward
  /// and saturates to the type; a NaN bound is no bound.
  mlir::Value intClip(mlir::Value x, mlir::Type storage, mlir::DictionaryAttr params);

  /// The scalar result of elementwise kernel `k` on compute-typed operands,
  /// at flat index `idx` of its output (for ops that depend on position).
  /// Operands and results are signless; whether an integer is unsigned
  /// comes from the kernel's buffer types.
  mlir::FailureOr<mlir::Value> elementwise(rt::KernelOp k, llvm::ArrayRef<mlir::Value> in,
                                           mlir::Value idx);

  /// Rotary embedding at flat output index `idx`: the element and its
  /// rotation partner (the other half, or the other of a pair) times the
  /// cos/sin of the position. A position id outside the cache is reported
  /// through the status word (and position 0 read instead).
  mlir::FailureOr<mlir::Value>
  rotary(rt::KernelOp k, llvm::DenseMap<mlir::Value, mlir::Value> &args, mlir::Value idx);

  /// rotate_half at flat index `idx`: the element half a row away, negated
  /// in the first half.
  mlir::FailureOr<mlir::Value>
  rotateHalf(rt::KernelOp k, llvm::DenseMap<mlir::Value, mlir::Value> &args, mlir::Value idx);

  /// keyed_dropout at flat index `idx`: the input times 1 / (1 - ratio)
  /// where the Philox4x32-10 draw of the element's index in the whole
  /// tensor (this rank's block start read from the kernel's third input,
  /// which cuda-keyed-dropout-starts adds) is at least the ratio, else 0:
  /// the CPU kernel's draw, bit for bit.
  mlir::FailureOr<mlir::Value>
  keyedDropout(rt::KernelOp k, llvm::DenseMap<mlir::Value, mlir::Value> &args, mlir::Value idx);
  /// Inference batch normalization at flat index `idx`: the channel is
  /// dimension 1, its statistics are [C] vectors. `fused`, when set, is
  /// the input's element at `idx`, computed by an earlier group member.
  mlir::FailureOr<mlir::Value> batchNorm(rt::KernelOp k,
                                         llvm::DenseMap<mlir::Value, mlir::Value> &args,
                                         mlir::Value idx, mlir::Value fused = {});

  /// Walks a window of `kernel` positions (unrolled: windows are small) for
  /// output spatial coordinates `out`; `fn(valid, padded, inputSpatialIndex)`
  /// gets whether the position lies inside the input (not in the padding),
  /// whether it lies inside the padded input (ceil mode's windows reach past
  /// it), and the flat index of the position within one spatial plane
  /// (clamped to 0 when outside).
  mlir::LogicalResult forEachWindowPosition(
      rt::KernelOp k, llvm::ArrayRef<mlir::Value> out, llvm::ArrayRef<int64_t> inSpatial,
      llvm::ArrayRef<int64_t> kernel,
      llvm::function_ref<void(mlir::Value valid, mlir::Value padded, mlir::Value plane)> fn);

  /// Max or average pooling at flat output index `idx` ([N, C, spatial...]).
  /// Positions in the padding are skipped (max) or, with
  /// `count_include_pad`, counted as zeros (average). Max pooling takes any
  /// numeric type; with `indices` (max_pool_with_indices) it also sets the
  /// flat input index of the window's first maximum (the first NaN wins; -1
  /// for a window with no input position), row-major, or column-major over
  /// the last two spatial dimensions with `storage_order` 1, as the CPU
  /// kernel does.
  mlir::FailureOr<mlir::Value> pool(rt::KernelOp k, llvm::DenseMap<mlir::Value, mlir::Value> &args,
                                    mlir::Value idx, mlir::Value *indices = nullptr);

  /// The flat index (i64) in [N, C, spatial...] of window position `at`
  /// (row-major within the plane at `planeBase`): column-major over the
  /// last two spatial dimensions when `columnMajor`.
  mlir::Value flatInputIndex(mlir::Value planeBase, mlir::Value at,
                             llvm::ArrayRef<int64_t> inSpatial, bool columnMajor);

  /// im2col at flat index `idx` of its [N, G, (C/G)*K..., P] output: the
  /// input element under kernel position k of output position p, 0 in the
  /// padding. Params: strides, pads, dilations, group, kernel_shape.
  mlir::FailureOr<mlir::Value>
  im2col(rt::KernelOp k, llvm::DenseMap<mlir::Value, mlir::Value> &args, mlir::Value idx);
};

} // namespace shardflow::rtgpu

#endif // SHARDFLOW_LIB_CONVERSION_RTTOGPU_KERNELEMITTER_H
