// Transparent huge pages for large tables the library owns.
#pragma once

#include <cstddef>

namespace tokpos::detail {

// Asks the kernel to back the 2 MiB-aligned interior of [p, p + bytes) with
// 2 MiB pages: madvise(MADV_HUGEPAGE) for pages faulted in later, then
// madvise(MADV_COLLAPSE) (Linux 6.1 and later) for pages already written, so
// a random row costs one TLB entry per 2 MiB instead of one per 4 KiB. Only
// for at least kHugePageMinBytes; TOKPOS_HUGE_PAGES=0 in the environment turns
// it off. Advice only: the contents are unchanged and every error (no THP, an
// older kernel, no memory to spare) is ignored. Returns the bytes advised.
inline constexpr size_t kHugePageMinBytes = size_t{8} << 20;
size_t advise_huge_pages(const void* p, size_t bytes);

}  // namespace tokpos::detail
