// Private to the cpu back end: run-time dispatch, prefetch and the token
// ranges every forward kernel of this back end shares.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/env_setting.h"
#include "common/parallel.h"
#include "kernels/kernels.h"

namespace tokpos::kernels::cpu {

// Run-time dispatch (GCC ifunc): wide vectors where the CPU has them, one
// binary everywhere. Clones do the same IEEE operations in the same order.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TOKPOS_NO_TARGET_CLONES)
#define TOKPOS_KERNEL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TOKPOS_KERNEL_CLONES
#endif

inline constexpr int64_t kDecodeTokens = 16;  // at most this many tokens: a decode step, on the calling thread
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

// Calls rows(n0, n1) over all N tokens: a decode step (at most
// kDecodeTokens) on the calling thread, which is cheaper than handing it to
// any other thread; else on threads_for's count, in ranges taken dynamically
// (detail::parallel_ranges). Each output row is written by one thread, so the
// bits do not depend on who takes which range.
template <typename RowsFn>
void over_token_ranges(const Exec& ex, int64_t N, int64_t work, RowsFn&& rows) {
  const int nt = N <= kDecodeTokens ? 1 : threads_for(ex, work);
  detail::parallel_ranges(nt, N, [&](int64_t n0, int64_t n1, int) { rows(n0, n1); });
}

}  // namespace tokpos::kernels::cpu
