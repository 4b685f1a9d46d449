// Modules and entry points called from many threads at once: every result
// must equal, bit for bit, the one computed by a single thread. Runs in the
// normal suite and under ThreadSanitizer (make check-sanitize).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.h"
#include "test_util.h"
#include "tokpos/composer.h"
#include "tokpos/position_table.h"
#include "tokpos/tokenizer.h"
#include "tokpos/tokpos.h"

namespace {

constexpr int kThreads = 8, kCalls = 40;

// Runs body(thread, call) on kThreads threads kCalls times each; counts failures.
template <typename Body>
int hammer(Body body) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c)
        if (!body(t, c)) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  return failures.load();
}

TEST(Concurrency, ComposerForwardFromManyThreads) {
  for (bool learned : {false, true}) {
    std::unique_ptr<tokpos::PositionalEmbedding> pos;
    if (learned) {
      pos = std::make_unique<tokpos::LearnedPositionalEmbedding>(tokpos::LearnedPositionalOptions{.max_context = 64, .dim = 24, .seed = 1});
    } else {
      pos = std::make_unique<tokpos::SinusoidalPositionalEmbedding>(tokpos::SinusoidalOptions{.max_context = 64, .dim = 24});
    }
    const tokpos::EmbeddingComposer model(tokpos::TokenEmbedding({.vocab_size = 500, .dim = 24, .seed = 2}), std::move(pos));
    std::vector<std::vector<int64_t>> batches;
    std::vector<std::vector<float>> want;
    for (int k = 0; k < kThreads; ++k) {
      batches.push_back(tokpos::testing::ids_mod(3 * 40, 500, k));
      want.push_back(model.forward(batches.back(), 3, 40, {.positions = {.start = k}}));
    }
    EXPECT_EQ(hammer([&](int t, int) {
                return model.forward(batches[t], 3, 40, {.positions = {.start = t}}) == want[t];
              }),
              0)
        << (learned ? "learned" : "sinusoidal");
  }
}

TEST(Concurrency, SinusoidalExtendPolicyReadsWithoutWriting) {
  const tokpos::SinusoidalPositionalEmbedding s({.max_context = 8, .dim = 16, .beyond = tokpos::BeyondTable::kExtend});
  const auto want = s.forward(32, 100);
  EXPECT_EQ(hammer([&](int, int) { return s.forward(32, 100) == want; }), 0);
}

TEST(Concurrency, CApiAndTablesFromManyThreads) {
  const int64_t V = 300, L = 50, D = 16, B = 2, T = 20;
  const auto tok = tokpos::testing::noise(V * D, 1), pos = tokpos::testing::noise(L * D, 2);
  const auto ids = tokpos::testing::ids_mod(B * T, V, 3);
  std::vector<float> want(B * T * D);
  ASSERT_EQ(tokpos_compose_forward(want.data(), ids.data(), B, T, tok.data(), V, pos.data(), L, D), TOKPOS_OK);
  const auto table = tokpos::position_table(40, 33, 1000, {.layout = tokpos::Layout::kFairseq});
  EXPECT_EQ(hammer([&](int, int c) {
              std::vector<float> out(B * T * D);
              if (tokpos_compose_forward(out.data(), ids.data(), B, T, tok.data(), V, pos.data(), L, D) != TOKPOS_OK) return false;
              if (out != want) return false;
              if (c % 8 == 0 && tokpos::position_table(40, 33, 1000, {.layout = tokpos::Layout::kFairseq}) != table) return false;
              return true;
            }),
            0);
}

TEST(Concurrency, LastErrorBelongsToEachThread) {
  EXPECT_EQ(hammer([&](int t, int c) {
              // Each thread fails with its own id, then reads back its own message.
              const int64_t id = 1000 + t * 100 + c;
              std::vector<float> out(4, 7.0f), tok(8), pos(4);
              const int64_t ids[1] = {id};
              if (tokpos_compose_forward(out.data(), ids, 1, 1, tok.data(), 2, pos.data(), 1, 4) != TOKPOS_ID_OUT_OF_RANGE) {
                return false;
              }
              const std::string msg = tokpos_last_error();
              return msg.find("token id " + std::to_string(id) + " ") != std::string::npos && out[0] == 7.0f;
            }),
            0);
}

TEST(Concurrency, TokenizerAndSparseBackwardAreReadOnly) {
  const tokpos::TokenEmbedding e({.vocab_size = 50, .dim = 8, .seed = 3});
  const auto ids = tokpos::testing::ids_mod(30, 50, 4);
  const auto d_out = tokpos::testing::noise(30 * 8, 5);
  const auto want = e.sparse_backward(d_out, ids, 1, 30);
  EXPECT_EQ(hammer([&](int t, int) {
              const std::string text = "thread " + std::to_string(t) + " \xF0\x9F\x99\x82";
              if (tokpos::ByteTokenizer::decode(tokpos::ByteTokenizer::encode(text, true, true)) != text) return false;
              const auto g = e.sparse_backward(d_out, ids, 1, 30);
              return g.rows == want.rows && g.values == want.values;
            }),
            0);
}

}  // namespace

// The workers take chunks from two callers contending for them (the one
// that finds them in use runs its chunks itself): every chunk of every call
// runs once and its write is seen by its caller after the call. Under
// ThreadSanitizer this checks the pool's ordering.
TEST(Concurrency, WorkersHandEachChunkBackToItsCaller) {
  std::atomic<int> wrong{0};
  auto caller = [&](int64_t seed) {
    constexpr int64_t kChunks = 7;
    std::vector<int64_t> slot(kChunks, -1);
    for (int64_t call = 0; call < 3000; ++call) {
      tokpos::detail::parallel_chunks(3, kChunks, [&](int64_t c, int) {
        slot[static_cast<size_t>(c)] = seed * 1'000'000 + call * kChunks + c;
      });
      for (int64_t c = 0; c < kChunks; ++c)
        if (slot[static_cast<size_t>(c)] != seed * 1'000'000 + call * kChunks + c)
          wrong.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::thread a(caller, 1), b(caller, 2);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
}
