// The C API of quantized token tables: the shim over compose_forward with a
// tokpos::ops::QuantizedTable (tokpos/ops.h). It checks only the NULL
// tensors; the op checks the type, D, the row bytes and everything else.
#include "capi/buffers.h"
#include "capi/guard.h"
#include "tokpos/ops.h"
#include "tokpos/tokpos.h"

extern "C" {

tokpos_status tokpos_op_compose_forward_ggml(const DLTensor* out, const DLTensor* ids,
                                             const DLTensor* token_blocks, int32_t ggml_type, int64_t dim,
                                             const DLTensor* pos_table, const DLTensor* position_ids,
                                             int64_t start) {
  constexpr const char* fn = "tokpos_op_compose_forward_ggml";
  return tokpos::capi::guard(fn, [&] {
    using tokpos::capi::tensor_arg;
    const DLTensor& o = tensor_arg(fn, "out", out);
    const DLTensor& i = tensor_arg(fn, "ids", ids);
    const tokpos::ops::QuantizedTable q{&tensor_arg(fn, "token_blocks", token_blocks), ggml_type, dim};
    tokpos::ops::compose_forward(o, i, q, pos_table, position_ids, start, {.where = fn});
  });
}

}  // extern "C"
