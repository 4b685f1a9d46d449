// Private: the thread count every kernel uses, and the rule for when to thread.
#pragma once

#include <cstdint>

namespace tokpos::detail {

// Threads for a job of `work` float operations: 1 below a grain that
// amortises the cost of waking a team (65536 operations), else up to
// max_threads (or num_threads()), one per grain of work.
int threads_for(int64_t work, int max_threads);
int threads_for(int64_t work);

}  // namespace tokpos::detail
