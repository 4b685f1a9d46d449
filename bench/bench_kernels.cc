// Microbenchmarks: each kernel back end, and the bandwidth line it should sit
// at (a parallel copy of the same bytes). Bytes processed count what must
// cross the memory bus: token rows read + output written (the position table
// is small and stays in cache), so GB/s compare directly with the copy.
//
//   build/bin/tokpos_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "tokpos/composer.h"
#include "tokpos/position_table.h"
#include "tokpos/random.h"
#include "tokpos/sinusoidal.h"
#include "tokpos/threading.h"

namespace {

struct Shape {
  int64_t V, D, L, B, T;
};
constexpr Shape kGpt2{50257, 768, 1024, 8, 1024};  // GPT-2 small, a full training batch

struct Data {
  std::vector<float> tok, pos, out, d_out, grad;
  std::vector<int64_t> ids;
  explicit Data(const Shape& s)
      : tok(s.V * s.D),
        pos(s.L * s.D),
        out(s.B * s.T * s.D),
        d_out(s.B * s.T * s.D),
        grad(s.V * s.D),
        ids(s.B * s.T) {
    tokpos::fill_normal(tok, 1, 0, 0.0, 0.02);
    tokpos::fill_normal(pos, 1, 1, 0.0, 0.02);
    tokpos::fill_normal(d_out, 2, 0, 0.0, 1.0);
    uint64_t x = 88172645463325252ull;
    for (auto& id : ids) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      id = static_cast<int64_t>(x % static_cast<uint64_t>(s.V));
    }
  }
};

Data& gpt2() {
  static Data d(kGpt2);
  return d;
}

constexpr Shape kLlama{32000, 4096, 4096, 1, 2048};  // Llama-2-7B width, one 2048-token sequence

Data& llama() {
  static Data d(kLlama);
  return d;
}

void set_threads(benchmark::State& state) {
  tokpos::set_num_threads(static_cast<int>(state.range(0)));
}

// range(1): 1 = streaming stores, 0 = through the cache; range(2): 1 = the
// Llama-2-7B shape (position rows are not reused: B = 1), 0 = GPT-2.
void BM_ComposeForward(benchmark::State& state, const tokpos::kernels::KernelTable* k) {
  set_threads(state);
  tokpos::set_stream_min_bytes(state.range(1) ? 0 : INT64_MAX);
  auto& d = state.range(2) ? llama() : gpt2();
  const auto s = state.range(2) ? kLlama : kGpt2;
  for (auto _ : state) {
    k->compose_forward(d.out.data(), d.ids.data(), d.tok.data(), s.V, 0, d.pos.data(), nullptr, 0, s.B, s.T,
                       s.D);
    benchmark::DoNotOptimize(d.out.data());
    benchmark::ClobberMemory();
  }
  tokpos::set_stream_min_bytes(-1);
  state.SetBytesProcessed(state.iterations() * s.B * s.T * s.D * 4 * 2);
}

void BM_IndexAddRows(benchmark::State& state, const tokpos::kernels::KernelTable* k) {
  set_threads(state);
  auto& d = gpt2();
  const auto s = kGpt2;
  for (auto _ : state) {
    k->index_add_rows(d.grad.data(), d.d_out.data(), d.ids.data(), s.B * s.T, s.V, s.D);
    benchmark::ClobberMemory();
  }
  // d_out read + touched gradient rows read and written.
  state.SetBytesProcessed(state.iterations() * s.B * s.T * s.D * 4 * 3);
}

// Both gradients of the input stage (token and learned position table), as
// the composer's backward computes them: range(1) = 1 is the fused kernel
// (index_add_rows2, d_out read once), 0 is two index_add_rows calls (d_out
// read twice). The same bits either way (tests/kernels_test.cc).
void BM_ComposeBackward(benchmark::State& state) {
  set_threads(state);
  auto& d = gpt2();
  const auto s = kGpt2;
  const int64_t N = s.B * s.T;
  static std::vector<float> pos_grad(static_cast<size_t>(s.L * s.D));
  std::vector<int64_t> t_rows(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) t_rows[n] = n % s.T;
  const auto& k = tokpos::kernels::cpu_kernels();
  const bool fused = state.range(1) == 1;
  for (auto _ : state) {
    if (fused) {
      k.index_add_rows2(d.grad.data(), d.ids.data(), s.V, pos_grad.data(), t_rows.data(), s.L, d.d_out.data(), N,
                        s.D);
    } else {
      k.index_add_rows(d.grad.data(), d.d_out.data(), d.ids.data(), N, s.V, s.D);
      k.index_add_rows(pos_grad.data(), d.d_out.data(), t_rows.data(), N, s.L, s.D);
    }
    benchmark::ClobberMemory();
  }
  // d_out read once + touched token gradient rows read and written (the
  // position gradient, 3 MB, stays in cache).
  state.SetBytesProcessed(state.iterations() * N * s.D * 4 * 3);
}

// A decode step: one token, D = 4096 (Llama-2-7B width), through the module
// API (validation included), with the output buffer provided.
void BM_DecodeStep(benchmark::State& state) {
  static tokpos::EmbeddingComposer model(tokpos::TokenEmbedding({.vocab_size = 32000, .dim = 4096}),
                                         std::make_unique<tokpos::SinusoidalPositionalEmbedding>(
                                             tokpos::SinusoidalOptions{.max_context = 4096, .dim = 4096}));
  std::vector<float> out(4096);
  int64_t id = 1, pos = 0;
  const bool cached = state.range(0) == 1;  // 1: the same rows every step, so they stay in cache
  for (auto _ : state) {
    if (!cached) {
      id = (id * 1103515245 + 12345) % 32000;  // a different row each step, as in decoding
      pos = (pos + 1) % 4096;
    }
    model.forward(std::span<const int64_t>(&id, 1), 1, 1, out, {.positions = {.start = pos}});
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * 4096 * 4 * 2);
}

// Every id the same: the hot-row case of the backward.
void BM_IndexAddHotRow(benchmark::State& state, const tokpos::kernels::KernelTable* k) {
  set_threads(state);
  auto& d = gpt2();
  const auto s = kGpt2;
  const std::vector<int64_t> same(s.B * s.T, 42);
  for (auto _ : state) {
    k->index_add_rows(d.grad.data(), d.d_out.data(), same.data(), s.B * s.T, s.V, s.D);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * s.B * s.T * s.D * 4);
}

// The bandwidth line: copy as many bytes as the forward writes, in parallel.
void BM_ParallelCopy(benchmark::State& state) {
  set_threads(state);
  auto& d = state.range(1) ? llama() : gpt2();
  const int64_t n = static_cast<int64_t>(d.out.size());
  const int nt = tokpos::num_threads();
  for (auto _ : state) {
#pragma omp parallel num_threads(nt)
    {
      const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
      const int64_t lo = n * k / team, hi = n * (k + 1) / team;
      std::memcpy(d.out.data() + lo, d.d_out.data() + lo, static_cast<size_t>(hi - lo) * sizeof(float));
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 2);
}

void BM_SinusoidalTable(benchmark::State& state) {
  set_threads(state);
  const int64_t L = 2048, D = 768;
  std::vector<float> t(L * D);
  for (auto _ : state) {
    tokpos::sinusoidal_table(t, L, D);
    benchmark::DoNotOptimize(t.data());
  }
  state.SetItemsProcessed(state.iterations() * L * D);
}

// The exact generator (docs/precision.md): an (L = 8192, D = 4096) table, bytes written.
void BM_PositionTable(benchmark::State& state) {
  set_threads(state);
  const int64_t L = 8192, D = 4096;
  std::vector<float> t(L * D);
  for (auto _ : state) {
    tokpos::position_table(t.data(), tokpos::DType::kF32, L, D, 0, {});
    benchmark::DoNotOptimize(t.data());
  }
  state.SetBytesProcessed(state.iterations() * L * D * 4);
}

BENCHMARK_CAPTURE(BM_ComposeForward, reference, &tokpos::kernels::reference_kernels())
    ->Args({1, 0, 0})
    ->ArgNames({"threads", "stream", "llama"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ComposeForward, cpu, &tokpos::kernels::cpu_kernels())
    ->ArgsProduct({{1, 2}, {0, 1}, {0, 1}})
    ->ArgNames({"threads", "stream", "llama"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ParallelCopy)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->ArgNames({"threads", "llama"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_IndexAddRows, reference, &tokpos::kernels::reference_kernels())
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_IndexAddRows, cpu, &tokpos::kernels::cpu_kernels())
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_IndexAddHotRow, reference, &tokpos::kernels::reference_kernels())
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_IndexAddHotRow, cpu, &tokpos::kernels::cpu_kernels())
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ComposeBackward)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->ArgNames({"threads", "fused"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DecodeStep)->Arg(0)->Arg(1)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_SinusoidalTable)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PositionTable)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
