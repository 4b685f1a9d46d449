// Every back end against the reference kernels, bit for bit, on many shapes
// (ggml's test-backend-ops style: each case prints its parameters).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/kernels.h"
#include "test_util.h"
#include "tokpos/threading.h"

namespace {

using tokpos::testing::bitwise_equal;
using tokpos::testing::ids_mod;
using tokpos::testing::noise;

// (B, T, D, V, threads)
class KernelAgreement : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t, int>> {
};

TEST_P(KernelAgreement, CpuMatchesReference) {
  const auto [B, T, D, V, threads] = GetParam();
  tokpos::set_num_threads(threads);
  const int64_t L = T + 3, N = B * T;
  const auto tok = noise(V * D, 1), pos = noise(L * D, 2), d_out = noise(N * D, 3);
  auto ids = ids_mod(N, V, 4);
  if (N > 4) ids[N / 2] = V + 7;  // out of range: exercises the UNK remap
  auto pos_ids = ids_mod(N, L, 5);
  const auto& ref = tokpos::kernels::reference_kernels();
  const auto& cpu = tokpos::kernels::cpu_kernels();
  for (const bool explicit_pos : {false, true}) {
    for (const bool with_pos : {false, true}) {
      std::vector<float> a(N * D, -1.f), b(N * D, -2.f);
      ref.compose_forward(a.data(), ids.data(), tok.data(), V, 0, with_pos ? pos.data() : nullptr,
                          explicit_pos ? pos_ids.data() : nullptr, 3, B, T, D);
      cpu.compose_forward(b.data(), ids.data(), tok.data(), V, 0, with_pos ? pos.data() : nullptr,
                          explicit_pos ? pos_ids.data() : nullptr, 3, B, T, D);
      EXPECT_TRUE(bitwise_equal(a, b)) << "forward explicit_pos=" << explicit_pos << " with_pos=" << with_pos;
      std::vector<float> c(N * D, -3.f);
      tokpos::set_stream_min_bytes(0);
      cpu.compose_forward(c.data(), ids.data(), tok.data(), V, 0, with_pos ? pos.data() : nullptr,
                          explicit_pos ? pos_ids.data() : nullptr, 3, B, T, D);
      tokpos::set_stream_min_bytes(-1);
      EXPECT_TRUE(bitwise_equal(a, c)) << "streamed forward explicit_pos=" << explicit_pos
                                       << " with_pos=" << with_pos;
    }
  }
  auto rows = ids_mod(N, V, 6);
  if (N > 2) rows[1] = -1;  // padding: skipped
  std::vector<float> ga = noise(V * D, 7), gb = ga;
  ref.index_add_rows(ga.data(), d_out.data(), rows.data(), N, V, D);
  cpu.index_add_rows(gb.data(), d_out.data(), rows.data(), N, V, D);
  EXPECT_TRUE(bitwise_equal(ga, gb)) << "index_add_rows";
  // Both gradients at once: the definition is the two index_add_rows.
  std::vector<int64_t> t_rows(N);  // positions start + t, as the composer passes them
  for (int64_t n = 0; n < N; ++n) t_rows[n] = 3 + n % T;
  auto random_rows = ids_mod(N, L, 16);
  if (N > 3) random_rows[N - 2] = -1;  // skipped in the position gradient, still in the token gradient
  for (const auto* pos_rows : std::initializer_list<const std::vector<int64_t>*>{&t_rows, &random_rows}) {
    std::vector<float> ta = noise(V * D, 17), pa = noise(L * D, 18);
    std::vector<float> tb = ta, pb = pa;
    ref.index_add_rows2(ta.data(), rows.data(), V, pa.data(), pos_rows->data(), L, d_out.data(), N, D);
    cpu.index_add_rows2(tb.data(), rows.data(), V, pb.data(), pos_rows->data(), L, d_out.data(), N, D);
    const bool positions = pos_rows == &t_rows;
    EXPECT_TRUE(bitwise_equal(ta, tb)) << "index_add_rows2 token gradient, positions " << positions;
    EXPECT_TRUE(bitwise_equal(pa, pb)) << "index_add_rows2 position gradient, positions " << positions;
    // and the reference's definition, stated as two separate calls
    std::vector<float> tc = noise(V * D, 17), pc = noise(L * D, 18);
    ref.index_add_rows(tc.data(), d_out.data(), rows.data(), N, V, D);
    ref.index_add_rows(pc.data(), d_out.data(), pos_rows->data(), N, L, D);
    EXPECT_TRUE(bitwise_equal(ta, tc) && bitwise_equal(pa, pc)) << "reference index_add_rows2";
  }
  std::vector<float> ta = noise(V * D, 19), tb = ta;  // no position gradient
  ref.index_add_rows2(ta.data(), rows.data(), V, nullptr, nullptr, L, d_out.data(), N, D);
  cpu.index_add_rows2(tb.data(), rows.data(), V, nullptr, nullptr, L, d_out.data(), N, D);
  EXPECT_TRUE(bitwise_equal(ta, tb)) << "index_add_rows2 without grad_b";
  tokpos::set_num_threads(0);
}

std::string ShapeName(const ::testing::TestParamInfo<KernelAgreement::ParamType>& info) {
  const auto& [B, T, D, V, threads] = info.param;
  return "B" + std::to_string(B) + "_T" + std::to_string(T) + "_D" + std::to_string(D) + "_V" +
         std::to_string(V) + "_threads" + std::to_string(threads);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KernelAgreement,
    ::testing::Values(std::make_tuple(1, 1, 1, 1, 1),        // the smallest everything
                      std::make_tuple(1, 1, 4096, 2000, 2),  // a decode step
                      std::make_tuple(2, 3, 7, 5, 2),        // D below any vector width
                      std::make_tuple(3, 17, 33, 1, 7),      // V = 1: every id is the hot row
                      std::make_tuple(4, 256, 100, 97, 2),   // D not a multiple of 8 or 16
                      std::make_tuple(8, 128, 768, 500, 2),  // big enough to thread
                      std::make_tuple(2, 1024, 64, 3, 7),    // hot rows, odd thread count
                      std::make_tuple(1, 4096, 129, 50257, 2),
                      std::make_tuple(4, 512, 64, 1, 2),    // V = 1, threaded: one hot row, split
                      std::make_tuple(2, 2048, 33, 2, 7),   // two hot rows, odd D, 7 threads
                      std::make_tuple(70, 3, 300, 11, 7),   // B > 64: every position is a hot row
                      std::make_tuple(64, 5, 256, 40, 2),   // B = 64: the last one-at-a-time size
                      std::make_tuple(65, 4, 256, 40, 2),   // B = 65: the first blocked one
                      std::make_tuple(3, 2, 1, 2, 7)),      // fewer tokens than threads
    ShapeName);

// Mixed table types and bf16 output: (B, T, D, V, threads) x every type combination.
TEST_P(KernelAgreement, MixedTypesMatchReference) {
  const auto [B, T, D, V, threads] = GetParam();
  tokpos::set_num_threads(threads);
  using tokpos::kernels::Elem;
  const int64_t L = T + 3, N = B * T;
  // 16-bit tables from random bits (finite values only), f32 tables from noise.
  auto bits16 = [](size_t n, uint64_t seed, bool f16) {
    std::vector<uint16_t> v(n);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& h : v) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      h = static_cast<uint16_t>(x);
      if (f16 && (h & 0x7c00) == 0x7c00) h &= 0xbfff;   // no Inf/NaN in f16 tables
      if (!f16 && (h & 0x7f80) == 0x7f80) h &= 0xbfff;  // nor in bf16
    }
    return v;
  };
  const auto tok32 = noise(V * D, 8), pos32 = noise(L * D, 9);
  const auto tok_bf = bits16(V * D, 10, false), pos_bf = bits16(L * D, 11, false);
  const auto tok_h = bits16(V * D, 12, true), pos_h = bits16(L * D, 13, true);
  auto table = [&](Elem e, bool token) -> const void* {
    if (e == Elem::kF32) return token ? static_cast<const void*>(tok32.data()) : pos32.data();
    if (e == Elem::kBF16) return token ? static_cast<const void*>(tok_bf.data()) : pos_bf.data();
    return token ? static_cast<const void*>(tok_h.data()) : pos_h.data();
  };
  const auto ids = ids_mod(N, V, 14);
  const auto& ref = tokpos::kernels::reference_kernels();
  const auto& cpu = tokpos::kernels::cpu_kernels();
  // Through the cache and streamed (tokpos::set_stream_min_bytes), into an
  // output that starts on a 64-byte line and one that starts one element
  // past it (rows then straddle the 16-byte boundaries the streaming stores need).
  for (const int64_t stream_min : {INT64_MAX, int64_t{0}})
    for (const size_t offset_elems : {0, 1})
      for (Elem te : {Elem::kF32, Elem::kBF16, Elem::kF16})
        for (Elem pe : {Elem::kF32, Elem::kBF16, Elem::kF16}) {
          for (Elem oe : {Elem::kF32, Elem::kBF16}) {
            const size_t elem = oe == Elem::kF32 ? 4 : 2, bytes = N * D * elem;
            std::vector<uint8_t> a(bytes, 1);
            std::vector<uint8_t> storage(bytes + 64 + elem, 2);
            uint8_t* b = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 +
                         offset_elems * elem;
            ref.compose_forward_mixed(a.data(), oe, ids.data(), table(te, true), te, V, 0, table(pe, false), pe,
                                      nullptr, 2, B, T, D);
            tokpos::set_stream_min_bytes(stream_min);
            cpu.compose_forward_mixed(b, oe, ids.data(), table(te, true), te, V, 0, table(pe, false), pe,
                                      nullptr, 2, B, T, D);
            tokpos::set_stream_min_bytes(-1);
            EXPECT_TRUE(std::equal(a.begin(), a.end(), b))
                << "token " << int(te) << " pos " << int(pe) << " out " << int(oe) << " streamed "
                << (stream_min == 0) << " offset " << offset_elems;
          }
        }
  tokpos::set_num_threads(0);
}

TEST(Kernels, ConversionsAreExact) {
  using tokpos::kernels::bf16_t;
  using tokpos::kernels::f16_t;
  // Every binary16 value widens to the float it denotes.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const float f = tokpos::kernels::to_f32(f16_t{static_cast<uint16_t>(h)});
    if (e == 31) {
      EXPECT_TRUE(m ? std::isnan(f) : std::isinf(f)) << h;
      continue;
    }
    const double want =
        (e == 0 ? std::ldexp(m, -24) : std::ldexp(m + 1024, e - 25)) * ((h & 0x8000) ? -1 : 1);
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
  }
  // float -> bf16 rounds to nearest even.
  EXPECT_EQ(tokpos::kernels::to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(tokpos::kernels::to_bf16(std::bit_cast<float>(0x3f808000u)).bits, 0x3f80);  // tie -> even
  EXPECT_EQ(tokpos::kernels::to_bf16(std::bit_cast<float>(0x3f818000u)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(tokpos::kernels::to_bf16(std::bit_cast<float>(0x3f808001u)).bits, 0x3f81);
  EXPECT_TRUE(std::isnan(tokpos::kernels::to_f32(tokpos::kernels::to_bf16(std::nanf("")))));
}

// The backward's summation order is part of its definition (kernels.h): check
// it against an independent loop that states it, on a row used 200 times.
TEST(Kernels, BackwardBlocksHotRowsInFixedOrder) {
  const int64_t D = 5, V = 3, N = 200;
  std::vector<int64_t> rows(N, 1);
  rows[7] = 0;
  const auto src = noise(N * D, 15);
  std::vector<float> want(V * D, 0.5f);
  for (int64_t d = 0; d < D; ++d) {
    std::vector<int64_t> list;
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] == 1) list.push_back(i);
    for (size_t b0 = 0; b0 < list.size(); b0 += 64) {
      float block = src[list[b0] * D + d];
      for (size_t k = b0 + 1; k < std::min(list.size(), b0 + 64); ++k) block += src[list[k] * D + d];
      want[1 * D + d] += block;
    }
    want[0 * D + d] += src[7 * D + d];
  }
  for (int threads : {1, 2, 7}) {
    tokpos::set_num_threads(threads);
    for (const auto* k : {&tokpos::kernels::reference_kernels(), &tokpos::kernels::cpu_kernels()}) {
      std::vector<float> grad(V * D, 0.5f);
      k->index_add_rows(grad.data(), src.data(), rows.data(), N, V, D);
      EXPECT_TRUE(bitwise_equal(grad, want)) << k->name << " threads " << threads;
    }
  }
  tokpos::set_num_threads(0);
}

// A row used at most 64 times takes its sources one at a time, in order:
// ((g + s_1) + s_2) + s_3, which is not g + ((s_1 + s_2) + s_3) (the data
// below is chosen so the two differ, so this test tells them apart).
TEST(Kernels, BackwardAddsFewSourcesOneAtATime) {
  const int64_t D = 3, V = 2, N = 3;
  const std::vector<int64_t> rows{1, 1, 1};
  const std::vector<float> src{0x1p-24f, 0x1p-24f, 3.0f, 0x1p-24f, 0x1p-24f, -1.0f, 0x1p-24f, 1.0f, 0.25f};
  std::vector<float> want(V * D, 1.0f), blocked(V * D, 1.0f);
  for (int64_t d = 0; d < D; ++d) {
    float g = 1.0f;
    for (int64_t i = 0; i < N; ++i) g += src[i * D + d];
    want[D + d] = g;
    blocked[D + d] = 1.0f + ((src[d] + src[D + d]) + src[2 * D + d]);
  }
  ASSERT_FALSE(bitwise_equal(want, blocked)) << "the data must tell the two orders apart";
  for (const auto* k : {&tokpos::kernels::reference_kernels(), &tokpos::kernels::cpu_kernels()}) {
    std::vector<float> grad(V * D, 1.0f);
    k->index_add_rows(grad.data(), src.data(), rows.data(), N, V, D);
    EXPECT_TRUE(bitwise_equal(grad, want)) << k->name;
    std::vector<float> a(V * D, 1.0f), p(V * D, 1.0f);  // and as either half of index_add_rows2
    k->index_add_rows2(a.data(), rows.data(), V, p.data(), rows.data(), V, src.data(), N, D);
    EXPECT_TRUE(bitwise_equal(a, want) && bitwise_equal(p, want)) << k->name << " index_add_rows2";
  }
}

// Called from inside an OpenMP team (nested regions get one thread), the
// kernel still does every owner's share: the same bits as the reference.
TEST(Kernels, FusedBackwardInsideAnOuterParallelRegion) {
  const int64_t B = 4, T = 300, D = 400, V = 37, L = T, N = B * T;  // N*D: 7 threads asked for
  const auto d_out = noise(N * D, 20);
  const auto ids = ids_mod(N, V, 21);
  std::vector<int64_t> pos(N);
  for (int64_t n = 0; n < N; ++n) pos[n] = n % T;
  std::vector<float> want_t = noise(V * D, 22), want_p = noise(L * D, 23);
  tokpos::kernels::reference_kernels().index_add_rows2(want_t.data(), ids.data(), V, want_p.data(), pos.data(),
                                                       L, d_out.data(), N, D);
  tokpos::set_num_threads(7);
  std::vector<std::vector<float>> got_t(2, noise(V * D, 22)), got_p(2, noise(L * D, 23));
#pragma omp parallel for num_threads(2)
  for (int k = 0; k < 2; ++k) {
    tokpos::kernels::cpu_kernels().index_add_rows2(got_t[k].data(), ids.data(), V, got_p[k].data(), pos.data(),
                                                   L, d_out.data(), N, D);
  }
  tokpos::set_num_threads(0);
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(bitwise_equal(got_t[k], want_t)) << "token gradient, outer thread " << k;
    EXPECT_TRUE(bitwise_equal(got_p[k], want_p)) << "position gradient, outer thread " << k;
  }
}

TEST(Kernels, StreamMinBytesSetting) {
  const int64_t by_default = tokpos::stream_min_bytes();
  EXPECT_GT(by_default, 0);
  tokpos::set_stream_min_bytes(0);
  EXPECT_EQ(tokpos::stream_min_bytes(), 0);
  tokpos::set_stream_min_bytes(INT64_MAX);
  EXPECT_EQ(tokpos::stream_min_bytes(), INT64_MAX);
  tokpos::set_stream_min_bytes(-5);  // negative: back to the default
  EXPECT_EQ(tokpos::stream_min_bytes(), by_default);
}

// Run by ctest as stream_min_bytes_env with TOKPOS_STREAM_MIN_BYTES=123456
// (tests/CMakeLists.txt); skipped when the variable is not set.
TEST(Kernels, StreamMinBytesFromTheEnvironment) {
  const char* env = std::getenv("TOKPOS_STREAM_MIN_BYTES");
  if (env == nullptr) GTEST_SKIP() << "TOKPOS_STREAM_MIN_BYTES is not set";
  EXPECT_EQ(tokpos::stream_min_bytes(), std::atoll(env));
}

TEST(Kernels, ActiveIsTheCpuBackEnd) {
  EXPECT_STREQ(tokpos::kernels::active_kernels().name, "cpu");
  EXPECT_STREQ(tokpos::kernels::reference_kernels().name, "reference");
}

}  // namespace
