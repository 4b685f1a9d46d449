// Private: log and sin/cos built only from + - * / (correctly rounded in IEEE
// 754) and exact scaling, so they give the same bits on every platform. Used by
// the initialiser; compiled with -ffp-contract=off like the rest of tokpos.
// Accuracy is about 1 ulp of double, far below the final rounding to float.
#pragma once

namespace tokpos::detail {

// Natural log for x > 0.
double det_log(double x);

// sin and cos of 2*pi*u for u in [0, 1).
void det_sincos_2pi(double u, double* s, double* c);

}  // namespace tokpos::detail
