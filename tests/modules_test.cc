// The modules' forward paths, policies and errors.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"

namespace {

using tokpos::ComposeOptions;
using tokpos::EmbeddingComposer;
using tokpos::Error;
using tokpos::IdPolicy;
using tokpos::LearnedPositionalEmbedding;
using tokpos::SinusoidalPositionalEmbedding;
using tokpos::Status;
using tokpos::TokenEmbedding;
using tokpos::testing::bitwise_equal;
using tokpos::testing::ramp_table;
using tokpos::testing::sentinel;

// Runs f, expects a tokpos::Error with `status` whose message contains every piece.
template <typename F>
void expect_error(F&& f, Status status, std::initializer_list<std::string> pieces) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const auto& p : pieces)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

EmbeddingComposer ramp_composer(int64_t V, int64_t D, int64_t L) {
  return EmbeddingComposer(
      TokenEmbedding::from_pretrained(ramp_table(V, D), {.vocab_size = V, .dim = D}, false),
      std::make_unique<SinusoidalPositionalEmbedding>(tokpos::SinusoidalOptions{.max_context = L, .dim = D}));
}

TEST(TokenEmbedding, ForwardGathersRows) {
  TokenEmbedding e = TokenEmbedding::from_pretrained(ramp_table(10, 3), {.vocab_size = 10, .dim = 3});
  const std::vector<int64_t> ids = {4, 0, 9, 4};
  const auto out = e.forward(ids, 2, 2);
  ASSERT_EQ(out.size(), 12u);
  for (int n = 0; n < 4; ++n)
    for (int d = 0; d < 3; ++d)
      EXPECT_EQ(out[n * 3 + d], static_cast<float>(ids[n]) + static_cast<float>(d) / 1024.0f);
}

TEST(TokenEmbedding, FromPretrainedChecksTheShape) {
  expect_error([] { TokenEmbedding::from_pretrained(std::vector<float>(11), {.vocab_size = 4, .dim = 3}); },
               Status::kShapeMismatch, {"table has 11 elements, expected 12"});
}

TEST(TokenEmbedding, PaddingRowIsZeroAtInit) {
  TokenEmbedding e({.vocab_size = 8, .dim = 5, .seed = 3, .padding_idx = 2});
  for (int d = 0; d < 5; ++d) EXPECT_EQ(e.table()[2 * 5 + d], 0.0f);
  bool others_nonzero = false;
  for (int d = 0; d < 5; ++d) others_nonzero |= e.table()[3 * 5 + d] != 0.0f;
  EXPECT_TRUE(others_nonzero);
  expect_error([] { TokenEmbedding({.vocab_size = 8, .dim = 5, .padding_idx = 8}); },
               Status::kInvalidArgument, {"padding_idx 8", "[0, 8)"});
}

TEST(TokenEmbedding, ZeroAndNegativeSizesAreErrors) {
  expect_error([] { TokenEmbedding({.vocab_size = 0, .dim = 4}); }, Status::kInvalidArgument,
               {"vocab_size = 0", ">= 1"});
  expect_error([] { TokenEmbedding({.vocab_size = 4, .dim = 0}); }, Status::kInvalidArgument, {"dim = 0"});
  expect_error([] { LearnedPositionalEmbedding({.max_context = 0, .dim = 4}); }, Status::kInvalidArgument,
               {"max_context = 0"});
  expect_error([] { SinusoidalPositionalEmbedding({.max_context = 4, .dim = -1}); }, Status::kInvalidArgument,
               {"dim = -1"});
}

TEST(TokenEmbedding, SizesThatOverflowAreErrors) {
  expect_error([] { TokenEmbedding({.vocab_size = int64_t{1} << 40, .dim = int64_t{1} << 40}); },
               Status::kSizeOverflow, {"vocab_size*dim"});
}

TEST(IdPolicy, ErrorIsTheDefaultAndNamesIdPositionAndV) {
  auto c = ramp_composer(50, 4, 16);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 50300, 7, 8};
  auto out = sentinel(8 * 4);
  const auto before = out;
  expect_error([&] { c.forward(ids, 2, 4, out); }, Status::kIdOutOfRange,
               {"EmbeddingComposer::forward", "token id 50300 at (b=1, t=1) is outside [0, 50)"});
  EXPECT_TRUE(bitwise_equal(out, before)) << "output was written on failure";
  expect_error([&] { c.forward(std::vector<int64_t>{-3}, 1, 1, std::span<float>(out.data(), 4)); },
               Status::kIdOutOfRange, {"token id -3 at (b=0, t=0)"});
  EXPECT_TRUE(bitwise_equal(out, before));
}

TEST(IdPolicy, MapToUnkPerModuleAndPerCall) {
  const int64_t V = 20, D = 3;
  auto table = ramp_table(V, D);
  TokenEmbedding e = TokenEmbedding::from_pretrained(
      table, {.vocab_size = V, .dim = D, .id_policy = IdPolicy::map_to_unk(1)});
  const std::vector<int64_t> ids = {5, 20, -1, 7};
  const auto out = e.forward(ids, 1, 4);
  const auto want = e.forward(std::vector<int64_t>{5, 1, 1, 7}, 1, 4);
  EXPECT_TRUE(bitwise_equal(out, want));
  // Per call: error overrides the module's map policy, and vice versa.
  expect_error([&] { e.forward(ids, 1, 4, IdPolicy::error()); }, Status::kIdOutOfRange, {"token id 20"});
  TokenEmbedding strict = TokenEmbedding::from_pretrained(table, {.vocab_size = V, .dim = D});
  EXPECT_TRUE(bitwise_equal(strict.forward(ids, 1, 4, IdPolicy::map_to_unk(1)), want));
  // An UNK id that is itself out of range is rejected up front.
  expect_error([&] { strict.forward(ids, 1, 4, IdPolicy::map_to_unk(20)); }, Status::kInvalidArgument,
               {"unk_id 20 is outside [0, 20)"});
}

TEST(Composer, TLongerThanLNamesBoth) {
  auto c = ramp_composer(10, 4, 8);
  const std::vector<int64_t> ids(9, 1);
  auto out = sentinel(9 * 4);
  const auto before = out;
  expect_error([&] { c.forward(ids, 1, 9, out); }, Status::kPositionOutOfRange, {"T = 9", "L = 8"});
  EXPECT_TRUE(bitwise_equal(out, before));
  // The position module alone, as in the seed lesson.
  expect_error([&] { c.position().forward(9); }, Status::kPositionOutOfRange, {"T = 9", "L = 8"});
  tokpos::LearnedPositionalEmbedding learned({.max_context = 8, .dim = 4});
  expect_error([&] { learned.forward(9); }, Status::kPositionOutOfRange, {"T = 9", "L = 8"});
}

TEST(Composer, StartOffsetForDecoding) {
  const int64_t V = 10, D = 4, L = 16;
  auto c = ramp_composer(V, D, L);
  const std::vector<int64_t> ids = {3, 1, 4};
  const auto out = c.forward(ids, 1, 3, {.positions = {.start = 10}});
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(out[t * D + d], c.token().table()[ids[t] * D + d] + c.position().table()[(10 + t) * D + d]);
  expect_error([&] { c.forward(ids, 1, 3, {.positions = {.start = 14}}); }, Status::kPositionOutOfRange,
               {"start + T = 14 + 3", "L = 16"});
}

TEST(Composer, ExplicitPositionIdsPerBatchRow) {
  const int64_t V = 10, D = 4, L = 16, B = 2, T = 3;
  auto c = ramp_composer(V, D, L);
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9};
  const std::vector<int64_t> pos = {0, 1, 2, 7, 8, 9};  // second row continues a cache
  const auto out = c.forward(ids, B, T, {.positions = {.ids = pos}});
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(out[n * D + d], c.token().table()[ids[n] * D + d] + c.position().table()[pos[n] * D + d]);
  const std::vector<int64_t> bad = {0, 1, 2, 7, 16, 9};
  expect_error([&] { c.forward(ids, B, T, {.positions = {.ids = bad}}); }, Status::kPositionOutOfRange,
               {"position id 16 at (b=1, t=1)", "[0, 16)"});
  expect_error([&] { c.forward(ids, B, T, {.positions = {.ids = std::span(bad).first(4)}}); },
               Status::kShapeMismatch, {"position_ids has 4 elements, expected 6"});
}

TEST(Composer, CallerBufferIsUsedAndSizeChecked) {
  auto c = ramp_composer(10, 4, 8);
  const std::vector<int64_t> ids = {1, 2};
  std::vector<float> out(8);
  c.forward(ids, 1, 2, out);
  EXPECT_TRUE(bitwise_equal(out, c.forward(ids, 1, 2)));
  std::vector<float> small = sentinel(7);
  const auto before = small;
  expect_error([&] { c.forward(ids, 1, 2, small); }, Status::kShapeMismatch,
               {"out has 7 elements, expected 8"});
  EXPECT_TRUE(bitwise_equal(small, before));
}

TEST(Composer, EmptyBatchIsANoOp) {
  auto c = ramp_composer(10, 4, 8);
  EXPECT_TRUE(c.forward(std::vector<int64_t>{}, 0, 5).empty());
  EXPECT_TRUE(c.forward(std::vector<int64_t>{}, 3, 0).empty());
  expect_error([&] { c.forward(std::vector<int64_t>{}, -1, 0); }, Status::kInvalidArgument, {"B = -1"});
}

TEST(Composer, DimMismatchIsRejected) {
  expect_error(
      [] {
        EmbeddingComposer(TokenEmbedding({.vocab_size = 4, .dim = 8}),
                          std::make_unique<SinusoidalPositionalEmbedding>(
                              tokpos::SinusoidalOptions{.max_context = 4, .dim = 6}));
      },
      Status::kShapeMismatch, {"D = 8", "D = 6"});
}

TEST(Composer, IdsOfTheWrongLengthAreRejected) {
  auto c = ramp_composer(10, 4, 8);
  expect_error(
      [&] {
        c.forward(std::vector<int64_t>{1, 2, 3}, 2, 2);
      },
      Status::kShapeMismatch, {"ids has 3 elements, expected 4"});
}

TEST(Composer, OddDimWithSinusoidal) {
  auto c = ramp_composer(10, 5, 8);
  const auto out = c.forward(std::vector<int64_t>{2, 2}, 1, 2);
  EXPECT_EQ(out[4], c.token().table()[2 * 5 + 4] + 0.0f);  // p = 0, lone sin = 0
  EXPECT_EQ(out[5 + 4], c.token().table()[2 * 5 + 4] + c.position().table()[5 + 4]);
}

}  // namespace

namespace {

// A moved-from module is left empty, not dangling: sizes 0 and the error
// policy, so every call that reads the table throws tokpos::Error instead of
// reading through the old sizes.
TEST(MovedFrom, PositionTablesAreEmptyAndEveryCallFailsCleanly) {
  for (const auto beyond : {tokpos::BeyondTable::kError, tokpos::BeyondTable::kClamp,
                            tokpos::BeyondTable::kInterpolate}) {
    SCOPED_TRACE(tokpos::beyond_table_name(beyond));
    const tokpos::LearnedPositionalOptions o{.max_context = 8, .dim = 4, .beyond = beyond, .interpolate_to = 16};
    for (const bool assign : {false, true}) {
      tokpos::LearnedPositionalEmbedding a(o), b(o);
      if (assign) {
        b = std::move(a);
      } else {
        tokpos::LearnedPositionalEmbedding c(std::move(a));
      }
      EXPECT_EQ(a.max_context(), 0);  // NOLINT(bugprone-use-after-move): the point of the test
      EXPECT_EQ(a.dim(), 0);
      EXPECT_TRUE(a.table().empty());
      EXPECT_EQ(a.num_parameters(), 0);
      EXPECT_THROW(a.forward(4, 0), tokpos::Error);
      std::vector<float> out(16);
      EXPECT_THROW(a.forward(out, 4, 0), tokpos::Error);
      EXPECT_THROW(a.backward(std::vector<float>(16, 1.0f), 1, 4), tokpos::Error);
      EXPECT_THROW(a.gradient_rows(1, 4, {}, "test"), tokpos::Error);
      EXPECT_EQ(b.max_context(), 8);
    }
  }
  tokpos::SinusoidalPositionalEmbedding s({.max_context = 8, .dim = 4, .beyond = tokpos::BeyondTable::kExtend});
  tokpos::SinusoidalPositionalEmbedding t(std::move(s));
  EXPECT_EQ(s.max_context(), 0);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(s.forward(4, 0), tokpos::Error);
  EXPECT_EQ(t.forward(4, 0).size(), 16u);
}

TEST(MovedFrom, TokenTablesAreEmptyAndEveryCallFailsCleanly) {
  for (const bool assign : {false, true}) {
    tokpos::TokenEmbedding a({.vocab_size = 10, .dim = 4, .padding_idx = 0,
                              .id_policy = tokpos::IdPolicy::map_to_unk(1)}),
        b({.vocab_size = 3, .dim = 2});
    if (assign) {
      b = std::move(a);
    } else {
      tokpos::TokenEmbedding c(std::move(a));
    }
    EXPECT_EQ(a.vocab_size(), 0);  // NOLINT(bugprone-use-after-move): the point of the test
    EXPECT_EQ(a.dim(), 0);
    EXPECT_TRUE(a.table().empty());
    const std::vector<int64_t> ids{1, 2, 3, 4};
    EXPECT_THROW(a.forward(ids, 1, 4), tokpos::Error);
    std::vector<float> out(16);
    EXPECT_THROW(a.forward(ids, 1, 4, out), tokpos::Error);
    EXPECT_THROW(a.backward(std::vector<float>(16, 1.0f), ids, 1, 4), tokpos::Error);
    EXPECT_THROW(a.sparse_backward(std::vector<float>(16, 1.0f), ids, 1, 4), tokpos::Error);
    EXPECT_THROW(a.logits(std::vector<float>(8, 1.0f), 2), tokpos::Error);
    std::vector<float> logits(20);
    EXPECT_THROW(a.logits(std::vector<float>(8, 1.0f), 2, logits), tokpos::Error);
    EXPECT_THROW(a.logits_backward(std::vector<float>(20, 1.0f), std::vector<float>(8, 1.0f), 2), tokpos::Error);
  }
}

// A frozen table gets no gradient, but backward and sparse_backward still
// check what they would check unfrozen: sizes, the policy, the ids.
TEST(TokenEmbedding, FrozenBackwardStillChecksItsArguments) {
  auto m = tokpos::TokenEmbedding::from_pretrained(std::vector<float>(10 * 4, 1.0f), {.vocab_size = 10, .dim = 4});
  ASSERT_TRUE(m.frozen());
  const std::vector<float> d_out(2 * 4, 1.0f);
  EXPECT_TRUE(m.backward(d_out, std::vector<int64_t>{1, 2}, 1, 2).empty());
  EXPECT_TRUE(m.sparse_backward(d_out, std::vector<int64_t>{1, 2}, 1, 2).rows.empty());
  EXPECT_TRUE(m.grad().empty());
  for (const bool sparse : {false, true}) {
    auto call = [&](std::span<const float> d, std::vector<int64_t> ids, int64_t B, int64_t T,
                    std::optional<tokpos::IdPolicy> p = {}) {
      if (sparse) return void(m.sparse_backward(d, ids, B, T, p));
      m.backward(d, ids, B, T, p);
    };
    expect_error([&] { call(d_out, {1, 12}, 1, 2); }, Status::kIdOutOfRange, {"12"});
    expect_error([&] { call(d_out, {1}, 1, 2); }, Status::kShapeMismatch, {"ids has 1 elements"});
    expect_error([&] { call(std::span(d_out).first(4), {1, 2}, 1, 2); }, Status::kShapeMismatch,
                 {"d_out has 4 elements"});
    expect_error([&] { call(d_out, {1, 2}, 1, 2, tokpos::IdPolicy::map_to_unk(10)); },
                 Status::kInvalidArgument, {"unk_id 10"});
    call(d_out, {1, 12}, 1, 2, tokpos::IdPolicy::map_to_unk(3));  // mapped: no error
  }
  EXPECT_TRUE(m.grad().empty());
}

}  // namespace

namespace {

// init_std must be finite and >= 0 for both drawn tables (0 gives zeros);
// tokpos.torch's modules refuse the same values through the same check.
TEST(InitStd, NonFiniteAndNegativeAreRefusedByName) {
  for (const double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(), -1.0, -1e-300}) {
    SCOPED_TRACE(bad);
    expect_error([&] { TokenEmbedding({.vocab_size = 4, .dim = 3, .init_std = bad}); }, Status::kInvalidArgument,
                 {"TokenEmbedding", "init_std = ", "must be finite and >= 0"});
    expect_error([&] { LearnedPositionalEmbedding({.max_context = 4, .dim = 3, .init_std = bad}); },
                 Status::kInvalidArgument, {"LearnedPositionalEmbedding", "init_std = ", "must be finite and >= 0"});
  }
  const TokenEmbedding zero({.vocab_size = 4, .dim = 3, .init_std = 0.0});
  for (const float v : zero.table()) EXPECT_EQ(v, 0.0f);
}

}  // namespace
