// Diagnostics against independent computations.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <span>
#include <vector>

#include "test_util.h"
#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/positional.h"

namespace {

TEST(Diagnostics, CosineOfKnownVectors) {
  const std::vector<float> a = {1, 0, 0}, b = {0, 2, 0}, c = {3, 0, 0}, z = {0, 0, 0}, m = {-1, 0, 0};
  EXPECT_DOUBLE_EQ(tokpos::cosine(a, b), 0.0);
  EXPECT_DOUBLE_EQ(tokpos::cosine(a, c), 1.0);
  EXPECT_DOUBLE_EQ(tokpos::cosine(a, m), -1.0);
  EXPECT_DOUBLE_EQ(tokpos::cosine(a, z), 0.0);  // documented: zero rows give 0
  const std::vector<float> p = {1, 1}, q = {1, 0};
  EXPECT_NEAR(tokpos::cosine(p, q), std::sqrt(0.5), 1e-15);
}

TEST(Diagnostics, AdjacentCosineOfTheSinusoidalTableHasAClosedForm) {
  // For interleaved sin/cos pairs, PE(p).PE(p+1) = sum_k cos(w_k) and |PE(p)|^2 = D/2
  // (even D), so cos(p, p+1) = (2/D) sum_k cos(w_k), the same for every p.
  const int64_t L = 128, D = 64;
  tokpos::SinusoidalPositionalEmbedding s({.max_context = L, .dim = D});
  const auto adj = tokpos::adjacent_cosine(s.table(), L, D);
  ASSERT_EQ(adj.size(), static_cast<size_t>(L - 1));
  long double want = 0;
  for (int64_t k = 0; k < D / 2; ++k) want += std::cos(std::pow(10000.0L, -2.0L * k / D));
  want *= 2.0L / D;
  for (double v : adj) EXPECT_NEAR(v, static_cast<double>(want), 2e-7);
}

TEST(Diagnostics, LearnedTableAtInitIsNearlyOrthogonal) {
  const int64_t L = 128, D = 64;
  tokpos::LearnedPositionalEmbedding l({.max_context = L, .dim = D, .seed = 0});
  const auto s = tokpos::summarize(tokpos::adjacent_cosine(l.table(), L, D));
  EXPECT_EQ(s.count, L - 1);
  EXPECT_LT(std::abs(s.mean), 3.0 / std::sqrt(static_cast<double>(D * (L - 1))) * 3);
  EXPECT_NEAR(s.stddev, 1.0 / std::sqrt(static_cast<double>(D)), 0.05);  // random-vector spread
}

TEST(Diagnostics, CosineByOffsetStartsAtOneAndIsTheMeanOverP) {
  const int64_t L = 20, D = 6;
  const auto t = tokpos::testing::noise(L * D, 3);
  const auto by_k = tokpos::cosine_by_offset(t, L, D, 5);
  ASSERT_EQ(by_k.size(), 6u);
  EXPECT_NEAR(by_k[0], 1.0, 1e-12);
  double sum3 = 0;
  for (int64_t p = 0; p + 3 < L; ++p) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t d = 0; d < D; ++d) {
      dot += static_cast<double>(t[p * D + d]) * t[(p + 3) * D + d];
      na += static_cast<double>(t[p * D + d]) * t[p * D + d];
      nb += static_cast<double>(t[(p + 3) * D + d]) * t[(p + 3) * D + d];
    }
    sum3 += dot / std::sqrt(na * nb);
  }
  EXPECT_NEAR(by_k[3], sum3 / (L - 3), 1e-12);
  EXPECT_THROW(tokpos::cosine_by_offset(t, L, D, L), tokpos::Error);
}

TEST(Diagnostics, CosineMatrixIsEveryPairsCosineBitForBit) {
  const int64_t L = 13, D = 7;
  auto t = tokpos::testing::noise(L * D, 5);
  for (int64_t i = 0; i < D; ++i) t[static_cast<size_t>(4 * D + i)] = 0.0f;  // an all-zero row: cosine 0
  const auto m = tokpos::cosine_matrix(t, L, D);
  ASSERT_EQ(m.size(), static_cast<size_t>(L * L));
  const std::span<const float> s(t);
  for (int64_t p = 0; p < L; ++p) {
    for (int64_t q = 0; q < L; ++q) {
      const double want = tokpos::cosine(s.subspan(p * D, D), s.subspan(q * D, D));
      EXPECT_EQ(m[static_cast<size_t>(p * L + q)], want) << "p=" << p << " q=" << q;
    }
  }
  EXPECT_EQ(m[4 * L + 4], 0.0);
  EXPECT_NEAR(m[0], 1.0, 1e-15);
  // The diagonal next to the main one is adjacent_cosine.
  const auto adj = tokpos::adjacent_cosine(t, L, D);
  for (int64_t p = 0; p + 1 < L; ++p) EXPECT_EQ(m[static_cast<size_t>(p * L + p + 1)], adj[static_cast<size_t>(p)]);
  EXPECT_THROW(tokpos::cosine_matrix(t, L, D + 1), tokpos::Error);
  EXPECT_THROW(tokpos::cosine_matrix(t, 0, D), tokpos::Error);
}

TEST(Diagnostics, WavelengthsAre2PiTimesBaseTo2kOverD) {
  for (int64_t D : {64, 32, 7}) {
    const auto w = tokpos::sinusoidal_wavelengths(D, 10000.0);
    ASSERT_EQ(w.size(), static_cast<size_t>((D + 1) / 2));
    for (size_t k = 0; k < w.size(); ++k)
      EXPECT_NEAR(w[k], 2 * std::numbers::pi * std::pow(10000.0, 2.0 * k / D), 1e-9 * w[k]);
  }
  // The seed's exercise: halving D keeps the range [2 pi, ~2 pi base) but halves the
  // number of pairs, so neighbouring wavelengths are twice as far apart (in log).
  const auto w64 = tokpos::sinusoidal_wavelengths(64, 10000.0),
             w32 = tokpos::sinusoidal_wavelengths(32, 10000.0);
  EXPECT_EQ(w64.size(), 32u);
  EXPECT_EQ(w32.size(), 16u);
  EXPECT_NEAR(std::log(w32[1] / w32[0]), 2 * std::log(w64[1] / w64[0]), 1e-12);
  EXPECT_LT(w32.back(), w64.back());
}

TEST(Diagnostics, WavelengthBandsGroupPairsByDecade) {
  const auto w = tokpos::sinusoidal_wavelengths(64, 10000.0);
  const auto bands = tokpos::wavelength_bands(w);
  int64_t total = 0;
  for (const auto& b : bands) {
    total += b.pairs;
    for (int64_t k = b.first_pair; k <= b.last_pair; ++k) {
      EXPECT_GE(w[k], b.lower);
      EXPECT_LT(w[k], b.upper);
    }
  }
  EXPECT_EQ(total, 32);
  EXPECT_EQ(bands.front().lower, 1.0);     // 2 pi is in [1, 10)
  EXPECT_EQ(bands.back().lower, 10000.0);  // 2 pi 10000^(62/64) ~ 47000
}

TEST(Diagnostics, SummaryStatistics) {
  const std::vector<double> v = {1, 2, 3, 4};
  const auto s = tokpos::summarize(v);
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(1.25));
  EXPECT_EQ(tokpos::summarize({}).count, 0);
}

TEST(Diagnostics, RelativeFitIsTinyForSinusoidalAndLargeForLearned) {
  const int64_t L = 200, D = 64;
  for (auto layout : {tokpos::Layout::kInterleaved, tokpos::Layout::kHalves, tokpos::Layout::kFairseq,
                      tokpos::Layout::kT2T, tokpos::Layout::kGgml}) {
    const auto t = tokpos::position_table(L, D, 0, {.layout = layout});
    for (int64_t k : {1, 5, 50}) {
      const auto fit = tokpos::relative_position_fit(t, L, D, k, layout);
      EXPECT_EQ(fit.pairs, 32);
      EXPECT_LT(fit.max_residual, 4 * 1.2e-7)
          << tokpos::layout_name(layout) << " k=" << k;  // a few float ulps
    }
  }
  tokpos::LearnedPositionalEmbedding l({.max_context = L, .dim = D, .seed = 1});
  const auto fit = tokpos::relative_position_fit(l.table(), L, D, 1);
  EXPECT_GT(fit.relative, 0.3);
  EXPECT_GT(fit.max_residual, 0.01);
  // The wrong pairing breaks the fit: a halves table read as interleaved.
  const auto h = tokpos::position_table(L, D, 0, {.layout = tokpos::Layout::kHalves});
  EXPECT_GT(tokpos::relative_position_fit(h, L, D, 1, tokpos::Layout::kInterleaved).max_residual, 1e-3);
  EXPECT_THROW(tokpos::relative_position_fit(h, L, D, L, tokpos::Layout::kHalves), tokpos::Error);
}

TEST(Diagnostics, TableShapeIsChecked) {
  const std::vector<float> t(10);
  EXPECT_THROW(tokpos::adjacent_cosine(t, 3, 4), tokpos::Error);
}

}  // namespace
