// Vocab-parallel shards (tokpos/ops.h VocabShard, the C API's
// tokpos_op_compose_*_shard), tested from their specification: the shards'
// float32 outputs, summed, equal a reference written here (plain loops,
// float32 sums of the whole table's rows) bit for bit; each shard's gradient
// rows equal a plain in-order accumulation of the whole table's gradient;
// padding rows are never read or written; a bad id fails before anything is
// written, naming the id and the whole vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tokpos/error.h"
#include "tokpos/ops.h"
#include "tokpos/random.h"
#include "tokpos/tokpos.h"

namespace {

using tokpos::DType;
using tokpos::TensorView;
using tokpos::ops::LookupOptions;
using tokpos::ops::VocabShard;

// The rows of rank r of w, from the stated rule (not from the library).
struct Range {
  int64_t begin, rows;
};
Range range_of(int64_t V, int64_t pad, int64_t w, int64_t r) {
  int64_t padded = V;
  while (padded % pad != 0) ++padded;
  int64_t rows = 0;
  while (rows * w < padded) ++rows;
  return {r * rows, rows};
}

std::vector<float> table_of(int64_t rows, int64_t D, uint64_t seed, float scale) {
  std::vector<float> t(static_cast<size_t>(rows * D));
  for (size_t i = 0; i < t.size(); ++i) t[i] = scale * static_cast<float>(tokpos::philox_normal(seed, 3, i));
  return t;
}

// Every shard-boundary id of a w-way split of V, plus 0 and V - 1.
std::vector<int64_t> boundary_ids(int64_t V, int64_t pad, int64_t w) {
  std::vector<int64_t> ids{0, V - 1};
  for (int64_t r = 0; r < w; ++r) {
    const Range g = range_of(V, pad, w, r);
    for (int64_t x : {g.begin - 1, g.begin, g.begin + g.rows - 1, g.begin + g.rows})
      if (x >= 0 && x < V) ids.push_back(x);
  }
  return ids;
}

struct Case {
  int64_t V, D, L, pad, world;
};

class ShardSplit : public ::testing::TestWithParam<Case> {};

TEST_P(ShardSplit, SummedForwardEqualsTheWholeTableAndGradientRowsMatch) {
  const Case c = GetParam();
  std::vector<int64_t> ids = boundary_ids(c.V, c.pad, c.world);
  while (ids.size() < 24) ids.push_back((static_cast<int64_t>(ids.size()) * 7919) % c.V);
  const int64_t B = 2, T = static_cast<int64_t>(ids.size()) / 2;
  ids.resize(static_cast<size_t>(B * T));
  const int64_t D = c.D;
  const auto whole = table_of(c.V, D, 1, 1.0f);
  const auto pos = table_of(c.L, D, 2, 0.5f);
  std::vector<int64_t> pids(static_cast<size_t>(B * T));
  for (size_t i = 0; i < pids.size(); ++i) pids[i] = static_cast<int64_t>((i * 5) % c.L);

  // Reference: plain loops.
  std::vector<float> want(static_cast<size_t>(B * T * D));
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t d = 0; d < D; ++d) want[n * D + d] = whole[ids[n] * D + d] + pos[pids[n] * D + d];
  std::vector<float> d_out(want.size());
  for (size_t i = 0; i < d_out.size(); ++i) d_out[i] = static_cast<float>(tokpos::philox_normal(4, 0, i));
  std::vector<float> grad_want(whole.size(), 0.0f);  // each id used far fewer than 64 times: in-order adds
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t d = 0; d < D; ++d) grad_want[ids[n] * D + d] += d_out[n * D + d];

  const TensorView vids(ids.data(), DType::kI64, {B, T}), vpids(pids.data(), DType::kI64, {B, T});
  const TensorView vpos(pos.data(), DType::kF32, {c.L, D});
  const TensorView vdout(d_out.data(), DType::kF32, {B, T, D});
  for (const char* backend : {"cpu", "reference"}) {
    tokpos::Context ctx;
    ctx.set_backend(backend);
    std::vector<float> sum(want.size(), 0.0f);
    for (int64_t r = 0; r < c.world; ++r) {
      const Range g = range_of(c.V, c.pad, c.world, r);
      // The shard: its real rows from the whole table, padding rows a marker
      // that would show if they were ever read.
      std::vector<float> shard(static_cast<size_t>(g.rows * D), std::numeric_limits<float>::quiet_NaN());
      for (int64_t row = 0; row < g.rows && g.begin + row < c.V; ++row)
        std::copy_n(whole.data() + (g.begin + row) * D, D, shard.data() + row * D);
      const TensorView vshard(shard.data(), DType::kF32, {g.rows, D});
      std::vector<float> out(want.size(), -7.0f);
      const TensorView vout(out.data(), DType::kF32, {B, T, D});
      LookupOptions o;
      o.shard = {c.V, g.begin};
      tokpos::ops::compose_forward(vout, vids, vshard, r == 0 ? vpos.get() : nullptr, vpids.get(), 0, o, &ctx);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];

      // Backward: the shard's rows of the whole gradient; padding rows keep their marker.
      std::vector<float> grad(shard.size(), std::numeric_limits<float>::quiet_NaN());
      for (int64_t row = 0; row < g.rows && g.begin + row < c.V; ++row) std::fill_n(grad.data() + row * D, D, 0.0f);
      const TensorView vgrad(grad.data(), DType::kF32, {g.rows, D});
      tokpos::ops::compose_backward(vgrad.get(), nullptr, vdout, vids, vpids.get(), 0, o, &ctx);
      for (int64_t row = 0; row < g.rows; ++row)
        for (int64_t d = 0; d < D; ++d) {
          const float got = grad[row * D + d];
          if (g.begin + row >= c.V) {
            ASSERT_TRUE(std::isnan(got)) << backend << " rank " << r << " padding row " << row << " was written";
          } else {
            const float w = grad_want[(g.begin + row) * D + d];
            ASSERT_EQ(std::memcmp(&got, &w, 4), 0)
                << backend << " rank " << r << " row " << g.begin + row << " d " << d << ": " << got << " vs " << w;
          }
        }
    }
    for (size_t i = 0; i < sum.size(); ++i) {
      ASSERT_FALSE(std::isnan(sum[i])) << backend << " element " << i << " read a padding row";
      ASSERT_EQ(sum[i], want[i]) << backend << " element " << i;  // == : -0 and +0 equal
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, ShardSplit,
                         ::testing::Values(Case{10, 8, 16, 1, 1}, Case{10, 8, 16, 1, 2}, Case{10, 8, 16, 1, 3},
                                           Case{10, 8, 16, 1, 4}, Case{37, 20, 9, 8, 4}, Case{50, 64, 32, 16, 3},
                                           Case{7, 33, 5, 1, 4}));

TEST(Shard, OutsideRowsAreThePositionRowOrZerosInEveryDtype) {
  const int64_t V = 6, D = 40, L = 4;
  const auto whole = table_of(V, D, 5, 1.0f);
  std::vector<uint16_t> pos16(static_cast<size_t>(L * D));
  for (size_t i = 0; i < pos16.size(); ++i) pos16[i] = static_cast<uint16_t>(0x3c00 + i);  // f16 and bf16 values
  std::vector<int64_t> ids{0, 5, 3, 2};
  const TensorView vids(ids.data(), DType::kI64, {4});
  // Shard [2, 4) of 6: ids 0 and 5 are outside.
  std::vector<float> shard(whole.begin() + 2 * D, whole.begin() + 4 * D);
  const TensorView vshard(shard.data(), DType::kF32, {2, D});
  for (const DType pd : {DType::kBF16, DType::kF16}) {
    const TensorView vpos(pos16.data(), pd, {L, D});
    for (int64_t bytes : {int64_t{0}, INT64_MAX}) {  // streamed and plain stores
      tokpos::Context ctx;
      ctx.set_stream_min_bytes(bytes);
      std::vector<float> out(static_cast<size_t>(4 * D), -1.0f);
      const TensorView vout(out.data(), DType::kF32, {4, D});
      LookupOptions o;
      o.shard = {V, 2};
      tokpos::ops::compose_forward(vout, vids, vshard, vpos.get(), nullptr, 0, o, &ctx);
      for (int64_t d = 0; d < D; ++d) {
        float p0, p1;
        const uint16_t b0 = pos16[0 * D + d], b1 = pos16[1 * D + d];
        if (pd == DType::kBF16) {
          const uint32_t u0 = static_cast<uint32_t>(b0) << 16, u1 = static_cast<uint32_t>(b1) << 16;
          std::memcpy(&p0, &u0, 4);
          std::memcpy(&p1, &u1, 4);
        } else {
          p0 = static_cast<float>(std::ldexp(1.0 + (b0 & 0x3ff) / 1024.0, ((b0 >> 10) & 0x1f) - 15));
          p1 = static_cast<float>(std::ldexp(1.0 + (b1 & 0x3ff) / 1024.0, ((b1 >> 10) & 0x1f) - 15));
        }
        EXPECT_EQ(out[0 * D + d], p0) << "id 0 is outside: its row is position 0's";
        EXPECT_EQ(out[1 * D + d], p1) << "id 5 is outside: its row is position 1's";
      }
    }
  }
  std::vector<float> out(static_cast<size_t>(4 * D), -1.0f);
  const TensorView vout(out.data(), DType::kF32, {4, D});
  LookupOptions o;
  o.shard = {V, 2};
  tokpos::ops::compose_forward(vout, vids, vshard, nullptr, nullptr, 0, o);
  for (int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(out[d], 0.0f);
    EXPECT_FALSE(std::signbit(out[d]));
    EXPECT_EQ(out[D + d], 0.0f);
    EXPECT_EQ(out[2 * D + d], whole[3 * D + d]);
    EXPECT_EQ(out[3 * D + d], whole[2 * D + d]);
  }
}

TEST(Shard, HotRowsKeepTheWholeTableOrderOfAdditions) {
  // A row used 200 times is summed in blocks of 64 (tokpos.h); its shard
  // gradient must match the whole-table backward's bits, any thread count.
  const int64_t V = 9, D = 24, N = 300;
  std::vector<int64_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = n % 3 == 0 ? (n % 9) : 7;
  std::vector<float> d_out(static_cast<size_t>(N * D));
  for (size_t i = 0; i < d_out.size(); ++i) d_out[i] = static_cast<float>(tokpos::philox_normal(8, 1, i));
  const TensorView vids(ids.data(), DType::kI64, {N}), vdout(d_out.data(), DType::kF32, {N, D});
  std::vector<float> whole(static_cast<size_t>(V * D), 0.0f);
  const TensorView vwhole(whole.data(), DType::kF32, {V, D});
  tokpos::ops::compose_backward(vwhole.get(), nullptr, vdout, vids);
  for (int threads : {1, 2, 3}) {
    tokpos::Context ctx;
    ctx.set_num_threads(threads);
    std::vector<float> shard(static_cast<size_t>(4 * D), 0.0f);  // rows [5, 9)
    const TensorView vshard(shard.data(), DType::kF32, {4, D});
    LookupOptions o;
    o.shard = {V, 5};
    tokpos::ops::compose_backward(vshard.get(), nullptr, vdout, vids, nullptr, 0, o, &ctx);
    EXPECT_EQ(std::memcmp(shard.data(), whole.data() + 5 * D, shard.size() * 4), 0) << threads << " threads";
  }
}

TEST(Shard, PlansHoldShardRows) {
  std::vector<int32_t> ids{0, 4, 5, 9, 5};
  const TensorView vids(ids.data(), DType::kI32, {5});
  LookupOptions o;
  o.shard = {10, 4};
  const tokpos::ops::RowPlan plan(vids, 3, nullptr, 0, o);  // rows [4, 7)
  const std::vector<int64_t> rows(plan.token_rows().begin(), plan.token_rows().end());
  EXPECT_EQ(rows, (std::vector<int64_t>{-1, 0, 1, -1, 1}));
  const std::vector<int64_t> touched(plan.touched_rows().begin(), plan.touched_rows().end());
  EXPECT_EQ(touched, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(plan.shard().vocab_size, 10);
  EXPECT_EQ(plan.shard().row_begin, 4);
  // padding_idx is a global id: id 5 gets no gradient.
  o.padding_idx = 5;
  const tokpos::ops::RowPlan padded(vids, 3, nullptr, 0, o);
  const std::vector<int64_t> t2(padded.touched_rows().begin(), padded.touched_rows().end());
  EXPECT_EQ(t2, (std::vector<int64_t>{0}));
  // The typed (BERT) forward does not take shard plans.
  std::vector<float> out(5 * 4), tok(3 * 4), pos(8 * 4);
  const TensorView vout(out.data(), DType::kF32, {5, 4}), vtok(tok.data(), DType::kF32, {3, 4}),
      vpos(pos.data(), DType::kF32, {8, 4});
  try {
    tokpos::ops::compose_typed_forward(vout, plan, vtok, nullptr, nullptr, vpos, nullptr, nullptr, 1e-5);
    FAIL() << "a shard plan was accepted by the typed forward";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("vocab-shard"), std::string::npos) << e.what();
  }
}

// Runs f, which must throw Error(status) whose message contains every needle.
template <typename F>
void expect_error(F&& f, tokpos::Status status, std::initializer_list<const char*> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
  }
}

TEST(Shard, BadInputFailsBeforeAnythingIsWritten) {
  const int64_t D = 4;
  std::vector<float> shard(3 * D, 1.0f), grad(3 * D, 0.0f), pos(8 * D, 0.5f);
  const TensorView vshard(shard.data(), DType::kF32, {3, D}), vgrad(grad.data(), DType::kF32, {3, D});
  std::vector<float> out(4 * D, -3.0f), d_out(4 * D, 1.0f);
  const TensorView vout(out.data(), DType::kF32, {4, D}), vdout(d_out.data(), DType::kF32, {4, D});
  LookupOptions o;
  o.shard = {10, 3};
  for (const int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1000}}) {
    std::vector<int64_t> ids{3, 4, bad, 0};  // the bad id is outside this shard too
    const TensorView vids(ids.data(), DType::kI64, {4});
    const std::string id = "id " + std::to_string(bad);
    expect_error([&] { tokpos::ops::compose_forward(vout, vids, vshard, nullptr, nullptr, 0, o); },
                 tokpos::Status::kIdOutOfRange, {id.c_str(), "[0, 10)"});
    expect_error([&] { tokpos::ops::compose_backward(vgrad.get(), nullptr, vdout, vids, nullptr, 0, o); },
                 tokpos::Status::kIdOutOfRange, {id.c_str(), "[0, 10)"});
  }
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == -3.0f; }));
  EXPECT_TRUE(std::all_of(grad.begin(), grad.end(), [](float x) { return x == 0.0f; }));

  std::vector<int64_t> ids{3, 4, 5, 0};
  const TensorView vids(ids.data(), DType::kI64, {4});
  LookupOptions unk = o;
  unk.unk_id = 0;
  expect_error([&] { tokpos::ops::compose_forward(vout, vids, vshard, nullptr, nullptr, 0, unk); },
               tokpos::Status::kInvalidArgument, {"unk_id 0", "vocab shard"});
  LookupOptions neg = o;
  neg.shard.row_begin = -2;
  expect_error([&] { tokpos::ops::compose_forward(vout, vids, vshard, nullptr, nullptr, 0, neg); },
               tokpos::Status::kInvalidArgument, {"row_begin", "-2"});
  LookupOptions vneg = o;
  vneg.shard.vocab_size = -5;
  expect_error([&] { tokpos::ops::compose_forward(vout, vids, vshard, nullptr, nullptr, 0, vneg); },
               tokpos::Status::kInvalidArgument, {"vocab_size", "-5"});
  LookupOptions over = o;
  over.shard.row_begin = INT64_MAX - 1;
  expect_error([&] { tokpos::ops::compose_forward(vout, vids, vshard, nullptr, nullptr, 0, over); },
               tokpos::Status::kSizeOverflow, {"overflows"});
  // Positions past the (one rank's) position table.
  expect_error([&] { tokpos::ops::compose_forward(vout, vids, vshard, TensorView(pos.data(), DType::kF32, {2, D}).get(),
                                                  nullptr, 0, o); },
               tokpos::Status::kPositionOutOfRange, {"2 rows"});
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == -3.0f; }));
}

TEST(Shard, RangesFollowTheStatedRule) {
  for (int64_t V : {1, 7, 10, 50257, 128256})
    for (int64_t pad : {1, 8, 128})
      for (int64_t w : {1, 2, 3, 4, 8}) {
        int64_t covered = 0;
        for (int64_t r = 0; r < w; ++r) {
          const auto got = tokpos::ops::vocab_shard_range(V, pad, w, r);
          const Range want = range_of(V, pad, w, r);
          ASSERT_EQ(got.row_begin, want.begin) << V << " " << pad << " " << w << " " << r;
          ASSERT_EQ(got.rows, want.rows);
          ASSERT_EQ(got.row_begin, covered);
          covered += got.rows;
        }
        EXPECT_GE(covered, V);
        EXPECT_LT(covered - V, pad * w + w);
      }
  expect_error([] { tokpos::ops::vocab_shard_range(0, 1, 2, 0); }, tokpos::Status::kInvalidArgument,
               {"vocab_size", "0"});
  expect_error([] { tokpos::ops::vocab_shard_range(10, 0, 2, 0); }, tokpos::Status::kInvalidArgument,
               {"pad_to_multiple_of"});
  expect_error([] { tokpos::ops::vocab_shard_range(10, 1, 0, 0); }, tokpos::Status::kInvalidArgument,
               {"world_size"});
  expect_error([] { tokpos::ops::vocab_shard_range(10, 1, 2, 2); }, tokpos::Status::kInvalidArgument,
               {"rank 2", "[0, 2)"});
  expect_error([] { tokpos::ops::vocab_shard_range(INT64_MAX, 1024, 2, 0); }, tokpos::Status::kSizeOverflow,
               {"overflows"});
}

TEST(Shard, FillNormalSlicesAreTheWholeTablesNumbers) {
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{3}, uint64_t{4}, uint64_t{4097}}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}}) {
      std::vector<float> got(n);
      tokpos::fill_normal(got, 42, 0, 0.0, 0.02, first);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], static_cast<float>(0.02 * tokpos::philox_normal(42, 0, first + i)))
            << "first " << first << " i " << i;
    }
  }
  std::vector<float> two(2);
  expect_error([&] { tokpos::fill_normal(two, 1, 0, 0.0, 1.0, UINT64_MAX); }, tokpos::Status::kSizeOverflow,
               {"overflows"});
}

TEST(ShardCApi, TableRowsAreTheModulesRowsAndPaddingIsZero) {
  const int64_t V = 11, D = 6;
  tokpos_token_embedding* e = nullptr;
  ASSERT_EQ(tokpos_token_embedding_create(&e, V, D, 77), TOKPOS_OK);
  const float* table = nullptr;
  ASSERT_EQ(tokpos_token_embedding_table(e, &table), TOKPOS_OK);
  for (int w : {1, 2, 3, 4}) {
    for (int r = 0; r < w; ++r) {
      int64_t begin = -1, rows = -1;
      ASSERT_EQ(tokpos_vocab_shard_range(&begin, &rows, V, 4, w, r), TOKPOS_OK);
      std::vector<float> shard(static_cast<size_t>(rows * D), -1.0f);
      ASSERT_EQ(tokpos_token_table_rows(shard.data(), begin, rows, V, D, 77), TOKPOS_OK);
      for (int64_t row = 0; row < rows; ++row)
        for (int64_t d = 0; d < D; ++d) {
          const float want = begin + row < V ? table[(begin + row) * D + d] : 0.0f;
          ASSERT_EQ(shard[row * D + d], want) << w << " ranks, rank " << r << " row " << begin + row;
        }
    }
  }
  tokpos_token_embedding_free(e);

  std::vector<float> buf(4, 9.0f);
  EXPECT_EQ(tokpos_token_table_rows(nullptr, 0, 1, 4, 4, 1), TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_token_table_rows(buf.data(), -1, 1, 4, 4, 1), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("row_begin"), std::string::npos) << tokpos_last_error();
  EXPECT_EQ(tokpos_token_table_rows(buf.data(), 0, 1, 0, 4, 1), TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_token_table_rows(buf.data(), INT64_MAX, 2, 4, 4, 1), TOKPOS_SIZE_OVERFLOW);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](float x) { return x == 9.0f; }));
  int64_t b = 0, n = 0;
  EXPECT_EQ(tokpos_vocab_shard_range(nullptr, &n, 10, 1, 2, 0), TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_vocab_shard_range(&b, &n, 10, 1, 2, 5), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("rank 5"), std::string::npos) << tokpos_last_error();
}

TEST(ShardCApi, ForwardAndBackwardThroughDLTensors) {
  const int64_t V = 5, D = 3;
  std::vector<float> whole(V * D);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i) + 0.25f;
  std::vector<int32_t> ids{4, 1, 2};
  const TensorView vids(ids.data(), DType::kI32, {3});
  std::vector<float> sum(3 * D, 0.0f);
  for (int64_t begin : {0, 2, 4}) {  // three shards of 2 rows: [0, 2), [2, 4), [4, 6) (row 5 padding)
    std::vector<float> shard(2 * D, 0.0f);
    for (int64_t row = 0; row < 2 && begin + row < V; ++row)
      std::copy_n(whole.data() + (begin + row) * D, D, shard.data() + row * D);
    const TensorView vshard(shard.data(), DType::kF32, {2, D});
    std::vector<float> out(3 * D, -1.0f);
    const TensorView vout(out.data(), DType::kF32, {3, D});
    ASSERT_EQ(tokpos_op_compose_forward_shard(vout.get(), vids.get(), vshard.get(), V, begin, nullptr, nullptr, 0),
              TOKPOS_OK)
        << tokpos_last_error();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];
    std::vector<float> grad(2 * D, 0.0f);
    const TensorView vgrad(grad.data(), DType::kF32, {2, D});
    std::vector<float> d_out(3 * D, 1.0f);
    const TensorView vdout(d_out.data(), DType::kF32, {3, D});
    ASSERT_EQ(tokpos_op_compose_backward_shard(vgrad.get(), nullptr, vdout.get(), vids.get(), V, begin, nullptr, 0),
              TOKPOS_OK);
    for (int64_t row = 0; row < 2; ++row) {
      const int64_t id = begin + row;
      const float want = (id == 4 || id == 1 || id == 2) ? 1.0f : 0.0f;
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(grad[row * D + d], want) << "row " << id;
    }
  }
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(sum[n * D + d], whole[ids[n] * D + d]);

  std::vector<float> shard(2 * D), out(3 * D, -1.0f);
  const TensorView vshard(shard.data(), DType::kF32, {2, D}), vout(out.data(), DType::kF32, {3, D});
  EXPECT_EQ(tokpos_op_compose_forward_shard(vout.get(), vids.get(), vshard.get(), 0, 0, nullptr, nullptr, 0),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tokpos_last_error()).find("vocab_size"), std::string::npos);
  EXPECT_EQ(tokpos_op_compose_forward_shard(vout.get(), vids.get(), nullptr, 5, 0, nullptr, nullptr, 0),
            TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_op_compose_forward_shard(vout.get(), vids.get(), vshard.get(), 4, 0, nullptr, nullptr, 0),
            TOKPOS_ID_OUT_OF_RANGE);
  EXPECT_NE(std::string(tokpos_last_error()).find("tokpos_op_compose_forward_shard"), std::string::npos)
      << tokpos_last_error();
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == -1.0f; }));
  EXPECT_EQ(tokpos_op_compose_backward_shard(nullptr, nullptr, nullptr, vids.get(), 5, 0, nullptr, 0),
            TOKPOS_NULL_POINTER);
}

}  // namespace
