// Positions beyond the table: error, extend (sinusoidal), clamp and
// interpolate (learned). Tables never change.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tokpos/composer.h"

namespace {

using tokpos::BeyondTable;
using tokpos::EmbeddingComposer;
using tokpos::LearnedPositionalEmbedding;
using tokpos::SinusoidalPositionalEmbedding;
using tokpos::TokenEmbedding;

TEST(Beyond, SinusoidalExtendEqualsALargerTable) {
  SinusoidalPositionalEmbedding small({.max_context = 16, .dim = 10, .beyond = BeyondTable::kExtend});
  SinusoidalPositionalEmbedding big({.max_context = 64, .dim = 10});
  const std::vector<float> before(small.table().begin(), small.table().end());
  const auto rows = small.forward(20, 30);  // positions 30..49, all past L = 16
  for (int64_t i = 0; i < 20 * 10; ++i) EXPECT_EQ(rows[i], big.table()[30 * 10 + i]);
  EXPECT_EQ(std::memcmp(before.data(), small.table().data(), before.size() * 4), 0) << "table changed";
  EXPECT_EQ(small.max_context(), 16);
  // extended() builds the larger table explicitly.
  const auto ext = small.extended(64);
  EXPECT_EQ(std::memcmp(ext.table().data(), big.table().data(), 64 * 10 * 4), 0);
}

TEST(Beyond, ComposerWithExtendMatchesALargerTableForStartAndExplicitIds) {
  auto make = [](int64_t L, BeyondTable b) {
    return EmbeddingComposer(TokenEmbedding({.vocab_size = 50, .dim = 8, .seed = 2}),
                             std::make_unique<SinusoidalPositionalEmbedding>(
                                 tokpos::SinusoidalOptions{.max_context = L, .dim = 8, .beyond = b}));
  };
  auto small = make(8, BeyondTable::kExtend), big = make(64, BeyondTable::kError);
  const auto ids = tokpos::testing::ids_mod(2 * 6, 50, 3);
  EXPECT_EQ(small.forward(ids, 2, 6, {.positions = {.start = 5}}),
            big.forward(ids, 2, 6, {.positions = {.start = 5}}));
  const std::vector<int64_t> pos = {0, 1, 40, 40, 7, 63, 2, 9, 10, 11, 12, 50};
  EXPECT_EQ(small.forward(ids, 2, 6, {.positions = {.ids = pos}}),
            big.forward(ids, 2, 6, {.positions = {.ids = pos}}));
  // The default policy still refuses, naming T and L.
  auto strict = make(8, BeyondTable::kError);
  EXPECT_THROW(strict.forward(ids, 2, 6, {.positions = {.start = 5}}), tokpos::Error);
}

TEST(Beyond, LearnedClampReadsAndTrainsTheLastRow) {
  LearnedPositionalEmbedding p({.max_context = 4, .dim = 3, .seed = 1, .beyond = BeyondTable::kClamp});
  const auto rows = p.forward(6, 0);  // positions 0..5
  for (int64_t t = 3; t < 6; ++t)
    for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(rows[t * 3 + d], p.table()[3 * 3 + d]);
  std::vector<float> d_out(6 * 3, 1.0f);
  p.backward(d_out, 1, 6);
  EXPECT_EQ(p.grad()[3 * 3], 3.0f);  // positions 3, 4, 5 all feed row 3
  EXPECT_EQ(p.grad()[0], 1.0f);
}

TEST(Beyond, LearnedInterpolationRescalesPositions) {
  const int64_t L = 5, Lx = 9, D = 2;  // p -> p (L-1)/(Lx-1) = p/2
  LearnedPositionalEmbedding p(
      {.max_context = L, .dim = D, .seed = 4, .beyond = BeyondTable::kInterpolate, .interpolate_to = Lx});
  const auto rows = p.forward(Lx, 0);
  const auto t = p.table();
  for (int64_t q = 0; q < Lx; ++q)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i0 = q / 2, i1 = std::min<int64_t>(i0 + 1, L - 1);
      const double w = (q % 2) * 0.5;
      EXPECT_FLOAT_EQ(rows[q * D + d], static_cast<float>((1 - w) * t[i0 * D + d] + w * t[i1 * D + d])) << q;
    }
  EXPECT_THROW(p.forward(1, Lx), tokpos::Error);  // past the extended context
  // Backward splits each position's gradient between its two rows.
  std::vector<float> d_out(Lx * D, 1.0f);
  p.backward(d_out, 1, Lx);
  double total = 0;
  for (float g : p.grad()) total += g;
  EXPECT_DOUBLE_EQ(total, static_cast<double>(Lx * D));  // weights sum to one
  EXPECT_FLOAT_EQ(p.grad()[1 * D], 1.0f + 0.5f + 0.5f);  // q = 2 whole, q = 1 and 3 half each
}

// The fused token-type/LayerNorm path reads the table directly, so it must
// see the positions a call really reads, explicit ids included.
TEST(Beyond, FusedLayerNormPathRefusesPositionsPastTheTable) {
  EmbeddingComposer c(TokenEmbedding({.vocab_size = 10, .dim = 4, .seed = 1}),
                      std::make_unique<LearnedPositionalEmbedding>(tokpos::LearnedPositionalOptions{
                          .max_context = 4, .dim = 4, .seed = 1, .beyond = BeyondTable::kClamp}));
  c.set_layer_norm({std::vector<float>(4, 1.0f), std::vector<float>(4, 0.0f), 1e-5});
  const std::vector<int64_t> ids = {1, 2, 3}, inside = {0, 1, 3}, past = {0, 1, 10};
  EXPECT_EQ(c.forward(ids, 1, 3, {.positions = {.ids = inside}}).size(), 12u);
  auto out = tokpos::testing::sentinel(12);
  const auto before = out;
  try {
    c.forward(ids, 1, 3, out, {.positions = {.ids = past}});
    FAIL() << "read position 10 of a 4-row table";
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find("need positions inside the table"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::memcmp(out.data(), before.data(), 48), 0);
}

TEST(Beyond, PoliciesAreCheckedAtConstruction) {
  EXPECT_THROW(LearnedPositionalEmbedding({.max_context = 4, .dim = 2, .beyond = BeyondTable::kExtend}),
               tokpos::Error);
  EXPECT_THROW(LearnedPositionalEmbedding(
                   {.max_context = 4, .dim = 2, .beyond = BeyondTable::kInterpolate, .interpolate_to = 3}),
               tokpos::Error);
  EXPECT_THROW(SinusoidalPositionalEmbedding({.max_context = 4, .dim = 2, .beyond = BeyondTable::kClamp}),
               tokpos::Error);
}

TEST(Beyond, ConcurrentReadersSeeAnImmutableTable) {
  SinusoidalPositionalEmbedding s({.max_context = 32, .dim = 16, .beyond = BeyondTable::kExtend});
  const std::vector<float> want = s.forward(64, 100);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i)
        if (s.forward(64, 100) != want) ++mismatches;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
