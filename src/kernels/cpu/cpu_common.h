// Private to the cpu back end: run-time dispatch, prefetch and the token
// ranges every forward kernel of this back end shares.
#pragma once

#include <omp.h>

#include <cstdint>

#include "kernels/kernels.h"

namespace tokpos::kernels::cpu {

// Run-time dispatch (GCC ifunc): wide vectors where the CPU has them, one
// binary everywhere. Clones do the same IEEE operations in the same order.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TOKPOS_NO_TARGET_CLONES)
#define TOKPOS_KERNEL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TOKPOS_KERNEL_CLONES
#endif

inline constexpr int64_t kDecodeTokens = 16;  // at most this many tokens: no threading at all
inline constexpr int64_t kPrefetchAhead = 8;  // rows ahead whose token row is prefetched

inline void prefetch_row(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 1);
}

// Calls rows(n0, n1) over all N tokens: once, with no OpenMP region at all,
// for a decode step or little `work`; else one contiguous token range per
// thread, so each thread streams its own part of the output.
template <typename RowsFn>
void over_token_ranges(const Exec& ex, int64_t N, int64_t work, RowsFn&& rows) {
  const int nt = N <= kDecodeTokens ? 1 : threads_for(ex, work);
  if (nt == 1) return rows(int64_t{0}, N);
#pragma omp parallel num_threads(nt)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    rows(N * k / team, N * (k + 1) / team);
  }
}

}  // namespace tokpos::kernels::cpu
