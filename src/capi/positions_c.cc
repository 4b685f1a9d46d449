// The C API of position ids and ALiBi: shims over tokpos/positions.h. Each
// checks its raw pointers and enum values (capi/buffers.h), then calls the
// C++ function, which checks the tensors, the sizes and every value before it
// writes.
#include <cstdint>
#include <span>

#include "capi/buffers.h"
#include "capi/guard.h"
#include "common/check.h"
#include "tokpos/positions.h"
#include "tokpos/tokpos.h"

namespace {

using tokpos::Status;
using tokpos::capi::guard;
using tokpos::detail::check_not_null;
using tokpos::detail::fail;

static_assert(static_cast<int>(tokpos::AlibiMode::kCausal) == TOKPOS_ALIBI_CAUSAL);
static_assert(static_cast<int>(tokpos::AlibiMode::kSymmetric) == TOKPOS_ALIBI_SYMMETRIC);

using tokpos::capi::span_of;

}  // namespace

extern "C" {

tokpos_status tokpos_position_ids_from_mask(const DLTensor* out, const DLTensor* attention_mask) {
  constexpr const char* fn = "tokpos_position_ids_from_mask";
  return guard(fn, [&] { tokpos::position_ids_from_mask(attention_mask, out); });
}

tokpos_status tokpos_roberta_position_ids(const DLTensor* out, const DLTensor* input_ids, int64_t padding_idx,
                                          int64_t past_length) {
  constexpr const char* fn = "tokpos_roberta_position_ids";
  return guard(fn, [&] { tokpos::roberta_position_ids(input_ids, padding_idx, past_length, out); });
}

tokpos_status tokpos_packed_position_ids(const DLTensor* out, const DLTensor* cu_seqlens, int64_t start) {
  constexpr const char* fn = "tokpos_packed_position_ids";
  return guard(fn, [&] { tokpos::packed_position_ids(cu_seqlens, start, out); });
}

tokpos_status tokpos_packed_document_count(int64_t* count, const DLTensor* position_ids) {
  constexpr const char* fn = "tokpos_packed_document_count";
  return guard(fn, [&] {
    check_not_null(fn, "count", count);
    *count = tokpos::packed_document_count(position_ids);
  });
}

tokpos_status tokpos_cu_seqlens_from_position_ids(const DLTensor* out, const DLTensor* position_ids) {
  constexpr const char* fn = "tokpos_cu_seqlens_from_position_ids";
  return guard(fn, [&] { tokpos::cu_seqlens_from_position_ids(position_ids, out); });
}

tokpos_status tokpos_alibi_slopes(double* out, int64_t num_heads, double max_bias) {
  constexpr const char* fn = "tokpos_alibi_slopes";
  return guard(fn, [&] { tokpos::alibi_slopes(span_of(fn, "out", out, {{"num_heads", num_heads}}), max_bias); });
}

tokpos_status tokpos_op_alibi_bias(const DLTensor* out, const double* slopes, int64_t num_heads,
                                   const DLTensor* q_positions, const DLTensor* k_positions,
                                   tokpos_alibi_mode mode) {
  constexpr const char* fn = "tokpos_op_alibi_bias";
  return guard(fn, [&] {
    if (mode != TOKPOS_ALIBI_CAUSAL && mode != TOKPOS_ALIBI_SYMMETRIC) {
      fail(Status::kInvalidArgument, fn, "mode ", static_cast<int>(mode),
           " is not TOKPOS_ALIBI_CAUSAL (0) or TOKPOS_ALIBI_SYMMETRIC (1)");
    }
    tokpos::alibi_bias(span_of(fn, "slopes", slopes, {{"num_heads", num_heads}}), q_positions, k_positions,
                       static_cast<tokpos::AlibiMode>(mode), out);
  });
}

}  // extern "C"
