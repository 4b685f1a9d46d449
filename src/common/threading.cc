#include "tokpos/threading.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

#include "common/parallel.h"

namespace tokpos {
namespace {
std::atomic<int> g_threads{0};  // 0 = every core
}

void set_num_threads(int n) {
  g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed);
}

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : std::max(1, omp_get_num_procs());
}

namespace detail {
int threads_for(int64_t work) {
  constexpr int64_t kGrain = 1 << 16;
  if (work < kGrain) return 1;
  const int64_t by_work = work / kGrain;
  return static_cast<int>(std::min<int64_t>(num_threads(), by_work));
}
}  // namespace detail

}  // namespace tokpos
