//===- DevicePlanner.cpp - launches for the hand-written CUDA kernels ------===//
//
// Host side of lib/Runtime/Device/CUDA/Kernels: checks one instruction's tensors
// and parameters the way the CPU kernel does, and turns them into launches
// (function name, grid, block, shared memory, argument bytes) of the
// kernels in the embedded fatbin. No CUDA API call: the executor loads the
// fatbin and launches.
//
// Data movement ops become strided copies: the device-kernel planner drops size-1
// dimensions, merges dimensions contiguous on both sides, widens elements
// to up to 16 bytes where the innermost run and the addresses allow, and
// picks 32-bit index arithmetic when every offset fits.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"
#include "shardflow/Runtime/Format/Layout.h"

#include "DeviceKernelArgs.h"
#include "DevicePlanner.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

static_assert(sizeof(StridedCopyArgs) == 224, "StridedCopyArgs layout changed");
static_assert(sizeof(PadArgs) == 296, "PadArgs layout changed");
static_assert(sizeof(GatherArgs) == 88, "GatherArgs layout changed");
static_assert(sizeof(AttentionArgs) == 224, "AttentionArgs layout changed");

namespace {

[[noreturn]] void fail(std::string_view kernel, const std::string &what) {
  throw RuntimeError(std::string(kernel) + " (cuda): " + what);
}

template <typename Args> std::vector<uint8_t> bytesOf(const Args &a) {
  std::vector<uint8_t> b(sizeof(Args));
  std::memcpy(b.data(), &a, sizeof(Args));
  return b;
}

int64_t product(const std::vector<int64_t> &v, size_t from = 0, size_t to = SIZE_MAX) {
  to = std::min(to, v.size());
  from = std::min(from, to);
  int64_t n = 1;
  for (auto it = v.begin() + ptrdiff_t(from), end = v.begin() + ptrdiff_t(to); it != end; ++it)
    n *= *it;
  return n;
}


void expectArity(std::string_view kernel, const std::vector<Tensor> &ins,
                 const std::vector<Tensor> &outs, size_t nIn, size_t nOut) {
  if (ins.size() < nIn || outs.size() < nOut)
    fail(kernel, "expects " + std::to_string(nIn) + " inputs and " + std::to_string(nOut) +
                     " outputs, got " + std::to_string(ins.size()) + " and " +
                     std::to_string(outs.size()));
}

/// Threads per block of the elementwise-style kernels, and the most blocks
/// one launch uses (each thread then loops over several elements).
constexpr unsigned kCopyThreads = 256;
constexpr int64_t kMaxCopyBlocks = 65536;

void setLinearGrid(DeviceLaunch &l, int64_t total) {
  int64_t blocks = std::clamp<int64_t>((total + kCopyThreads - 1) / kCopyThreads, 1,
                                       kMaxCopyBlocks);
  l.grid[0] = unsigned(blocks);
  l.grid[1] = l.grid[2] = 1;
  l.block[0] = kCopyThreads;
  l.block[1] = l.block[2] = 1;
  l.sharedBytes = 0;
}

bool fitsInt32(int64_t v) {
  return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
}

/// Whether a grid-stride loop over `total` elements can count in int32:
/// its last step takes the index up to total + the grid's thread count,
/// which must not overflow either.
bool loopFitsInt32(int64_t total) {
  return fitsInt32(total + int64_t(kCopyThreads) * kMaxCopyBlocks);
}

/// One strided copy: copy index `idx` of `shape` goes from
/// in[sum idx * inStride] to out[sum idx * outStride] (elements of esize
/// bytes, from byte addresses `out` and `in`). Empty copies plan nothing.
void planCopy(std::string_view kernel, std::vector<DeviceLaunch> &launches, char *out,
              const char *in, std::vector<int64_t> shape, std::vector<int64_t> outStride,
              std::vector<int64_t> inStride, size_t esize) {
  if (product(shape) == 0)
    return;
  // Drop size-1 dimensions, then merge a dimension into the one before it
  // when both sides step over it contiguously.
  auto simplify = [](std::vector<int64_t> &shape, std::vector<int64_t> &outStride,
                     std::vector<int64_t> &inStride) {
    std::vector<int64_t> s, os, is;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1)
        continue;
      if (!s.empty() && os.back() == outStride[d] * shape[d] &&
          is.back() == inStride[d] * shape[d]) {
        s.back() *= shape[d];
        os.back() = outStride[d];
        is.back() = inStride[d];
        continue;
      }
      s.push_back(shape[d]);
      os.push_back(outStride[d]);
      is.push_back(inStride[d]);
    }
    shape = std::move(s);
    outStride = std::move(os);
    inStride = std::move(is);
  };
  std::vector<int64_t> s = shape, os = outStride, is = inStride;
  simplify(s, os, is);
  // Widen elements while the innermost run is contiguous on both sides and
  // every offset and address stays a multiple of the wider size.
  while (!s.empty() && os.back() == 1 && is.back() == 1 && esize < 16) {
    size_t wide = esize * 2;
    int64_t f = 2;
    bool ok = s.back() % f == 0 && uintptr_t(out) % wide == 0 && uintptr_t(in) % wide == 0;
    for (size_t d = 0; ok && d + 1 < s.size(); ++d)
      ok = os[d] % f == 0 && is[d] % f == 0;
    if (!ok)
      break;
    s.back() /= f;
    for (size_t d = 0; d + 1 < s.size(); ++d) {
      os[d] /= f;
      is[d] /= f;
    }
    esize = wide;
  }
  // A run widened into one element leaves a size-1 dimension.
  simplify(s, os, is);
  if (s.size() > size_t(kMaxCopyDims))
    fail(kernel, "a copy of shape " + shapeText(shape) + " needs " + std::to_string(s.size()) +
                     " dimensions after merging; the CUDA kernel handles at most " +
                     std::to_string(kMaxCopyDims));
  StridedCopyArgs a{};
  a.out = out;
  a.in = in;
  a.total = product(s);
  a.rank = int32_t(s.size());
  // 32-bit index arithmetic when every index and offset fits (negative
  // strides from backward slices included).
  bool small = loopFitsInt32(a.total);
  int64_t inLo = 0, inHi = 0, outLo = 0, outHi = 0;
  for (size_t d = 0; d < s.size(); ++d) {
    a.shape[d] = s[d];
    a.outStride[d] = os[d];
    a.inStride[d] = is[d];
    int64_t ie = is[d] * (s[d] - 1), oe = os[d] * (s[d] - 1);
    (ie < 0 ? inLo : inHi) += ie;
    (oe < 0 ? outLo : outHi) += oe;
  }
  small = small && fitsInt32(inLo) && fitsInt32(inHi) && fitsInt32(outLo) && fitsInt32(outHi);
  DeviceLaunch l;
  l.function = "sf_strided_copy_e" + std::to_string(esize) + (small ? "_i32" : "_i64");
  setLinearGrid(l, a.total);
  l.argument = bytesOf(a);
  launches.push_back(std::move(l));
}

void checkSameType(std::string_view kernel, const Tensor &in, const Tensor &out,
                   const char *what) {
  if (in.dtype != out.dtype)
    fail(kernel, std::string(what) + " has element type " + dtypeName(in.dtype) +
                     " but the result " + dtypeName(out.dtype));
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

std::vector<DeviceLaunch> planTranspose(std::string_view kernel, const std::vector<Tensor> &ins,
                                        const std::vector<Tensor> &outs, const Params &params) {
  expectArity(kernel, ins, outs, 1, 1);
  const Tensor &in = ins[0], &out = outs[0];
  checkSameType(kernel, in, out, "the input");
  std::vector<int64_t> perm = params.getInts("perm", {});
  if (perm.empty())
    for (int64_t i = in.rank(); i-- > 0;)
      perm.push_back(i);
  if (int64_t(perm.size()) != in.rank() || out.rank() != in.rank())
    fail(kernel, "perm has " + std::to_string(perm.size()) + " entries for an input of shape " +
                     shapeText(in.shape) + " and a result of shape " + shapeText(out.shape));
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape), strides;
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t p = perm[i];
    if (p < 0 || p >= in.rank())
      fail(kernel, "perm entry " + std::to_string(p) + " is out of range");
    if (out.shape[i] != in.shape[size_t(p)])
      fail(kernel, "result shape " + shapeText(out.shape) + " is not the input shape " +
                       shapeText(in.shape) + " permuted");
    strides.push_back(inStrides[size_t(p)]);
  }
  std::vector<DeviceLaunch> l;
  planCopy(kernel, l, static_cast<char *>(out.data), static_cast<const char *>(in.data),
           out.shape, rowMajorStrides(out.shape), strides, dtypeSize(in.dtype));
  return l;
}

/// ONNX Slice on one dimension: the clamped start (as the CPU kernel).
int64_t sliceStart(int64_t dim, int64_t start, int64_t step) {
  if (dim == 0)
    return 0;
  if (start < 0)
    start += dim;
  return step > 0 ? std::clamp<int64_t>(start, 0, dim) : std::clamp<int64_t>(start, 0, dim - 1);
}

std::vector<DeviceLaunch> planSlice(std::string_view kernel, const std::vector<Tensor> &ins,
                                    const std::vector<Tensor> &outs, const Params &params) {
  expectArity(kernel, ins, outs, 1, 1);
  const Tensor &in = ins[0], &out = outs[0];
  checkSameType(kernel, in, out, "the input");
  if (out.rank() != in.rank())
    fail(kernel, "result rank " + std::to_string(out.rank()) + " differs from the input's " +
                     std::to_string(in.rank()));
  std::vector<int64_t> starts = params.getInts("starts", {}), axes = params.getInts("axes", {}),
                       steps = params.getInts("steps", {});
  if (starts.size() != axes.size())
    fail(kernel, "starts and axes differ in length");
  if (steps.empty())
    steps.assign(axes.size(), 1);
  if (steps.size() != axes.size())
    fail(kernel, "steps and axes differ in length");
  std::vector<int64_t> strides = rowMajorStrides(in.shape);
  int64_t base = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = axes[i] < 0 ? axes[i] + in.rank() : axes[i];
    if (axis < 0 || axis >= in.rank())
      fail(kernel, "axis " + std::to_string(axes[i]) + " is out of range");
    if (steps[i] == 0)
      fail(kernel, "step 0 on axis " + std::to_string(axes[i]));
    if (out.shape[size_t(axis)] == 0)
      return {};
    base += sliceStart(in.shape[size_t(axis)], starts[i], steps[i]) * strides[size_t(axis)];
    strides[size_t(axis)] *= steps[i];
  }
  size_t esize = dtypeSize(in.dtype);
  std::vector<DeviceLaunch> l;
  planCopy(kernel, l, static_cast<char *>(out.data),
           static_cast<const char *>(in.data) + base * int64_t(esize), out.shape,
           rowMajorStrides(out.shape), strides, esize);
  return l;
}

std::vector<DeviceLaunch> planExpand(std::string_view kernel, const std::vector<Tensor> &ins,
                                     const std::vector<Tensor> &outs) {
  expectArity(kernel, ins, outs, 1, 1);
  const Tensor &in = ins[0], &out = outs[0];
  checkSameType(kernel, in, out, "the input");
  if (in.rank() > out.rank())
    fail(kernel, "input rank exceeds the result's");
  std::vector<int64_t> strides;
  if (int64_t d = broadcastStrides(in.shape, out.shape, strides); d >= 0)
    fail(kernel, "input dimension " + std::to_string(d) + " of shape " + shapeText(in.shape) +
                     " does not broadcast to " + shapeText(out.shape));
  std::vector<DeviceLaunch> l;
  planCopy(kernel, l, static_cast<char *>(out.data), static_cast<const char *>(in.data),
           out.shape, rowMajorStrides(out.shape), strides, dtypeSize(in.dtype));
  return l;
}

int64_t normalizeAxis(std::string_view kernel, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    fail(kernel, "axis " + std::to_string(axis) + " is out of range for rank " +
                     std::to_string(rank));
  return a;
}

/// concat and split: one copy per piece, between the piece (contiguous)
/// and its window of the whole along `axis`.
std::vector<DeviceLaunch> planPieces(std::string_view kernel, const Tensor &whole,
                                     const std::vector<Tensor> &pieces, int64_t axis,
                                     bool intoWhole) {
  axis = normalizeAxis(kernel, axis, whole.rank());
  std::vector<int64_t> wholeStrides = rowMajorStrides(whole.shape);
  size_t esize = dtypeSize(whole.dtype);
  int64_t at = 0;
  std::vector<DeviceLaunch> l;
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Tensor &t = pieces[p];
    const char *what = intoWhole ? "input " : "result ";
    if (t.dtype != whole.dtype)
      fail(kernel, what + std::to_string(p) + " has element type " + dtypeName(t.dtype) +
                       " instead of " + dtypeName(whole.dtype));
    bool fits = t.rank() == whole.rank();
    for (int64_t d = 0; fits && d < whole.rank(); ++d)
      fits = d == axis || t.shape[size_t(d)] == whole.shape[size_t(d)];
    if (!fits)
      fail(kernel, what + std::to_string(p) + " of shape " + shapeText(t.shape) +
                       " does not fit shape " + shapeText(whole.shape) + " along axis " +
                       std::to_string(axis));
    char *wholeAt = static_cast<char *>(whole.data) +
                    at * wholeStrides[size_t(axis)] * int64_t(esize);
    if (intoWhole)
      planCopy(kernel, l, wholeAt, static_cast<const char *>(t.data), t.shape, wholeStrides,
               rowMajorStrides(t.shape), esize);
    else
      planCopy(kernel, l, static_cast<char *>(t.data), wholeAt, t.shape, rowMajorStrides(t.shape),
               wholeStrides, esize);
    at += t.shape[size_t(axis)];
  }
  if (at != whole.shape[size_t(axis)])
    fail(kernel, "the pieces cover " + std::to_string(at) + " of the " +
                     std::to_string(whole.shape[size_t(axis)]) + " entries along axis " +
                     std::to_string(axis));
  return l;
}

std::vector<DeviceLaunch> planLocalSlice(std::string_view kernel, const std::vector<Tensor> &ins,
                                         const std::vector<Tensor> &outs, const Params &params,
                                         int rank) {
  expectArity(kernel, ins, outs, 1, 1);
  const Tensor &in = ins[0], &out = outs[0];
  checkSameType(kernel, in, out, "the input");
  size_t dims = out.shape.size();
  std::vector<int64_t> all = params.getInts("starts", {});
  if (in.shape.size() != dims || rank < 0 || all.size() < (size_t(rank) + 1) * dims ||
      (dims && all.size() % dims))
    fail(kernel, "starts does not hold one index per dimension for rank " +
                     std::to_string(rank) + " (input " + shapeText(in.shape) + ", result " +
                     shapeText(out.shape) + ", " + std::to_string(all.size()) + " starts)");
  const int64_t *start = all.data() + size_t(rank) * dims;
  std::vector<int64_t> strides = rowMajorStrides(in.shape);
  int64_t base = 0;
  for (size_t d = 0; d < dims; ++d) {
    if (start[d] < 0 || start[d] + out.shape[d] > in.shape[d])
      fail(kernel, "rank " + std::to_string(rank) + "'s block at " + std::to_string(start[d]) +
                       " of size " + std::to_string(out.shape[d]) + " leaves dimension " +
                       std::to_string(d) + " of size " + std::to_string(in.shape[d]));
    base += start[d] * strides[d];
  }
  size_t esize = dtypeSize(in.dtype);
  std::vector<DeviceLaunch> l;
  planCopy(kernel, l, static_cast<char *>(out.data),
           static_cast<const char *>(in.data) + base * int64_t(esize), out.shape,
           rowMajorStrides(out.shape), strides, esize);
  return l;
}

/// Round to nearest even, NaN stays NaN: the CPU kernels' conversions.
uint16_t toHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u)
    return uint16_t(sign | 0x7e00u);
  if (absx >= 0x477ff000u) // rounds to >= 65520: infinity
    return uint16_t(sign | 0x7c00u);
  if (absx < 0x38800000u) { // subnormal half (or zero)
    float a;
    uint32_t ab = absx;
    std::memcpy(&a, &ab, 4);
    // a * 2^24 is the subnormal's integer mantissa; nearbyint rounds to even.
    return uint16_t(sign | uint32_t(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t mant = absx + 0xfffu + ((absx >> 13) & 1u) - (112u << 23);
  return uint16_t(sign | (mant >> 13));
}

uint16_t toBf16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// `value` in element type t, as little-endian bytes (as the CPU pad).
uint64_t fillBytes(DType t, double value) {
  uint64_t bits = 0;
  auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  switch (t) {
  case DType::F32: put(float(value)); break;
  case DType::F64: put(value); break;
  case DType::F16: put(toHalfBits(float(value))); break;
  case DType::BF16: put(toBf16Bits(float(value))); break;
  case DType::I1: put(uint8_t(value != 0)); break;
  case DType::I8: put(int8_t(int64_t(value))); break;
  case DType::I16: put(int16_t(int64_t(value))); break;
  case DType::I32: put(int32_t(int64_t(value))); break;
  case DType::I64: put(int64_t(value)); break;
  case DType::U8: put(uint8_t(int64_t(value))); break;
  case DType::U16: put(uint16_t(int64_t(value))); break;
  case DType::U32: put(uint32_t(int64_t(value))); break;
  case DType::U64: put(uint64_t(int64_t(value))); break;
  }
  return bits;
}

std::vector<DeviceLaunch> planPad(std::string_view kernel, const std::vector<Tensor> &ins,
                                  const std::vector<Tensor> &outs, const Params &params) {
  expectArity(kernel, ins, outs, 1, 1);
  const Tensor &in = ins[0], &out = outs[0];
  checkSameType(kernel, in, out, "the input");
  std::vector<int64_t> pads = params.getInts("pads", {});
  std::string mode = params.getString("mode", "constant");
  int32_t modeCode = mode == "constant" ? kPadConstant
                     : mode == "edge"   ? kPadEdge
                     : mode == "reflect" ? kPadReflect
                     : mode == "wrap"   ? kPadWrap
                                        : -1;
  if (modeCode < 0)
    fail(kernel, "unknown mode '" + mode + "'");
  size_t rank = size_t(in.rank());
  if (pads.size() != 2 * rank)
    fail(kernel, "pads needs " + std::to_string(2 * rank) + " entries, has " +
                     std::to_string(pads.size()));
  if (out.rank() != in.rank())
    fail(kernel, "result rank differs from the input's");
  for (size_t d = 0; d < rank; ++d)
    if (in.shape[d] + pads[d] + pads[rank + d] != out.shape[d])
      fail(kernel, "input " + shapeText(in.shape) + " padded by the pads is not the result " +
                       shapeText(out.shape));
  if (out.numel() == 0)
    return {};
  if (in.numel() == 0 && modeCode != kPadConstant)
    fail(kernel, "cannot pad an empty tensor in mode '" + mode + "'");
  if (rank > size_t(kMaxCopyDims))
    fail(kernel, "rank " + std::to_string(rank) + " exceeds the CUDA kernel's " +
                     std::to_string(kMaxCopyDims));
  PadArgs a{};
  a.out = out.data;
  a.in = in.data;
  a.total = out.numel();
  a.rank = int32_t(rank);
  a.mode = modeCode;
  a.fill = fillBytes(in.dtype, params.getFloat("value", 0.0));
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  for (size_t d = 0; d < rank; ++d) {
    a.outShape[d] = out.shape[d];
    a.inShape[d] = in.shape[d];
    a.inStride[d] = inStrides[d];
    a.before[d] = pads[d];
  }
  // Coordinates minus pads may be negative: the i32 variant is signed.
  bool small = loopFitsInt32(a.total) && fitsInt32(in.numel());
  for (size_t d = 0; d < rank; ++d)
    small = small && fitsInt32(out.shape[d] + std::abs(pads[d]));
  DeviceLaunch l;
  l.function = "sf_pad_e" + std::to_string(dtypeSize(in.dtype)) + (small ? "_i32" : "_i64");
  setLinearGrid(l, a.total);
  l.argument = bytesOf(a);
  return {l};
}

std::vector<DeviceLaunch> planGather(std::string_view kernel, const std::vector<Tensor> &ins,
                                     const std::vector<Tensor> &outs, const Params &params,
                                     int rank) {
  expectArity(kernel, ins, outs, 2, 1);
  const Tensor &in = ins[0], &indices = ins[1], &out = outs[0];
  checkSameType(kernel, in, out, "the input");
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64)
    fail(kernel, std::string("indices must be i32 or i64, got ") + dtypeName(indices.dtype));
  if (in.rank() < 1)
    fail(kernel, "the input must have rank >= 1");
  int64_t axis = normalizeAxis(kernel, params.getInt("axis", 0), in.rank());
  GatherArgs a{};
  a.out = out.data;
  a.in = in.data;
  a.indices = indices.data;
  a.outer = product(in.shape, 0, size_t(axis));
  a.count = indices.numel();
  a.inner = product(in.shape, size_t(axis) + 1);
  a.axisSize = in.shape[size_t(axis)];
  // The indices address axis_size rows (fewer than the input's when it is
  // zero-padded); a block of a split axis (vocabulary parallelism) holds
  // some of them, zeros for the rows other ranks hold.
  a.globalAxisSize = params.getInt("axis_size", a.axisSize);
  a.axisStart = 0;
  if (params.has("axis_starts")) {
    std::vector<int64_t> starts = params.getInts("axis_starts");
    if (rank < 0 || size_t(rank) >= starts.size())
      fail(kernel, "axis_starts has " + std::to_string(starts.size()) + " entries, none for rank " +
                       std::to_string(rank));
    a.axisStart = starts[size_t(rank)];
  } else if (a.globalAxisSize > a.axisSize) {
    fail(kernel, "axis_size " + std::to_string(a.globalAxisSize) + " exceeds the input's " +
                     std::to_string(a.axisSize) + " rows");
  }
  if (a.globalAxisSize < 1 || a.axisStart < 0 || a.axisStart >= a.globalAxisSize)
    fail(kernel, "rank " + std::to_string(rank) + "'s block of " + std::to_string(a.axisSize) +
                     " rows at " + std::to_string(a.axisStart) + " lies outside the " +
                     std::to_string(a.globalAxisSize) + " indexed rows");
  a.index64 = indices.dtype == DType::I64;
  if (out.numel() != a.outer * a.count * a.inner)
    fail(kernel, "result " + shapeText(out.shape) + " is not input " + shapeText(in.shape) +
                     " gathered along axis " + std::to_string(axis) + " by indices " +
                     shapeText(indices.shape));
  if (out.numel() == 0)
    return {};
  if (a.axisSize == 0)
    fail(kernel, "cannot gather from an empty axis " + std::to_string(axis));
  // Move rows in the widest elements their length and addresses allow.
  size_t esize = dtypeSize(in.dtype);
  while (esize < 16 && a.inner % 2 == 0 && uintptr_t(in.data) % (esize * 2) == 0 &&
         uintptr_t(out.data) % (esize * 2) == 0) {
    a.inner /= 2;
    esize *= 2;
  }
  bool small = loopFitsInt32(out.numel()) && fitsInt32(in.numel());
  DeviceLaunch l;
  l.function = "sf_gather_e" + std::to_string(esize) + (small ? "_i32" : "_i64");
  setLinearGrid(l, a.outer * a.count * a.inner);
  l.argument = bytesOf(a);
  l.statusOffset = int(offsetof(GatherArgs, status));
  return {l};
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// A [B, H, S, D] view of a 3-D or 4-D operand (Layout.h, as the CPU kernel).
using Heads = AttentionHeads;

bool isFloatType(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

/// Shared memory of the tensor-core kernel: the Q tile and two stages of K
/// and V tiles, rows padded by 8 elements (AttentionMma.cu).
/// Q (64 R rows) and two stages of K and V (64 rows each), padded rows.
int64_t mmaSharedBytes(int64_t d, int64_t r) { return (r + 4) * kMmaRows * (d + 8) * 2; }

bool aligned(const void *p, size_t n) { return uintptr_t(p) % n == 0; }

const char *typeSuffix(DType t) {
  return t == DType::F32 ? "f32" : t == DType::F16 ? "f16" : "bf16";
}

/// An attention mask's kind (bool, or additive in the query's type `q`)
/// and its strides as broadcast (right-aligned) to [B, Hq, Sq, Skv], 0 on
/// broadcast dimensions; kMaskNone without one.
int32_t maskLayout(std::string_view kernel, const Tensor *mask, DType q, const int64_t (&full)[4],
                   int64_t (&stride)[4]) {
  if (!mask)
    return kMaskNone;
  if (mask->rank() > 4)
    fail(kernel, "mask rank must be at most 4, mask has shape " + shapeText(mask->shape));
  int32_t kind = kMaskNone;
  if (mask->dtype == DType::I1)
    kind = kMaskBool;
  else if (mask->dtype == q)
    kind = kMaskAdd;
  else
    fail(kernel, std::string("mask must be i1 or have the query's element type, got ") +
                     dtypeName(mask->dtype));
  int64_t acc = 1;
  for (int64_t d = mask->rank() - 1, f = 3; d >= 0; --d, --f) {
    int64_t n = mask->shape[size_t(d)];
    if (n != 1 && n != full[f])
      fail(kernel, "mask dimension " + std::to_string(d) + " of size " + std::to_string(n) +
                       " does not broadcast to " + std::to_string(full[f]));
    stride[f] = n == 1 ? 0 : acc;
    acc *= n;
  }
  return kind;
}

/// The fields the forward and backward attention arguments share: q's,
/// k's and v's strides, the sizes, and the causal flag, scale and softcap
/// as the CPU kernel reads them (a softcap only when positive).
template <typename Args>
void setAttentionShape(Args &a, const AttentionLayout &l, const Params &params) {
  const AttentionHeads &q = l.q, &k = l.k, &v = l.v;
  a.qStride[0] = q.sb, a.qStride[1] = q.sh, a.qStride[2] = q.ss;
  a.kStride[0] = k.sb, a.kStride[1] = k.sh, a.kStride[2] = k.ss;
  a.vStride[0] = v.sb, a.vStride[1] = v.sh, a.vStride[2] = v.ss;
  a.batch = int32_t(q.batch);
  a.qHeads = int32_t(q.heads);
  a.group = int32_t(q.heads / k.heads);
  a.sq = int32_t(q.seq);
  a.skv = int32_t(k.seq);
  a.d = int32_t(q.dim);
  a.dv = int32_t(v.dim);
  a.causal = params.getBool("is_causal", false);
  a.scale = float(params.has("scale") ? params.getFloat("scale")
                                      : 1.0 / std::sqrt(double(q.dim)));
  a.softcap = std::max(0.f, float(params.getFloat("softcap", 0.0)));
}

} // namespace

std::vector<DeviceLaunch> shardflow::runtime::cuda::planAttention(
    std::string_view kernel, const std::vector<Tensor> &ins, const std::vector<Tensor> &outs,
    const Params &params, AttentionPath path) {
  if (ins.size() < 3 || ins.size() > 4 || outs.empty() || outs.size() > 2)
    fail(kernel, "expects 3 or 4 inputs and 1 or 2 outputs (the result, the log-sum-exp)");
  const Tensor &qt = ins[0], &kt = ins[1], &vt = ins[2], &yt = outs[0];
  const Tensor *mask = ins.size() > 3 ? &ins[3] : nullptr;
  const Tensor *lse = outs.size() > 1 ? &outs[1] : nullptr;
  if (!isFloatType(qt.dtype))
    fail(kernel, std::string("unsupported element type ") + dtypeName(qt.dtype) +
                     " of the query (f32, f16 and bf16 run on the GPU)");
  if (kt.dtype != qt.dtype || vt.dtype != qt.dtype || yt.dtype != qt.dtype)
    fail(kernel, "query, key, value and result must share one element type");
  int64_t qHeads = params.getInt("q_num_heads", 0);
  int64_t kvHeads = params.getInt("kv_num_heads", 0);
  // packed_qkv: query, key and value are consecutive column blocks of one
  // [B, S, W] buffer (a fused projection's result, read in place).
  std::vector<int64_t> qShape = qt.shape, kShape = kt.shape, vShape = vt.shape;
  const char *qData = static_cast<const char *>(qt.data),
             *kData = static_cast<const char *>(kt.data),
             *vData = static_cast<const char *>(vt.data);
  int64_t packedWidth = 0;
  if (params.has("packed_qkv")) {
    std::vector<int64_t> widths = params.getInts("packed_qkv");
    if (widths.size() != 3 || qt.rank() != 3 || qt.data != kt.data || qt.data != vt.data ||
        qt.shape != kt.shape || qt.shape != vt.shape)
      fail(kernel, "packed_qkv needs three widths and one [B, S, W] buffer as query, key and "
                   "value");
    for (int64_t w : widths)
      if (w <= 0)
        fail(kernel, "packed_qkv widths must be positive");
    packedWidth = qt.shape[2];
    if (widths[0] + widths[1] + widths[2] != packedWidth)
      fail(kernel, "packed_qkv widths " + std::to_string(widths[0]) + ", " +
                       std::to_string(widths[1]) + ", " + std::to_string(widths[2]) +
                       " do not add up to the buffer's " + std::to_string(packedWidth));
    qShape = {qt.shape[0], qt.shape[1], widths[0]};
    kShape = {qt.shape[0], qt.shape[1], widths[1]};
    vShape = {qt.shape[0], qt.shape[1], widths[2]};
    size_t e = dtypeSize(qt.dtype);
    kData = qData + size_t(widths[0]) * e;
    vData = kData + size_t(widths[1]) * e;
  }
  AttentionLayout layout;
  if (std::string problem =
          attentionLayout(qShape, kShape, vShape, yt.shape, qHeads, kvHeads, layout);
      !problem.empty())
    fail(kernel, problem);
  if (packedWidth) // rows of the pieces are W apart
    for (Heads *h : {&layout.q, &layout.k, &layout.v}) {
      h->ss = packedWidth;
      h->sb = h->seq * packedWidth;
    }
  const Heads &q = layout.q, &k = layout.k, &v = layout.v, &y = layout.y;
  if (yt.numel() == 0)
    return {};
  const int64_t B = q.batch, Hq = q.heads, Sq = q.seq, Skv = k.seq, D = q.dim, Dv = v.dim;
  if (D > 256 || Dv > 256)
    fail(kernel, "head size " + std::to_string(std::max(D, Dv)) +
                     " exceeds the CUDA kernel's 256");
  for (int64_t n : {B, Hq, Sq, Skv})
    if (!fitsInt32(n))
      fail(kernel, "a dimension of " + std::to_string(n) + " exceeds 32 bits");
  // Sequence offsets are computed in 32 bits inside a (batch, head).
  if (!fitsInt32(Sq * q.ss) || !fitsInt32(Skv * k.ss) || !fitsInt32(Skv * v.ss) ||
      !fitsInt32(Sq * y.ss))
    fail(kernel, "sequence too long for 32-bit offsets within one head");

  if (lse && (lse->dtype != DType::F32 || lse->shape != std::vector<int64_t>{B, Hq, Sq}))
    fail(kernel, "the log-sum-exp output must be f32 [B, Hq, Sq] = " + shapeText({B, Hq, Sq}) +
                     ", got " + dtypeName(lse->dtype) + " " + shapeText(lse->shape));

  AttentionArgs a{};
  a.q = qData;
  a.k = kData;
  a.v = vData;
  a.y = yt.data;
  a.lse = lse ? static_cast<float *>(lse->data) : nullptr;
  setAttentionShape(a, layout, params);
  a.yStride[0] = y.sb, a.yStride[1] = y.sh, a.yStride[2] = y.ss;

  // The mask broadcasts (right-aligned) to [B, Hq, Sq, Skv].
  a.maskKind = maskLayout(kernel, mask, qt.dtype, {B, Hq, Sq, Skv}, a.maskStride);
  if (mask) {
    // Like the sequence offsets: a (batch, head)'s mask is indexed in 32
    // bits (AttentionMma.cu).
    if (!fitsInt32((Sq - 1) * a.maskStride[2] + (Skv - 1) * a.maskStride[3] + 1))
      fail(kernel, "mask too large for 32-bit offsets within one head (" +
                       std::to_string(Sq) + " x " + std::to_string(Skv) + " per head)");
    a.mask = mask->data;
  }

  // The tensor-core kernel moves rows in 16-byte pieces and stores pairs
  // of elements: it needs those alignments (row strides are multiples of
  // D, hence of 8 elements, or of a packed buffer's width W).
  bool mmaFits = (qt.dtype == DType::F16 || qt.dtype == DType::BF16) && D == Dv &&
                 (D == 64 || D == 128) && aligned(qData, 16) && aligned(kData, 16) &&
                 aligned(vData, 16) && aligned(yt.data, 4) && packedWidth % 8 == 0;
  if ((path == AttentionPath::Mma || path == AttentionPath::Mma2) && !mmaFits)
    fail(kernel, "the tensor-core kernel needs f16/bf16 and D = Dv in {64, 128} and 16-byte aligned operands, got " +
                     std::string(dtypeName(qt.dtype)) + " D=" + std::to_string(D) +
                     " Dv=" + std::to_string(Dv));
  if (path == AttentionPath::Mma2 && D != 64)
    fail(kernel, "the two-tile tensor-core kernel takes D = 64, got " + std::to_string(D));
  bool mma = mmaFits && path != AttentionPath::Simt;
  int64_t rowTiles = path == AttentionPath::Mma2 ? 2 : 1;
  DeviceLaunch l;
  int64_t rows = mma ? kMmaRows * rowTiles : kAttnRows;
  int64_t qBlocks = (Sq + rows - 1) / rows;
  int64_t blocks = qBlocks * B * Hq;
  if (!fitsInt32(blocks))
    fail(kernel, "too many query blocks (" + std::to_string(blocks) + ")");
  a.qBlocks = int32_t(qBlocks);
  if (mma) {
    // No mask, no softcap, a positive scale: the kernel without the
    // general score rule (AttentionMma.cu).
    bool plain = a.maskKind == kMaskNone && a.softcap == 0.f && a.scale > 0.f;
    l.function = std::string(rowTiles == 2 ? "sf_attention_mma2_" : "sf_attention_mma_") +
                 typeSuffix(qt.dtype) + "_d" + std::to_string(D) + (plain ? "_plain" : "");
    l.block[0] = kMmaThreads;
    l.sharedBytes = unsigned(mmaSharedBytes(D, rowTiles));
  } else {
    int dvTile = Dv <= 64 ? 64 : Dv <= 128 ? 128 : 256;
    l.function = std::string("sf_attention_simt_") + typeSuffix(qt.dtype) + "_dv" +
                 std::to_string(dvTile);
    l.block[0] = kAttnThreads;
    // Q and the K/V tile in f32 with padded rows, and the tile's P.
    int64_t pitch = D + 1;
    l.sharedBytes = unsigned(4 * (kAttnRows * pitch + kAttnKeys * std::max(pitch, Dv) +
                                  kAttnRows * (kAttnKeys + 4)));
  }
  l.block[1] = l.block[2] = 1;
  l.grid[0] = unsigned(blocks);
  l.grid[1] = l.grid[2] = 1;
  l.argument = bytesOf(a);
  return {l};
}

/// attention_grad: the cotangents of query, key and value (outputs 0-2)
/// of an attention with these inputs (query, key, value, the result's
/// cotangent, the forward's saved log-sum-exp, an optional mask) and
/// parameters; output 3 is the f32 workspace of B x Hq x Sq
/// floats cuda-attention-grad-workspace adds. Two launches, one warp per
/// row: the query rows' dQ (writing each row's rowsum(P * dP) to the
/// workspace), then the key rows' dK and dV.
static std::vector<DeviceLaunch> planAttentionGrad(std::string_view kernel,
                                                   const std::vector<Tensor> &ins,
                                                   const std::vector<Tensor> &outs,
                                                   const Params &params) {
  if (ins.size() < 5 || ins.size() > 6 || outs.size() != 4)
    fail(kernel, "expects query, key, value, the result's cotangent, the forward's "
                 "log-sum-exp and an optional mask, and writes the three cotangents and a "
                 "workspace (cuda-attention-grad-workspace)");
  const Tensor &qt = ins[0], &kt = ins[1], &vt = ins[2], &dyt = ins[3], &lset = ins[4];
  const Tensor *mask = ins.size() > 5 ? &ins[5] : nullptr;
  if (!isFloatType(qt.dtype))
    fail(kernel, std::string("unsupported element type ") + dtypeName(qt.dtype) +
                     " of the query (f32, f16 and bf16 run on the GPU)");
  for (const Tensor *t : {&kt, &vt, &dyt, &outs[0], &outs[1], &outs[2]})
    if (t->dtype != qt.dtype)
      fail(kernel, "query, key, value, the cotangents and the gradients must share one "
                   "element type");
  if (outs[0].shape != qt.shape || outs[1].shape != kt.shape || outs[2].shape != vt.shape)
    fail(kernel, "the gradients must have the shapes of query, key and value");
  AttentionLayout layout;
  if (std::string problem = attentionLayout(qt.shape, kt.shape, vt.shape, dyt.shape,
                                            params.getInt("q_num_heads", 0),
                                            params.getInt("kv_num_heads", 0), layout);
      !problem.empty())
    fail(kernel, problem);
  const AttentionHeads &q = layout.q, &k = layout.k, &v = layout.v, &y = layout.y;
  const int64_t B = q.batch, Hq = q.heads, Sq = q.seq, Skv = k.seq, D = q.dim, Dv = v.dim;
  if (D > 32 * kAttnGradLanes || Dv > 32 * kAttnGradLanes)
    fail(kernel, "head size " + std::to_string(std::max(D, Dv)) + " exceeds the CUDA kernel's " +
                     std::to_string(32 * kAttnGradLanes));
  if (lset.dtype != DType::F32 || lset.shape != std::vector<int64_t>{B, Hq, Sq})
    fail(kernel, "the log-sum-exp must be f32 [B, Hq, Sq] = " + shapeText({B, Hq, Sq}) +
                     ", got " + dtypeName(lset.dtype) + " " + shapeText(lset.shape));
  const Tensor &work = outs[3];
  if (work.dtype != DType::F32 || work.numel() != B * Hq * Sq)
    fail(kernel, "the workspace must be " + std::to_string(B * Hq * Sq) + " f32 values");
  for (int64_t n : {B * Hq * Sq, B * k.heads * Skv})
    if (!fitsInt32(n))
      fail(kernel, "too many rows (" + std::to_string(n) + ")");
  AttentionGradArgs a{};
  a.q = qt.data, a.k = kt.data, a.v = vt.data, a.dy = dyt.data;
  a.gradQ = outs[0].data, a.gradK = outs[1].data, a.gradV = outs[2].data;
  a.lse = static_cast<const float *>(lset.data);
  a.dsum = static_cast<float *>(work.data);
  setAttentionShape(a, layout, params);
  a.dyStride[0] = y.sb, a.dyStride[1] = y.sh, a.dyStride[2] = y.ss;
  a.maskKind = maskLayout(kernel, mask, qt.dtype, {B, Hq, Sq, Skv}, a.maskStride);
  a.mask = mask ? mask->data : nullptr;
  std::vector<DeviceLaunch> launches;
  for (bool keys : {false, true}) {
    if ((keys ? Skv : Sq) == 0)
      continue;
    a.rows = int32_t(keys ? B * k.heads * Skv : B * Hq * Sq);
    DeviceLaunch l;
    l.function = std::string(keys ? "sf_attention_grad_dkv_" : "sf_attention_grad_dq_") +
                 typeSuffix(qt.dtype);
    l.block[0] = 32 * kAttnGradWarps;
    l.grid[0] = unsigned((a.rows + kAttnGradWarps - 1) / kAttnGradWarps);
    l.argument = bytesOf(a);
    launches.push_back(std::move(l));
  }
  return launches;
}

static const char *const kDeviceKernels[] = {"attention", "attention_grad", "transpose",
                                             "slice",     "concat",         "split",
                                             "expand",    "gather",         "pad",
                                             "local_slice"};

bool shardflow::runtime::cuda::hasDeviceKernel(std::string_view kernel) {
  for (const char *n : kDeviceKernels)
    if (kernel == n)
      return true;
  return false;
}

std::vector<std::string_view> shardflow::runtime::cuda::deviceKernelNames() {
  return {std::begin(kDeviceKernels), std::end(kDeviceKernels)};
}

std::vector<DeviceLaunch>
shardflow::runtime::cuda::planDeviceKernel(std::string_view kernel, const std::vector<Tensor> &ins,
                                           const std::vector<Tensor> &outs, const Params &params,
                                           int rank, AttentionPath attention) {
  if (kernel == "attention")
    return planAttention(kernel, ins, outs, params, attention);
  if (kernel == "attention_grad")
    return planAttentionGrad(kernel, ins, outs, params);
  if (kernel == "transpose")
    return planTranspose(kernel, ins, outs, params);
  if (kernel == "slice")
    return planSlice(kernel, ins, outs, params);
  if (kernel == "expand")
    return planExpand(kernel, ins, outs);
  if (kernel == "concat") {
    expectArity(kernel, ins, outs, 1, 1);
    return planPieces(kernel, outs[0], ins, params.getInt("axis"), /*intoWhole=*/true);
  }
  if (kernel == "split") {
    expectArity(kernel, ins, outs, 1, 1);
    return planPieces(kernel, ins[0], outs, params.getInt("axis"), /*intoWhole=*/false);
  }
  if (kernel == "gather")
    return planGather(kernel, ins, outs, params, rank);
  if (kernel == "pad")
    return planPad(kernel, ins, outs, params);
  if (kernel == "local_slice")
    return planLocalSlice(kernel, ins, outs, params, rank);
  fail(kernel, "no CUDA kernel");
}
