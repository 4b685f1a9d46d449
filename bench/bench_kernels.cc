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
// And the copy line: BM_ParallelCopy (glibc memcpy), BM_ParallelCopyNT
// (non-temporal stores), BM_ForwardVsCopy (the forward and both copies in
// every iteration, with forward / best copy as a counter) and
// BM_ForwardHugeVsPlain (the forward over a token table on 2 MiB pages
// against the same table on 4 KiB pages, alternating). BM_VsPlainLoop puts
// tokpos beside the plain llm.c-style loop (bench/peers.cc).
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
#include <emmintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "peers.h"
#include "tokpos/dtype.h"
#include "dl_tensor.h"
#include "tokpos/ops.h"
#include "tokpos/position_table.h"
#include "tokpos/random.h"
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

using tokpos::bench::Dl;
using tokpos::bench::kF32;
using tokpos::bench::kI64;

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

// ---------------------------------------------------------------------------
// The best copy, and the forward against it in the same loop.
//
// Two parallel copies of the output's bytes (each thread one contiguous
// range): glibc memcpy, and a copy with SSE2 non-temporal stores (the line
// goes to memory without being read first, as the forward's streaming stores
// do). BM_ForwardVsCopy times the forward (the C function, default streaming
// threshold), memcpy and the non-temporal copy one after the other in every
// iteration, so a slow moment on a shared machine hits all three alike, and
// reports each one's median and forward / (the faster copy's median).

void copy_memcpy(float* dst, const float* src, int64_t n, int nt) {
#pragma omp parallel num_threads(nt)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t lo = n * k / team, hi = n * (k + 1) / team;
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

// Plain stores up to the first `align`-byte boundary of dst (16 at least),
// non-temporal stores after it; no fence (copy_nt_range fences).
void copy_nt_span(float* dst, const float* src, int64_t n, uintptr_t align) {
  int64_t i = 0;
  while (i < n && reinterpret_cast<uintptr_t>(dst + i) % align != 0) dst[i] = src[i], ++i;
  for (; i + 16 <= n; i += 16) {
    const __m128 a = _mm_loadu_ps(src + i), b = _mm_loadu_ps(src + i + 4), c = _mm_loadu_ps(src + i + 8),
                 d = _mm_loadu_ps(src + i + 12);
    _mm_stream_ps(dst + i, a);
    _mm_stream_ps(dst + i + 4, b);
    _mm_stream_ps(dst + i + 8, c);
    _mm_stream_ps(dst + i + 12, d);
  }
  for (; i < n; ++i) dst[i] = src[i];
}

void copy_nt_range(float* dst, const float* src, int64_t n) {
  copy_nt_span(dst, src, n, 64);
  _mm_sfence();
}

void copy_nt(float* dst, const float* src, int64_t n, int nt) {
#pragma omp parallel num_threads(nt)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t lo = n * k / team, hi = n * (k + 1) / team;
    copy_nt_range(dst + lo, src + lo, hi - lo);
  }
}

// The random-row line: the forward's token rows alone, copied to the output
// (no position rows, no conversion) with the same non-temporal stores and the
// same prefetch of the rows 12 KiB ahead as the forward. What one core gets
// from reading rows at random addresses, whatever is computed on them.
void copy_rows_nt(float* dst, const float* tok, const int64_t* ids, int64_t n_rows, int64_t D, int nt) {
  const int64_t ahead = std::max<int64_t>(1, (12 << 10) / (D * 4));
#pragma omp parallel num_threads(nt)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t lo = n_rows * k / team, hi = n_rows * (k + 1) / team;
    for (int64_t r = lo; r < hi; ++r) {
      if (r + ahead < hi) {
        const char* next = reinterpret_cast<const char*>(tok + ids[r + ahead] * D);
        for (int64_t off = 0; off < D * 4; off += 64) __builtin_prefetch(next + off, 0, 1);
      }
      copy_nt_span(dst + r * D, tok + ids[r] * D, D, 16);  // as the forward: a 16-byte head at most
    }
    _mm_sfence();
  }
}

// The non-temporal copy alone (compare BM_ParallelCopy, glibc memcpy).
void BM_ParallelCopyNT(benchmark::State& state) {
  set_threads(static_cast<int>(state.range(0)));
  auto& d = state.range(1) ? llama() : gpt2();
  const int64_t n = static_cast<int64_t>(d.out.size());
  const int nt = tokpos_get_num_threads();
  for (auto _ : state) {
    copy_nt(d.out.data(), d.d_out.data(), n, nt);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 2);
}

struct Mapping {
  void* p = nullptr;
  size_t bytes = 0;
  Mapping(size_t n, bool huge) : bytes((n + (2u << 20) - 1) & ~size_t((2u << 20) - 1)) {
    p = std::aligned_alloc(size_t{2} << 20, bytes);
    if (p != nullptr) madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  }
  ~Mapping() { std::free(p); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  float* f() const { return static_cast<float*>(p); }
};

// AnonHugePages, in KiB, summed over the smaps entries overlapping [p, p + bytes).
double huge_kib(const void* p, size_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  bool inside = false;
  double kib = 0;
  while (std::getline(smaps, line)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      inside = a < hi && b > lo;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      kib += std::strtod(line.c_str() + 14, nullptr);
    }
  }
  return kib;
}

double seconds_of(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the whole process (all threads) across fn: at 1 thread, the
// time fn ran, whatever else the machine was running.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.empty() ? 0.0 : (v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]));
}

// The decode step against the plainest code for the same step: in every
// iteration, the forward (the ops layer, as BM_Decode/op_plan, 1 thread), a
// plain loop out[t] = tok[id[t]] + pos[t] over the same rows (compiled for
// this machine's baseline ISA, vectorised by the compiler) and a memcpy of the
// output's bytes from a warm buffer. The rows stay in cache across iterations
// ("warm rows"), so this is one core's cache bandwidth, not memory's.
// Counters: each median in microseconds and decode / loop, decode / memcpy.
void BM_DecodeVsLoop(benchmark::State& state) {
  set_threads(1);
  auto& d = llama();
  const Shape s = d.s;
  const int64_t T = state.range(0), D = s.D;
  std::vector<float> out_buf(static_cast<size_t>(T * D)), loop_buf(out_buf.size()),
      copy_src(out_buf.size(), 1.0f);
  using tokpos::DType;
  using tokpos::TensorView;
  const TensorView out(out_buf.data(), DType::kF32, {1, T, D}), ids(d.ids.data(), DType::kI64, {1, T}),
      tok(d.tok.data(), DType::kF32, {s.V, D}), pos(d.pos.data(), DType::kF32, {s.L, D});
  const tokpos::ops::RowPlan plan(ids, s.V);
  const tokpos::Context ctx;
  std::vector<double> td, tl, tc;
  try {
    for (auto _ : state) {
      td.push_back(seconds_of([&] {
        tokpos::ops::compose_forward(out, plan, tok, pos.get(), &ctx);
        benchmark::ClobberMemory();
      }));
      tl.push_back(seconds_of([&] {
        for (int64_t t = 0; t < T; ++t) {
          const float* a = d.tok.data() + d.ids[static_cast<size_t>(t)] * D;
          const float* b = d.pos.data() + t * D;
          float* o = loop_buf.data() + t * D;
          for (int64_t i = 0; i < D; ++i) o[i] = a[i] + b[i];
        }
        benchmark::ClobberMemory();
      }));
      tc.push_back(seconds_of([&] {
        std::memcpy(loop_buf.data(), copy_src.data(), copy_src.size() * sizeof(float));
        benchmark::ClobberMemory();
      }));
      state.SetIterationTime(td.back());
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double md = median_of(td), ml = median_of(tl), mc = median_of(tc);
  state.counters["decode_us"] = md * 1e6;
  state.counters["loop_us"] = ml * 1e6;
  state.counters["memcpy_us"] = mc * 1e6;
  state.counters["decode_per_loop"] = md / ml;
  state.counters["decode_per_memcpy"] = md / mc;
}

// range(0): threads; range(1): 1 = Llama-2-7B shape, 0 = GPT-2; range(2):
// 1 = the token table in a mapping advised MADV_HUGEPAGE (see below), 0 = the
// plain std::vector. The time reported is the forward's; counters: fwd_ms,
// memcpy_ms, nt_copy_ms (medians over the iterations), fwd_per_best_copy, and
// the same from process CPU time (cpu_*: at 1 thread, immune to other
// processes taking the core); row_copy_ms and fwd_per_row_copy: the
// random-row line (copy_rows_nt), timed in the same iterations.
void BM_ForwardVsCopy(benchmark::State& state) {
  set_threads(static_cast<int>(state.range(0)));
  auto& d = state.range(1) ? llama() : gpt2();
  const Shape s = d.s;
  const int64_t n = static_cast<int64_t>(d.out.size());
  const int nt = tokpos_get_num_threads();
  std::vector<float> copy_dst(d.out.size());
  copy_memcpy(copy_dst.data(), d.d_out.data(), n, nt);  // fault it in
  const float* tok = d.tok.data();
  std::unique_ptr<Mapping> huge;
  if (state.range(2)) {
    huge = std::make_unique<Mapping>(d.tok.size() * sizeof(float), true);
    if (huge->p == nullptr) {
      state.SkipWithError("aligned_alloc failed");
      return;
    }
    std::memcpy(huge->p, d.tok.data(), d.tok.size() * sizeof(float));
    tok = huge->f();
  }
  std::vector<double> fwd, mc, ntc, rows, cfwd, cmc, cntc, crows;
  auto timed = [](std::vector<double>& wall, std::vector<double>& cpu, const auto& fn) {
    const double c0 = process_cpu_seconds();
    wall.push_back(seconds_of(fn));
    cpu.push_back(process_cpu_seconds() - c0);
  };
  for (auto _ : state) {
    tokpos_status st = TOKPOS_OK;
    timed(fwd, cfwd, [&] {
      st = tokpos_compose_forward(d.out.data(), d.ids.data(), s.B, s.T, tok, s.V, d.pos.data(), s.L, s.D);
    });
    if (!ok(state, st)) break;
    benchmark::DoNotOptimize(d.out.data());
    timed(mc, cmc, [&] { copy_memcpy(copy_dst.data(), d.d_out.data(), n, nt); });
    benchmark::ClobberMemory();
    timed(ntc, cntc, [&] { copy_nt(copy_dst.data(), d.d_out.data(), n, nt); });
    benchmark::ClobberMemory();
    // Right after a non-temporal copy of d_out, as the forward is (the
    // previous iteration's, untimed below): both find the cache in the same
    // state, whatever of the table rows the copy evicted.
    timed(rows, crows, [&] { copy_rows_nt(copy_dst.data(), tok, d.ids.data(), s.B * s.T, s.D, nt); });
    benchmark::ClobberMemory();
    copy_nt(copy_dst.data(), d.d_out.data(), n, nt);
    benchmark::ClobberMemory();
    state.SetIterationTime(fwd.back());
  }
  const double mf = median_of(fwd), mm = median_of(mc), mn = median_of(ntc), mr = median_of(rows);
  state.counters["fwd_ms"] = mf * 1e3;
  state.counters["row_copy_ms"] = mr * 1e3;
  state.counters["fwd_per_row_copy"] = mf / mr;
  state.counters["memcpy_ms"] = mm * 1e3;
  state.counters["nt_copy_ms"] = mn * 1e3;
  state.counters["fwd_per_best_copy"] = mf / std::min(mm, mn);
  const double cf = median_of(cfwd), cm = median_of(cmc), cn = median_of(cntc);
  state.counters["cpu_fwd_ms"] = cf * 1e3;
  state.counters["cpu_nt_copy_ms"] = cn * 1e3;
  state.counters["cpu_fwd_per_best_copy"] = cf / std::min(cm, cn);
  state.SetBytesProcessed(state.iterations() * n * 4 * 2);
}

// ---------------------------------------------------------------------------
// Huge pages for a caller-owned table. Two copies of the token table, each in
// its own 2 MiB-aligned mapping: one advised MADV_HUGEPAGE before it is first
// written, one MADV_NOHUGEPAGE (4 KiB pages). Every iteration runs the same
// forward over each (alternating which goes first); counters: the medians,
// their ratio (huge / plain), and the MiB of each table the kernel actually
// backs with huge pages (AnonHugePages in /proc/self/smaps).
void BM_ForwardHugeVsPlain(benchmark::State& state) {
  set_threads(static_cast<int>(state.range(0)));
  auto& d = state.range(1) ? llama() : gpt2();
  const Shape s = d.s;
  const size_t table_bytes = d.tok.size() * sizeof(float);
  Mapping huge(table_bytes, true), plain(table_bytes, false);
  if (huge.p == nullptr || plain.p == nullptr) {
    state.SkipWithError("aligned_alloc failed");
    return;
  }
  std::memcpy(huge.p, d.tok.data(), table_bytes);
  std::memcpy(plain.p, d.tok.data(), table_bytes);
  auto fwd = [&](const float* tok) {
    return seconds_of([&] {
      tokpos_compose_forward(d.out.data(), d.ids.data(), s.B, s.T, tok, s.V, d.pos.data(), s.L, s.D);
      benchmark::ClobberMemory();
    });
  };
  std::vector<double> th, tp;
  bool huge_first = true;
  for (auto _ : state) {
    if (huge_first) {
      th.push_back(fwd(huge.f()));
      tp.push_back(fwd(plain.f()));
    } else {
      tp.push_back(fwd(plain.f()));
      th.push_back(fwd(huge.f()));
    }
    huge_first = !huge_first;
    state.SetIterationTime(th.back());
  }
  const double mh = median_of(th), mp = median_of(tp);
  state.counters["huge_ms"] = mh * 1e3;
  state.counters["plain_ms"] = mp * 1e3;
  state.counters["huge_per_plain"] = mh / mp;
  state.counters["huge_MiB"] = huge_kib(huge.p, huge.bytes) / 1024;
  state.counters["plain_huge_MiB"] = huge_kib(plain.p, plain.bytes) / 1024;
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

// ---------------------------------------------------------------------------
// tokpos against the plain llm.c-style loop in the same iterations (the loop
// is bench/peers.cc, its own translation unit built -O3 -march=native
// -fopenmp; see bench/CMakeLists.txt), alternating which runs first.
// range(0): threads; range(1): the shape, 0 = GPT-2, 1 = Llama-2-7B, 2 = a
// decode step (B = 16 sequences, T = 1, Llama-2-7B's tables); range(2):
// 0 = forward (with the gather-only line: the same token rows copied with
// non-temporal stores, no position add), 1 = backward into both gradients
// (the loop serial, and channel-sliced: each thread a slice of D). The time
// reported is tokpos's; counters: each median in microseconds and
// loop_per_tokpos (the loop's faster variant / tokpos: above 1 = tokpos
// faster); for the forward, bits_equal = 1 when the loop's last output is
// tokpos's, bit for bit (bench/side_by_side.py checks the backward's bits).
Grads& llama_grads() {
  static Grads g{std::vector<float>(static_cast<size_t>(kLlama.V * kLlama.D)),
                 std::vector<float>(static_cast<size_t>(kLlama.L * kLlama.D))};
  return g;
}

void BM_VsPlainLoop(benchmark::State& state) {
  const int nt = static_cast<int>(state.range(0));
  set_threads(nt);
  const int64_t which = state.range(1);
  const bool backward = state.range(2) != 0;
  Data& d = which == 0 ? gpt2() : llama();
  Grads& g = which == 0 ? gpt2_grads() : llama_grads();
  Shape s = d.s;
  if (which == 2) s.B = 16, s.T = 1;
  std::vector<float> loop_out(static_cast<size_t>(s.B * s.T * s.D));
  PeerArgs tok_args{d.out.data(), d.ids.data(), s.B, s.T, s.V, s.L, s.D, d.tok.data(), d.pos.data(),
                    g.tok.data(), g.pos.data(), d.d_out.data(), nt};
  PeerArgs loop_args = tok_args;
  loop_args.out = loop_out.data();
  const int kinds[3] = {backward ? kTokposBackward : kTokposForward,
                        backward ? kLoopBackwardSerial : kLoopForward,
                        backward ? kLoopBackwardSlices : kGatherRowsNt};
  const PeerArgs* args[3] = {&tok_args, &loop_args, &loop_args};
  for (int j = 0; j < 3; ++j)  // untimed: faults the buffers in, starts the thread teams
    if (!ok(state, static_cast<tokpos_status>(peer_call(kinds[j], args[j])))) return;
  std::vector<double> t[3];
  bool tokpos_first = true;
  for (auto _ : state) {
    int st = 0;
    for (int k = 0; k < 3; ++k) {
      const int j = tokpos_first ? k : 2 - k;
      t[j].push_back(seconds_of([&] {
        st |= peer_call(kinds[j], args[j]);
        benchmark::ClobberMemory();
      }));
    }
    if (!ok(state, static_cast<tokpos_status>(st))) break;
    tokpos_first = !tokpos_first;
    state.SetIterationTime(t[0].back());
  }
  const double mt = median_of(t[0]), m1 = median_of(t[1]), m2 = median_of(t[2]);
  state.counters["tokpos_us"] = mt * 1e6;
  if (backward) {
    state.counters["loop_serial_us"] = m1 * 1e6;
    state.counters["loop_slices_us"] = m2 * 1e6;
    state.counters["loop_per_tokpos"] = std::min(m1, m2) / mt;
  } else {
    state.counters["loop_us"] = m1 * 1e6;
    state.counters["gather_us"] = m2 * 1e6;
    state.counters["loop_per_tokpos"] = m1 / mt;
    // The gather line last wrote loop_out; one more loop forward for the bits.
    peer_call(kLoopForward, &loop_args);
    state.counters["bits_equal"] =
        std::memcmp(loop_out.data(), d.out.data(), loop_out.size() * sizeof(float)) == 0 ? 1 : 0;
  }
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
  benchmark::RegisterBenchmark("BM_ParallelCopyNT", BM_ParallelCopyNT)
      ->ArgsProduct({{1, 2}, {0, 1}})
      ->ArgNames({"threads", "llama"})
      ->Unit(kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_ForwardVsCopy", BM_ForwardVsCopy)
      ->ArgsProduct({{1, 2}, {0, 1}, {0, 1}})
      ->ArgNames({"threads", "llama", "huge"})
      ->Unit(kMillisecond)
      ->UseManualTime();
  benchmark::RegisterBenchmark("BM_ForwardHugeVsPlain", BM_ForwardHugeVsPlain)
      ->ArgsProduct({{1, 2}, {0, 1}})
      ->ArgNames({"threads", "llama"})
      ->Unit(kMillisecond)
      ->UseManualTime();
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
  benchmark::RegisterBenchmark("BM_DecodeVsLoop", BM_DecodeVsLoop)
      ->Arg(16)
      ->Arg(1)
      ->ArgNames({"tokens"})
      ->Unit(benchmark::kNanosecond)
      ->UseManualTime();
  benchmark::RegisterBenchmark("BM_VsPlainLoop", BM_VsPlainLoop)
      ->ArgsProduct({{1, 2}, {0, 1, 2}, {0, 1}})
      ->ArgNames({"threads", "shape", "bwd"})
      ->Unit(benchmark::kMicrosecond)
      ->UseManualTime();
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
