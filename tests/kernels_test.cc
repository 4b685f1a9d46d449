// Every back end against the reference kernels, bit for bit, on many shapes
// (ggml's test-backend-ops style: each case prints its parameters).
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

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
    }
  }
  auto rows = ids_mod(N, V, 6);
  if (N > 2) rows[1] = -1;  // padding: skipped
  std::vector<float> ga = noise(V * D, 7), gb = ga;
  ref.index_add_rows(ga.data(), d_out.data(), rows.data(), N, V, D);
  cpu.index_add_rows(gb.data(), d_out.data(), rows.data(), N, V, D);
  EXPECT_TRUE(bitwise_equal(ga, gb)) << "index_add_rows";
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
                      std::make_tuple(1, 4096, 129, 50257, 2)),
    ShapeName);

TEST(Kernels, ActiveIsTheCpuBackEnd) {
  EXPECT_STREQ(tokpos::kernels::active_kernels().name, "cpu");
  EXPECT_STREQ(tokpos::kernels::reference_kernels().name, "reference");
}

}  // namespace
