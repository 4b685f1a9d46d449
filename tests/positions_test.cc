// Position ids and ALiBi (tokpos/positions.h and their C API) against
// references written here: hand-computed values, plain loops of the
// transformers / flash-attn / ALiBi paper formulas, and a brute-force nearest
// 16-bit value. Every bad-input class is checked to name its value and to
// leave the output untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/convert.h"
#include "expect_error.h"
#include "tokpos/positions.h"
#include "tokpos/presets.h"
#include "tokpos/tokpos.h"

namespace {

using tokpos::Status;
using tokpos::testing::expect_error;

// A DLTensor over a vector, row-major, with its own shape.
template <typename T>
struct Tn {
  std::vector<T> v;
  std::vector<int64_t> shape;
  DLTensor dl{};
  Tn(std::vector<T> values, std::vector<int64_t> s) : v(std::move(values)), shape(std::move(s)) { point(); }
  Tn(const Tn&) = delete;
  void point() {
    dl.data = v.data();
    dl.device = {kDLCPU, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    if constexpr (std::is_same_v<T, int32_t>) dl.dtype = {kDLInt, 32, 1};
    if constexpr (std::is_same_v<T, int64_t>) dl.dtype = {kDLInt, 64, 1};
    if constexpr (std::is_same_v<T, float>) dl.dtype = {kDLFloat, 32, 1};
    dl.shape = shape.data();
    dl.strides = nullptr;
  }
  const DLTensor* p() const { return &dl; }
};

template <typename T>
std::vector<T> cast(const std::vector<int64_t>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// transformers: position_ids = attention_mask.long().cumsum(-1) - 1;
// position_ids.masked_fill_(attention_mask == 0, 1); then the last T columns.
std::vector<int64_t> mask_reference(const std::vector<int64_t>& mask, int64_t B, int64_t S, int64_t T) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> row(static_cast<size_t>(S));
    int64_t c = 0;
    for (int64_t s = 0; s < S; ++s) {
      c += mask[static_cast<size_t>(b * S + s)];
      row[static_cast<size_t>(s)] = mask[static_cast<size_t>(b * S + s)] == 0 ? 1 : c - 1;
    }
    out.insert(out.end(), row.end() - T, row.end());
  }
  return out;
}

// transformers' create_position_ids_from_input_ids.
std::vector<int64_t> roberta_reference(const std::vector<int64_t>& ids, int64_t B, int64_t S, int64_t pad,
                                       int64_t past) {
  std::vector<int64_t> out(ids.size());
  for (int64_t b = 0; b < B; ++b) {
    int64_t c = 0;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t m = ids[static_cast<size_t>(b * S + s)] != pad ? 1 : 0;
      c += m;
      out[static_cast<size_t>(b * S + s)] = (c + past) * m + pad;
    }
  }
  return out;
}

// The ALiBi paper's get_slopes, recursion and all.
std::vector<double> paper_slopes(int64_t n) {
  auto pow2 = [](int64_t k) {
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(k)) - 3)));
    std::vector<double> r;
    for (int64_t i = 0; i < k; ++i) r.push_back(start * std::pow(start, static_cast<double>(i)));
    return r;
  };
  const double l = std::log2(static_cast<double>(n));
  if (l == std::floor(l)) return pow2(n);
  const auto closest = static_cast<int64_t>(std::exp2(std::floor(l)));
  std::vector<double> r = pow2(closest);
  const std::vector<double> twice = paper_slopes(2 * closest);
  for (int64_t i = 0; i < n - closest; ++i) r.push_back(twice[static_cast<size_t>(2 * i)]);
  return r;
}

// The nearest 16-bit value to x (ties to the even bit pattern), by trying
// every finite pattern.
template <typename H>
uint16_t nearest16(double x) {
  uint16_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (uint32_t b = 0; b < 65536; ++b) {
    const double v = static_cast<double>(tokpos::fp::to_f32(H{static_cast<uint16_t>(b)}));
    if (!std::isfinite(v)) continue;
    const double d = std::fabs(v - x);
    if (d < best_d || (d == best_d && (b & 1u) == 0)) best = static_cast<uint16_t>(b), best_d = d;
  }
  return best;
}

// ---- Position ids ----

TEST(Positions, MaskRuleByHand) {
  // A left-padded batch: two pads, then three tokens; a full row.
  Tn<int64_t> mask({0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 5});
  Tn<int64_t> out(std::vector<int64_t>(10, -7), {2, 5});
  tokpos::position_ids_from_mask(mask.p(), out.p());
  EXPECT_EQ(out.v, (std::vector<int64_t>{1, 1, 0, 1, 2, 0, 1, 2, 3, 4}));
  // One new token after four cached ones: the last column.
  Tn<int32_t> last(std::vector<int32_t>(2, -7), {2, 1});
  tokpos::position_ids_from_mask(mask.p(), last.p());
  EXPECT_EQ(last.v, (std::vector<int32_t>{2, 4}));
  // The span form and the GPT-2 preset's wrapper agree.
  EXPECT_EQ(tokpos::position_ids_from_mask(mask.v, 2, 5, 2), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(tokpos::gpt2_position_ids(mask.v, 2, 2, 3), (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(Positions, MaskRuleMatchesTheLoopForInt32AndInt64) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t B = 1 + static_cast<int64_t>(rng() % 4), S = static_cast<int64_t>(rng() % 9);
    const int64_t T = S == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(S + 1));
    std::vector<int64_t> m(static_cast<size_t>(B * S));
    for (auto& x : m) x = static_cast<int64_t>(rng() % 2);
    const auto want = mask_reference(m, B, S, T);
    Tn<int32_t> m32(cast<int32_t>(m), {B, S});
    Tn<int64_t> m64(m, {B, S});
    Tn<int64_t> o64(std::vector<int64_t>(static_cast<size_t>(B * T)), {B, T});
    Tn<int32_t> o32(std::vector<int32_t>(static_cast<size_t>(B * T)), {B, T});
    tokpos::position_ids_from_mask(m32.p(), o64.p());
    tokpos::position_ids_from_mask(m64.p(), o32.p());
    EXPECT_EQ(o64.v, want);
    EXPECT_EQ(o32.v, cast<int32_t>(want));
  }
}

TEST(Positions, MaskValuesOutsideZeroAndOneNameTheirPlace) {
  Tn<int64_t> mask({1, 1, 1, 1, 1, 0, 2, 1}, {2, 4});
  Tn<int64_t> out(std::vector<int64_t>(8, -7), {2, 4});
  expect_error([&] { tokpos::position_ids_from_mask(mask.p(), out.p()); }, Status::kInvalidArgument,
               {"attention_mask value 2", "(b=1, s=2)", "not 0 or 1"});
  EXPECT_EQ(out.v, std::vector<int64_t>(8, -7));
  Tn<int32_t> neg({1, -1}, {1, 2});
  Tn<int64_t> o2(std::vector<int64_t>(2, -7), {1, 2});
  expect_error([&] { tokpos::position_ids_from_mask(neg.p(), o2.p()); }, Status::kInvalidArgument,
               {"value -1", "(b=0, s=1)"});
  EXPECT_EQ(o2.v, std::vector<int64_t>(2, -7));
  // More new tokens than mask columns.
  Tn<int64_t> wide(std::vector<int64_t>(10, -7), {2, 5});
  expect_error([&] { tokpos::position_ids_from_mask(mask.p(), wide.p()); }, Status::kInvalidArgument,
               {"5 columns", "4"});
}

TEST(Positions, RobertaByHandAndAgainstTheLoop) {
  // padding_idx 1: pads keep 1, real tokens count from 2.
  Tn<int64_t> ids({0, 5, 6, 1, 1}, {5});
  Tn<int64_t> out(std::vector<int64_t>(5, -7), {5});
  tokpos::roberta_position_ids(ids.p(), 1, 0, out.p());
  EXPECT_EQ(out.v, (std::vector<int64_t>{2, 3, 4, 1, 1}));
  tokpos::roberta_position_ids(ids.p(), 1, 3, out.p());
  EXPECT_EQ(out.v, (std::vector<int64_t>{5, 6, 7, 1, 1}));
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t B = 1 + static_cast<int64_t>(rng() % 3), S = static_cast<int64_t>(rng() % 8);
    const int64_t pad = static_cast<int64_t>(rng() % 3), past = static_cast<int64_t>(rng() % 5);
    std::vector<int64_t> x(static_cast<size_t>(B * S));
    for (auto& v : x) v = static_cast<int64_t>(rng() % 4);
    const auto want = roberta_reference(x, B, S, pad, past);
    Tn<int32_t> x32(cast<int32_t>(x), {B, S});
    Tn<int32_t> o32(std::vector<int32_t>(x.size()), {B, S});
    tokpos::roberta_position_ids(x32.p(), pad, past, o32.p());
    EXPECT_EQ(o32.v, cast<int32_t>(want));
    Tn<int64_t> x64(x, {B, S});
    Tn<int64_t> o64(std::vector<int64_t>(x.size()), {B, S});
    tokpos::roberta_position_ids(x64.p(), pad, past, o64.p());
    EXPECT_EQ(o64.v, want);
  }
  expect_error([&] { tokpos::roberta_position_ids(ids.p(), -1, 0, out.p()); }, Status::kInvalidArgument,
               {"padding_idx = -1"});
  expect_error([&] { tokpos::roberta_position_ids(ids.p(), 1, -2, out.p()); }, Status::kInvalidArgument,
               {"past_length = -2"});
  // A result past int32 in an int32 out: named, nothing written.
  Tn<int32_t> small(std::vector<int32_t>(5, -7), {5});
  expect_error([&] { tokpos::roberta_position_ids(ids.p(), 2147483647, 0, small.p()); },
               Status::kInvalidArgument, {"out is int32 and value 2147483648 at index 0", "use int64"});
  EXPECT_EQ(small.v, std::vector<int32_t>(5, -7));
}

TEST(Positions, PackedByHand) {
  Tn<int32_t> cu({0, 3, 3, 5}, {4});  // an empty document in the middle
  Tn<int64_t> out(std::vector<int64_t>(5, -7), {5});
  tokpos::packed_position_ids(cu.p(), 0, out.p());
  EXPECT_EQ(out.v, (std::vector<int64_t>{0, 1, 2, 0, 1}));
  Tn<int64_t> cu64({0, 3, 3, 5}, {4});
  Tn<int32_t> out32(std::vector<int32_t>(5, -7), {5});
  tokpos::packed_position_ids(cu64.p(), 2, out32.p());
  EXPECT_EQ(out32.v, (std::vector<int32_t>{2, 3, 4, 2, 3}));
  Tn<int64_t> only({0}, {1});
  Tn<int64_t> none(std::vector<int64_t>{}, {0});
  tokpos::packed_position_ids(only.p(), 0, none.p());
}

TEST(Positions, BadCuSeqlensNameTheIndexAndValues) {
  Tn<int64_t> out(std::vector<int64_t>(5, -7), {5});
  Tn<int32_t> late({1, 3, 5}, {3});
  expect_error([&] { tokpos::packed_position_ids(late.p(), 0, out.p()); }, Status::kInvalidArgument,
               {"cu_seqlens[0] = 1", "must be 0"});
  Tn<int64_t> down({0, 4, 2, 5}, {4});
  expect_error([&] { tokpos::packed_position_ids(down.p(), 0, out.p()); }, Status::kInvalidArgument,
               {"index 2", "cu_seqlens[1] = 4", "cu_seqlens[2] = 2"});
  Tn<int64_t> short_end({0, 2, 4}, {3});
  expect_error([&] { tokpos::packed_position_ids(short_end.p(), 0, out.p()); }, Status::kShapeMismatch,
               {"5 elements", "N = 4"});
  Tn<int64_t> empty(std::vector<int64_t>{}, {0});
  expect_error([&] { tokpos::packed_position_ids(empty.p(), 0, out.p()); }, Status::kInvalidArgument,
               {"cu_seqlens is empty"});
  EXPECT_EQ(out.v, std::vector<int64_t>(5, -7));
}

TEST(Positions, AnOutputThatOverlapsItselfIsRefused) {
  Tn<int64_t> cu({0, 3}, {2});
  Tn<int64_t> out(std::vector<int64_t>(3, -7), {3});
  std::vector<int64_t> zero{0};
  out.dl.strides = zero.data();  // three elements, one address
  expect_error([&] { tokpos::packed_position_ids(cu.p(), 0, out.p()); }, Status::kInvalidArgument,
               {"out strides make its elements overlap", "stride 0"});
  Tn<int64_t> mask({1, 1, 1, 1}, {2, 2});
  Tn<int64_t> rows(std::vector<int64_t>(4, -7), {2, 2});
  std::vector<int64_t> same_rows{0, 1};
  rows.dl.strides = same_rows.data();
  expect_error([&] { tokpos::position_ids_from_mask(mask.p(), rows.p()); }, Status::kInvalidArgument,
               {"out strides make its elements overlap", "dimension 0"});
  EXPECT_EQ(out.v, std::vector<int64_t>(3, -7));
  EXPECT_EQ(rows.v, std::vector<int64_t>(4, -7));
  // Transposed strides are fine.
  std::vector<int64_t> transposed{1, 2};
  rows.dl.strides = transposed.data();
  tokpos::position_ids_from_mask(mask.p(), rows.p());
  EXPECT_EQ(rows.v, (std::vector<int64_t>{0, 0, 1, 1}));
}

TEST(Positions, CuSeqlensFromPositionIds) {
  // Documents start at 0, where a position repeats (5 after 1 is a jump) and
  // where it falls back.
  Tn<int64_t> pos({0, 1, 2, 0, 1, 5, 6, 0}, {8});
  EXPECT_EQ(tokpos::packed_document_count(pos.p()), 4);
  Tn<int32_t> cu(std::vector<int32_t>(5, -7), {5});
  tokpos::cu_seqlens_from_position_ids(pos.p(), cu.p());
  EXPECT_EQ(cu.v, (std::vector<int32_t>{0, 3, 5, 7, 8}));
  // (1, N) reads as N tokens; int32 positions.
  Tn<int32_t> row({3, 4, 3}, {1, 3});
  Tn<int64_t> cu2(std::vector<int64_t>(3, -7), {3});
  tokpos::cu_seqlens_from_position_ids(row.p(), cu2.p());
  EXPECT_EQ(cu2.v, (std::vector<int64_t>{0, 2, 3}));
  // Empty: no documents, [0].
  Tn<int64_t> nothing(std::vector<int64_t>{}, {0});
  EXPECT_EQ(tokpos::packed_document_count(nothing.p()), 0);
  Tn<int32_t> zero(std::vector<int32_t>(1, -7), {1});
  tokpos::cu_seqlens_from_position_ids(nothing.p(), zero.p());
  EXPECT_EQ(zero.v, (std::vector<int32_t>{0}));
  // A wrong out size names the count.
  Tn<int32_t> small(std::vector<int32_t>(3, -7), {3});
  expect_error([&] { tokpos::cu_seqlens_from_position_ids(pos.p(), small.p()); }, Status::kShapeMismatch,
               {"4 documents", "needs 5"});
  EXPECT_EQ(small.v, std::vector<int32_t>(3, -7));
}

TEST(Positions, PackedRoundTrip) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> cu{0};
    const int docs = 1 + static_cast<int>(rng() % 5);
    for (int d = 0; d < docs; ++d) cu.push_back(cu.back() + 1 + static_cast<int64_t>(rng() % 6));
    const int64_t N = cu.back();
    Tn<int64_t> c(cu, {static_cast<int64_t>(cu.size())});
    Tn<int64_t> pos(std::vector<int64_t>(static_cast<size_t>(N)), {N});
    tokpos::packed_position_ids(c.p(), 0, pos.p());
    for (size_t d = 0; d + 1 < cu.size(); ++d)
      for (int64_t n = cu[d]; n < cu[d + 1]; ++n) EXPECT_EQ(pos.v[static_cast<size_t>(n)], n - cu[d]);
    ASSERT_EQ(tokpos::packed_document_count(pos.p()), docs);
    Tn<int32_t> back(std::vector<int32_t>(cu.size()), {static_cast<int64_t>(cu.size())});
    tokpos::cu_seqlens_from_position_ids(pos.p(), back.p());
    EXPECT_EQ(back.v, cast<int32_t>(cu));
  }
}

// ---- ALiBi ----

TEST(Alibi, EightHeadsArePowersOfOneHalf) {
  const auto s = tokpos::alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s[static_cast<size_t>(h)], std::ldexp(1.0, -(h + 1)));
}

TEST(Alibi, SlopesEqualThePapersGetSlopes) {
  for (int64_t n = 1; n <= 80; ++n) {
    const auto want = paper_slopes(n);
    const auto got = tokpos::alibi_slopes(n);
    ASSERT_EQ(got.size(), want.size());
    for (size_t h = 0; h < want.size(); ++h) EXPECT_EQ(got[h], want[h]) << "n " << n << " head " << h;
  }
}

TEST(Alibi, OtherMaxBiasFollowsGgmlAndMpt) {
  for (double b : {4.0, 8.0, 12.5, 16.0}) {
    for (int64_t n : {1, 3, 5, 8, 12, 20, 32, 40}) {
      // ggml: m0 = 2^(-b/c), m1 = 2^(-b/2/c), head h: m0^(h+1) or m1^(2(h-c)+1).
      int64_t c = 1;
      while (c * 2 <= n) c *= 2;
      // MPT: 2^(-b*i/N2), i = 1..N2 (N2 the power of two >= n), odd ones then even ones.
      int64_t n2 = 1;
      while (n2 < n) n2 *= 2;
      std::vector<double> mpt;
      for (int64_t i = 2; i <= n2; i += 2) mpt.push_back(std::exp2(-b * static_cast<double>(i) / static_cast<double>(n2)));
      if (n2 != n)
        for (int64_t i = 1; i <= n2; i += 2) mpt.push_back(std::exp2(-b * static_cast<double>(i) / static_cast<double>(n2)));
      if (n2 == n) {
        mpt.clear();
        for (int64_t i = 1; i <= n2; ++i) mpt.push_back(std::exp2(-b * static_cast<double>(i) / static_cast<double>(n2)));
      }
      const auto got = tokpos::alibi_slopes(n, b);
      const double m0 = std::pow(2.0, -b / static_cast<double>(c)), m1 = std::pow(2.0, -b / 2 / static_cast<double>(c));
      for (int64_t h = 0; h < n; ++h) {
        const double ggml = h < c ? std::pow(m0, static_cast<double>(h + 1))
                                  : std::pow(m1, static_cast<double>(2 * (h - c) + 1));
        const double g = got[static_cast<size_t>(h)];
        EXPECT_NEAR(g, ggml, 1e-14 * ggml) << "b " << b << " n " << n << " h " << h;
        EXPECT_NEAR(g, mpt[static_cast<size_t>(h)], 1e-14 * ggml) << "b " << b << " n " << n << " h " << h;
      }
    }
  }
}

TEST(Alibi, BadSlopeArgumentsAreNamed) {
  std::vector<double> none;
  expect_error([&] { tokpos::alibi_slopes(std::span<double>(none)); }, Status::kInvalidArgument,
               {"num_heads = 0", ">= 1"});
  expect_error([&] { tokpos::alibi_slopes(-3); }, Status::kInvalidArgument, {"num_heads = -3"});
  std::vector<double> out(4, -7.0);
  for (double b : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    expect_error([&] { tokpos::alibi_slopes(out, b); }, Status::kInvalidArgument, {"max_bias = ", "finite and > 0"});
  }
  EXPECT_EQ(out, std::vector<double>(4, -7.0));
}

TEST(Alibi, BiasFloat32ByHand) {
  const std::vector<double> slopes{0.5, 0.25};
  Tn<int64_t> q({0, 1, 3}, {3});
  Tn<int32_t> k({0, 1, 2, 3}, {4});
  Tn<float> out(std::vector<float>(24, -7.0f), {2, 3, 4});
  const float inf = std::numeric_limits<float>::infinity();
  tokpos::alibi_bias(slopes, q.p(), k.p(), tokpos::AlibiMode::kCausal, out.p());
  EXPECT_EQ(out.v, (std::vector<float>{0, -inf, -inf, -inf, -0.5f, 0, -inf, -inf, -1.5f, -1.0f, -0.5f, 0,
                                       0, -inf, -inf, -inf, -0.25f, 0, -inf, -inf, -0.75f, -0.5f, -0.25f, 0}));
  tokpos::alibi_bias(slopes, q.p(), k.p(), tokpos::AlibiMode::kSymmetric, out.p());
  EXPECT_EQ(out.v, (std::vector<float>{0, -0.5f, -1.0f, -1.5f, -0.5f, 0, -0.5f, -1.0f, -1.5f, -1.0f, -0.5f, 0,
                                       0, -0.25f, -0.5f, -0.75f, -0.25f, 0, -0.25f, -0.5f, -0.75f, -0.5f, -0.25f, 0}));
}

TEST(Alibi, BiasIsRoundedOnceFromDouble) {
  // slope * (k - q) with q = 1, k = 0: -slope. Each slope sits just above a
  // halfway point of the 16-bit format, so rounding through float first
  // would land on the halfway point and round to even: the wrong neighbour.
  Tn<int64_t> q({1}, {1});
  Tn<int64_t> k({0}, {1});
  std::vector<int64_t> shape{1, 1, 1};
  for (bool bf16 : {true, false}) {
    const double slope = bf16 ? 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)
                              : 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
    uint16_t bits = 0x1234;
    DLTensor o{&bits, {kDLCPU, 0}, 3, bf16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 16, 1},
               shape.data(), nullptr, 0};
    tokpos::alibi_bias(std::vector<double>{slope}, q.p(), k.p(), tokpos::AlibiMode::kCausal, &o);
    const uint16_t want = bf16 ? nearest16<tokpos::fp::bf16_t>(-slope) : nearest16<tokpos::fp::f16_t>(-slope);
    EXPECT_EQ(bits, want) << (bf16 ? "bf16" : "f16");
    EXPECT_EQ(bits, bf16 ? 0xBF81 : 0xBC01) << (bf16 ? "bf16" : "f16");  // -(1 + 2^-7), -(1 + 2^-10)
  }
  // Many slopes and distances: every value is the nearest one.
  const std::vector<double> slopes = tokpos::alibi_slopes(12, 8.0);
  Tn<int64_t> qs({0, 7, 100, 3000}, {4});
  Tn<int64_t> ks({0, 5, 99, 2047, 3001}, {5});
  std::vector<uint16_t> h(12 * 4 * 5, 0x1234);
  std::vector<int64_t> big{12, 4, 5};
  DLTensor o{h.data(), {kDLCPU, 0}, 3, {kDLFloat, 16, 1}, big.data(), nullptr, 0};
  tokpos::alibi_bias(slopes, qs.p(), ks.p(), tokpos::AlibiMode::kSymmetric, &o);
  for (size_t hh = 0; hh < 12; ++hh)
    for (size_t i = 0; i < 4; ++i)
      for (size_t j = 0; j < 5; ++j) {
        const double x = -slopes[hh] * std::fabs(static_cast<double>(qs.v[i] - ks.v[j]));
        EXPECT_EQ(h[(hh * 4 + i) * 5 + j], nearest16<tokpos::fp::f16_t>(x)) << hh << " " << i << " " << j;
      }
}

TEST(Alibi, BadBiasArgumentsAreNamedAndWriteNothing) {
  const std::vector<double> slopes{0.5, 0.25};
  Tn<int64_t> q({0, -3}, {2});
  Tn<int64_t> k({0, 1}, {2});
  Tn<float> out(std::vector<float>(8, -7.0f), {2, 2, 2});
  expect_error([&] { tokpos::alibi_bias(slopes, q.p(), k.p(), tokpos::AlibiMode::kCausal, out.p()); },
               Status::kInvalidArgument, {"q_positions[1] = -3", ">= 0"});
  Tn<int32_t> kneg({0, -1}, {2});
  Tn<int64_t> q2({0, 1}, {2});
  expect_error([&] { tokpos::alibi_bias(slopes, q2.p(), kneg.p(), tokpos::AlibiMode::kSymmetric, out.p()); },
               Status::kInvalidArgument, {"k_positions[1] = -1"});
  expect_error([&] { tokpos::alibi_bias(slopes, q2.p(), k.p(), static_cast<tokpos::AlibiMode>(5), out.p()); },
               Status::kInvalidArgument, {"mode 5"});
  const std::vector<double> three{0.5, 0.25, 0.125};
  expect_error([&] { tokpos::alibi_bias(three, q2.p(), k.p(), tokpos::AlibiMode::kCausal, out.p()); },
               Status::kShapeMismatch, {"(3, 2, 2)"});
  const std::vector<double> nan{0.5, std::nan("")};
  expect_error([&] { tokpos::alibi_bias(nan, q2.p(), k.p(), tokpos::AlibiMode::kCausal, out.p()); },
               Status::kInvalidArgument, {"slopes[1] = nan"});
  EXPECT_EQ(out.v, std::vector<float>(8, -7.0f));
}

// ---- The C API ----

TEST(PositionsC, EntryPointsComputeAndReport) {
  std::vector<double> s(8, -7.0);
  ASSERT_EQ(tokpos_alibi_slopes(s.data(), 8, 8.0), TOKPOS_OK);
  EXPECT_EQ(s[0], 0.5);
  EXPECT_EQ(s[7], 1.0 / 256);
  std::vector<double> s6(6, -7.0);
  ASSERT_EQ(tokpos_alibi_slopes(s6.data(), 6, 8.0), TOKPOS_OK);
  EXPECT_EQ(s6, paper_slopes(6));
  EXPECT_EQ(tokpos_alibi_slopes(s.data(), 0, 8.0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("tokpos_alibi_slopes: alibi_slopes: num_heads = 0 must be >= 1"), std::string::npos)
      << tokpos_last_error();
  EXPECT_EQ(tokpos_alibi_slopes(s.data(), 8, std::nan("")), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("max_bias = nan"), std::string::npos) << tokpos_last_error();
  EXPECT_EQ(tokpos_alibi_slopes(nullptr, 8, 8.0), TOKPOS_NULL_POINTER);
  EXPECT_EQ(s[0], 0.5);

  Tn<int32_t> mask({0, 1, 1, 1, 3, 1}, {2, 3});
  Tn<int64_t> pos(std::vector<int64_t>(6, -7), {2, 3});
  EXPECT_EQ(tokpos_position_ids_from_mask(&pos.dl, mask.p()), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("attention_mask value 3 at (b=1, s=1)"), std::string::npos)
      << tokpos_last_error();
  EXPECT_EQ(pos.v, std::vector<int64_t>(6, -7));
  mask.v[4] = 0;
  ASSERT_EQ(tokpos_position_ids_from_mask(&pos.dl, mask.p()), TOKPOS_OK);
  EXPECT_EQ(pos.v, (std::vector<int64_t>{1, 0, 1, 0, 1, 1}));

  Tn<int64_t> ids({1, 7, 8}, {3});
  Tn<int64_t> rp(std::vector<int64_t>(3, -7), {3});
  ASSERT_EQ(tokpos_roberta_position_ids(&rp.dl, ids.p(), 1, 0), TOKPOS_OK);
  EXPECT_EQ(rp.v, (std::vector<int64_t>{1, 2, 3}));

  Tn<int64_t> cu({0, 2, 1}, {3});
  Tn<int64_t> packed(std::vector<int64_t>(1, -7), {1});
  EXPECT_EQ(tokpos_packed_position_ids(&packed.dl, cu.p(), 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("decreases at index 2"), std::string::npos) << tokpos_last_error();
  EXPECT_EQ(packed.v, std::vector<int64_t>(1, -7));

  Tn<int64_t> p({0, 1, 0}, {3});
  int64_t count = -1;
  ASSERT_EQ(tokpos_packed_document_count(&count, p.p()), TOKPOS_OK);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(tokpos_packed_document_count(nullptr, p.p()), TOKPOS_NULL_POINTER);
  Tn<int32_t> cs(std::vector<int32_t>(3, -7), {3});
  ASSERT_EQ(tokpos_cu_seqlens_from_position_ids(&cs.dl, p.p()), TOKPOS_OK);
  EXPECT_EQ(cs.v, (std::vector<int32_t>{0, 2, 3}));

  const double sl[2] = {0.5, 0.25};
  Tn<int64_t> q({2}, {1});
  Tn<int64_t> k({0, 3}, {2});
  Tn<float> bias(std::vector<float>(4, -7.0f), {2, 1, 2});
  EXPECT_EQ(tokpos_op_alibi_bias(&bias.dl, sl, 2, q.p(), k.p(), static_cast<tokpos_alibi_mode>(7)),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("mode 7"), std::string::npos) << tokpos_last_error();
  EXPECT_EQ(tokpos_op_alibi_bias(nullptr, sl, 2, q.p(), k.p(), TOKPOS_ALIBI_CAUSAL), TOKPOS_NULL_POINTER);
  EXPECT_EQ(bias.v, std::vector<float>(4, -7.0f));
  ASSERT_EQ(tokpos_op_alibi_bias(&bias.dl, sl, 2, q.p(), k.p(), TOKPOS_ALIBI_SYMMETRIC), TOKPOS_OK);
  EXPECT_EQ(bias.v, (std::vector<float>{-1.0f, -0.5f, -0.5f, -0.25f}));
}

}  // namespace
