// Private: the exact RoPE angle. cos(p * w) and sin(p * w) for an integer
// position 0 <= p < 2^31 and a double frequency w, as the double nearest to
// a value within a few 1e-15 of the exact one (docs/precision.md, "RoPE
// angles"): w / (2 pi) is held as an unevaluated sum of two doubles (about
// 106 bits), p times it is formed with exact products (fma), reduced to a
// fraction of a turn exactly, and only then turned into an angle in
// [-pi, pi] for the double sin and cos.
#pragma once

#include <cmath>
#include <cstdint>

namespace tokpos::detail {

// Positions below this have exact angles (p and p * w's pieces stay exact).
inline constexpr int64_t kRopeMaxPosition = int64_t{1} << 31;
// |w| at most this: p * w / (2 pi) stays below 2^51 turns, where the
// reduction to a fraction of a turn is exact.
inline constexpr double kRopeMaxFrequency = 0x1p20;

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
inline double round_nearest(double t) {
  constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52
  return (t + kShift) - kShift;
}
}  // namespace rope_internal

inline RopeTurns rope_turns(double w) {
  using namespace rope_internal;
  const double h0 = w * kInv2Pi0, l0 = std::fma(w, kInv2Pi0, -h0);  // exact: h0 + l0 = w * kInv2Pi0
  const double h1 = w * kInv2Pi1, l1 = std::fma(w, kInv2Pi1, -h1);
  const double small = l0 + (h1 + (l1 + w * kInv2Pi2));
  RopeTurns t;
  t.t0 = h0 + small;  // fast two-sum: |small| << |h0|
  t.t1 = small - (t.t0 - h0);
  return t;
}

// cos and sin of p * w, p in [0, kRopeMaxPosition), t = rope_turns(w).
inline void rope_cos_sin(int64_t p, const RopeTurns& t, double* c, double* s) {
  using rope_internal::round_nearest;
  const double pd = static_cast<double>(p);
  // p * t0 = a0 + e0 exactly, p * t1 = a1 + e1 exactly; a - round(a) is exact.
  const double a0 = pd * t.t0, e0 = std::fma(pd, t.t0, -a0);
  const double a1 = pd * t.t1, e1 = std::fma(pd, t.t1, -a1);
  double f = (a0 - round_nearest(a0)) + ((a1 - round_nearest(a1)) + (e0 + e1));
  f -= round_nearest(f);  // the fraction of a turn, in [-1/2, 1/2]
  const double angle = 6.283185307179586 * f;
  *c = std::cos(angle);
  *s = std::sin(angle);
}

}  // namespace tokpos::detail
