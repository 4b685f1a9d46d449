// The cpu back end's size-chosen paths, each forced here and held to the
// reference bit for bit:
//  - the backward without a grouping (one pass in (b, t) order, or rows
//    dealt to owners, the position rows riding along with the token rows'
//    owners when each has one source) where no row has more than kRowBlock
//    sources, with the grouping made on demand only where a row has more;
//  - the forward of f16 tables, whose f16 rows are widened by the conversion
//    instruction where the CPU has it (repaired where no position row is added).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/convert.h"
#include "kernels/kernels.h"

namespace {

namespace kn = tokpos::kernels;
namespace fp = tokpos::fp;
using tokpos::DType;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> noise(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// A grouping made on demand, counting how often it was asked for.
struct OnDemand {
  OnDemand(const int64_t* r, int64_t n, int64_t v) : rows(r), N(n), V(v) {}
  const int64_t* rows;
  int64_t N, V;
  mutable int calls = 0;
  mutable kn::RowGroups groups;
  static const kn::RowGroups& make(const void* arg) {
    const auto* self = static_cast<const OnDemand*>(arg);
    if (self->calls++ == 0) self->groups = kn::group_rows(self->rows, self->N, self->V);
    return self->groups;
  }
  kn::GradTarget target(std::vector<float>& grad, int64_t stride) const {
    kn::GradTarget t{grad.data(), stride, rows, nullptr, V};
    t.make_groups = &OnDemand::make;
    t.make_arg = this;
    return t;
  }
};

struct BackwardCase {
  const char* name;
  int64_t B, T, D, V, L;
  int hot;          // sources given to token row 0 (0: none beyond the random ids)
  bool asks_groups;  // a row has more than kRowBlock sources, or V is too large to count them
};

// (b, t) tokens, random ids over V (a few padded), positions t; the cpu back
// end at 1, 2, 3 and 7 threads, with and without a workspace, both targets
// and each alone, against the reference; the grouping is not asked for where
// counting shows that no row has more than kRowBlock sources.
TEST(KernelPaths, BackwardWithoutGroupingMatchesReference) {
  const BackwardCase cases[] = {
      {"decode", 16, 1, 4096, 300, 8, 0, false},  // 16 sources on position 0, no threads
      {"64 tokens on one row", 64, 1, 40, 5, 2, 64, false},   // a row's largest one-at-a-time count
      {"65 tokens on one row", 65, 1, 40, 5, 2, 65, true},    // the first blocked count
      {"few repeats, counted", 4, 300, 130, 600, 300, 0, false},  // positions own; token rows used once ride
      {"few repeats, odd D", 3, 200, 517, 100, 200, 0, false},    // D not a multiple of 16
      {"one sequence", 1, 1200, 400, 300, 1200, 0, false},  // positions ride with the tokens; a padded id
      {"vocabulary far beyond the work", 2, 40, 64, 20000, 40, 0, true},  // not counted: the grouping says
      {"vocabulary beyond counting, threaded", 4, 300, 130, 20000, 300, 0, true},  // no token row rides
      {"a hot token row", 2, 600, 256, 50, 600, 100, true},   // grouped scatter, threaded
      {"positions used 80 times", 80, 8, 128, 300, 8, 0, true},  // B > 64: the position rows need blocks
  };
  const auto& ref = kn::reference_kernels();
  const auto& cpu = kn::cpu_kernels();
  for (const BackwardCase& c : cases) {
    const int64_t N = c.B * c.T, D = c.D;
    std::mt19937_64 rng(7);
    std::vector<int64_t> ids(static_cast<size_t>(N)), pos(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) {
      ids[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.V));
      pos[i] = i % c.T;
    }
    for (int64_t i = 0; i < c.hot && i < N; ++i) ids[i * N / c.hot] = 0;
    if (N > 70) ids[N - 7] = -1;  // padding: skipped
    const std::vector<float> d_out = noise(static_cast<size_t>(N * D), 3);
    const kn::Source src{d_out.data(), c.T * D, D, c.B, c.T, D};
    const int64_t as = D + 3, bs = D;  // a strided token gradient
    const auto init_a = noise(static_cast<size_t>(c.V * as), 4), init_b = noise(static_cast<size_t>(c.L * bs), 5);
    const OnDemand tok{ids.data(), N, c.V}, positions{pos.data(), N, c.L};
    std::vector<float> want_a = init_a, want_b = init_b;
    ref.index_add_rows(tok.target(want_a, as), positions.target(want_b, bs), src, kn::Exec{});
    for (const int targets : {0, 1, 2})  // both, tokens only, positions only
      for (const int threads : {1, 2, 3, 7})
        for (const bool with_ws : {false, true}) {
          const std::string what = std::string(c.name) + ", targets " + std::to_string(targets) + ", threads " +
                                   std::to_string(threads) + (with_ws ? ", workspace" : "");
          kn::Workspace ws;
          const OnDemand t{ids.data(), N, c.V}, p{pos.data(), N, c.L};
          std::vector<float> ga = init_a, gb = init_b;
          kn::GradTarget a = t.target(ga, as), b = p.target(gb, bs);
          if (targets == 2) a = kn::GradTarget{};  // absent, as the C API passes it: no rows either
          if (targets == 1) b = kn::GradTarget{};
          std::vector<float> ra = init_a, rb = init_b;  // the reference for this choice of targets
          {
            kn::GradTarget x = tok.target(ra, as), y = positions.target(rb, bs);
            if (targets == 2) x.grad = nullptr;
            if (targets == 1) y.grad = nullptr;
            ref.index_add_rows(x, y, src, kn::Exec{});
          }
          cpu.index_add_rows(a, b, src, {.threads = threads, .ws = with_ws ? &ws : nullptr});
          EXPECT_TRUE(same_bits(ga, ra)) << "token gradient, " << what;
          EXPECT_TRUE(same_bits(gb, rb)) << "position gradient, " << what;
          if (targets == 0) {
            EXPECT_TRUE(same_bits(ga, want_a) && same_bits(gb, want_b)) << what;
          }
          if (!c.asks_groups) {
            EXPECT_EQ(t.calls + p.calls, 0) << "no grouping is needed: " << what;
          }
          if (with_ws) {
            for (const uint8_t u : ws.uses) ASSERT_EQ(u, 0) << "the counts are left zero: " << what;
          }
        }
  }
}

// Every f16 value (NaN payloads, signalling ones, subnormals, infinities) as
// an element of the token table, and of the position table, with the other
// table in each dtype, into each output dtype, at a decode step (plain
// stores) and past it (streamed stores, and plain ones with streaming off),
// 1 and 2 threads: the bits of the reference. Without a position table the
// signalling NaNs stay signalling in an f32 output, as the reference's bit
// formula keeps them.
TEST(KernelPaths, F16ForwardMatchesReferenceOnEveryValue) {
  const int64_t D = 4096, R = 16;  // 16 rows of 4096: all 65536 values
  std::vector<fp::f16_t> every(static_cast<size_t>(R * D));
  for (size_t i = 0; i < every.size(); ++i) every[i].bits = static_cast<uint16_t>(i);
  const std::vector<float> other32 = noise(every.size(), 9);
  std::vector<fp::f16_t> other16(other32.size());
  std::vector<fp::bf16_t> otherbf(other32.size());
  for (size_t i = 0; i < other32.size(); ++i) {
    other16[i] = fp::to_f16(other32[i]);
    otherbf[i] = fp::to_bf16(other32[i]);
  }
  other16[5].bits = 0x7c01;  // a signalling NaN in the other table too
  other16[6].bits = 0xfe12;  // and a quiet one with a payload
  struct Table {
    const void* data;
    DType type;
  };
  const Table others[] = {{nullptr, DType::kF32}, {other32.data(), DType::kF32}, {other16.data(), DType::kF16},
                          {otherbf.data(), DType::kBF16}};
  const Table all{every.data(), DType::kF16};
  const auto& ref = kn::reference_kernels();
  const auto& cpu = kn::cpu_kernels();
  for (const bool every_in_tokens : {true, false})
    for (const Table& other : others) {
      if (!every_in_tokens && other.data == nullptr) continue;  // a token table is needed
      const Table tok = every_in_tokens ? all : other, pos = every_in_tokens ? other : all;
      for (const int64_t N : {int64_t{16}, int64_t{48}})
        for (const DType out_type : {DType::kF32, DType::kF16, DType::kBF16}) {
          const int64_t T = 1;  // (N, 1) tokens; positions from pos_ids
          std::vector<int64_t> ids(static_cast<size_t>(N)), pids(static_cast<size_t>(N));
          for (int64_t i = 0; i < N; ++i) {
            ids[i] = i % R;
            pids[i] = (i * 5 + 3) % R;
          }
          const size_t elem = out_type == DType::kF32 ? 4 : 2;
          auto run = [&](const kn::KernelTable& k, int threads, int64_t stream_min) {
            std::vector<uint8_t> out(static_cast<size_t>(N * D) * elem + 64, 0xAB);
            kn::Gather g;
            g.out = {out.data() + 16, out_type, T * D, D};
            g.ids = {ids.data(), DType::kI64, T, 1};
            g.V = R;
            g.tok = {tok.data, tok.type, D};
            g.pos = {pos.data, pos.type, D};
            if (pos.data != nullptr) g.pos_ids = {pids.data(), DType::kI64, T, 1};
            g.L = R;
            g.B = N;
            g.T = T;
            g.D = D;
            k.compose_forward(g, {.threads = threads, .stream_min_bytes = stream_min});
            return out;
          };
          const auto want = run(ref, 1, INT64_MAX);
          for (const int threads : {1, 2})
            for (const int64_t stream_min : {int64_t{0}, INT64_MAX}) {
              EXPECT_TRUE(run(cpu, threads, stream_min) == want)
                  << (every_in_tokens ? "every f16 value as a token element" : "every f16 value as a position element")
                  << ", other table dtype " << static_cast<int>(other.type) << (other.data ? "" : " (none)") << ", N "
                  << N << ", out dtype " << static_cast<int>(out_type) << ", threads " << threads << ", stream_min "
                  << stream_min;
            }
          if (pos.data == nullptr && out_type == DType::kF32) {  // f16 0x7c01 -> f32 0x7f802000, still signalling
            uint32_t bits = 0;
            std::memcpy(&bits, want.data() + 16 + 4 * 0x7c01, 4);  // token n reads row n: element n * D + d
            EXPECT_EQ(bits, 0x7f802000u);
          }
        }
    }
}

}  // namespace
