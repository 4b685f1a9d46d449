#include "kernels/cpu/decode_team.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <new>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_common.h"

namespace tokpos::kernels::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The word the workers wait on: a step counter in the high 24 bits and the
// step's thread count in the low 8, so that a worker the step does not use
// reads nothing else (the next step may be writing part and ctx already).
constexpr uint32_t kThreadBits = 8;
constexpr int kMaxThreads = (1 << kThreadBits) - 1;
constexpr int kYieldAfterSpins = 4096;  // the caller's wait for its workers, before it yields its core

struct Team {
  alignas(64) std::atomic<uint32_t> word{0};
  alignas(64) void (*part)(void*, int, int) = nullptr;  // read only by the step's workers
  void* ctx = nullptr;
  alignas(64) std::atomic<int> done{0};
  alignas(64) std::atomic<int> sleepers{0};
  std::atomic<bool> busy{false};
  int workers = 0;  // started so far (changed only by the caller holding busy)
  int cores = 1;    // the cores the process may run on, when the team was made
};

// Worker k (1, 2, ...): runs its part of every step that uses it.
void work(Team* t, int k, uint32_t seen) {
  for (;;) {
    uint32_t w = t->word.load(std::memory_order_acquire);
    int64_t until = steady_ns() + kDecodeTeamSpinNs;
    for (int64_t spins = 1; w == seen; ++spins) {
      cpu_relax();
      if (spins % 256 == 0 && steady_ns() > until) {
        t->sleepers.fetch_add(1, std::memory_order_seq_cst);
        t->word.wait(seen, std::memory_order_seq_cst);
        t->sleepers.fetch_sub(1, std::memory_order_relaxed);
        until = steady_ns() + kDecodeTeamSpinNs;
      }
      w = t->word.load(std::memory_order_acquire);
    }
    seen = w;
    const int nt = static_cast<int>(w & kMaxThreads);
    if (k >= nt) continue;
    t->part(t->ctx, k, nt);
    t->done.fetch_add(1, std::memory_order_release);
  }
}

std::atomic<Team*> g_team{nullptr};

// A child after fork() has none of the parent's workers: it makes its own
// team at its first split step (the parent's copy is left as it is).
void forget_team_in_child() {
  g_team.store(nullptr, std::memory_order_relaxed);
}

Team* team() {
  Team* t = g_team.load(std::memory_order_acquire);
  if (t != nullptr) return t;
  static const bool registered = pthread_atfork(nullptr, nullptr, forget_team_in_child) == 0;
  if (!registered) return nullptr;  // without it a child would wait for threads it does not have
  auto* fresh = new (std::nothrow) Team;
  if (fresh == nullptr) return nullptr;
  fresh->cores = std::max(1, omp_get_num_procs());
  if (g_team.compare_exchange_strong(t, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;  // another thread made it first
  return t;
}

// Starts workers until there are `want`; false if a thread cannot be started
// (those already started stay).
bool grow(Team& t, int want) {
  const uint32_t seen = t.word.load(std::memory_order_relaxed);
  while (t.workers < want) {
    try {
      std::thread worker(work, &t, t.workers + 1, seen);
      pthread_setname_np(worker.native_handle(), "tokpos-decode");
      worker.detach();
    } catch (const std::exception&) {  // std::system_error, or std::bad_alloc for its state
      return false;
    }
    ++t.workers;
  }
  return true;
}

}  // namespace

bool run_on_decode_team(int nt, void (*part)(void* ctx, int k, int nt), void* ctx) {
  if (nt < 2 || nt > kMaxThreads) return false;
  Team* t = team();
  if (t == nullptr || nt > t->cores) return false;  // spinning workers without a core each would wait for ticks
  bool free = false;
  if (!t->busy.compare_exchange_strong(free, true, std::memory_order_acquire)) return false;
  if (!grow(*t, nt - 1)) {
    t->busy.store(false, std::memory_order_release);
    return false;
  }
  t->part = part;
  t->ctx = ctx;
  t->done.store(0, std::memory_order_relaxed);
  const uint32_t step = (t->word.load(std::memory_order_relaxed) >> kThreadBits) + 1;
  t->word.store(step << kThreadBits | static_cast<uint32_t>(nt), std::memory_order_seq_cst);
  if (t->sleepers.load(std::memory_order_seq_cst) > 0) t->word.notify_all();
  part(ctx, 0, nt);
  for (int spins = 0; t->done.load(std::memory_order_acquire) < nt - 1; ++spins) {
    if (spins < kYieldAfterSpins) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a worker was preempted: let it have this core
    }
  }
  t->busy.store(false, std::memory_order_release);
  return true;
}

}  // namespace tokpos::kernels::cpu
