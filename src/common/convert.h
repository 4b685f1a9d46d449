// Private: conversions between float and the 16-bit formats, written so that
// loops over them vectorise (no branches, no libm). Kernels and readers share them.
#pragma once

#include <bit>
#include <cstdint>

namespace tokpos::fp {

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
// The bit formulas below are templates so that the same code serves one
// value (U = uint32_t, F = float) and a GCC vector of them (the streaming
// forward), which is what makes both give the same bits.

// binary16 bits (in the low half of U) -> float. Shift exponent and mantissa
// into float position: that value is x * 2^-112 for normals and subnormals
// alike, so one multiplication finishes it; Inf and NaN keep their payload.
template <typename U, typename F>
inline F f16_bits_to_f32(U h) {
  const U sign = (h & 0x8000u) << 16;
  const U em = h & 0x7fffu;
  const F magnitude = std::bit_cast<F>(U(em << 13)) * 0x1p112f;
  const U inf_nan = em >= 0x7c00u ? U(0x7f800000u | (em << 13)) : U{};
  return std::bit_cast<F>(U(sign | std::bit_cast<U>(magnitude) | inf_nan));
}

// float -> bfloat16 bits (in the low half of U), round to nearest even; NaN
// stays NaN (quiet).
template <typename U, typename F>
inline U f32_to_bf16_bits(F f) {
  const U u = std::bit_cast<U>(f);
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? U((u >> 16) | 0x40u) : rounded;
}

// float -> binary16 bits (in the low half of U), round to nearest even;
// overflow gives Inf, NaN gives a quiet NaN (0x7e00 with the sign).
// Subnormal results come from one float addition that aligns the 10 mantissa
// bits at the bottom (round to nearest even by the FPU); normal ones from a
// rebias with the rounding bias added before the shift.
template <typename U, typename F>
inline U f32_to_f16_bits(F f) {
  const U u = std::bit_cast<U>(f);
  const U sign = (u >> 16) & 0x8000u;
  const U a = u & 0x7fffffffu;
  constexpr uint32_t kMagicBits = ((127 - 15) + (23 - 10) + 1) << 23;  // 0.5f: aligns subnormals
  const U sub = U(std::bit_cast<U>(F(std::bit_cast<F>(a) + std::bit_cast<float>(kMagicBits))) - kMagicBits);
  const U norm = U((a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13);
  const U inf_nan = a > 0x7f800000u ? U(U{} + 0x7e00u) : U(U{} + 0x7c00u);
  const U finite = a < (113u << 23) ? sub : norm;
  return U((a >= (143u << 23) ? inf_nan : finite) | sign);
}

inline float to_f32(f16_t x) {
  return f16_bits_to_f32<uint32_t, float>(x.bits);
}

inline bf16_t to_bf16(float f) {
  return {static_cast<uint16_t>(f32_to_bf16_bits<uint32_t, float>(f))};
}
inline f16_t to_f16(float f) {
  return {static_cast<uint16_t>(f32_to_f16_bits<uint32_t, float>(f))};
}

}  // namespace tokpos::fp
