// tokpos/ggml_type.h: ggml's tensor element types, as GGUF files name them.
//
// A GGUF tensor's type is one of ggml's `enum ggml_type` values (ggml.h). A
// row of n elements of a block type is n / block_size blocks of type_size
// bytes each; n must be a whole number of blocks. The numbers are ggml's
// type_traits table (ggml/src/ggml.c, the blck_size and type_size fields,
// which are sizeof of the block structs in ggml-common.h). Values ggml has
// removed (4, 5, 31-33, 36-38) are not types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tokpos/dtype.h"
#include "tokpos/export.h"

namespace tokpos {

enum class GgmlType : int {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;   // ggml's type_name: "f32", "q8_0", "q6_K", ...
  int64_t block_size; // elements per block (1 for the plain types)
  size_t type_size;   // bytes per block
};

// The traits of a ggml type value, or nullptr when the value is not a type
// (negative, removed, or past the last one known).
TOKPOS_API const GgmlTypeTraits* ggml_type_traits(int64_t type);
// By ggml's name ("q4_K"; matched exactly, as ggml spells it).
TOKPOS_API const GgmlTypeTraits* ggml_type_by_name(std::string_view name);
// Bytes of a row of n elements: nullopt when n < 0, n is not a whole number
// of blocks, or the byte count overflows size_t.
TOKPOS_API std::optional<size_t> ggml_row_bytes(const GgmlTypeTraits& traits, int64_t n);
// The element type of ggml's plain float types (f32, f16, bf16, stored as
// tokpos stores those dtypes); nullopt for every block type and the rest.
TOKPOS_API std::optional<DType> ggml_float_dtype(GgmlType type);

}  // namespace tokpos
