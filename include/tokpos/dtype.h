// tokpos/dtype.h: the one element-type enum of the library.
//
// Tables, outputs, kernels, the ops and the C API (tokpos_dtype, same values)
// all name element types with it. The C API refuses an int that is not one
// of these values (or not one its argument takes) with TOKPOS_INVALID_ARGUMENT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tokpos/export.h"

namespace tokpos {

enum class DType : int {
  kF32 = 0,   // IEEE binary32
  kBF16 = 1,  // bfloat16, stored as its uint16 bits
  kF16 = 2,   // IEEE binary16, stored as its uint16 bits
  kI32 = 3,   // int32 (ids and positions)
  kI64 = 4,   // int64 (ids and positions)
  kF64 = 5,   // IEEE binary64: the lookup and its backward only (gradient checks in double)
};

TOKPOS_API const char* dtype_name(DType dtype);  // "f32", "bf16", "f16", "i32", "i64", "f64"
TOKPOS_API std::optional<DType> parse_dtype(std::string_view name);  // the inverse of dtype_name
TOKPOS_API size_t dtype_size(DType dtype);                           // bytes per element: 4, 2, 2, 4, 8, 8
inline bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16 || d == DType::kF64;
}
inline bool is_index(DType d) { return d == DType::kI32 || d == DType::kI64; }

}  // namespace tokpos
