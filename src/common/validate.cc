#include "common/validate.h"

namespace tokpos::detail {

void check_token_ids(const char* where, const int64_t* ids, int64_t B, int64_t T, int64_t V) {
  check_token_ids(where, [&](int64_t b, int64_t t) { return ids[b * T + t]; }, B, T, V);
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
  check_position_ids(where, [&](int64_t b, int64_t t) { return pos_ids[b * T + t]; }, B, T, limit, context);
}

}  // namespace tokpos::detail
