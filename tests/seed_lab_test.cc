// The checks both seeds name, one test each.
//   Seed 002 (the C lab): TEST 1-4 of verify.c.
//   Seed 000 (the PyTorch lesson): shapes, broadcasting, parameter counts, formula.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"
#include "tokpos/composer.h"
#include "tokpos/tokenizer.h"
#include "tokpos/tokpos.h"

namespace {

constexpr int64_t kV = 260, kD = 16;

// ---- Seed 002: the lab's four checks, through its two C functions ----

TEST(SeedLab, Test1_Position0Alternates0And1) {
  for (int64_t D : {1, 2, 7, 16, 64, 4096}) {
    for (int64_t d = 0; d < D; ++d) {
      EXPECT_EQ(tokpos_pe_sinusoidal(0, d, D), d % 2 == 0 ? 0.0f : 1.0f) << "D=" << D << " d=" << d;
    }
  }
}

TEST(SeedLab, Test2_PE10IsSin1AndPE11IsCos1) {
  for (int64_t D : {2, 16, 64, 512}) {
    EXPECT_EQ(tokpos_pe_sinusoidal(1, 0, D), static_cast<float>(std::sin(1.0L)));
    EXPECT_EQ(tokpos_pe_sinusoidal(1, 1, D), static_cast<float>(std::cos(1.0L)));
  }
}

TEST(SeedLab, Test3_SameTokenAtTwoPositionsDiffers) {
  const auto table = tokpos::testing::noise(kV * kD, 3);
  const int64_t ids[2] = {76, 76};  // 'H' twice
  std::vector<float> out(2 * kD);
  ASSERT_EQ(tokpos_embedding_forward(ids, 2, table.data(), kV, kD, 1, out.data()), TOKPOS_OK);
  bool differ = false;
  for (int64_t d = 0; d < kD; ++d) differ |= out[d] != out[kD + d];
  EXPECT_TRUE(differ);
  // ... and the difference is exactly PE(1) - PE(0) (the token part cancels).
  for (int64_t d = 0; d < kD; ++d) {
    EXPECT_EQ(out[d], table[76 * kD + d] + tokpos_pe_sinusoidal(0, d, kD));
    EXPECT_EQ(out[kD + d], table[76 * kD + d] + tokpos_pe_sinusoidal(1, d, kD));
  }
}

TEST(SeedLab, Test4_TwoTokensAtOnePositionDiffer) {
  const auto table = tokpos::testing::noise(kV * kD, 4);
  std::vector<float> a(kD), b(kD);
  const int64_t h = 76, i = 109;
  ASSERT_EQ(tokpos_embedding_forward(&h, 1, table.data(), kV, kD, 1, a.data()), TOKPOS_OK);
  ASSERT_EQ(tokpos_embedding_forward(&i, 1, table.data(), kV, kD, 1, b.data()), TOKPOS_OK);
  bool differ = false;
  for (int64_t d = 0; d < kD; ++d) differ |= a[d] != b[d];
  EXPECT_TRUE(differ);
}

TEST(SeedLab, OutOfRangeIdsFallBackToUnk) {
  const auto table = tokpos::testing::noise(kV * kD, 5);
  const int64_t ids[3] = {-7, 260, 999999};
  const int64_t unk[3] = {1, 1, 1};
  std::vector<float> got(3 * kD), want(3 * kD);
  ASSERT_EQ(tokpos_embedding_forward(ids, 3, table.data(), kV, kD, 1, got.data()), TOKPOS_OK);
  ASSERT_EQ(tokpos_embedding_forward(unk, 3, table.data(), kV, kD, 1, want.data()), TOKPOS_OK);
  EXPECT_TRUE(tokpos::testing::bitwise_equal(got, want));
}

TEST(SeedLab, ZeroLengthWritesNothingAndSucceeds) {
  EXPECT_EQ(tokpos_embedding_forward(nullptr, 0, nullptr, kV, kD, 1, nullptr), TOKPOS_OK);
}

// ---- Seed 000: shapes, broadcasting, parameter counts ----

TEST(SeedLesson, ShapesBTtoBTD) {
  tokpos::EmbeddingComposer c(tokpos::TokenEmbedding({.vocab_size = kV, .dim = kD}),
                              std::make_unique<tokpos::SinusoidalPositionalEmbedding>(
                                  tokpos::SinusoidalOptions{.max_context = 32, .dim = kD}));
  for (int64_t B : {1, 2, 5}) {
    for (int64_t T : {1, 7, 32}) {
      const auto ids = tokpos::testing::ids_mod(B * T, kV, B * 100 + T);
      EXPECT_EQ(c.forward(ids, B, T).size(), static_cast<size_t>(B * T * kD));
    }
  }
  EXPECT_EQ(c.position().forward(7).size(), static_cast<size_t>(7 * kD));  // (T, D)
}

TEST(SeedLesson, PositionRowsBroadcastOverTheBatch) {
  const int64_t B = 3, T = 5, L = 8;
  tokpos::EmbeddingComposer c(tokpos::TokenEmbedding({.vocab_size = kV, .dim = kD, .seed = 1}),
                              std::make_unique<tokpos::LearnedPositionalEmbedding>(
                                  tokpos::LearnedPositionalOptions{.max_context = L, .dim = kD, .seed = 1}));
  // The same token in every batch row: then every batch row must be identical,
  // and equal to token row + position row t.
  const std::vector<int64_t> ids(B * T, 72);
  const auto out = c.forward(ids, B, T);
  const auto tok = c.token().table();
  const auto pos = c.position().table();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < kD; ++d)
        EXPECT_EQ(out[(b * T + t) * kD + d], tok[72 * kD + d] + pos[t * kD + d]);
}

TEST(SeedLesson, ParameterCounts) {
  const int64_t V = 260, D = 64, L = 128;
  tokpos::TokenEmbedding tok({.vocab_size = V, .dim = D});
  tokpos::LearnedPositionalEmbedding learned({.max_context = L, .dim = D});
  tokpos::SinusoidalPositionalEmbedding sinus({.max_context = L, .dim = D});
  EXPECT_EQ(tok.num_parameters(), V * D);
  EXPECT_EQ(learned.num_parameters(), L * D);  // the learned variant adds L*D
  EXPECT_EQ(sinus.num_parameters(), 0);        // the sinusoidal variant adds none
  tokpos::EmbeddingComposer c(std::move(tok),
                              std::make_unique<tokpos::LearnedPositionalEmbedding>(
                                  tokpos::LearnedPositionalOptions{.max_context = L, .dim = D}));
  EXPECT_EQ(c.num_parameters(), V * D + L * D);
}

TEST(SeedLesson, HiEncodesTo76And109) {
  EXPECT_EQ(tokpos::ByteTokenizer::encode("Hi"), (std::vector<int64_t>{76, 109}));
}

}  // namespace
