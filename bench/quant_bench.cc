// The forward from a token table in ggml's block types (as llama.cpp's GGUF
// files hold token_embd.weight), side by side with the lines it should sit
// at, at the Llama-2-7B table (V 32000, D 4096):
//
//   quant   tokpos::ops::compose_forward over QuantizedTable{blocks, type, D}:
//           each row dequantized and the position row added in one pass;
//   f32     the same forward over a float32 table of the same shape;
//   copy    a memcpy of the output's bytes from a same-size buffer, each
//           thread one contiguous range;
//   plain   dequantize-then-add as a user writes it: for each (b, t), the row
//           dequantized into a float buffer by ggml's dequantize_row_* loops
//           (quant_rows.h, from ggml-common.h's block structs), then the
//           position row added; OpenMP over rows.
//
// ggml's own get_rows + add would be the fourth line; the program looks for
// libggml and says why it is absent (see ggml_note). The plain loop's output
// is compared with tokpos's bit for bit once per type, shape and position
// case: a mismatch is printed and makes the exit status 1 (the smoke test in
// tests/CMakeLists.txt runs `--quick --shape tiny` for that check only; no
// time is judged anywhere).
//
// Shapes: prefill (B 4, T 512, positions 0..511) and decode (B 16, T 1, at
// position 1000), each with a float32 position table (L 4096, D 4096: the
// learned-table case) and without one (Llama: RoPE, token rows only);
// threads 1 and 2. In every repetition the four lines run once each, in an
// order that rotates, and each call reads its own fresh random ids, so no
// line finds rows another has just pulled into the cache, and a slow moment
// on a shared machine hits all four alike. Medians (and 90th percentiles of
// tokpos and the plain loop) after one warm-up call.
//
// Built with -O3 -march=native and OpenMP, as the peers in bench/peers.cc;
// -ffp-contract=off (tokpos_flags) keeps the plain loop's q*d + m from
// becoming a fused multiply-add, as ggml's scalar loops round.
//
//   build/bin/tokpos_quant_bench              (half a minute idle, two on a loaded machine)
//   build/bin/tokpos_quant_bench --quick --shape tiny
#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <immintrin.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dl_tensor.h"
#include "machine_info.h"
#include "quant_rows.h"
#include "tokpos/ggml_type.h"
#include "tokpos/ops.h"
#include "tokpos/threading.h"

namespace {

using namespace tokpos::bench;  // quant_rows.h, machine_info.h

void parallel_memcpy(void* dst, const void* src, size_t bytes, int threads) {
#pragma omp parallel num_threads(threads)
  {
    const auto k = static_cast<size_t>(omp_get_thread_num()),
               team = static_cast<size_t>(omp_get_num_threads());
    const size_t lo = bytes * k / team, hi = bytes * (k + 1) / team;
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  }
}

// ggml is reachable only as a shared library on the loader path; llama.cpp's
// get_rows and add are not called through it here either way.
std::string ggml_note() {
  for (const char* lib : {"libggml.so", "libggml-base.so", "libggml-cpu.so"}) {
    if (void* h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(h);
      return std::string(lib) +
             " is on the loader path, but this program does not call it: the plain loop stands in for "
             "ggml's get_rows + add";
    }
  }
  return "not found (no libggml on the loader path: Debian packages no ggml, the PyPI package "
         "llama-cpp-python, which builds it, is not installed, and building llama.cpp from source is out of "
         "scope); the plain dequantize-then-add loop stands in for ggml's get_rows + add";
}

// ---------------------------------------------------------------------------
// Timing.

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.empty() ? 0.0 : (v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]));
}

// The 90th percentile (nearest rank): the tail a slow moment leaves.
double p90_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[(v.size() * 9 + 9) / 10 - 1];
}

std::string fmt_time(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

struct Shape {
  const char* name;
  int64_t V, D, L, B, T, start;
};

struct Result {
  std::string shape;
  bool pos;
  int threads;
  std::string type;
  double wall[4];  // medians, seconds: quant, f32, copy, plain
  double p90[4];   // 90th percentiles of the same
  double cpu[4];   // the calling thread's CPU time (1 thread only: all four run on it)
  size_t out_bytes;
};

// The calling thread's CPU seconds: at 1 thread every line runs on the
// calling thread, so this leaves out the time other processes held the core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{
      "tokpos_quant_bench: the forward from ggml block-type token tables against the f32 forward, "
      "a copy of the output and a plain dequantize-then-add loop"};
  bool quick = false;
  std::string shape_name = "llama";
  int reps = 9;
  app.add_flag("--quick", quick, "decode only, 3 repetitions (a smoke test)");
  app.add_option("--shape", shape_name, "llama (V 32000, D 4096, L 4096) or tiny (V 512, D 512, L 64)")
      ->check(CLI::IsMember({"llama", "tiny"}));
  app.add_option("--reps", reps, "timed repetitions per prefill case after one warm-up (decode: 5x)")
      ->check(CLI::Range(1, 1000));
  std::vector<std::string> type_names;
  std::vector<std::string> known;
  for (const TypeCase& c : kCases) known.push_back(c.name);
  app.add_option("--types", type_names, "the types to time (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(known));
  CLI11_PARSE(app, argc, argv);
  auto chosen = [&](const TypeCase& c) {
    return type_names.empty() || std::find(type_names.begin(), type_names.end(), c.name) != type_names.end();
  };
  if (quick) reps = 3;

  const bool tiny = shape_name == "tiny";
  const int64_t V = tiny ? 512 : 32000, D = tiny ? 512 : 4096, L = tiny ? 64 : 4096;
  std::vector<Shape> shapes;
  if (!quick) shapes.push_back({"prefill", V, D, L, tiny ? 2 : 4, tiny ? 8 : 512, 0});
  shapes.push_back({"decode", V, D, L, tiny ? 4 : 16, 1, tiny ? 10 : 1000});
  const int thread_counts[] = {1, 2};

  std::printf("tokpos_quant_bench --shape %s%s: V %lld, D %lld, position table f32 (L %lld, D %lld)\n",
              shape_name.c_str(), quick ? " --quick" : "", static_cast<long long>(V),
              static_cast<long long>(D), static_cast<long long>(L), static_cast<long long>(D));
  std::printf("CPU: %s, %u logical CPUs, last-level cache %s; load average %s\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), last_level_cache().c_str(),
              load_average().c_str());
  std::printf("tokpos stream threshold: %lld bytes\n", static_cast<long long>(tokpos::stream_min_bytes()));
  std::printf("ggml: %s\n\n", ggml_note().c_str());
  std::fflush(stdout);

  // The float32 token table, the position table and the buffers, once.
  Rng rng{42};
  std::vector<float> tok32(static_cast<size_t>(V * D)), pos(static_cast<size_t>(L * D));
  for (auto& x : tok32) x = rng.uniform();
  for (auto& x : pos) x = rng.uniform();
  int64_t max_n = 0;
  for (const Shape& s : shapes) max_n = std::max(max_n, s.B * s.T);
  const auto out_len = static_cast<size_t>(max_n * D);
  std::vector<float> out(out_len), out_plain(out_len), out_f32(out_len), copy_src(out_len, 1.0f),
      copy_dst(out_len);
  const Dl tok32_dl(tok32.data(), kF32, {V, D}), pos_dl(pos.data(), kF32, {L, D});

  std::vector<Result> results;
  int mismatches = 0;
  for (const TypeCase& c : kCases) {
    if (!chosen(c)) continue;
    const tokpos::GgmlTypeTraits* tr = tokpos::ggml_type_by_name(c.name);
    if (tr == nullptr) {
      std::fprintf(stderr, "ggml type %s unknown to tokpos\n", c.name);
      return 1;
    }
    const size_t row_bytes = *tokpos::ggml_row_bytes(*tr, D);
    const std::vector<uint8_t> blocks =
        random_table(c, *tr, V, row_bytes, 1000 + static_cast<uint64_t>(tr->type));
    const Dl blocks_dl(blocks.data(), kU8, {V, static_cast<int64_t>(row_bytes)});
    const tokpos::ops::QuantizedTable qt{&blocks_dl.t, static_cast<int>(tr->type), D};
    std::fprintf(stderr, "%s", c.name);
    for (const Shape& s : shapes) {
      const int64_t N = s.B * s.T;
      const size_t out_bytes = static_cast<size_t>(N * D) * sizeof(float);
      const int r_count = s.T == 1 ? 5 * reps : reps;
      // Ids: a fresh set for every call (the check's, then for each position
      // case and thread count 1 + r_count calls of each of the four lines).
      std::vector<int64_t> ids(static_cast<size_t>(N * (1 + 2 * 2 * 4 * (1 + r_count))));
      size_t set = 1;
      for (auto& id : ids) id = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(V));
      for (const bool with_pos : {true, false}) {
        const DLTensor* p_dl = with_pos ? &pos_dl.t : nullptr;
        const float* p = with_pos ? pos.data() : nullptr;
        const Dl out_dl(out.data(), kF32, {s.B, s.T, D}), out32_dl(out_f32.data(), kF32, {s.B, s.T, D});
        // The bit check: tokpos and the plain loop on the same ids.
        {
          const Dl ids_dl(ids.data(), kI64, {s.B, s.T});
          tokpos::Context ctx;
          ctx.set_num_threads(1);
          tokpos::ops::compose_forward(out_dl, ids_dl, qt, p_dl, nullptr, s.start, {}, &ctx);
          plain_forward(out_plain.data(), ids.data(), N, s.T, blocks.data(), row_bytes, c.dequantize, p,
                        s.start, D, 1);
          if (std::memcmp(out.data(), out_plain.data(), out_bytes) != 0) {
            size_t first = 0;
            while (std::memcmp(&out[first], &out_plain[first], 4) == 0) ++first;
            std::printf(
                "MISMATCH %s %s %s: tokpos and the plain loop differ first at element %zu "
                "(%.9g vs %.9g)\n",
                c.name, s.name, with_pos ? "with positions" : "no positions", first,
                static_cast<double>(out[first]), static_cast<double>(out_plain[first]));
            ++mismatches;
          }
        }
        for (const int threads : thread_counts) {
          tokpos::Context ctx;
          ctx.set_num_threads(threads);
          std::vector<double> t[4], u[4];
          auto run = [&](int line, bool timed) {
            const int64_t* id = ids.data() + static_cast<size_t>(N) * set++;
            const Dl ids_dl(id, kI64, {s.B, s.T});
            const double c0 = thread_cpu_seconds();
            const auto t0 = std::chrono::steady_clock::now();
            switch (line) {
              case 0:
                tokpos::ops::compose_forward(out_dl, ids_dl, qt, p_dl, nullptr, s.start, {}, &ctx);
                break;
              case 1:
                tokpos::ops::compose_forward(out32_dl, ids_dl, tok32_dl, p_dl, nullptr, s.start, {}, &ctx);
                break;
              case 2: parallel_memcpy(copy_dst.data(), copy_src.data(), out_bytes, threads); break;
              default:
                plain_forward(out_plain.data(), id, N, s.T, blocks.data(), row_bytes, c.dequantize, p,
                              s.start, D, threads);
            }
            const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const double dc = thread_cpu_seconds() - c0;
            if (timed) t[line].push_back(dt), u[line].push_back(dc);
          };
          for (int line = 0; line < 4; ++line) run(line, false);
          for (int r = 0; r < r_count; ++r)
            for (int k = 0; k < 4; ++k) run((r + k) % 4, true);
          Result res{s.name, with_pos, threads, c.name, {}, {}, {}, out_bytes};
          for (int k = 0; k < 4; ++k)
            res.wall[k] = median_of(t[k]), res.p90[k] = p90_of(t[k]), res.cpu[k] = median_of(u[k]);
          results.push_back(res);
        }
      }
    }
    std::fprintf(stderr, " ");
  }
  std::fprintf(stderr, "\n");

  // Per shape, position case and thread count: one table.
  for (const Shape& s : shapes)
    for (const bool with_pos : {true, false})
      for (const int threads : thread_counts) {
        std::printf("%s (B %lld, T %lld), %s, %d thread%s; medians of %d calls after a warm-up\n", s.name,
                    static_cast<long long>(s.B), static_cast<long long>(s.T),
                    with_pos ? "f32 position table added" : "no position table (token rows only)", threads,
                    threads == 1 ? "" : "s", s.T == 1 ? 5 * reps : reps);
        std::printf("  %-5s %10s %7s %10s %6s %10s %6s %10s %6s | %10s %10s %6s", "type", "tokpos", "GB/s", "f32 fwd",
                    "/f32", "copy", "/copy", "plain", "/plain", "p90 tokpos", "p90 plain", "/plain");
        if (threads == 1) std::printf(" | %10s %6s %6s %6s", "cpu tokpos", "/f32", "/copy", "/plain");
        std::printf("\n");
        for (const Result& r : results) {
          if (r.shape != s.name || r.pos != with_pos || r.threads != threads) continue;
          const double* w = r.wall;
          std::printf("  %-5s %10s %7.2f %10s %5.2fx %10s %5.2fx %10s %5.2fx", r.type.c_str(),
                      fmt_time(w[0]).c_str(), static_cast<double>(r.out_bytes) / w[0] * 1e-9,
                      fmt_time(w[1]).c_str(), w[0] / w[1], fmt_time(w[2]).c_str(), w[0] / w[2],
                      fmt_time(w[3]).c_str(), w[0] / w[3]);
          std::printf(" | %10s %10s %5.2fx", fmt_time(r.p90[0]).c_str(), fmt_time(r.p90[3]).c_str(),
                      r.p90[0] / r.p90[3]);
          if (threads == 1) {
            const double* u = r.cpu;
            std::printf(" | %10s %5.2fx %5.2fx %5.2fx", fmt_time(u[0]).c_str(), u[0] / u[1], u[0] / u[2],
                        u[0] / u[3]);
          }
          std::printf("\n");
        }
        std::printf("\n");
      }
  std::printf(
      "Ratios are tokpos's quantized forward / the line's median, from the same run (below 1: tokpos "
      "faster). GB/s: output bytes / tokpos's wall median. p90: the 90th percentile of the wall times of "
      "tokpos and the plain loop. cpu (1 thread): the same from the thread's CPU time, which leaves out the "
      "time other processes held the core.\n\n");

  std::printf("Table memory, V %lld x D %lld\n  %-5s %12s %9s %9s\n", static_cast<long long>(V),
              static_cast<long long>(D), "type", "MiB", "of f32", "bits/wt");
  const double f32_bytes = static_cast<double>(V * D) * 4.0;
  std::printf("  %-5s %12.1f %8.3fx %9.2f\n", "f32", f32_bytes / (1 << 20), 1.0, 32.0);
  for (const TypeCase& c : kCases) {
    const tokpos::GgmlTypeTraits* tr = tokpos::ggml_type_by_name(c.name);
    const double bytes = static_cast<double>(*tokpos::ggml_row_bytes(*tr, D)) * static_cast<double>(V);
    std::printf("  %-5s %12.1f %8.3fx %9.2f\n", c.name, bytes / (1 << 20), bytes / f32_bytes,
                bytes * 8.0 / static_cast<double>(V * D));
  }
  std::printf("\nload average at the end: %s\n", load_average().c_str());
  if (mismatches != 0) {
    std::printf("%d MISMATCH(ES) between tokpos and the plain loop\n", mismatches);
    return 1;
  }
  std::printf("bits: tokpos's output equals the plain loop's for every type, shape and position case\n");
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokpos_quant_bench: %s\n", e.what());
    return 1;
  }
}
