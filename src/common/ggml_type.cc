#include "tokpos/ggml_type.h"

#include <limits>

namespace tokpos {

namespace {

// ggml/src/ggml.c type_traits (blck_size, type_size). Q8_1's block is two
// ggml_half and 32 int8 (36 bytes, as ggml-common.h asserts); gguf-py's table
// still says 40, the size of an older layout with float scales.
constexpr GgmlTypeTraits kTraits[] = {
    {GgmlType::kF32, "f32", 1, 4},          {GgmlType::kF16, "f16", 1, 2},
    {GgmlType::kQ4_0, "q4_0", 32, 18},      {GgmlType::kQ4_1, "q4_1", 32, 20},
    {GgmlType::kQ5_0, "q5_0", 32, 22},      {GgmlType::kQ5_1, "q5_1", 32, 24},
    {GgmlType::kQ8_0, "q8_0", 32, 34},      {GgmlType::kQ8_1, "q8_1", 32, 36},
    {GgmlType::kQ2_K, "q2_K", 256, 84},     {GgmlType::kQ3_K, "q3_K", 256, 110},
    {GgmlType::kQ4_K, "q4_K", 256, 144},    {GgmlType::kQ5_K, "q5_K", 256, 176},
    {GgmlType::kQ6_K, "q6_K", 256, 210},    {GgmlType::kQ8_K, "q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66}, {GgmlType::kIQ2_XS, "iq2_xs", 256, 74},
    {GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98}, {GgmlType::kIQ1_S, "iq1_s", 256, 50},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18},  {GgmlType::kIQ3_S, "iq3_s", 256, 110},
    {GgmlType::kIQ2_S, "iq2_s", 256, 82},   {GgmlType::kIQ4_XS, "iq4_xs", 256, 136},
    {GgmlType::kI8, "i8", 1, 1},            {GgmlType::kI16, "i16", 1, 2},
    {GgmlType::kI32, "i32", 1, 4},          {GgmlType::kI64, "i64", 1, 8},
    {GgmlType::kF64, "f64", 1, 8},          {GgmlType::kIQ1_M, "iq1_m", 256, 56},
    {GgmlType::kBF16, "bf16", 1, 2},        {GgmlType::kTQ1_0, "tq1_0", 256, 54},
    {GgmlType::kTQ2_0, "tq2_0", 256, 66},   {GgmlType::kMXFP4, "mxfp4", 32, 17},
    {GgmlType::kNVFP4, "nvfp4", 64, 36},    {GgmlType::kQ1_0, "q1_0", 128, 18},
};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(int64_t type) {
  for (const GgmlTypeTraits& t : kTraits) {
    if (static_cast<int64_t>(t.type) == type) return &t;
  }
  return nullptr;
}

const GgmlTypeTraits* ggml_type_by_name(std::string_view name) {
  for (const GgmlTypeTraits& t : kTraits) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

std::optional<size_t> ggml_row_bytes(const GgmlTypeTraits& traits, int64_t n) {
  if (n < 0 || n % traits.block_size != 0) return std::nullopt;
  const auto blocks = static_cast<uint64_t>(n / traits.block_size);
  if (blocks > std::numeric_limits<size_t>::max() / traits.type_size) return std::nullopt;
  return static_cast<size_t>(blocks) * traits.type_size;
}

std::optional<DType> ggml_float_dtype(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    default: return std::nullopt;
  }
}

}  // namespace tokpos
