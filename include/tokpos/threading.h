// tokpos/threading.h: how many threads the kernels use.
//
// Results never depend on this number: every kernel is deterministic and
// bitwise identical for any thread count (tests check 1, 2 and 7).
#pragma once

namespace tokpos {

// n >= 1: use n threads. n <= 0: use every core (the default, unless the
// environment variable TOKPOS_NUM_THREADS gives a count at start-up).
// One setting for the whole process; set it before starting work, not while
// other threads are calling tokpos.
void set_num_threads(int n);

// The count the next kernel call will use (>= 1).
int num_threads();

}  // namespace tokpos
