#include "tokpos/threading.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common/env_setting.h"
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

// The last-level cache in bytes: the largest data or unified cache of CPU 0
// that the kernel lists in sysfs (what lscpu shows), else what sysconf says
// (glibc's figure can be the host's, not the VM's: 320 MiB for a 32 MiB L3
// here), else 0.
int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream type_file(dir + "type"), size_file(dir + "size");
    std::string type, size;
    if (!(type_file >> type) || !(size_file >> size) || type == "Instruction") continue;
    char* end = nullptr;
    int64_t bytes = std::strtoll(size.c_str(), &end, 10);
    if (*end == 'K') bytes <<= 10;
    if (*end == 'M') bytes <<= 20;
    if (*end == 'G') bytes <<= 30;
    best = std::max(best, bytes);
  }
  if (best > 0) return best;
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long bytes = sysconf(name);
    if (bytes > 0) return bytes;
  }
  return 0;
}

// Half the last-level cache, at most 16 MiB (a larger cache is a server
// socket's, shared by many cores: docs/design.md, "Streaming stores"); 16 MiB
// if it is unknown.
int64_t default_stream_min_bytes() {
  static const int64_t bytes = [] {
    constexpr int64_t kMax = int64_t{16} << 20;
    const int64_t llc = last_level_cache_bytes();
    return llc > 0 ? std::min(llc / 2, kMax) : kMax;
  }();
  return bytes;
}
// TOKPOS_STREAM_MIN_BYTES from the environment, else the default above, read
// at the first use (so loading the library reads no files).
detail::BytesSetting g_stream_min_bytes{"TOKPOS_STREAM_MIN_BYTES", default_stream_min_bytes};

// The cores the process may run on, as omp_get_num_procs reports them (a
// system call each time: the process's affinity mask), read at the first
// use and again by every set_num_threads, not by every kernel call.
std::atomic<int> g_cores{0};
int read_cores() {
  const int n = std::max(1, omp_get_num_procs());
  g_cores.store(n, std::memory_order_relaxed);
  return n;
}
}  // namespace

void set_num_threads(int n) {
  read_cores();
  g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed);
}

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  const int cores = g_cores.load(std::memory_order_relaxed);
  return cores > 0 ? cores : read_cores();
}

void set_stream_min_bytes(int64_t bytes) {
  g_stream_min_bytes.set(bytes);
}

int64_t stream_min_bytes() {
  return g_stream_min_bytes.get();
}

namespace detail {
int threads_for(int64_t work, int max_threads) {
  constexpr int64_t kGrain = 1 << 16;
  if (work < kGrain) return 1;
  return static_cast<int>(std::min<int64_t>(std::max(1, max_threads), work / kGrain));
}
int threads_for(int64_t work) {
  return threads_for(work, num_threads());
}
}  // namespace detail

}  // namespace tokpos
