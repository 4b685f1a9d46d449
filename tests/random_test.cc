// The initialiser: published Philox vectors, values pinned from an independent
// implementation (tools/philox_reference.py), and reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.h"
#include "tokpos/positional.h"
#include "tokpos/random.h"
#include "tokpos/threading.h"
#include "tokpos/token_embedding.h"

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Random123's kat_vectors, the three philox4x32 10-round lines.
TEST(Philox, KnownAnswerVectors) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(tokpos::philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(tokpos::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(tokpos::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// `python3 tools/philox_reference.py 0 0 8 0.02`: the first values of a V x D
// token table with seed 0, element by element in row-major order.
TEST(Init, FirstTokenValuesArePinned) {
  const uint32_t want[8] = {0x3ca26354, 0xbc977f29, 0xbc4a60cb, 0xbc1df6d8,
                            0xbb49606f, 0x3b6d031a, 0x3c884580, 0x3b8164e3};
  tokpos::TokenEmbedding e({.vocab_size = 2, .dim = 4, .seed = 0});
  for (int i = 0; i < 8; ++i) EXPECT_EQ(bits(e.table()[i]), want[i]) << "element " << i;
}

// `python3 tools/philox_reference.py 1234567890123 1 8 0.02`: a learned
// position table (stream 1) with a seed wider than 32 bits.
TEST(Init, FirstPositionValuesArePinned) {
  const uint32_t want[8] = {0x3cb6898e, 0x3c899297, 0x3afef530, 0xbbe0b56a,
                            0xbba7ccd9, 0xbc0e40dc, 0xbc44c526, 0x3bae4d03};
  tokpos::LearnedPositionalEmbedding p({.max_context = 8, .dim = 1, .seed = 1234567890123ull});
  for (int i = 0; i < 8; ++i) EXPECT_EQ(bits(p.table()[i]), want[i]) << "element " << i;
}

TEST(Init, SameSeedSameBitsAcrossRunsAndThreadCounts) {
  std::vector<std::vector<float>> tables;
  for (int threads : {1, 2, 7}) {
    tokpos::set_num_threads(threads);
    tokpos::TokenEmbedding e({.vocab_size = 1000, .dim = 100, .seed = 42});
    tables.emplace_back(e.table().begin(), e.table().end());
  }
  tokpos::set_num_threads(0);
  EXPECT_TRUE(tokpos::testing::bitwise_equal(tables[0], tables[1]));
  EXPECT_TRUE(tokpos::testing::bitwise_equal(tables[0], tables[2]));
}

TEST(Init, DifferentSeedsAndStreamsDiffer) {
  tokpos::TokenEmbedding a({.vocab_size = 16, .dim = 16, .seed = 1});
  tokpos::TokenEmbedding b({.vocab_size = 16, .dim = 16, .seed = 2});
  tokpos::LearnedPositionalEmbedding p({.max_context = 16, .dim = 16, .seed = 1});
  std::vector<float> va(a.table().begin(), a.table().end()), vb(b.table().begin(), b.table().end()),
      vp(p.table().begin(), p.table().end());
  EXPECT_FALSE(tokpos::testing::bitwise_equal(va, vb));
  EXPECT_FALSE(tokpos::testing::bitwise_equal(va, vp));  // token and position streams differ
}

// Element i depends only on (seed, stream, i): a table's prefix is the smaller table.
TEST(Init, TableIsAPrefixOfALargerOne) {
  std::vector<float> small(7), big(100);
  tokpos::fill_normal(small, 9, 0, 0.0, 1.0);
  tokpos::fill_normal(big, 9, 0, 0.0, 1.0);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(bits(small[i]), bits(big[i]));
}

TEST(Init, StatisticsAreNormalWithStd002) {
  const int64_t n = 1 << 20;
  std::vector<float> v(n);
  tokpos::fill_normal(v, 7, 0, 0.0, 0.02);
  double sum = 0, sq = 0, m4 = 0;
  int64_t beyond_2sd = 0;
  for (float x : v) {
    sum += x;
    sq += static_cast<double>(x) * x;
    m4 += std::pow(static_cast<double>(x) / 0.02, 4);
    beyond_2sd += std::abs(x) > 0.04;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(sd, 0.02, 0.02 * 0.005);
  EXPECT_NEAR(m4 / n, 3.0, 0.05);                                   // kurtosis of a normal
  EXPECT_NEAR(static_cast<double>(beyond_2sd) / n, 0.0455, 0.002);  // P(|z| > 2)
}

TEST(Init, NormalMatchesTheDocumentedBoxMuller) {
  // Recompute a few values from the raw Philox words with the C library's
  // log/cos/sin (a different implementation from tokpos's own).
  for (uint64_t i : {0ull, 1ull, 2ull, 3ull, 4ull, 1001ull, 123456789ull}) {
    const auto x = tokpos::philox4x32_10(
        {static_cast<uint32_t>(i / 4), static_cast<uint32_t>((i / 4) >> 32), 5, 0}, {11, 0});
    const uint32_t a = x[(i % 4) & 2], b = x[((i % 4) & 2) + 1];
    const long double u1 = (a + 1.0L) / 4294967296.0L, u2 = b / 4294967296.0L;
    const long double r = std::sqrt(-2.0L * std::log(u1));
    const long double two_pi = 6.283185307179586476925286766559L;
    const long double z = (i % 2 == 0) ? r * std::cos(two_pi * u2) : r * std::sin(two_pi * u2);
    EXPECT_NEAR(tokpos::philox_normal(11, 5, i), static_cast<double>(z), 1e-14) << "i=" << i;
  }
}

}  // namespace
