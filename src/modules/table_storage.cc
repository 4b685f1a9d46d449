#include "tokpos/table_storage.h"

#include <algorithm>

#include "common/check.h"
#include "common/huge_pages.h"

namespace tokpos {

int64_t TableStorage::check_shape(const char* where, const char* rows_name, int64_t rows, int64_t dim) {
  detail::check_at_least(where, rows_name, rows, 1);
  detail::check_at_least(where, "dim", dim, 1);
  return detail::checked_mul(where, detail::cat(rows_name, "*dim").c_str(), rows, dim);
}

TableStorage::TableStorage(int64_t rows, int64_t dim, std::vector<float> owned)
    : rows_(rows), dim_(dim), owned_(std::move(owned)) {
  point_at_owned();
}

// A module reads random rows of its table: 2 MiB pages spare it a TLB miss
// for nearly every row (docs/benchmarks.md, "Huge pages").
void TableStorage::point_at_owned() {
  data_ = owned_.data();
  detail::advise_huge_pages(owned_.data(), owned_.size() * sizeof(float));
}

TableStorage TableStorage::owned(const char* where, int64_t rows, int64_t dim, std::vector<float> values) {
  detail::check_size(where, "table", values.size(), detail::checked_mul(where, "rows*dim", rows, dim));
  return TableStorage(rows, dim, std::move(values));
}

TableStorage TableStorage::zeros(const char* where, const char* what, int64_t rows, int64_t dim) {
  return TableStorage(rows, dim,
                      detail::make_buffer<float>(where, what, detail::checked_mul(where, "rows*dim", rows, dim)));
}

TableStorage TableStorage::borrowed(const char* where, std::span<const float> values, int64_t rows, int64_t dim,
                                    std::shared_ptr<const void> keep_alive) {
  detail::check_size(where, "table", values.size(), detail::checked_mul(where, "rows*dim", rows, dim));
  detail::check_not_null(where, "table", values.data());
  TableStorage s;
  s.rows_ = rows;
  s.dim_ = dim;
  s.data_ = values.data();
  s.keep_alive_ = std::move(keep_alive);
  s.borrowed_ = true;
  return s;
}

// An owning copy points at its own buffer; a borrowing one at the same memory.
TableStorage::TableStorage(const TableStorage& o)
    : rows_(o.rows_),
      dim_(o.dim_),
      owned_(o.owned_),
      keep_alive_(o.keep_alive_),
      borrowed_(o.borrowed_),
      grad_(o.grad_) {
  if (borrowed_) {
    data_ = o.data_;
  } else {
    point_at_owned();
  }
}

TableStorage::TableStorage(TableStorage&& o) noexcept { *this = std::move(o); }

// Copies first (that may throw), then commits: a failed copy changes nothing.
TableStorage& TableStorage::operator=(const TableStorage& o) {
  if (this != &o) *this = TableStorage(o);
  return *this;
}

// The moved-from storage is left empty, not dangling: 0 x 0, owned, no
// gradient, so a module holding it fails every call that reads a row with a
// size error instead of reading through a stale pointer.
TableStorage& TableStorage::operator=(TableStorage&& o) noexcept {
  if (this == &o) return *this;
  rows_ = o.rows_;
  dim_ = o.dim_;
  owned_ = std::move(o.owned_);
  borrowed_ = o.borrowed_;
  data_ = borrowed_ ? o.data_ : owned_.data();
  keep_alive_ = std::move(o.keep_alive_);
  grad_ = std::move(o.grad_);
  o.owned_.clear();
  o.grad_.clear();
  o.keep_alive_.reset();
  o.rows_ = o.dim_ = 0;
  o.borrowed_ = false;
  o.data_ = o.owned_.data();
  return *this;
}

std::span<float> TableStorage::mutable_values(const char* where) {
  if (borrowed_) {
    detail::fail(Status::kInvalidArgument, where,
                 "the table is borrowed (read-only); call make_owned() for a writable copy");
  }
  return owned_;
}

void TableStorage::make_owned(const char* where, const char* what) {
  if (!borrowed_) return;
  auto copy = detail::make_buffer<float>(where, what, size());
  std::copy_n(data_, size(), copy.begin());
  owned_ = std::move(copy);
  point_at_owned();
  keep_alive_.reset();
  borrowed_ = false;
}

void TableStorage::adopt(const char* where, std::vector<float>&& values) {
  detail::check_size(where, "table", values.size(), size());
  owned_ = std::move(values);
  point_at_owned();
  keep_alive_.reset();
  borrowed_ = false;
}

std::span<float> TableStorage::ensure_grad(const char* where) {
  if (grad_.empty()) grad_ = detail::make_buffer<float>(where, "gradient", size());
  return grad_;
}

void TableStorage::zero_grad() { std::fill(grad_.begin(), grad_.end(), 0.0f); }

void TableStorage::adopt_grad(const char* where, std::vector<float>&& grad) {
  detail::check_size(where, "gradient", grad.size(), size());
  grad_ = std::move(grad);
}

}  // namespace tokpos
