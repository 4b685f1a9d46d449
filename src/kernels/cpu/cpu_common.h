// Private to the cpu back end: run-time dispatch, prefetch and the token
// ranges every forward kernel of this back end shares.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "common/env_setting.h"
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

// A decode step (at most kDecodeTokens tokens) stays on the calling thread
// unless this is set: then it is split over the team when each thread gets
// at least this many bytes of rows to write (the forward) or to read (the
// backward). A team that is already spinning (called back to back, or from
// an engine whose other ops run on the same OpenMP runtime) takes a 16-token
// step at D = 4096 in 0.6-0.8 of one thread's time; a team that has gone to
// sleep costs a wake-up, far more than the step (docs/design.md,
// "Threading"). TOKPOS_DECODE_TEAM_BYTES sets it at the first use,
// set_decode_team_bytes at run time (< 0: back to the default, 0: never).
// The split never changes a result.
inline detail::BytesSetting g_decode_team_bytes{"TOKPOS_DECODE_TEAM_BYTES", [] { return int64_t{0}; }};
inline int64_t decode_team_bytes() { return g_decode_team_bytes.get(); }
inline void set_decode_team_bytes(int64_t bytes) { g_decode_team_bytes.set(bytes); }
// Threads for N tokens whose rows are `bytes` bytes in all and whose work is
// `work` (threads_for's measure): threads_for's rule, except that a decode
// step takes one thread per decode_team_bytes, at most one per token.
inline int threads_for_tokens(const Exec& ex, int64_t N, int64_t bytes, int64_t work) {
  if (N > kDecodeTokens) return threads_for(ex, work);
  const int64_t per = decode_team_bytes();
  if (per == 0) return 1;
  return static_cast<int>(std::clamp<int64_t>(bytes / per, 1, std::min<int64_t>(std::max(ex.threads, 1), N)));
}

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

// Over threads_for_tokens' team (row_bytes: the bytes written per token).
template <typename RowsFn>
void over_token_ranges(const Exec& ex, int64_t N, int64_t work, int64_t row_bytes, RowsFn&& rows) {
  over_token_ranges_on(threads_for_tokens(ex, N, N * row_bytes, work), N, rows);
}

// The same with a decode step always on the calling thread.
template <typename RowsFn>
void over_token_ranges(const Exec& ex, int64_t N, int64_t work, RowsFn&& rows) {
  over_token_ranges_on(N <= kDecodeTokens ? 1 : threads_for(ex, work), N, rows);
}

}  // namespace tokpos::kernels::cpu
