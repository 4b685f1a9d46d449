#include "tokpos/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/check.h"

namespace tokpos {
namespace {

void check_table(const char* where, std::span<const float> table, int64_t L, int64_t D) {
  detail::check_at_least(where, "L", L, 1);
  detail::check_at_least(where, "D", D, 1);
  detail::check_size(where, "table", table.size(), detail::checked_mul(where, "L*D", L, D));
}

}  // namespace

double cosine(std::span<const float> a, std::span<const float> b) {
  detail::check_size("cosine", "b", b.size(), static_cast<int64_t>(a.size()));
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  if (na == 0.0 || nb == 0.0) return 0.0;
  return dot / (std::sqrt(na) * std::sqrt(nb));
}

std::vector<double> adjacent_cosine(std::span<const float> table, int64_t L, int64_t D) {
  check_table("adjacent_cosine", table, L, D);
  std::vector<double> out(static_cast<size_t>(L - 1));
  for (int64_t p = 0; p + 1 < L; ++p) {
    out[p] = cosine(table.subspan(p * D, D), table.subspan((p + 1) * D, D));
  }
  return out;
}

std::vector<double> cosine_by_offset(std::span<const float> table, int64_t L, int64_t D, int64_t max_offset) {
  constexpr const char* kWhere = "cosine_by_offset";
  check_table(kWhere, table, L, D);
  if (max_offset < 0 || max_offset >= L) {
    detail::fail(Status::kInvalidArgument, kWhere, "max_offset = ", max_offset,
                 " is outside [0, L) with L = ", L);
  }
  std::vector<double> out(static_cast<size_t>(max_offset + 1));
  for (int64_t k = 0; k <= max_offset; ++k) {
    double sum = 0;
    for (int64_t p = 0; p + k < L; ++p) {
      sum += cosine(table.subspan(p * D, D), table.subspan((p + k) * D, D));
    }
    out[k] = sum / static_cast<double>(L - k);
  }
  return out;
}

std::vector<double> cosine_matrix(std::span<const float> table, int64_t L, int64_t D) {
  constexpr const char* kWhere = "cosine_matrix";
  check_table(kWhere, table, L, D);
  const int64_t n = detail::checked_mul(kWhere, "L*L", L, L);
  std::vector<double> out(static_cast<size_t>(n));
  // The same sums, in the same order, as cosine(): identical bits.
  std::vector<double> sq(static_cast<size_t>(L));
  for (int64_t p = 0; p < L; ++p) {
    const float* a = table.data() + p * D;
    double s = 0;
    for (int64_t i = 0; i < D; ++i) s += static_cast<double>(a[i]) * a[i];
    sq[static_cast<size_t>(p)] = s;
  }
  const auto store = [&](int64_t p, int64_t q, double dot) {
    const double na = sq[static_cast<size_t>(p)], nb = sq[static_cast<size_t>(q)];
    const double c = (na == 0.0 || nb == 0.0) ? 0.0 : dot / (std::sqrt(na) * std::sqrt(nb));
    out[static_cast<size_t>(p * L + q)] = c;
    out[static_cast<size_t>(q * L + p)] = c;
  };
  for (int64_t p = 0; p < L; ++p) {
    const float* a = table.data() + p * D;
    int64_t q = p;
    // Four rows at a time: four independent sums, each in cosine()'s order.
    for (; q + 4 <= L; q += 4) {
      const float* b0 = table.data() + q * D;
      const float* b1 = b0 + D;
      const float* b2 = b1 + D;
      const float* b3 = b2 + D;
      double d0 = 0, d1 = 0, d2 = 0, d3 = 0;
      for (int64_t i = 0; i < D; ++i) {
        const double x = a[i];
        d0 += x * b0[i];
        d1 += x * b1[i];
        d2 += x * b2[i];
        d3 += x * b3[i];
      }
      store(p, q, d0);
      store(p, q + 1, d1);
      store(p, q + 2, d2);
      store(p, q + 3, d3);
    }
    for (; q < L; ++q) {
      const float* b = table.data() + q * D;
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(a[i]) * b[i];
      store(p, q, dot);
    }
  }
  return out;
}

std::vector<double> sinusoidal_wavelengths(int64_t D, double base) {
  constexpr const char* kWhere = "sinusoidal_wavelengths";
  detail::check_at_least(kWhere, "D", D, 1);
  detail::check_positive_finite(kWhere, "base", base);
  std::vector<double> out(static_cast<size_t>((D + 1) / 2));
  for (size_t k = 0; k < out.size(); ++k) {
    out[k] = 2.0 * std::numbers::pi * std::pow(base, static_cast<double>(2 * k) / static_cast<double>(D));
  }
  return out;
}

std::vector<WavelengthBand> wavelength_bands(std::span<const double> wavelengths) {
  std::vector<WavelengthBand> bands;
  for (size_t k = 0; k < wavelengths.size(); ++k) {
    const double e = std::floor(std::log10(wavelengths[k]));
    const double lower = std::pow(10.0, e);
    if (bands.empty() || bands.back().lower != lower) {
      bands.push_back({lower, lower * 10.0, 0, static_cast<int64_t>(k), static_cast<int64_t>(k)});
    }
    bands.back().pairs += 1;
    bands.back().last_pair = static_cast<int64_t>(k);
  }
  return bands;
}

RelativeFit relative_position_fit(std::span<const float> table, int64_t L, int64_t D, int64_t k,
                                  Layout layout) {
  constexpr const char* kWhere = "relative_position_fit";
  check_table(kWhere, table, L, D);
  if (k < 0 || k >= L) {
    detail::fail(Status::kInvalidArgument, kWhere, "offset k = ", k, " is outside [0, L) with L = ", L);
  }
  RelativeFit fit{.offset = k};
  double largest = 0;
  for (const PairColumns& pc : pair_columns(layout, D)) {
    // Best rotation: phi = atan2(sum v x u, sum v . u) over u = PE(p), v = PE(p+k).
    double dot = 0, cross = 0;
    for (int64_t p = 0; p + k < L; ++p) {
      const double u1 = table[p * D + pc.sin_col], u2 = table[p * D + pc.cos_col];
      const double v1 = table[(p + k) * D + pc.sin_col], v2 = table[(p + k) * D + pc.cos_col];
      dot += v1 * u1 + v2 * u2;
      cross += v1 * u2 - v2 * u1;
    }
    const double phi = std::atan2(cross, dot), c = std::cos(phi), s = std::sin(phi);
    for (int64_t p = 0; p + k < L; ++p) {
      const double u1 = table[p * D + pc.sin_col], u2 = table[p * D + pc.cos_col];
      const double v1 = table[(p + k) * D + pc.sin_col], v2 = table[(p + k) * D + pc.cos_col];
      fit.max_residual =
          std::max({fit.max_residual, std::abs(v1 - (c * u1 + s * u2)), std::abs(v2 - (c * u2 - s * u1))});
      largest = std::max({largest, std::abs(u1), std::abs(u2), std::abs(v1), std::abs(v2)});
    }
    ++fit.pairs;
  }
  fit.relative = largest > 0 ? fit.max_residual / largest : 0.0;
  return fit;
}

Summary summarize(std::span<const double> values) {
  Summary s;
  if (values.empty()) return s;
  s.count = static_cast<int64_t>(values.size());
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(s.count);
  double sq = 0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.stddev = std::sqrt(sq / static_cast<double>(s.count));
  return s;
}

}  // namespace tokpos
