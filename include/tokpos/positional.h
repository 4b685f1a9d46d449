// tokpos/positional.h: position tables, learned and sinusoidal.
//
// Both are (L, D) tables read by position: row p is the vector added at
// position p. Positions past the table are an error that names T, the start
// offset and L. Tables are never resized inside forward, so concurrent
// readers are safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokpos/sinusoidal.h"

namespace tokpos {

// Where each (b, t) of a batch reads its position row:
// start + t by default, or ids[b*T + t] when ids is given (shape (B, T)),
// for decoding with a cache or left-padded batches.
struct PositionSpec {
  int64_t start = 0;
  std::span<const int64_t> ids = {};
};

class PositionalEmbedding {
 public:
  virtual ~PositionalEmbedding() = default;

  int64_t max_context() const { return L_; }
  int64_t dim() const { return D_; }
  std::span<const float> table() const { return table_; }  // (L, D) row-major

  virtual const char* kind() const = 0;        // "learned" or "sinusoidal"
  virtual int64_t num_parameters() const = 0;  // L*D or 0
  virtual bool has_gradient() const = 0;

  // (L, D) gradient: empty for tables without one, and until the first backward.
  virtual std::span<const float> grad() const { return {}; }
  // Allocates the (zeroed) gradient if the table has one; empty span otherwise.
  virtual std::span<float> ensure_grad() { return {}; }
  virtual void zero_grad() {}

  // out (T, D) = table rows start .. start+T-1. Overwrites out.
  void forward(std::span<float> out, int64_t T, int64_t start = 0) const;
  std::vector<float> forward(int64_t T, int64_t start = 0) const;

  // Throws Error(kPositionOutOfRange) if a position of a (B, T) batch falls outside [0, L).
  void check_positions(int64_t B, int64_t T, const PositionSpec& positions, const char* where) const;
  // The table row of every (b, t), after check_positions: (B*T) values.
  std::vector<int64_t> resolve_positions(int64_t B, int64_t T, const PositionSpec& positions,
                                         const char* where) const;

  // grad[pos(b, t)] += d_out[b, t] for a (B, T, D) d_out. Accumulates (+=).
  // A no-op for tables without a gradient. Deterministic for any thread count.
  virtual void backward(std::span<const float> d_out, int64_t B, int64_t T,
                        const PositionSpec& positions = {}) = 0;

 protected:
  PositionalEmbedding(int64_t L, int64_t D, const char* what);
  int64_t L_ = 0, D_ = 0;
  std::vector<float> table_;
};

struct LearnedPositionalOptions {
  int64_t max_context = 0;  // L, >= 1
  int64_t dim = 0;          // D, >= 1
  uint64_t seed = 0;        // init: Philox stream kPositionTableStream (random.h)
  double init_std = 0.02;   // init: N(0, init_std^2)
};

class LearnedPositionalEmbedding final : public PositionalEmbedding {
 public:
  explicit LearnedPositionalEmbedding(const LearnedPositionalOptions& options);

  const char* kind() const override { return "learned"; }
  int64_t num_parameters() const override { return L_ * D_; }
  bool has_gradient() const override { return true; }

  std::span<float> mutable_table() { return table_; }
  std::span<const float> grad() const override { return grad_; }
  std::span<float> ensure_grad() override;
  void zero_grad() override;

  void backward(std::span<const float> d_out, int64_t B, int64_t T,
                const PositionSpec& positions = {}) override;

 private:
  std::vector<float> grad_;
};

struct SinusoidalOptions {
  int64_t max_context = 0;     // L, >= 1
  int64_t dim = 0;             // D, >= 1; odd D ends in a lone sin column
  double base = kDefaultBase;  // > 0 and finite
};

class SinusoidalPositionalEmbedding final : public PositionalEmbedding {
 public:
  // Precomputes the whole (L, D) table once.
  explicit SinusoidalPositionalEmbedding(const SinusoidalOptions& options);

  const char* kind() const override { return "sinusoidal"; }
  int64_t num_parameters() const override { return 0; }
  bool has_gradient() const override { return false; }
  double base() const { return base_; }

  void backward(std::span<const float>, int64_t, int64_t, const PositionSpec& = {}) override {}

 private:
  double base_;
};

}  // namespace tokpos
