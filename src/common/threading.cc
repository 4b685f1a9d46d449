#include "tokpos/threading.h"

#include <omp.h>
#include <unistd.h>

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

// Half the last-level cache (the largest cache sysconf reports), 16 MiB if
// it reports none.
int64_t default_stream_min_bytes() {
  long llc = 0;
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    llc = sysconf(name);
    if (llc > 0) break;
  }
  return llc > 0 ? llc / 2 : int64_t{16} << 20;
}
int64_t initial_stream_min_bytes() {
  const char* env = std::getenv("TOKPOS_STREAM_MIN_BYTES");
  if (env != nullptr) {
    char* end = nullptr;
    const long long n = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && n >= 0) return n;
  }
  return default_stream_min_bytes();
}
std::atomic<int64_t> g_stream_min_bytes{initial_stream_min_bytes()};
}  // namespace

void set_num_threads(int n) {
  g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed);
}

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : std::max(1, omp_get_num_procs());
}

void set_stream_min_bytes(int64_t bytes) {
  g_stream_min_bytes.store(bytes >= 0 ? bytes : default_stream_min_bytes(), std::memory_order_relaxed);
}

int64_t stream_min_bytes() {
  return g_stream_min_bytes.load(std::memory_order_relaxed);
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
