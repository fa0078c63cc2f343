//===- CopyPlan.h - strided copies as lists of 2-D copies -------*- C++ -*-===//
//
// Moving a block of a tensor, or the pieces a collective splits a
// dimension into, is a list of 2-D copies (rows of bytes at a pitch): one
// cuMemcpy2D each on the CUDA device, rows of memcpy on the CPU. The
// program runner plans the copies around collectives with these (packing
// the pieces of a dimension that is not the outermost, unpacking what was
// gathered), and both devices run them on the instruction's lane.
//
// Plain C++, no device API.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CORE_COPYPLAN_H
#define SHARDFLOW_RUNTIME_CORE_COPYPLAN_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardflow::runtime {

/// One cuMemcpy2D (offsets in bytes from the source and destination bases):
/// `height` rows of `width` bytes, rows `srcPitch` / `dstPitch` apart.
struct Copy2D {
  /// Read from the destination buffer itself (bytes an earlier copy of the
  /// same plan wrote) instead of the source: the plans are run in order.
  bool fromDestination = false;
  size_t srcOffset = 0, dstOffset = 0;
  size_t srcPitch = 0, dstPitch = 0;
  size_t width = 0, height = 0;
};

/// Packs a tensor of `shape` into `parts` contiguous pieces along `dim`
/// (piece p holds slab p of every outer row), one copy per piece: the
/// layout collectives need when they split a dimension that is not the
/// outermost.
std::vector<Copy2D> planPackPieces(const std::vector<int64_t> &shape, int64_t dim, int parts,
                                   size_t elem);
/// The inverse: `parts` contiguous pieces, each of shape `piece`,
/// concatenated along `dim`.
std::vector<Copy2D> planUnpackPieces(const std::vector<int64_t> &piece, int64_t dim, int parts,
                                     size_t elem);

/// The block of `in` of shape `out` starting at `start`, copied into a
/// contiguous `out`: the innermost dimensions it covers whole form one run,
/// the next dimension the rows of each copy.
std::vector<Copy2D> planBlockCopy(const std::vector<int64_t> &in, const std::vector<int64_t> &out,
                                  const std::vector<int64_t> &start, size_t elem);

/// Appends `c` unless it copies nothing; a single row gets pitches equal
/// to its width (valid for any copy engine).
void appendCopy(std::vector<Copy2D> &copies, Copy2D c);

/// Runs `copies` with memcpy, in order (the host's way; offsets from `src`
/// and `dst`).
void runCopiesOnHost(const std::vector<Copy2D> &copies, const void *src, void *dst);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_CORE_COPYPLAN_H
