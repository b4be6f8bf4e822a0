// IEEE binary16 <-> float32, bit for bit what src/internal/fp16.ts computes (toHalf rounds
// to nearest even, overflow to ±Inf, NaN kept quiet; widening is exact).
#pragma once

#include <cstdint>
#include <cstring>

namespace rdmajs_ps {

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1f;
  uint32_t m = h & 0x3ff;
  uint32_t bits;
  if (e == 0) {
    if (m == 0) {
      bits = sign;
    } else {  // subnormal half: normalise
      int exp = -1;
      do {
        m <<= 1;
        exp++;
      } while ((m & 0x400) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - exp) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (e == 0x1f) {
    // JS builds NaN for any payload: V8's canonical quiet NaN.
    bits = m ? 0x7fc00000u : (sign | 0x7f800000u);
  } else {
    bits = sign | ((e - 15 + 127) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToHalf(float v) {
  uint32_t x;
  std::memcpy(&x, &v, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t exp = (x >> 23) & 0xff;
  uint32_t mant = x & 0x7fffff;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - e;
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = mant >> 13;
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) {
    r++;
    if (r == 0x400) {
      r = 0;
      e++;
      if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00);
    }
  }
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(e) << 10) | r);
}

}  // namespace rdmajs_ps
