#include "tokpos/threading.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "common/parallel.h"

namespace tokpos {
namespace {
// 0 = every core. TOKPOS_NUM_THREADS in the environment sets the starting value.
int initial_threads() {
  const char* env = std::getenv("TOKPOS_NUM_THREADS");
  if (env == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  return (end != env && *end == '\0' && n > 0 && n < 4096) ? static_cast<int>(n) : 0;
}
std::atomic<int> g_threads{initial_threads()};
}  // namespace

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
