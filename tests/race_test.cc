// Ops whose index inputs (token ids, position ids, type ids, cu_seqlens,
// masks) another thread changes while they run. The results may then be
// garbage, but every read and every write must stay inside the buffers the
// caller passed. The tables and gradients live between PROT_NONE guard
// pages, so a row read or written just outside them faults in any build;
// the outputs are checked to hold only values the passed tables can make.
// Under AddressSanitizer nothing may be reported; under ThreadSanitizer
// (make check-sanitize) the only race is the one on the caller's own arrays,
// which tests/tsan.supp names by the function race_mutator.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/rope_angle.h"
#include "kernels/kernels.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"
#include "tokpos/ops.h"
#include "tokpos/positions.h"
#include "tokpos/rope.h"

namespace {

using tokpos::DType;
using tokpos::TensorView;

constexpr int64_t kD = 16;  // 64-byte f32 rows
constexpr int64_t kRowBytes = kD * 4;
constexpr size_t kGuardBytes = 256 * 1024;  // 4096 rows on each side
constexpr int64_t kB = 4, kT = 64, kN = kB * kT;
constexpr int64_t kV = 256, kL = 64, kTypes = 64;  // whole pages of rows
constexpr int kMaxCalls = 200000;
constexpr auto kBudget = std::chrono::milliseconds(250);  // per op, whatever the build's speed

// Rows just outside a table of `rows` rows, all of them inside the guards.
std::vector<int64_t> bad_rows(int64_t rows) {
  return {rows, rows + 1, rows + 7, rows + 100, rows + 4000, -1, -2, -9, -100, -4000};
}

// `bytes` of zeroed memory between two guards of kGuardBytes that fault on
// any access. The data ends where the upper guard begins, and starts where
// the lower one ends when bytes is a whole number of pages.
class Guarded {
 public:
  explicit Guarded(size_t bytes) {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    body_ = (bytes + page - 1) / page * page;
    total_ = body_ + 2 * kGuardBytes;
    void* p = mmap(nullptr, total_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<char*>(p);
    if (mprotect(base_ + kGuardBytes, body_, PROT_READ | PROT_WRITE) != 0) throw std::bad_alloc();
    data_ = base_ + kGuardBytes + body_ - bytes;
  }
  ~Guarded() { munmap(base_, total_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  float* f32() { return reinterpret_cast<float*>(data_); }

 private:
  char* base_ = nullptr;
  char* data_ = nullptr;
  size_t body_ = 0, total_ = 0;
};

// A guarded (rows, kD) f32 table with every element of row r equal to scale * (r + 1).
struct Table {
  Table(int64_t n, float scale) : mem(static_cast<size_t>(n * kRowBytes)) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t d = 0; d < kD; ++d) mem.f32()[r * kD + d] = scale * static_cast<float>(r + 1);
  }
  const float* data() { return mem.f32(); }
  Guarded mem;
};

// The other thread. Until stop, sets a[slot] to each bad value in turn and
// back to good[slot], over and over, with a varying pause in between so
// that an op's check and its later reads see different values. Volatile,
// plain stores: this race on the caller's own array is what the test is
// about (tests/tsan.supp matches this function's name).
template <typename I>
__attribute__((noinline)) void race_mutator(I* a, const std::vector<size_t>& slots,
                                            const std::vector<I>& good, const std::vector<int64_t>& bad,
                                            const std::atomic<bool>& stop) {
  volatile I* v = a;
  uint32_t k = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    for (const size_t s : slots) {
      v[s] = static_cast<I>(bad[k % bad.size()]);
      for (uint32_t w = (k * 7u) % 97u; w > 0; --w) __asm__ __volatile__("" ::: "memory");
      v[s] = good[s];
      for (uint32_t w = (k * 13u) % 61u; w > 0; --w) __asm__ __volatile__("" ::: "memory");
      ++k;
    }
  }
  for (const size_t s : slots) v[s] = good[s];
}

// Runs `call` once on the good values, where it must succeed (so its own
// output checks run at least once), then again and again while
// race_mutator changes `a` (its current values are the good ones), until
// the budget is spent. A raced call that meets a bad value may be refused
// with an Error, which is fine; in a slow build (TSan) every raced call may
// be, so no count of raced successes is required. `call` checks its own
// outputs.
template <typename I, typename Call>
void race(std::vector<I>& a, std::vector<size_t> slots, const std::vector<int64_t>& bad, Call call) {
  call();  // un-raced: an Error here fails the test
  if (::testing::Test::HasFailure()) return;
  const std::vector<I> good = a;
  std::atomic<bool> stop{false};
  std::thread other([&] { race_mutator<I>(a.data(), slots, good, bad, stop); });
  const auto deadline = std::chrono::steady_clock::now() + kBudget;
  for (int c = 0; c < kMaxCalls && std::chrono::steady_clock::now() < deadline; ++c) {
    try {
      call();
    } catch (const tokpos::Error&) {
    }
    if (::testing::Test::HasFailure()) break;
  }
  stop = true;
  other.join();
}

// The slots the mutator changes: the first, a middle and the last element.
std::vector<size_t> slots_of(size_t n) {
  return {n - 1, n / 2, 0};
}

// Positions 0 .. kL - 1 in every row, token ids spread over [0, kV).
std::vector<int64_t> positions() {
  std::vector<int64_t> p(kN);
  for (int64_t n = 0; n < kN; ++n) p[n] = (n * 5 + n / kT) % kL;
  return p;
}
std::vector<int64_t> token_ids() {
  std::vector<int64_t> ids(kN);
  for (int64_t n = 0; n < kN; ++n) ids[n] = (n * 37 + 11) % kV;
  return ids;
}

// out = token row (r + 1) + position row 1024 (p + 1) (+ type row 131072 (q + 1)):
// every element must decode to rows of the tables passed. All exact in f32.
bool valid_sum(float x, bool with_tok, bool with_types) {
  if (!(x == std::floor(x)) || x < 0) return false;
  auto v = static_cast<int64_t>(x);
  if (with_types) {
    const int64_t q = v / 131072;
    if (q < 1 || q > kTypes) return false;
    v -= q * 131072;
  }
  const int64_t p = v / 1024, r = v % 1024;
  return p >= 1 && p <= kL && (with_tok ? (r >= 1 && r <= kV) : r == 0);
}
void expect_valid_rows(const std::vector<float>& out, bool with_types = false, bool shard = false) {
  int64_t bad = 0;
  float first = 0;
  for (const float x : out)
    if (!valid_sum(x, true, with_types) && !(shard && valid_sum(x, false, with_types)) && bad++ == 0)
      first = x;
  EXPECT_EQ(bad, 0) << "an output element, " << first << ", is no sum of rows of the tables passed";
}

// Every gradient element a whole number of d_out rows, at most N of them.
void expect_valid_grad(const float* g, int64_t rows) {
  for (int64_t i = 0; i < rows * kD; ++i)
    if (!(g[i] == std::floor(g[i]) && g[i] >= 0 && g[i] <= kN)) {
      ADD_FAILURE() << "gradient element " << i << " = " << g[i];
      return;
    }
}

// Each op on each back end; the cpu one with one thread and with a team.
struct Run {
  const char* backend;
  int threads;
};
class Race : public ::testing::TestWithParam<Run> {
 protected:
  Race() { ctx.set_backend(GetParam().backend).set_num_threads(GetParam().threads); }
  tokpos::Context ctx;
};

// The (B, T) forward while another thread changes the position ids
// (positions) or the token ids.
void forward_race(tokpos::Context& ctx, bool positions_change) {
  Table tok(kV, 1.0f), pos(kL, 1024.0f);
  std::vector<int64_t> ids = token_ids(), p = positions();
  std::vector<float> out(kN * kD);
  const TensorView vo(out.data(), DType::kF32, {kB, kT, kD}), vi(ids.data(), DType::kI64, {kB, kT}),
      vp(p.data(), DType::kI64, {kB, kT}), vt(tok.data(), DType::kF32, {kV, kD}),
      vpt(pos.data(), DType::kF32, {kL, kD});
  race(positions_change ? p : ids, slots_of(kN), bad_rows(positions_change ? kL : kV), [&] {
    tokpos::ops::compose_forward(vo, vi, vt, vpt.get(), vp.get(), 0, {}, &ctx);
    expect_valid_rows(out);
  });
}

TEST_P(Race, ForwardWithChangingPositionIds) { forward_race(ctx, true); }

TEST_P(Race, ForwardWithChangingInt32PositionIds) {
  Table tok(kV, 1.0f), pos(kL, 1024.0f);
  std::vector<int64_t> ids = token_ids();
  const std::vector<int64_t> p64 = positions();
  std::vector<int32_t> p(p64.begin(), p64.end());
  std::vector<float> out(kN * kD);
  const TensorView vo(out.data(), DType::kF32, {kN, kD}), vi(ids.data(), DType::kI64, {kN}),
      vp(p.data(), DType::kI32, {kN}), vt(tok.data(), DType::kF32, {kV, kD}),
      vpt(pos.data(), DType::kF32, {kL, kD});
  race(p, slots_of(kN), bad_rows(kL), [&] {
    tokpos::ops::compose_forward(vo, vi, vt, vpt.get(), vp.get(), 0, {}, &ctx);
    expect_valid_rows(out);
  });
}

TEST_P(Race, ForwardWithChangingTokenIds) { forward_race(ctx, false); }

TEST_P(Race, BackwardWithChangingPositionIds) {
  Guarded d_tok(kV * kRowBytes), d_pos(kL * kRowBytes);
  std::vector<int64_t> ids = token_ids(), p = positions();
  const std::vector<float> d_out(kN * kD, 1.0f);
  const TensorView vdo(d_out.data(), DType::kF32, {kB, kT, kD}), vi(ids.data(), DType::kI64, {kB, kT}),
      vp(p.data(), DType::kI64, {kB, kT}), vdt(d_tok.f32(), DType::kF32, {kV, kD}),
      vdp(d_pos.f32(), DType::kF32, {kL, kD});
  for (const bool with_tok : {false, true}) {
    race(p, slots_of(kN), bad_rows(kL), [&] {
      std::memset(d_pos.f32(), 0, kL * kRowBytes);
      std::memset(d_tok.f32(), 0, kV * kRowBytes);
      tokpos::ops::compose_backward(with_tok ? vdt.get() : nullptr, vdp.get(), vdo, vi, vp.get(), 0, {},
                                    &ctx);
      expect_valid_grad(d_pos.f32(), kL);
      expect_valid_grad(d_tok.f32(), kV);
    });
  }
}

TEST_P(Race, BackwardWithChangingTokenIds) {
  Guarded d_tok(kV * kRowBytes), d_pos(kL * kRowBytes);
  std::vector<int64_t> ids = token_ids(), p = positions();
  const std::vector<float> d_out(kN * kD, 1.0f);
  const TensorView vdo(d_out.data(), DType::kF32, {kB, kT, kD}), vi(ids.data(), DType::kI64, {kB, kT}),
      vp(p.data(), DType::kI64, {kB, kT}), vdt(d_tok.f32(), DType::kF32, {kV, kD}),
      vdp(d_pos.f32(), DType::kF32, {kL, kD});
  for (const int64_t padding_idx : {int64_t{-1}, int64_t{3}}) {
    race(ids, slots_of(kN), bad_rows(kV), [&] {
      std::memset(d_pos.f32(), 0, kL * kRowBytes);
      std::memset(d_tok.f32(), 0, kV * kRowBytes);
      tokpos::ops::compose_backward(vdt.get(), vdp.get(), vdo, vi, vp.get(), 0, {.padding_idx = padding_idx},
                                    &ctx);
      expect_valid_grad(d_pos.f32(), kL);
      expect_valid_grad(d_tok.f32(), kV);
    });
  }
}

// A plan keeps its own copy of the ids and positions: that copy must be
// what was checked, whatever the caller's arrays do meanwhile.
TEST_P(Race, PlanWithChangingPositionIds) {
  Table tok(kV, 1.0f), pos(kL, 1024.0f);
  Guarded d_pos(kL * kRowBytes);
  std::vector<int64_t> ids = token_ids(), p = positions();
  std::vector<float> out(kN * kD);
  const std::vector<float> d_out(kN * kD, 1.0f);
  const TensorView vo(out.data(), DType::kF32, {kB, kT, kD}), vi(ids.data(), DType::kI64, {kB, kT}),
      vp(p.data(), DType::kI64, {kB, kT}), vt(tok.data(), DType::kF32, {kV, kD}),
      vpt(pos.data(), DType::kF32, {kL, kD}), vdo(d_out.data(), DType::kF32, {kB, kT, kD}),
      vdp(d_pos.f32(), DType::kF32, {kL, kD});
  race(p, slots_of(kN), bad_rows(kL), [&] {
    const tokpos::ops::RowPlan plan(vi, kV, vp.get());
    for (const int64_t x : plan.positions()) ASSERT_TRUE(x >= 0 && x < plan.position_limit()) << x;
    tokpos::ops::compose_forward(vo, plan, vt, vpt.get(), &ctx);
    expect_valid_rows(out);
    std::memset(d_pos.f32(), 0, kL * kRowBytes);
    tokpos::ops::compose_backward(nullptr, vdp.get(), vdo, plan, &ctx);
    expect_valid_grad(d_pos.f32(), kL);
  });
}

TEST_P(Race, TypedForwardWithChangingTypeIds) {
  Table tok(kV, 1.0f), pos(kL, 1024.0f), types(kTypes, 131072.0f);
  std::vector<int64_t> ids = token_ids(), p = positions(), ty(kN);
  for (int64_t n = 0; n < kN; ++n) ty[n] = (n * 3) % kTypes;
  std::vector<float> out(kN * kD);
  const TensorView vo(out.data(), DType::kF32, {kB, kT, kD}), vi(ids.data(), DType::kI64, {kB, kT}),
      vp(p.data(), DType::kI64, {kB, kT}), vty(ty.data(), DType::kI64, {kB, kT}),
      vt(tok.data(), DType::kF32, {kV, kD}), vpt(pos.data(), DType::kF32, {kL, kD}),
      vtt(types.data(), DType::kF32, {kTypes, kD});
  const tokpos::ops::RowPlan plan(vi, kV, vp.get());
  race(ty, slots_of(kN), bad_rows(kTypes), [&] {
    tokpos::ops::compose_typed_forward(vo, plan, vt, vty.get(), vtt.get(), vpt, nullptr, nullptr, 0.0, &ctx);
    expect_valid_rows(out, /*with_types=*/true);
  });
}

TEST_P(Race, ShardWithChangingIdsAndPositionIds) {
  constexpr int64_t kBegin = 64, kRows = 128;  // the shard: global rows [64, 192)
  Table tok(kRows, 1.0f), pos(kL, 1024.0f);
  Guarded d_tok(kRows * kRowBytes), d_pos(kL * kRowBytes);
  std::vector<int64_t> ids = token_ids(), p = positions();
  std::vector<float> out(kN * kD);
  const std::vector<float> d_out(kN * kD, 1.0f);
  const TensorView vo(out.data(), DType::kF32, {kB, kT, kD}), vi(ids.data(), DType::kI64, {kB, kT}),
      vp(p.data(), DType::kI64, {kB, kT}), vt(tok.data(), DType::kF32, {kRows, kD}),
      vpt(pos.data(), DType::kF32, {kL, kD}), vdo(d_out.data(), DType::kF32, {kB, kT, kD}),
      vdt(d_tok.f32(), DType::kF32, {kRows, kD}), vdp(d_pos.f32(), DType::kF32, {kL, kD});
  const tokpos::ops::LookupOptions shard{.shard = {.vocab_size = kV, .row_begin = kBegin}};
  auto both = [&] {
    tokpos::ops::compose_forward(vo, vi, vt, vpt.get(), vp.get(), 0, shard, &ctx);
    expect_valid_rows(out, false, /*shard=*/true);
    std::memset(d_pos.f32(), 0, kL * kRowBytes);
    std::memset(d_tok.f32(), 0, kRows * kRowBytes);
    tokpos::ops::compose_backward(vdt.get(), vdp.get(), vdo, vi, vp.get(), 0, shard, &ctx);
    expect_valid_grad(d_pos.f32(), kL);
    expect_valid_grad(d_tok.f32(), kRows);
  };
  race(p, slots_of(kN), bad_rows(kL), both);
  race(ids, slots_of(kN), bad_rows(kV), both);
}

// Positions are no memory index here, but the angle is exact only below
// 2^31: the kernel must stay finite and keep each pair's length.
TEST_P(Race, RopeWithChangingPositions) {
  constexpr int64_t H = 2, Dh = 8;
  std::vector<int64_t> p = positions();
  std::vector<float> x(kN * H * Dh), out(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  const std::vector<double> inv_freq = {1.0, 0.1, 0.01, 0.001};
  const TensorView vx(x.data(), DType::kF32, {kB, kT, H, Dh}), vo(out.data(), DType::kF32, {kB, kT, H, Dh}),
      vp(p.data(), DType::kI64, {kB, kT});
  const std::vector<int64_t> bad = {int64_t{1} << 31,
                                    int64_t{1} << 40,
                                    int64_t{1} << 62,
                                    std::numeric_limits<int64_t>::max(),
                                    -1,
                                    std::numeric_limits<int64_t>::min()};
  race(p, slots_of(kN), bad, [&] {
    tokpos::ops::apply_rope(vo, vx, vp, inv_freq, {}, &ctx);
    for (size_t i = 0; i < out.size(); i += Dh)
      for (int64_t k = 0; k < Dh / 2; ++k) {
        const double a = x[i + k], b = x[i + k + Dh / 2], c = out[i + k], d = out[i + k + Dh / 2];
        ASSERT_NEAR(std::sqrt(c * c + d * d), std::sqrt(a * a + b * b), 1e-4) << "element " << i + k;
      }
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, Race, ::testing::Values(Run{"cpu", 1}, Run{"cpu", 2}, Run{"reference", 1}),
                         [](const ::testing::TestParamInfo<Run>& i) {
                           return std::string(i.param.backend) + std::to_string(i.param.threads);
                         });

// ---- Modules ---------------------------------------------------------------------

// A composer whose position policy computes rows (clamp past L, or
// interpolation) reads its tables with the position ids it was given.
TEST(RaceModules, ComposerWithChangingPositionIds) {
  Table tok(kV, 1.0f), pos(kL, 1024.0f);
  std::vector<int64_t> ids = token_ids(), p(kN);
  for (int64_t n = 0; n < kN; ++n) p[n] = n % (kL + 8);  // some past L: the policy path
  std::vector<float> out(kN * kD);
  const std::vector<float> d_out(kN * kD, 1.0f);
  const std::vector<int64_t> bad = {-1, -2, -9, -100, -4000};
  for (const tokpos::BeyondTable beyond : {tokpos::BeyondTable::kClamp, tokpos::BeyondTable::kInterpolate}) {
    tokpos::EmbeddingComposer model(
        tokpos::TokenEmbedding::borrow({tok.data(), kV * kD}, {.vocab_size = kV, .dim = kD}),
        std::make_unique<tokpos::LearnedPositionalEmbedding>(tokpos::LearnedPositionalEmbedding::borrow(
            {pos.data(), kL * kD},
            {.max_context = kL, .dim = kD, .beyond = beyond, .interpolate_to = 2 * kL})));
    race(p, slots_of(kN), bad, [&] {
      model.forward(ids, kB, kT, out, {.positions = {.ids = p}});
      if (beyond == tokpos::BeyondTable::kClamp) expect_valid_rows(out);
      for (const float x : out) ASSERT_TRUE(std::isfinite(x));
      if (beyond == tokpos::BeyondTable::kInterpolate) {
        model.zero_grad();
        model.backward(d_out, ids, kB, kT, {.positions = {.ids = p}});
      }
    });
  }
}

// ---- The kernels' own bound ------------------------------------------------------

// What a raced caller can leave in the kernels' index arrays, without the
// race: every back end reads row 0 for an index outside its table (and
// position 0 for RoPE), never a row outside it.
TEST(RaceKernels, IndexOutsideTheTableReadsRowZero) {
  namespace kn = tokpos::kernels;
  Table tok(kV, 1.0f), pos(kL, 1024.0f), types(kTypes, 131072.0f);
  std::vector<int64_t> ids = token_ids(), p = positions(), ty(kN, 1);
  const std::vector<int64_t> bad = bad_rows(kL), bad_types = bad_rows(kTypes);
  for (size_t k = 0; k < bad.size(); ++k) p[k * 7] = bad[k], ty[k * 5] = bad_types[k];
  for (const kn::KernelTable* be : kn::backends()) {
    std::vector<float> out(kN * kD, -1.0f);
    kn::TypedGather tg;
    kn::Gather& g = tg.g;
    g.out = {out.data(), DType::kF32, kT * kD, kD};
    g.ids = kn::Index::contiguous(ids.data(), kT);
    g.V = kV;
    g.tok = {tok.data(), DType::kF32, kD};
    g.pos = {pos.data(), DType::kF32, kD};
    g.pos_ids = kn::Index::contiguous(p.data(), kT);
    g.L = kL;
    g.B = kB, g.T = kT, g.D = kD;
    be->compose_forward(g, {.threads = 1});
    for (int64_t n = 0; n < kN; ++n) {
      const int64_t row = p[n] >= 0 && p[n] < kL ? p[n] : 0;
      ASSERT_EQ(out[n * kD + 3], static_cast<float>(ids[n] + 1) + 1024.0f * static_cast<float>(row + 1))
          << be->name << " forward, position id " << p[n];
    }
    tg.types = {types.data(), DType::kF32, kD};
    tg.type_ids = kn::Index::contiguous(ty.data(), kT);
    tg.type_rows = kTypes;
    be->compose_typed(tg, {.threads = 1});
    for (int64_t n = 0; n < kN; ++n) {
      const int64_t row = p[n] >= 0 && p[n] < kL ? p[n] : 0, q = ty[n] >= 0 && ty[n] < kTypes ? ty[n] : 0;
      ASSERT_EQ(out[n * kD + 3], (static_cast<float>(ids[n] + 1) + 131072.0f * static_cast<float>(q + 1)) +
                                     1024.0f * static_cast<float>(row + 1))
          << be->name << " typed forward, position id " << p[n] << ", type id " << ty[n];
    }
  }
}

TEST(RaceKernels, RopePositionOutsideItsRangeIsZero) {
  namespace kn = tokpos::kernels;
  constexpr int64_t H = 1, Dh = 4, half = 2;
  std::vector<int64_t> p = {3, int64_t{1} << 31, -1, std::numeric_limits<int64_t>::max(), 0};
  const auto T = static_cast<int64_t>(p.size());
  std::vector<float> x(T * H * Dh, 1.0f), out(x.size()), scratch(2 * 2 * half);
  const double inv_freq[half] = {0.5, 0.25};
  double turns[2 * half];
  for (int64_t i = 0; i < half; ++i) {
    const auto w = tokpos::detail::rope_turns(inv_freq[i]);
    turns[i] = w.t0, turns[half + i] = w.t1;
  }
  for (const kn::KernelTable* be : kn::backends()) {
    kn::RopeApply r;
    r.x = x.data(), r.out = out.data();
    r.xsb = r.osb = 0, r.xst = r.ost = H * Dh, r.xsh = r.osh = Dh;
    r.pos = kn::Index::contiguous(p.data(), T);
    r.inv_freq = inv_freq, r.turns = turns, r.scratch = scratch.data();
    r.half = half, r.B = 1, r.T = T, r.H = H, r.D = Dh;
    be->apply_rope(r, {.threads = 1});
    for (int64_t t = 0; t < T; ++t) {
      if (p[t] >= 0 && p[t] < tokpos::detail::kRopeMaxPosition) continue;
      for (int64_t d = 0; d < Dh; ++d)
        EXPECT_EQ(out[t * Dh + d], 1.0f) << be->name << ": position " << p[t] << " is not rotated as 0";
    }
  }
}

// ---- Position ids ----------------------------------------------------------------

TEST(RacePositions, PackedWithChangingCuSeqlens) {
  constexpr int64_t kDocs = 16, kLen = 16, kTokens = kDocs * kLen, kStart = 5;
  std::vector<int64_t> cu(kDocs + 1);
  for (int64_t d = 0; d <= kDocs; ++d) cu[d] = d * kLen;
  std::vector<int64_t> out(kTokens);
  const TensorView vc(cu.data(), DType::kI64, {kDocs + 1}), vo(out.data(), DType::kI64, {kTokens});
  const std::vector<int64_t> bad = {kTokens + 1, kTokens + 100000, 3 * kTokens, -1, -100000, 7};
  race(cu, {kDocs - 1, kDocs / 2, 1, kDocs}, bad, [&] {
    tokpos::packed_position_ids(vc.get(), kStart, vo.get());
    for (const int64_t x : out) ASSERT_TRUE(x >= kStart && x < kStart + kTokens) << x;
  });
}

TEST(RacePositions, Int32CuSeqlens) {
  constexpr int64_t kDocs = 8, kLen = 32, kTokens = kDocs * kLen;
  std::vector<int32_t> cu(kDocs + 1);
  for (int64_t d = 0; d <= kDocs; ++d) cu[d] = static_cast<int32_t>(d * kLen);
  std::vector<int64_t> out(kTokens);
  const TensorView vc(cu.data(), DType::kI32, {kDocs + 1}), vo(out.data(), DType::kI64, {kTokens});
  race(cu, {kDocs - 1, 1, kDocs}, {kTokens + 1, 1 << 30, -(1 << 30), -1}, [&] {
    tokpos::packed_position_ids(vc.get(), 0, vo.get());
    for (const int64_t x : out) ASSERT_TRUE(x >= 0 && x < kTokens) << x;
  });
}

// The ops that read each value once: a raced input still gives an output
// that only its rule can make.
TEST(RacePositions, OtherPositionOps) {
  std::vector<int64_t> mask(kN, 1);
  for (int64_t b = 0; b < kB; ++b) mask[b * kT] = 0;
  std::vector<int64_t> out(kN);
  const TensorView vm(mask.data(), DType::kI64, {kB, kT}), vo(out.data(), DType::kI64, {kB, kT});
  race(mask, slots_of(kN), {0, 2, -1}, [&] {
    tokpos::position_ids_from_mask(vm.get(), vo.get());
    for (const int64_t x : out) ASSERT_TRUE(x >= 0 && x < kT) << x;
  });

  std::vector<int64_t> ids = token_ids();
  const TensorView vi(ids.data(), DType::kI64, {kB, kT});
  race(ids, slots_of(kN), {1, 1000, -5}, [&] {
    tokpos::roberta_position_ids(vi.get(), 1, 3, vo.get());
    for (const int64_t x : out) ASSERT_TRUE(x == 1 || (x >= 1 + 1 + 3 && x <= 1 + 3 + kT)) << x;
  });

  std::vector<int64_t> p(kN);
  for (int64_t n = 0; n < kN; ++n) p[n] = n % 32;  // 8 documents
  std::vector<int64_t> cu(kN / 32 + 1);
  const TensorView vp(p.data(), DType::kI64, {kN}),
      vc(cu.data(), DType::kI64, {static_cast<int64_t>(cu.size())});
  race(p, {31, 100, 200}, {0, 5, -7, 999}, [&] {
    tokpos::cu_seqlens_from_position_ids(vp.get(), vc.get());
    ASSERT_EQ(cu.front(), 0);
    ASSERT_EQ(cu.back(), kN);
    for (size_t d = 1; d < cu.size(); ++d) ASSERT_LE(cu[d - 1], cu[d]);
  });

  const std::vector<double> slopes = tokpos::alibi_slopes(4);
  std::vector<int64_t> q(kT), k(kT);
  for (int64_t t = 0; t < kT; ++t) q[t] = k[t] = t;
  std::vector<float> bias(4 * kT * kT);
  const TensorView vq(q.data(), DType::kI64, {kT}), vk(k.data(), DType::kI64, {kT}),
      vb(bias.data(), DType::kF32, {4, kT, kT});
  race(k, slots_of(kT), {-1, 1 << 20}, [&] {
    tokpos::alibi_bias(slopes, vq.get(), vk.get(), tokpos::AlibiMode::kSymmetric, vb.get());
    for (const float x : bias) ASSERT_TRUE(std::isfinite(x) && x <= 0) << x;
  });
}

}  // namespace
