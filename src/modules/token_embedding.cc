#include "tokpos/token_embedding.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/check.h"
#include "common/validate.h"
#include "modules/linear.h"
#include "tokpos/ops.h"
#include "tokpos/random.h"

namespace tokpos {
namespace {

void check_policy(const char* where, const IdPolicy& policy, int64_t V) {
  if (policy.action == IdPolicy::Action::kMapToUnk && (policy.unk_id < 0 || policy.unk_id >= V)) {
    detail::fail(Status::kInvalidArgument, where, "unk_id ", policy.unk_id, " is outside [0, ", V, ")");
  }
}

// B, T >= 0 (a span's size is checked against B*T), and B*T.
int64_t batch_size(const char* where, int64_t B, int64_t T) {
  detail::check_at_least(where, "B", B, 0);
  detail::check_at_least(where, "T", T, 0);
  return detail::checked_mul(where, "B*T", B, T);
}

}  // namespace

TokenEmbedding::TokenEmbedding(TableStorage table, std::optional<int64_t> padding_idx, IdPolicy policy,
                               bool frozen)
    : table_(std::move(table)), padding_idx_(padding_idx), id_policy_(policy), frozen_(frozen) {}

TokenEmbedding::TokenEmbedding(const TokenEmbedding& o) = default;
TokenEmbedding& TokenEmbedding::operator=(const TokenEmbedding& o) = default;

// The moved-from module is left empty, not dangling: a 0 x 0 table (the
// storage's moved-from state) with no padding row and the error policy, so
// every call that reads the table fails with a size error (an id outside
// [0, V = 0), or a size that must be N*V = 0).
TokenEmbedding::TokenEmbedding(TokenEmbedding&& o) noexcept
    : table_(std::move(o.table_)),
      padding_idx_(std::exchange(o.padding_idx_, std::nullopt)),
      id_policy_(std::exchange(o.id_policy_, IdPolicy::error())),
      frozen_(o.frozen_) {}

TokenEmbedding& TokenEmbedding::operator=(TokenEmbedding&& o) noexcept {
  if (this == &o) return *this;
  table_ = std::move(o.table_);
  padding_idx_ = std::exchange(o.padding_idx_, std::nullopt);
  id_policy_ = std::exchange(o.id_policy_, IdPolicy::error());
  frozen_ = o.frozen_;
  return *this;
}

namespace {
// Validates the shape part of the options; returns V*D.
int64_t check_options(const char* where, const TokenEmbeddingOptions& o) {
  const int64_t n = TableStorage::check_shape(where, "vocab_size", o.vocab_size, o.dim);
  if (o.padding_idx && (*o.padding_idx < 0 || *o.padding_idx >= o.vocab_size)) {
    detail::fail(Status::kInvalidArgument, where, "padding_idx ", *o.padding_idx, " is outside [0, ",
                 o.vocab_size, ")");
  }
  check_policy(where, o.id_policy, o.vocab_size);
  return n;
}
}  // namespace

TokenEmbedding::TokenEmbedding(const TokenEmbeddingOptions& o) {
  constexpr const char* kWhere = "TokenEmbedding";
  const int64_t n = check_options(kWhere, o);
  detail::check_init_std(kWhere, o.init_std);
  auto table = detail::make_buffer<float>(kWhere, "token table", n);
  fill_normal(table, o.seed, kTokenTableStream, 0.0, o.init_std);
  if (o.padding_idx) {
    std::fill_n(table.begin() + *o.padding_idx * o.dim, o.dim, 0.0f);
  }
  *this = TokenEmbedding(TableStorage::owned(kWhere, o.vocab_size, o.dim, std::move(table)), o.padding_idx,
                         o.id_policy, false);
}

TokenEmbedding TokenEmbedding::from_pretrained(std::vector<float> table, const TokenEmbeddingOptions& o,
                                               bool frozen) {
  constexpr const char* kWhere = "TokenEmbedding::from_pretrained";
  check_options(kWhere, o);
  return TokenEmbedding(TableStorage::owned(kWhere, o.vocab_size, o.dim, std::move(table)), o.padding_idx,
                        o.id_policy, frozen);
}

TokenEmbedding TokenEmbedding::borrow(std::span<const float> table, const TokenEmbeddingOptions& o,
                                      bool frozen, std::shared_ptr<const void> keep_alive) {
  constexpr const char* kWhere = "TokenEmbedding::borrow";
  check_options(kWhere, o);
  return TokenEmbedding(TableStorage::borrowed(kWhere, table, o.vocab_size, o.dim, std::move(keep_alive)),
                        o.padding_idx, o.id_policy, frozen);
}

std::span<float> TokenEmbedding::mutable_table() {
  return table_.mutable_values("TokenEmbedding::mutable_table");
}

void TokenEmbedding::make_owned() { table_.make_owned("TokenEmbedding::make_owned", "token table"); }

void TokenEmbedding::adopt_table(std::vector<float>&& table) {
  table_.adopt("TokenEmbedding::adopt_table", std::move(table));
}

void TokenEmbedding::check_policy_for(const IdPolicy& policy, const char* where) const {
  check_policy(where, policy, vocab_size());
}

void TokenEmbedding::set_id_policy(const IdPolicy& policy) {
  check_policy("TokenEmbedding::set_id_policy", policy, vocab_size());
  id_policy_ = policy;
}

void TokenEmbedding::set_padding_idx(std::optional<int64_t> padding_idx) {
  if (padding_idx && (*padding_idx < 0 || *padding_idx >= vocab_size())) {
    detail::fail(Status::kInvalidArgument, "TokenEmbedding::set_padding_idx", "padding_idx ", *padding_idx,
                 " is outside [0, ", vocab_size(), ")");
  }
  padding_idx_ = padding_idx;
  // A borrowed table is read-only: the row is recorded (no gradient) but kept as given.
  if (padding_idx && !borrowed()) {
    std::fill_n(table_.mutable_values("TokenEmbedding::set_padding_idx").begin() + *padding_idx * dim(), dim(), 0.0f);
  }
}

std::span<float> TokenEmbedding::ensure_grad() { return table_.ensure_grad("TokenEmbedding"); }

void TokenEmbedding::adopt_grad(std::vector<float>&& grad) {
  table_.adopt_grad("TokenEmbedding::adopt_grad", std::move(grad));
}

void TokenEmbedding::zero_grad() { table_.zero_grad(); }

void TokenEmbedding::check_ids(std::span<const int64_t> ids, int64_t B, int64_t T,
                               std::optional<IdPolicy> policy, const char* where) const {
  detail::check_size(where, "ids", ids.size(), batch_size(where, B, T));
  const IdPolicy& p = policy ? *policy : id_policy_;
  check_policy(where, p, vocab_size());
  if (p.action == IdPolicy::Action::kError) detail::check_token_ids(where, ids.data(), B, T, vocab_size());
}

TensorView TokenEmbedding::table_view() const {
  return TensorView(table_.data(), DType::kF32, {vocab_size(), dim()});
}

// The spans become (B, T) and (B, T, D) views; the op checks the ids, the
// policy's unk_id, the overlaps, and runs the kernel.
void TokenEmbedding::forward(std::span<const int64_t> ids, int64_t B, int64_t T, std::span<float> out,
                             std::optional<IdPolicy> policy) const {
  constexpr const char* kWhere = "TokenEmbedding::forward";
  const int64_t D = dim();
  detail::check_size(kWhere, "ids", ids.size(), batch_size(kWhere, B, T));
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, D));
  ops::compose_forward(TensorView(out.data(), DType::kF32, {B, T, D}), TensorView(ids.data(), DType::kI64, {B, T}),
                       table_view(), nullptr, nullptr, 0, lookup_options(policy ? *policy : id_policy_, kWhere));
}

std::vector<float> TokenEmbedding::forward(std::span<const int64_t> ids, int64_t B, int64_t T,
                                           std::optional<IdPolicy> policy) const {
  constexpr const char* kWhere = "TokenEmbedding::forward";
  batch_size(kWhere, B, T);  // the writing overload checks the ids
  auto out = detail::make_buffer<float>(kWhere, "output", detail::checked_mul3(kWhere, "B*T*D", B, T, dim()));
  forward(ids, B, T, out, policy);
  return out;
}

// LookupOptions reads a negative unk_id as "no mapping", so a mapping policy
// with one is refused here; the op checks unk_id against V.
ops::LookupOptions TokenEmbedding::lookup_options(const IdPolicy& p, const char* where) const {
  const bool map = p.action == IdPolicy::Action::kMapToUnk;
  if (map && p.unk_id < 0) check_policy(where, p, vocab_size());
  return {.unk_id = map ? p.unk_id : -1, .padding_idx = padding_idx_.value_or(-1), .where = where};
}

ops::RowPlan TokenEmbedding::plan(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B, int64_t T,
                                  std::optional<IdPolicy> policy, const char* where,
                                  std::span<const int64_t> positions) const {
  detail::check_size(where, "ids", ids.size(), batch_size(where, B, T));
  detail::check_size(where, "d_out", d_out.size(), detail::checked_mul3(where, "B*T*D", B, T, dim()));
  const TensorView pos(positions.data(), DType::kI64, {B, T});
  return ops::RowPlan(TensorView(ids.data(), DType::kI64, {B, T}), vocab_size(),
                      positions.empty() ? nullptr : pos.get(), 0, lookup_options(policy ? *policy : id_policy_, where));
}

// A frozen table gets no gradient: the call checks what an unfrozen one
// would (the sizes, the policy, the ids) and fails the same way, but plans
// no rows (no sorted row list is built only to be dropped).
void TokenEmbedding::check_frozen_call(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B,
                                       int64_t T, std::optional<IdPolicy> policy, const char* where) const {
  detail::check_size(where, "ids", ids.size(), batch_size(where, B, T));
  detail::check_size(where, "d_out", d_out.size(), detail::checked_mul3(where, "B*T*D", B, T, dim()));
  check_ids(ids, B, T, policy, where);
}

std::vector<int64_t> TokenEmbedding::backward(std::span<const float> d_out, std::span<const int64_t> ids,
                                              int64_t B, int64_t T, std::optional<IdPolicy> policy) {
  constexpr const char* kWhere = "TokenEmbedding::backward";
  if (frozen_) {
    check_frozen_call(d_out, ids, B, T, policy, kWhere);
    return {};
  }
  const ops::RowPlan rows = plan(d_out, ids, B, T, policy, kWhere);
  const auto grad = ensure_grad();  // may throw; nothing has been written yet
  ops::compose_backward(TensorView(grad.data(), DType::kF32, {vocab_size(), dim()}).get(), nullptr,
                        TensorView(d_out.data(), DType::kF32, {B, T, dim()}), rows);
  return {rows.touched_rows().begin(), rows.touched_rows().end()};
}

TokenEmbedding::SparseGradient TokenEmbedding::sparse_backward(std::span<const float> d_out,
                                                               std::span<const int64_t> ids, int64_t B,
                                                               int64_t T,
                                                               std::optional<IdPolicy> policy) const {
  constexpr const char* kWhere = "TokenEmbedding::sparse_backward";
  if (frozen_) {
    check_frozen_call(d_out, ids, B, T, policy, kWhere);
    return {};
  }
  const ops::RowPlan rows = plan(d_out, ids, B, T, policy, kWhere);
  const int64_t U = static_cast<int64_t>(rows.touched_rows().size()), D = dim();
  SparseGradient out{{rows.touched_rows().begin(), rows.touched_rows().end()}, {}};
  out.values = detail::make_buffer<float>(kWhere, "sparse gradient", detail::checked_mul(kWhere, "U*D", U, D));
  ops::token_gradient_rows(TensorView(out.values.data(), DType::kF32, {U, D}),
                           TensorView(d_out.data(), DType::kF32, {B, T, D}), rows);
  return out;
}

void TokenEmbedding::logits(std::span<const float> h, int64_t N, std::span<float> out) const {
  constexpr const char* kWhere = "TokenEmbedding::logits";
  const int64_t V = vocab_size(), D = dim();
  detail::check_at_least(kWhere, "N", N, 0);
  detail::check_size(kWhere, "h", h.size(), detail::checked_mul(kWhere, "N*D", N, D));
  detail::check_size(kWhere, "logits", out.size(), detail::checked_mul(kWhere, "N*V", N, V));
  detail::check_disjoint(kWhere, "logits", out, "h", h);
  detail::check_disjoint(kWhere, "logits", out, "the table", table());
  detail::linear_nt(out.data(), h.data(), table_.data(), N, V, D);
}

std::vector<float> TokenEmbedding::logits(std::span<const float> h, int64_t N) const {
  constexpr const char* kWhere = "TokenEmbedding::logits";
  detail::check_at_least(kWhere, "N", N, 0);
  auto out = detail::make_buffer<float>(kWhere, "logits", detail::checked_mul(kWhere, "N*V", N, vocab_size()));
  logits(h, N, out);
  return out;
}

void TokenEmbedding::logits_backward(std::span<const float> d_logits, std::span<const float> h, int64_t N,
                                     std::span<float> d_h) {
  constexpr const char* kWhere = "TokenEmbedding::logits_backward";
  const int64_t V = vocab_size(), D = dim();
  detail::check_at_least(kWhere, "N", N, 0);
  detail::check_size(kWhere, "d_logits", d_logits.size(), detail::checked_mul(kWhere, "N*V", N, V));
  detail::check_size(kWhere, "h", h.size(), detail::checked_mul(kWhere, "N*D", N, D));
  if (!d_h.empty()) detail::check_size(kWhere, "d_h", d_h.size(), N * D);
  for (const auto& [name, in] : {std::pair{"d_logits", d_logits}, std::pair{"h", h}, std::pair{"the table", table()}}) {
    detail::check_disjoint(kWhere, "d_h", d_h, name, in);
    detail::check_disjoint(kWhere, "the gradient", grad(), name, in);
  }
  // A frozen table gets no gradient, but d_h still flows. padding_idx masks only
  // the lookup path: the output side touches every row, as in PyTorch.
  float* dW = frozen_ ? nullptr : ensure_grad().data();
  detail::linear_nt_backward(dW, d_h.empty() ? nullptr : d_h.data(), d_logits.data(), h.data(), table_.data(), N, V,
                             D);
}

}  // namespace tokpos
