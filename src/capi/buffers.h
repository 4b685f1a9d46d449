// Private to the C API: a caller's raw array of doubles as a span, after the
// checks every entry point makes of one (docs/errors.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/check.h"

namespace tokpos::capi {

// count doubles at p: NULL only when count is 0 (Error(kNullPointer)), and p
// aligned to alignof(double) (Error(kInvalidArgument) naming it), since every
// element is read or written as a double. count must be >= 0.
template <typename T>
std::span<T> doubles(const char* fn, const char* name, T* p, int64_t count) {
  static_assert(sizeof(T) == sizeof(double), "doubles() takes double* or const double*");
  if (count < 0) detail::fail(Status::kInvalidArgument, fn, name, " count = ", count, " must be >= 0");
  if (count > 0) {
    detail::check_not_null(fn, name, p);
    if (reinterpret_cast<uintptr_t>(p) % alignof(double) != 0) {
      detail::fail(Status::kInvalidArgument, fn, name, " = ", static_cast<const void*>(p), " is not aligned to ",
                   alignof(double), " bytes");
    }
  }
  return {p, static_cast<size_t>(count)};
}

}  // namespace tokpos::capi
