#include "tokpos/positional.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/check.h"
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

namespace {
TableStorage position_storage(int64_t L, int64_t D, const char* what, std::optional<std::span<const float>> borrowed,
                              std::shared_ptr<const void> keep_alive) {
  TableStorage::check_shape(what, "max_context", L, D);
  if (!borrowed) return TableStorage::zeros(what, "position table", L, D);
  return TableStorage::borrowed(what, *borrowed, L, D, std::move(keep_alive));
}
}  // namespace

PositionalEmbedding::PositionalEmbedding(int64_t L, int64_t D, BeyondTable beyond, const char* what,
                                         std::optional<std::span<const float>> borrowed,
                                         std::shared_ptr<const void> keep_alive)
    : table_(position_storage(L, D, what, borrowed, std::move(keep_alive))), beyond_(beyond) {}

PositionalEmbedding::PositionalEmbedding(const PositionalEmbedding& o) = default;
PositionalEmbedding& PositionalEmbedding::operator=(const PositionalEmbedding& o) = default;

// The moved-from module is left empty, not dangling: a 0 x 0 table (the
// storage's moved-from state) under the error policy, so every call that
// reads a position fails with a size error (T > L = 0).
PositionalEmbedding::PositionalEmbedding(PositionalEmbedding&& o) noexcept
    : table_(std::move(o.table_)), beyond_(std::exchange(o.beyond_, BeyondTable::kError)) {}

PositionalEmbedding& PositionalEmbedding::operator=(PositionalEmbedding&& o) noexcept {
  if (this == &o) return *this;
  table_ = std::move(o.table_);
  beyond_ = std::exchange(o.beyond_, BeyondTable::kError);
  return *this;
}

int64_t PositionalEmbedding::position_limit() const {
  return max_context();
}

void PositionalEmbedding::check_positions(int64_t B, int64_t T, const PositionSpec& positions,
                                          const char* where) const {
  detail::check_at_least(where, "B", B, 0);
  detail::check_at_least(where, "T", T, 0);
  const int64_t L = max_context(), limit = position_limit();
  if (!positions.ids.empty()) {
    detail::check_size(where, "position_ids", positions.ids.size(), detail::checked_mul(where, "B*T", B, T));
    const std::string context =
        beyond_ == BeyondTable::kError
            ? detail::cat(" (max_context L = ", L, ")")
            : detail::cat(" under the ", beyond_table_name(beyond_), " policy (max_context L = ", L, ")");
    detail::check_position_ids(where, positions.ids.data(), B, T, limit, context);
    return;
  }
  if (beyond_ == BeyondTable::kError) return detail::check_position_range(where, B, T, positions.start, L);
  detail::check_at_least(where, "start", positions.start, 0);
  if (B > 0 && T > 0 && (positions.start >= limit || T > limit - positions.start)) {
    detail::fail(Status::kPositionOutOfRange, where, "positions start + T = ", positions.start, " + ", T,
                 " exceed ", limit, " under the ", beyond_table_name(beyond_), " policy (T = ", T,
                 ", max_context L = ", L, ")");
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
  return hi > max_context();
}

std::vector<float> PositionalEmbedding::rows_for(std::span<const int64_t> positions) const {
  // kClamp (and the in-table case): copies of rows min(p, L - 1).
  const int64_t L = max_context(), D = dim();
  auto out = detail::make_buffer<float>("PositionalEmbedding::rows_for", "rows",
                                        static_cast<int64_t>(positions.size()) * D);
  for (size_t r = 0; r < positions.size(); ++r) {
    const int64_t p = std::min(positions[r], L - 1);
    std::copy_n(table_.data() + p * D, D, out.begin() + static_cast<int64_t>(r) * D);
  }
  return out;
}

bool PositionalEmbedding::batch_needs_rows(int64_t T, const PositionSpec& positions) const {
  // The half-open range of positions the call reads: [start, start + T), or
  // the span of its explicit position ids (checked: no overflow).
  if (positions.ids.empty()) return needs_rows(positions.start, positions.start + T);
  const auto [mn, mx] = std::minmax_element(positions.ids.begin(), positions.ids.end());
  return needs_rows(*mn, *mx + 1);
}

PositionalEmbedding::BatchRows PositionalEmbedding::batch_rows(int64_t B, int64_t T, const PositionSpec& positions,
                                                               const char* where) const {
  check_positions(B, T, positions, where);
  BatchRows r;
  if (B == 0 || T == 0 || !batch_needs_rows(T, positions)) {  // the common case: rows straight from the table
    r.rows = table();
    r.ids = positions.ids;
    r.start = positions.start;
    return r;
  }
  // A policy computes some rows (extend, clamp, interpolate): just the rows
  // this call reads, never touching the table.
  if (positions.ids.empty()) {
    std::vector<int64_t> p(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) p[t] = positions.start + t;
    r.computed = rows_for(p);  // rows start .. start + T - 1, read as start 0
    r.rows = r.computed;
    return r;
  }
  // From one checked copy of the ids (the caller's may have changed since
  // the check above): rows_for indexes the table with them.
  const std::vector<int64_t> ids = resolve_positions(B, T, positions, where);
  std::vector<int64_t> unique(ids.begin(), ids.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  r.remapped.resize(ids.size());
  for (size_t n = 0; n < ids.size(); ++n) {
    r.remapped[n] = std::lower_bound(unique.begin(), unique.end(), ids[n]) - unique.begin();
  }
  r.computed = rows_for(unique);
  r.rows = r.computed;
  r.ids = r.remapped;
  return r;
}

// The rows the call reads, gathered by the compose op (a lookup of rows
// start + t, with no position table) into out.
void PositionalEmbedding::forward(std::span<float> out, int64_t T, int64_t start) const {
  constexpr const char* kWhere = "PositionalEmbedding::forward";
  const int64_t D = dim();
  const BatchRows rows = batch_rows(1, T, {.start = start}, kWhere);
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul(kWhere, "T*D", T, D));
  // A policy's rows are a copy, which the op checks out against: out must not
  // overlap the module's table either.
  if (!rows.computed.empty()) detail::check_disjoint(kWhere, "out", out, "the position table", table());
  auto ids = detail::make_buffer<int64_t>(kWhere, "position rows", T);
  for (int64_t t = 0; t < T; ++t) ids[t] = rows.start + t;
  const auto R = static_cast<int64_t>(rows.rows.size()) / std::max<int64_t>(D, 1);
  ops::compose_forward(TensorView(out.data(), DType::kF32, {T, D}), TensorView(ids.data(), DType::kI64, {T}),
                       TensorView(rows.rows.data(), DType::kF32, {R, D}), nullptr, nullptr, 0, {.where = kWhere});
}

std::vector<float> PositionalEmbedding::forward(int64_t T, int64_t start) const {
  constexpr const char* kWhere = "PositionalEmbedding::forward";
  detail::check_at_least(kWhere, "T", T, 0);  // the writing overload checks the positions
  auto out = detail::make_buffer<float>(kWhere, "output", detail::checked_mul(kWhere, "T*D", T, dim()));
  forward(out, T, start);
  return out;
}

// ---- learned ----------------------------------------------------------------

LearnedPositionalEmbedding::LearnedPositionalEmbedding(const LearnedPositionalOptions& o)
    : LearnedPositionalEmbedding(o, std::nullopt, {}, "LearnedPositionalEmbedding") {
  constexpr const char* kWhere = "LearnedPositionalEmbedding";
  detail::check_init_std(kWhere, o.init_std);
  fill_normal(table_.mutable_values(kWhere), o.seed, kPositionTableStream, 0.0, o.init_std);
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
  return table_.mutable_values("LearnedPositionalEmbedding::mutable_table");
}

int64_t LearnedPositionalEmbedding::position_limit() const {
  switch (beyond_) {
    case BeyondTable::kClamp: return std::numeric_limits<int64_t>::max();
    case BeyondTable::kInterpolate: return interpolate_to_;
    default: return max_context();
  }
}

void LearnedPositionalEmbedding::interpolation(int64_t p, int64_t* i0, int64_t* i1, double* w1) const {
  // p' = p (L - 1) / (L' - 1): position 0 stays at row 0, L' - 1 lands on row L - 1.
  const int64_t L = max_context();
  const double scaled = interpolate_to_ > 1 ? static_cast<double>(p) * static_cast<double>(L - 1) /
                                                  static_cast<double>(interpolate_to_ - 1)
                                            : 0.0;
  *i0 = std::min(static_cast<int64_t>(std::floor(scaled)), L - 1);
  *i1 = std::min(*i0 + 1, L - 1);
  *w1 = scaled - static_cast<double>(*i0);
}

bool LearnedPositionalEmbedding::needs_rows(int64_t lo, int64_t hi) const {
  if (beyond_ == BeyondTable::kInterpolate) return interpolate_to_ != max_context();
  return PositionalEmbedding::needs_rows(lo, hi);
}

std::vector<float> LearnedPositionalEmbedding::rows_for(std::span<const int64_t> positions) const {
  if (beyond_ != BeyondTable::kInterpolate) return PositionalEmbedding::rows_for(positions);
  const int64_t D = dim();
  auto out = detail::make_buffer<float>("LearnedPositionalEmbedding::rows_for", "rows",
                                        static_cast<int64_t>(positions.size()) * D);
  const float* t = table_.data();
  for (size_t r = 0; r < positions.size(); ++r) {
    int64_t i0, i1;
    double w1;
    interpolation(positions[r], &i0, &i1, &w1);
    for (int64_t d = 0; d < D; ++d) {
      out[r * D + d] = static_cast<float>((1.0 - w1) * t[i0 * D + d] + w1 * t[i1 * D + d]);
    }
  }
  return out;
}

std::span<float> LearnedPositionalEmbedding::ensure_grad() {
  return table_.ensure_grad("LearnedPositionalEmbedding");
}

void LearnedPositionalEmbedding::adopt_grad(std::vector<float>&& grad) {
  table_.adopt_grad("LearnedPositionalEmbedding::adopt_grad", std::move(grad));
}

void LearnedPositionalEmbedding::zero_grad() {
  table_.zero_grad();
}

void LearnedPositionalEmbedding::backward(std::span<const float> d_out, int64_t B, int64_t T,
                                          const PositionSpec& positions) {
  constexpr const char* kWhere = "LearnedPositionalEmbedding::backward";
  const int64_t L = max_context(), D = dim();
  const bool interpolating = beyond_ == BeyondTable::kInterpolate && interpolate_to_ != L;
  auto rows = interpolating ? resolve_positions(B, T, positions, kWhere) : gradient_rows(B, T, positions, kWhere);
  detail::check_size(kWhere, "d_out", d_out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, D));
  detail::check_disjoint(kWhere, "d_out", d_out, "the position gradient", grad());
  const std::span<float> g = ensure_grad();
  if (!interpolating) {
    // The rows are the positions: the op's position gradient alone.
    const TensorView r(rows.data(), DType::kI64, {B, T});
    ops::compose_backward(nullptr, TensorView(g.data(), DType::kF32, {L, D}).get(),
                          TensorView(d_out.data(), DType::kF32, {B, T, D}), r, r.get(), 0, {.where = kWhere});
    return;
  }
  // Each position feeds two rows with weights (1 - w1, w1). One pass in
  // (b, t) order, single-threaded: deterministic for any thread count.
  for (int64_t n = 0; n < B * T; ++n) {
    int64_t i0, i1;
    double w1;
    interpolation(rows[n], &i0, &i1, &w1);
    const float a = static_cast<float>(1.0 - w1), b = static_cast<float>(w1);
    for (int64_t d = 0; d < D; ++d) {
      g[i0 * D + d] += a * d_out[n * D + d];
      g[i1 * D + d] += b * d_out[n * D + d];
    }
  }
}

std::vector<int64_t> LearnedPositionalEmbedding::gradient_rows(int64_t B, int64_t T,
                                                               const PositionSpec& positions,
                                                               const char* where) const {
  const int64_t L = max_context();
  if (beyond_ == BeyondTable::kInterpolate && interpolate_to_ != L) return {};
  auto rows = resolve_positions(B, T, positions, where);
  for (auto& r : rows) r = std::min(r, L - 1);  // kClamp; under kError every row is < L already
  return rows;
}

// ---- sinusoidal -------------------------------------------------------------

SinusoidalPositionalEmbedding::SinusoidalPositionalEmbedding(const SinusoidalOptions& o)
    : PositionalEmbedding(o.max_context, o.dim, o.beyond, "SinusoidalPositionalEmbedding"),
      options_{.layout = o.layout,
               .base = o.base,
               .min_timescale = o.min_timescale,
               .padding_idx = o.padding_idx} {
  constexpr const char* kWhere = "SinusoidalPositionalEmbedding";
  if (o.beyond == BeyondTable::kClamp || o.beyond == BeyondTable::kInterpolate) {
    detail::fail(Status::kInvalidArgument, kWhere, "the ", beyond_table_name(o.beyond),
                 " policy is for learned tables; a sinusoidal table supports error or extend");
  }
  position_table(table_.mutable_values(kWhere).data(), DType::kF32, max_context(), dim(), 0, options_);
}

int64_t SinusoidalPositionalEmbedding::position_limit() const {
  return beyond_ == BeyondTable::kExtend ? int64_t{1} << 52 : max_context();  // exact tables reach far past 2^32
}

std::vector<float> SinusoidalPositionalEmbedding::rows_for(std::span<const int64_t> positions) const {
  // Each row straight from the exact generator: the same bits a larger table would hold.
  const int64_t L = max_context(), D = dim();
  auto out = detail::make_buffer<float>("SinusoidalPositionalEmbedding::rows_for", "rows",
                                        static_cast<int64_t>(positions.size()) * D);
  for (size_t r = 0; r < positions.size(); ++r) {
    if (positions[r] < L) {
      std::copy_n(table_.data() + positions[r] * D, D, out.begin() + static_cast<int64_t>(r) * D);
    } else {
      position_table(out.data() + r * D, DType::kF32, 1, D, positions[r], options_);
    }
  }
  return out;
}

SinusoidalPositionalEmbedding SinusoidalPositionalEmbedding::extended(int64_t L) const {
  return SinusoidalPositionalEmbedding({.max_context = L,
                                        .dim = dim(),
                                        .base = options_.base,
                                        .layout = options_.layout,
                                        .min_timescale = options_.min_timescale,
                                        .padding_idx = options_.padding_idx,
                                        .beyond = beyond_});
}

}  // namespace tokpos
