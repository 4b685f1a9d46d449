// The sinusoidal formula against an independent long double computation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tokpos/error.h"
#include "tokpos/positional.h"
#include "tokpos/position_table.h"
#include "tokpos/tokpos.h"

namespace {

// The seed's formula, written independently in long double.
long double pe_ld(int64_t p, int64_t i, int64_t D, long double base = 10000.0L) {
  const long double angle =
      static_cast<long double>(p) /
      std::pow(base, static_cast<long double>(2 * (i / 2)) / static_cast<long double>(D));
  return i % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

// The float nearest to the exact value is within half an ulp; angles in double
// add a little more at large p. 2^-24 is the project's stated bound (docs/precision.md).
constexpr double kTol = 1.0 / (1 << 24);

TEST(Formula, TableMatchesLongDoubleForManyShapes) {
  for (int64_t D : {1, 2, 3, 7, 16, 63, 64, 768}) {
    for (double base : {10000.0, 500.0, 1e6}) {
      const int64_t L = 257;
      std::vector<float> t(L * D);
      tokpos::sinusoidal_table(t, L, D, base);
      for (int64_t p = 0; p < L; ++p)
        for (int64_t i = 0; i < D; ++i)
          ASSERT_NEAR(t[p * D + i], static_cast<double>(pe_ld(p, i, D, base)), kTol)
              << "p=" << p << " i=" << i << " D=" << D << " base=" << base;
    }
  }
}

TEST(Formula, LargePositionsStayAccurate) {
  const int64_t D = 512, L = 4;
  for (int64_t start : {int64_t{100000}, int64_t{1} << 20}) {
    std::vector<float> t(L * D);
    tokpos::sinusoidal_table(t, L, D, 10000.0, start);
    for (int64_t r = 0; r < L; ++r)
      for (int64_t i = 0; i < D; ++i)
        ASSERT_NEAR(t[r * D + i], static_cast<double>(pe_ld(start + r, i, D)), kTol)
            << "p=" << start + r << " i=" << i;
  }
}

TEST(Formula, OddDimEndsWithALoneSin) {
  const int64_t D = 5;
  for (int64_t p = 0; p < 10; ++p) {
    const double angle = static_cast<double>(p) / std::pow(10000.0, 4.0 / 5.0);
    EXPECT_NEAR(tokpos::sinusoidal_value(p, 4, D), std::sin(angle), kTol);
  }
}

TEST(Formula, TableAndElementFunctionAgreeBitwise) {
  const int64_t L = 50, D = 33;
  std::vector<float> t(L * D);
  ASSERT_EQ(tokpos_sinusoidal_table(t.data(), L, D, 10000.0), TOKPOS_OK);
  for (int64_t p = 0; p < L; ++p)
    for (int64_t i = 0; i < D; ++i) {
      EXPECT_EQ(t[p * D + i], tokpos_pe_sinusoidal(p, i, D));
      EXPECT_EQ(t[p * D + i], tokpos::sinusoidal_value(p, i, D));
    }
}

TEST(Formula, ModuleTableIsTheFormula) {
  tokpos::SinusoidalPositionalEmbedding s({.max_context = 64, .dim = 10, .base = 100.0});
  for (int64_t p = 0; p < 64; ++p)
    for (int64_t i = 0; i < 10; ++i)
      EXPECT_EQ(s.table()[p * 10 + i], tokpos::sinusoidal_value(p, i, 10, 100.0));
}

TEST(Formula, FrequencyIsBaseToMinus2kOverD) {
  EXPECT_DOUBLE_EQ(tokpos::sinusoidal_frequency(0, 64), 1.0);
  EXPECT_DOUBLE_EQ(tokpos::sinusoidal_frequency(1, 64), 1.0);  // pair 0: sin and cos share it
  EXPECT_NEAR(tokpos::sinusoidal_frequency(2, 64), std::pow(10000.0, -2.0 / 64.0), 1e-16);
  EXPECT_NEAR(tokpos::sinusoidal_frequency(63, 64), std::pow(10000.0, -62.0 / 64.0), 1e-16);
}

TEST(Formula, InvalidArgumentsAreNaNInCAndErrorsInCxx) {
  EXPECT_TRUE(std::isnan(tokpos_pe_sinusoidal(-1, 0, 8)));
  EXPECT_TRUE(std::isnan(tokpos_pe_sinusoidal(0, 8, 8)));
  EXPECT_TRUE(std::isnan(tokpos_pe_sinusoidal(0, -1, 8)));
  EXPECT_TRUE(std::isnan(tokpos_pe_sinusoidal(0, 0, 0)));
  EXPECT_NE(std::string(tokpos_last_error()).find("hidden_dim"), std::string::npos) << tokpos_last_error();
  EXPECT_THROW(tokpos::sinusoidal_value(0, 0, 8, 0.0), tokpos::Error);
  EXPECT_THROW(tokpos::sinusoidal_value(0, 0, 8, std::numeric_limits<double>::infinity()), tokpos::Error);
  std::vector<float> t(8);
  EXPECT_EQ(tokpos_sinusoidal_table(t.data(), 1, 8, -2.0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("base = -2"), std::string::npos) << tokpos_last_error();
}

}  // namespace
