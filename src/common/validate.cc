#include "common/validate.h"

#include "common/check.h"

namespace tokpos::detail {

void check_token_ids(const char* where, const int64_t* ids, int64_t B, int64_t T, int64_t V) {
  const int64_t N = B * T;
  for (int64_t n = 0; n < N; ++n) {
    if (ids[n] < 0 || ids[n] >= V) {
      fail(Status::kIdOutOfRange, where, "token id ", ids[n], " at (b=", n / T, ", t=", n % T,
           ") is outside [0, ", V, ")");
    }
  }
}

void check_position_range(const char* where, int64_t B, int64_t T, int64_t start, int64_t L) {
  check_at_least(where, "start", start, 0);
  if (B == 0 || T == 0) return;
  if (start == 0 && T > L) {
    fail(Status::kPositionOutOfRange, where, "sequence length T = ", T, " exceeds max_context L = ", L);
  }
  if (start >= L || T > L - start) {
    fail(Status::kPositionOutOfRange, where, "positions start + T = ", start, " + ", T,
         " exceed max_context L = ", L, " (T = ", T, ", start = ", start, ")");
  }
}

void check_position_ids(const char* where, const int64_t* pos_ids, int64_t B, int64_t T, int64_t limit,
                        const std::string& context) {
  const int64_t N = B * T;
  for (int64_t n = 0; n < N; ++n) {
    if (pos_ids[n] < 0 || pos_ids[n] >= limit) {
      fail(Status::kPositionOutOfRange, where, "position id ", pos_ids[n], " at (b=", n / T, ", t=", n % T,
           ") is outside [0, ", limit, ")", context);
    }
  }
}

}  // namespace tokpos::detail
