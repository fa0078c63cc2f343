//===- CopyPlan.cpp - strided copies as lists of 2-D copies ----------------===//

#include "shardflow/Runtime/Core/CopyPlan.h"
#include "shardflow/Runtime/Format/Layout.h"

#include <cstring>

using namespace shardflow::runtime;

namespace {
int64_t product(const std::vector<int64_t> &v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i)
    p *= v[i];
  return p;
}

/// Rows (as size_t) and row bytes of `shape` split at `dim`.
std::pair<size_t, size_t> rowsAt(const std::vector<int64_t> &shape, int64_t dim, size_t elem) {
  auto [outer, inner] = splitAt(shape, dim, elem);
  return {size_t(outer), inner};
}

} // namespace

void shardflow::runtime::appendCopy(std::vector<Copy2D> &copies, Copy2D c) {
  if (c.width == 0 || c.height == 0)
    return;
  if (c.height == 1) // pitches do not matter; keep them valid (>= width)
    c.srcPitch = c.dstPitch = c.width;
  copies.push_back(c);
}

std::vector<Copy2D> shardflow::runtime::planPackPieces(const std::vector<int64_t> &shape,
                                                       int64_t dim, int parts, size_t elem) {
  auto [outer, inner] = rowsAt(shape, dim, elem);
  size_t piece = inner / size_t(parts);
  std::vector<Copy2D> copies;
  for (size_t p = 0; p < size_t(parts); ++p) {
    Copy2D c;
    c.srcOffset = p * piece;
    c.dstOffset = p * outer * piece;
    c.srcPitch = inner;
    c.dstPitch = piece;
    c.width = piece;
    c.height = outer;
    appendCopy(copies, c);
  }
  return copies;
}

std::vector<Copy2D> shardflow::runtime::planUnpackPieces(const std::vector<int64_t> &piece,
                                                         int64_t dim, int parts, size_t elem) {
  auto [outer, inner] = rowsAt(piece, dim, elem);
  std::vector<Copy2D> copies;
  for (size_t p = 0; p < size_t(parts); ++p) {
    Copy2D c;
    c.srcOffset = p * outer * inner;
    c.dstOffset = p * inner;
    c.srcPitch = inner;
    c.dstPitch = size_t(parts) * inner;
    c.width = inner;
    c.height = outer;
    appendCopy(copies, c);
  }
  return copies;
}

std::vector<Copy2D> shardflow::runtime::planBlockCopy(const std::vector<int64_t> &in,
                                                      const std::vector<int64_t> &out,
                                                      const std::vector<int64_t> &start,
                                                      size_t elem) {
  size_t dims = out.size();
  std::vector<Copy2D> copies;
  if (in.size() != dims || start.size() != dims)
    throw RuntimeError("block copy: the input, the block and its start differ in rank");
  for (size_t d = 0; d < dims; ++d)
    if (start[d] < 0 || start[d] + out[d] > in[d])
      throw RuntimeError("block copy: the block leaves the input in dimension " +
                         std::to_string(d));
  if (product(out, 0, dims) == 0)
    return copies;
  if (dims == 0) {
    appendCopy(copies, Copy2D{false, 0, 0, elem, elem, elem, 1});
    return copies;
  }
  std::vector<int64_t> stride(dims, 1);
  for (size_t d = dims - 1; d > 0; --d)
    stride[d - 1] = stride[d] * in[d];
  // As the CPU device's local_slice: the innermost dimensions the block covers
  // whole, with the one before them, are one contiguous run per index of
  // the outer ones; the dimension before the run gives the copy's rows.
  size_t runDim = dims - 1;
  while (runDim > 0 && out[runDim] == in[runDim])
    --runDim;
  size_t runBytes = size_t(out[runDim] * stride[runDim]) * elem;
  size_t base = 0;
  for (size_t d = 0; d < dims; ++d)
    base += size_t(start[d] * stride[d]) * elem;
  if (runDim == 0) {
    appendCopy(copies, Copy2D{false, base, 0, runBytes, runBytes, runBytes, 1});
    return copies;
  }
  size_t rowDim = runDim - 1;
  size_t rows = size_t(out[rowDim]);
  int64_t blocks = product(out, 0, rowDim);
  std::vector<int64_t> idx(rowDim, 0);
  for (int64_t r = 0; r < blocks; ++r) {
    size_t offset = base;
    for (size_t d = 0; d < rowDim; ++d)
      offset += size_t(idx[d] * stride[d]) * elem;
    appendCopy(copies, Copy2D{false, offset, size_t(r) * rows * runBytes,
                              size_t(stride[rowDim]) * elem, runBytes, runBytes, rows});
    for (size_t d = rowDim; d > 0 && ++idx[d - 1] == out[d - 1];)
      idx[--d] = 0;
  }
  return copies;
}

void shardflow::runtime::runCopiesOnHost(const std::vector<Copy2D> &copies, const void *src,
                                         void *dst) {
  auto *out = static_cast<uint8_t *>(dst);
  auto *in = static_cast<const uint8_t *>(src);
  for (const Copy2D &c : copies) {
    const uint8_t *from = (c.fromDestination ? out : in) + c.srcOffset;
    uint8_t *to = out + c.dstOffset;
    if (c.height == 1 || (c.srcPitch == c.width && c.dstPitch == c.width)) {
      std::memmove(to, from, c.width * c.height);
      continue;
    }
    for (size_t r = 0; r < c.height; ++r)
      std::memmove(to + r * c.dstPitch, from + r * c.srcPitch, c.width);
  }
}
