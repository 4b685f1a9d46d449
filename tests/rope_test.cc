// RoPE: the frequencies of every scaling type against the formulas of
// transformers' modeling_rope_utils written out here in long double; the
// application against a quad-precision reference (the exact-angle claim up to
// position 2^31 - 1), both layouts, partial rotary dims, the inverse, in
// place; and every bad-input class (C++ and C).
#include <gtest/gtest.h>
#include <quadmath.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "common/rope_angle.h"
#include "tokpos/error.h"
#include "tokpos/ops.h"
#include "tokpos/rope.h"
#include "tokpos/tokpos.h"
#include "expect_error.h"

namespace {

using tokpos::RopeScaling;
using tokpos::RopeType;
using LD = long double;

constexpr LD kPi = 3.141592653589793238462643383279502884L;

std::vector<LD> ref_default(int64_t dim, LD base) {
  std::vector<LD> f;
  for (int64_t i = 0; i < dim; i += 2) f.push_back(1.0L / std::pow(base, static_cast<LD>(i) / static_cast<LD>(dim)));
  return f;
}

void expect_close(const std::vector<double>& got, const std::vector<LD>& want, double rel = 1e-14) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(static_cast<LD>(got[i]) - want[i]), rel * std::fabs(want[i])) << "i = " << i;
  }
}

TEST(RopeFrequencies, DefaultAndLinear) {
  for (int64_t dim : {2, 8, 64, 128, 96}) {
    for (double base : {10000.0, 500000.0, 1e6, 2.5}) {
      const auto r = tokpos::rope_frequencies(dim, base);
      expect_close(r.inv_freq, ref_default(dim, base));
      EXPECT_EQ(r.attention_factor, 1.0);
      RopeScaling s;
      s.type = RopeType::kLinear;
      s.factor = 4.0;
      auto want = ref_default(dim, base);
      for (LD& w : want) w /= 4.0L;
      expect_close(tokpos::rope_frequencies(dim, base, s).inv_freq, want);
    }
  }
  EXPECT_EQ(tokpos::rope_frequencies(64, 10000.0).inv_freq[0], 1.0);
}

TEST(RopeFrequencies, DynamicNtk) {
  RopeScaling s;
  s.type = RopeType::kDynamic;
  s.factor = 2.0;
  s.max_position_embeddings = 2048;
  const int64_t dim = 128;
  for (std::optional<int64_t> seq : {std::optional<int64_t>{}, std::optional<int64_t>{100},
                                     std::optional<int64_t>{2048}, std::optional<int64_t>{5000}}) {
    const LD len = seq && *seq > 2048 ? static_cast<LD>(*seq) : 2048.0L;
    const LD base = 10000.0L * std::pow(2.0L * len / 2048.0L - 1.0L, 128.0L / 126.0L);
    expect_close(tokpos::rope_frequencies(dim, 10000.0, s, seq).inv_freq, ref_default(dim, base), 1e-13);
  }
}

// YaRN as transformers computes it (find_correction_range, linear_ramp_factor, get_mscale).
std::vector<LD> ref_yarn(int64_t dim, LD base, LD factor, LD original, LD beta_fast, LD beta_slow, bool truncate) {
  auto cd = [&](LD rot) { return dim * std::log(original / (rot * 2 * kPi)) / (2 * std::log(base)); };
  LD low = cd(beta_fast), high = cd(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0L);
  high = std::min(high, static_cast<LD>(dim - 1));
  if (low == high) high += 0.001L;
  std::vector<LD> out;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const LD pos = std::pow(base, static_cast<LD>(2 * i) / dim);
    const LD ramp = std::clamp((i - low) / (high - low), 0.0L, 1.0L);
    const LD ef = 1 - ramp;
    out.push_back(1 / (factor * pos) * (1 - ef) + 1 / pos * ef);
  }
  return out;
}

TEST(RopeFrequencies, Yarn) {
  RopeScaling s;
  s.type = RopeType::kYarn;
  s.factor = 4.0;
  s.max_position_embeddings = 32768;
  for (bool truncate : {true, false}) {
    s.truncate = truncate;
    const auto r = tokpos::rope_frequencies(128, 1e6, s);
    expect_close(r.inv_freq, ref_yarn(128, 1e6L, 4, 32768, 32, 1, truncate), 1e-13);
    EXPECT_NEAR(r.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-15);
  }
  // DeepSeek-V3: factor from the two lengths, mscale / mscale_all_dim.
  s.truncate = true;
  s.factor = 40.0;
  s.original_max_position_embeddings = 4096;
  s.max_position_embeddings = 163840;
  s.mscale = 1.0;
  s.mscale_all_dim = 0.707;
  s.beta_fast = 16.0;
  s.beta_slow = 2.0;
  const auto r = tokpos::rope_frequencies(64, 10000.0, s);
  expect_close(r.inv_freq, ref_yarn(64, 10000, 40, 4096, 16, 2, true), 1e-13);
  const LD m1 = 0.1L * 1.0L * std::log(40.0L) + 1, m2 = 0.1L * 0.707L * std::log(40.0L) + 1;
  EXPECT_NEAR(r.attention_factor, static_cast<double>(m1 / m2), 1e-15);
  s.attention_factor = 0.5;
  EXPECT_EQ(tokpos::rope_frequencies(64, 10000.0, s).attention_factor, 0.5);
  // A factor unlike the ratio of the lengths wins; without one, the ratio.
  RopeScaling f;
  f.type = RopeType::kYarn;
  f.factor = 8.0;
  f.original_max_position_embeddings = 4096;
  f.max_position_embeddings = 163840;
  const auto rf = tokpos::rope_frequencies(64, 10000.0, f);
  expect_close(rf.inv_freq, ref_yarn(64, 10000, 8, 4096, 32, 1, true), 1e-13);
  EXPECT_NEAR(rf.attention_factor, 0.1 * std::log(8.0) + 1.0, 1e-15);
  f.factor.reset();
  expect_close(tokpos::rope_frequencies(64, 10000.0, f).inv_freq, ref_yarn(64, 10000, 40, 4096, 32, 1, true), 1e-13);
  // beta 0 stands for the default, as transformers' "or".
  RopeScaling z;
  z.type = RopeType::kYarn;
  z.factor = 2.0;
  z.max_position_embeddings = 4096;
  z.beta_fast = 0.0;
  z.beta_slow = 0.0;
  expect_close(tokpos::rope_frequencies(64, 10000.0, z).inv_freq, ref_yarn(64, 10000, 2, 4096, 32, 1, true), 1e-13);
}

TEST(RopeFrequencies, Longrope) {
  const int64_t dim = 16;
  RopeScaling s;
  s.type = RopeType::kLongrope;
  for (int i = 0; i < dim / 2; ++i) {
    s.short_factor.push_back(1.0 + 0.01 * i);
    s.long_factor.push_back(1.5 + 0.5 * i);
  }
  s.original_max_position_embeddings = 4096;
  s.max_position_embeddings = 131072;
  const LD factor = 131072.0L / 4096.0L;
  const double want_af = static_cast<double>(std::sqrt(1 + std::log(factor) / std::log(4096.0L)));
  for (std::optional<int64_t> seq : {std::optional<int64_t>{}, std::optional<int64_t>{4096},
                                     std::optional<int64_t>{4097}}) {
    const auto r = tokpos::rope_frequencies(dim, 10000.0, s, seq);
    const bool use_long = seq && *seq > 4096;
    std::vector<LD> want;
    for (int64_t i = 0; i < dim / 2; ++i) {
      const LD ext = use_long ? s.long_factor[i] : s.short_factor[i];
      want.push_back(1 / (ext * std::pow(10000.0L, static_cast<LD>(2 * i) / dim)));
    }
    expect_close(r.inv_freq, want);
    EXPECT_NEAR(r.attention_factor, want_af, 1e-15);
  }
  // Without original_max_position_embeddings: factor <= 1 gives 1.
  RopeScaling t = s;
  t.original_max_position_embeddings.reset();
  t.factor = 1.0;
  EXPECT_EQ(tokpos::rope_frequencies(dim, 10000.0, t).attention_factor, 1.0);
}

TEST(RopeFrequencies, Llama3) {
  RopeScaling s;
  s.type = RopeType::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  const auto r = tokpos::rope_frequencies(128, 500000.0, s);
  std::vector<LD> want = ref_default(128, 500000.0L);
  int kept = 0, divided = 0, smoothed = 0;
  for (LD& f : want) {
    const LD wavelen = 2 * kPi / f;
    if (wavelen < 8192.0L / 4) {
      ++kept;
    } else if (wavelen > 8192.0L / 1) {
      f /= 8;
      ++divided;
    } else {
      const LD smooth = (8192.0L / wavelen - 1) / (4 - 1);
      f = (1 - smooth) * f / 8 + smooth * f;
      ++smoothed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
  expect_close(r.inv_freq, want);
  EXPECT_EQ(r.attention_factor, 1.0);
}

// transformers 5.x's proportional: dim is the head dimension, and the first
// int(partial_rotary_factor * dim // 2) of its default frequencies are kept,
// divided by factor, the rest 0. The counts below are Python's, worked out
// there: 0.06 * 100 rounds to 6.0 in float64 (the real product is below 6),
// so 3 are kept, not 2.
TEST(RopeFrequencies, Proportional) {
  struct Case {
    int64_t dim;
    double partial;
    size_t kept;
  };
  for (const Case& c : {Case{16, 0.5, 4}, Case{16, 0.25, 2}, Case{12, 0.25, 1}, Case{10, 0.7, 3}, Case{100, 0.06, 3},
                        Case{256, 0.25, 32}, Case{8, 1.0, 4}, Case{16, 0.05, 0}}) {
    for (double factor : {1.0, 2.0, 0.5}) {
      RopeScaling s;
      s.type = RopeType::kProportional;
      s.partial_rotary_factor = c.partial;
      s.factor = factor;
      const auto r = tokpos::rope_frequencies(c.dim, 1000.0, s);
      std::vector<LD> want = ref_default(c.dim, 1000.0L);
      for (size_t i = 0; i < want.size(); ++i) want[i] = i < c.kept ? want[i] / static_cast<LD>(factor) : 0.0L;
      expect_close(r.inv_freq, want);
      for (size_t i = c.kept; i < r.inv_freq.size(); ++i) EXPECT_EQ(r.inv_freq[i], 0.0) << c.dim << " " << i;
      EXPECT_EQ(r.attention_factor, 1.0);
    }
  }
  // Neither key: every default frequency of the head, as they are.
  RopeScaling bare;
  bare.type = RopeType::kProportional;
  const auto r = tokpos::rope_frequencies(64, 10000.0, bare);
  expect_close(r.inv_freq, ref_default(64, 10000.0L));
  EXPECT_EQ(r.attention_factor, 1.0);
  EXPECT_EQ(tokpos::rope_type_from_name("proportional"), RopeType::kProportional);
  EXPECT_STREQ(tokpos::rope_type_name(RopeType::kProportional), "proportional");
  EXPECT_EQ(tokpos::rope_scaling_type("proportional", std::nullopt), RopeType::kProportional);
}

void expect_error(const std::string& needle, auto&& call) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RopeFrequencies, BadInputs) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  expect_error("dim = 7", [] { tokpos::rope_frequencies(7, 10000.0); });
  expect_error("dim = 0", [] { tokpos::rope_frequencies(0, 10000.0); });
  for (double b : {0.0, -1.0, inf, nan}) expect_error("base", [&] { tokpos::rope_frequencies(8, b); });
  expect_error("seq_len = -1", [] { tokpos::rope_frequencies(8, 10.0, {}, -1); });
  expect_error("'nope' is not one of", [] { tokpos::rope_type_from_name("nope"); });
  RopeScaling s;
  s.type = RopeType::kLinear;
  expect_error("linear scaling needs 'factor'", [&] { tokpos::rope_frequencies(8, 10.0, s); });
  for (double f : {0.0, -2.0, inf, nan}) {
    s.factor = f;
    expect_error("factor", [&] { tokpos::rope_frequencies(8, 10.0, s); });
  }
  RopeScaling d;
  d.type = RopeType::kDynamic;
  d.factor = 2.0;
  expect_error("dynamic scaling needs 'max_position_embeddings'", [&] { tokpos::rope_frequencies(8, 10.0, d); });
  d.max_position_embeddings = 0;
  expect_error("max_position_embeddings = 0 must be >= 1", [&] { tokpos::rope_frequencies(8, 10.0, d); });
  RopeScaling y;
  y.type = RopeType::kYarn;
  y.factor = 2.0;
  expect_error("yarn scaling needs 'max_position_embeddings'", [&] { tokpos::rope_frequencies(8, 10.0, y); });
  y.max_position_embeddings = 4096;
  y.beta_fast = 1.0;
  y.beta_slow = 32.0;
  expect_error("beta_fast = 1 must be > beta_slow = 32", [&] { tokpos::rope_frequencies(8, 10.0, y); });
  y.beta_fast.reset();
  y.beta_slow.reset();
  y.attention_factor = -1.0;
  expect_error("attention_factor = -1", [&] { tokpos::rope_frequencies(8, 10.0, y); });
  RopeScaling l;
  l.type = RopeType::kLongrope;
  l.max_position_embeddings = 4096;
  l.factor = 2.0;
  expect_error("needs 'short_factor'", [&] { tokpos::rope_frequencies(8, 10.0, l); });
  l.short_factor = {1, 1, 1, 1};
  expect_error("needs 'long_factor'", [&] { tokpos::rope_frequencies(8, 10.0, l); });
  l.long_factor = {1, 1, 1};
  expect_error("long_factor has 3 entries; dim / 2 = 4", [&] { tokpos::rope_frequencies(8, 10.0, l); });
  l.long_factor = {1, 1, 0, 1};
  expect_error("long_factor[2] = 0", [&] { tokpos::rope_frequencies(8, 10.0, l); });
  RopeScaling m;
  m.type = RopeType::kLlama3;
  m.factor = 8.0;
  m.low_freq_factor = 1.0;
  m.high_freq_factor = 4.0;
  expect_error("needs 'original_max_position_embeddings'", [&] { tokpos::rope_frequencies(8, 10.0, m); });
  m.original_max_position_embeddings = 8192;
  m.low_freq_factor = 4.0;
  expect_error("low_freq_factor = 4 must be < high_freq_factor = 4", [&] { tokpos::rope_frequencies(8, 10.0, m); });
  RopeScaling p;
  p.type = RopeType::kProportional;
  p.partial_rotary_factor = 1.5;
  expect_error("partial_rotary_factor = 1.5 must be in (0, 1]", [&] { tokpos::rope_frequencies(8, 10.0, p); });
  for (double v : {0.0, -0.25, inf, nan}) {
    p.partial_rotary_factor = v;
    expect_error("partial_rotary_factor = ", [&] { tokpos::rope_frequencies(8, 10.0, p); });
  }
  p.partial_rotary_factor = 0.5;
  for (double f : {0.0, -2.0, inf, nan}) {
    p.factor = f;
    expect_error("factor = ", [&] { tokpos::rope_frequencies(8, 10.0, p); });
  }
  expect_error("'nope' is not one of default, linear, dynamic, yarn, longrope, llama3, proportional",
               [] { tokpos::rope_type_from_name("nope"); });
}

TEST(RopeFrequencies, CApi) {
  tokpos_rope_scaling s;
  tokpos_rope_scaling_init(&s);
  s.type = TOKPOS_ROPE_LLAMA3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  std::vector<double> inv(64, -1.0);
  double af = -1.0;
  ASSERT_EQ(tokpos_rope_frequencies(inv.data(), &af, 128, 500000.0, &s, 0), TOKPOS_OK) << tokpos_last_error();
  RopeScaling c;
  c.type = RopeType::kLlama3;
  c.factor = 8.0;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  c.original_max_position_embeddings = 8192;
  EXPECT_EQ(inv, tokpos::rope_frequencies(128, 500000.0, c).inv_freq);
  EXPECT_EQ(af, 1.0);
  ASSERT_EQ(tokpos_rope_frequencies(inv.data(), &af, 8, 10000.0, nullptr, 0), TOKPOS_OK);
  expect_close(std::vector<double>(inv.begin(), inv.begin() + 4), ref_default(8, 10000.0L));
  // Failures name the value and leave the outputs as they were.
  std::vector<double> before(inv);
  s.high_freq_factor = 0.5;
  EXPECT_EQ(tokpos_rope_frequencies(inv.data(), &af, 128, 500000.0, &s, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("low_freq_factor = 1 must be < high_freq_factor = 0.5"),
            std::string::npos)
      << tokpos_last_error();
  EXPECT_EQ(inv, before);
  s.type = static_cast<tokpos_rope_type>(9);
  EXPECT_EQ(tokpos_rope_frequencies(inv.data(), &af, 128, 500000.0, &s, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("scaling->type = 9"), std::string::npos);
  EXPECT_EQ(tokpos_rope_frequencies(nullptr, &af, 128, 500000.0, nullptr, 0), TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_rope_frequencies(inv.data(), &af, 128, 500000.0, nullptr, -3), TOKPOS_INVALID_ARGUMENT);
  tokpos_rope_scaling_init(&s);
  s.type = TOKPOS_ROPE_LONGROPE;
  s.short_factor_len = 4;
  EXPECT_EQ(tokpos_rope_frequencies(inv.data(), &af, 8, 10000.0, &s, 0), TOKPOS_NULL_POINTER);
  EXPECT_EQ(inv, before);
}

TEST(RopeFrequencies, CApiProportional) {
  tokpos_rope_scaling s;
  tokpos_rope_scaling_init(&s);
  EXPECT_TRUE(std::isnan(s.partial_rotary_factor));
  s.type = TOKPOS_ROPE_PROPORTIONAL;
  s.factor = 2.0;
  s.partial_rotary_factor = 0.25;
  std::vector<double> inv(8, -1.0);
  double af = -1.0;
  ASSERT_EQ(tokpos_rope_frequencies(inv.data(), &af, 16, 1000.0, &s, 0), TOKPOS_OK) << tokpos_last_error();
  std::vector<LD> want = ref_default(16, 1000.0L);
  for (size_t i = 0; i < want.size(); ++i) want[i] = i < 2 ? want[i] / 2 : 0.0L;
  expect_close(inv, want);
  EXPECT_EQ(af, 1.0);
  // NaN (what init sets) is 1: every frequency kept.
  s.partial_rotary_factor = std::numeric_limits<double>::quiet_NaN();
  ASSERT_EQ(tokpos_rope_frequencies(inv.data(), &af, 16, 1000.0, &s, 0), TOKPOS_OK) << tokpos_last_error();
  want = ref_default(16, 1000.0L);
  for (LD& w : want) w /= 2;
  expect_close(inv, want);
  // Out of (0, 1]: refused by name, the outputs as they were.
  const std::vector<double> before(inv);
  for (double v : {1.5, 0.0, -1.0}) {
    s.partial_rotary_factor = v;
    af = -1.0;
    EXPECT_EQ(tokpos_rope_frequencies(inv.data(), &af, 16, 1000.0, &s, 0), TOKPOS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tokpos_last_error()).find("partial_rotary_factor = "), std::string::npos)
        << tokpos_last_error();
    EXPECT_NE(std::string(tokpos_last_error()).find(" must be in (0, 1]"), std::string::npos) << tokpos_last_error();
    EXPECT_EQ(inv, before);
    EXPECT_EQ(af, -1.0);
  }
  s.type = static_cast<tokpos_rope_type>(7);
  EXPECT_EQ(tokpos_rope_frequencies(inv.data(), &af, 16, 1000.0, &s, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("scaling->type = 7 is not a tokpos_rope_type (0 default .. 6 "
                                                  "proportional)"),
            std::string::npos)
      << tokpos_last_error();
}

// ---- Application -------------------------------------------------------------

using tokpos::DType;
using tokpos::RopeApplyOptions;
using tokpos::RopeLayout;
using tokpos::TensorView;

// cos and sin of p * w in quad: p * w is exact (31 + 53 bits), and the
// reduction by 2 pi in quad loses about 2^-80.
void quad_cos_sin(int64_t p, double w, __float128* c, __float128* s) {
  const __float128 two_pi = 8 * atanq(static_cast<__float128>(1));
  __float128 a = static_cast<__float128>(p) * static_cast<__float128>(w);
  a = fmodq(a, two_pi);
  sincosq(a, s, c);
}

// out = rope(x) for float32 x (N, 1, D) with positions (N), out of place.
std::vector<float> apply(const std::vector<float>& x, const std::vector<int64_t>& pos, int64_t D,
                         const std::vector<double>& inv, const RopeApplyOptions& o = {}) {
  const auto N = static_cast<int64_t>(pos.size());
  std::vector<float> out(x.size(), std::nanf(""));
  const TensorView xv(x.data(), DType::kF32, {N, 1, D}), ov(out.data(), DType::kF32, {N, 1, D});
  const TensorView pv(pos.data(), DType::kI64, {N});
  tokpos::ops::apply_rope(ov, xv, pv, inv, o);
  return out;
}

// Pairs (1, 0) come out as (c, s) exactly: the cos and sin the kernel uses,
// compared with quad values for positions up to 2^31 - 1.
TEST(RopeApply, CosAndSinAreWithin2ToMinus24OfTheExactValues) {
  const int64_t half = 64, D = 2 * half;
  const auto inv = tokpos::rope_frequencies(D, 500000.0).inv_freq;
  std::vector<int64_t> pos;
  for (int64_t p = 0; p < 300; ++p) pos.push_back(p);
  uint64_t z = 12345;
  for (int k = 0; k < 700; ++k) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    pos.push_back(static_cast<int64_t>((z >> 33) % (uint64_t{1} << 31)));
  }
  for (int64_t p : {int64_t{1} << 24, (int64_t{1} << 30) + 7, (int64_t{1} << 31) - 2, (int64_t{1} << 31) - 1}) {
    pos.push_back(p);
  }
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    const auto N = static_cast<int64_t>(pos.size());
    std::vector<float> x(static_cast<size_t>(N * D), 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < half; ++i) x[static_cast<size_t>(n * D + (layout == RopeLayout::kHalf ? i : 2 * i))] = 1;
    }
    RopeApplyOptions o;
    o.layout = layout;
    const auto out = apply(x, pos, D, inv, o);
    double worst = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < half; ++i) {
        __float128 c, s;
        quad_cos_sin(pos[static_cast<size_t>(n)], inv[static_cast<size_t>(i)], &c, &s);
        const int64_t i0 = layout == RopeLayout::kHalf ? i : 2 * i, i1 = layout == RopeLayout::kHalf ? i + half : 2 * i + 1;
        const double ec = static_cast<double>(fabsq(static_cast<__float128>(out[static_cast<size_t>(n * D + i0)]) - c));
        const double es = static_cast<double>(fabsq(static_cast<__float128>(out[static_cast<size_t>(n * D + i1)]) - s));
        worst = std::max({worst, ec, es});
        ASSERT_LE(ec, 0x1p-24) << "cos at p = " << pos[static_cast<size_t>(n)] << ", i = " << i;
        ASSERT_LE(es, 0x1p-24) << "sin at p = " << pos[static_cast<size_t>(n)] << ", i = " << i;
      }
    }
    // Correct rounding to float gives at most half an ulp, 2^-25 below 1.
    EXPECT_LE(worst, 0x1p-25 * (1 + 1e-6));
    std::printf("largest |cos/sin - exact| over %lld positions x %lld pairs: %.3g (2^%.2f)\n",
                static_cast<long long>(N), static_cast<long long>(half), worst, std::log2(worst));
  }
}

// The double cos and sin before the float rounding (common/rope_angle.h):
// within 4e-16 of the exact values over every position class and frequencies
// from 2^20 down to 1e-9, including angles near every multiple of pi/4 (where
// the quarter-turn reduction switches octant).
TEST(RopeApply, DoubleAnglesAreWithin4e16OfTheExactValues) {
  std::vector<double> freqs = {0x1p20, 1.0, 0.5, 1e-3, 1e-6, 1e-9, 0.7853981633974483, 1.5707963267948966,
                               3.141592653589793, 2.356194490192345};
  for (double w : tokpos::rope_frequencies(128, 500000.0).inv_freq) freqs.push_back(w);
  std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5, 7, 8, 1000, 4095, int64_t{1} << 24, (int64_t{1} << 31) - 1};
  uint64_t z = 99;
  for (int k = 0; k < 300; ++k) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    pos.push_back(static_cast<int64_t>((z >> 33) % (uint64_t{1} << 31)));
  }
  double worst = 0;
  for (double w : freqs) {
    const auto turns = tokpos::detail::rope_turns(w);
    for (int64_t p : pos) {
      double c, s;
      tokpos::detail::rope_cos_sin(p, turns, &c, &s);
      __float128 qc, qs;
      quad_cos_sin(p, w, &qc, &qs);
      const double ec = static_cast<double>(fabsq(static_cast<__float128>(c) - qc));
      const double es = static_cast<double>(fabsq(static_cast<__float128>(s) - qs));
      worst = std::max({worst, ec, es});
      ASSERT_LE(ec, 4e-16) << "cos, p = " << p << ", w = " << w;
      ASSERT_LE(es, 4e-16) << "sin, p = " << p << ", w = " << w;
    }
  }
  std::printf("largest |double cos/sin - exact|: %.3g\n", worst);
}

// The rotation against long double, both layouts, partial rotary dims, the
// attention factor; the pass-through dims are copied bit for bit.
TEST(RopeApply, LayoutsAndPartialRotaryAgainstLongDouble) {
  const int64_t D = 80, half = 24;  // rotary_dim 48 of 80
  const auto inv = tokpos::rope_frequencies(2 * half, 10000.0).inv_freq;
  std::vector<int64_t> pos{0, 1, 2, 17, 4095, 131071, 1000000, 2147483647};
  const auto N = static_cast<int64_t>(pos.size());
  std::vector<float> x(static_cast<size_t>(N * D));
  uint64_t z = 99;
  for (float& v : x) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<double>(z >> 11) * 0x1p-53 * 4 - 2);
  }
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    RopeApplyOptions o;
    o.layout = layout;
    o.attention_factor = 1.1;
    o.rotary_dim = 2 * half;
    const auto out = apply(x, pos, D, inv, o);
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = &x[static_cast<size_t>(n * D)];
      const float* orow = &out[static_cast<size_t>(n * D)];
      for (int64_t i = 0; i < half; ++i) {
        __float128 cq, sq;
        quad_cos_sin(pos[static_cast<size_t>(n)], inv[static_cast<size_t>(i)], &cq, &sq);
        const LD c = static_cast<LD>(cq) * 1.1L, s = static_cast<LD>(sq) * 1.1L;
        const int64_t i0 = layout == RopeLayout::kHalf ? i : 2 * i, i1 = layout == RopeLayout::kHalf ? i + half : 2 * i + 1;
        const LD w0 = xr[i0] * c - xr[i1] * s, w1 = xr[i1] * c + xr[i0] * s;
        // cos and sin within 2^-24 * 1.1 each, two products and a sum in float.
        const LD tol = 2.2L * 4 * 0x1p-24L * (std::fabs(xr[i0]) + std::fabs(xr[i1]));
        EXPECT_LE(std::fabs(orow[i0] - w0), tol) << "n " << n << " i " << i;
        EXPECT_LE(std::fabs(orow[i1] - w1), tol) << "n " << n << " i " << i;
      }
      for (int64_t d = 2 * half; d < D; ++d) {
        EXPECT_EQ(std::bit_cast<uint32_t>(orow[d]), std::bit_cast<uint32_t>(xr[d])) << "pass-through dim " << d;
      }
    }
  }
}

TEST(RopeApply, InverseUndoesForwardAndInPlaceMatches) {
  const int64_t B = 2, T = 9, H = 3, D = 64;
  const auto inv = tokpos::rope_frequencies(D, 10000.0).inv_freq;
  std::vector<float> x(static_cast<size_t>(B * T * H * D));
  for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(static_cast<float>(k) * 0.37f) * 3.0f;
  std::vector<int32_t> pos(static_cast<size_t>(B * T));
  for (size_t k = 0; k < pos.size(); ++k) pos[k] = static_cast<int32_t>(k * 104729 % 2000000000);
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    RopeApplyOptions fwd, back;
    fwd.layout = back.layout = layout;
    back.inverse = true;
    std::vector<float> y(x.size()), z(x.size()), inplace = x;
    const TensorView xv(x.data(), DType::kF32, {B, T, H, D}), yv(y.data(), DType::kF32, {B, T, H, D});
    const TensorView zv(z.data(), DType::kF32, {B, T, H, D}), iv(inplace.data(), DType::kF32, {B, T, H, D});
    const TensorView pv(pos.data(), DType::kI32, {B, T});
    tokpos::ops::apply_rope(yv, xv, pv, inv, fwd);
    tokpos::ops::apply_rope(zv, yv, pv, inv, back);
    for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(z[k], x[k], 8 * 0x1p-24 * 3.0) << k;
    tokpos::ops::apply_rope(iv, iv, pv, inv, fwd);
    EXPECT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float)));
  }
}

TEST(RopeApply, SixteenBitTypesRoundOnceFromFloat) {
  const int64_t T = 5, D = 8;
  const auto inv = tokpos::rope_frequencies(D, 10000.0).inv_freq;
  std::vector<int64_t> pos{0, 3, 70000, 123456789, 2147483647};
  std::vector<uint16_t> xb(static_cast<size_t>(T * D)), ob(xb.size());
  std::vector<float> xf(xb.size());
  for (size_t k = 0; k < xb.size(); ++k) {
    xb[k] = static_cast<uint16_t>(0x3f80 + (k * 37) % 200);  // bf16 values in [1, 2)
    xf[k] = std::bit_cast<float>(static_cast<uint32_t>(xb[k]) << 16);
  }
  const TensorView xv(xb.data(), DType::kBF16, {T, 1, D}), ov(ob.data(), DType::kBF16, {T, 1, D});
  const TensorView pv(pos.data(), DType::kI64, {T});
  tokpos::ops::apply_rope(ov, xv, pv, inv);
  const auto want32 = apply(xf, pos, D, inv);
  for (size_t k = 0; k < xb.size(); ++k) {
    // Round to nearest even of the float result, written out independently.
    const uint32_t u = std::bit_cast<uint32_t>(want32[k]);
    const auto want = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    EXPECT_EQ(ob[k], want) << k;
  }
}

template <typename F>
void expect_op_error(tokpos::Status status, const std::string& needle, F&& call) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RopeApply, BadInputsNameTheValueAndWriteNothing) {
  const int64_t B = 2, T = 3, H = 2, D = 8;
  std::vector<float> x(static_cast<size_t>(B * T * H * D), 1.0f), out(x.size(), 7.0f);
  std::vector<int64_t> pos(static_cast<size_t>(B * T), 5);
  const std::vector<double> inv{1.0, 0.1, 0.01, 0.001};
  const TensorView xv(x.data(), DType::kF32, {B, T, H, D}), ov(out.data(), DType::kF32, {B, T, H, D});
  const TensorView pv(pos.data(), DType::kI64, {B, T});
  using tokpos::Status;
  namespace ops = tokpos::ops;
  const std::vector<float> before = out;
  auto check_untouched = [&] { EXPECT_EQ(0, std::memcmp(out.data(), before.data(), out.size() * sizeof(float))); };
  std::vector<uint16_t> half_out(x.size());
  const TensorView hv(half_out.data(), DType::kF16, {B, T, H, D});
  expect_op_error(Status::kInvalidArgument, "out has dtype f16 but x has f32", [&] { ops::apply_rope(hv, xv, pv, inv); });
  const TensorView o3(out.data(), DType::kF32, {B * T, H, D});
  expect_op_error(Status::kShapeMismatch, "out has 3 dimensions but x has 4", [&] { ops::apply_rope(o3, xv, pv, inv); });
  const TensorView p1(pos.data(), DType::kI64, {B * T});
  expect_op_error(Status::kShapeMismatch, "positions has 1 dimensions", [&] { ops::apply_rope(ov, xv, p1, inv); });
  const TensorView p2(pos.data(), DType::kI64, {T, B});
  expect_op_error(Status::kShapeMismatch, "positions starts with shape (3, 2)", [&] { ops::apply_rope(ov, xv, p2, inv); });
  RopeApplyOptions o;
  o.rotary_dim = 6;
  expect_op_error(Status::kInvalidArgument, "rotary_dim = 6 must be 2 * len(inv_freq) = 8",
                  [&] { ops::apply_rope(ov, xv, pv, inv, o); });
  const std::vector<double> too_many(5, 0.5);
  expect_op_error(Status::kInvalidArgument, "rotary_dim = 10 must be <= the head dim 8",
                  [&] { ops::apply_rope(ov, xv, pv, too_many); });
  for (double af : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    RopeApplyOptions a;
    a.attention_factor = af;
    expect_op_error(Status::kInvalidArgument, "attention_factor", [&] { ops::apply_rope(ov, xv, pv, inv, a); });
  }
  for (double w : {std::nan(""), std::numeric_limits<double>::infinity(), 0x1p21}) {
    std::vector<double> bad = inv;
    bad[2] = w;
    expect_op_error(Status::kInvalidArgument, "inv_freq[2]", [&] { ops::apply_rope(ov, xv, pv, bad); });
  }
  RopeApplyOptions l;
  l.layout = static_cast<RopeLayout>(7);
  expect_op_error(Status::kInvalidArgument, "layout 7", [&] { ops::apply_rope(ov, xv, pv, inv, l); });
  pos[4] = -1;
  expect_op_error(Status::kPositionOutOfRange, "position -1 at (b=1, t=1) is outside [0, 2^31",
                  [&] { ops::apply_rope(ov, xv, pv, inv); });
  pos[4] = int64_t{1} << 31;
  expect_op_error(Status::kPositionOutOfRange, "position 2147483648 at (b=1, t=1)",
                  [&] { ops::apply_rope(ov, xv, pv, inv); });
  pos[4] = 5;
  // Overlap other than exact aliasing.
  const TensorView shifted(x.data() + 1, DType::kF32, {B, T, H, D - 1}, {T * H * D, H * D, D, 1});
  const TensorView xs(x.data(), DType::kF32, {B, T, H, D - 1}, {T * H * D, H * D, D, 1});
  expect_op_error(Status::kInvalidArgument, "out overlaps x", [&] {
    ops::apply_rope(shifted, xs, pv, std::vector<double>{1.0, 0.1, 0.01});
  });
  DLTensor dev = *ov.get();
  dev.device = {kDLCUDA, 0};
  expect_op_error(Status::kUnimplemented, "kDLCUDA", [&] { ops::apply_rope(dev, xv, pv, inv); });
  check_untouched();
  // The C entry point: statuses, messages, nothing written.
  EXPECT_EQ(tokpos_op_apply_rope(ov.get(), xv.get(), pv.get(), inv.data(), 4, TOKPOS_ROPE_HALF, -1, 0.0, 0),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("tokpos_op_apply_rope: attention_factor = 0"), std::string::npos)
      << tokpos_last_error();
  EXPECT_EQ(tokpos_op_apply_rope(ov.get(), xv.get(), pv.get(), inv.data(), 4, static_cast<tokpos_rope_layout>(3), -1,
                                 1.0, 0),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_op_apply_rope(ov.get(), xv.get(), pv.get(), nullptr, 4, TOKPOS_ROPE_HALF, -1, 1.0, 0),
            TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_op_apply_rope(ov.get(), xv.get(), pv.get(), inv.data(), 4, TOKPOS_ROPE_HALF, -1, 1.0, 2),
            TOKPOS_INVALID_ARGUMENT);
  check_untouched();
  ASSERT_EQ(tokpos_op_apply_rope(ov.get(), xv.get(), pv.get(), inv.data(), 4, TOKPOS_ROPE_INTERLEAVED, 8, 1.0, 0),
            TOKPOS_OK)
      << tokpos_last_error();
  std::vector<float> want(x.size());
  const TensorView wv(want.data(), DType::kF32, {B, T, H, D});
  RopeApplyOptions il;
  il.layout = RopeLayout::kInterleaved;
  ops::apply_rope(wv, xv, pv, inv, il);
  EXPECT_EQ(0, std::memcmp(out.data(), want.data(), out.size() * sizeof(float)));
}

// ---- Application by given cos and sin tables ------------------------------------

using tokpos::RopeTablesOptions;

// bfloat16 rounding of a float, to nearest even (finite values).
float round_bf16(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xffff0000u);
}
uint16_t bf16_bits(float v) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(round_bf16(v)) >> 16); }
float bf16_value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// transformers' q * cos + rotate_half(q) * sin for one head row x (D) and
// rows c, s (R), each product and the sum rounded by `rnd`; the transposed
// map when inverse.
template <typename Round>
std::vector<float> rotate_half_formula(const float* x, const float* c, const float* s, int64_t D, int64_t R,
                                       bool inverse, Round rnd) {
  std::vector<float> out(x, x + D);
  const int64_t h = R / 2;
  for (int64_t i = 0; i < h; ++i) {
    const float x0 = x[i], x1 = x[i + h];
    if (!inverse) {
      out[static_cast<size_t>(i)] = rnd(rnd(x0 * c[i]) + rnd(-x1 * s[i]));
      out[static_cast<size_t>(i + h)] = rnd(rnd(x1 * c[i + h]) + rnd(x0 * s[i + h]));
    } else {
      out[static_cast<size_t>(i)] = rnd(rnd(x0 * c[i]) + rnd(x1 * s[i + h]));
      out[static_cast<size_t>(i + h)] = rnd(rnd(x1 * c[i + h]) - rnd(x0 * s[i]));
    }
  }
  return out;
}

std::vector<float> wide_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t k = 0; k < n; ++k) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(seed >> 11) * 0x1p-53 * 2.0 - 1.0;
    v[k] = static_cast<float>(std::ldexp(u, static_cast<int>(k % 13) - 6));
  }
  return v;
}

// x held as transformers holds q, (B, H, T, D) in memory, read through the
// strides of its (B, T, H, D) view; cos and sin one (T, R) block shared by
// every b (stride 0); partial rotary (R < D). float32: the formula's bits.
TEST(RopeTables, HeadsFirstMemoryAndSharedRowsGiveTheFormulasBits) {
  const int64_t B = 2, H = 3, T = 5, D = 12, R = 8;
  const auto x = wide_values(static_cast<size_t>(B * H * T * D), 7);
  const auto c = wide_values(static_cast<size_t>(T * R), 8), s = wide_values(static_cast<size_t>(T * R), 9);
  for (bool inverse : {false, true}) {
    std::vector<float> out(x.size(), std::nanf(""));
    const TensorView xv(x.data(), DType::kF32, {B, T, H, D}, {H * T * D, D, T * D, 1});
    const TensorView ov(out.data(), DType::kF32, {B, T, H, D}, {H * T * D, D, T * D, 1});
    const TensorView cv(c.data(), DType::kF32, {B, T, R}, {0, R, 1}), sv(s.data(), DType::kF32, {B, T, R}, {0, R, 1});
    RopeTablesOptions o;
    o.inverse = inverse;
    tokpos::ops::apply_rope_tables(ov, xv, cv, sv, o);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const size_t row = static_cast<size_t>(((b * H + h) * T + t) * D);
          const auto want = rotate_half_formula(x.data() + row, c.data() + t * R, s.data() + t * R, D, R, inverse,
                                                [](float v) { return v; });
          EXPECT_EQ(0, std::memcmp(want.data(), out.data() + row, static_cast<size_t>(D) * sizeof(float)))
              << "b " << b << " h " << h << " t " << t << " inverse " << inverse;
        }
      }
    }
  }
}

// bfloat16: every product and every sum rounded to bfloat16, as torch's
// elementwise ops round them, not the float32 result rounded once.
TEST(RopeTables, Bfloat16RoundsEachProductAndTheSum) {
  const int64_t T = 40, H = 2, D = 16, R = 16;
  const auto xf = wide_values(static_cast<size_t>(T * H * D), 21);
  const auto cf = wide_values(static_cast<size_t>(T * R), 22), sf = wide_values(static_cast<size_t>(T * R), 23);
  std::vector<uint16_t> x(xf.size()), c(cf.size()), s(sf.size()), out(xf.size(), 0xffff);
  for (size_t k = 0; k < x.size(); ++k) x[k] = bf16_bits(xf[k]);
  for (size_t k = 0; k < c.size(); ++k) c[k] = bf16_bits(cf[k]), s[k] = bf16_bits(sf[k]);
  const TensorView xv(x.data(), DType::kBF16, {T, H, D}), ov(out.data(), DType::kBF16, {T, H, D});
  const TensorView cv(c.data(), DType::kBF16, {T, R}), sv(s.data(), DType::kBF16, {T, R});
  tokpos::ops::apply_rope_tables(ov, xv, cv, sv);
  int once_differs = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> cr(static_cast<size_t>(R)), sr(static_cast<size_t>(R));
    for (int64_t i = 0; i < R; ++i) {
      cr[static_cast<size_t>(i)] = bf16_value(c[static_cast<size_t>(t * R + i)]);
      sr[static_cast<size_t>(i)] = bf16_value(s[static_cast<size_t>(t * R + i)]);
    }
    for (int64_t h = 0; h < H; ++h) {
      const size_t row = static_cast<size_t>((t * H + h) * D);
      std::vector<float> xr(static_cast<size_t>(D));
      for (int64_t d = 0; d < D; ++d) xr[static_cast<size_t>(d)] = bf16_value(x[row + static_cast<size_t>(d)]);
      const auto want = rotate_half_formula(xr.data(), cr.data(), sr.data(), D, R, false, round_bf16);
      const auto once = rotate_half_formula(xr.data(), cr.data(), sr.data(), D, R, false, [](float v) { return v; });
      for (int64_t d = 0; d < D; ++d) {
        ASSERT_EQ(bf16_bits(want[static_cast<size_t>(d)]), out[row + static_cast<size_t>(d)]) << "t " << t << " d " << d;
        once_differs += bf16_bits(once[static_cast<size_t>(d)]) != out[row + static_cast<size_t>(d)];
      }
    }
  }
  EXPECT_GT(once_differs, 0);  // the data tells the two roundings apart
}

TEST(RopeTables, BadArgumentsAreNamedAndNothingIsWritten) {
  using tokpos::Status;
  using tokpos::testing::expect_error;
  const int64_t T = 4, H = 2, D = 8;
  std::vector<float> x(static_cast<size_t>(T * H * D), 1.0f), c(static_cast<size_t>(T * D), 0.5f);
  std::vector<float> s = c, out(x.size(), -7.0f);
  std::vector<uint16_t> c16(c.size(), 0x3c00);
  const TensorView xv(x.data(), DType::kF32, {T, H, D}), ov(out.data(), DType::kF32, {T, H, D});
  const TensorView cv(c.data(), DType::kF32, {T, D}), sv(s.data(), DType::kF32, {T, D});
  const TensorView c16v(c16.data(), DType::kF16, {T, D});
  const TensorView odd(c.data(), DType::kF32, {T, 3}, {D, 1}), wide(c.data(), DType::kF32, {2, 16});
  const TensorView short_t(c.data(), DType::kF32, {T - 1, D}), narrow_sin(s.data(), DType::kF32, {T, 6}, {D, 1});
  const TensorView cos3(c.data(), DType::kF32, {1, T, D});
  const TensorView out_on_cos(c.data(), DType::kF32, {1, 2, 4}), x_small(x.data(), DType::kF32, {1, 2, 4});
  const TensorView shifted(x.data() + 1, DType::kF32, {T, H, D - 1}, {H * D, D, 1});
  const TensorView x_cut(x.data(), DType::kF32, {T, H, D - 1}, {H * D, D, 1});
  const TensorView cos_cut(c.data(), DType::kF32, {T, D - 2}, {D, 1});
  const TensorView sin_cut(s.data(), DType::kF32, {T, D - 2}, {D, 1});
  auto call = [](const TensorView& o, const TensorView& xx, const TensorView& cc, const TensorView& ss,
                 RopeTablesOptions opt = {}) { tokpos::ops::apply_rope_tables(o, xx, cc, ss, opt); };
  expect_error([&] { call(ov, xv, c16v, sv); }, Status::kInvalidArgument,
               {"apply_rope_tables: cos has dtype f16 but x has f32", "must share one dtype"});
  expect_error([&] { call(ov, xv, odd, odd); }, Status::kInvalidArgument, {"cos has 3 rotary dims; the count must be even"});
  expect_error([&] { call(ov, xv, cv, narrow_sin); }, Status::kShapeMismatch, {"sin has 6 rotary dims but cos has 8"});
  expect_error([&] { call(ov, xv, short_t, short_t); }, Status::kShapeMismatch, {"cos starts with shape (3)", "x has (4)"});
  expect_error([&] { call(ov, xv, cos3, cos3); }, Status::kShapeMismatch, {"cos has 3 dimensions", "needs 2 (T, R)"});
  expect_error([&] { call(ov, xv, wide, wide); }, Status::kShapeMismatch, {"cos starts with shape (2)"});
  RopeTablesOptions bad;
  bad.layout = static_cast<RopeLayout>(5);
  expect_error([&] { call(ov, xv, cv, sv, bad); }, Status::kInvalidArgument, {"layout 5 is not half (0) or interleaved (1)"});
  expect_error([&] { call(out_on_cos, x_small, cv, sv); }, Status::kShapeMismatch, {});
  // An R wider than the head, an output over cos, an output one element off x.
  const TensorView c10(c.data(), DType::kF32, {T, 10}, {10, 1});
  std::vector<float> x10(static_cast<size_t>(T * H * 9), 1.0f), o10(x10.size(), -7.0f);
  const TensorView x9(x10.data(), DType::kF32, {T, H, 9}), o9(o10.data(), DType::kF32, {T, H, 9});
  expect_error([&] { call(o9, x9, c10, c10); }, Status::kInvalidArgument, {"cos has 10 rotary dims; at most the head dim 9"});
  const TensorView o_cos(c.data(), DType::kF32, {2, H, D}), x2(x.data(), DType::kF32, {2, H, D});
  const TensorView c2(c.data(), DType::kF32, {2, D});  // the memory out is on
  expect_error([&] { call(o_cos, x2, cv, cv); }, Status::kShapeMismatch, {});
  expect_error([&] { call(o_cos, x2, c2, c2); }, Status::kInvalidArgument, {"out overlaps"});
  expect_error([&] { call(shifted, x_cut, cos_cut, sin_cut); }, Status::kInvalidArgument, {"out overlaps x"});
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == -7.0f; }));
  EXPECT_TRUE(std::all_of(o10.begin(), o10.end(), [](float v) { return v == -7.0f; }));
  EXPECT_TRUE(std::all_of(x.begin(), x.end(), [](float v) { return v == 1.0f; }));
  // In place is allowed: out == x element for element.
  call(xv, xv, cv, sv);
  EXPECT_EQ(x[0], 0.5f - 0.5f);
}

TEST(RopeTables, TheCApiCallsTheOp) {
  const int64_t T = 3, H = 2, D = 4;
  const auto x = wide_values(static_cast<size_t>(T * H * D), 31);
  const auto c = wide_values(static_cast<size_t>(T * D), 32), s = wide_values(static_cast<size_t>(T * D), 33);
  std::vector<float> want(x.size()), got(x.size(), -1.0f);
  const TensorView xv(x.data(), DType::kF32, {T, H, D}), wv(want.data(), DType::kF32, {T, H, D});
  const TensorView gv(got.data(), DType::kF32, {T, H, D});
  const TensorView cv(c.data(), DType::kF32, {T, D}), sv(s.data(), DType::kF32, {T, D});
  RopeTablesOptions il;
  il.layout = RopeLayout::kInterleaved;
  il.inverse = true;
  tokpos::ops::apply_rope_tables(wv, xv, cv, sv, il);
  EXPECT_EQ(tokpos_op_apply_rope_tables(gv.get(), xv.get(), cv.get(), sv.get(), TOKPOS_ROPE_INTERLEAVED, 1), TOKPOS_OK);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
  std::fill(got.begin(), got.end(), -1.0f);
  EXPECT_EQ(tokpos_op_apply_rope_tables(gv.get(), xv.get(), cv.get(), sv.get(), TOKPOS_ROPE_HALF, 2),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("tokpos_op_apply_rope_tables: inverse = 2 must be 0 or 1"),
            std::string::npos);
  EXPECT_EQ(tokpos_op_apply_rope_tables(gv.get(), xv.get(), cv.get(), sv.get(), static_cast<tokpos_rope_layout>(3), 0),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_op_apply_rope_tables(gv.get(), nullptr, cv.get(), sv.get(), TOKPOS_ROPE_HALF, 0), TOKPOS_NULL_POINTER);
  EXPECT_NE(std::string(tokpos_last_error()).find("tokpos_op_apply_rope_tables: x is NULL"), std::string::npos)
      << tokpos_last_error();
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return v == -1.0f; }));
}

}  // namespace
