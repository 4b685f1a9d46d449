// tokpos/composer.h: token rows + position rows, the (B, T, D) input to attention.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tokpos/error.h"
#include "tokpos/export.h"
#include "tokpos/positional.h"
#include "tokpos/token_embedding.h"

namespace tokpos {

struct ComposeOptions {
  PositionSpec positions = {};                   // default: positions 0 .. T-1 for every batch row
  std::optional<IdPolicy> id_policy = {};        // overrides the token module's policy for this call
  std::span<const int64_t> token_type_ids = {};  // (B, T) segment ids; empty: all 0 (BERT's default)
  bool layer_norm = true;                        // apply the composer's LayerNorm, if it has one
};

// A LayerNorm over D applied after the sum (BERT's embeddings.LayerNorm).
struct LayerNormParams {
  std::vector<float> gamma;  // (D) weight
  std::vector<float> beta;   // (D) bias
  double eps = 1e-12;        // BERT's layer_norm_eps
};

class TOKPOS_API EmbeddingComposer {
 public:
  // Takes ownership of both modules. Their D must agree (else kShapeMismatch).
  EmbeddingComposer(TokenEmbedding token, std::unique_ptr<PositionalEmbedding> position);

  // out (B, T, D) = token.table[ids[b, t]] + position.table[pos(b, t)].
  // One fused pass: every output element is written once, with no (B, T, D)
  // temporary. Ids and positions are all checked first; on any error out is
  // untouched. B = 0 or T = 0 is an empty batch and writes nothing.
  void forward(std::span<const int64_t> ids, int64_t B, int64_t T, std::span<float> out,
               const ComposeOptions& options = {}) const;
  std::vector<float> forward(std::span<const int64_t> ids, int64_t B, int64_t T,
                             const ComposeOptions& options = {}) const;

  // From d_out = dL/d(out), (B, T, D): accumulates (+=) into the token
  // gradient (only rows in ids) and the learned position gradient (if any).
  // Returns the token rows touched, sorted and unique. Deterministic.
  std::vector<int64_t> backward(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B,
                                int64_t T, const ComposeOptions& options = {});

  // BERT-style extras. A token-type (segment) table, (types, D), added to the
  // token row before the position row, and a LayerNorm fused into the same
  // pass. Dropout, which follows in BERT, is the identity at inference and is
  // not part of tokpos. The forward with either set supports f32 tables and
  // sinusoidal or learned positions without a beyond-table policy.
  void set_token_types(TokenEmbedding types);
  void set_layer_norm(LayerNormParams params);
  const TokenEmbedding* token_types() const { return types_ ? &*types_ : nullptr; }
  TokenEmbedding* token_types() { return types_ ? &*types_ : nullptr; }
  const LayerNormParams* layer_norm() const { return layer_norm_ ? &*layer_norm_ : nullptr; }
  LayerNormParams* layer_norm() { return layer_norm_ ? &*layer_norm_ : nullptr; }

  void zero_grad();
  int64_t num_parameters() const;
  int64_t dim() const { return token_.dim(); }

  TokenEmbedding& token() { return token_; }
  const TokenEmbedding& token() const { return token_; }
  PositionalEmbedding& position() { return *position_; }
  const PositionalEmbedding& position() const { return *position_; }

 private:
  void forward_typed(std::span<const int64_t> ids, int64_t B, int64_t T, std::span<float> out,
                     const ComposeOptions& options) const;
  TokenEmbedding token_;
  std::unique_ptr<PositionalEmbedding> position_;
  std::optional<TokenEmbedding> types_;
  std::optional<LayerNormParams> layer_norm_;
};

}  // namespace tokpos
