#include "tokpos/dtype.h"

namespace tokpos {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF64: return "f64";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64}) {
    if (name == dtype_name(d)) return d;
  }
  return std::nullopt;
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kI64:
    case DType::kF64: return 8;
  }
  return 0;
}

}  // namespace tokpos
