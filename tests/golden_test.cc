// tokpos against golden tables built by each project's own formula
// (tools/make_golden.py, PyTorch/numpy): agreement within that variant's own
// float32 rounding, and tokpos closer to the exact value than every float32
// reference. Prints both errors for each table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exact_reference.h"
#include "tokpos/npy.h"
#include "tokpos/position_table.h"

namespace {

using tokpos::testing::quad;

struct Golden {
  nlohmann::json meta;
  std::vector<float> table;
};

std::vector<Golden> load_all() {
  const std::string dir = std::string(TOKPOS_TEST_DATA) + "/golden/";
  std::ifstream in(dir + "manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  std::vector<Golden> out;
  for (const auto& m : manifest["tables"]) {
    const auto a = tokpos::read_npy(dir + m["file"].get<std::string>());
    EXPECT_EQ(a.descr, "<f4");
    std::vector<float> t(a.data.size() / 4);
    std::memcpy(t.data(), a.data.data(), a.data.size());
    out.push_back({m, std::move(t)});
  }
  return out;
}

TEST(Golden, EveryTableAgreesAndTokposIsCloserToExact) {
  const auto all = load_all();
  ASSERT_GE(all.size(), 30u);
  for (const auto& g : all) {
    const auto& m = g.meta;
    const int64_t L = m["L"], D = m["D"], start = m["start"], pad = m["padding_idx"];
    const std::string layout = m["layout"];
    const tokpos::TableOptions o{.layout = *tokpos::parse_layout(layout),
                                 .base = m["base"],
                                 .min_timescale = m["min_timescale"],
                                 .padding_idx = pad >= 0 ? std::optional<int64_t>(pad) : std::nullopt};
    const auto ours = tokpos::position_table(L, D, start, o);
    const tokpos::testing::RefOptions ref{
        .layout = layout, .base = m["base"], .min_timescale = m["min_timescale"], .padding_idx = pad};
    const bool f32 = m["computed_in"] == "float32";
    double err_ours = 0, err_ref = 0;
    for (int64_t r = 0; r < L; ++r)
      for (int64_t i = 0; i < D; ++i) {
        const quad x = tokpos::testing::exact_entry(ref, start + r, i, D);
        const double e_ours = static_cast<double>(fabsq(static_cast<quad>(ours[r * D + i]) - x));
        const double e_ref = static_cast<double>(fabsq(static_cast<quad>(g.table[r * D + i]) - x));
        err_ours = std::max(err_ours, e_ours);
        err_ref = std::max(err_ref, e_ref);
        // The variant's own rounding: float64 angles round once (1 ulp of float at most);
        // float32 angles carry |angle| * 2^-23 more (frequency, product), plus sin/cos.
        const double angle = static_cast<double>(start + r) * 1.0;  // |angle| <= position (frequencies <= 1)
        const double tol = f32 ? std::ldexp(4.0 * angle + 4.0, -24) : std::ldexp(1.0, -24);
        ASSERT_LE(std::abs(ours[r * D + i] - g.table[r * D + i]), tol)
            << m["file"] << " p=" << start + r << " i=" << i << " tokpos " << ours[r * D + i] << " reference "
            << g.table[r * D + i];
      }
    std::printf("%-52s %s  max |error| tokpos %.3g, reference %.3g\n", m["file"].get<std::string>().c_str(),
                f32 ? "f32" : "f64", err_ours, err_ref);
    EXPECT_LE(err_ours, err_ref) << m["file"];
    EXPECT_LE(err_ours, std::ldexp(1.0, -24)) << m["file"];
  }
}

}  // namespace
