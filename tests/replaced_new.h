// A replaced global operator new/delete for the suites that count or fail
// allocations. Include it in exactly one translation unit of a test program.
//   g_allocations: every allocation, counted (all threads).
//   t_fail_at / t_count / t_min_bytes: on this thread, once t_fail_at > 0,
//   the t_fail_at-th allocation of at least t_min_bytes throws std::bad_alloc
//   (t_count counts them; 0 turns it off), to run a call out of memory at
//   each of its allocations in turn.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace tokpos::testing {
inline std::atomic<long> g_allocations{0};
inline thread_local long t_fail_at = 0;  // the allocation to fail, counting from 1; 0: off
inline thread_local long t_count = 0;
inline thread_local std::size_t t_min_bytes = 0;
}  // namespace tokpos::testing

// Replacing the global operator new/delete with malloc/free is the standard
// way to count allocations; GCC's heuristic misreads the pair as mismatched.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  using namespace tokpos::testing;
  ++g_allocations;
  if (t_fail_at > 0 && n >= t_min_bytes && ++t_count == t_fail_at) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow forms are replaced too (std::stable_sort's temporary buffer uses
// them): a sanitizer's own nothrow new paired with the free() below would be
// an allocation/deallocation mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
