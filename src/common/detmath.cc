#include "common/detmath.h"

#include <cmath>

namespace tokpos::detail {

double det_log(double x) {
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); frexp/ldexp are exact.
  int e = 0;
  double m = std::frexp(x, &e);  // m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  // ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1), |s| <= 0.1716.
  // s^2 <= 0.0295, so 14 terms leave a relative error below 1e-21.
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 29.0;
  for (int k = 13; k >= 0; --k) p = 1.0 / (2 * k + 1) + s2 * p;
  // ln 2 split so that e * kLn2Hi is exact for |e| < 2^11 (fdlibm's constants).
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (2.0 * s * p + de * kLn2Lo);
}

void det_sincos_2pi(double u, double* s, double* c) {
  // Quadrants of the circle: v = 4u is exact; q = nearest quadrant, r in [-1/2, 1/2].
  const double v = 4.0 * u;
  const double q = std::floor(v + 0.5);
  const double r = v - q;  // exact: v and q share an exponent range
  constexpr double kHalfPi = 1.57079632679489661923;
  const double x = r * kHalfPi;  // |x| <= pi/4
  const double x2 = x * x;
  // Taylor series to x^21 / x^22: the first omitted term is < 1e-22 at pi/4.
  constexpr double kSin[] = {1.0,
                             -1.0 / 6.0,
                             1.0 / 120.0,
                             -1.0 / 5040.0,
                             1.0 / 362880.0,
                             -1.0 / 39916800.0,
                             1.0 / 6227020800.0,
                             -1.0 / 1307674368000.0,
                             1.0 / 355687428096000.0,
                             -1.0 / 121645100408832000.0,
                             1.0 / 51090942171709440000.0};
  constexpr double kCos[] = {1.0,
                             -1.0 / 2.0,
                             1.0 / 24.0,
                             -1.0 / 720.0,
                             1.0 / 40320.0,
                             -1.0 / 3628800.0,
                             1.0 / 479001600.0,
                             -1.0 / 87178291200.0,
                             1.0 / 20922789888000.0,
                             -1.0 / 6402373705728000.0,
                             1.0 / 2432902008176640000.0,
                             -1.0 / 1124000727777607680000.0};
  double ps = kSin[10];
  for (int k = 9; k >= 0; --k) ps = kSin[k] + x2 * ps;
  double pc = kCos[11];
  for (int k = 10; k >= 0; --k) pc = kCos[k] + x2 * pc;
  const double sx = x * ps, cx = pc;
  switch (static_cast<int>(q) & 3) {
    case 0:
      *s = sx;
      *c = cx;
      break;
    case 1:
      *s = cx;
      *c = -sx;
      break;
    case 2:
      *s = -sx;
      *c = -cx;
      break;
    default:
      *s = -cx;
      *c = sx;
      break;
  }
}

}  // namespace tokpos::detail
