// tokpos/threading.h: how the kernels run: how many threads, and when the
// forward streams its output past the cache.
//
// Results never depend on this number: every kernel is deterministic and
// bitwise identical for any thread count (tests check 1, 2 and 7).
#pragma once

#include <cstdint>

#include "tokpos/export.h"

namespace tokpos {

// n >= 1: use n threads. n <= 0: use every core the process may run on (the
// default, unless the environment variable TOKPOS_NUM_THREADS gives a count at
// start-up). That core count is read at the first use and again by each call
// of set_num_threads, so a process whose affinity changes calls it again.
// One setting for the whole process; set it before starting work, not while
// other threads are calling tokpos.
TOKPOS_API void set_num_threads(int n);

// The count the next kernel call will use (>= 1).
TOKPOS_API int num_threads();

// A forward whose output is at least this many bytes writes it with
// non-temporal (streaming) stores: each output line goes to memory without
// first being read, and without evicting the tables from the cache, which is
// what lets a large forward run at memory-copy speed. A smaller output is
// written through the cache, where the next layer finds it. The start-up value
// is TOKPOS_STREAM_MIN_BYTES from the environment, else half the last-level
// cache, at most 16 MiB; bytes < 0 goes back to it. 0 streams every output
// except a decode step's; INT64_MAX never streams. Results are the same bits either way.
TOKPOS_API void set_stream_min_bytes(int64_t bytes);
TOKPOS_API int64_t stream_min_bytes();

}  // namespace tokpos
