// Independent quad-precision reference for the sinusoidal layouts, written
// from docs/layouts.md (not from src/tables): frequencies via expq/logq
// (tokpos uses powq), columns decoded here, angles reduced by sinq/cosq.
#pragma once

#include <quadmath.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace tokpos::testing {

using quad = __float128;

struct RefOptions {
  std::string layout = "interleaved";
  double base = 10000.0;
  double min_timescale = 1.0;
  int64_t padding_idx = -1;
};

// The exact value of entry (p, i) of a D-wide table, to about 1e-30.
inline quad exact_entry(const RefOptions& o, int64_t p, int64_t i, int64_t D) {
  const quad lb = logq(static_cast<quad>(o.base));
  int64_t k = 0;
  bool is_sin = true;
  quad omega = 0;
  const int64_t half = D / 2;
  if (o.layout == "interleaved") {
    k = i / 2;
    is_sin = i % 2 == 0;
    omega = expq(-lb * static_cast<quad>(2 * k) / static_cast<quad>(D));
  } else if (o.layout == "halves") {
    const int64_t sins = (D + 1) / 2;
    is_sin = i < sins;
    k = is_sin ? i : i - sins;
    omega = expq(-lb * static_cast<quad>(2 * k) / static_cast<quad>(D));
  } else {
    if (i >= 2 * half) return 0;  // the zero column of odd D
    if (o.layout == "fairseq" && p == o.padding_idx) return 0;
    const bool first_is_sin = o.layout != "ggml";
    is_sin = (i < half) == first_is_sin;
    k = i < half ? i : i - half;
    if (o.layout == "fairseq") {
      omega = k == 0 ? quad(1) : expq(-lb * static_cast<quad>(k) / static_cast<quad>(half - 1));
    } else if (o.layout == "t2t") {
      const quad lmin = logq(static_cast<quad>(o.min_timescale));
      const int64_t den = half - 1 > 1 ? half - 1 : 1;
      omega = static_cast<quad>(o.min_timescale) *
              expq(-(lb - lmin) * static_cast<quad>(k) / static_cast<quad>(den));
    } else {  // ggml
      omega = expq(-lb * static_cast<quad>(k) / static_cast<quad>(half));
    }
  }
  const quad angle = static_cast<quad>(p) * omega;
  return is_sin ? sinq(angle) : cosq(angle);
}

// True if `got` (a float) is the value nearest to x, ties to even: its two
// float neighbours must not be closer. Checked without any rounding code.
inline bool is_nearest_float(float got, quad x) {
  if (!(got == got)) return false;
  const quad g = got;
  const quad up = nextafterf(got, 2.0f), down = nextafterf(got, -2.0f);
  const quad dg = fabsq(x - g), du = fabsq(x - up), dd = fabsq(x - down);
  if (du < dg || dd < dg) return false;
  uint32_t bits;
  std::memcpy(&bits, &got, sizeof bits);
  if ((du == dg || dd == dg) && (bits & 1u)) return false;  // a tie must go to even
  return true;
}

// Decoders for the 16-bit formats, exact.
inline double bf16_value(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline double f16_value(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double v =
      e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(static_cast<double>(m + 1024), e - 25);
  return sign ? -v : v;
}

// True if the 16-bit value h is the nearest to x in its format (neighbours h +- 1).
template <typename Decode>
bool is_nearest_16(uint16_t h, quad x, Decode decode) {
  const quad g = decode(h);
  // neighbours toward +inf and -inf in the sign-magnitude encoding
  const bool neg = h & 0x8000;
  const uint16_t mag = h & 0x7fff;
  const quad a = decode(static_cast<uint16_t>((neg ? 0x8000 : 0) | (mag + 1)));
  const quad b = mag == 0 ? decode(static_cast<uint16_t>(neg ? 0x0001 : 0x8001))
                          : decode(static_cast<uint16_t>((neg ? 0x8000 : 0) | (mag - 1)));
  const quad dg = fabsq(x - g);
  if (fabsq(x - a) < dg || fabsq(x - b) < dg) return false;
  if ((fabsq(x - a) == dg || fabsq(x - b) == dg) && (h & 1)) return false;
  return true;
}

}  // namespace tokpos::testing
