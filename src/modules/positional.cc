#include "tokpos/positional.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"
#include "common/huge_pages.h"
#include "common/validate.h"
#include "tokpos/ops.h"
#include "tokpos/random.h"

namespace tokpos {

const char* beyond_table_name(BeyondTable policy) {
  switch (policy) {
    case BeyondTable::kError: return "error";
    case BeyondTable::kExtend: return "extend";
    case BeyondTable::kClamp: return "clamp";
    case BeyondTable::kInterpolate: return "interpolate";
  }
  return "unknown";
}

PositionalEmbedding::PositionalEmbedding(int64_t L, int64_t D, BeyondTable beyond, const char* what,
                                         std::optional<std::span<const float>> borrowed,
                                         std::shared_ptr<const void> keep_alive)
    : L_(L), D_(D), beyond_(beyond) {
  detail::check_at_least(what, "max_context", L, 1);
  detail::check_at_least(what, "dim", D, 1);
  const int64_t n = detail::checked_mul(what, "max_context*dim", L, D);
  if (!borrowed) {
    owned_ = detail::make_buffer<float>(what, "position table", n);
    data_ = owned_.data();
    detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));  // large (L, D) tables: 2 MiB pages
    return;
  }
  detail::check_size(what, "table", borrowed->size(), n);
  detail::check_not_null(what, "table", borrowed->data());
  data_ = borrowed->data();
  keep_alive_ = std::move(keep_alive);
  borrowed_ = true;
}

// An owning copy points at its own buffer; a borrowing one at the same memory.
PositionalEmbedding::PositionalEmbedding(const PositionalEmbedding& o)
    : L_(o.L_),
      D_(o.D_),
      beyond_(o.beyond_),
      owned_(o.owned_),
      data_(o.borrowed_ ? o.data_ : owned_.data()),
      keep_alive_(o.keep_alive_),
      borrowed_(o.borrowed_) {
  if (!borrowed_) detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
}

PositionalEmbedding::PositionalEmbedding(PositionalEmbedding&& o) noexcept
    : L_(o.L_),
      D_(o.D_),
      beyond_(o.beyond_),
      owned_(std::move(o.owned_)),
      data_(o.borrowed_ ? o.data_ : owned_.data()),
      keep_alive_(std::move(o.keep_alive_)),
      borrowed_(o.borrowed_) {
  o.clear_moved_from();
}

PositionalEmbedding& PositionalEmbedding::operator=(const PositionalEmbedding& o) {
  if (this == &o) return *this;
  std::vector<float> copy = o.owned_;  // may throw: nothing has changed yet
  L_ = o.L_;
  D_ = o.D_;
  beyond_ = o.beyond_;
  owned_ = std::move(copy);
  borrowed_ = o.borrowed_;
  data_ = borrowed_ ? o.data_ : owned_.data();
  keep_alive_ = o.keep_alive_;
  if (!borrowed_) detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
  return *this;
}

PositionalEmbedding& PositionalEmbedding::operator=(PositionalEmbedding&& o) noexcept {
  if (this == &o) return *this;
  L_ = o.L_;
  D_ = o.D_;
  beyond_ = o.beyond_;
  owned_ = std::move(o.owned_);
  borrowed_ = o.borrowed_;
  data_ = borrowed_ ? o.data_ : owned_.data();
  keep_alive_ = std::move(o.keep_alive_);
  o.clear_moved_from();
  return *this;
}

// The moved-from module is left empty, not dangling: a 0 x 0 table under the
// error policy, so every call that reads a position fails with a size error
// (T > L = 0) instead of reading through a stale size.
void PositionalEmbedding::clear_moved_from() noexcept {
  owned_.clear();
  data_ = owned_.data();
  keep_alive_.reset();
  borrowed_ = false;
  L_ = 0;
  D_ = 0;
  beyond_ = BeyondTable::kError;
}

std::span<float> PositionalEmbedding::owned_table(const char* what) {
  if (borrowed_) {
    detail::fail(Status::kInvalidArgument, what,
                 "the table is borrowed (read-only); call make_owned() for a writable copy");
  }
  return owned_;
}

void PositionalEmbedding::own_table() {
  if (!borrowed_) return;
  auto copy = detail::make_buffer<float>("PositionalEmbedding::make_owned", "position table", L_ * D_);
  std::copy_n(data_, L_ * D_, copy.begin());
  owned_ = std::move(copy);
  data_ = owned_.data();
  detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
  keep_alive_.reset();
  borrowed_ = false;
}

void PositionalEmbedding::adopt_owned_table(std::vector<float>&& table, const char* what) {
  detail::check_size(what, "table", table.size(), L_ * D_);
  owned_ = std::move(table);
  data_ = owned_.data();
  detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
  keep_alive_.reset();
  borrowed_ = false;
}

int64_t PositionalEmbedding::position_limit() const {
  return L_;
}

void PositionalEmbedding::check_positions(int64_t B, int64_t T, const PositionSpec& positions,
                                          const char* where) const {
  detail::check_at_least(where, "B", B, 0);
  detail::check_at_least(where, "T", T, 0);
  const int64_t limit = position_limit();
  if (!positions.ids.empty()) {
    detail::check_size(where, "position_ids", positions.ids.size(), detail::checked_mul(where, "B*T", B, T));
    const std::string context =
        beyond_ == BeyondTable::kError
            ? detail::cat(" (max_context L = ", L_, ")")
            : detail::cat(" under the ", beyond_table_name(beyond_), " policy (max_context L = ", L_, ")");
    detail::check_position_ids(where, positions.ids.data(), B, T, limit, context);
    return;
  }
  if (beyond_ == BeyondTable::kError) return detail::check_position_range(where, B, T, positions.start, L_);
  detail::check_at_least(where, "start", positions.start, 0);
  if (B > 0 && T > 0 && (positions.start >= limit || T > limit - positions.start)) {
    detail::fail(Status::kPositionOutOfRange, where, "positions start + T = ", positions.start, " + ", T,
                 " exceed ", limit, " under the ", beyond_table_name(beyond_), " policy (T = ", T,
                 ", max_context L = ", L_, ")");
  }
}

std::vector<int64_t> PositionalEmbedding::resolve_positions(int64_t B, int64_t T,
                                                            const PositionSpec& positions,
                                                            const char* where) const {
  if (!positions.ids.empty()) {
    // One copy of the caller's ids, checked and then used: another thread
    // changing them meanwhile cannot slip an unchecked position into the rows.
    const auto n = static_cast<int64_t>(positions.ids.size());
    auto rows = detail::make_buffer<int64_t>(where, "position rows", n);
    std::copy(positions.ids.begin(), positions.ids.end(), rows.begin());
    check_positions(B, T, {.start = positions.start, .ids = rows}, where);
    return rows;
  }
  check_positions(B, T, positions, where);
  auto rows = detail::make_buffer<int64_t>(where, "position rows", B * T);
  for (int64_t n = 0; n < B * T; ++n) rows[n] = positions.start + n % T;
  return rows;
}

bool PositionalEmbedding::needs_rows(int64_t /*lo*/, int64_t hi) const {
  return hi > L_;
}

std::vector<float> PositionalEmbedding::rows_for(std::span<const int64_t> positions) const {
  // kClamp (and the in-table case): copies of rows min(p, L - 1).
  auto out = detail::make_buffer<float>("PositionalEmbedding::rows_for", "rows",
                                        static_cast<int64_t>(positions.size()) * D_);
  for (size_t r = 0; r < positions.size(); ++r) {
    const int64_t p = std::min(positions[r], L_ - 1);
    std::copy_n(data_ + p * D_, D_, out.begin() + static_cast<int64_t>(r) * D_);
  }
  return out;
}

void PositionalEmbedding::forward(std::span<float> out, int64_t T, int64_t start) const {
  constexpr const char* kWhere = "PositionalEmbedding::forward";
  check_positions(1, T, {.start = start}, kWhere);
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul(kWhere, "T*D", T, D_));
  detail::check_disjoint(kWhere, "out", out, "the position table", table());
  if (T == 0) return;
  if (!needs_rows(start, start + T)) {
    std::copy_n(data_ + start * D_, T * D_, out.begin());
    return;
  }
  std::vector<int64_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[t] = start + t;
  const auto rows = rows_for(positions);
  std::copy(rows.begin(), rows.end(), out.begin());
}

std::vector<float> PositionalEmbedding::forward(int64_t T, int64_t start) const {
  constexpr const char* kWhere = "PositionalEmbedding::forward";
  detail::check_at_least(kWhere, "T", T, 0);  // the writing overload checks the positions
  auto out = detail::make_buffer<float>(kWhere, "output", detail::checked_mul(kWhere, "T*D", T, D_));
  forward(out, T, start);
  return out;
}

// ---- learned ----------------------------------------------------------------

LearnedPositionalEmbedding::LearnedPositionalEmbedding(const LearnedPositionalOptions& o)
    : LearnedPositionalEmbedding(o, std::nullopt, {}, "LearnedPositionalEmbedding") {
  constexpr const char* kWhere = "LearnedPositionalEmbedding";
  detail::check_init_std(kWhere, o.init_std);
  fill_normal(owned_table(kWhere), o.seed, kPositionTableStream, 0.0, o.init_std);
}

LearnedPositionalEmbedding LearnedPositionalEmbedding::borrow(std::span<const float> table,
                                                              const LearnedPositionalOptions& o,
                                                              std::shared_ptr<const void> keep_alive) {
  return LearnedPositionalEmbedding(o, table, std::move(keep_alive), "LearnedPositionalEmbedding::borrow");
}

// The shared checks; without `borrowed`, an owned, zeroed table for the caller to fill.
LearnedPositionalEmbedding::LearnedPositionalEmbedding(const LearnedPositionalOptions& o,
                                                       std::optional<std::span<const float>> borrowed,
                                                       std::shared_ptr<const void> keep_alive,
                                                       const char* kWhere)
    : PositionalEmbedding(o.max_context, o.dim, o.beyond, kWhere, borrowed, std::move(keep_alive)),
      interpolate_to_(o.interpolate_to) {
  if (o.beyond == BeyondTable::kExtend) {
    detail::fail(Status::kInvalidArgument, kWhere,
                 "the extend policy needs a formula; a learned table supports error, clamp or interpolate");
  }
  if (o.beyond == BeyondTable::kInterpolate && o.interpolate_to < o.max_context) {
    detail::fail(Status::kInvalidArgument, kWhere, "interpolate_to = ", o.interpolate_to,
                 " must be >= max_context L = ", o.max_context, " for the interpolate policy");
  }
}

std::span<float> LearnedPositionalEmbedding::mutable_table() {
  return owned_table("LearnedPositionalEmbedding::mutable_table");
}

int64_t LearnedPositionalEmbedding::position_limit() const {
  switch (beyond_) {
    case BeyondTable::kClamp: return std::numeric_limits<int64_t>::max();
    case BeyondTable::kInterpolate: return interpolate_to_;
    default: return L_;
  }
}

void LearnedPositionalEmbedding::interpolation(int64_t p, int64_t* i0, int64_t* i1, double* w1) const {
  // p' = p (L - 1) / (L' - 1): position 0 stays at row 0, L' - 1 lands on row L - 1.
  const double scaled = interpolate_to_ > 1 ? static_cast<double>(p) * static_cast<double>(L_ - 1) /
                                                  static_cast<double>(interpolate_to_ - 1)
                                            : 0.0;
  *i0 = std::min(static_cast<int64_t>(std::floor(scaled)), L_ - 1);
  *i1 = std::min(*i0 + 1, L_ - 1);
  *w1 = scaled - static_cast<double>(*i0);
}

bool LearnedPositionalEmbedding::needs_rows(int64_t lo, int64_t hi) const {
  if (beyond_ == BeyondTable::kInterpolate) return interpolate_to_ != L_;
  return PositionalEmbedding::needs_rows(lo, hi);
}

std::vector<float> LearnedPositionalEmbedding::rows_for(std::span<const int64_t> positions) const {
  if (beyond_ != BeyondTable::kInterpolate) return PositionalEmbedding::rows_for(positions);
  auto out = detail::make_buffer<float>("LearnedPositionalEmbedding::rows_for", "rows",
                                        static_cast<int64_t>(positions.size()) * D_);
  const float* t = table().data();
  for (size_t r = 0; r < positions.size(); ++r) {
    int64_t i0, i1;
    double w1;
    interpolation(positions[r], &i0, &i1, &w1);
    for (int64_t d = 0; d < D_; ++d) {
      out[r * D_ + d] = static_cast<float>((1.0 - w1) * t[i0 * D_ + d] + w1 * t[i1 * D_ + d]);
    }
  }
  return out;
}

std::span<float> LearnedPositionalEmbedding::ensure_grad() {
  if (grad_.empty()) grad_ = detail::make_buffer<float>("LearnedPositionalEmbedding", "gradient", L_ * D_);
  return grad_;
}

void LearnedPositionalEmbedding::adopt_grad(std::vector<float>&& grad) {
  detail::check_size("LearnedPositionalEmbedding::adopt_grad", "gradient", grad.size(), L_ * D_);
  grad_ = std::move(grad);
}

void LearnedPositionalEmbedding::zero_grad() {
  std::fill(grad_.begin(), grad_.end(), 0.0f);
}

void LearnedPositionalEmbedding::backward(std::span<const float> d_out, int64_t B, int64_t T,
                                          const PositionSpec& positions) {
  constexpr const char* kWhere = "LearnedPositionalEmbedding::backward";
  const bool interpolating = beyond_ == BeyondTable::kInterpolate && interpolate_to_ != L_;
  auto rows = interpolating ? resolve_positions(B, T, positions, kWhere) : gradient_rows(B, T, positions, kWhere);
  detail::check_size(kWhere, "d_out", d_out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, D_));
  detail::check_disjoint(kWhere, "d_out", d_out, "the position gradient", std::span<const float>(grad_));
  ensure_grad();
  if (!interpolating) {
    // The rows are the positions: the op's position gradient alone.
    const TensorView r(rows.data(), DType::kI64, {B, T});
    ops::compose_backward(nullptr, TensorView(grad_.data(), DType::kF32, {L_, D_}).get(),
                          TensorView(d_out.data(), DType::kF32, {B, T, D_}), r, r.get(), 0, {.where = kWhere});
    return;
  }
  // Each position feeds two rows with weights (1 - w1, w1). One pass in
  // (b, t) order, single-threaded: deterministic for any thread count.
  for (int64_t n = 0; n < B * T; ++n) {
    int64_t i0, i1;
    double w1;
    interpolation(rows[n], &i0, &i1, &w1);
    const float a = static_cast<float>(1.0 - w1), b = static_cast<float>(w1);
    for (int64_t d = 0; d < D_; ++d) {
      grad_[i0 * D_ + d] += a * d_out[n * D_ + d];
      grad_[i1 * D_ + d] += b * d_out[n * D_ + d];
    }
  }
}

std::vector<int64_t> LearnedPositionalEmbedding::gradient_rows(int64_t B, int64_t T,
                                                               const PositionSpec& positions,
                                                               const char* where) const {
  if (beyond_ == BeyondTable::kInterpolate && interpolate_to_ != L_) return {};
  auto rows = resolve_positions(B, T, positions, where);
  for (auto& r : rows) r = std::min(r, L_ - 1);  // kClamp; under kError every row is < L already
  return rows;
}

// ---- sinusoidal -------------------------------------------------------------

SinusoidalPositionalEmbedding::SinusoidalPositionalEmbedding(const SinusoidalOptions& o)
    : PositionalEmbedding(o.max_context, o.dim, o.beyond, "SinusoidalPositionalEmbedding"),
      options_{.layout = o.layout,
               .base = o.base,
               .min_timescale = o.min_timescale,
               .padding_idx = o.padding_idx} {
  if (o.beyond == BeyondTable::kClamp || o.beyond == BeyondTable::kInterpolate) {
    detail::fail(Status::kInvalidArgument, "SinusoidalPositionalEmbedding", "the ",
                 beyond_table_name(o.beyond),
                 " policy is for learned tables; a sinusoidal table supports error or extend");
  }
  if (o.layout == Layout::kInterleaved) {
    // Checks base with the seed-facing message.
    sinusoidal_table(owned_table("SinusoidalPositionalEmbedding"), L_, D_, o.base);
  } else {
    position_table(owned_table("SinusoidalPositionalEmbedding").data(), DType::kF32, L_, D_, 0, options_);
  }
}

int64_t SinusoidalPositionalEmbedding::position_limit() const {
  return beyond_ == BeyondTable::kExtend ? int64_t{1} << 52 : L_;  // exact tables reach far past 2^32
}

std::vector<float> SinusoidalPositionalEmbedding::rows_for(std::span<const int64_t> positions) const {
  // Each row straight from the exact generator: the same bits a larger table would hold.
  auto out = detail::make_buffer<float>("SinusoidalPositionalEmbedding::rows_for", "rows",
                                        static_cast<int64_t>(positions.size()) * D_);
  for (size_t r = 0; r < positions.size(); ++r) {
    if (positions[r] < L_) {
      std::copy_n(table().begin() + positions[r] * D_, D_, out.begin() + static_cast<int64_t>(r) * D_);
    } else {
      position_table(out.data() + r * D_, DType::kF32, 1, D_, positions[r], options_);
    }
  }
  return out;
}

SinusoidalPositionalEmbedding SinusoidalPositionalEmbedding::extended(int64_t L) const {
  return SinusoidalPositionalEmbedding({.max_context = L,
                                        .dim = D_,
                                        .base = options_.base,
                                        .layout = options_.layout,
                                        .min_timescale = options_.min_timescale,
                                        .padding_idx = options_.padding_idx,
                                        .beyond = beyond_});
}

}  // namespace tokpos
