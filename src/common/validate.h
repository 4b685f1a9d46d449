// Private: the input checks shared by the ops and the modules, so every front
// end reports the same errors in the same words. The index checks take an
// accessor at(b, t), so strided int32 and int64 views share them.
#pragma once

#include <cstdint>
#include <string>

#include "common/check.h"

namespace tokpos::detail {

// Every at(b, t) in [0, V), else Error(kIdOutOfRange):
//   "<where>: token id 50300 at (b=1, t=17) is outside [0, 50257)"
template <typename At>
void check_token_ids(const char* where, At&& at, int64_t B, int64_t T, int64_t V) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = at(b, t);
      if (id < 0 || id >= V)
        fail(Status::kIdOutOfRange, where, "token id ", id, " at (b=", b, ", t=", t, ") is outside [0, ", V, ")");
    }
}
void check_token_ids(const char* where, const int64_t* ids, int64_t B, int64_t T, int64_t V);

// Positions start .. start+T-1 inside a table of L rows, else
// Error(kPositionOutOfRange) naming T, start and L. Empty batches pass.
void check_position_range(const char* where, int64_t B, int64_t T, int64_t start, int64_t L);

// Every explicit position id in [0, limit), else Error(kPositionOutOfRange)
// naming it, its (b, t) and the limit, followed by `context`.
template <typename At>
void check_position_ids(const char* where, At&& at, int64_t B, int64_t T, int64_t limit,
                        const std::string& context) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = at(b, t);
      if (p < 0 || p >= limit)
        fail(Status::kPositionOutOfRange, where, "position id ", p, " at (b=", b, ", t=", t, ") is outside [0, ",
             limit, ")", context);
    }
}
void check_position_ids(const char* where, const int64_t* pos_ids, int64_t B, int64_t T, int64_t limit,
                        const std::string& context);

}  // namespace tokpos::detail
