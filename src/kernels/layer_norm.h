// Private: LayerNorm of one row in place, shared by every back end so they
// agree bit for bit: mean and variance accumulated in double, sequentially
// (the compiler may not reorder the sums: no -ffast-math), then
// x = (x - mean) / sqrt(var + eps) * gamma + beta, rounded once to float.
#pragma once

#include <cmath>
#include <cstdint>

namespace tokpos::kernels {

inline void layer_norm_row(float* x, const float* gamma, const float* beta, double eps, int64_t D) {
  double mean = 0, var = 0;
  for (int64_t d = 0; d < D; ++d) mean += x[d];
  mean /= static_cast<double>(D);
  for (int64_t d = 0; d < D; ++d) var += (x[d] - mean) * (x[d] - mean);
  var /= static_cast<double>(D);
  const double inv = 1.0 / std::sqrt(var + eps);
  for (int64_t d = 0; d < D; ++d) x[d] = static_cast<float>((x[d] - mean) * inv * gamma[d] + beta[d]);
}

}  // namespace tokpos::kernels
