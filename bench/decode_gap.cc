// A decode step (16 tokens at D = 4096, float32, position rows added) called
// after a stretch of busy work, as a model calls it between the rest of its
// forward: the medians, 90th and 99th percentiles and means of the call
// alone, for each gap. A decode step runs on the calling thread whatever the
// thread count (docs/design.md, "Threading"), so the gap shows what the
// caches lost to the busy work cost it; run it with a busy process on
// another core to see that the step does not depend on another core. It
// prints figures only; nothing is judged.
//
//   build/bin/tokpos_decode_gap [--threads 2] [--gaps 0,300,2000,10000] [--calls 10000] [--backward]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "tokpos/tokpos.h"

namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokpos_decode_gap: a decode step after busy work, medians and means"};
  int threads = 2, calls = 10000;
  std::vector<double> gaps{0, 300, 2000, 10000};
  bool backward = false;
  app.add_option("--threads", threads, "tokpos_set_num_threads")->check(CLI::Range(1, 1024));
  app.add_option("--gaps", gaps, "microseconds of busy work before each call")->delimiter(',');
  app.add_option("--calls", calls, "calls per gap (a tenth of it for gaps of 2 ms and more)")
      ->check(CLI::Range(10, 10'000'000));
  app.add_flag("--backward", backward, "time tokpos_compose_backward instead of the forward");
  CLI11_PARSE(app, argc, argv);

  const int64_t B = 16, T = 1, D = 4096, V = 32000, L = 4096;
  tokpos_set_num_threads(threads);
  std::vector<float> tok(static_cast<size_t>(V * D), 0.5f), pos(static_cast<size_t>(L * D), 0.25f);
  std::vector<float> out(static_cast<size_t>(B * T * D)), d_out(out.size(), 1.0f);
  std::vector<float> d_tok(tok.size()), d_pos(pos.size());
  std::vector<float> other(size_t{4} << 20, 1.0f);  // the busy work reads 16 MiB at a stride
  std::mt19937_64 rng(7);
  std::vector<int64_t> ids(static_cast<size_t>(B * T));
  for (auto& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(V));
  std::printf("%s, %d thread(s) set\n", backward ? "backward" : "forward", threads);
  volatile float sink = 0;
  for (const double gap : gaps) {
    const int n = gap >= 2000 ? std::max(10, calls / 10) : calls;
    std::vector<double> t(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      const auto g0 = Clock::now();
      for (size_t k = 0; micros_since(g0) < gap; k = (k + 4099) % other.size()) sink = sink + other[k];
      const auto t0 = Clock::now();
      const tokpos_status st =
          backward ? tokpos_compose_backward(d_tok.data(), d_pos.data(), d_out.data(), ids.data(), B, T, V, L, D)
                   : tokpos_compose_forward(out.data(), ids.data(), B, T, tok.data(), V, pos.data(), L, D);
      t[static_cast<size_t>(r)] = micros_since(t0);
      if (st != TOKPOS_OK) {
        std::fprintf(stderr, "tokpos: %s\n", tokpos_last_error());
        return 1;
      }
    }
    double mean = 0;
    for (const double x : t) mean += x;
    mean /= n;
    std::sort(t.begin(), t.end());
    auto at = [&](double q) { return t[static_cast<size_t>(q * (n - 1))]; };
    std::printf("  gap %7.0f us: median %8.2f us, p90 %8.2f, p99 %8.2f, mean %8.2f (%d calls)\n", gap, at(0.5),
                at(0.9), at(0.99), mean, n);
  }
  return 0;
}
