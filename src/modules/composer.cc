#include "tokpos/composer.h"

#include <algorithm>

#include "common/check.h"
#include "tokpos/ops.h"

namespace tokpos {

EmbeddingComposer::EmbeddingComposer(TokenEmbedding token, std::unique_ptr<PositionalEmbedding> position)
    : token_(std::move(token)), position_(std::move(position)) {
  constexpr const char* kWhere = "EmbeddingComposer";
  detail::check_not_null(kWhere, "position", position_.get());
  if (position_->dim() != token_.dim()) {
    detail::fail(Status::kShapeMismatch, kWhere, "token dim D = ", token_.dim(), " differs from ",
                 position_->kind(), " position dim D = ", position_->dim());
  }
}

// The module side builds views: the spans' sizes against B, T and D, and the
// position rows under the position policy. The op checks the ids, the id
// policy's unk_id and every overlap, once, before the one pass that writes out.
void EmbeddingComposer::forward(std::span<const int64_t> ids, int64_t B, int64_t T, std::span<float> out,
                                const ComposeOptions& o) const {
  constexpr const char* kWhere = "EmbeddingComposer::forward";
  const int64_t D = token_.dim();
  detail::check_at_least(kWhere, "B", B, 0);
  detail::check_at_least(kWhere, "T", T, 0);
  detail::check_size(kWhere, "ids", ids.size(), detail::checked_mul(kWhere, "B*T", B, T));
  const bool typed = types_ || (layer_norm_ && o.layer_norm) || !o.token_type_ids.empty();
  if (typed) return forward_typed(ids, B, T, out, o);
  const PositionalEmbedding::BatchRows rows = position_->batch_rows(B, T, o.positions, kWhere);
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, D));
  // Remapped ids are a copy: the op does not see the caller's, which must not overlap out either.
  if (!rows.remapped.empty()) detail::check_disjoint(kWhere, "out", out, "position_ids", o.positions.ids);
  const TensorView pos(rows.rows.data(), DType::kF32, {static_cast<int64_t>(rows.rows.size()) / std::max<int64_t>(D, 1), D});
  const TensorView pids(rows.ids.data(), DType::kI64, {B, T});
  ops::compose_forward(TensorView(out.data(), DType::kF32, {B, T, D}), TensorView(ids.data(), DType::kI64, {B, T}),
                       token_.table_view(), pos.get(), rows.ids.empty() ? nullptr : pids.get(), rows.start,
                       token_.lookup_options(o.id_policy ? *o.id_policy : token_.id_policy(), kWhere));
}

void EmbeddingComposer::forward_typed(std::span<const int64_t> ids, int64_t B, int64_t T,
                                      std::span<float> out, const ComposeOptions& o) const {
  constexpr const char* kWhere = "EmbeddingComposer::forward";
  position_->check_positions(B, T, o.positions, kWhere);
  const int64_t D = token_.dim();
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, D));
  if (!o.token_type_ids.empty()) {
    if (!types_)
      detail::fail(Status::kInvalidArgument, kWhere,
                   "token_type_ids given but the composer has no token-type table");
    detail::check_size(kWhere, "token_type_ids", o.token_type_ids.size(), B * T);
  }
  if (B == 0 || T == 0) return token_.check_ids(ids, B, T, o.id_policy, kWhere);
  if (position_->batch_needs_rows(T, o.positions)) {
    detail::fail(Status::kInvalidArgument, kWhere,
                 "token types and LayerNorm need positions inside the table");
  }
  const IdPolicy& policy = o.id_policy ? *o.id_policy : token_.id_policy();
  const TensorView vids(ids.data(), DType::kI64, {B, T});
  const TensorView pids(o.positions.ids.data(), DType::kI64, {B, T});
  const ops::RowPlan plan(vids, token_.vocab_size(), o.positions.ids.empty() ? nullptr : pids.get(),
                          o.positions.start, token_.lookup_options(policy, kWhere));
  const LayerNormParams* ln = (layer_norm_ && o.layer_norm) ? &*layer_norm_ : nullptr;
  const TensorView tids(o.token_type_ids.data(), DType::kI64, {B, T});
  const TensorView types(types_ ? types_->table().data() : nullptr, DType::kF32,
                         {types_ ? types_->vocab_size() : 0, D});
  const TensorView gamma(ln ? ln->gamma.data() : nullptr, DType::kF32, {D});
  const TensorView beta(ln ? ln->beta.data() : nullptr, DType::kF32, {D});
  ops::compose_typed_forward(TensorView(out.data(), DType::kF32, {B, T, D}), plan, token_.table_view(),
                             o.token_type_ids.empty() ? nullptr : tids.get(), types_ ? types.get() : nullptr,
                             TensorView(position_->table().data(), DType::kF32, {position_->max_context(), D}),
                             ln ? gamma.get() : nullptr, ln ? beta.get() : nullptr, ln ? ln->eps : 0.0);
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
  // gradient_rows checks the positions as it resolves them; without a row scatter it returns none, unchecked.
  auto pos_rows = position_->gradient_rows(B, T, o.positions, kWhere);
  if (pos_rows.empty()) position_->check_positions(B, T, o.positions, kWhere);
  detail::check_size(kWhere, "d_out", d_out.size(), detail::checked_mul3(kWhere, "B*T*D", B, T, dim()));
  if (token_.frozen() || pos_rows.empty()) {
    token_.check_ids(ids, B, T, o.id_policy, kWhere);
    position_->ensure_grad();  // allocate both (either may throw) before writing either
    if (!token_.frozen()) token_.ensure_grad();
    auto touched = token_.backward(d_out, ids, B, T, o.id_policy);
    position_->backward(d_out, B, T, o.positions);
    return touched;
  }
  // Both gradients from one plan (ids checked once) and one kernel that
  // reads each row of d_out once for both (kernels.h), with the bits of the
  // two separate backwards.
  const ops::RowPlan plan = token_.plan(d_out, ids, B, T, o.id_policy, kWhere, pos_rows);
  auto pos_grad = position_->ensure_grad();
  auto tok_grad = token_.ensure_grad();
  const int64_t D = dim();
  ops::compose_backward(TensorView(tok_grad.data(), DType::kF32, {token_.vocab_size(), D}).get(),
                        TensorView(pos_grad.data(), DType::kF32, {position_->max_context(), D}).get(),
                        TensorView(d_out.data(), DType::kF32, {B, T, D}), plan);
  return {plan.touched_rows().begin(), plan.touched_rows().end()};
}

void EmbeddingComposer::zero_grad() {
  token_.zero_grad();
  position_->zero_grad();
}

}  // namespace tokpos
