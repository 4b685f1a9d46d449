// The modules build views and call the ops (tokpos/ops.h): the checks the op
// makes are the op's, once, with its wording, and what the modules still
// check is what only they know (span sizes, the position policy).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <memory>
#include <vector>

#include "expect_error.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"
#include "tokpos/positional.h"
#include "tokpos/token_embedding.h"

namespace {

using tokpos::Status;
using tokpos::testing::expect_error;

constexpr int64_t kV = 6, kD = 4, kL = 8;

tokpos::EmbeddingComposer composer(tokpos::BeyondTable beyond = tokpos::BeyondTable::kError) {
  return tokpos::EmbeddingComposer(
      tokpos::TokenEmbedding({.vocab_size = kV, .dim = kD, .seed = 1}),
      std::make_unique<tokpos::LearnedPositionalEmbedding>(
          tokpos::LearnedPositionalOptions{.max_context = kL, .dim = kD, .seed = 2, .beyond = beyond}));
}

// An out that aliases the ids is refused by the compose op (its message
// gives the byte ranges), under the composer's name; nothing is written.
TEST(ModulesOverOps, ComposerOverlapIsTheOpsCheck) {
  const auto c = composer();
  std::vector<int64_t> buffer(32, 1);
  const std::span<const int64_t> ids(buffer.data(), 3);
  const std::span<float> out(reinterpret_cast<float*>(buffer.data()), 3 * kD);
  const auto before = buffer;
  expect_error([&] { c.forward(ids, 1, 3, out); }, Status::kInvalidArgument,
               {"EmbeddingComposer::forward: out overlaps ids (bytes ["});
  EXPECT_EQ(buffer, before);
}

// Token type ids are read only with a token-type table: without one they
// are refused, whatever the LayerNorm setting, instead of being ignored.
TEST(ModulesOverOps, TokenTypeIdsWithoutATypeTableAreRefused) {
  const auto c = composer();
  const std::vector<int64_t> ids = {1, 2, 3}, types = {0, 0, 0};
  std::vector<float> out(3 * kD, 7.0f);
  expect_error([&] { c.forward(ids, 1, 3, out, {.token_type_ids = types}); }, Status::kInvalidArgument,
               {"EmbeddingComposer::forward: token_type_ids given but the composer has no token-type table"});
  EXPECT_EQ(out, std::vector<float>(3 * kD, 7.0f));
}

// The position module's forward and the composer read the same rows under
// every policy: one routine resolves them, the op gathers them.
TEST(ModulesOverOps, PositionForwardAndComposerReadTheSameRows) {
  for (const auto beyond : {tokpos::BeyondTable::kError, tokpos::BeyondTable::kClamp}) {
    const auto c = composer(beyond);
    const int64_t T = beyond == tokpos::BeyondTable::kError ? kL : kL + 3;
    const auto rows = c.position().forward(T, 0);
    std::vector<int64_t> ids(static_cast<size_t>(T), 2);
    const auto sum = c.forward(ids, 1, T);
    const auto tok = c.token().table();
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = std::min<int64_t>(t, kL - 1);
      for (int64_t d = 0; d < kD; ++d) {
        EXPECT_EQ(rows[t * kD + d], c.position().table()[p * kD + d]) << t;
        EXPECT_EQ(sum[t * kD + d], tok[2 * kD + d] + c.position().table()[p * kD + d]) << t;
      }
    }
  }
}

}  // namespace
