// Private to the ops layer: a DLTensor checked once and turned into a typed
// view with element strides, plus the checks that relate tensors to each
// other (shapes, overlap).
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "tokpos/dtype.h"

namespace tokpos::ops::detail {

// What a tensor may hold in its role.
enum class Role {
  kIndex,     // ids, positions: int32 or int64
  kTable,     // a table read by a forward: f32, bf16 or f16
  kOutput,    // a forward output: f32, bf16 or f16; may not overlap itself
  kGradient,  // a backward output: f32 only (bf16/f16 are kUnimplemented); may not overlap itself
  kGradIn,    // d_out: f32 only (bf16/f16 are kUnimplemented)
  kBlocks,  // a quantized table's raw block bytes: uint8 (the View's dtype is meaningless; strides in bytes)
  // The lookup's own roles (compose_forward and compose_backward on float
  // tables), which also take float64; the op then checks that every float
  // tensor of the call is float64 or none is.
  kLookupTable,     // f32, bf16, f16 or f64
  kLookupOutput,    // f32, bf16, f16 or f64; may not overlap itself
  kLookupGradient,  // f32 or f64; may not overlap itself
  kLookupGradIn,    // f32 or f64
};

struct View {
  const char* name = "";
  char* data = nullptr;  // data + byte_offset
  DType dtype = DType::kF32;
  int ndim = 0;
  int64_t shape[4]{};
  int64_t strides[4]{};  // in elements
  int64_t numel = 0;
  uintptr_t lo = 0, hi = 0;  // the bytes the view can touch: [lo, hi); empty when numel == 0
  bool present = false;      // false for an optional tensor that was NULL
  int64_t rows() const { return shape[0]; }
  int64_t last() const { return shape[ndim - 1]; }
};

// Checks t (NULL: Error(kNullPointer), unless optional, then an absent
// view) and returns its view. ndim must be one of `ndims`.
View check_tensor(const char* where, const char* name, const DLTensor* t, Role role,
                  std::initializer_list<int> ndims, bool optional = false);

// Error(kInvalidArgument) if the bytes of a and b intersect (both present).
void check_no_overlap(const char* where, const View& a, const View& b);

// Error(kInvalidArgument) if the bytes of a and the caller's buffer `b_name`
// ([b, b + b_bytes), e.g. a span of doubles beside the tensors) intersect.
void check_no_overlap(const char* where, const View& a, const char* b_name, const void* b, size_t b_bytes);

// Error(kShapeMismatch) unless a.shape[0..n) == b.shape[0..n).
void check_leading_shape(const char* where, const View& a, const View& b, int n);

}  // namespace tokpos::ops::detail
