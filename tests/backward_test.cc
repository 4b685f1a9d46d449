// Backward: only used rows change, accumulation, the learned position gradient,
// weight tying, and independence from the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "test_util.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"
#include "tokpos/threading.h"

namespace {

using tokpos::EmbeddingComposer;
using tokpos::LearnedPositionalEmbedding;
using tokpos::TokenEmbedding;
using tokpos::testing::bitwise_equal;
using tokpos::testing::ids_mod;
using tokpos::testing::noise;

EmbeddingComposer learned_composer(int64_t V, int64_t D, int64_t L, uint64_t seed = 0) {
  return EmbeddingComposer(TokenEmbedding({.vocab_size = V, .dim = D, .seed = seed}),
                           std::make_unique<LearnedPositionalEmbedding>(
                               tokpos::LearnedPositionalOptions{.max_context = L, .dim = D, .seed = seed}));
}

// Independent reference in double: dW[v] = sum of d_out rows whose id is v.
std::vector<double> token_grad_ref(const std::vector<float>& d_out, const std::vector<int64_t>& ids,
                                   int64_t V, int64_t D) {
  std::vector<double> g(V * D, 0.0);
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t d = 0; d < D; ++d) g[ids[n] * D + d] += d_out[n * D + d];
  return g;
}

TEST(Backward, TouchesOnlyTheRowsThatWereUsed) {
  const int64_t V = 50, D = 8, L = 16, B = 2, T = 5;
  auto c = learned_composer(V, D, L);
  const std::vector<int64_t> ids = {7, 3, 7, 40, 3, 11, 11, 11, 0, 7};
  const auto d_out = noise(B * T * D, 1);
  // Pre-fill the gradient with a pattern: untouched rows must keep it exactly.
  auto grad = c.token().ensure_grad();
  const auto pattern = noise(V * D, 2);
  std::copy(pattern.begin(), pattern.end(), grad.begin());
  const auto touched = c.backward(d_out, ids, B, T);
  EXPECT_EQ(touched, (std::vector<int64_t>{0, 3, 7, 11, 40}));
  const std::set<int64_t> used(ids.begin(), ids.end());
  const auto ref = token_grad_ref(d_out, ids, V, D);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t d = 0; d < D; ++d) {
      const float g = c.token().grad()[v * D + d];
      if (!used.count(v)) {
        EXPECT_EQ(g, pattern[v * D + d]) << "row " << v << " was not used but changed";
      } else {
        EXPECT_NEAR(g, pattern[v * D + d] + ref[v * D + d], 1e-5) << "row " << v;
      }
    }
}

TEST(Backward, AccumulatesAcrossCalls) {
  const int64_t V = 10, D = 4, L = 8;
  auto c = learned_composer(V, D, L);
  const std::vector<int64_t> ids = {1, 2, 1};
  const auto d_out = noise(3 * D, 3);
  c.backward(d_out, ids, 1, 3);
  const std::vector<float> once(c.token().grad().begin(), c.token().grad().end());
  c.backward(d_out, ids, 1, 3);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(c.token().grad()[i], once[i] + once[i]);
  c.zero_grad();
  for (float g : c.token().grad()) EXPECT_EQ(g, 0.0f);
  for (float g : c.position().grad()) EXPECT_EQ(g, 0.0f);
}

TEST(Backward, LearnedPositionGradientSumsOverTheBatch) {
  const int64_t V = 10, D = 3, L = 8, B = 3, T = 4;
  auto c = learned_composer(V, D, L);
  const auto ids = ids_mod(B * T, V, 4);
  const auto d_out = noise(B * T * D, 5);
  c.backward(d_out, ids, B, T, {.positions = {.start = 2}});
  for (int64_t p = 0; p < L; ++p)
    for (int64_t d = 0; d < D; ++d) {
      double want = 0;
      if (p >= 2 && p < 2 + T)
        for (int64_t b = 0; b < B; ++b) want += d_out[(b * T + (p - 2)) * D + d];
      EXPECT_NEAR(c.position().grad()[p * D + d], want, 1e-6) << "p=" << p;
    }
}

TEST(Backward, SinusoidalHasNoGradient) {
  EmbeddingComposer c(TokenEmbedding({.vocab_size = 10, .dim = 4}),
                      std::make_unique<tokpos::SinusoidalPositionalEmbedding>(
                          tokpos::SinusoidalOptions{.max_context = 8, .dim = 4}));
  const std::vector<float> table_before(c.position().table().begin(), c.position().table().end());
  c.backward(noise(2 * 4, 6), std::vector<int64_t>{1, 2}, 1, 2);
  EXPECT_FALSE(c.position().has_gradient());
  EXPECT_TRUE(c.position().grad().empty());
  EXPECT_TRUE(bitwise_equal(table_before, {c.position().table().begin(), c.position().table().end()}));
}

TEST(Backward, PaddingRowNeverGetsAGradient) {
  TokenEmbedding e({.vocab_size = 6, .dim = 2, .padding_idx = 0});
  const auto touched = e.backward(noise(4 * 2, 7), std::vector<int64_t>{0, 3, 0, 5}, 1, 4);
  EXPECT_EQ(touched, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(e.grad()[0], 0.0f);
  EXPECT_EQ(e.grad()[1], 0.0f);
}

TEST(Backward, FrozenTableGetsNoGradient) {
  TokenEmbedding e = TokenEmbedding::from_pretrained(noise(6 * 2, 8), {.vocab_size = 6, .dim = 2}, true);
  EXPECT_TRUE(e.frozen());
  EXPECT_TRUE(e.backward(noise(2 * 2, 9), std::vector<int64_t>{1, 2}, 1, 2).empty());
  EXPECT_TRUE(e.grad().empty());
}

TEST(Backward, UnkPolicyRoutesGradientToTheUnkRow) {
  TokenEmbedding e({.vocab_size = 6, .dim = 2, .id_policy = tokpos::IdPolicy::map_to_unk(1)});
  const auto d_out = noise(2 * 2, 10);
  EXPECT_EQ(e.backward(d_out, std::vector<int64_t>{99, -4}, 1, 2), (std::vector<int64_t>{1}));
  EXPECT_EQ(e.grad()[2], d_out[0] + d_out[2]);
}

TEST(Backward, FailureLeavesBothGradientsUntouched) {
  auto c = learned_composer(10, 2, 4);
  c.token().ensure_grad();
  c.position().ensure_grad();
  // A bad position (T > L) must not let the token half write first.
  EXPECT_THROW(c.backward(noise(5 * 2, 11), std::vector<int64_t>{1, 2, 3, 4, 5}, 1, 5), tokpos::Error);
  for (float g : c.token().grad()) EXPECT_EQ(g, 0.0f);
  for (float g : c.position().grad()) EXPECT_EQ(g, 0.0f);
  // A bad id must not let the position half write.
  EXPECT_THROW(c.backward(noise(2 * 2, 12), std::vector<int64_t>{1, 10}, 1, 2), tokpos::Error);
  for (float g : c.token().grad()) EXPECT_EQ(g, 0.0f);
  for (float g : c.position().grad()) EXPECT_EQ(g, 0.0f);
}

// Weight tying: the token table is also the output projection. The tied
// gradient must equal the sum of the two paths computed separately.
TEST(Tying, TiedGradientIsTheSumOfBothPaths) {
  const int64_t V = 30, D = 8, L = 16, B = 2, T = 6, N = B * T;
  const auto ids = ids_mod(N, V, 13);
  const auto d_out = noise(N * D, 14);     // gradient arriving at the embedding output
  const auto h = noise(N * D, 15);         // final hidden states
  const auto d_logits = noise(N * V, 16);  // gradient arriving at the logits

  auto tied = learned_composer(V, D, L, 3);
  tied.backward(d_out, ids, B, T);
  tied.token().logits_backward(d_logits, h, N);

  auto emb_only = learned_composer(V, D, L, 3);
  emb_only.backward(d_out, ids, B, T);
  auto head_only = learned_composer(V, D, L, 3);
  head_only.token().logits_backward(d_logits, h, N);

  const auto W = tied.token().table();
  for (int64_t v = 0; v < V; ++v)
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = v * D + d;
      // Path by path, through tokpos: the tied buffer is exactly their sum.
      EXPECT_EQ(tied.token().grad()[i], emb_only.token().grad()[i] + head_only.token().grad()[i]);
      // And against an independent double computation of both paths.
      double want = 0;
      for (int64_t n = 0; n < N; ++n) {
        if (ids[n] == v) want += d_out[n * D + d];
        want += static_cast<double>(d_logits[n * V + v]) * h[n * D + d];
      }
      EXPECT_NEAR(tied.token().grad()[i], want, 1e-4) << "v=" << v << " d=" << d;
    }
  // The forward of the tied head: logits = h . W^T.
  const auto logits = tied.token().logits(h, N);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      double want = 0;
      for (int64_t d = 0; d < D; ++d) want += static_cast<double>(h[n * D + d]) * W[v * D + d];
      EXPECT_NEAR(logits[n * V + v], want, 1e-5);
    }
}

TEST(Tying, HiddenGradientFlowsThroughTheTable) {
  const int64_t V = 7, D = 3, N = 2;
  TokenEmbedding e({.vocab_size = V, .dim = D, .seed = 4});
  const auto h = noise(N * D, 17), d_logits = noise(N * V, 18);
  std::vector<float> d_h(N * D, 1.0f);  // accumulates onto 1.0
  e.logits_backward(d_logits, h, N, d_h);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      double want = 1.0;
      for (int64_t v = 0; v < V; ++v) want += static_cast<double>(d_logits[n * V + v]) * e.table()[v * D + d];
      EXPECT_NEAR(d_h[n * D + d], want, 1e-6);
    }
}

TEST(Backward, SparseGradientEqualsTheDenseRowsAndChangesNothing) {
  const int64_t V = 300, D = 24, B = 4, T = 100;
  auto ids = ids_mod(B * T, V, 30);
  std::fill(ids.begin(), ids.begin() + 150, 7);  // a hot row, split into blocks
  const auto d_out = noise(B * T * D, 31);
  TokenEmbedding e({.vocab_size = V, .dim = D, .padding_idx = 3});
  const auto sparse = e.sparse_backward(d_out, ids, B, T);
  EXPECT_TRUE(e.grad().empty());  // nothing accumulated
  const auto touched = e.backward(d_out, ids, B, T);
  EXPECT_EQ(sparse.rows, touched);
  ASSERT_EQ(sparse.values.size(), touched.size() * D);
  for (size_t r = 0; r < touched.size(); ++r)
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(sparse.values[r * D + d], e.grad()[touched[r] * D + d]);
  EXPECT_EQ(std::count(sparse.rows.begin(), sparse.rows.end(), 3), 0);  // padding never appears
}

// The composer computes both gradients in one kernel (index_add_rows2); it
// must give exactly the bits of the two modules' own backwards, with padding,
// a hot row, UNK remapping, clamped explicit positions, and B > 64 (where the
// positions are hot rows too), for 1, 2 and 7 threads.
TEST(Backward, ComposerGradientsEqualTheTwoModuleBackwards) {
  struct Case {
    int64_t B, T;
  };
  for (const Case k : {Case{4, 300}, Case{70, 8}, Case{1, 1}}) {
    const int64_t V = 200, D = 40, L = 256, N = k.B * k.T;
    auto ids = ids_mod(N, V, 30);
    std::fill(ids.begin(), ids.begin() + N / 3, 9);  // a hot row
    ids[N / 2] = 3;                                  // the padding row
    ids[N - 1] = V + 5;                              // remapped to UNK (row 1)
    auto pos = ids_mod(N, L + 40, 31);               // some past L: clamped to L - 1
    const auto d_out = noise(N * D, 32);
    const tokpos::ComposeOptions o{.positions = {.ids = pos}, .id_policy = tokpos::IdPolicy::map_to_unk(1)};
    const tokpos::LearnedPositionalOptions po{
        .max_context = L, .dim = D, .seed = 2, .beyond = tokpos::BeyondTable::kClamp};
    for (int threads : {1, 2, 7}) {
      tokpos::set_num_threads(threads);
      EmbeddingComposer c(TokenEmbedding({.vocab_size = V, .dim = D, .seed = 1, .padding_idx = 3}),
                          std::make_unique<LearnedPositionalEmbedding>(po));
      TokenEmbedding tok({.vocab_size = V, .dim = D, .seed = 1, .padding_idx = 3});
      LearnedPositionalEmbedding p(po);
      // Start from non-zero gradients: both must accumulate the same way.
      const auto g0 = noise(V * D, 33), p0 = noise(L * D, 34);
      std::copy(g0.begin(), g0.end(), c.token().ensure_grad().begin());
      std::copy(g0.begin(), g0.end(), tok.ensure_grad().begin());
      std::copy(p0.begin(), p0.end(), c.position().ensure_grad().begin());
      std::copy(p0.begin(), p0.end(), p.ensure_grad().begin());
      const auto touched = c.backward(d_out, ids, k.B, k.T, o);
      EXPECT_EQ(touched, tok.backward(d_out, ids, k.B, k.T, o.id_policy));
      p.backward(d_out, k.B, k.T, o.positions);
      const std::vector<float> ct(c.token().grad().begin(), c.token().grad().end()),
          cp(c.position().grad().begin(), c.position().grad().end()),
          mt(tok.grad().begin(), tok.grad().end()), mp(p.grad().begin(), p.grad().end());
      EXPECT_TRUE(bitwise_equal(ct, mt)) << "token gradient B=" << k.B << " T=" << k.T << " threads " << threads;
      EXPECT_TRUE(bitwise_equal(cp, mp)) << "position gradient B=" << k.B << " T=" << k.T << " threads "
                                         << threads;
    }
  }
  tokpos::set_num_threads(0);
}

TEST(Threads, ForwardAndBackwardAreBitwiseIdenticalFor1_2_7Threads) {
  const int64_t V = 3000, D = 96, L = 512, B = 4, T = 512;
  auto ids = ids_mod(B * T, V, 19);
  std::fill(ids.begin(), ids.begin() + 300, 5);  // a hot row
  const auto d_out = noise(B * T * D, 20);
  std::vector<std::vector<float>> outs, tok_grads, pos_grads;
  for (int threads : {1, 2, 7}) {
    tokpos::set_num_threads(threads);
    auto c = learned_composer(V, D, L, 21);
    outs.push_back(c.forward(ids, B, T));
    c.backward(d_out, ids, B, T);
    c.backward(d_out, ids, B, T);
    tok_grads.emplace_back(c.token().grad().begin(), c.token().grad().end());
    pos_grads.emplace_back(c.position().grad().begin(), c.position().grad().end());
  }
  tokpos::set_num_threads(0);
  for (int k = 1; k < 3; ++k) {
    EXPECT_TRUE(bitwise_equal(outs[0], outs[k])) << k;
    EXPECT_TRUE(bitwise_equal(tok_grads[0], tok_grads[k])) << k;
    EXPECT_TRUE(bitwise_equal(pos_grads[0], pos_grads[k])) << k;
  }
}

}  // namespace
