// tokpos/table_storage.h: the (rows, dim) float table a module holds, owned
// or borrowed, with its gradient.
//
// TokenEmbedding and the position tables (positional.h) keep their weights in
// one TableStorage each. An owned table is a buffer of the storage's own
// (large ones on 2 MiB pages, docs/benchmarks.md "Huge pages"); a borrowed
// one is memory the storage does not own, such as an F32 tensor of a mapped
// .safetensors file or a caller's buffer, read with no copy and never
// written. The gradient is always the storage's own buffer, allocated on
// first use.
//
// `where` arguments name the caller at the start of error messages
// (docs/errors.md), as everywhere in tokpos.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tokpos/export.h"

namespace tokpos {

class TOKPOS_API TableStorage {
 public:
  // An empty 0 x 0 table: no values, no gradient, owned.
  TableStorage() = default;

  // rows >= 1 and dim >= 1, and rows * dim must fit (else Error naming
  // rows_name, "dim" or rows_name*dim); returns rows * dim.
  static int64_t check_shape(const char* where, const char* rows_name, int64_t rows, int64_t dim);

  // Takes `values` (rows * dim) as the owned table, no copy.
  // Error(kShapeMismatch) naming "table" if the size differs.
  static TableStorage owned(const char* where, int64_t rows, int64_t dim, std::vector<float> values);
  // An owned table of zeros; `what` names it in an out-of-memory error.
  static TableStorage zeros(const char* where, const char* what, int64_t rows, int64_t dim);
  // Borrows `values` (rows * dim, not NULL) with no copy. The memory must
  // outlive the storage and its copies unless keep_alive owns it: the storage
  // holds keep_alive until it is destroyed or stops borrowing.
  static TableStorage borrowed(const char* where, std::span<const float> values, int64_t rows, int64_t dim,
                               std::shared_ptr<const void> keep_alive = {});

  // A copy of an owned table copies the values; a copy of a borrowed one
  // borrows the same memory and shares keep_alive. The gradient is copied.
  // Moves keep values() valid; the moved-from storage is left empty (0 x 0,
  // owned, no gradient), never dangling.
  TableStorage(const TableStorage& other);
  TableStorage(TableStorage&& other) noexcept;
  TableStorage& operator=(const TableStorage& other);
  TableStorage& operator=(TableStorage&& other) noexcept;
  ~TableStorage() = default;

  int64_t rows() const { return rows_; }
  int64_t dim() const { return dim_; }
  int64_t size() const { return rows_ * dim_; }
  // (rows, dim) row-major: the own buffer or the borrowed memory.
  std::span<const float> values() const { return {data_, static_cast<size_t>(size())}; }
  const float* data() const { return data_; }
  bool borrowed() const { return borrowed_; }

  // The owned values, writable. Error(kInvalidArgument) naming `where` if the
  // table is borrowed (read-only; make_owned first).
  std::span<float> mutable_values(const char* where);
  // Copies a borrowed table into an owned buffer (and drops keep_alive); a
  // no-op on an owned table. `what` names it in an out-of-memory error.
  void make_owned(const char* where, const char* what);
  // Takes `values` (rows * dim) as the owned table, dropping a borrowed one
  // and keep_alive; no copy. Error(kShapeMismatch) naming "table" if the size
  // differs, and then nothing changes; with the right size it cannot fail.
  void adopt(const char* where, std::vector<float>&& values);

  // The (rows, dim) gradient; empty until ensure_grad or adopt_grad.
  std::span<const float> grad() const { return grad_; }
  std::span<float> grad() { return grad_; }
  // Allocates the zeroed gradient if it has none yet.
  std::span<float> ensure_grad(const char* where);
  // Sets every gradient value to 0 (a no-op while there is none).
  void zero_grad();
  // Takes `grad` (rows * dim) as the gradient, no copy. Error(kShapeMismatch)
  // naming "gradient" if the size differs, and then nothing changes.
  void adopt_grad(const char* where, std::vector<float>&& grad);

 private:
  TableStorage(int64_t rows, int64_t dim, std::vector<float> owned);
  void point_at_owned();  // data_ = owned_, large tables advised onto huge pages

  int64_t rows_ = 0, dim_ = 0;
  std::vector<float> owned_;                // the table when owned; empty when borrowed
  const float* data_ = nullptr;             // owned_.data() or the borrowed memory
  std::shared_ptr<const void> keep_alive_;  // holds borrowed memory alive, if the borrower gave one
  bool borrowed_ = false;
  std::vector<float> grad_;
};

}  // namespace tokpos
