// tokpos/positional.h: position tables, learned and sinusoidal.
//
// Both are (L, D) tables read by position: row p is the vector added at
// position p. What happens to positions past the table is a per-module policy
// (BeyondTable); the default is an error that names T, the start offset and L.
// Tables are immutable after construction, never resized inside forward, so
// concurrent readers are safe; rows a policy computes live only in the call.
//
// A learned table is owned by the module or borrowed (LearnedPositionalEmbedding::
// borrow): memory it does not own, such as a mapped .safetensors tensor, used
// with no copy and read-only. A sinusoidal table always owns its computed rows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokpos/export.h"
#include "tokpos/position_table.h"
#include "tokpos/table_storage.h"

namespace tokpos {

// Where each (b, t) of a batch reads its position row:
// start + t by default, or ids[b*T + t] when ids is given (shape (B, T)),
// for decoding with a cache or left-padded batches.
struct PositionSpec {
  int64_t start = 0;
  std::span<const int64_t> ids = {};
};

// Positions at or past max_context L.
enum class BeyondTable {
  kError,        // fail, naming T, start and L (the default, and the seed's behaviour)
  kExtend,       // sinusoidal only: compute the rows from the formula (exactly as a larger table)
  kClamp,        // learned only: read the last row, L - 1
  kInterpolate,  // learned only: Position Interpolation, p -> p (L-1)/(L'-1) over an extended context
                 // L' = interpolate_to, mixing rows floor and ceil linearly; positions >= L' fail
};
TOKPOS_API const char* beyond_table_name(BeyondTable policy);

class TOKPOS_API PositionalEmbedding {
 public:
  virtual ~PositionalEmbedding() = default;

  int64_t max_context() const { return table_.rows(); }
  int64_t dim() const { return table_.dim(); }
  // (L, D) row-major: the module's own buffer, or the borrowed memory.
  std::span<const float> table() const { return table_.values(); }
  // True if the table is borrowed memory, false if the module owns it.
  bool borrowed() const { return table_.borrowed(); }

  virtual const char* kind() const = 0;        // "learned" or "sinusoidal"
  virtual int64_t num_parameters() const = 0;  // L*D or 0
  virtual bool has_gradient() const = 0;

  // (L, D) gradient: empty for tables without one, and until the first backward.
  virtual std::span<const float> grad() const { return {}; }
  // Allocates the (zeroed) gradient if the table has one; empty span otherwise.
  virtual std::span<float> ensure_grad() { return {}; }
  virtual void zero_grad() {}

  // out (T, D) = table rows start .. start+T-1 (or the rows the policy
  // computes), through the compose op. Overwrites out.
  void forward(std::span<float> out, int64_t T, int64_t start = 0) const;
  std::vector<float> forward(int64_t T, int64_t start = 0) const;

  BeyondTable beyond() const { return beyond_; }

  // Throws Error(kPositionOutOfRange) if a position of a (B, T) batch is not
  // allowed under the module's policy (under kError: outside [0, L)).
  void check_positions(int64_t B, int64_t T, const PositionSpec& positions, const char* where) const;
  // The position of every (b, t): (B*T) values, after check_positions.
  std::vector<int64_t> resolve_positions(int64_t B, int64_t T, const PositionSpec& positions,
                                         const char* where) const;

  // True if positions in [lo, hi) cannot be read straight from the table
  // under the policy (past L, or interpolated), so rows_for must compute them.
  virtual bool needs_rows(int64_t lo, int64_t hi) const;
  // The rows for the given positions, in order: (positions.size(), D). The
  // table itself is never changed.
  virtual std::vector<float> rows_for(std::span<const int64_t> positions) const;

  // grad[pos(b, t)] += d_out[b, t] for a (B, T, D) d_out. Accumulates (+=).
  // A no-op for tables without a gradient. Deterministic for any thread count.
  virtual void backward(std::span<const float> d_out, int64_t B, int64_t T,
                        const PositionSpec& positions = {}) = 0;

  // When backward is a plain row scatter (grad[row(b, t)] += d_out[b, t]):
  // the (B*T) rows it adds into, after check_positions and the policy (a
  // clamped position names the last row). Empty otherwise (no gradient, or
  // interpolation). The composer uses it to compute both gradients in one
  // kernel that reads d_out once.
  virtual std::vector<int64_t> gradient_rows(int64_t /*B*/, int64_t /*T*/, const PositionSpec& /*positions*/,
                                             const char* /*where*/) const {
    return {};
  }

 protected:
  // Allocates an owned, zeroed (L, D) table; with `borrowed`, checks its size
  // and points at it instead (no allocation), holding keep_alive.
  PositionalEmbedding(int64_t L, int64_t D, BeyondTable beyond, const char* what,
                      std::optional<std::span<const float>> borrowed = std::nullopt,
                      std::shared_ptr<const void> keep_alive = {});
  // A copy of an owning module copies the table; a copy of a borrowing module
  // borrows the same memory and shares keep_alive. Moves keep table() valid.
  // The moved-from module is left empty, not dangling: max_context and dim
  // 0 under the error policy, so a call that reads a position throws
  // Error(kPositionOutOfRange) (T > L = 0).
  PositionalEmbedding(const PositionalEmbedding& other);
  PositionalEmbedding(PositionalEmbedding&& other) noexcept;
  PositionalEmbedding& operator=(const PositionalEmbedding& other);
  PositionalEmbedding& operator=(PositionalEmbedding&& other) noexcept;
  // Largest position the policy accepts, plus one.
  virtual int64_t position_limit() const;
  TableStorage table_;  // (L, D), owned or borrowed, and the gradient of a learned table
  BeyondTable beyond_ = BeyondTable::kError;

 private:
  friend class EmbeddingComposer;
  // The position rows a (B, T) batch reads, as the compose op takes them:
  // rows (R, D) and, when ids is not empty, the (B, T) row of each (b, t);
  // with ids empty, (b, t) reads row start + t. In-table positions read the
  // table itself (and the caller's position ids); a policy's rows are
  // computed for the call into `computed`, never into the table.
  struct BatchRows {
    std::span<const float> rows;
    std::span<const int64_t> ids;
    int64_t start = 0;
    std::vector<float> computed;
    std::vector<int64_t> remapped;
  };
  // For a non-empty batch whose positions passed check_positions: true if
  // it reads a row the policy computes (needs_rows over the range of
  // start .. start + T - 1, or of the explicit ids). Both forward paths of
  // the composer, and forward, ask this one question.
  bool batch_needs_rows(int64_t T, const PositionSpec& positions) const;
  // After check_positions under the policy.
  BatchRows batch_rows(int64_t B, int64_t T, const PositionSpec& positions, const char* where) const;
};

struct LearnedPositionalOptions {
  int64_t max_context = 0;                   // L, >= 1
  int64_t dim = 0;                           // D, >= 1
  uint64_t seed = 0;                         // init: Philox stream kPositionTableStream (random.h)
  double init_std = 0.02;                    // init: N(0, init_std^2)
  BeyondTable beyond = BeyondTable::kError;  // kError, kClamp or kInterpolate
  int64_t interpolate_to = 0;                // L' >= L, required by kInterpolate
};

class TOKPOS_API LearnedPositionalEmbedding final : public PositionalEmbedding {
 public:
  explicit LearnedPositionalEmbedding(const LearnedPositionalOptions& options);

  // Borrows an existing (L, D) table with no copy: table() points at
  // table.data(); table.size() must equal L*D (seed and init_std are ignored).
  // The memory must outlive the module (and its copies) unless keep_alive
  // owns it: the module holds keep_alive until it is destroyed. The table is
  // read-only (mutable_table throws; make_owned copies it); forward and
  // backward work as on an owned table, with the gradient owned by the module.
  static LearnedPositionalEmbedding borrow(std::span<const float> table,
                                           const LearnedPositionalOptions& options,
                                           std::shared_ptr<const void> keep_alive = {});

  const char* kind() const override { return "learned"; }
  int64_t num_parameters() const override { return table_.size(); }
  bool has_gradient() const override { return true; }

  // For loaders and optimisers. Error(kInvalidArgument) if the table is
  // borrowed (read-only); make_owned() first to get a writable copy.
  std::span<float> mutable_table();
  // Copies a borrowed table into a buffer the module owns (and drops
  // keep_alive), so it becomes writable; a no-op on an owned table.
  void make_owned() { table_.make_owned("PositionalEmbedding::make_owned", "position table"); }
  // Takes `table` (L*D values) as the module's own table, dropping a borrowed
  // one (and keep_alive) as make_owned does; no copy, no allocation.
  // Error(kShapeMismatch) if table.size() != L*D, and then nothing changes;
  // with the right size it cannot fail (loaders commit several modules with it).
  void adopt_table(std::vector<float>&& table) {
    table_.adopt("LearnedPositionalEmbedding::adopt_table", std::move(table));
  }
  std::span<const float> grad() const override { return table_.grad(); }
  std::span<float> ensure_grad() override;
  void zero_grad() override;
  // Takes `grad` (L*D values) as the gradient, no copy. Error(kShapeMismatch)
  // if grad.size() != L*D, and then nothing changes; otherwise no-throw.
  void adopt_grad(std::vector<float>&& grad);

  void backward(std::span<const float> d_out, int64_t B, int64_t T,
                const PositionSpec& positions = {}) override;
  std::vector<int64_t> gradient_rows(int64_t B, int64_t T, const PositionSpec& positions,
                                     const char* where) const override;

  bool needs_rows(int64_t lo, int64_t hi) const override;
  std::vector<float> rows_for(std::span<const int64_t> positions) const override;
  int64_t interpolate_to() const { return interpolate_to_; }

 private:
  LearnedPositionalEmbedding(const LearnedPositionalOptions& options,
                             std::optional<std::span<const float>> borrowed,
                             std::shared_ptr<const void> keep_alive, const char* what);
  int64_t position_limit() const override;
  // Position Interpolation: the two rows and weights position p reads.
  void interpolation(int64_t p, int64_t* i0, int64_t* i1, double* w1) const;
  int64_t interpolate_to_ = 0;
};

struct SinusoidalOptions {
  int64_t max_context = 0;                   // L, >= 1
  int64_t dim = 0;                           // D, >= 1; odd D ends in a lone sin column
  double base = kDefaultBase;                // > 0 and finite
  Layout layout = Layout::kInterleaved;      // any published layout (position_table.h)
  double min_timescale = 1.0;                // tensor2tensor layout only
  std::optional<int64_t> padding_idx = {};   // fairseq layout only: that row is zero
  BeyondTable beyond = BeyondTable::kError;  // kError or kExtend
};

class TOKPOS_API SinusoidalPositionalEmbedding final : public PositionalEmbedding {
 public:
  // Precomputes the whole (L, D) table once.
  explicit SinusoidalPositionalEmbedding(const SinusoidalOptions& options);

  const char* kind() const override { return "sinusoidal"; }
  int64_t num_parameters() const override { return 0; }
  bool has_gradient() const override { return false; }
  double base() const { return options_.base; }
  const TableOptions& table_options() const { return options_; }

  void backward(std::span<const float>, int64_t, int64_t, const PositionSpec& = {}) override {}
  std::vector<float> rows_for(std::span<const int64_t> positions) const override;

  // A new module with a larger (or smaller) table of L rows, same formula.
  SinusoidalPositionalEmbedding extended(int64_t L) const;

 private:
  int64_t position_limit() const override;
  TableOptions options_;
};

}  // namespace tokpos
