// Microbenchmarks of the public entry points, and the bandwidth line they
// should sit at (a parallel copy of the same bytes). The program links
// libtokpos.so and includes only the installed headers, so it calls what a
// user of the library calls:
//
//   old_c    the raw-pointer C functions tokpos_compose_forward and
//            tokpos_compose_backward (int64 ids, float32, positions 0..T-1);
//   op_c     the DLPack C functions tokpos_op_compose_forward and
//            tokpos_op_compose_backward, on DLTensors a C caller fills in;
//   op_plan  the C++ ops (tokpos/ops.h) with one RowPlan and one Context made
//            before the timed loop and reused by every forward and backward;
//   reference  op_plan on the reference back end (Context::set_backend:
//            plain loops, the definition), one thread, for scale.
//
// The DLTensors and TensorViews describe the same buffers on every call, so
// they are filled in once, before the timed loop; the ops still check every
// argument on every call. old_c and op_c check the ids on every call and the
// backward groups them on every call; op_plan did both once, in the plan.
//
// The three names sit at the same place in each benchmark's name
// (BM_Forward/old_c/threads:1/..., BM_Forward/op_c/threads:1/...), so the
// rows of one shape and thread count line up; bench/old_vs_new.py prints them
// side by side. Threads are set with tokpos_set_num_threads.
//
// The kernel tables themselves are internal to the library (not exported), so
// the kernels are timed through the entry points that run them.
//
// Bytes processed count what must cross the memory bus: token rows read +
// output written (the position table is small and stays in cache), so GB/s
// compare directly with the copy.
//
//   build/bin/tokpos_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <dlpack/dlpack.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "tokpos/dtype.h"
#include "tokpos/ops.h"
#include "tokpos/position_table.h"
#include "tokpos/random.h"
#include "tokpos/sinusoidal.h"
#include "tokpos/tokpos.h"

namespace {

struct Shape {
  int64_t V, D, L, B, T;
};
constexpr Shape kGpt2{50257, 768, 1024, 8, 1024};    // GPT-2 small, a full training batch
constexpr Shape kLlama{32000, 4096, 4096, 1, 2048};  // Llama-2-7B width, one 2048-token sequence

struct Data {
  Shape s;
  std::vector<float> tok, pos, out, d_out;
  std::vector<int64_t> ids;
  explicit Data(const Shape& shape)
      : s(shape),
        tok(static_cast<size_t>(s.V * s.D)),
        pos(static_cast<size_t>(s.L * s.D)),
        out(static_cast<size_t>(s.B * s.T * s.D)),
        d_out(static_cast<size_t>(s.B * s.T * s.D)),
        ids(static_cast<size_t>(s.B * s.T)) {
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

Data& llama() {
  static Data d(kLlama);
  return d;
}

// The gradients of the GPT-2 shape's tables (backward benchmarks only).
struct Grads {
  std::vector<float> tok, pos;
};
Grads& gpt2_grads() {
  static Grads g{std::vector<float>(static_cast<size_t>(kGpt2.V * kGpt2.D)),
                 std::vector<float>(static_cast<size_t>(kGpt2.L * kGpt2.D))};
  return g;
}

enum class Api { kOldC, kOpC, kOpPlan, kReference };

void set_threads(int n) {
  tokpos_set_num_threads(n);
}

// A DLTensor as a C caller fills it in: CPU, row-major (strides NULL).
struct Dl {
  int64_t shape[3] = {};
  DLTensor t{};
  Dl(const void* data, DLDataType dtype, std::initializer_list<int64_t> dims) {
    int i = 0;
    for (int64_t d : dims) shape[i++] = d;
    t.data = const_cast<void*>(data);
    t.device = {kDLCPU, 0};
    t.ndim = i;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
  }
  Dl(const Dl&) = delete;
  Dl& operator=(const Dl&) = delete;
  const DLTensor* get() const { return &t; }
};
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};

bool ok(benchmark::State& state, tokpos_status st) {
  if (st == TOKPOS_OK) return true;
  state.SkipWithError(tokpos_last_error());
  return false;
}

// out (B, T, D) = token rows + position rows 0..T-1, through one entry point.
// range(0): threads; range(1): 1 = streaming stores, 0 = through the cache;
// range(2): 1 = the Llama-2-7B shape (position rows are not reused: B = 1),
// 0 = GPT-2.
void BM_Forward(benchmark::State& state, Api api) {
  set_threads(static_cast<int>(state.range(0)));
  tokpos_set_stream_min_bytes(state.range(1) ? 0 : INT64_MAX);
  auto& d = state.range(2) ? llama() : gpt2();
  const Shape s = d.s;
  try {
    if (api == Api::kOldC) {
      for (auto _ : state) {
        if (!ok(state, tokpos_compose_forward(d.out.data(), d.ids.data(), s.B, s.T, d.tok.data(), s.V,
                                              d.pos.data(), s.L, s.D)))
          break;
        benchmark::DoNotOptimize(d.out.data());
        benchmark::ClobberMemory();
      }
    } else if (api == Api::kOpC) {
      const Dl out(d.out.data(), kF32, {s.B, s.T, s.D}), ids(d.ids.data(), kI64, {s.B, s.T}),
          tok(d.tok.data(), kF32, {s.V, s.D}), pos(d.pos.data(), kF32, {s.L, s.D});
      for (auto _ : state) {
        if (!ok(state, tokpos_op_compose_forward(out.get(), ids.get(), tok.get(), pos.get(), nullptr, 0)))
          break;
        benchmark::DoNotOptimize(d.out.data());
        benchmark::ClobberMemory();
      }
    } else {
      using tokpos::DType;
      using tokpos::TensorView;
      const TensorView out(d.out.data(), DType::kF32, {s.B, s.T, s.D}),
          ids(d.ids.data(), DType::kI64, {s.B, s.T}), tok(d.tok.data(), DType::kF32, {s.V, s.D}),
          pos(d.pos.data(), DType::kF32, {s.L, s.D});
      const tokpos::ops::RowPlan plan(ids, s.V);
      tokpos::Context ctx;
      if (api == Api::kReference) ctx.set_backend("reference");
      for (auto _ : state) {
        tokpos::ops::compose_forward(out, plan, tok, pos.get(), &ctx);
        benchmark::DoNotOptimize(d.out.data());
        benchmark::ClobberMemory();
      }
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  tokpos_set_stream_min_bytes(-1);
  state.SetBytesProcessed(state.iterations() * s.B * s.T * s.D * 4 * 2);
}

// The backward at the GPT-2 shape, through one entry point, with the given
// ids: d_token_table += d_out rows by id and, if with_pos, d_pos_table +=
// d_out rows by position (both in one read of d_out).
void backward(benchmark::State& state, Api api, const std::vector<int64_t>& id_vec, bool with_pos) {
  set_threads(static_cast<int>(state.range(0)));
  auto& d = gpt2();
  auto& g = gpt2_grads();
  const Shape s = d.s;
  float* d_pos = with_pos ? g.pos.data() : nullptr;
  try {
    if (api == Api::kOldC) {
      for (auto _ : state) {
        if (!ok(state, tokpos_compose_backward(g.tok.data(), d_pos, d.d_out.data(), id_vec.data(), s.B, s.T,
                                               s.V, s.L, s.D)))
          break;
        benchmark::ClobberMemory();
      }
    } else if (api == Api::kOpC) {
      const Dl dtok(g.tok.data(), kF32, {s.V, s.D}), dpos(g.pos.data(), kF32, {s.L, s.D}),
          dout(d.d_out.data(), kF32, {s.B, s.T, s.D}), ids(id_vec.data(), kI64, {s.B, s.T});
      for (auto _ : state) {
        if (!ok(state, tokpos_op_compose_backward(dtok.get(), with_pos ? dpos.get() : nullptr, dout.get(),
                                                  ids.get(), nullptr, 0)))
          break;
        benchmark::ClobberMemory();
      }
    } else {
      using tokpos::DType;
      using tokpos::TensorView;
      const TensorView dtok(g.tok.data(), DType::kF32, {s.V, s.D}),
          dpos(g.pos.data(), DType::kF32, {s.L, s.D}), dout(d.d_out.data(), DType::kF32, {s.B, s.T, s.D}),
          ids(id_vec.data(), DType::kI64, {s.B, s.T});
      const tokpos::ops::RowPlan plan(ids, s.V);
      tokpos::Context ctx;
      if (api == Api::kReference) ctx.set_backend("reference");
      for (auto _ : state) {
        tokpos::ops::compose_backward(dtok.get(), with_pos ? dpos.get() : nullptr, dout, plan, &ctx);
        benchmark::ClobberMemory();
      }
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// Random ids; range(1) = 1: both gradients, 0: the token gradient alone. Bytes: d_out read once + touched
// token gradient rows read and written (the position gradient, 3 MB, stays in cache).
void BM_Backward(benchmark::State& state, Api api) {
  backward(state, api, gpt2().ids, state.range(1) == 1);
  const Shape s = kGpt2;
  state.SetBytesProcessed(state.iterations() * s.B * s.T * s.D * 4 * 3);
}

// Every id the same (42): the hot-row case of the backward, token gradient
// only. Bytes: d_out read once.
void BM_BackwardHotRow(benchmark::State& state, Api api) {
  const Shape s = kGpt2;
  static const std::vector<int64_t> same(static_cast<size_t>(s.B * s.T), 42);
  backward(state, api, same, false);
  state.SetBytesProcessed(state.iterations() * s.B * s.T * s.D * 4);
}

// A decode step at D = 4096 (Llama-2-7B's tables): range(1) tokens (B = 1),
// positions 0..T-1, the same ids every step, so the rows stay in cache; the
// output buffer is provided. What it measures is the cost of one call.
void BM_Decode(benchmark::State& state, Api api) {
  set_threads(static_cast<int>(state.range(0)));
  auto& d = llama();
  const Shape s = d.s;
  const int64_t T = state.range(1);
  std::vector<float> out_buf(static_cast<size_t>(T * s.D));
  const int64_t* id_ptr = d.ids.data();
  try {
    if (api == Api::kOldC) {
      for (auto _ : state) {
        if (!ok(state, tokpos_compose_forward(out_buf.data(), id_ptr, 1, T, d.tok.data(), s.V, d.pos.data(),
                                              s.L, s.D)))
          break;
        benchmark::DoNotOptimize(out_buf.data());
        benchmark::ClobberMemory();
      }
    } else if (api == Api::kOpC) {
      const Dl out(out_buf.data(), kF32, {1, T, s.D}), ids(id_ptr, kI64, {1, T}),
          tok(d.tok.data(), kF32, {s.V, s.D}), pos(d.pos.data(), kF32, {s.L, s.D});
      for (auto _ : state) {
        if (!ok(state, tokpos_op_compose_forward(out.get(), ids.get(), tok.get(), pos.get(), nullptr, 0)))
          break;
        benchmark::DoNotOptimize(out_buf.data());
        benchmark::ClobberMemory();
      }
    } else {
      using tokpos::DType;
      using tokpos::TensorView;
      const TensorView out(out_buf.data(), DType::kF32, {1, T, s.D}), ids(id_ptr, DType::kI64, {1, T}),
          tok(d.tok.data(), DType::kF32, {s.V, s.D}), pos(d.pos.data(), DType::kF32, {s.L, s.D});
      const tokpos::ops::RowPlan plan(ids, s.V);
      const tokpos::Context ctx;
      for (auto _ : state) {
        tokpos::ops::compose_forward(out, plan, tok, pos.get(), &ctx);
        benchmark::DoNotOptimize(out_buf.data());
        benchmark::ClobberMemory();
      }
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.SetBytesProcessed(state.iterations() * T * s.D * 4 * 2);
}

// The bandwidth line: copy as many bytes as the forward writes, in parallel.
void BM_ParallelCopy(benchmark::State& state) {
  set_threads(static_cast<int>(state.range(0)));
  auto& d = state.range(1) ? llama() : gpt2();
  const int64_t n = static_cast<int64_t>(d.out.size());
  const int nt = tokpos_get_num_threads();
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
  set_threads(static_cast<int>(state.range(0)));
  const int64_t L = 2048, D = 768;
  std::vector<float> t(static_cast<size_t>(L * D));
  for (auto _ : state) {
    tokpos::sinusoidal_table(t, L, D);
    benchmark::DoNotOptimize(t.data());
  }
  state.SetItemsProcessed(state.iterations() * L * D);
}

// The exact generator (docs/precision.md): an (L = 8192, D = 4096) table, bytes written.
void BM_PositionTable(benchmark::State& state) {
  set_threads(static_cast<int>(state.range(0)));
  const int64_t L = 8192, D = 4096;
  std::vector<float> t(static_cast<size_t>(L * D));
  try {
    for (auto _ : state) {
      tokpos::position_table(t.data(), tokpos::DType::kF32, L, D, 0, {});
      benchmark::DoNotOptimize(t.data());
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.SetBytesProcessed(state.iterations() * L * D * 4);
}

// Each entry point's benchmarks with the same arguments, registered next to
// each other (old_c, op_c, op_plan for one argument set, then the next set),
// so that a slow minute on a shared machine hits the three alike, and names
// differ only in the entry point: BM_Forward/old_c/threads:1/stream:0/llama:0.
using Bench = benchmark::internal::Benchmark;
void register_apis(const char* name, void (*fn)(benchmark::State&, Api),
                   std::vector<std::vector<int64_t>> arg_sets, std::vector<std::string> arg_names,
                   benchmark::TimeUnit unit, bool real_time) {
  const struct {
    const char* tag;
    Api api;
  } apis[] = {{"old_c", Api::kOldC}, {"op_c", Api::kOpC}, {"op_plan", Api::kOpPlan}};
  for (const auto& args : arg_sets)
    for (const auto& a : apis) {
      Bench* b = benchmark::RegisterBenchmark((std::string(name) + "/" + a.tag).c_str(), fn, a.api);
      b->Args(args)->ArgNames(arg_names)->Unit(unit);
      if (real_time) b->UseRealTime();
    }
}

// Every combination of the given values, as ArgsProduct makes them.
std::vector<std::vector<int64_t>> product(const std::vector<std::vector<int64_t>>& values) {
  std::vector<std::vector<int64_t>> out{{}};
  for (const auto& v : values) {
    std::vector<std::vector<int64_t>> next;
    for (const auto& prefix : out)
      for (int64_t x : v) {
        next.push_back(prefix);
        next.back().push_back(x);
      }
    out = std::move(next);
  }
  return out;
}

[[maybe_unused]] const bool registered = [] {
  using benchmark::kMillisecond;
  using benchmark::RegisterBenchmark;
  register_apis("BM_Forward", BM_Forward, product({{1, 2}, {0, 1}, {0, 1}}), {"threads", "stream", "llama"},
                kMillisecond, true);
  benchmark::RegisterBenchmark("BM_ParallelCopy", BM_ParallelCopy)
      ->ArgsProduct({{1, 2}, {0, 1}})
      ->ArgNames({"threads", "llama"})
      ->Unit(kMillisecond)
      ->UseRealTime();
  register_apis("BM_Backward", BM_Backward, product({{1, 2}, {1, 0}}), {"threads", "pos"}, kMillisecond,
                true);
  register_apis("BM_BackwardHotRow", BM_BackwardHotRow, {{1}, {2}}, {"threads"}, kMillisecond, true);
  // The reference back end, one thread: the definition's speed, for scale.
  RegisterBenchmark("BM_Forward/reference", BM_Forward, Api::kReference)
      ->Args({1, 0, 0})
      ->ArgNames({"threads", "stream", "llama"})
      ->Unit(kMillisecond)
      ->UseRealTime();
  RegisterBenchmark("BM_Backward/reference", BM_Backward, Api::kReference)
      ->Args({1, 1})
      ->Args({1, 0})
      ->ArgNames({"threads", "pos"})
      ->Unit(kMillisecond)
      ->UseRealTime();
  RegisterBenchmark("BM_BackwardHotRow/reference", BM_BackwardHotRow, Api::kReference)
      ->Args({1})
      ->ArgNames({"threads"})
      ->Unit(kMillisecond)
      ->UseRealTime();
  register_apis("BM_Decode", BM_Decode, product({{1, 2}, {16, 1}}), {"threads", "tokens"},
                benchmark::kNanosecond, false);
  benchmark::RegisterBenchmark("BM_SinusoidalTable", BM_SinusoidalTable)
      ->Arg(1)
      ->Arg(2)
      ->Unit(kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_PositionTable", BM_PositionTable)
      ->Arg(1)
      ->Arg(2)
      ->Unit(kMillisecond)
      ->UseRealTime();
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
