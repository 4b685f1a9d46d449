#include "tokpos/sinusoidal.h"

#include <cmath>

#include "common/check.h"
#include "common/parallel.h"

namespace tokpos {
namespace {

void check_base(const char* where, double base) {
  if (!(base > 0.0) || !std::isfinite(base)) {
    detail::fail(Status::kInvalidArgument, where, "base = ", base, " must be finite and > 0");
  }
}

// Frequency of pair k: base^(-2k/D), the seed's 1 / 10000^(2i/d).
inline double pair_frequency(int64_t k, int64_t D, double base) {
  return 1.0 / std::pow(base, static_cast<double>(2 * k) / static_cast<double>(D));
}

}  // namespace

double sinusoidal_frequency(int64_t i, int64_t D, double base) {
  constexpr const char* kWhere = "sinusoidal_frequency";
  detail::check_at_least(kWhere, "D", D, 1);
  if (i < 0 || i >= D)
    detail::fail(Status::kInvalidArgument, kWhere, "feature ", i, " is outside [0, ", D, ")");
  check_base(kWhere, base);
  return pair_frequency(i / 2, D, base);
}

float sinusoidal_value(int64_t pos, int64_t i, int64_t D, double base) {
  constexpr const char* kWhere = "sinusoidal_value";
  detail::check_at_least(kWhere, "pos", pos, 0);
  const double angle = static_cast<double>(pos) * sinusoidal_frequency(i, D, base);
  return static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
}

void sinusoidal_table(std::span<float> out, int64_t L, int64_t D, double base, int64_t start) {
  constexpr const char* kWhere = "sinusoidal_table";
  detail::check_at_least(kWhere, "L", L, 1);
  detail::check_at_least(kWhere, "D", D, 1);
  detail::check_at_least(kWhere, "start", start, 0);
  check_base(kWhere, base);
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul(kWhere, "L*D", L, D));
  float* dst = out.data();
  // Every element is a pure function of (p, i): the same bits as
  // sinusoidal_value, in any order and with any thread count.
#pragma omp parallel for schedule(static) num_threads(detail::threads_for(L* D * 16))
  for (int64_t r = 0; r < L; ++r) {
    const double p = static_cast<double>(start + r);
    float* row = dst + r * D;
    for (int64_t i = 0; i < D; i += 2) {
      const double angle = p * pair_frequency(i / 2, D, base);
      row[i] = static_cast<float>(std::sin(angle));
      if (i + 1 < D) row[i + 1] = static_cast<float>(std::cos(angle));
    }
  }
}

}  // namespace tokpos
