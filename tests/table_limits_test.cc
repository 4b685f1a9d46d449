// Extreme but accepted table arguments: every layout, bases and t2t
// min_timescales from the smallest positive double to the largest, first
// positions from 0 to 2^52. Each table is either refused by name
// (INVALID_ARGUMENT naming base, and min_timescale for t2t) or every entry is
// finite and the correctly rounded exact value (tests/exact_reference.h).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "exact_reference.h"
#include "tokpos/error.h"
#include "tokpos/position_table.h"

namespace {

using tokpos::Layout;

const double kExtremes[] = {DBL_TRUE_MIN, 1e-308, 1e-10, 0.5, 2.0, 1e4, 1e308, DBL_MAX};

struct Outcome {
  int refused = 0, accepted = 0;
};

void sweep_one(Layout layout, double base, double min_ts, int64_t D, int64_t L, int64_t start, Outcome* out) {
  const tokpos::TableOptions o{.layout = layout, .base = base, .min_timescale = min_ts};
  const std::string what = std::string(tokpos::layout_name(layout)) + " base " + std::to_string(base) +
                           " min_timescale " + std::to_string(min_ts) + " D " + std::to_string(D) + " start " +
                           std::to_string(start);
  std::vector<float> t;
  try {
    t = tokpos::position_table(L, D, start, o);
  } catch (const tokpos::Error& e) {
    ++out->refused;
    EXPECT_EQ(e.status(), tokpos::Status::kInvalidArgument) << what;
    const std::string m = e.what();
    EXPECT_NE(m.find("base = "), std::string::npos) << what << ": " << m;
    if (layout == Layout::kT2T) {
      EXPECT_NE(m.find("min_timescale = "), std::string::npos) << what << ": " << m;
    }
    EXPECT_NE(m.find("exceeds the limit 2^58"), std::string::npos) << what << ": " << m;
    return;
  }
  ++out->accepted;
  const tokpos::testing::RefOptions ref{.layout = tokpos::layout_name(layout), .base = base, .min_timescale = min_ts};
  for (int64_t r = 0; r < L; ++r) {
    for (int64_t i = 0; i < D; ++i) {
      const float v = t[static_cast<size_t>(r * D + i)];
      ASSERT_TRUE(std::isfinite(v)) << what << " row " << r << " col " << i;
      ASSERT_TRUE(tokpos::testing::is_nearest_float(v, tokpos::testing::exact_entry(ref, start + r, i, D)))
          << what << " row " << r << " col " << i << " got " << v;
      // position_value and frequency agree with the table: the same bits, finite.
      ASSERT_EQ(tokpos::position_value(start + r, i, D, o), v) << what;
    }
  }
  for (int64_t k = 0; k < tokpos::num_frequency_pairs(layout, D); ++k) {
    ASSERT_TRUE(std::isfinite(tokpos::frequency(k, D, o))) << what << " pair " << k;
  }
}

TEST(TableLimits, ExtremeArgumentsGiveExactFiniteTablesOrAreRefusedByName) {
  Outcome out;
  for (Layout layout : {Layout::kInterleaved, Layout::kHalves, Layout::kFairseq, Layout::kT2T, Layout::kGgml}) {
    for (double base : kExtremes) {
      for (double min_ts : kExtremes) {
        if (layout != Layout::kT2T && min_ts != 1e4) continue;  // min_timescale is t2t's only
        for (int64_t D : {1, 2, 3, 16, 17}) {
          for (int64_t start : {int64_t{0}, (int64_t{1} << 32) - 2, (int64_t{1} << 52) - 3}) {
            sweep_one(layout, base, min_ts, D, 3, start, &out);
          }
        }
      }
    }
  }
  // Both outcomes occur: the sweep reaches past the limit and stays inside it.
  EXPECT_GT(out.refused, 0);
  EXPECT_GT(out.accepted, 0);
}

// The command line of the report: t2t with max_timescale 1e-308 and
// min_timescale 1e308 gave 24 NaN among its 32 entries.
TEST(TableLimits, T2tWithTimescalesAtTheEndsOfTheDoubleRangeIsRefused) {
  const tokpos::TableOptions o{.layout = Layout::kT2T, .base = 1e-308, .min_timescale = 1e308};
  try {
    (void)tokpos::position_table(2, 16, 0, o);
    FAIL() << "accepted";
  } catch (const tokpos::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("base = 1e-308 with min_timescale = 1e+308"), std::string::npos) << m;
    EXPECT_NE(m.find("pair 0 of t2t at D = 16"), std::string::npos) << m;
  }
  EXPECT_THROW((void)tokpos::frequency(0, 16, o), tokpos::Error);
  EXPECT_THROW((void)tokpos::position_value(0, 0, 16, o), tokpos::Error);
  // A base below 1 whose frequencies stay computable is accepted, and its
  // values are exact (checked by the sweep); far positions of it are not.
  const tokpos::TableOptions small{.base = 1e-10};
  EXPECT_NO_THROW((void)tokpos::position_table(3, 4, 4000000000, small));
  EXPECT_THROW((void)tokpos::position_table(3, 4, int64_t{1} << 52, small), tokpos::Error);
}

}  // namespace
