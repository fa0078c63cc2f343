//===- FloatConversion.h - f32/f16/bf16 conversion of weights -*- C++ -*-===//
//
// Mixed precision: a weight stored as f32 in the model's file may run as
// f16 or bf16 (`source-dtype` in the artifact). Both devices convert such
// weights once, at load, with these scalar helpers: round to nearest even,
// NaN stays a (quiet) NaN, overflow gives infinity, subnormals are kept.
// Header-only so that tests check the bit patterns directly.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_FLOATCONVERSION_H
#define SHARDFLOW_RUNTIME_FLOATCONVERSION_H

#include "shardflow/Runtime/Format/Kernel.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace shardflow::runtime {

inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// bf16 is the upper half of an f32: widening is exact.
inline float bf16BitsToFloat(uint16_t b) { return bitsToFloat(uint32_t(b) << 16); }

/// f32 to bf16, round to nearest even; a NaN keeps its sign and gets the
/// quiet bit (truncating a signalling NaN's payload could give infinity).
inline uint16_t floatToBf16Bits(float f) {
  uint32_t u = floatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u); // carries into the exponent: inf on overflow
  return uint16_t(u >> 16);
}

/// IEEE half to f32 (exact, subnormals included).
inline float halfBitsToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) // inf or NaN: keep the payload
    return bitsToFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) { // zero or subnormal: mant * 2^-24, exact in f32
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// f32 to IEEE half, round to nearest even; beyond the largest half
/// (65504, with rounding) gives infinity; NaN gives a quiet NaN.
inline uint16_t floatToHalfBits(float f) {
  uint32_t u = floatToBits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u)
    return uint16_t(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  if (u >= 0x477ff000u) // rounds to 65536 or more (or is inf)
    return uint16_t(sign | 0x7c00u);
  if (u < 0x38800000u) { // below 2^-14: a subnormal half (or zero)
    // The value in units of 2^-24, rounded to nearest even: shift the
    // 24-bit significand right by the distance to that unit.
    if (u < 0x33000000u) // below 2^-25: rounds to zero
      return sign;
    uint32_t exp = u >> 23, mant = (u & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp; // from 14 (just below 2^-14) to 24 (2^-25)
    uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    q += (rest > half || (rest == half && (q & 1u))) ? 1u : 0u;
    return uint16_t(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits.
  uint32_t r = u - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

/// Whether convertElements supports `from` -> `to`.
inline bool canConvertElements(DType from, DType to) {
  auto isFloat = [](DType t) {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
  };
  return from == to || (isFloat(from) && isFloat(to));
}

/// Converts `count` elements of type `from` at `src` into type `to` at
/// `dst` (no overlap). Floating types only: f32, f16, bf16 and f64 in any
/// direction, rounded once (f64 to f16/bf16 goes through f32 and may round
/// twice, which only matters for values exactly between two halves).
/// Throws RuntimeError naming `what` for other pairs.
inline void convertElements(const void *src, DType from, void *dst, DType to, size_t count,
                            const std::string &what) {
  if (!canConvertElements(from, to))
    throw RuntimeError(what + ": cannot convert " + dtypeName(from) + " to " +
                       dtypeName(to) + " (only between f32, f16, bf16 and f64)");
  if (from == to) {
    std::memcpy(dst, src, count * dtypeSize(from));
    return;
  }
  const uint8_t *in = static_cast<const uint8_t *>(src);
  uint8_t *out = static_cast<uint8_t *>(dst);
  if (from == DType::F32 && (to == DType::BF16 || to == DType::F16)) {
    // The load-time case (--dtype): one tight loop per target type, which
    // the compiler can vectorize, instead of the general one below.
    auto narrow = [&](auto convert) {
      for (size_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, in + 4 * i, 4);
        uint16_t h = convert(f);
        std::memcpy(out + 2 * i, &h, 2);
      }
    };
    if (to == DType::BF16)
      narrow(floatToBf16Bits);
    else
      narrow(floatToHalfBits);
    return;
  }
  auto load = [&](size_t i) -> double {
    switch (from) {
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      return halfBitsToFloat(h);
    }
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      return bf16BitsToFloat(h);
    }
    case DType::F32: {
      float f;
      std::memcpy(&f, in + 4 * i, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, in + 8 * i, 8);
      return d;
    }
    }
  };
  for (size_t i = 0; i < count; ++i) {
    double v = load(i);
    switch (to) {
    case DType::F16: {
      uint16_t h = floatToHalfBits(float(v));
      std::memcpy(out + 2 * i, &h, 2);
      break;
    }
    case DType::BF16: {
      uint16_t h = floatToBf16Bits(float(v));
      std::memcpy(out + 2 * i, &h, 2);
      break;
    }
    case DType::F32: {
      float f = float(v);
      std::memcpy(out + 4 * i, &f, 4);
      break;
    }
    default:
      std::memcpy(out + 8 * i, &v, 8);
      break;
    }
  }
}

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_FLOATCONVERSION_H
