// Private: the input checks shared by the modules and the C API's raw-pointer
// entry points, so both report the same errors in the same words.
#pragma once

#include <cstdint>
#include <string>

namespace tokpos::detail {

// Every ids[b*T + t] in [0, V), else Error(kIdOutOfRange):
//   "<where>: token id 50300 at (b=1, t=17) is outside [0, 50257)"
void check_token_ids(const char* where, const int64_t* ids, int64_t B, int64_t T, int64_t V);

// Positions start .. start+T-1 inside a table of L rows, else
// Error(kPositionOutOfRange) naming T, start and L. Empty batches pass.
void check_position_range(const char* where, int64_t B, int64_t T, int64_t start, int64_t L);

// Every explicit position id in [0, limit), else Error(kPositionOutOfRange)
// naming it, its (b, t) and the limit, followed by `context`.
void check_position_ids(const char* where, const int64_t* pos_ids, int64_t B, int64_t T, int64_t limit,
                        const std::string& context);

}  // namespace tokpos::detail
