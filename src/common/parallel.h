// Private: the thread count every kernel uses, and the rule for when to thread.
#pragma once

#include <cstdint>

namespace tokpos::detail {

// Threads for a job of `work` float operations: 1 below a grain that
// amortises the cost of waking a team (~50k elements), else num_threads().
int threads_for(int64_t work);

}  // namespace tokpos::detail
