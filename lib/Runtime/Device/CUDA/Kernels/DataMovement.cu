//===- DataMovement.cu - CUDA kernels that move elements -------------------===//
//
// The device side of transpose, slice, expand, concat, split, local_slice
// (one strided copy each: the planner turns each op into shapes and
// strides), pad and gather. Elements are moved by their size only (1, 2,
// 4, 8 or 16 bytes: the planner widens contiguous runs to 16 bytes when
// alignment allows), so every element type shares these kernels.
//
// Each thread copies elements of a grid-stride loop; the index arithmetic
// runs in signed 32 bits (slices may step backwards) when the planner chose the `_i32` variant (every offset
// fits), which roughly halves the cost of the divisions.
//
//===----------------------------------------------------------------------===//

#include "DeviceKernelArgs.h"

#ifdef SHARDFLOW_CUDA_HOST_EMULATION
#include "HostEmulation.h"
#endif

#include <cstdint>

using namespace shardflow::runtime::cuda;

namespace {

/// A 16-byte element that the compiler moves with one vector load/store.
struct alignas(16) Vec16 {
  uint4 v;
};

template <int Size> struct ElemOf;
template <> struct ElemOf<1> { using type = uint8_t; };
template <> struct ElemOf<2> { using type = uint16_t; };
template <> struct ElemOf<4> { using type = uint32_t; };
template <> struct ElemOf<8> { using type = uint64_t; };
template <> struct ElemOf<16> { using type = Vec16; };

template <typename E, typename I>
__device__ __forceinline__ void stridedCopy(const StridedCopyArgs &a) {
  E *out = static_cast<E *>(a.out);
  const E *in = static_cast<const E *>(a.in);
  const I total = I(a.total);
  const I stride = I(blockDim.x) * I(gridDim.x);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total; i += stride) {
    // Peel coordinates from the innermost dimension outwards.
    I rest = i, src = 0, dst = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      I n = I(a.shape[d]);
      I c = rest % n;
      rest /= n;
      src += c * I(a.inStride[d]);
      dst += c * I(a.outStride[d]);
    }
    out[dst] = in[src];
  }
}

template <typename E, typename I> __device__ __forceinline__ void pad(const PadArgs &a) {
  E *out = static_cast<E *>(a.out);
  const E *in = static_cast<const E *>(a.in);
  E fill;
  // The fill value's low bytes are the element (little-endian).
  const uint8_t *fb = reinterpret_cast<const uint8_t *>(&a.fill);
  uint8_t *eb = reinterpret_cast<uint8_t *>(&fill);
  for (int b = 0; b < int(sizeof(E)); ++b)
    eb[b] = fb[b];
  const I total = I(a.total);
  const I stride = I(blockDim.x) * I(gridDim.x);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total; i += stride) {
    I rest = i, src = 0;
    bool constant = false;
    for (int d = a.rank - 1; d >= 0; --d) {
      I n = I(a.outShape[d]);
      int64_t c = int64_t(rest % n) - a.before[d];
      rest /= n;
      int64_t m = a.inShape[d];
      if (c < 0 || c >= m) {
        if (a.mode == kPadConstant || m == 0) {
          constant = true;
          break;
        }
        if (a.mode == kPadEdge) {
          c = c < 0 ? 0 : m - 1;
        } else if (a.mode == kPadWrap) {
          c = ((c % m) + m) % m;
        } else if (m == 1) { // reflect of a single element
          c = 0;
        } else { // reflect without repeating the edge element
          int64_t period = 2 * (m - 1);
          int64_t j = ((c % period) + period) % period;
          c = j < m ? j : period - j;
        }
      }
      src += I(c) * I(a.inStride[d]);
    }
    out[i] = constant ? fill : in[src];
  }
}

template <typename E, typename I> __device__ __forceinline__ void gather(const GatherArgs &a) {
  E *out = static_cast<E *>(a.out);
  const E *in = static_cast<const E *>(a.in);
  const I inner = I(a.inner), count = I(a.count), axis = I(a.axisSize);
  const I total = I(a.outer) * count * inner;
  const I stride = I(blockDim.x) * I(gridDim.x);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total; i += stride) {
    I j = i % inner, oc = i / inner;
    I c = oc % count, o = oc / count;
    int64_t idx = a.index64 ? static_cast<const int64_t *>(a.indices)[c]
                            : int64_t(static_cast<const int32_t *>(a.indices)[c]);
    int64_t given = idx;
    if (idx < 0)
      idx += a.globalAxisSize;
    if (idx < 0 || idx >= a.globalAxisSize) {
      out[i] = E{};
      if (a.status) {
        a.status[1] = given;
        a.status[0] = 1;
      }
      continue;
    }
    // A row another rank holds (a split axis) reads as zero.
    idx -= a.axisStart;
    if (idx < 0 || idx >= a.axisSize) {
      out[i] = E{};
      continue;
    }
    out[i] = in[(o * axis + I(idx)) * inner + j];
  }
}

} // namespace

// One entry point per element size and index width: the planner picks the
// name, so each is an unmangled extern "C" symbol.
#define SF_DATA_MOVEMENT(SIZE)                                                 \
  extern "C" __global__ void sf_strided_copy_e##SIZE##_i32(const StridedCopyArgs a) { \
    stridedCopy<ElemOf<SIZE>::type, int32_t>(a);                              \
  }                                                                            \
  extern "C" __global__ void sf_strided_copy_e##SIZE##_i64(const StridedCopyArgs a) { \
    stridedCopy<ElemOf<SIZE>::type, int64_t>(a);                               \
  }                                                                            \
  extern "C" __global__ void sf_pad_e##SIZE##_i32(const PadArgs a) {           \
    pad<ElemOf<SIZE>::type, int32_t>(a);                                      \
  }                                                                            \
  extern "C" __global__ void sf_pad_e##SIZE##_i64(const PadArgs a) {           \
    pad<ElemOf<SIZE>::type, int64_t>(a);                                       \
  }                                                                            \
  extern "C" __global__ void sf_gather_e##SIZE##_i32(const GatherArgs a) {     \
    gather<ElemOf<SIZE>::type, int32_t>(a);                                   \
  }                                                                            \
  extern "C" __global__ void sf_gather_e##SIZE##_i64(const GatherArgs a) {     \
    gather<ElemOf<SIZE>::type, int64_t>(a);                                    \
  }

SF_DATA_MOVEMENT(1)
SF_DATA_MOVEMENT(2)
SF_DATA_MOVEMENT(4)
SF_DATA_MOVEMENT(8)
SF_DATA_MOVEMENT(16)
