// make bench-quick: tokpos against the plain loop an engine author writes
// first, side by side in one process, in about two minutes. The tool to tune
// the CPU kernels with (docs/benchmarks.md, "make bench-quick").
//
//   forward f32    tokpos_compose_forward  against llm.c's encoder_forward,
//                  OpenMP over (b, t): out[b,t,:] = wte[ids[b,t]] + wpe[t];
//   backward f32   tokpos_compose_backward against llm.c's encoder_backward
//                  (serial: for b, t: dwte[ix] += dout; dwpe[t] += dout) and
//                  the channel-sliced loop (each thread a slice of D, summed
//                  in (b, t) order);
//   forward q8_0,  tokpos::ops::compose_forward over a ggml-typed token
//   q4_0, q4_K,    table against a plain dequantize-then-add loop (ggml's
//   f16, bf16      dequantize_row_* into a buffer, then + the position row;
//                  OpenMP over (b, t)), with tokpos's f32 forward on the same
//                  ids beside (--types picks the types).
//
// The plain f32 loops are bench/peers.cc's (libtokpos_peers.so), the
// dequantize loop is quant_rows.h's; both are built -O3 -march=native with
// OpenMP, as llm.c builds its loop. tokpos is called through the installed
// headers and the shared library.
//
// Shapes: gpt2 (B 8, T 1024, D 768, V 50257, L 1024), llama (B 1, T 2048,
// D 4096, V 32000, L 4096) and a decode step on the llama tables (B 16, T 1),
// warm (the same ids each call, each timed call after an untimed call of
// the same line, so no line finds the rows where another line left them: a
// 2-thread line leaves half of each row in the other core's cache) and cold
// (fresh random ids before each call, from a table larger than the
// last-level cache).
// Each at 1 and 2 threads, then the 2-thread rows again with a thread
// spinning, pinned to one CPU: the contended case.
//
// Before any timing at a thread count, every case runs each line once on the
// same ids and compares the result bits with tokpos's (forward: the outputs;
// backward: the touched gradient rows, added into the same starting values);
// a mismatch is printed and makes the exit status 1. Then rounds (200, or
// fewer when --budget's 100 s run out): each round visits 1, 2 and 2+busy
// threads in turn, and there every case runs its lines once each in an order
// that rotates from round to round (a decode case 8 times). The figure per
// line is the median of the per-rotation ratios line / tokpos (above 1:
// tokpos faster) with their interquartile range, beside the median times.
// No time is judged anywhere: the ctest smoke test runs --smoke for the bit
// check alone. The plain loops' idle OpenMP threads sleep, as tokpos's
// workers do (OMP_WAIT_POLICY=passive, set in main); --omp-spin keeps
// libgomp's default, which spins a while after each loop.
//
//   make bench-quick                   (build/bin/tokpos_bench_quick)
//   build/bin/tokpos_bench_quick --parts forward --shapes decode --rounds 1000 --budget 30
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dl_tensor.h"
#include "machine_info.h"
#include "peers.h"
#include "quant_rows.h"
#include "tokpos/ggml_type.h"
#include "tokpos/ops.h"
#include "tokpos/threading.h"
#include "tokpos/tokpos.h"

namespace {

using namespace tokpos::bench;  // Dl, quant_rows.h, machine_info.h
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The q-th quantile of v (linear between ranks); v is sorted in place.
double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

std::string fmt_time(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

// A thread spinning on one CPU while it lives: another process's busy loop,
// as an engine's own threads would be.
class BusyCpu {
 public:
  explicit BusyCpu(int cpu) {
    thread_ = std::thread([this, cpu] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      pinned_ = sched_setaffinity(0, sizeof set, &set) == 0 ? 1 : -1;
      uint64_t x = 0;
      while (!stop_.load(std::memory_order_relaxed)) x = x * 6364136223846793005ull + 1;
      sink_ = x;
    });
    while (pinned_.load() == 0) std::this_thread::yield();
    if (pinned_.load() < 0) {
      stop_ = true;
      thread_.join();
      throw std::runtime_error("sched_setaffinity could not pin the busy thread to CPU " +
                               std::to_string(cpu));
    }
  }
  ~BusyCpu() {
    stop_ = true;
    thread_.join();
  }
  BusyCpu(const BusyCpu&) = delete;
  BusyCpu& operator=(const BusyCpu&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> pinned_{0};
  std::atomic<uint64_t> sink_{0};
  std::thread thread_;
};

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// A token table, a position table and their gradients.
struct Tables {
  int64_t V, L, D;
  std::vector<float> wte, wpe, d_wte, d_wpe;
  Tables(int64_t v, int64_t l, int64_t d, Rng& rng)
      : V(v),
        L(l),
        D(d),
        wte(static_cast<size_t>(v * d)),
        wpe(static_cast<size_t>(l * d)),
        d_wte(static_cast<size_t>(v * d)),
        d_wpe(static_cast<size_t>(l * d)) {
    for (auto& x : wte) x = rng.uniform();
    for (auto& x : wpe) x = rng.uniform();
  }
};

struct Shape {
  std::string name;
  int64_t B, T;
  Tables* tables;
  bool warm;  // an untimed call of a line before each timed one
  bool cold;  // fresh random ids before each call
  int reps;   // rotations per round
  std::vector<int64_t> ids;
  Rng rng;
  int64_t N() const { return B * T; }
  void fresh_ids() {
    for (auto& id : ids) id = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(tables->V));
  }
};

// One measured case: a part (forward f32, ...) on a shape, its lines (line 0
// is tokpos), how to call line k, and how to check the bits of line k
// against line 0 ("" when they agree; lines with check false are not
// compared: a different table).
struct Case {
  std::string part;
  Shape* shape;
  std::vector<std::string> lines;
  std::vector<bool> checked;
  std::function<void(int)> call;
  std::function<std::string(int)> check;
  // samples[context][line]: seconds per rotation, aligned across lines.
  std::vector<std::vector<std::vector<double>>> samples;
};

struct ThreadSetting {
  std::string label;
  int threads;
  bool busy;
};

std::string first_difference(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, 4) != 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "element %zu: %.9g vs %.9g", i, static_cast<double>(a[i]),
                    static_cast<double>(b[i]));
      return buf;
    }
  return "";
}

void peer(int kind, const PeerArgs& a) {
  const int status = peer_call(kind, &a);
  if (status != 0)
    throw std::runtime_error("peer_call(" + std::to_string(kind) + ") returned " + std::to_string(status));
}

}  // namespace

int run(int argc, char** argv) {
  const auto start = Clock::now();
  CLI::App app{
      "tokpos_bench_quick: tokpos against the plain loop, forward, backward and quantized, "
      "interleaved in one process"};
  int rounds = 200;
  double budget = 100.0;
  bool smoke = false;
  std::vector<std::string> shape_names{"gpt2", "llama", "decode"};
  std::vector<std::string> parts{"forward", "backward", "quant"};
  int busy_cpu = -1;
  app.add_option("--rounds", rounds, "rounds at most (default 200)")->check(CLI::Range(1, 100000));
  app.add_option(
         "--budget", budget,
         "seconds for the whole run (default 100): no round starts after them; at least one round runs")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--shapes", shape_names, "gpt2, llama, decode (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpt2", "llama", "decode"}));
  std::vector<std::string> type_names{"q8_0", "q4_0", "q4_K", "f16", "bf16"};
  std::vector<std::string> known_types;
  for (const TypeCase& c : kCases) known_types.push_back(c.name);
  app.add_option("--types", type_names, "the ggml types of the quant part (default: q8_0,q4_0,q4_K,f16,bf16)")
      ->delimiter(',')
      ->check(CLI::IsMember(known_types));
  app.add_option("--parts", parts, "forward, backward, quant (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"forward", "backward", "quant"}));
  app.add_option("--busy-cpu", busy_cpu, "the CPU the busy thread spins on (default: the last one allowed)");
  bool omp_spin = false;  // acted on in main, before libgomp could be told
  app.add_flag("--omp-spin", omp_spin,
               "keep libgomp's default wait policy (idle OpenMP threads spin a while after each plain loop) "
               "instead of OMP_WAIT_POLICY=passive");
  app.add_flag("--smoke", smoke,
               "tiny shapes, one round: the bit check and the table, nothing to read in the times");
  CLI11_PARSE(app, argc, argv);
  if (smoke) rounds = 1;
  auto wanted = [](const std::vector<std::string>& v, const char* s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };

  if (!wanted(parts, "forward") && !wanted(parts, "backward") && !wanted(shape_names, "llama") &&
      !wanted(shape_names, "decode"))
    throw std::runtime_error(
        "nothing to time: the quant part runs at the llama and decode shapes only, and "
        "--shapes gave neither");
  const std::vector<int> cpus = allowed_cpus();
  if (busy_cpu < 0) busy_cpu = cpus.empty() ? 0 : cpus.back();
  if (!cpus.empty() && std::find(cpus.begin(), cpus.end(), busy_cpu) == cpus.end())
    throw std::runtime_error("--busy-cpu " + std::to_string(busy_cpu) + " is not among the " +
                             std::to_string(cpus.size()) + " CPUs this process may run on");
  const int64_t llc = last_level_cache_bytes();
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin_count = std::getenv("GOMP_SPINCOUNT");

  std::printf("tokpos_bench_quick%s: tokpos against the plain loop, interleaved, one process\n",
              smoke ? " --smoke" : "");
  std::printf("CPU: %s (%s); %zu CPU%s this process may use; last-level cache %s (%lld bytes)\n",
              cpu_model().c_str(), cpu_family_model().c_str(), cpus.size(), cpus.size() == 1 ? "" : "s",
              last_level_cache().c_str(), static_cast<long long>(llc));
  std::printf("load average at the start: %s\n", load_average().c_str());
  std::printf("threads: 1; 2; 2 with a thread spinning pinned to CPU %d (2+busy, the contended case)\n",
              busy_cpu);
  std::printf(
      "OpenMP: OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s (passive: the plain loops' idle threads sleep; this "
      "program sets it unless the environment gives a policy or --omp-spin keeps libgomp's spinning); "
      "tokpos stream threshold %lld bytes\n",
      wait_policy ? wait_policy : "unset", spin_count ? spin_count : "unset",
      static_cast<long long>(tokpos::stream_min_bytes()));
  std::fflush(stdout);

  // Tables: GPT-2's and Llama-2-7B's (the decode step reads Llama's).
  Rng rng{20261207};
  const bool need_gpt2 =
      wanted(shape_names, "gpt2") && (wanted(parts, "forward") || wanted(parts, "backward"));
  const bool need_llama = wanted(shape_names, "llama") || wanted(shape_names, "decode");
  std::unique_ptr<Tables> gpt2_t, llama_t;
  if (need_gpt2)
    gpt2_t = std::make_unique<Tables>(smoke ? 300 : 50257, smoke ? 32 : 1024, smoke ? 64 : 768, rng);
  if (need_llama)
    llama_t = std::make_unique<Tables>(smoke ? 300 : 32000, smoke ? 64 : 4096, smoke ? 256 : 4096, rng);

  std::vector<std::unique_ptr<Shape>> shapes;
  auto add_shape = [&](const char* name, int64_t B, int64_t T, Tables* t, bool warm, bool cold, int reps) {
    auto s = std::make_unique<Shape>(Shape{name, B, T, t, warm, cold, reps, {}, Rng{rng.next()}});
    s->ids.resize(static_cast<size_t>(B * T));
    s->fresh_ids();
    shapes.push_back(std::move(s));
  };
  if (need_gpt2) add_shape("gpt2", smoke ? 2 : 8, smoke ? 16 : 1024, gpt2_t.get(), false, false, 1);
  if (wanted(shape_names, "llama")) add_shape("llama", 1, smoke ? 32 : 2048, llama_t.get(), false, false, 1);
  if (wanted(shape_names, "decode")) {
    add_shape("decode warm", smoke ? 4 : 16, 1, llama_t.get(), true, false, 8);
    add_shape("decode cold", smoke ? 4 : 16, 1, llama_t.get(), false, true, 8);
  }
  int64_t max_nd = 1;
  for (const auto& s : shapes) max_nd = std::max(max_nd, s->N() * s->tables->D);
  std::vector<float> out_a(static_cast<size_t>(max_nd)), out_b(static_cast<size_t>(max_nd)),
      d_out(static_cast<size_t>(max_nd));
  for (auto& x : d_out) x = rng.uniform();

  // The quantized token tables, from the Llama shape's V and D.
  struct Quant {
    const TypeCase* type;
    size_t row_bytes;
    std::vector<uint8_t> blocks;
    std::unique_ptr<Dl> blocks_dl;
    tokpos::ops::QuantizedTable table;
  };
  std::vector<std::unique_ptr<Quant>> quants;
  if (wanted(parts, "quant") && llama_t)
    for (const TypeCase& c : kCases) {
      if (!wanted(type_names, c.name)) continue;
      const tokpos::GgmlTypeTraits* tr = tokpos::ggml_type_by_name(c.name);
      if (tr == nullptr) throw std::runtime_error(std::string("ggml type ") + c.name + " unknown to tokpos");
      auto q = std::make_unique<Quant>();
      q->type = &c;
      q->row_bytes = *tokpos::ggml_row_bytes(*tr, llama_t->D);
      q->blocks = random_table(c, *tr, llama_t->V, q->row_bytes, rng.next());
      q->blocks_dl = std::make_unique<Dl>(
          q->blocks.data(), kU8,
          std::initializer_list<int64_t>{llama_t->V, static_cast<int64_t>(q->row_bytes)});
      q->table = tokpos::ops::QuantizedTable{&q->blocks_dl->t, static_cast<int>(tr->type), llama_t->D};
      quants.push_back(std::move(q));
    }

  int threads = 1;  // the current context's
  tokpos::Context qctx;
  std::vector<Case> cases;
  auto args_for = [&](const Shape& s, float* out) {
    Tables& t = *s.tables;
    return PeerArgs{out,     s.ids.data(),   s.B,          s.T,    t.V, t.L, t.D, t.wte.data(), t.wpe.data(),
                    nullptr, t.d_wpe.data(), d_out.data(), threads};
  };

  for (const auto& sp : shapes) {
    Shape* s = sp.get();
    const size_t nd = static_cast<size_t>(s->N() * s->tables->D);
    if (wanted(parts, "forward")) {
      static const int kinds[] = {kTokposForward, kLoopForward};
      Case c{"forward f32", s, {"tokpos", "plain"}, {true, true}, {}, {}, {}};
      c.call = [&, s](int line) { peer(kinds[line], args_for(*s, out_a.data())); };
      c.check = [&, s, nd](int line) {
        peer(kTokposForward, args_for(*s, out_a.data()));
        peer(kinds[line], args_for(*s, out_b.data()));
        return first_difference(out_a.data(), out_b.data(), nd);
      };
      cases.push_back(std::move(c));
    }
    if (wanted(parts, "backward")) {
      static const int kinds[] = {kTokposBackward, kLoopBackwardSerial, kLoopBackwardSlices};
      Case c{"backward f32", s, {"tokpos", "serial", "sliced"}, {true, true, true}, {}, {}, {}};
      auto bargs = [&](const Shape& sh) {
        PeerArgs a = args_for(sh, nullptr);
        a.d_wte = sh.tables->d_wte.data();
        return a;
      };
      c.call = [bargs, s](int line) { peer(kinds[line], bargs(*s)); };
      // Both lines add into the same starting gradient rows: the touched
      // rows and d_wpe's first T rows are saved, tokpos's result kept, the
      // rows restored, the line run, and the results compared.
      c.check = [bargs, s](int line) {
        Tables& t = *s->tables;
        std::vector<int64_t> rows(s->ids);
        std::sort(rows.begin(), rows.end());
        rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
        const size_t D = static_cast<size_t>(t.D), pos_n = static_cast<size_t>(s->T) * D;
        auto save = [&](std::vector<float>& keep) {
          keep.resize(rows.size() * D + pos_n);
          for (size_t r = 0; r < rows.size(); ++r)
            std::memcpy(&keep[r * D], &t.d_wte[static_cast<size_t>(rows[r]) * D], D * 4);
          std::memcpy(&keep[rows.size() * D], t.d_wpe.data(), pos_n * 4);
        };
        auto restore = [&](const std::vector<float>& keep) {
          for (size_t r = 0; r < rows.size(); ++r)
            std::memcpy(&t.d_wte[static_cast<size_t>(rows[r]) * D], &keep[r * D], D * 4);
          std::memcpy(t.d_wpe.data(), &keep[rows.size() * D], pos_n * 4);
        };
        std::vector<float> before, by_tokpos, by_line;
        save(before);
        peer(kTokposBackward, bargs(*s));
        save(by_tokpos);
        restore(before);
        peer(kinds[line], bargs(*s));
        save(by_line);
        restore(before);
        return first_difference(by_tokpos.data(), by_line.data(), by_tokpos.size());
      };
      cases.push_back(std::move(c));
    }
    if (s->tables == llama_t.get())
      for (const auto& qp : quants) {
        Quant* q = qp.get();
        Case c{std::string("forward ") + q->type->name,
               s,
               {"tokpos", "plain", "f32"},
               {true, true, false},
               {},
               {},
               {}};
        auto line_into = [&, s, q](int line, float* out) {
          const Tables& t = *s->tables;
          const Dl out_dl(out, kF32, {s->B, s->T, t.D}), ids_dl(s->ids.data(), kI64, {s->B, s->T}),
              pos_dl(t.wpe.data(), kF32, {t.L, t.D});
          if (line == 0)
            tokpos::ops::compose_forward(out_dl, ids_dl, q->table, &pos_dl.t, nullptr, 0, {}, &qctx);
          else if (line == 1)
            plain_forward(out, s->ids.data(), s->N(), s->T, q->blocks.data(), q->row_bytes,
                          q->type->dequantize, t.wpe.data(), 0, t.D, threads);
          else
            peer(kTokposForward, args_for(*s, out));
        };
        c.call = [&, line_into](int line) { line_into(line, out_a.data()); };
        c.check = [&, line_into, nd](int line) {
          line_into(0, out_a.data());
          line_into(line, out_b.data());
          return first_difference(out_a.data(), out_b.data(), nd);
        };
        cases.push_back(std::move(c));
      }
  }

  std::printf("shapes:");
  for (const auto& s : shapes)
    std::printf(" %s (B %lld, T %lld, D %lld, V %lld, L %lld);", s->name.c_str(),
                static_cast<long long>(s->B), static_cast<long long>(s->T),
                static_cast<long long>(s->tables->D), static_cast<long long>(s->tables->V),
                static_cast<long long>(s->tables->L));
  std::printf("\n");
  if (llama_t && wanted(shape_names, "decode")) {
    const double f32_bytes = static_cast<double>(llama_t->V * llama_t->D) * 4.0;
    std::printf(
        "decode warm: the same ids each call, each timed call after an untimed one of the same line; "
        "decode cold: fresh random ids before each call, f32 token table %.0f MiB = %.1fx the last-level cache",
        f32_bytes / (1 << 20), llc > 0 ? f32_bytes / static_cast<double>(llc) : 0.0);
    for (const auto& q : quants)
      std::printf(", %s %.0f MiB = %.1fx", q->type->name, static_cast<double>(q->blocks.size()) / (1 << 20),
                  llc > 0 ? static_cast<double>(q->blocks.size()) / static_cast<double>(llc) : 0.0);
    std::printf("%s\n",
                !smoke && llc > 0 && static_cast<double>(llc) >= f32_bytes ? " (NOT larger: not cold)" : "");
  }
  std::printf("set-up: %.1f s\n\n", seconds_since(start));
  std::fflush(stdout);

  std::vector<ThreadSetting> contexts{{"1", 1, false}, {"2", 2, false}, {"2+busy", 2, true}};
  for (Case& c : cases) c.samples.assign(contexts.size(), std::vector<std::vector<double>>(c.lines.size()));
  int mismatches = 0;
  auto enter = [&](const ThreadSetting& ctx, std::unique_ptr<BusyCpu>& busy) {
    threads = ctx.threads;
    tokpos_set_num_threads(threads);
    qctx.set_num_threads(threads);
    busy.reset();
    if (ctx.busy) busy = std::make_unique<BusyCpu>(busy_cpu);
  };

  // The bit check at each thread count, and a warm-up call of every line.
  for (const ThreadSetting& ctx : contexts) {
    std::unique_ptr<BusyCpu> busy;
    enter(ctx, busy);
    for (Case& c : cases)
      for (size_t k = 1; k < c.lines.size(); ++k) {
        if (!c.checked[k]) continue;
        const std::string diff = c.check(static_cast<int>(k));
        if (!diff.empty()) {
          std::printf("MISMATCH %s, %s, %s thread(s): %s and tokpos differ first at %s\n", c.part.c_str(),
                      c.shape->name.c_str(), ctx.label.c_str(), c.lines[k].c_str(), diff.c_str());
          ++mismatches;
        }
      }
    for (Case& c : cases)
      for (size_t k = 0; k < c.lines.size(); ++k) c.call(static_cast<int>(k));
  }

  // The rounds: each visits the thread counts in turn (the busy thread runs
  // only in its part), so a change in the machine's load over the run hits
  // every row alike.
  int rounds_done = 0;
  for (int r = 0; r < rounds; ++r) {
    if (r > 0 && seconds_since(start) > budget) break;
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      std::unique_ptr<BusyCpu> busy;
      enter(contexts[ci], busy);
      for (Case& c : cases) {
        const int n = static_cast<int>(c.lines.size());
        for (int rep = 0; rep < c.shape->reps; ++rep) {
          const int first = r * c.shape->reps + rep;
          for (int j = 0; j < n; ++j) {
            const int line = (first + j) % n;
            if (c.shape->warm) c.call(line);
            if (c.shape->cold) c.shape->fresh_ids();
            const auto t0 = Clock::now();
            c.call(line);
            c.samples[ci][static_cast<size_t>(line)].push_back(seconds_since(t0));
          }
        }
      }
    }
    rounds_done = r + 1;
  }

  // The tables: one per part, a row per shape and thread count.
  std::printf(
      "rounds: %d of at most %d, each at 1, 2 and 2+busy threads; a decode case runs 8 rotations a round%s\n",
      rounds_done, rounds, smoke ? " (--smoke: the times mean nothing)" : "");
  std::vector<std::string> part_order, behind;
  for (const Case& c : cases)
    if (std::find(part_order.begin(), part_order.end(), c.part) == part_order.end())
      part_order.push_back(c.part);
  for (const std::string& part : part_order) {
    const Case* head = nullptr;
    for (const Case& c : cases)
      if (c.part == part) head = &c;
    std::printf("\n%s", part.c_str());
    if (part == "forward f32") std::printf(": plain = llm.c's encoder_forward, OpenMP over (b, t)");
    if (part == "backward f32")
      std::printf(
          ": serial = llm.c's encoder_backward (one thread); sliced = each thread a slice of D, (b, t) "
          "order");
    if (part != "forward f32" && part != "backward f32")
      std::printf(": plain = ggml's dequantize_row into a buffer, then + wpe[t]; f32 = tokpos's f32 forward");
    std::printf("\n  %-12s %-7s %10s", "shape", "threads", "tokpos");
    for (size_t k = 1; k < head->lines.size(); ++k)
      std::printf(" %10s %6s %-11s", head->lines[k].c_str(), "ratio", "[IQR]");
    std::printf(" %8s\n", "1t/busy");
    for (const Case& c : cases) {
      if (c.part != part) continue;
      double tokpos_1t = 0.0;
      for (size_t ci = 0; ci < contexts.size(); ++ci) {
        const auto& sm = c.samples[ci];
        std::vector<double> t0(sm[0]);
        const double med0 = quantile(t0, 0.5);
        if (ci == 0) tokpos_1t = med0;
        std::printf("  %-12s %-7s %10s", c.shape->name.c_str(), contexts[ci].label.c_str(),
                    fmt_time(med0).c_str());
        for (size_t k = 1; k < c.lines.size(); ++k) {
          std::vector<double> tk(sm[k]), ratio;
          for (size_t i = 0; i < std::min(sm[0].size(), sm[k].size()); ++i)
            ratio.push_back(sm[k][i] / sm[0][i]);
          const double med = quantile(ratio, 0.5), q1 = quantile(ratio, 0.25), q3 = quantile(ratio, 0.75);
          char iqr[32];
          std::snprintf(iqr, sizeof iqr, "[%.2f-%.2f]", q1, q3);
          std::printf(" %10s %6.2f %-11s", fmt_time(quantile(tk, 0.5)).c_str(), med, iqr);
          if (med < 0.97) {
            char row[160];
            std::snprintf(row, sizeof row, "  %s, %s, %s thread%s: %s / tokpos %.2f %s", part.c_str(),
                          c.shape->name.c_str(), contexts[ci].label.c_str(), ci == 0 ? "" : "s",
                          c.lines[k].c_str(), med, iqr);
            behind.push_back(row);
          }
        }
        if (contexts[ci].busy) std::printf(" %8.2f", tokpos_1t / med0);
        std::printf("\n");
      }
    }
  }
  std::printf(
      "\nratio: the median over rotations of (line's time / tokpos's time) in the same rotation, above 1: "
      "tokpos faster; [IQR]: the ratios' interquartile range. Times: medians. 1t/busy: tokpos's 1-thread "
      "median / its 2+busy median (below 1: the contended 2-thread call is slower than one thread alone).\n");
  std::printf("\nrows where tokpos is more than 3%% slower than the line beside it (ratio below 0.97): %zu\n",
              behind.size());
  for (const std::string& row : behind) std::printf("%s\n", row.c_str());
  std::printf("\nload average at the end: %s\n", load_average().c_str());
  std::printf("wall time: %.1f s\n", seconds_since(start));
  if (mismatches != 0) {
    std::printf("%d MISMATCH(ES) between tokpos and a plain loop\n", mismatches);
    return 1;
  }
  std::printf("bits: every plain loop gave tokpos's bits, at every thread count, before the timing\n");
  return 0;
}

int main(int argc, char** argv) {
  // The plain loops' idle OpenMP threads sleep, as tokpos's do: under
  // libgomp's default policy they spin for a while after each loop, and in
  // an interleaved rotation that spinning takes a core from the line timed
  // next (at 2 threads it made tokpos's GPT-2 backward take 7.4 ms instead of
  // 3.7 ms). libgomp reads the policy when it loads, so the program starts
  // itself again with it set; a policy given in the environment, or
  // --omp-spin, keeps libgomp's own.
  bool omp_spin = false;
  for (int i = 1; i < argc; ++i) omp_spin = omp_spin || std::strcmp(argv[i], "--omp-spin") == 0;
  if (!omp_spin && std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    std::fprintf(stderr,
                 "tokpos_bench_quick: could not start again with OMP_WAIT_POLICY=passive (%s); "
                 "the plain loops' threads spin after each loop\n",
                 std::strerror(errno));
    unsetenv("OMP_WAIT_POLICY");
  }
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokpos_bench_quick: %s\n", e.what());
    return 1;
  }
}
