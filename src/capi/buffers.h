// Private to the C API: a caller's raw (pointer, sizes) as a span or as the
// op's tensor view. This is the one place the C entry points check what only
// C can get wrong (docs/errors.md): each size argument against its least
// value, the product of the sizes against what can be addressed, NULL where
// there is data to read or write, and alignment to the element type.
// Everything else (ids, positions, shapes that must agree, overlaps) is the
// op's to check, once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>

#include "common/check.h"
#include "tokpos/dtype.h"
#include "tokpos/ops.h"

namespace tokpos::capi {

// One size argument of a C function: its name in messages and its least value.
struct Size {
  const char* name;
  int64_t value;
  int64_t min = 0;
};

// The element count of a buffer of these sizes: each >= its min
// (Error(kInvalidArgument) "B = -1 must be >= 0"), their product addressable
// (Error(kSizeOverflow) "B*T*D = 1099511627776 * 1073741824 overflows ...").
// The product's name ("B*T*D") is spelled only when it fails, so a call that
// passes builds no string.
inline int64_t count_of(const char* fn, std::initializer_list<Size> sizes) {
  for (const Size& s : sizes) detail::check_at_least(fn, s.name, s.value, s.min);
  int64_t n = 1;
  for (const Size& s : sizes) {
    int64_t r = 0;
    if (__builtin_mul_overflow(n, s.value, &r) ||
        static_cast<uint64_t>(r) > std::numeric_limits<size_t>::max() / sizeof(float)) {
      std::string product;
      for (const Size& q : sizes) product += (product.empty() ? "" : "*") + std::string(q.name);
      detail::checked_mul(fn, product.c_str(), n, s.value);  // throws the message it always gave
    }
    n = r;
  }
  return n;
}

// A caller's buffer of count elements that the call reads or writes: NULL
// only when count is 0 (Error(kNullPointer) "name is NULL"), and aligned to
// `alignment` bytes (Error(kInvalidArgument) "name = 0x…1 is not aligned to 4
// bytes"): reading a misaligned float is undefined behaviour in C and C++.
inline void check_buffer(const char* fn, const char* name, const void* p, int64_t count, size_t alignment) {
  if (count <= 0) return;
  detail::check_not_null(fn, name, p);
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
    detail::fail(Status::kInvalidArgument, fn, name, " = ", p, " is not aligned to ", alignment, " bytes");
}

// count (>= 0, from count_of or the callee) elements of T at p, checked as above.
template <typename T>
std::span<T> span_of(const char* fn, const char* name, T* p, int64_t count) {
  check_buffer(fn, name, p, count, alignof(T));
  return {p, static_cast<size_t>(count)};
}
template <typename T>
std::span<T> span_of(const char* fn, const char* name, T* p, std::initializer_list<Size> sizes) {
  return span_of(fn, name, p, count_of(fn, sizes));
}

// The op's view of a row-major buffer of dtype with these sizes as its shape,
// checked as above. used = false: the call will not touch the buffer (an
// empty batch), so only the sizes are checked and p may be anything.
inline TensorView tensor_of(const char* fn, const char* name, const void* p, DType dtype,
                            std::initializer_list<Size> sizes, bool used = true) {
  const int64_t n = count_of(fn, sizes);
  if (used) check_buffer(fn, name, p, n, dtype_size(dtype));
  int64_t shape[4]{};
  size_t k = 0;
  for (const Size& s : sizes) shape[k++] = s.value;
  return TensorView(p, dtype, std::span<const int64_t>(shape, k));
}

// A DLTensor argument the op takes by reference: Error(kNullPointer) if NULL.
inline const DLTensor& tensor_arg(const char* fn, const char* name, const DLTensor* t) {
  detail::check_not_null(fn, name, t);
  return *t;
}

}  // namespace tokpos::capi
