// tokpos/composer.h: token rows + position rows, the (B, T, D) input to attention.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tokpos/error.h"
#include "tokpos/positional.h"
#include "tokpos/token_embedding.h"

namespace tokpos {

struct ComposeOptions {
  PositionSpec positions = {};             // default: positions 0 .. T-1 for every batch row
  std::optional<IdPolicy> id_policy = {};  // overrides the token module's policy for this call
};

class EmbeddingComposer {
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

  void zero_grad();
  int64_t num_parameters() const { return token_.num_parameters() + position_->num_parameters(); }
  int64_t dim() const { return token_.dim(); }

  TokenEmbedding& token() { return token_; }
  const TokenEmbedding& token() const { return token_; }
  PositionalEmbedding& position() { return *position_; }
  const PositionalEmbedding& position() const { return *position_; }

 private:
  TokenEmbedding token_;
  std::unique_ptr<PositionalEmbedding> position_;
};

}  // namespace tokpos
