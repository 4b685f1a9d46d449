// tokpos/token_embedding.h: the (V, D) token lookup table.
//
// A module owns its table (the constructor, from_pretrained) or borrows one
// (borrow): a view of memory it does not own, such as an F32 tensor of a
// mapped .safetensors file or a caller's buffer, used with no copy. A
// borrowed table is read-only; the gradient is always the module's own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tokpos/export.h"
#include "tokpos/table_storage.h"

namespace tokpos {

class TensorView;  // tokpos/ops.h; declared here so this header does not need DLPack
namespace ops {
struct LookupOptions;
class RowPlan;
}  // namespace ops

// What to do with a token id outside [0, V).
struct IdPolicy {
  enum class Action { kError, kMapToUnk };
  Action action = Action::kError;  // default: fail, naming the id, its (b, t) and V
  int64_t unk_id = 1;              // with kMapToUnk: the row to read instead (ByteTokenizer::kUnk)

  static IdPolicy error() { return {}; }
  static IdPolicy map_to_unk(int64_t unk) { return {Action::kMapToUnk, unk}; }
};

struct TokenEmbeddingOptions {
  int64_t vocab_size = 0;                   // V, >= 1
  int64_t dim = 0;                          // D, >= 1
  uint64_t seed = 0;                        // init: Philox stream kTokenTableStream (random.h)
  double init_std = 0.02;                   // init: N(0, init_std^2), as GPT-2 and the seed lesson
  std::optional<int64_t> padding_idx = {};  // this row is zeroed at init and never gets a gradient
  IdPolicy id_policy = {};                  // default for every call; a call may override it
};

class TOKPOS_API TokenEmbedding {
 public:
  // A fresh table drawn from N(0, init_std^2) with the documented generator.
  explicit TokenEmbedding(const TokenEmbeddingOptions& options);

  // Wraps an existing (V, D) table, taken from options.vocab_size and options.dim;
  // table.size() must equal V*D. seed and init_std are ignored. As in PyTorch's
  // from_pretrained, padding_idx's row is kept as given (not zeroed) but never
  // receives a gradient. A frozen table never receives any gradient.
  static TokenEmbedding from_pretrained(std::vector<float> table, const TokenEmbeddingOptions& options,
                                        bool frozen = true);

  // Borrows an existing (V, D) table with no copy: table() points at
  // table.data(). Checks as from_pretrained. The memory must outlive the
  // module (and its copies) unless keep_alive owns it: the module holds
  // keep_alive until it is destroyed. The table is read-only (mutable_table
  // throws; make_owned copies it); forward, logits and, unless frozen,
  // backward work as on an owned table, with the gradient owned by the module.
  // padding_idx's row is kept as given (not zeroed), as in from_pretrained.
  static TokenEmbedding borrow(std::span<const float> table, const TokenEmbeddingOptions& options,
                               bool frozen = true, std::shared_ptr<const void> keep_alive = {});

  // A copy of an owning module copies the table; a copy of a borrowing module
  // borrows the same memory and shares keep_alive. Moves keep table() valid.
  // The moved-from module is left empty, not dangling: vocab_size and dim 0,
  // no padding row, the error policy, so a call that reads the table throws
  // (an id outside [0, 0), or a size that must be 0).
  TokenEmbedding(const TokenEmbedding& other);
  TokenEmbedding(TokenEmbedding&& other) noexcept;
  TokenEmbedding& operator=(const TokenEmbedding& other);
  TokenEmbedding& operator=(TokenEmbedding&& other) noexcept;
  ~TokenEmbedding() = default;

  int64_t vocab_size() const { return table_.rows(); }
  int64_t dim() const { return table_.dim(); }
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  // Sets (and zeroes that row, as at construction) or clears the padding row.
  // On a borrowed table the row is recorded (it gets no gradient) but kept as
  // given, not zeroed: the memory is read-only (as from_pretrained keeps it).
  void set_padding_idx(std::optional<int64_t> padding_idx);
  const IdPolicy& id_policy() const { return id_policy_; }
  void set_id_policy(const IdPolicy& policy);
  bool frozen() const { return frozen_; }
  void set_frozen(bool frozen) { frozen_ = frozen; }

  // V*D, whether or not the table is frozen (as PyTorch's numel over parameters).
  int64_t num_parameters() const { return table_.size(); }

  // (V, D) row-major: the module's own buffer, or the borrowed memory.
  std::span<const float> table() const { return table_.values(); }
  // For loaders and optimisers. Error(kInvalidArgument) if the table is
  // borrowed (read-only); make_owned() first to get a writable copy.
  std::span<float> mutable_table();
  // True if the table is borrowed memory (borrow), false if the module owns it.
  bool borrowed() const { return table_.borrowed(); }
  // Copies a borrowed table into a buffer the module owns (and drops
  // keep_alive), so it becomes writable; a no-op on an owned table.
  void make_owned();
  // Takes `table` (V*D values) as the module's own table, dropping a borrowed
  // one (and keep_alive) as make_owned does; no copy, no allocation.
  // Error(kShapeMismatch) if table.size() != V*D, and then nothing changes;
  // with the right size it cannot fail (loaders commit several modules with it).
  void adopt_table(std::vector<float>&& table);

  // (V, D) gradient; empty until the first backward or ensure_grad().
  std::span<const float> grad() const { return table_.grad(); }
  std::span<float> ensure_grad();
  void zero_grad();
  // Takes `grad` (V*D values) as the gradient, no copy. Error(kShapeMismatch)
  // if grad.size() != V*D, and then nothing changes; otherwise no-throw.
  void adopt_grad(std::vector<float>&& grad);

  // out (B, T, D) = table[ids[b, t]]. Overwrites out. ids is (B, T).
  // Ids are checked before anything is written; on error out is untouched.
  void forward(std::span<const int64_t> ids, int64_t B, int64_t T, std::span<float> out,
               std::optional<IdPolicy> policy = {}) const;
  std::vector<float> forward(std::span<const int64_t> ids, int64_t B, int64_t T,
                             std::optional<IdPolicy> policy = {}) const;

  // grad[ids[b, t]] += d_out[b, t] for every (b, t), skipping padding_idx.
  // d_out is (B, T, D). Accumulates (+=); only rows that appear in ids change.
  // Returns those rows, sorted and unique (empty when frozen). Deterministic:
  // bitwise identical for any thread count.
  std::vector<int64_t> backward(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B,
                                int64_t T, std::optional<IdPolicy> policy = {});

  // The same gradient as backward would add, as a sparse matrix (PyTorch's
  // sparse=True): the touched rows, sorted, and their gradient rows,
  // (rows.size(), D). Changes nothing in the module. Each value row has the
  // same bits as backward adds to a zeroed gradient.
  struct SparseGradient {
    std::vector<int64_t> rows;
    std::vector<float> values;
  };
  SparseGradient sparse_backward(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B,
                                 int64_t T, std::optional<IdPolicy> policy = {}) const;

  // Weight tying: the table as the output projection.
  // logits (N, V) = h (N, D) . table^T. Overwrites logits.
  void logits(std::span<const float> h, int64_t N, std::span<float> logits) const;
  std::vector<float> logits(std::span<const float> h, int64_t N) const;
  // grad (V, D) += d_logits^T . h and, if d_h is not empty, d_h (N, D) += d_logits . table.
  // Every row of grad may change (the output side touches the whole vocabulary).
  void logits_backward(std::span<const float> d_logits, std::span<const float> h, int64_t N,
                       std::span<float> d_h = {});

  // Checks ids (B, T) under the policy, or throws naming the first bad id,
  // its (b, t) and V. `where` names the caller in the message.
  void check_ids(std::span<const int64_t> ids, int64_t B, int64_t T, std::optional<IdPolicy> policy,
                 const char* where) const;

 private:
  friend class EmbeddingComposer;  // its backward computes both gradients from one plan
  // Error(kInvalidArgument) if the policy's unk_id is outside [0, V).
  void check_policy_for(const IdPolicy& policy, const char* where) const;
  // The op options for a policy: UNK mapping, padding_idx, the caller's name.
  ops::LookupOptions lookup_options(const IdPolicy& p, const char* where) const;
  // The table as a (V, D) float32 view, for the ops.
  TensorView table_view() const;
  // Checks sizes, then plans the batch (the op checks the ids and the policy once);
  // with positions, the plan also groups them for a position gradient.
  ops::RowPlan plan(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B, int64_t T,
                    std::optional<IdPolicy> policy, const char* where, std::span<const int64_t> positions = {}) const;

  TokenEmbedding(TableStorage table, std::optional<int64_t> padding_idx, IdPolicy policy, bool frozen);
  // Backward on a frozen table: the checks of plan, without the plan.
  void check_frozen_call(std::span<const float> d_out, std::span<const int64_t> ids, int64_t B, int64_t T,
                         std::optional<IdPolicy> policy, const char* where) const;

  TableStorage table_;  // (V, D), owned or borrowed, and the gradient
  std::optional<int64_t> padding_idx_;
  IdPolicy id_policy_;
  bool frozen_ = false;
};

}  // namespace tokpos
