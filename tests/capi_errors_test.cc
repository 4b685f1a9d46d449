// The C API's failure contract, entry point by entry point: a status, a message
// naming the value and the limit, and outputs left exactly as they were.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tokpos/tokpos.h"

namespace {

using tokpos::testing::bitwise_equal;
using tokpos::testing::noise;
using tokpos::testing::sentinel;

void expect_message(std::initializer_list<std::string> pieces) {
  const std::string msg = tokpos_last_error();
  for (const auto& p : pieces) EXPECT_NE(msg.find(p), std::string::npos) << msg << " lacks " << p;
}

TEST(CApi, StatusStrings) {
  EXPECT_STREQ(tokpos_status_string(TOKPOS_OK), "TOKPOS_OK");
  EXPECT_STREQ(tokpos_status_string(TOKPOS_ID_OUT_OF_RANGE), "TOKPOS_ID_OUT_OF_RANGE");
  EXPECT_STREQ(tokpos_status_string(TOKPOS_INTERNAL), "TOKPOS_INTERNAL");
  EXPECT_STREQ(tokpos_status_string(TOKPOS_UNIMPLEMENTED), "TOKPOS_UNIMPLEMENTED");
  EXPECT_STREQ(tokpos_status_string(TOKPOS_IO_ERROR), "TOKPOS_IO_ERROR");
  EXPECT_STREQ(tokpos_status_string(TOKPOS_CORRUPT_FILE), "TOKPOS_CORRUPT_FILE");
  EXPECT_STREQ(tokpos_status_string(static_cast<tokpos_status>(9)), "TOKPOS_UNIMPLEMENTED");
  EXPECT_STREQ(tokpos_status_string(static_cast<tokpos_status>(10)), "TOKPOS_IO_ERROR");
  EXPECT_STREQ(tokpos_status_string(static_cast<tokpos_status>(11)), "TOKPOS_CORRUPT_FILE");
  EXPECT_STREQ(tokpos_status_string(static_cast<tokpos_status>(12)), "TOKPOS_UNKNOWN_STATUS");
  EXPECT_STREQ(tokpos_status_string(static_cast<tokpos_status>(-1)), "TOKPOS_UNKNOWN_STATUS");
  EXPECT_STREQ(tokpos_status_string(static_cast<tokpos_status>(99)), "TOKPOS_UNKNOWN_STATUS");
  EXPECT_STREQ(tokpos_version(), "0.1.0");
}

TEST(CApi, EmbeddingForwardErrors) {
  const int64_t V = 8, D = 4;
  const auto table = noise(V * D, 1);
  const int64_t ids[2] = {1, 2};
  auto out = sentinel(2 * D);
  const auto before = out;
  EXPECT_EQ(tokpos_embedding_forward(nullptr, 2, table.data(), V, D, 1, out.data()), TOKPOS_NULL_POINTER);
  expect_message({"tokpos_embedding_forward", "token_ids is NULL"});
  EXPECT_EQ(tokpos_embedding_forward(ids, 2, nullptr, V, D, 1, out.data()), TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_embedding_forward(ids, 2, table.data(), V, D, 1, nullptr), TOKPOS_NULL_POINTER);
  expect_message({"out is NULL"});
  EXPECT_EQ(tokpos_embedding_forward(ids, -1, table.data(), V, D, 1, out.data()), TOKPOS_INVALID_ARGUMENT);
  expect_message({"seq_len = -1"});
  EXPECT_EQ(tokpos_embedding_forward(ids, 2, table.data(), -5, D, 1, out.data()), TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_embedding_forward(ids, 2, table.data(), V, 0, 1, out.data()), TOKPOS_INVALID_ARGUMENT);
  expect_message({"hidden_dim = 0"});
  EXPECT_EQ(tokpos_embedding_forward(ids, 2, table.data(), V, D, 8, out.data()), TOKPOS_INVALID_ARGUMENT);
  expect_message({"unk_id 8 is outside [0, 8)"});
  EXPECT_EQ(tokpos_embedding_forward(ids, 2, table.data(), V, D, -1, out.data()), TOKPOS_INVALID_ARGUMENT);
  EXPECT_TRUE(bitwise_equal(out, before));
}

TEST(CApi, ComposeForwardErrorsWriteNothing) {
  const int64_t V = 10, L = 4, D = 3, B = 2, T = 3;
  const auto tok = noise(V * D, 2), pos = noise(L * D, 3);
  std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6};
  auto out = sentinel(B * T * D);
  const auto before = out;
  ids[4] = 10;
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids.data(), B, T, tok.data(), V, pos.data(), L, D),
            TOKPOS_ID_OUT_OF_RANGE);
  expect_message({"tokpos_compose_forward", "token id 10 at (b=1, t=1) is outside [0, 10)"});
  ids[4] = 5;
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids.data(), 1, 6, tok.data(), V, pos.data(), L, D),
            TOKPOS_POSITION_OUT_OF_RANGE);
  expect_message({"T = 6", "exceed the 4 rows of pos_table"});
  EXPECT_EQ(tokpos_compose_forward(out.data(), nullptr, B, T, tok.data(), V, pos.data(), L, D),
            TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids.data(), B, T, nullptr, V, pos.data(), L, D),
            TOKPOS_NULL_POINTER);
  expect_message({"token_table is NULL"});
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids.data(), B, T, tok.data(), V, nullptr, L, D),
            TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_compose_forward(nullptr, ids.data(), B, T, tok.data(), V, pos.data(), L, D),
            TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids.data(), B, T, tok.data(), 0, pos.data(), L, D),
            TOKPOS_INVALID_ARGUMENT);
  expect_message({"V = 0"});
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids.data(), B, T, tok.data(), V, pos.data(), 0, D),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids.data(), B, T, tok.data(), V, pos.data(), L, 0),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids.data(), int64_t{1} << 40, int64_t{1} << 30, tok.data(), V,
                                   pos.data(), L, D),
            TOKPOS_SIZE_OVERFLOW);
  expect_message({"B*T*D"});
  EXPECT_TRUE(bitwise_equal(out, before));
  // Empty batches succeed without touching anything, NULLs included.
  EXPECT_EQ(tokpos_compose_forward(nullptr, nullptr, 0, T, tok.data(), V, pos.data(), L, D), TOKPOS_OK);
}

TEST(CApi, ComposeForwardExMatchesTheFloatPathAndChecksDtypes) {
  const int64_t V = 10, L = 6, D = 5, B = 2, T = 3;
  const auto tok = noise(V * D, 20), pos = noise(L * D, 21);
  const std::vector<int64_t> ids = {1, 2, 3, 9, 0, 4};
  std::vector<float> a(B * T * D), b(B * T * D);
  ASSERT_EQ(tokpos_compose_forward(a.data(), ids.data(), B, T, tok.data(), V, pos.data(), L, D), TOKPOS_OK);
  ASSERT_EQ(tokpos_compose_forward_ex(b.data(), TOKPOS_DTYPE_F32, ids.data(), B, T, tok.data(),
                                      TOKPOS_DTYPE_F32, V, pos.data(), TOKPOS_DTYPE_F32, L, D),
            TOKPOS_OK);
  EXPECT_TRUE(bitwise_equal(a, b));
  std::vector<uint16_t> bf(B * T * D, 0x1234);
  const auto before = bf;
  EXPECT_EQ(tokpos_compose_forward_ex(bf.data(), TOKPOS_DTYPE_F16, ids.data(), B, T, tok.data(),
                                      TOKPOS_DTYPE_F32, V, pos.data(), TOKPOS_DTYPE_F32, L, D),
            TOKPOS_INVALID_ARGUMENT);
  expect_message({"out_dtype 2 is outside [0, 1]"});
  std::vector<int64_t> bad = ids;
  bad[5] = 10;
  EXPECT_EQ(tokpos_compose_forward_ex(bf.data(), TOKPOS_DTYPE_BF16, bad.data(), B, T, tok.data(),
                                      TOKPOS_DTYPE_F32, V, pos.data(), TOKPOS_DTYPE_F32, L, D),
            TOKPOS_ID_OUT_OF_RANGE);
  EXPECT_EQ(bf, before);
  ASSERT_EQ(tokpos_compose_forward_ex(bf.data(), TOKPOS_DTYPE_BF16, ids.data(), B, T, tok.data(),
                                      TOKPOS_DTYPE_F32, V, pos.data(), TOKPOS_DTYPE_F32, L, D),
            TOKPOS_OK);
  for (size_t i = 0; i < bf.size(); ++i) {  // bf16 of the float sum, nearest even: within half a bf16 ulp
    uint32_t u = static_cast<uint32_t>(bf[i]) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    EXPECT_LE(std::abs(v - a[i]), std::abs(a[i]) * (1.0f / 256) + 1e-30f) << i;
  }
}

// A float64 lookup through the raw pointers: out, token_table and pos_table
// all double, each element the one double addition of a plain loop (no
// float32 step: the tables hold values float32 cannot). float64 beside
// another dtype is the op's refusal, naming both, with out untouched.
TEST(CApi, ComposeForwardExTakesFloat64Throughout) {
  const int64_t V = 10, L = 6, D = 5, B = 2, T = 3;
  std::vector<double> tok(V * D), pos(L * D);
  for (size_t k = 0; k < tok.size(); ++k) {
    tok[k] = std::ldexp(1.0 + 1.0 / 3.0, static_cast<int>(k % 7)) * (k % 2 ? -1 : 1);
  }
  for (size_t k = 0; k < pos.size(); ++k) pos[k] = 1.0 / static_cast<double>(k + 3);
  const std::vector<int64_t> ids = {1, 2, 3, 9, 0, 4};
  std::vector<double> want(B * T * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d)
        want[(b * T + t) * D + d] = tok[ids[b * T + t] * D + d] + pos[t * D + d];
  std::vector<double> out(B * T * D, -7.0);
  ASSERT_EQ(tokpos_compose_forward_ex(out.data(), TOKPOS_DTYPE_F64, ids.data(), B, T, tok.data(),
                                      TOKPOS_DTYPE_F64, V, pos.data(), TOKPOS_DTYPE_F64, L, D),
            TOKPOS_OK)
      << tokpos_last_error();
  EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(double)), 0);
  EXPECT_NE(static_cast<double>(static_cast<float>(want[0])), want[0]);  // the check sees a float32 rounding

  // float64 beside float32, in each role: refused, nothing written.
  const auto tok32 = noise(V * D, 22), pos32 = noise(L * D, 23);
  std::vector<float> out32(B * T * D, 3.0f);
  const std::vector<double> out_before = out;
  const std::vector<float> out32_before = out32;
  EXPECT_EQ(tokpos_compose_forward_ex(out.data(), TOKPOS_DTYPE_F64, ids.data(), B, T, tok.data(),
                                      TOKPOS_DTYPE_F64, V, pos32.data(), TOKPOS_DTYPE_F32, L, D),
            TOKPOS_UNIMPLEMENTED);
  expect_message({"tokpos_compose_forward_ex", "token_table is f64 but pos_table is f32"});
  EXPECT_EQ(tokpos_compose_forward_ex(out.data(), TOKPOS_DTYPE_F64, ids.data(), B, T, tok32.data(),
                                      TOKPOS_DTYPE_F32, V, pos32.data(), TOKPOS_DTYPE_F32, L, D),
            TOKPOS_UNIMPLEMENTED);
  expect_message({"out is f64 but token_table is f32", "float64 for every table, output and gradient"});
  EXPECT_EQ(tokpos_compose_forward_ex(out32.data(), TOKPOS_DTYPE_F32, ids.data(), B, T, tok32.data(),
                                      TOKPOS_DTYPE_F32, V, pos.data(), TOKPOS_DTYPE_F64, L, D),
            TOKPOS_UNIMPLEMENTED);
  expect_message({"pos_table is f64 but token_table is f32"});
  EXPECT_EQ(std::memcmp(out.data(), out_before.data(), out.size() * sizeof(double)), 0);
  EXPECT_TRUE(bitwise_equal(out32, out32_before));

  // The index types and values past the enum are not table types.
  EXPECT_EQ(tokpos_compose_forward_ex(out.data(), TOKPOS_DTYPE_F64, ids.data(), B, T, tok.data(),
                                      TOKPOS_DTYPE_I64, V, pos.data(), TOKPOS_DTYPE_F64, L, D),
            TOKPOS_INVALID_ARGUMENT);
  expect_message({"token_dtype 4 is outside [0, 2] and is not TOKPOS_DTYPE_F64 (5)"});
  EXPECT_EQ(tokpos_compose_forward_ex(out.data(), static_cast<tokpos_dtype>(6), ids.data(), B, T, tok.data(),
                                      TOKPOS_DTYPE_F64, V, pos.data(), TOKPOS_DTYPE_F64, L, D),
            TOKPOS_INVALID_ARGUMENT);
  expect_message({"out_dtype 6 is outside [0, 1] and is not TOKPOS_DTYPE_F64 (5)"});
  EXPECT_EQ(std::memcmp(out.data(), out_before.data(), out.size() * sizeof(double)), 0);
}

TEST(CApi, ComposeBackwardErrorsLeaveGradientsUntouched) {
  const int64_t V = 10, L = 4, D = 3, B = 1, T = 3;
  auto g_tok = noise(V * D, 4), g_pos = noise(L * D, 5);
  const auto tok_before = g_tok, pos_before = g_pos;
  const auto d_out = noise(B * T * D, 6);
  const std::vector<int64_t> bad = {1, 11, 2};
  EXPECT_EQ(tokpos_compose_backward(g_tok.data(), g_pos.data(), d_out.data(), bad.data(), B, T, V, L, D),
            TOKPOS_ID_OUT_OF_RANGE);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5};
  EXPECT_EQ(
      tokpos_compose_backward(g_tok.data(), g_pos.data(), noise(5 * D, 7).data(), ids.data(), 1, 5, V, L, D),
      TOKPOS_POSITION_OUT_OF_RANGE);
  EXPECT_EQ(tokpos_compose_backward(nullptr, g_pos.data(), d_out.data(), ids.data(), B, T, V, L, D),
            TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_compose_backward(g_tok.data(), g_pos.data(), nullptr, ids.data(), B, T, V, L, D),
            TOKPOS_NULL_POINTER);
  expect_message({"d_out is NULL"});
  EXPECT_TRUE(bitwise_equal(g_tok, tok_before));
  EXPECT_TRUE(bitwise_equal(g_pos, pos_before));
  // d_pos_table may be NULL.
  EXPECT_EQ(tokpos_compose_backward(g_tok.data(), nullptr, d_out.data(), ids.data(), B, T, V, L, D),
            TOKPOS_OK);
}

TEST(CApi, HandlesRejectNullAndBadArguments) {
  tokpos_token_embedding* e = nullptr;
  EXPECT_EQ(tokpos_token_embedding_create(nullptr, 4, 4, 0), TOKPOS_NULL_POINTER);
  EXPECT_EQ(tokpos_token_embedding_create(&e, 0, 4, 0), TOKPOS_INVALID_ARGUMENT);
  expect_message({"vocab_size = 0"});
  EXPECT_EQ(e, nullptr);
  ASSERT_EQ(tokpos_token_embedding_create(&e, 4, 2, 0), TOKPOS_OK);
  EXPECT_EQ(tokpos_token_embedding_forward(nullptr, nullptr, 1, 1, nullptr), TOKPOS_NULL_POINTER);
  expect_message({"handle is NULL"});
  const int64_t bad = 4;
  auto out = sentinel(2);
  EXPECT_EQ(tokpos_token_embedding_forward(e, &bad, 1, 1, out.data()), TOKPOS_ID_OUT_OF_RANGE);
  expect_message({"token id 4 at (b=0, t=0) is outside [0, 4)"});
  EXPECT_TRUE(bitwise_equal(out, sentinel(2)));
  EXPECT_EQ(tokpos_token_embedding_set_id_policy(e, TOKPOS_IDS_MAP_TO_UNK, 9), TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_token_embedding_set_id_policy(e, static_cast<tokpos_id_policy>(5), 0),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_token_embedding_set_padding_idx(e, 4), TOKPOS_INVALID_ARGUMENT);
  EXPECT_EQ(tokpos_token_embedding_num_parameters(nullptr), -1);
  tokpos_token_embedding_free(e);
  tokpos_token_embedding_free(nullptr);  // like free(NULL)

  tokpos_composer* c = nullptr;
  EXPECT_EQ(tokpos_composer_create(&c, nullptr), TOKPOS_NULL_POINTER);
  auto o = tokpos_composer_default_options(10, 4, 8);
  o.position = static_cast<tokpos_position_kind>(7);
  EXPECT_EQ(tokpos_composer_create(&c, &o), TOKPOS_INVALID_ARGUMENT);
  expect_message({"position kind 7"});
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(tokpos_composer_num_parameters(nullptr), -1);

  tokpos_position_embedding* p = nullptr;
  EXPECT_EQ(tokpos_position_embedding_create_sinusoidal(&p, 8, 4, 0.0), TOKPOS_INVALID_ARGUMENT);
  expect_message({"base = 0"});
  ASSERT_EQ(tokpos_position_embedding_create_sinusoidal(&p, 8, 4, 10000.0), TOKPOS_OK);
  auto pout = sentinel(9 * 4);
  EXPECT_EQ(tokpos_position_embedding_forward(p, 9, 0, pout.data()), TOKPOS_POSITION_OUT_OF_RANGE);
  expect_message({"T = 9", "L = 8"});
  EXPECT_EQ(tokpos_position_embedding_forward(p, 3, 6, pout.data()), TOKPOS_POSITION_OUT_OF_RANGE);
  expect_message({"start + T = 6 + 3"});
  EXPECT_TRUE(bitwise_equal(pout, sentinel(9 * 4)));
  tokpos_position_embedding_free(p);
}

// Found by make fuzz: hidden_dim = INT64_MAX overflowed (D + 1) / 2 (undefined
// behaviour) and built an O(D) column map for one element. Now O(1) and defined.
TEST(CApi, FuzzFoundHugeHiddenDimIsDefined) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  const float v = tokpos_pe_sinusoidal(5, 3, huge);  // cos(5 * 10000^(-2/huge)) ~ cos(5)
  EXPECT_NEAR(v, std::cos(5.0), 1e-6);
  EXPECT_EQ(tokpos_pe_sinusoidal(5, huge - 1, huge), tokpos_pe_sinusoidal(5, huge - 1, huge));  // deterministic
  EXPECT_TRUE(std::isnan(tokpos_pe_sinusoidal(5, huge, huge)));
}

TEST(CApi, LastErrorIsPerThread) {
  EXPECT_EQ(tokpos_compose_forward(nullptr, nullptr, 1, 1, nullptr, 1, nullptr, 1, 1), TOKPOS_NULL_POINTER);
  std::string other;
  std::thread([&] { other = tokpos_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(tokpos_last_error()), "");
}

// Outputs that alias an input: every entry point refuses them, writes
// nothing, and says which buffers overlap. (A result computed through
// aliased buffers would depend on the order of the writes.)
TEST(CApi, AliasedBuffersAreRefusedOnEveryEntryPoint) {
  constexpr int64_t B = 1, T = 3, V = 6, L = 4, D = 4;
  const std::vector<int64_t> ids = {1, 5, 2};
  auto snapshot = [](const float* p, int64_t n) { return std::vector<float>(p, p + n); };
  auto refused = [&](tokpos_status st, const float* buf, const std::vector<float>& before, const char* what) {
    EXPECT_EQ(st, TOKPOS_INVALID_ARGUMENT) << what << ": " << tokpos_last_error();
    EXPECT_NE(std::string(tokpos_last_error()).find("overlaps"), std::string::npos) << what << ": "
                                                                                     << tokpos_last_error();
    EXPECT_TRUE(bitwise_equal(snapshot(buf, static_cast<int64_t>(before.size())), before)) << what;
  };

  // Raw-pointer functions: out over a table, over ids; a gradient over d_out or the other gradient.
  std::vector<float> tok = noise(V * D, 1), pos = noise(L * D, 2);
  auto before = tok;
  refused(tokpos_compose_forward(tok.data(), ids.data(), B, T, tok.data(), V, pos.data(), L, D), tok.data(), before,
          "compose_forward out == token_table");
  before = pos;
  refused(tokpos_compose_forward(pos.data(), ids.data(), B, T, tok.data(), V, pos.data(), L, D), pos.data(), before,
          "compose_forward out == pos_table");
  std::vector<float> big = noise(64, 3);  // ids and out in one buffer
  auto* ids_in_big = reinterpret_cast<int64_t*>(big.data());
  std::copy(ids.begin(), ids.end(), ids_in_big);
  before = big;
  refused(tokpos_compose_forward_ex(big.data() + 2, TOKPOS_DTYPE_F32, ids_in_big, B, T, tok.data(), TOKPOS_DTYPE_F32, V,
                                    pos.data(), TOKPOS_DTYPE_F32, L, D),
          big.data(), before, "compose_forward_ex out over ids");
  std::vector<float> g = noise(V * D, 4), gp = noise(L * D, 5);
  before = g;
  refused(tokpos_compose_backward(g.data(), nullptr, g.data(), ids.data(), B, T, V, L, D), g.data(), before,
          "compose_backward d_token_table == d_out");
  before = g;
  const std::vector<float> d_out = noise(B * T * D, 6);
  refused(tokpos_compose_backward(g.data(), g.data() + D, d_out.data(), ids.data(), B, T, V, L, D), g.data(), before,
          "compose_backward gradients overlap");
  before = tok;
  refused(tokpos_embedding_forward(ids.data(), T, tok.data(), V, D, 0, tok.data()), tok.data(), before,
          "embedding_forward out == token_table");

  // Handles: outputs over the module's own table or gradient.
  tokpos_token_embedding* e = nullptr;
  ASSERT_EQ(tokpos_token_embedding_create(&e, V, D, 7), TOKPOS_OK);
  const float* table = nullptr;
  ASSERT_EQ(tokpos_token_embedding_table(e, &table), TOKPOS_OK);
  before = snapshot(table, V * D);
  refused(tokpos_token_embedding_forward(e, ids.data(), B, T, const_cast<float*>(table)), table, before,
          "token_embedding_forward out == table");
  ASSERT_EQ(tokpos_token_embedding_backward(e, d_out.data(), ids.data(), B, T, nullptr), TOKPOS_OK);
  const float* grad = nullptr;
  ASSERT_EQ(tokpos_token_embedding_grad(e, &grad), TOKPOS_OK);
  before = snapshot(grad, V * D);
  refused(tokpos_token_embedding_backward(e, grad, ids.data(), B, T, nullptr), grad, before,
          "token_embedding_backward d_out == grad");
  tokpos_token_embedding_free(e);

  tokpos_position_embedding* p = nullptr;
  ASSERT_EQ(tokpos_position_embedding_create_learned(&p, L, D, 8), TOKPOS_OK);
  const float* ptable = nullptr;
  ASSERT_EQ(tokpos_position_embedding_table(p, &ptable), TOKPOS_OK);
  before = snapshot(ptable, L * D);
  refused(tokpos_position_embedding_forward(p, T, 0, const_cast<float*>(ptable)), ptable, before,
          "position_embedding_forward out == table");
  ASSERT_EQ(tokpos_position_embedding_backward(p, d_out.data(), B, T, 0), TOKPOS_OK);
  const float* pgrad = nullptr;
  ASSERT_EQ(tokpos_position_embedding_grad(p, &pgrad), TOKPOS_OK);
  before = snapshot(pgrad, L * D);
  refused(tokpos_position_embedding_backward(p, pgrad, B, T, 0), pgrad, before,
          "position_embedding_backward d_out == grad");
  tokpos_position_embedding_free(p);

  tokpos_composer_options o = tokpos_composer_default_options(V, D, L);
  o.position = TOKPOS_POSITION_LEARNED;
  tokpos_composer* c = nullptr;
  ASSERT_EQ(tokpos_composer_create(&c, &o), TOKPOS_OK);
  const float* ctok = nullptr;
  ASSERT_EQ(tokpos_composer_token_table(c, &ctok), TOKPOS_OK);
  before = snapshot(ctok, V * D);
  refused(tokpos_composer_forward(c, ids.data(), B, T, 0, nullptr, const_cast<float*>(ctok)), ctok, before,
          "composer_forward out == token table");
  std::vector<float> both = noise(64, 9);  // position ids and out in one buffer
  auto* pids = reinterpret_cast<int64_t*>(both.data());
  pids[0] = 0, pids[1] = 1, pids[2] = 3;
  before = both;
  refused(tokpos_composer_forward(c, ids.data(), B, T, 0, pids, both.data() + 4), both.data(), before,
          "composer_forward out over position_ids");
  ASSERT_EQ(tokpos_composer_backward(c, d_out.data(), ids.data(), B, T, 0, nullptr, nullptr), TOKPOS_OK);
  const float* cgrad = nullptr;
  ASSERT_EQ(tokpos_composer_token_grad(c, &cgrad), TOKPOS_OK);
  before = snapshot(cgrad, V * D);
  refused(tokpos_composer_backward(c, cgrad, ids.data(), B, T, 0, nullptr, nullptr), cgrad, before,
          "composer_backward d_out == token grad");
  tokpos_composer_free(c);
}

}  // namespace
