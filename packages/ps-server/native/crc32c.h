// CRC-32C (Castagnoli, reflected 0x82F63B78) of a byte range: the checksum of every push-log
// record and snapshot tensor, bit for bit what src/internal/crc32c.ts computes. With SSE4.2
// (chosen when the addon loads) the CPU's crc32 instruction does 8 bytes per step, three
// independent streams at a time (its latency is 3 cycles, its throughput 1 a cycle) whose
// CRCs are joined by a multiplication in GF(2); elsewhere slicing-by-8 as in JS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define RDMAJS_PS_CRC_SSE42 1
#endif

namespace rdmajs_ps {

struct Crc32cTables {
  uint32_t t[8][256];
  constexpr Crc32cTables() : t{} {
    for (uint32_t n = 0; n < 256; n++) {
      uint32_t c = n;
      for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
      for (int s = 1; s < 8; s++) t[s][n] = (t[s - 1][n] >> 8) ^ t[0][t[s - 1][n] & 0xff];
  }
};
inline constexpr Crc32cTables kCrcTables{};

// Continues a raw (not inverted) CRC state over bytes, portably.
inline uint32_t Crc32cRawPortable(uint32_t c, const uint8_t* p, size_t n) {
  const auto& T = kCrcTables.t;
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo;
    std::memcpy(&lo, p, 4);  // little-endian hosts only (x86-64, aarch64): as the JS
    lo ^= c;
    c = T[7][lo & 0xff] ^ T[6][(lo >> 8) & 0xff] ^ T[5][(lo >> 16) & 0xff] ^ T[4][lo >> 24] ^
        T[3][p[4]] ^ T[2][p[5]] ^ T[1][p[6]] ^ T[0][p[7]];
  }
  for (; n > 0; n--, p++) c = (c >> 8) ^ T[0][(c ^ *p) & 0xff];
  return c;
}

#if defined(RDMAJS_PS_CRC_SSE42)
// x·y mod P over GF(2), bit-reflected (bit 31 is x^0).
inline uint32_t GfMulReflected(uint32_t a, uint32_t b) {
  uint32_t r = 0;
  for (int i = 0; i < 32; i++) {
    if (a & 0x80000000u) r ^= b;
    a <<= 1;
    b = (b & 1) ? (b >> 1) ^ 0x82f63b78u : b >> 1;
  }
  return r;
}

// x^(8·bytes) mod P, reflected: what shifting a raw CRC state past `bytes` zero bytes
// multiplies it by (crc32 of the state over zeros is that product).
inline uint32_t ShiftFactor(size_t bytes) {
  uint32_t result = 0x80000000u;  // x^0
  uint32_t power = 0x00800000u;   // x^8: one byte
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = GfMulReflected(result, power);
    power = GfMulReflected(power, power);
  }
  return result;
}

constexpr size_t kCrcStripe = 4096;  // bytes per stream in one round of three
inline const uint32_t kCrcStripeShift = ShiftFactor(kCrcStripe);

__attribute__((target("sse4.2"))) inline uint32_t Crc32cRawSse42(uint32_t c, const uint8_t* p,
                                                                 size_t n) {
  uint64_t c0 = c;
  // Three streams over consecutive stripes; stream k's CRC is then moved past the later ones.
  while (n >= 3 * kCrcStripe) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* p1 = p + kCrcStripe;
    const uint8_t* p2 = p + 2 * kCrcStripe;
    for (size_t i = 0; i < kCrcStripe; i += 8) {
      uint64_t a, b, d;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p1 + i, 8);
      std::memcpy(&d, p2 + i, 8);
      c0 = _mm_crc32_u64(c0, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, d);
    }
    uint32_t s = GfMulReflected(static_cast<uint32_t>(c0), kCrcStripeShift) ^
                 static_cast<uint32_t>(c1);
    c0 = GfMulReflected(s, kCrcStripeShift) ^ static_cast<uint32_t>(c2);
    p += 3 * kCrcStripe;
    n -= 3 * kCrcStripe;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t a;
    std::memcpy(&a, p, 8);
    c0 = _mm_crc32_u64(c0, a);
  }
  uint32_t c32 = static_cast<uint32_t>(c0);
  for (; n > 0; n--, p++) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

inline bool CpuHasSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
inline const bool kCrcHw = CpuHasSse42();
#endif

// crc32c(bytes, crc): continues `crc` (a previous result, 0 to start) as the JS does.
inline uint32_t Crc32c(const uint8_t* p, size_t n, uint32_t crc) {
  uint32_t c = ~crc;
#if defined(RDMAJS_PS_CRC_SSE42)
  if (kCrcHw) return ~Crc32cRawSse42(c, p, n);
#endif
  return ~Crc32cRawPortable(c, p, n);
}

}  // namespace rdmajs_ps
