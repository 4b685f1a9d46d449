#include "tokpos/threading.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <new>
#include <string>
#include <thread>

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

// The cores the process may run on: its affinity mask (a system call each
// time, as taskset or a container's cpuset sets it), read at the first use and
// again by every set_num_threads, not by every kernel call. A mask too large
// to read falls back on the cores online.
int affinity_cores() {
  for (int cpus = 1024; cpus <= (1 << 16); cpus *= 4) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) break;
    const size_t size = CPU_ALLOC_SIZE(cpus);
    const bool ok = sched_getaffinity(0, size, set) == 0;
    const int n = ok ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (ok) return n;
    if (errno != EINVAL) break;
  }
  return static_cast<int>(std::thread::hardware_concurrency());
}
std::atomic<int> g_cores{0};
int read_cores() {
  const int n = std::max(1, affinity_cores());
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

namespace {

// The workers and the call they serve. A call is published under the mutex
// (its part, context, chunk count, thread count and a new generation); its
// chunks are then claimed through `claim`, which holds the generation in the
// high 32 bits and the next chunk in the low 32, so a worker still looking at
// an earlier call claims nothing of a later one. The caller waits on `done`
// (std::atomic::wait: libstdc++ tries a dozen pauses and four yields, then
// sleeps on a futex) until every chunk has returned; a chunk claimed by
// a worker keeps the call, and so its context, alive until it is done.
struct Pool {
  std::mutex m;
  std::condition_variable wake;
  uint32_t generation = 0;  // guarded by m, as are the call's fields below
  void (*part)(void*, int64_t, int) = nullptr;
  void* ctx = nullptr;
  int64_t chunks = 0;
  int threads = 0;
  alignas(64) std::atomic<uint64_t> claim{0};
  alignas(64) std::atomic<uint32_t> done{0};
  std::atomic<bool> busy{false};
  int workers = 0;  // started so far (changed only by the caller holding busy)
};

// Claims and runs chunks of call `generation` as `slot` until none is left.
void take_chunks(Pool& p, uint32_t generation, void (*part)(void*, int64_t, int), void* ctx, int64_t chunks,
                 int slot) {
  uint64_t c = p.claim.load(std::memory_order_acquire);
  while (static_cast<uint32_t>(c >> 32) == generation && static_cast<int64_t>(c & 0xffffffffu) < chunks) {
    if (!p.claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    part(ctx, static_cast<int64_t>(c & 0xffffffffu), slot);
    if (p.done.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(chunks)) p.done.notify_one();
    c = p.claim.load(std::memory_order_acquire);
  }
}

// Worker `slot` (1, 2, ...): sleeps until a call is published, helps with it
// if the call asked for that many threads, and sleeps again.
void work(Pool* p, int slot) {
  uint32_t seen = 0;
  {
    const std::lock_guard<std::mutex> lock(p->m);
    seen = p->generation;
  }
  for (;;) {
    std::unique_lock<std::mutex> lock(p->m);
    p->wake.wait(lock, [&] { return p->generation != seen; });
    seen = p->generation;
    auto* const part = p->part;
    void* const ctx = p->ctx;
    const int64_t chunks = p->chunks;
    const int threads = p->threads;
    lock.unlock();
    if (slot < threads) take_chunks(*p, seen, part, ctx, chunks, slot);
  }
}

std::atomic<Pool*> g_pool{nullptr};

// A child after fork() has none of the parent's workers (and perhaps a mutex
// a parent's thread held): it makes a pool of its own at its first call.
void forget_pool_in_child() {
  g_pool.store(nullptr, std::memory_order_relaxed);
}

Pool* pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  static const bool registered = pthread_atfork(nullptr, nullptr, forget_pool_in_child) == 0;
  if (!registered) return nullptr;  // without it a child would wait for threads it does not have
  auto* fresh = new (std::nothrow) Pool;
  if (fresh == nullptr) return nullptr;
  if (g_pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;  // another thread made it first
  return p;
}

// Starts workers until there are `want` (those that cannot be started are
// done without: the caller takes their chunks).
void grow(Pool& p, int want) {
  while (p.workers < want) {
    try {
      std::thread worker(work, &p, p.workers + 1);
      pthread_setname_np(worker.native_handle(), "tokpos-worker");
      worker.detach();
    } catch (const std::exception&) {  // std::system_error, or std::bad_alloc for its state
      return;
    }
    ++p.workers;
  }
}

constexpr int kMaxWorkers = 255;

}  // namespace

void run_chunks(int threads, int64_t chunks, void (*part)(void*, int64_t, int), void* ctx) {
  auto alone = [&] {
    for (int64_t c = 0; c < chunks; ++c) part(ctx, c, 0);
  };
  threads = static_cast<int>(std::min<int64_t>({threads, chunks, kMaxWorkers + 1}));
  if (threads < 2 || chunks > int64_t{0xffffffff}) return alone();
  Pool* p = pool();
  bool free = false;
  if (p == nullptr || !p->busy.compare_exchange_strong(free, true, std::memory_order_acquire)) return alone();
  grow(*p, threads - 1);
  uint32_t generation = 0;
  p->done.store(0, std::memory_order_relaxed);
  {
    const std::lock_guard<std::mutex> lock(p->m);
    generation = ++p->generation;
    p->part = part;
    p->ctx = ctx;
    p->chunks = chunks;
    p->threads = std::min(threads, p->workers + 1);
    p->claim.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);
  }
  p->wake.notify_all();
  take_chunks(*p, generation, part, ctx, chunks, 0);
  for (uint32_t d = p->done.load(std::memory_order_acquire); d < static_cast<uint32_t>(chunks);
       d = p->done.load(std::memory_order_acquire))
    p->done.wait(d, std::memory_order_acquire);
  p->busy.store(false, std::memory_order_release);
}

}  // namespace detail

}  // namespace tokpos
