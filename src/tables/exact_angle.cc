#include "tables/exact_angle.h"

#include <quadmath.h>

#include <cmath>

namespace tokpos::detail {
namespace {

// 2 pi in quad (113 bits).
const quad k2PiQ = 2 * acosq(quad(-1));  // pi to quad precision

// Truncates x > 0 to its leading `bits` significant bits (exact in quad).
quad leading_bits(quad x, int bits) {
  const int e = ilogbq(x);
  return ldexpq(floorq(ldexpq(x, bits - 1 - e)), e - (bits - 1));
}

}  // namespace

ExactPair::ExactPair(quad omega) : omega_(omega) {
  quad rest = omega / k2PiQ;  // turns per position
  for (int i = 0; i < 4; ++i) {
    if (rest <= 0) break;
    const quad head = leading_bits(rest, 21);
    chunk_[i] = static_cast<double>(head);  // exact: 21 bits
    rest -= head;                           // exact in quad
  }
  chunk_[4] = static_cast<double>(rest);
}

void ExactPair::sincos(int64_t p, double* s, double* c) const {
  // frac(p * turns): every p * chunk_[i] with i < 4 is exact (<= 32 + 21 bits),
  // and so is x - nearbyint(x). Summing the small parts first keeps the
  // rounding error below 4 * 2^-54 turns.
  const double pd = static_cast<double>(p);
  double f = 0.0;
  for (int i = 4; i >= 0; --i) {
    const double x = pd * chunk_[i];  // |x| < 2^32: within round_nearest's range
    f += x - internal::round_nearest(x);
  }
  f -= internal::round_nearest(f);             // now in [-1/2, 1/2], exactly
  const double angle = 6.283185307179586 * f;  // |angle| <= pi
  *s = std::sin(angle);
  *c = std::cos(angle);
}

void ExactPair::sincos_quad(int64_t p, quad* s, quad* c) const {
  // Reduce in turns first so the quad argument is at most pi.
  quad turns = static_cast<quad>(p) * (omega_ / k2PiQ);
  turns -= rintq(turns);
  sincosq(k2PiQ * turns, s, c);
}

double round_quad(quad y, Format fmt) {
  if (y == 0) return 0.0;
  const int lead = std::max(ilogbq(y), fmt.emin);
  const quad quantum = ldexpq(quad(1), lead - (fmt.bits - 1));
  const quad t = y / quantum;
  const quad lo = floorq(t), frac = t - lo;
  quad r = lo;
  const quad half = quad(1) / 2;
  if (frac > half || (frac == half && fmodq(lo, quad(2)) != 0)) r = lo + 1;
  return static_cast<double>(r * quantum);  // exact: at most 24 significant bits
}

}  // namespace tokpos::detail
