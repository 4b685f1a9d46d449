// Layout structure: which column holds what, edge cases D = 1, 2, 3 and odd D,
// conversion between interleaved and halves, and the C entry point.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tokpos/error.h"
#include "tokpos/position_table.h"
#include "tokpos/tokpos.h"

namespace {

using tokpos::Layout;
using tokpos::TableOptions;

TEST(Layouts, PositionZeroShowsTheColumnRoles) {
  // At p = 0 every sin is 0 and every cos is 1: the layout's column map in plain sight.
  auto row0 = [](Layout l, int64_t D) { return tokpos::position_table(1, D, 0, {.layout = l}); };
  EXPECT_EQ(row0(Layout::kInterleaved, 5), (std::vector<float>{0, 1, 0, 1, 0}));
  EXPECT_EQ(row0(Layout::kHalves, 5), (std::vector<float>{0, 0, 0, 1, 1}));
  EXPECT_EQ(row0(Layout::kFairseq, 5), (std::vector<float>{0, 0, 1, 1, 0}));
  EXPECT_EQ(row0(Layout::kT2T, 5), (std::vector<float>{0, 0, 1, 1, 0}));
  EXPECT_EQ(row0(Layout::kGgml, 5), (std::vector<float>{1, 1, 0, 0, 0}));
}

TEST(Layouts, EdgeWidths) {
  // D = 1: interleaved and halves hold one sin column; the [sin|cos|0] layouts a single zero.
  EXPECT_EQ(tokpos::position_table(1, 1, 1, {.layout = Layout::kInterleaved})[0], std::sin(1.0f));
  EXPECT_EQ(tokpos::position_table(1, 1, 1, {.layout = Layout::kHalves})[0], std::sin(1.0f));
  for (Layout l : {Layout::kFairseq, Layout::kT2T, Layout::kGgml})
    EXPECT_EQ(tokpos::position_table(1, 1, 5, {.layout = l})[0], 0.0f) << tokpos::layout_name(l);
  // D = 2 and 3: one pair with frequency 1 in every layout (fairseq's 1/(D/2 - 1) is a
  // division by zero there; the k = 0 frequency is base^0 = 1 whatever the denominator).
  for (Layout l : {Layout::kInterleaved, Layout::kHalves, Layout::kFairseq, Layout::kT2T, Layout::kGgml}) {
    for (int64_t D : {2, 3}) {
      EXPECT_EQ(tokpos::frequency(0, D, {.layout = l}), 1.0) << tokpos::layout_name(l) << " D=" << D;
    }
  }
  EXPECT_EQ(tokpos::num_frequency_pairs(Layout::kInterleaved, 3), 2);  // the second is a lone sin
  EXPECT_EQ(tokpos::num_frequency_pairs(Layout::kFairseq, 3), 1);      // plus a zero column
}

TEST(Layouts, FrequenciesFollowEachProjectsFormula) {
  const int64_t D = 16;
  EXPECT_DOUBLE_EQ(tokpos::frequency(3, D, {.layout = Layout::kInterleaved}), std::pow(1e4, -6.0 / 16));
  EXPECT_DOUBLE_EQ(tokpos::frequency(3, D, {.layout = Layout::kHalves}), std::pow(1e4, -6.0 / 16));
  EXPECT_DOUBLE_EQ(tokpos::frequency(3, D, {.layout = Layout::kFairseq}), std::exp(-3 * std::log(1e4) / 7));
  EXPECT_DOUBLE_EQ(tokpos::frequency(3, D, {.layout = Layout::kGgml}), std::exp(-3 * std::log(1e4) / 8));
  EXPECT_NEAR(tokpos::frequency(3, D, {.layout = Layout::kT2T, .base = 500, .min_timescale = 2}),
              2.0 * std::exp(-3 * std::log(250.0) / 7), 1e-15);
  EXPECT_DOUBLE_EQ(tokpos::frequency(7, D, {.layout = Layout::kFairseq}), 1e-4);  // last pair reaches 1/base
}

TEST(Layouts, FairseqPaddingRowIsZero) {
  const auto t = tokpos::position_table(5, 6, 0, {.layout = Layout::kFairseq, .padding_idx = 1});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t[6 + i], 0.0f);
  EXPECT_NE(t[2 * 6], 0.0f);  // position 2, the first real token in fairseq, is not
}

TEST(Layouts, ConvertInterleavedAndHalvesBothWays) {
  for (int64_t D : {1, 2, 5, 8, 33}) {
    const int64_t L = 9;
    const auto inter = tokpos::position_table(L, D, 3, {.layout = Layout::kInterleaved});
    const auto halves = tokpos::position_table(L, D, 3, {.layout = Layout::kHalves});
    std::vector<float> a(L * D), b(L * D);
    tokpos::convert_layout(a, inter, L, D, Layout::kInterleaved, Layout::kHalves);
    EXPECT_EQ(a, halves) << "D=" << D;
    tokpos::convert_layout(b, halves, L, D, Layout::kHalves, Layout::kInterleaved);
    EXPECT_EQ(b, inter) << "D=" << D;
  }
  std::vector<float> x(8), y(8);
  EXPECT_THROW(tokpos::convert_layout(x, y, 1, 8, Layout::kFairseq, Layout::kHalves), tokpos::Error);
  EXPECT_THROW(tokpos::convert_layout(x, x, 1, 8, Layout::kHalves, Layout::kInterleaved), tokpos::Error);
}

TEST(Layouts, CEntryPointMatchesTheSeedTable) {
  const int64_t L = 128, D = 64;
  std::vector<float> a(L * D), b(L * D);
  ASSERT_EQ(tokpos_sinusoidal_table(a.data(), L, D, 10000.0), TOKPOS_OK);
  ASSERT_EQ(tokpos_sinusoidal_table_ex(b.data(), TOKPOS_DTYPE_F32, L, D, 0, TOKPOS_LAYOUT_INTERLEAVED,
                                       10000.0, 1.0, -1),
            TOKPOS_OK);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  std::vector<uint16_t> h(L * D, 0xabcd);
  const auto before = h;
  EXPECT_EQ(tokpos_sinusoidal_table_ex(h.data(), TOKPOS_DTYPE_BF16, L, D, 0, static_cast<tokpos_layout>(9),
                                       1e4, 1, -1),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("layout 9"), std::string::npos) << tokpos_last_error();
  EXPECT_EQ(tokpos_sinusoidal_table_ex(h.data(), TOKPOS_DTYPE_BF16, L, D, 0, TOKPOS_LAYOUT_HALVES, 1e4, 1, 2),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_sinusoidal_table_ex(nullptr, TOKPOS_DTYPE_F16, L, D, 0, TOKPOS_LAYOUT_GGML, 1e4, 1, -1),
            TOKPOS_NULL_POINTER);
  EXPECT_EQ(h, before);
  ASSERT_EQ(
      tokpos_sinusoidal_table_ex(h.data(), TOKPOS_DTYPE_BF16, L, D, 0, TOKPOS_LAYOUT_INTERLEAVED, 1e4, 1, -1),
      TOKPOS_OK);
  EXPECT_EQ(h[1], 0x3f80);  // cos 0 = 1.0 in bf16
}

}  // namespace
