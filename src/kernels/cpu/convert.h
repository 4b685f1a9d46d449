// Private: scalar-code conversions between float and the 16-bit formats,
// written so that loops over them vectorise (no branches, no libm).
#pragma once

#include <bit>
#include <cstdint>

namespace tokpos::kernels {

struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

inline float to_f32(float x) {
  return x;
}
inline float to_f32(bf16_t x) {
  return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16);
}
inline float to_f32(f16_t x) {
  // Shift exponent and mantissa into float position: that value is x * 2^-112
  // for normals and subnormals alike, so one multiplication finishes it.
  const uint32_t h = x.bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const float magnitude = std::bit_cast<float>(em << 13) * 0x1p112f;
  const uint32_t inf_nan = em >= 0x7c00u ? 0x7f800000u | (em << 13) : 0u;  // keep Inf and NaN
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude) | inf_nan);
}

// float -> bfloat16, round to nearest even; NaN stays NaN (quiet).
inline bf16_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return {static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded)};
}

}  // namespace tokpos::kernels
