#include "tokpos/positional.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/validate.h"
#include "kernels/kernels.h"
#include "tokpos/random.h"

namespace tokpos {

PositionalEmbedding::PositionalEmbedding(int64_t L, int64_t D, const char* what) : L_(L), D_(D) {
  detail::check_at_least(what, "max_context", L, 1);
  detail::check_at_least(what, "dim", D, 1);
  table_ =
      detail::make_buffer<float>(what, "position table", detail::checked_mul(what, "max_context*dim", L, D));
}

void PositionalEmbedding::check_positions(int64_t B, int64_t T, const PositionSpec& positions,
                                          const char* where) const {
  detail::check_at_least(where, "B", B, 0);
  detail::check_at_least(where, "T", T, 0);
  if (!positions.ids.empty()) {
    detail::check_size(where, "position_ids", positions.ids.size(), detail::checked_mul(where, "B*T", B, T));
    detail::check_position_ids(where, positions.ids.data(), B, T, L_);
    return;
  }
  detail::check_position_range(where, B, T, positions.start, L_);
}

std::vector<int64_t> PositionalEmbedding::resolve_positions(int64_t B, int64_t T,
                                                            const PositionSpec& positions,
                                                            const char* where) const {
  check_positions(B, T, positions, where);
  if (!positions.ids.empty()) return {positions.ids.begin(), positions.ids.end()};
  auto rows = detail::make_buffer<int64_t>(where, "position rows", B * T);
  for (int64_t n = 0; n < B * T; ++n) rows[n] = positions.start + n % T;
  return rows;
}

void PositionalEmbedding::forward(std::span<float> out, int64_t T, int64_t start) const {
  constexpr const char* kWhere = "PositionalEmbedding::forward";
  check_positions(1, T, {.start = start}, kWhere);
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul(kWhere, "T*D", T, D_));
  if (T == 0) return;
  std::copy_n(table_.begin() + start * D_, T * D_, out.begin());
}

std::vector<float> PositionalEmbedding::forward(int64_t T, int64_t start) const {
  constexpr const char* kWhere = "PositionalEmbedding::forward";
  check_positions(1, T, {.start = start}, kWhere);
  auto out = detail::make_buffer<float>(kWhere, "output", T * D_);
  forward(out, T, start);
  return out;
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(const LearnedPositionalOptions& o)
    : PositionalEmbedding(o.max_context, o.dim, "LearnedPositionalEmbedding") {
  if (!(o.init_std >= 0.0) || !std::isfinite(o.init_std)) {
    detail::fail(Status::kInvalidArgument, "LearnedPositionalEmbedding", "init_std = ", o.init_std,
                 " must be finite and >= 0");
  }
  fill_normal(table_, o.seed, kPositionTableStream, 0.0, o.init_std);
}

std::span<float> LearnedPositionalEmbedding::ensure_grad() {
  if (grad_.empty()) {
    grad_ = detail::make_buffer<float>("LearnedPositionalEmbedding", "gradient", L_ * D_);
  }
  return grad_;
}

void LearnedPositionalEmbedding::zero_grad() {
  std::fill(grad_.begin(), grad_.end(), 0.0f);
}

void LearnedPositionalEmbedding::backward(std::span<const float> d_out, int64_t B, int64_t T,
                                          const PositionSpec& positions) {
  constexpr const char* kWhere = "LearnedPositionalEmbedding::backward";
  const auto rows = resolve_positions(B, T, positions, kWhere);
  detail::check_size(kWhere, "d_out", d_out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, D_));
  ensure_grad();
  kernels::active_kernels().index_add_rows(grad_.data(), d_out.data(), rows.data(), B * T, L_, D_);
}

SinusoidalPositionalEmbedding::SinusoidalPositionalEmbedding(const SinusoidalOptions& o)
    : PositionalEmbedding(o.max_context, o.dim, "SinusoidalPositionalEmbedding"), base_(o.base) {
  sinusoidal_table(table_, L_, D_, base_);
}

}  // namespace tokpos
