//===- Checksum.h - CRC-32C of weight bytes --------------------*- C++ -*-===//
//
// The compiler records a CRC-32C (Castagnoli) of every weight slice a rank
// loads; shard-run recomputes it after mapping and refuses bytes that
// differ (a modified or swapped weight file). The SSE4.2 instruction is used
// when the CPU has it (about 10 GB/s a core), a table otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_CHECKSUM_H
#define SHARDFLOW_RUNTIME_CHECKSUM_H

#include <cstddef>
#include <cstdint>

namespace shardflow::runtime {

/// CRC-32C of `size` bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void *data, size_t size, uint32_t crc = 0);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_CHECKSUM_H
