#include "common/huge_pages.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tokpos::detail {
namespace {
bool huge_pages_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("TOKPOS_HUGE_PAGES");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return on;
}
}  // namespace

size_t advise_huge_pages(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p == nullptr || bytes < kHugePageMinBytes || !huge_pages_enabled()) return 0;
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end <= begin) return 0;
  void* start = reinterpret_cast<void*>(begin);
  const size_t len = end - begin;
  if (madvise(start, len, MADV_HUGEPAGE) != 0) return 0;
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; an older kernel answers EINVAL, which is ignored
#endif
  (void)madvise(start, len, MADV_COLLAPSE);
  return len;
#else
  (void)p;
  (void)bytes;
  return 0;
#endif
}

}  // namespace tokpos::detail
