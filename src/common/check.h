// Private: argument checks that throw tokpos::Error with a message naming the
// caller, the value and the limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <sstream>
#include <string>

#include "tokpos/error.h"

namespace tokpos::detail {

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  os.precision(17);
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Status status, const char* where, const Args&... args) {
  throw Error(status, cat(where, ": ", args...));
}

// name >= lo, else kInvalidArgument "name = v is below lo".
inline void check_at_least(const char* where, const char* name, int64_t v, int64_t lo) {
  if (v < lo) fail(Status::kInvalidArgument, where, name, " = ", v, " must be >= ", lo);
}

// A sinusoidal base (or timescale) must be finite and > 0.
inline void check_positive_finite(const char* where, const char* name, double v) {
  if (!(v > 0.0) || !(v < std::numeric_limits<double>::infinity())) {
    fail(Status::kInvalidArgument, where, name, " = ", v, " must be finite and > 0");
  }
}

// The standard deviation a table is initialised with, N(0, init_std^2): finite
// and >= 0. The C++ modules and the Python ones (tokpos._core.init_table)
// both check it here.
inline void check_init_std(const char* where, double init_std) {
  if (!(init_std >= 0.0) || !(init_std < std::numeric_limits<double>::infinity())) {
    fail(Status::kInvalidArgument, where, "init_std = ", init_std, " must be finite and >= 0");
  }
}

inline void check_not_null(const char* where, const char* name, const void* p) {
  if (p == nullptr) fail(Status::kNullPointer, where, name, " is NULL");
}

// a*b with overflow checks against int64 and size_t; `what` names the product.
inline int64_t checked_mul(const char* where, const char* what, int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ||
      static_cast<uint64_t>(r) > std::numeric_limits<size_t>::max() / sizeof(float)) {
    fail(Status::kSizeOverflow, where, what, " = ", a, " * ", b, " overflows int64/size_t");
  }
  return r;
}

inline int64_t checked_mul3(const char* where, const char* what, int64_t a, int64_t b, int64_t c) {
  return checked_mul(where, what, checked_mul(where, what, a, b), c);
}

// A span's size must be exactly `expected` elements.
inline void check_size(const char* where, const char* name, size_t actual, int64_t expected) {
  if (static_cast<int64_t>(actual) != expected) {
    fail(Status::kShapeMismatch, where, name, " has ", actual, " elements, expected ", expected);
  }
}

// Error(kInvalidArgument) if the bytes of a and b intersect: an output may
// not overlap an input (the result would depend on the order of the writes).
template <typename A, typename B>
void check_disjoint(const char* where, const char* a_name, std::span<A> a, const char* b_name, std::span<B> b) {
  if (a.empty() || b.empty()) return;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data()), a1 = a0 + a.size_bytes();
  const auto b0 = reinterpret_cast<uintptr_t>(b.data()), b1 = b0 + b.size_bytes();
  if (a0 < b1 && b0 < a1) fail(Status::kInvalidArgument, where, a_name, " overlaps ", b_name);
}

}  // namespace tokpos::detail

#include <new>
#include <vector>

namespace tokpos::detail {

// A zero-filled buffer of n elements, or Error(kOutOfMemory) naming its size.
template <typename T>
std::vector<T> make_buffer(const char* where, const char* what, int64_t n) {
  try {
    return std::vector<T>(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    fail(Status::kOutOfMemory, where, "cannot allocate ", what, ": ", n, " elements of ", sizeof(T),
         " bytes");
  } catch (const std::length_error&) {
    fail(Status::kSizeOverflow, where, what, ": ", n, " elements is too many");
  }
}

}  // namespace tokpos::detail
