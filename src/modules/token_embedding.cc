#include "tokpos/token_embedding.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/huge_pages.h"
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

void check_batch(const char* where, int64_t B, int64_t T) {
  detail::check_at_least(where, "B", B, 0);
  detail::check_at_least(where, "T", T, 0);
}

}  // namespace

TokenEmbedding::TokenEmbedding(int64_t V, int64_t D, std::vector<float> table,
                               std::optional<int64_t> padding_idx, IdPolicy policy, bool frozen)
    : V_(V),
      D_(D),
      owned_(std::move(table)),
      data_(owned_.data()),
      padding_idx_(padding_idx),
      id_policy_(policy),
      frozen_(frozen) {
  // The forward reads random rows of the table: 2 MiB pages spare it a TLB
  // miss for nearly every row (docs/benchmarks.md, "Huge pages").
  detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
}

// An owning copy points at its own buffer; a borrowing one at the same memory.
TokenEmbedding::TokenEmbedding(const TokenEmbedding& o)
    : V_(o.V_),
      D_(o.D_),
      owned_(o.owned_),
      data_(o.borrowed_ ? o.data_ : owned_.data()),
      keep_alive_(o.keep_alive_),
      borrowed_(o.borrowed_),
      grad_(o.grad_),
      padding_idx_(o.padding_idx_),
      id_policy_(o.id_policy_),
      frozen_(o.frozen_) {
  if (!borrowed_) detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
}

TokenEmbedding::TokenEmbedding(TokenEmbedding&& o) noexcept
    : V_(o.V_),
      D_(o.D_),
      owned_(std::move(o.owned_)),
      data_(o.borrowed_ ? o.data_ : owned_.data()),
      keep_alive_(std::move(o.keep_alive_)),
      borrowed_(o.borrowed_),
      grad_(std::move(o.grad_)),
      padding_idx_(o.padding_idx_),
      id_policy_(o.id_policy_),
      frozen_(o.frozen_) {
  o.clear_moved_from();
}

TokenEmbedding& TokenEmbedding::operator=(const TokenEmbedding& o) {
  if (this != &o) *this = TokenEmbedding(o);
  return *this;
}

TokenEmbedding& TokenEmbedding::operator=(TokenEmbedding&& o) noexcept {
  if (this == &o) return *this;
  V_ = o.V_;
  D_ = o.D_;
  owned_ = std::move(o.owned_);
  borrowed_ = o.borrowed_;
  data_ = borrowed_ ? o.data_ : owned_.data();
  keep_alive_ = std::move(o.keep_alive_);
  grad_ = std::move(o.grad_);
  padding_idx_ = o.padding_idx_;
  id_policy_ = o.id_policy_;
  frozen_ = o.frozen_;
  o.clear_moved_from();
  return *this;
}

// The moved-from module is left empty, not dangling: a 0 x 0 table with no
// padding row and the error policy, so every call that reads the table fails
// with a size error (an id outside [0, V = 0), or a size that must be N*V = 0)
// instead of reading through a stale size.
void TokenEmbedding::clear_moved_from() noexcept {
  owned_.clear();
  data_ = owned_.data();
  keep_alive_.reset();
  borrowed_ = false;
  grad_.clear();
  V_ = 0;
  D_ = 0;
  padding_idx_.reset();
  id_policy_ = IdPolicy::error();
}

namespace {
// Validates the shape part of the options; returns V*D.
int64_t check_options(const char* where, const TokenEmbeddingOptions& o) {
  detail::check_at_least(where, "vocab_size", o.vocab_size, 1);
  detail::check_at_least(where, "dim", o.dim, 1);
  const int64_t n = detail::checked_mul(where, "vocab_size*dim", o.vocab_size, o.dim);
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
  *this = TokenEmbedding(o.vocab_size, o.dim, std::move(table), o.padding_idx, o.id_policy, false);
}

TokenEmbedding TokenEmbedding::from_pretrained(std::vector<float> table, const TokenEmbeddingOptions& o,
                                               bool frozen) {
  constexpr const char* kWhere = "TokenEmbedding::from_pretrained";
  const int64_t n = check_options(kWhere, o);
  detail::check_size(kWhere, "table", table.size(), n);
  return TokenEmbedding(o.vocab_size, o.dim, std::move(table), o.padding_idx, o.id_policy, frozen);
}

TokenEmbedding TokenEmbedding::borrow(std::span<const float> table, const TokenEmbeddingOptions& o,
                                      bool frozen, std::shared_ptr<const void> keep_alive) {
  constexpr const char* kWhere = "TokenEmbedding::borrow";
  const int64_t n = check_options(kWhere, o);
  detail::check_size(kWhere, "table", table.size(), n);
  detail::check_not_null(kWhere, "table", table.data());
  TokenEmbedding m(o.vocab_size, o.dim, {}, o.padding_idx, o.id_policy, frozen);
  m.data_ = table.data();
  m.borrowed_ = true;
  m.keep_alive_ = std::move(keep_alive);
  return m;
}

std::span<float> TokenEmbedding::mutable_table() {
  if (borrowed_) {
    detail::fail(Status::kInvalidArgument, "TokenEmbedding::mutable_table",
                 "the table is borrowed (read-only); call make_owned() for a writable copy");
  }
  return owned_;
}

void TokenEmbedding::make_owned() {
  if (!borrowed_) return;
  auto copy = detail::make_buffer<float>("TokenEmbedding::make_owned", "token table", V_ * D_);
  std::copy_n(data_, V_ * D_, copy.begin());
  owned_ = std::move(copy);
  data_ = owned_.data();
  detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
  keep_alive_.reset();
  borrowed_ = false;
}

void TokenEmbedding::adopt_table(std::vector<float>&& table) {
  detail::check_size("TokenEmbedding::adopt_table", "table", table.size(), V_ * D_);
  owned_ = std::move(table);
  data_ = owned_.data();
  detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
  keep_alive_.reset();
  borrowed_ = false;
}

void TokenEmbedding::check_policy_for(const IdPolicy& policy, const char* where) const {
  check_policy(where, policy, V_);
}

void TokenEmbedding::set_id_policy(const IdPolicy& policy) {
  check_policy("TokenEmbedding::set_id_policy", policy, V_);
  id_policy_ = policy;
}

void TokenEmbedding::set_padding_idx(std::optional<int64_t> padding_idx) {
  if (padding_idx && (*padding_idx < 0 || *padding_idx >= V_)) {
    detail::fail(Status::kInvalidArgument, "TokenEmbedding::set_padding_idx", "padding_idx ", *padding_idx,
                 " is outside [0, ", V_, ")");
  }
  padding_idx_ = padding_idx;
  // A borrowed table is read-only: the row is recorded (no gradient) but kept as given.
  if (padding_idx && !borrowed_) std::fill_n(owned_.begin() + *padding_idx * D_, D_, 0.0f);
}

std::span<float> TokenEmbedding::ensure_grad() {
  if (grad_.empty()) grad_ = detail::make_buffer<float>("TokenEmbedding", "gradient", V_ * D_);
  return grad_;
}

void TokenEmbedding::adopt_grad(std::vector<float>&& grad) {
  detail::check_size("TokenEmbedding::adopt_grad", "gradient", grad.size(), V_ * D_);
  grad_ = std::move(grad);
}

void TokenEmbedding::zero_grad() {
  std::fill(grad_.begin(), grad_.end(), 0.0f);
}

void TokenEmbedding::check_ids(std::span<const int64_t> ids, int64_t B, int64_t T,
                               std::optional<IdPolicy> policy, const char* where) const {
  check_batch(where, B, T);
  detail::check_size(where, "ids", ids.size(), detail::checked_mul(where, "B*T", B, T));
  const IdPolicy& p = policy ? *policy : id_policy_;
  check_policy(where, p, V_);
  if (p.action == IdPolicy::Action::kError) detail::check_token_ids(where, ids.data(), B, T, V_);
}

void TokenEmbedding::forward(std::span<const int64_t> ids, int64_t B, int64_t T, std::span<float> out,
                             std::optional<IdPolicy> policy) const {
  constexpr const char* kWhere = "TokenEmbedding::forward";
  check_batch(kWhere, B, T);
  detail::check_size(kWhere, "ids", ids.size(), detail::checked_mul(kWhere, "B*T", B, T));
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, D_));
  const IdPolicy& p = policy ? *policy : id_policy_;
  check_policy(kWhere, p, V_);
  // The op checks the ids (once) and runs the kernel.
  ops::compose_forward(TensorView(out.data(), DType::kF32, {B, T, D_}),
                       TensorView(ids.data(), DType::kI64, {B, T}), TensorView(data_, DType::kF32, {V_, D_}),
                       nullptr, nullptr, 0, lookup_options(p, kWhere));
}

std::vector<float> TokenEmbedding::forward(std::span<const int64_t> ids, int64_t B, int64_t T,
                                           std::optional<IdPolicy> policy) const {
  constexpr const char* kWhere = "TokenEmbedding::forward";
  check_batch(kWhere, B, T);  // the writing overload checks the ids
  auto out = detail::make_buffer<float>(kWhere, "output", detail::checked_mul3(kWhere, "B*T*D", B, T, D_));
  forward(ids, B, T, out, policy);
  return out;
}

ops::LookupOptions TokenEmbedding::lookup_options(const IdPolicy& p, const char* where) const {
  return {.unk_id = p.action == IdPolicy::Action::kMapToUnk ? p.unk_id : -1,
          .padding_idx = padding_idx_.value_or(-1),
          .where = where};
}

ops::RowPlan TokenEmbedding::plan(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B, int64_t T,
                                  std::optional<IdPolicy> policy, const char* where,
                                  std::span<const int64_t> positions) const {
  check_batch(where, B, T);
  detail::check_size(where, "ids", ids.size(), detail::checked_mul(where, "B*T", B, T));
  detail::check_size(where, "d_out", d_out.size(), detail::checked_mul3(where, "B*T*D", B, T, D_));
  const IdPolicy& p = policy ? *policy : id_policy_;
  check_policy(where, p, V_);
  const TensorView pos(positions.data(), DType::kI64, {B, T});
  return ops::RowPlan(TensorView(ids.data(), DType::kI64, {B, T}), V_, positions.empty() ? nullptr : pos.get(), 0,
                      lookup_options(p, where));
}

// A frozen table gets no gradient: the call checks what an unfrozen one
// would (the sizes, the policy, the ids) and fails the same way, but plans
// no rows (no sorted row list is built only to be dropped).
void TokenEmbedding::check_frozen_call(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B,
                                       int64_t T, std::optional<IdPolicy> policy, const char* where) const {
  check_batch(where, B, T);
  detail::check_size(where, "ids", ids.size(), detail::checked_mul(where, "B*T", B, T));
  detail::check_size(where, "d_out", d_out.size(), detail::checked_mul3(where, "B*T*D", B, T, D_));
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
  ensure_grad();  // may throw; nothing has been written yet
  ops::compose_backward(TensorView(grad_.data(), DType::kF32, {V_, D_}).get(), nullptr,
                        TensorView(d_out.data(), DType::kF32, {B, T, D_}), rows);
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
  const auto U = static_cast<int64_t>(rows.touched_rows().size());
  SparseGradient out{{rows.touched_rows().begin(), rows.touched_rows().end()}, {}};
  out.values = detail::make_buffer<float>(kWhere, "sparse gradient", detail::checked_mul(kWhere, "U*D", U, D_));
  ops::token_gradient_rows(TensorView(out.values.data(), DType::kF32, {U, D_}),
                           TensorView(d_out.data(), DType::kF32, {B, T, D_}), rows);
  return out;
}

void TokenEmbedding::logits(std::span<const float> h, int64_t N, std::span<float> out) const {
  constexpr const char* kWhere = "TokenEmbedding::logits";
  detail::check_at_least(kWhere, "N", N, 0);
  detail::check_size(kWhere, "h", h.size(), detail::checked_mul(kWhere, "N*D", N, D_));
  detail::check_size(kWhere, "logits", out.size(), detail::checked_mul(kWhere, "N*V", N, V_));
  detail::check_disjoint(kWhere, "logits", out, "h", h);
  detail::check_disjoint(kWhere, "logits", out, "the table", table());
  detail::linear_nt(out.data(), h.data(), data_, N, V_, D_);
}

std::vector<float> TokenEmbedding::logits(std::span<const float> h, int64_t N) const {
  constexpr const char* kWhere = "TokenEmbedding::logits";
  detail::check_at_least(kWhere, "N", N, 0);
  auto out = detail::make_buffer<float>(kWhere, "logits", detail::checked_mul(kWhere, "N*V", N, V_));
  logits(h, N, out);
  return out;
}

void TokenEmbedding::logits_backward(std::span<const float> d_logits, std::span<const float> h, int64_t N,
                                     std::span<float> d_h) {
  constexpr const char* kWhere = "TokenEmbedding::logits_backward";
  detail::check_at_least(kWhere, "N", N, 0);
  detail::check_size(kWhere, "d_logits", d_logits.size(), detail::checked_mul(kWhere, "N*V", N, V_));
  detail::check_size(kWhere, "h", h.size(), detail::checked_mul(kWhere, "N*D", N, D_));
  if (!d_h.empty()) detail::check_size(kWhere, "d_h", d_h.size(), N * D_);
  for (const auto& [name, in] : {std::pair{"d_logits", d_logits}, std::pair{"h", h}, std::pair{"the table", table()}}) {
    detail::check_disjoint(kWhere, "d_h", d_h, name, in);
    detail::check_disjoint(kWhere, "the gradient", std::span<const float>(grad_), name, in);
  }
  // A frozen table gets no gradient, but d_h still flows. padding_idx masks only
  // the lookup path: the output side touches every row, as in PyTorch.
  float* dW = frozen_ ? nullptr : ensure_grad().data();
  detail::linear_nt_backward(dW, d_h.empty() ? nullptr : d_h.data(), d_logits.data(), h.data(), data_, N, V_,
                             D_);
}

}  // namespace tokpos
