// Private: the exact RoPE angle. cos(p * w) and sin(p * w) for an integer
// position 0 <= p < 2^31 and a double frequency w, as the double nearest to
// a value within a few 1e-15 of the exact one (docs/precision.md, "RoPE
// angles"): w / (2 pi) is held as an unevaluated sum of two doubles (about
// 106 bits), p times it is formed with exact products (fma), reduced to a
// fraction of a turn exactly, reduced to an eighth of a turn around a
// multiple of a quarter, and only then turned into an angle in [-pi/4, pi/4]
// for polynomial sin and cos (no libm: the same bits everywhere).
#pragma once

#include <cmath>
#include <cstdint>

namespace tokpos::detail {

// Positions below this have exact angles (p and p * w's pieces stay exact).
inline constexpr int64_t kRopeMaxPosition = int64_t{1} << 31;
// |w| at most this: p * w / (2 pi) stays below 2^51 turns, where the
// reduction to a fraction of a turn is exact.
inline constexpr double kRopeMaxFrequency = 0x1p20;
// The attention factor multiplies cos and sin, and the product is a float32:
// it must be a nonzero finite float32, [2^-149, FLT_MAX] (a larger value is
// inf there, a smaller one 0).
inline constexpr double kRopeMinAttentionFactor = 0x1p-149;
inline constexpr double kRopeMaxAttentionFactor = 0x1.fffffep127;
inline bool rope_attention_factor_ok(double v) {
  return v >= kRopeMinAttentionFactor && v <= kRopeMaxAttentionFactor;
}
// How messages state that range.
inline constexpr const char* kRopeAttentionFactorRange =
    " must be finite and > 0 in float32, where it scales cos and sin: in [2^-149, FLT_MAX = 3.4028234663852886e+38]";

// w / (2 pi) as t0 + t1, |t1| <= ulp(t0) / 2.
struct RopeTurns {
  double t0 = 0, t1 = 0;
};

namespace rope_internal {
// 1 / (2 pi) = kInv2Pi0 + kInv2Pi1 + kInv2Pi2 to about 2^-160 (the leading
// 159 bits, each part the double nearest to what the earlier ones leave).
inline constexpr double kInv2Pi0 = 0x1.45f306dc9c883p-3;
inline constexpr double kInv2Pi1 = -0x1.6b01ec5417056p-57;
inline constexpr double kInv2Pi2 = -0x1.6447e493ad4cep-111;
// Nearest integer, ties to even, for |t| < 2^51.
__attribute__((always_inline)) inline double round_nearest(double t) {
  constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52
  return (t + kShift) - kShift;
}
}  // namespace rope_internal

__attribute__((always_inline)) inline RopeTurns rope_turns(double w) {
  using namespace rope_internal;
  const double h0 = w * kInv2Pi0, l0 = std::fma(w, kInv2Pi0, -h0);  // exact: h0 + l0 = w * kInv2Pi0
  const double h1 = w * kInv2Pi1, l1 = std::fma(w, kInv2Pi1, -h1);
  const double small = l0 + (h1 + (l1 + w * kInv2Pi2));
  RopeTurns t;
  t.t0 = h0 + small;  // fast two-sum: |small| << |h0|
  t.t1 = small - (t.t0 - h0);
  return t;
}

// cos and sin of y for |y| <= pi/4 + a little: Taylor polynomials to y^15
// and y^16 (truncation below 5e-17 there), evaluated by Horner in double
// (contraction is off: the same bits on every machine and in every clone).
// Branch-free, so a loop over pairs vectorises.
__attribute__((always_inline)) inline void rope_sincos_octant(double y, double* c, double* s) {
  const double z = y * y;
  double ps = 1.0 / 1307674368000.0;  // 1/15!
  ps = ps * -z + 1.0 / 6227020800.0;  // 1/13!
  ps = ps * -z + 1.0 / 39916800.0;    // 1/11!
  ps = ps * -z + 1.0 / 362880.0;      // 1/9!
  ps = ps * -z + 1.0 / 5040.0;        // 1/7!
  ps = ps * -z + 1.0 / 120.0;
  ps = ps * -z + 1.0 / 6.0;
  *s = y - y * z * ps;  // y - y^3/3! + y^5/5! - ...
  double pc = 1.0 / 20922789888000.0;  // 1/16!
  pc = pc * -z + 1.0 / 87178291200.0;  // 1/14!
  pc = pc * -z + 1.0 / 479001600.0;    // 1/12!
  pc = pc * -z + 1.0 / 3628800.0;      // 1/10!
  pc = pc * -z + 1.0 / 40320.0;        // 1/8!
  pc = pc * -z + 1.0 / 720.0;
  pc = pc * -z + 1.0 / 24.0;
  *c = 1.0 - z * (0.5 - z * pc);  // 1 - y^2/2! + y^4/4! - ...
}

// cos and sin of p * w, p in [0, kRopeMaxPosition), t = rope_turns(w).
__attribute__((always_inline)) inline void rope_cos_sin(int64_t p, const RopeTurns& t, double* c, double* s) {
  using rope_internal::round_nearest;
  const double pd = static_cast<double>(p);
  // p * t0 = a0 + e0 exactly, p * t1 = a1 + e1 exactly; a - round(a) is exact.
  const double a0 = pd * t.t0, e0 = std::fma(pd, t.t0, -a0);
  const double a1 = pd * t.t1, e1 = std::fma(pd, t.t1, -a1);
  double f = (a0 - round_nearest(a0)) + ((a1 - round_nearest(a1)) + (e0 + e1));
  f -= round_nearest(f);  // the fraction of a turn, in [-1/2, 1/2]
  // Quarter turns: f = q/4 + r, |r| <= 1/8 (exact: q/4 lies on f's grid).
  const double q = round_nearest(4.0 * f);
  const double r = f - 0.25 * q;
  double cr, sr;
  rope_sincos_octant(6.283185307179586 * r, &cr, &sr);
  // Rotate by q quarter turns: q = 0, 1, 2, 3 (mod 4) give (c, s) = (cr, sr),
  // (-sr, cr), (-cr, -sr), (sr, -cr).
  const auto k = static_cast<int>(q) & 3;
  const double cq = (k & 1) ? sr : cr, sq = (k & 1) ? cr : sr;
  *c = (k == 1 || k == 2) ? -cq : cq;
  *s = (k >= 2) ? -sq : sq;
}

}  // namespace tokpos::detail
