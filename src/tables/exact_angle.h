// Private: sin and cos of p * omega, accurate to a few 1e-15 absolute for any
// integer position 0 <= p < 2^32, and correctly rounded conversion to the
// output types. See docs/precision.md for the error analysis.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace tokpos::detail {

using quad = __float128;

// Bound on |computed - exact| of ExactPair::sincos (docs/precision.md derives
// ~2.6e-15; tests/precision_test.cc measures it) and on one angle-addition
// step built from two such values (~7.6e-15). Rounding treats any value this
// close to a midpoint as undecided and recomputes it in quad.
inline constexpr double kSinCosError = 4e-15;
inline constexpr double kAngleAdditionError = 1.6e-14;

class ExactPair {
 public:
  ExactPair() = default;
  explicit ExactPair(quad omega);

  quad omega() const { return omega_; }

  // s = sin(p * omega), c = cos(p * omega) in double, within kSinCosError.
  // Requires 0 <= p < 2^32 (kMaxFastPosition); larger p goes through quad.
  void sincos(int64_t p, double* s, double* c) const;

  // The same in quad precision (about 1e-30), for any p >= 0.
  void sincos_quad(int64_t p, quad* s, quad* c) const;

 private:
  quad omega_ = 0;
  // omega / (2 pi) = turns per position, split so that p * chunk_[i] is exact
  // in double for p < 2^32: chunk_[0..3] hold 21 significant bits each,
  // chunk_[4] the rest.
  double chunk_[5] = {0, 0, 0, 0, 0};
};

inline constexpr int64_t kMaxFastPosition = int64_t{1} << 32;

// Output formats: significant bits (with the implicit one) and the smallest
// normal exponent, for rounding to nearest-even with subnormals.
struct Format {
  int bits;
  int emin;
};
inline constexpr Format kF32{24, -126};
inline constexpr Format kBF16{8, -126};
inline constexpr Format kF16{11, -14};

namespace internal {
inline double pow2(int e) {  // 2^e for -1022 <= e <= 1023, exactly
  return std::bit_cast<double>(static_cast<uint64_t>(e + 1023) << 52);
}
inline int exponent(double y) {  // floor(log2 |y|) for normal y
  return static_cast<int>((std::bit_cast<uint64_t>(y) >> 52) & 0x7ff) - 1023;
}
// Nearest integer, ties to even, for |t| < 2^51: no libm call, no SSE4.1 needed.
inline double round_nearest(double t) {
  constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52
  return (t + kShift) - kShift;
}
}  // namespace internal

// Rounds y (|y| <= 2) to the format, nearest-even, unless y is within
// `guard` of a rounding midpoint, i.e. when an error of up to `guard` in y
// could change the result; then the caller must decide in quad. Also
// undecided when |y| is so small that `guard` reaches an eighth of the format's
// spacing there (near zero, and so that crossing a power of two, where the
// grid halves, can never change the result).
// Branch-free, for loops the compiler can vectorise: returns the rounded
// value and sets *undecided to 1 (else leaves it) when the value cannot be
// decided here. (|y| >= 8 * guard * 2^bits also ensures guard < quantum / 8.)
inline double round_guarded_bf(double y, double guard, Format fmt, int64_t* undecided) {
  const double ay = y < 0 ? -y : y;
  const int e = internal::exponent(y);
  const int lead = e > fmt.emin ? e : fmt.emin;
  const double t = y * internal::pow2(fmt.bits - 1 - lead);
  const double r = internal::round_nearest(t);
  const double frac = t - r;
  const double quantum = internal::pow2(lead - (fmt.bits - 1));
  const double margin = (0.5 - (frac < 0 ? -frac : frac)) * quantum;
  const bool bad = (ay < 8 * guard * internal::pow2(fmt.bits)) | (margin <= guard);
  *undecided |= bad;
  return r * quantum;
}

// The same as a test: false when undecided, else *rounded is the result.
inline bool round_guarded(double y, double guard, Format fmt, double* rounded) {
  int64_t undecided = 0;
  const double r = round_guarded_bf(y, guard, fmt, &undecided);
  if (undecided) return false;
  *rounded = r;
  return true;
}

// The float32 case of round_guarded_bf, cheaper and vectorisable with SSE2:
// the hardware rounds y to float (nearest-even), and the spacing comes from
// the float's 32-bit exponent. When the float is a power of two the grid
// below it is twice as fine, so the spacing is halved (conservative: it can
// only flag more values, never fewer).
inline float round_f32_guarded_bf(double y, double guard, int64_t* undecided) {
  const float f = static_cast<float>(y);
  const uint32_t fb = std::bit_cast<uint32_t>(f);
  const uint32_t exp_bits = fb & 0x7f800000u;
  const float spacing = std::bit_cast<float>(exp_bits - (23u << 23));  // 2^(e-23); |f| >= 2^-100 here
  // Written without branches or selects so that the loop vectorises.
  const float power_of_two = static_cast<float>((fb & 0x007fffffu) == 0);
  const float half = spacing * (0.5f - 0.25f * power_of_two);
  const double margin = static_cast<double>(half) - std::fabs(y - static_cast<double>(f));
  *undecided |=
      static_cast<int64_t>(std::fabs(y) < 8 * guard * 16777216.0) | static_cast<int64_t>(margin <= guard);
  return f;
}

// Exact rounding of a quad value to the format (nearest-even).
double round_quad(quad y, Format f);

}  // namespace tokpos::detail
