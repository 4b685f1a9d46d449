#include "tokpos/sinusoidal.h"

#include <cmath>

#include "common/check.h"
#include "tokpos/position_table.h"

namespace tokpos {
namespace {

void check_base(const char* where, double base) {
  detail::check_positive_finite(where, "base", base);
}

}  // namespace

double sinusoidal_frequency(int64_t i, int64_t D, double base) {
  constexpr const char* kWhere = "sinusoidal_frequency";
  detail::check_at_least(kWhere, "D", D, 1);
  if (i < 0 || i >= D)
    detail::fail(Status::kInvalidArgument, kWhere, "feature ", i, " is outside [0, ", D, ")");
  check_base(kWhere, base);
  return frequency(i / 2, D, {.layout = Layout::kInterleaved, .base = base});
}

float sinusoidal_value(int64_t pos, int64_t i, int64_t D, double base) {
  constexpr const char* kWhere = "sinusoidal_value";
  detail::check_at_least(kWhere, "pos", pos, 0);
  detail::check_at_least(kWhere, "D", D, 1);
  if (i < 0 || i >= D)
    detail::fail(Status::kInvalidArgument, kWhere, "feature ", i, " is outside [0, ", D, ")");
  check_base(kWhere, base);
  return position_value(pos, i, D, {.layout = Layout::kInterleaved, .base = base});
}

void sinusoidal_table(std::span<float> out, int64_t L, int64_t D, double base, int64_t start) {
  constexpr const char* kWhere = "sinusoidal_table";
  detail::check_at_least(kWhere, "L", L, 1);
  detail::check_at_least(kWhere, "D", D, 1);
  detail::check_at_least(kWhere, "start", start, 0);
  check_base(kWhere, base);
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul(kWhere, "L*D", L, D));
  position_table(out.data(), DType::kF32, L, D, start, {.layout = Layout::kInterleaved, .base = base});
}

}  // namespace tokpos
