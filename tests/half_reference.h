// Independent conversions between float and the 16-bit formats, written from
// the formats' definitions (not from tokpos's code), for the tests and fuzz
// targets that check tokpos's bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tokpos::testing {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bfloat16: the top half of the f32 pattern, rounded to nearest even.
inline uint16_t to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float from_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

// IEEE binary16, rounded to nearest even, with subnormals and overflow to infinity.
inline uint16_t to_f16(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a < 0x38800000u) {  // below 2^-14: a multiple of 2^-24, nearest even (exact in double)
    const double scaled = static_cast<double>(float_of(a)) * 16777216.0;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  const uint32_t e = (a >> 23) - 127 + 15, m = a & 0x7fffffu;
  uint32_t h = (e << 10) | (m >> 13);
  const uint32_t rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}
inline float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e - 15 + 127) << 23) | (m << 13));
}

}  // namespace tokpos::testing
