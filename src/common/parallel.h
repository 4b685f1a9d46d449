// Private: the thread count every kernel uses, the rule for when to thread,
// and the library's own workers, which sleep between calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace tokpos::detail {

// Threads for a job of `work` float operations: 1 below a grain that
// amortises the cost of waking a worker (65536 operations), else up to
// max_threads (or num_threads()), one per grain of work.
int threads_for(int64_t work, int max_threads);
int threads_for(int64_t work);

// Runs part(ctx, c, slot) once for every chunk c in [0, chunks), on the
// calling thread and at most threads - 1 of the library's workers, and
// returns when every chunk has returned. Chunks are taken one at a time in
// increasing order by whichever thread is free: a worker that wakes late (or
// is descheduled before it takes one) takes none, and the caller does the
// rest, so a busy machine slows a call by at most the chunk a preempted
// thread holds. slot is in [0, threads), 0 on the caller, and no two chunks
// running at once share one (per-slot scratch is safe). The workers wait on a
// condition variable between calls: nothing spins. One caller at a time hands
// chunks to the workers; a caller that finds them in use (another thread's
// call, or a part calling this again) runs every chunk itself, in order, as
// slot 0. In a child after fork() the workers are started afresh. A part must
// not throw.
void run_chunks(int threads, int64_t chunks, void (*part)(void* ctx, int64_t c, int slot), void* ctx);

template <typename Part>
void parallel_chunks(int threads, int64_t chunks, Part&& part) {
  using P = std::remove_reference_t<Part>;
  run_chunks(
      threads, chunks, [](void* ctx, int64_t c, int slot) { (*static_cast<P*>(ctx))(c, slot); },
      const_cast<void*>(static_cast<const void*>(&part)));
}

// Runs part(lo, hi, slot) over [0, n) in contiguous ranges taken as
// run_chunks takes chunks: about kRangesPerThread a thread, so a thread that
// another process holds up delays the call by one range, not by its whole
// share; one range on the calling thread when threads <= 1.
inline constexpr int64_t kRangesPerThread = 8;
template <typename Part>
void parallel_ranges(int threads, int64_t n, Part&& part) {
  if (n <= 0) return;
  if (threads <= 1) return part(int64_t{0}, n, 0);
  const int64_t chunks = std::min<int64_t>(n, kRangesPerThread * threads);
  parallel_chunks(threads, chunks, [&](int64_t c, int slot) { part(n * c / chunks, n * (c + 1) / chunks, slot); });
}

}  // namespace tokpos::detail
