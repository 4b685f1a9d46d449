// The precision contract (docs/precision.md): every entry of every layout is
// the exact value correctly rounded to f32, bf16 and f16, checked against an
// independent quad-precision reference (tests/exact_reference.h), including
// positions near 2^24 and the largest D.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "exact_reference.h"
#include "tables/exact_angle.h"
#include "tokpos/error.h"
#include "tokpos/position_table.h"
#include "tokpos/threading.h"

namespace {

using tokpos::DType;
using tokpos::Layout;
using tokpos::TableOptions;
using tokpos::testing::exact_entry;
using tokpos::testing::quad;
using tokpos::testing::RefOptions;

const Layout kLayouts[] = {Layout::kInterleaved, Layout::kHalves, Layout::kFairseq, Layout::kT2T,
                           Layout::kGgml};

RefOptions ref_of(const TableOptions& o) {
  return {.layout = tokpos::layout_name(o.layout),
          .base = o.base,
          .min_timescale = o.min_timescale,
          .padding_idx = o.padding_idx ? *o.padding_idx : -1};
}

// Checks every `col_step`-th column of an f32 table; returns the largest |error|.
double check_f32(const std::vector<float>& t, int64_t L, int64_t D, int64_t start, const TableOptions& o,
                 int64_t col_step = 1) {
  double worst = 0;
  const RefOptions ref = ref_of(o);
  for (int64_t r = 0; r < L; ++r) {
    for (int64_t i = 0; i < D; i += col_step) {
      const quad x = exact_entry(ref, start + r, i, D);
      const float got = t[r * D + i];
      EXPECT_TRUE(tokpos::testing::is_nearest_float(got, x))
          << tokpos::layout_name(o.layout) << " p=" << start + r << " i=" << i << " D=" << D << " got " << got
          << " exact " << static_cast<double>(x);
      worst = std::max(worst, static_cast<double>(fabsq(static_cast<quad>(got) - x)));
      if (::testing::Test::HasFailure()) return worst;
    }
  }
  return worst;
}

TEST(Precision, EveryLayoutIsCorrectlyRoundedF32) {
  for (Layout layout : kLayouts) {
    for (int64_t D : {1, 2, 3, 4, 5, 8, 9, 64, 127}) {
      TableOptions o{.layout = layout};
      if (layout == Layout::kFairseq) o.padding_idx = 1;
      const int64_t L = 70;
      const auto t = tokpos::position_table(L, D, 0, o);
      check_f32(t, L, D, 0, o);
      ASSERT_FALSE(HasFailure()) << tokpos::layout_name(layout) << " D=" << D;
    }
  }
}

TEST(Precision, PositionsNear2To24AndTheLargestD) {
  // D = 16384 near p = 2^24: every 7th column, all rows, every layout.
  const int64_t D = 16384, L = 40, start = (int64_t{1} << 24) - 20;
  double worst = 0;
  for (Layout layout : kLayouts) {
    const TableOptions o{.layout = layout};
    const auto t = tokpos::position_table(L, D, start, o);
    worst = std::max(worst, check_f32(t, L, D, start, o, 7));
    ASSERT_FALSE(HasFailure()) << tokpos::layout_name(layout);
  }
  std::printf("largest |f32 - exact| near 2^24 at D = 16384: %.3g (contract: 2^-24 = %.3g)\n", worst,
              std::ldexp(1.0, -24));
  EXPECT_LE(worst, std::ldexp(1.0, -24));
}

TEST(Precision, FarPositionsUpTo2To40) {
  // Beyond the fast range (2^32) the generator switches to quad; still exact.
  for (int64_t start : {(int64_t{1} << 32) - 70, int64_t{1} << 40}) {
    const TableOptions o{.layout = Layout::kInterleaved, .base = 10000.0};
    const auto t = tokpos::position_table(140, 32, start, o);
    check_f32(t, 140, 32, start, o);
    ASSERT_FALSE(HasFailure()) << "start " << start;
  }
}

TEST(Precision, Bf16AndF16AreTheExactValueRoundedToNearestEven) {
  for (Layout layout : kLayouts) {
    for (int64_t start : {int64_t{0}, (int64_t{1} << 24) - 50}) {
      const int64_t L = 100, D = 33;
      const TableOptions o{.layout = layout};
      std::vector<uint16_t> bf(L * D), hf(L * D);
      tokpos::position_table(bf.data(), DType::kBF16, L, D, start, o);
      tokpos::position_table(hf.data(), DType::kF16, L, D, start, o);
      const RefOptions ref = ref_of(o);
      for (int64_t r = 0; r < L; ++r)
        for (int64_t i = 0; i < D; ++i) {
          const quad x = exact_entry(ref, start + r, i, D);
          ASSERT_TRUE(tokpos::testing::is_nearest_16(bf[r * D + i], x, tokpos::testing::bf16_value))
              << "bf16 " << tokpos::layout_name(layout) << " p=" << start + r << " i=" << i;
          ASSERT_TRUE(tokpos::testing::is_nearest_16(hf[r * D + i], x, tokpos::testing::f16_value))
              << "f16 " << tokpos::layout_name(layout) << " p=" << start + r << " i=" << i;
        }
    }
  }
}

TEST(Precision, ExactPairStaysInsideItsStatedBound) {
  // The bound the rounding guard relies on, measured over many frequencies and positions.
  double worst = 0;
  for (int64_t k = 0; k < 4096; k += 37) {
    const quad omega = expq(-logq(quad(10000)) * static_cast<quad>(2 * k) / 8192);
    const tokpos::detail::ExactPair pair(omega);
    for (int64_t p : {int64_t{1}, int64_t{3}, int64_t{977}, int64_t{65537}, (int64_t{1} << 24) - 1,
                      int64_t{1} << 24, int64_t{123456789}, (int64_t{1} << 32) - 1}) {
      double s, c;
      pair.sincos(p, &s, &c);
      const quad a = static_cast<quad>(p) * omega;
      worst =
          std::max({worst, static_cast<double>(fabsq(s - sinq(a))), static_cast<double>(fabsq(c - cosq(a)))});
    }
  }
  std::printf("largest ExactPair error: %.3g (bound %.3g)\n", worst, tokpos::detail::kSinCosError);
  EXPECT_LE(worst, tokpos::detail::kSinCosError);
}

TEST(Precision, RoundingGuardFlagsMidpointsAndPowersOfTwo) {
  using tokpos::detail::kF32;
  using tokpos::detail::round_guarded;
  double r = 0;
  const double mid = 1.0 + std::ldexp(1.0, -24);  // halfway between two floats
  EXPECT_FALSE(round_guarded(mid, 1e-15, kF32, &r));
  EXPECT_FALSE(round_guarded(mid + 1e-16, 1e-15, kF32, &r));
  ASSERT_TRUE(round_guarded(mid + 1e-12, 1e-15, kF32, &r));
  EXPECT_EQ(r, 1.0 + std::ldexp(1.0, -23));
  ASSERT_TRUE(round_guarded(0.7, 1e-15, kF32, &r));
  EXPECT_EQ(static_cast<float>(r), 0.7f);
  EXPECT_FALSE(round_guarded(1e-12, 1e-15, kF32, &r));  // near zero: undecided
  // Just below a power of two the grid is finer: the midpoint below 0.5 is 0.5 - 2^-26.
  EXPECT_FALSE(round_guarded(0.5 - std::ldexp(1.0, -26), 1e-15, kF32, &r));
  int64_t undecided = 0;
  tokpos::detail::round_f32_guarded_bf(0.5 - std::ldexp(1.0, -26) + 1e-16, 1e-15, &undecided);
  EXPECT_EQ(undecided, 1);
}

TEST(Precision, ResultsDoNotDependOnThreadsOrWhereTheTableStarts) {
  const int64_t L = 300, D = 48;
  std::vector<std::vector<float>> tables;
  for (int threads : {1, 2, 7}) {
    tokpos::set_num_threads(threads);
    tables.push_back(tokpos::position_table(L, D, 1000, {}));
  }
  tokpos::set_num_threads(0);
  EXPECT_EQ(std::memcmp(tables[0].data(), tables[1].data(), L * D * 4), 0);
  EXPECT_EQ(std::memcmp(tables[0].data(), tables[2].data(), L * D * 4), 0);
  // Rows 1100.. of a table starting at 1000 equal a table starting at 1100 (other block split).
  const auto later = tokpos::position_table(200, D, 1100, {});
  EXPECT_EQ(std::memcmp(tables[0].data() + 100 * D, later.data(), 200 * D * 4), 0);
}

TEST(Precision, PositionValueIsTheTableEntry) {
  for (Layout layout : kLayouts) {
    const TableOptions o{.layout = layout};
    const auto t = tokpos::position_table(20, 11, 500, o);
    for (int64_t r = 0; r < 20; ++r)
      for (int64_t i = 0; i < 11; ++i) EXPECT_EQ(tokpos::position_value(500 + r, i, 11, o), t[r * 11 + i]);
  }
}

TEST(Precision, BadArgumentsNameTheValue) {
  std::vector<float> t(16);
  auto expect_msg = [](auto f, const char* piece) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const tokpos::Error& e) {
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
    }
  };
  expect_msg([&] { tokpos::position_table(t.data(), DType::kF32, 2, 8, -1, {}); }, "start = -1");
  expect_msg([&] { tokpos::position_table(t.data(), DType::kF32, 2, 8, 0, {.base = -3}); }, "base = -3");
  expect_msg(
      [&] {
        tokpos::position_table(t.data(), DType::kF32, 2, 8, 0, {.layout = Layout::kT2T, .min_timescale = 0});
      },
      "min_timescale = 0");
  expect_msg([&] { tokpos::position_table(t.data(), DType::kF32, 2, 8, 0, {.padding_idx = 1}); },
             "padding_idx is only part of the fairseq layout");
  expect_msg([&] { tokpos::position_table(nullptr, DType::kF32, 2, 8, 0, {}); }, "out is NULL");
}

}  // namespace
