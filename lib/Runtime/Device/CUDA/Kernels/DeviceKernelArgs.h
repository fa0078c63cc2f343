//===- DeviceKernelArgs.h - argument structs of the CUDA kernels -*- C++ -*-===//
//
// The single by-value argument of every device kernel, shared by the .cu
// files (nvcc) and the host planner (the C++ compiler): both compile this
// one definition, so the bytes the device-kernel planner writes are the struct the kernel
// reads. Only fixed-size fields, 8-byte members first, no padding holes the
// two compilers could lay out differently (static_asserts on the host side
// pin the sizes).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CUDA_DEVICEKERNELARGS_H
#define SHARDFLOW_RUNTIME_KERNELS_CUDA_DEVICEKERNELARGS_H

#include <cstdint>

namespace shardflow::runtime::cuda {

/// Dimensions a strided copy or pad handles after the device-kernel planner merged
/// contiguous ones; more is an error naming the kernel.
constexpr int kMaxCopyDims = 8;

/// out[base + sum idx_d * outStride_d] = in[base + sum idx_d * inStride_d]
/// for every index of `shape` (row-major order of the copy). Offsets and
/// strides count elements of `elemSize` bytes (the device-kernel planner may widen
/// elements to 16 bytes when the innermost run allows it).
struct StridedCopyArgs {
  void *out;
  const void *in;
  int64_t total; // number of elements copied: the product of shape
  int64_t shape[kMaxCopyDims];
  int64_t outStride[kMaxCopyDims];
  int64_t inStride[kMaxCopyDims];
  int32_t rank; // 0: one element
  int32_t pad0;
};

/// Pad: out (contiguous, outShape) from in (contiguous, inShape); output
/// coordinate o of dimension d reads input coordinate o - before[d] mapped
/// by `mode` (0 constant, 1 edge, 2 reflect, 3 wrap); constant positions
/// get the `fill` bytes (the value in the element type, little-endian).
struct PadArgs {
  void *out;
  const void *in;
  int64_t total;
  int64_t outShape[kMaxCopyDims];
  int64_t inShape[kMaxCopyDims];
  int64_t inStride[kMaxCopyDims];
  int64_t before[kMaxCopyDims];
  uint64_t fill;
  int32_t rank;
  int32_t mode;
};

/// Gather: out[o, c, j] = in[o, idx[c], j] with o < outer, c < count,
/// j < inner (elements of elemSize), idx normalized from [-axisSize,
/// axisSize); an out-of-range index yields zeros and, when `status` is
/// set, sets status[0] to 1 and status[1] to the index (the runtime fails
/// the run after it; a kernel cannot stop the program).
struct GatherArgs {
  void *out;
  const void *in;
  const void *indices;
  int64_t outer;
  int64_t count;
  int64_t inner;
  int64_t axisSize;       // rows this rank holds
  int64_t globalAxisSize; // rows the indices address (axisSize unless the axis is split)
  int64_t axisStart;      // the first of this rank's rows among them
  int32_t index64;        // indices are i64 (else i32)
  int32_t pad0;
  int64_t *status; // two int64, or null
};

/// Attention over [B, H, S, D] views: element (b, h, s, d) of an operand is
/// at b * stride[0] + h * stride[1] + s * stride[2] + d, so 3-D [B, S, H*D]
/// and 4-D tensors are the same kernel. The mask broadcasts to [B, Hq, Sq,
/// Skv] through maskStride (0 on broadcast dimensions).
struct AttentionArgs {
  const void *q;
  const void *k;
  const void *v;
  void *y;
  const void *mask; // null: none
  float *lse;       // each query row's log-sum-exp, [B, Hq, Sq] (-inf: none visible); null: none
  int64_t qStride[3];
  int64_t kStride[3];
  int64_t vStride[3];
  int64_t yStride[3];
  int64_t maskStride[4];
  int32_t batch, qHeads, group; // group: query heads per key/value head
  int32_t sq, skv, d, dv;
  int32_t qBlocks;  // ceil(sq / query rows per block)
  int32_t maskKind; // 0 none, 1 bool (1 byte, keep where nonzero), 2 additive (Q's type)
  int32_t causal;   // key j is visible to query i only when j <= i
  float scale;
  float softcap; // 0: none
};

/// Attention's backward (attention_grad), with the forward's operand
/// layout: element (b, h, s, d) of an operand at b * stride[0] + h *
/// stride[1] + s * stride[2] + d; gradQ, gradK and gradV have q's, k's
/// and v's strides. `lse` is the forward's saved log-sum-exp, one float per
/// (b, query head, query row); `dsum` the workspace, as many floats: the
/// first kernel writes each row's rowsum(P * dP), the second reads it.
struct AttentionGradArgs {
  const void *q;
  const void *k;
  const void *v;
  const void *dy;
  const void *mask; // null: none
  void *gradQ;
  void *gradK;
  void *gradV;
  const float *lse;
  float *dsum;
  int64_t qStride[3];
  int64_t kStride[3];
  int64_t vStride[3];
  int64_t dyStride[3];
  int64_t maskStride[4];
  int32_t batch, qHeads, group; // group: query heads per key/value head
  int32_t sq, skv, d, dv;
  int32_t maskKind; // as AttentionArgs::maskKind
  int32_t causal;
  float scale;
  float softcap; // 0: none
  int32_t rows; // the kernel's rows: B * Hq * Sq (dq) or B * Hkv * Skv (dk, dv)
};

/// The backward kernels' geometry: one warp per row (a query row for dq,
/// a key row for dk and dv), each lane holding head-size elements lane,
/// lane + 32, ... (up to 8: head sizes up to 256).
constexpr int kAttnGradWarps = 4;
constexpr int kAttnGradLanes = 8;

/// Mask kinds of AttentionArgs::maskKind.
enum : int32_t { kMaskNone = 0, kMaskBool = 1, kMaskAdd = 2 };
/// Pad modes of PadArgs::mode.
enum : int32_t { kPadConstant = 0, kPadEdge = 1, kPadReflect = 2, kPadWrap = 3 };

/// The SIMT attention kernel's tile: query rows per block, keys per tile,
/// threads per block (16 x 16 threads, 4 x 4 scores each).
constexpr int kAttnRows = 64;
constexpr int kAttnKeys = 64;
constexpr int kAttnThreads = 256;

/// The tensor-core attention kernel's tile (f16/bf16, D = Dv in {64, 128}):
/// four warps of 16 query rows each, 64 keys per tile.
constexpr int kMmaRows = 64;
constexpr int kMmaKeys = 64;
constexpr int kMmaThreads = 128;

} // namespace shardflow::runtime::cuda

#endif // SHARDFLOW_RUNTIME_KERNELS_CUDA_DEVICEKERNELARGS_H
