//===- Checksum.cpp - CRC-32C ----------------------------------------------===//

#include "shardflow/Runtime/Format/Checksum.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define SHARDFLOW_CRC32C_X86 1
#endif

using namespace shardflow::runtime;

namespace {

/// The reflected Castagnoli polynomial.
constexpr uint32_t kPoly = 0x82F63B78u;

std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
    t[i] = c;
  }
  return t;
}

uint32_t crcTable(const uint8_t *p, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = makeTable();
  for (size_t i = 0; i < n; ++i)
    crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#ifdef SHARDFLOW_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crcHardware(const uint8_t *p, size_t n,
                                                       uint32_t crc) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = uint32_t(c);
  for (; n; --n, ++p)
    c32 = _mm_crc32_u8(c32, *p);
  return c32;
}
#endif

} // namespace

uint32_t shardflow::runtime::crc32c(const void *data, size_t size, uint32_t crc) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  crc = ~crc;
#ifdef SHARDFLOW_CRC32C_X86
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware)
    return ~crcHardware(p, size, crc);
#endif
  return ~crcTable(p, size, crc);
}
