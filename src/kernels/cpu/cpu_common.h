// Private to the cpu back end: run-time dispatch, prefetch and the token
// ranges every forward kernel of this back end shares.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "common/env_setting.h"
#include "kernels/cpu/decode_team.h"
#include "kernels/kernels.h"

namespace tokpos::kernels::cpu {

// Run-time dispatch (GCC ifunc): wide vectors where the CPU has them, one
// binary everywhere. Clones do the same IEEE operations in the same order.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TOKPOS_NO_TARGET_CLONES)
#define TOKPOS_KERNEL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TOKPOS_KERNEL_CLONES
#endif

inline constexpr int64_t kDecodeTokens = 16;  // at most this many tokens: a decode step (threads_for_tokens)
inline constexpr int64_t kPrefetchAhead = 8;  // rows ahead, for the BERT forward and the backward

// The forward prefetches the token row of the token this many bytes of rows
// ahead (rounded down to whole rows, at least 1, at most kMaxPrefetchRows):
// a distance in bytes, not rows, so a 16 KiB row (D = 4096, f32) is not
// prefetched 128 KiB ahead, past what the L1 and the miss buffers hold, while
// a 3 KiB row (D = 768) still is 8 rows ahead. TOKPOS_PREFETCH_BYTES in the
// environment sets it at the first use (0: no prefetch); set_prefetch_bytes
// changes it at run time (tests and benchmarks). Prefetching never changes a
// result, only when the rows arrive.
inline constexpr int64_t kMaxPrefetchRows = 16;

inline detail::BytesSetting g_prefetch_bytes{"TOKPOS_PREFETCH_BYTES", [] { return int64_t{12} << 10; }};
inline int64_t prefetch_bytes() { return g_prefetch_bytes.get(); }
// bytes < 0: back to the default (or the environment's value).
inline void set_prefetch_bytes(int64_t bytes) { g_prefetch_bytes.set(bytes); }
// Rows ahead for rows of row_bytes bytes; 0 = no prefetch.
inline int64_t prefetch_rows_ahead(int64_t row_bytes) {
  const int64_t bytes = prefetch_bytes();
  if (bytes == 0 || row_bytes <= 0) return 0;
  return std::clamp<int64_t>(bytes / row_bytes, 1, kMaxPrefetchRows);
}

// The forward visits its tokens in blocks of position rows of about this many
// bytes (gather.cc, TileOrder), so that sequences sharing positions find the
// block's rows in the cache; 0 = plain token order. TOKPOS_POSITION_TILE_BYTES
// sets it at the first use, set_position_tile_bytes at run time. The order
// never changes a result.
inline detail::BytesSetting g_position_tile_bytes{"TOKPOS_POSITION_TILE_BYTES", [] { return int64_t{256} << 10; }};
inline int64_t position_tile_bytes() { return g_position_tile_bytes.get(); }
inline void set_position_tile_bytes(int64_t bytes) { g_position_tile_bytes.set(bytes); }
// Positions per block for position rows of row_bytes bytes; T = no blocks.
inline int64_t position_tile_rows(int64_t row_bytes, int64_t T) {
  const int64_t bytes = position_tile_bytes();
  if (bytes == 0 || row_bytes <= 0) return T;
  return std::clamp<int64_t>(bytes / row_bytes, 1, T);
}

inline void prefetch_row(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 1);
}

// One line in each 4 KiB page of [row, row + bytes), and its last line.
inline void prefetch_pages(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t off = 0; off < bytes; off += 4096) __builtin_prefetch(p + off, 0, 1);
  if (bytes > 0) __builtin_prefetch(p + bytes - 1, 0, 1);
}

// A decode step (at most kDecodeTokens tokens) is split over threads only
// while calls come back to back: then the decode team's workers
// (decode_team.h) are still spinning and a 16-token step at D = 4096 takes
// about 0.6 of one thread's time; a worker gone to sleep costs a wake-up, far
// more than the step, and one whose core another process holds costs a
// scheduler tick (docs/design.md, "Threading"). DecodeTeamPolicy below judges
// that from the calling thread's own recent calls. TOKPOS_DECODE_TEAM_BYTES,
// read at the first use, or set_decode_team_bytes at run time (< 0: back to
// the default) overrides it: 0 never splits; n > 0 always splits, one thread
// per n bytes of rows written (the forward) or read (the backward). Unset
// (kDecodeTeamAuto): one thread per kAutoDecodeTeamBytes, when the policy
// says the team pays. The split never changes a result.
inline constexpr int64_t kDecodeTeamAuto = INT64_MAX;
inline constexpr int64_t kAutoDecodeTeamBytes = int64_t{64} << 10;
inline detail::BytesSetting g_decode_team_bytes{"TOKPOS_DECODE_TEAM_BYTES", [] { return kDecodeTeamAuto; }};
inline int64_t decode_team_bytes() { return g_decode_team_bytes.get(); }
inline void set_decode_team_bytes(int64_t bytes) { g_decode_team_bytes.set(bytes); }

// Whether a decode step's team pays, from the times (steady clock, ns) of the
// calling thread's own calls: the step is split when the previous call ended
// at most kHotNs before (back to back, so the workers, which spin for
// kDecodeTeamSpinNs after a step, are awake) and no backoff is running. Each
// split step is judged by how long the caller, its own part done, waited for
// the others (a slow caller is not the team's doing: a page fault or a
// preemption would have cost one thread as much):
//  - stalled: it waited more than kStallNs (a worker waited for a core that
//    another process held: a scheduler tick). The splitting stops at once.
//  - slow: with the workers known awake (a split step ended at most kHotNs
//    before), it waited more than kSlackNs and the step took more than twice
//    one thread's time for its bytes (from this thread's one-thread steps)
//    plus kSlackNs. One alone is noise; kSlowInARow in a row stop it.
//  - else fast.
// The thread's first split step is not judged: it may start the workers.
// A stop lasts kBackoffMinNs, or four times the previous stop (up to
// kBackoffMaxNs) when the previous stop ended less than kCalmNs before: a
// team that keeps stalling is tried less and less often, one preemption now
// and then costs a couple of milliseconds on one thread. The choice only
// moves time: the bits are the same.
struct DecodeTeamPolicy {
  static constexpr int64_t kHotNs = 1'000'000;
  static constexpr int64_t kSlackNs = 10'000;
  static constexpr int64_t kStallNs = 500'000;
  static constexpr int64_t kBackoffMinNs = 2'000'000;
  static constexpr int64_t kBackoffMaxNs = 10'000'000'000;
  static constexpr int64_t kCalmNs = 1'000'000'000;
  static constexpr int kSlowInARow = 2;
  static constexpr int64_t kNever = INT64_MIN / 4;
  static_assert(kHotNs < kDecodeTeamSpinNs, "a hot call must find the workers spinning");

  int64_t last_end = kNever;       // the end of the last call
  int64_t last_team_end = kNever;  // the end of the last call on more than one thread
  int64_t backoff_until = kNever;  // the end of the last stop
  int64_t backoff = 0;             // the length of the last stop (0: none yet)
  double one_thread_ns_per_byte = 0;  // 0: no one-thread step timed yet
  int slow_in_a_row = 0;

  bool team_pays(int64_t now) const { return now - last_end <= kHotNs && now >= backoff_until; }

  // A call from start to end on nt threads; decode: it was a decode step of
  // `bytes` bytes; wait: how long its caller, its own part done, waited for
  // the other threads.
  void finished(int64_t start, int64_t end, int nt, bool decode, int64_t bytes, int64_t wait = 0) {
    const int64_t took = end - start;
    if (decode && nt == 1 && bytes > 0) {
      // Falls at once to a faster step, rises slowly (a first call's page
      // faults are not one thread's time).
      const double x = static_cast<double>(took) / static_cast<double>(bytes);
      const double was = one_thread_ns_per_byte;
      one_thread_ns_per_byte = was == 0 || x < was ? x : was + 0.125 * (x - was);
    }
    if (decode && nt > 1) judge(end, took, bytes, start - last_team_end <= kHotNs, wait);
    if (nt > 1) last_team_end = end;
    last_end = end;
  }

 private:
  void judge(int64_t end, int64_t took, int64_t bytes, bool awake, int64_t wait) {
    if (last_team_end == kNever) return;  // the thread's first split step: it may start the workers
    const double expected = 2 * one_thread_ns_per_byte * static_cast<double>(bytes);
    const bool stalled = wait > kStallNs;
    const bool slow = awake && wait > kSlackNs && static_cast<double>(took) > expected + kSlackNs;
    if (!stalled && !slow) {
      slow_in_a_row = 0;
      return;
    }
    if (!stalled && ++slow_in_a_row < kSlowInARow) return;
    slow_in_a_row = 0;
    const bool calm = backoff == 0 || end - backoff_until > kCalmNs;
    backoff = calm ? kBackoffMinNs : std::min(4 * backoff, kBackoffMaxNs);
    backoff_until = end + backoff;
  }
};

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The calling thread's policy: OpenMP keeps a team of threads per calling
// thread, so each caller judges its own.
inline DecodeTeamPolicy& decode_team_policy() {
  thread_local DecodeTeamPolicy p;
  return p;
}

// Threads for N tokens whose rows are `bytes` bytes in all and whose work is
// `work` (threads_for's measure): threads_for's rule, except that a decode
// step takes one thread per decode_team_bytes (kAutoDecodeTeamBytes while the
// policy says the team pays, else one), at most one per token. now: the
// call's start on steady_ns's clock.
inline int threads_for_tokens(const Exec& ex, int64_t N, int64_t bytes, int64_t work, int64_t now) {
  if (N > kDecodeTokens) return threads_for(ex, work);
  int64_t per = decode_team_bytes();
  if (per == kDecodeTeamAuto) per = ex.threads > 1 && decode_team_policy().team_pays(now) ? kAutoDecodeTeamBytes : 0;
  if (per == 0) return 1;
  return static_cast<int>(std::clamp<int64_t>(bytes / per, 1, std::min<int64_t>(std::max(ex.threads, 1), N)));
}

// A call whose decode steps the policy judges: it chooses the threads at its
// start and reports the call to the policy at its end.
class TimedTokens {
 public:
  // max_threads: the most the call can use.
  TimedTokens(const Exec& ex, int64_t N, int64_t bytes, int64_t work, int64_t max_threads = INT32_MAX)
      : start_(steady_ns()), bytes_(bytes), decode_(N <= kDecodeTokens),
        nt_(static_cast<int>(std::min<int64_t>(threads_for_tokens(ex, N, bytes, work, start_), max_threads))) {}
  ~TimedTokens() {
    const int64_t end = steady_ns();
    decode_team_policy().finished(start_, end, nt_, decode_, bytes_, own_end_ > 0 ? end - own_end_ : 0);
  }
  TimedTokens(const TimedTokens&) = delete;
  TimedTokens& operator=(const TimedTokens&) = delete;
  int threads() const { return nt_; }
  // Runs part(k, team) for k = 0 .. team - 1, one per thread, k = 0 on the
  // caller: a decode step split over threads on the decode team
  // (decode_team.h), or, while another thread has that team, on an OpenMP
  // region; a call of more tokens on an OpenMP region; one thread: part(0, 1).
  // A region may get fewer threads than asked (team < threads()).
  template <typename Part>
  void run(Part&& part) const {
    if (nt_ == 1) return part(0, 1);
    auto timed = [&](int k, int team) {
      part(k, team);
      if (k == 0) own_end_ = steady_ns();
    };
    if (decode_ && run_on_decode_team(nt_, timed)) return;
#pragma omp parallel num_threads(nt_)
    timed(omp_get_thread_num(), omp_get_num_threads());
  }

 private:
  int64_t start_, bytes_;
  bool decode_;
  int nt_;
  mutable int64_t own_end_ = 0;  // when the caller's own part ended (written by the caller only)
};

// Calls rows(n0, n1) over all N tokens on nt threads: once, with no OpenMP
// region at all, for one thread; else one contiguous token range per thread,
// so each thread streams its own part of the output.
template <typename RowsFn>
void over_token_ranges_on(int nt, int64_t N, RowsFn&& rows) {
  if (nt == 1) return rows(int64_t{0}, N);
#pragma omp parallel num_threads(nt)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    rows(N * k / team, N * (k + 1) / team);
  }
}

// Over threads_for_tokens' team (row_bytes: the bytes written per token), as
// TimedTokens::run runs it.
template <typename RowsFn>
void over_token_ranges(const Exec& ex, int64_t N, int64_t work, int64_t row_bytes, RowsFn&& rows) {
  const TimedTokens call(ex, N, N * row_bytes, work);
  call.run([&](int64_t k, int64_t team) { rows(N * k / team, N * (k + 1) / team); });
}

// The same with a decode step always on the calling thread.
template <typename RowsFn>
void over_token_ranges(const Exec& ex, int64_t N, int64_t work, RowsFn&& rows) {
  over_token_ranges_on(N <= kDecodeTokens ? 1 : threads_for(ex, work), N, rows);
}

}  // namespace tokpos::kernels::cpu
