#include "tokpos/composer.h"

#include <algorithm>

#include "common/check.h"
#include "kernels/kernels.h"

namespace tokpos {
namespace {

// The half-open range of positions a call reads: [start, start + T), or the
// span of its explicit position ids.
std::pair<int64_t, int64_t> position_range(const PositionSpec& p, int64_t T) {
  if (p.ids.empty()) return {p.start, p.start + T};
  const auto [mn, mx] = std::minmax_element(p.ids.begin(), p.ids.end());
  return {*mn, *mx + 1};
}

}  // namespace

EmbeddingComposer::EmbeddingComposer(TokenEmbedding token, std::unique_ptr<PositionalEmbedding> position)
    : token_(std::move(token)), position_(std::move(position)) {
  constexpr const char* kWhere = "EmbeddingComposer";
  detail::check_not_null(kWhere, "position", position_.get());
  if (position_->dim() != token_.dim()) {
    detail::fail(Status::kShapeMismatch, kWhere, "token dim D = ", token_.dim(), " differs from ",
                 position_->kind(), " position dim D = ", position_->dim());
  }
}

void EmbeddingComposer::forward(std::span<const int64_t> ids, int64_t B, int64_t T, std::span<float> out,
                                const ComposeOptions& o) const {
  constexpr const char* kWhere = "EmbeddingComposer::forward";
  // Everything is checked before the one pass that writes out.
  token_.check_ids(ids, B, T, o.id_policy, kWhere);
  position_->check_positions(B, T, o.positions, kWhere);
  const int64_t D = token_.dim();
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, D));
  if (B == 0 || T == 0) return;
  if (types_ || (layer_norm_ && o.layer_norm)) return forward_typed(ids, B, T, out, o);
  const IdPolicy& policy = o.id_policy ? *o.id_policy : token_.id_policy();
  const auto& kernel = kernels::active_kernels().compose_forward;
  const int64_t* pos_ids = o.positions.ids.empty() ? nullptr : o.positions.ids.data();

  const auto [lo, hi] = position_range(o.positions, T);
  if (!position_->needs_rows(lo, hi)) {  // the common case: rows straight from the table
    kernel(out.data(), ids.data(), token_.table().data(), token_.vocab_size(), policy.unk_id,
           position_->table().data(), pos_ids, o.positions.start, B, T, D);
    return;
  }
  // A policy computes some rows (extend, clamp, interpolate): build just the
  // rows this call reads, never touching the table, then the same fused pass.
  if (pos_ids == nullptr) {
    const auto rows = position_->forward(T, o.positions.start);  // rows start .. start + T - 1
    kernel(out.data(), ids.data(), token_.table().data(), token_.vocab_size(), policy.unk_id, rows.data(),
           nullptr, 0, B, T, D);
    return;
  }
  std::vector<int64_t> unique(o.positions.ids.begin(), o.positions.ids.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  std::vector<int64_t> remapped(o.positions.ids.size());
  for (size_t n = 0; n < remapped.size(); ++n) {
    remapped[n] = std::lower_bound(unique.begin(), unique.end(), o.positions.ids[n]) - unique.begin();
  }
  const auto rows = position_->rows_for(unique);
  kernel(out.data(), ids.data(), token_.table().data(), token_.vocab_size(), policy.unk_id, rows.data(),
         remapped.data(), 0, B, T, D);
}

void EmbeddingComposer::forward_typed(std::span<const int64_t> ids, int64_t B, int64_t T,
                                      std::span<float> out, const ComposeOptions& o) const {
  constexpr const char* kWhere = "EmbeddingComposer::forward";
  const int64_t* type_ids = nullptr;
  if (!o.token_type_ids.empty()) {
    if (!types_)
      detail::fail(Status::kInvalidArgument, kWhere,
                   "token_type_ids given but the composer has no token-type table");
    types_->check_ids(o.token_type_ids, B, T, IdPolicy::error(), kWhere);
    type_ids = o.token_type_ids.data();
  }
  const auto [lo, hi] = position_range(o.positions, T);
  if (position_->needs_rows(lo, hi)) {
    detail::fail(Status::kInvalidArgument, kWhere,
                 "token types and LayerNorm need positions inside the table");
  }
  const IdPolicy& policy = o.id_policy ? *o.id_policy : token_.id_policy();
  const LayerNormParams* ln = (layer_norm_ && o.layer_norm) ? &*layer_norm_ : nullptr;
  kernels::active_kernels().compose_typed(
      out.data(), ids.data(), token_.table().data(), token_.vocab_size(), policy.unk_id, type_ids,
      types_ ? types_->table().data() : nullptr, position_->table().data(),
      o.positions.ids.empty() ? nullptr : o.positions.ids.data(), o.positions.start,
      ln ? ln->gamma.data() : nullptr, ln ? ln->beta.data() : nullptr, ln ? ln->eps : 0.0, B, T,
      token_.dim());
}

void EmbeddingComposer::set_token_types(TokenEmbedding types) {
  if (types.dim() != token_.dim()) {
    detail::fail(Status::kShapeMismatch, "EmbeddingComposer::set_token_types",
                 "token-type dim D = ", types.dim(), " differs from token dim D = ", token_.dim());
  }
  types_ = std::move(types);
}

void EmbeddingComposer::set_layer_norm(LayerNormParams params) {
  constexpr const char* kWhere = "EmbeddingComposer::set_layer_norm";
  detail::check_size(kWhere, "gamma", params.gamma.size(), token_.dim());
  detail::check_size(kWhere, "beta", params.beta.size(), token_.dim());
  if (!(params.eps > 0.0))
    detail::fail(Status::kInvalidArgument, kWhere, "eps = ", params.eps, " must be > 0");
  layer_norm_ = std::move(params);
}

int64_t EmbeddingComposer::num_parameters() const {
  return token_.num_parameters() + position_->num_parameters() + (types_ ? types_->num_parameters() : 0) +
         (layer_norm_ ? 2 * token_.dim() : 0);
}

std::vector<float> EmbeddingComposer::forward(std::span<const int64_t> ids, int64_t B, int64_t T,
                                              const ComposeOptions& o) const {
  constexpr const char* kWhere = "EmbeddingComposer::forward";
  detail::check_at_least(kWhere, "B", B, 0);  // so the size below names a negative size as such
  detail::check_at_least(kWhere, "T", T, 0);
  auto out = detail::make_buffer<float>(kWhere, "output", detail::checked_mul3(kWhere, "B*T*D", B, T, dim()));
  forward(ids, B, T, out, o);
  return out;
}

std::vector<int64_t> EmbeddingComposer::backward(std::span<const float> d_out, std::span<const int64_t> ids,
                                                 int64_t B, int64_t T, const ComposeOptions& o) {
  constexpr const char* kWhere = "EmbeddingComposer::backward";
  if (layer_norm_ && o.layer_norm) {
    detail::fail(Status::kInvalidArgument, kWhere,
                 "backward through the fused LayerNorm is not implemented; pass layer_norm = false and "
                 "differentiate the LayerNorm in your framework");
  }
  if (types_) {
    detail::fail(Status::kInvalidArgument, kWhere, "backward with a token-type table is not implemented yet");
  }
  // Check both halves before either gradient changes.
  token_.check_ids(ids, B, T, o.id_policy, kWhere);
  position_->check_positions(B, T, o.positions, kWhere);
  detail::check_size(kWhere, "d_out", d_out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, dim()));
  // Allocate both gradients (either may throw) before writing to either.
  position_->ensure_grad();
  if (!token_.frozen()) token_.ensure_grad();
  auto pos_rows = position_->gradient_rows(B, T, o.positions, kWhere);
  if (token_.frozen() || pos_rows.empty()) {
    auto touched = token_.backward(d_out, ids, B, T, o.id_policy);
    position_->backward(d_out, B, T, o.positions);
    return touched;
  }
  // Both gradients in one kernel: each row of d_out is read once for both
  // (kernels.h, index_add_rows2), with the bits of the two separate backwards.
  auto g = token_.gradient_rows(d_out, ids, B, T, o.id_policy, kWhere);
  kernels::active_kernels().index_add_rows2(token_.grad_.data(), g.rows.data(), token_.vocab_size(),
                                            position_->ensure_grad().data(), pos_rows.data(),
                                            position_->max_context(), d_out.data(), B * T, dim());
  return std::move(g.touched);
}

void EmbeddingComposer::zero_grad() {
  token_.zero_grad();
  position_->zero_grad();
}

}  // namespace tokpos
