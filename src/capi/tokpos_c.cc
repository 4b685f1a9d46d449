// The C API: one short shim per entry point over one op (tokpos/ops.h) or one
// module method. A shim checks only what C alone can get wrong (NULL,
// alignment, enum values, sizes turned into the op's views, capi/buffers.h),
// calls the op inside guard(), and turns every exception into a status plus a
// thread-local message. The op validates everything else, once, before it
// writes anything.
#include "tokpos/tokpos.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "capi/buffers.h"
#include "capi/guard.h"
#include "common/check.h"
#include "common/validate.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"
#include "tokpos/ops.h"
#include "tokpos/position_table.h"
#include "tokpos/positional.h"
#include "tokpos/random.h"
#include "tokpos/threading.h"
#include "tokpos/token_embedding.h"

struct tokpos_token_embedding {
  tokpos::TokenEmbedding module;
  std::vector<int64_t> touched;
};
struct tokpos_position_embedding {
  std::unique_ptr<tokpos::PositionalEmbedding> module;
};
struct tokpos_composer {
  tokpos::EmbeddingComposer module;
  std::vector<int64_t> touched;
};

namespace {

using tokpos::Status;
using tokpos::detail::check_at_least;
using tokpos::detail::checked_mul;
using tokpos::detail::fail;

static_assert(static_cast<int>(Status::kInternal) == TOKPOS_INTERNAL);
static_assert(static_cast<int>(Status::kCorruptFile) == TOKPOS_CORRUPT_FILE);
static_assert(static_cast<int>(tokpos::Layout::kGgml) == TOKPOS_LAYOUT_GGML);
static_assert(static_cast<int>(tokpos::Layout::kFairseq) == TOKPOS_LAYOUT_FAIRSEQ);
static_assert(static_cast<int>(tokpos::DType::kF16) == TOKPOS_DTYPE_F16);
static_assert(static_cast<int>(tokpos::DType::kI64) == TOKPOS_DTYPE_I64);
static_assert(static_cast<int>(tokpos::DType::kF64) == TOKPOS_DTYPE_F64);
static_assert(static_cast<int>(Status::kIdOutOfRange) == TOKPOS_ID_OUT_OF_RANGE);
static_assert(static_cast<int>(Status::kPositionOutOfRange) == TOKPOS_POSITION_OUT_OF_RANGE);

using tokpos::capi::g_last_error;
using tokpos::capi::guard;
using tokpos::capi::Size;
using tokpos::capi::span_of;
using tokpos::capi::tensor_arg;
using tokpos::capi::tensor_of;
using tokpos::DType;
using tokpos::TensorView;

template <typename H>
H& handle(const char* fn, H* h) {
  tokpos::detail::check_not_null(fn, "handle", h);
  return *h;
}

// C's "-1: none" for an optional row; any other value goes to the callee, which checks it.
std::optional<int64_t> optional_row(int64_t row) {
  return row == -1 ? std::nullopt : std::optional<int64_t>(row);
}

// A dtype argument of the raw-pointer API, in [0, max]; with f64, also
// TOKPOS_DTYPE_F64 (a float64 lookup, whose op takes no other type beside it).
DType dtype_arg(const char* fn, const char* name, tokpos_dtype d, tokpos_dtype max, bool f64 = false) {
  if (f64 && d == TOKPOS_DTYPE_F64) return DType::kF64;
  if (d < TOKPOS_DTYPE_F32 || d > max)
    fail(Status::kInvalidArgument, fn, name, " ", static_cast<int>(d), " is outside [0, ",
         static_cast<int>(max), "]", f64 ? " and is not TOKPOS_DTYPE_F64 (5)" : "");
  return static_cast<DType>(d);
}

tokpos::IdPolicy to_policy(const char* fn, tokpos_id_policy policy, int64_t unk_id) {
  switch (policy) {
    case TOKPOS_IDS_ERROR: return tokpos::IdPolicy::error();
    case TOKPOS_IDS_MAP_TO_UNK: return tokpos::IdPolicy::map_to_unk(unk_id);
    default: break;
  }
  fail(Status::kInvalidArgument, fn, "id policy ", static_cast<int>(policy),
       " is not TOKPOS_IDS_ERROR (0) or TOKPOS_IDS_MAP_TO_UNK (1)");
}

}  // namespace

extern "C" {

const char* tokpos_status_string(tokpos_status s) {
  if (s < TOKPOS_OK || s > TOKPOS_CORRUPT_FILE) return "TOKPOS_UNKNOWN_STATUS";
  return tokpos::status_name(static_cast<Status>(s));
}

const char* tokpos_last_error(void) {
  return g_last_error.c_str();
}
const char* tokpos_version(void) {
  return TOKPOS_VERSION;
}
void tokpos_set_num_threads(int n) {
  tokpos::set_num_threads(n);
}
int tokpos_get_num_threads(void) {
  return tokpos::num_threads();
}
void tokpos_set_stream_min_bytes(int64_t bytes) {
  tokpos::set_stream_min_bytes(bytes);
}
int64_t tokpos_get_stream_min_bytes(void) {
  return tokpos::stream_min_bytes();
}

float tokpos_pe_sinusoidal(int64_t pos, int64_t dim, int64_t hidden_dim) {
  float value = std::numeric_limits<float>::quiet_NaN();
  constexpr const char* fn = "tokpos_pe_sinusoidal";
  guard(fn, [&] {
    check_at_least(fn, "pos", pos, 0);
    check_at_least(fn, "hidden_dim", hidden_dim, 1);
    if (dim < 0 || dim >= hidden_dim) {
      fail(Status::kInvalidArgument, fn, "dim ", dim, " is outside [0, hidden_dim = ", hidden_dim, ")");
    }
    value = tokpos::sinusoidal_value(pos, dim, hidden_dim, tokpos::kDefaultBase);
  });
  return value;
}

tokpos_status tokpos_embedding_forward(const int64_t* token_ids, int64_t seq_len, const float* token_table,
                                       int64_t vocab_size, int64_t hidden_dim, int64_t unk_id, float* out) {
  constexpr const char* fn = "tokpos_embedding_forward";
  return guard(fn, [&] {
    // The seed's contract: seq_len 0 succeeds, writing nothing, with any sizes >= 0.
    const bool used = seq_len > 0;
    const int64_t least = used ? 1 : 0;
    const TensorView ids = tensor_of(fn, "token_ids", token_ids, DType::kI64, {{"seq_len", seq_len}}, used);
    const TensorView tok = tensor_of(fn, "token_table", token_table, DType::kF32,
                                     {{"vocab_size", vocab_size, least}, {"hidden_dim", hidden_dim, least}}, used);
    const TensorView o =
        tensor_of(fn, "out", out, DType::kF32, {{"seq_len", seq_len}, {"hidden_dim", hidden_dim}}, used);
    if (!used) return;
    // The lab always maps to UNK; a negative unk_id would mean "no UNK" to the op.
    if (unk_id < 0) fail(Status::kInvalidArgument, fn, "unk_id ", unk_id, " is outside [0, ", vocab_size, ")");
    const int64_t n_out = seq_len * hidden_dim;
    // The lab's PE rows, then the one compose op with the UNK fallback.
    auto pe = tokpos::detail::make_buffer<float>(fn, "position rows", n_out);
    tokpos::sinusoidal_table(pe, seq_len, hidden_dim, tokpos::kDefaultBase, 0);
    const TensorView pos(pe.data(), DType::kF32, {seq_len, hidden_dim});
    tokpos::ops::compose_forward(o, ids, tok, pos.get(), nullptr, 0, {.unk_id = unk_id, .where = fn});
  });
}

tokpos_status tokpos_sinusoidal_table(float* out, int64_t max_context, int64_t dim, double base) {
  constexpr const char* fn = "tokpos_sinusoidal_table";
  return guard(fn, [&] {
    check_at_least(fn, "max_context", max_context, 1);
    check_at_least(fn, "dim", dim, 1);
    auto dst = span_of(fn, "out", out, checked_mul(fn, "max_context*dim", max_context, dim));
    tokpos::sinusoidal_table(dst, max_context, dim, base, 0);
  });
}

tokpos_status tokpos_sinusoidal_table_ex(void* out, tokpos_dtype dtype, int64_t max_context, int64_t dim,
                                         int64_t start, tokpos_layout layout, double base,
                                         double min_timescale, int64_t padding_idx) {
  constexpr const char* fn = "tokpos_sinusoidal_table_ex";
  return guard(fn, [&] {
    if (layout < TOKPOS_LAYOUT_INTERLEAVED || layout > TOKPOS_LAYOUT_GGML) {
      fail(Status::kInvalidArgument, fn, "layout ", static_cast<int>(layout), " is outside [0, 4]");
    }
    const DType d = dtype_arg(fn, "dtype", dtype, TOKPOS_DTYPE_F16);
    const int64_t n = tokpos::capi::count_of(fn, {{"max_context", max_context, 1}, {"dim", dim, 1}});
    tokpos::capi::check_buffer(fn, "out", out, n, tokpos::dtype_size(d));
    tokpos::TableOptions o{
        .layout = static_cast<tokpos::Layout>(layout),
        .base = base,
        .min_timescale = min_timescale,
        .padding_idx = optional_row(padding_idx)};
    tokpos::position_table(out, d, max_context, dim, start, o);
  });
}

}  // extern "C"

namespace {
// tokpos_compose_forward(_ex): the raw buffers as views, then the op. B = 0
// or T = 0 writes nothing and succeeds, NULL buffers included.
tokpos_status compose_forward_shim(const char* fn, void* out, tokpos_dtype out_dtype, const int64_t* ids, int64_t B,
                                   int64_t T, const void* token_table, tokpos_dtype token_dtype, int64_t V,
                                   const void* pos_table, tokpos_dtype pos_dtype, int64_t L, int64_t D) {
  return guard(fn, [&] {
    const bool used = B > 0 && T > 0;
    const DType od = dtype_arg(fn, "out_dtype", out_dtype, TOKPOS_DTYPE_BF16, true);
    const DType td = dtype_arg(fn, "token_dtype", token_dtype, TOKPOS_DTYPE_F16, true);
    const DType pd = dtype_arg(fn, "pos_dtype", pos_dtype, TOKPOS_DTYPE_F16, true);
    const TensorView o = tensor_of(fn, "out", out, od, {{"B", B}, {"T", T}, {"D", D, 1}}, used);
    const TensorView i = tensor_of(fn, "ids", ids, DType::kI64, {{"B", B}, {"T", T}}, used);
    const TensorView tok = tensor_of(fn, "token_table", token_table, td, {{"V", V, 1}, {"D", D, 1}}, used);
    const TensorView pos = tensor_of(fn, "pos_table", pos_table, pd, {{"L", L, 1}, {"D", D, 1}}, used);
    if (used) tokpos::ops::compose_forward(o, i, tok, pos.get(), nullptr, 0, {.where = fn});
  });
}
}  // namespace

extern "C" {

tokpos_status tokpos_compose_forward(float* out, const int64_t* ids, int64_t B, int64_t T,
                                     const float* token_table, int64_t V, const float* pos_table, int64_t L,
                                     int64_t D) {
  return compose_forward_shim("tokpos_compose_forward", out, TOKPOS_DTYPE_F32, ids, B, T, token_table,
                              TOKPOS_DTYPE_F32, V, pos_table, TOKPOS_DTYPE_F32, L, D);
}

tokpos_status tokpos_compose_forward_ex(void* out, tokpos_dtype out_dtype, const int64_t* ids, int64_t B,
                                        int64_t T, const void* token_table, tokpos_dtype token_dtype,
                                        int64_t V, const void* pos_table, tokpos_dtype pos_dtype, int64_t L,
                                        int64_t D) {
  return compose_forward_shim("tokpos_compose_forward_ex", out, out_dtype, ids, B, T, token_table, token_dtype, V,
                              pos_table, pos_dtype, L, D);
}

tokpos_status tokpos_compose_backward(float* d_token_table, float* d_pos_table, const float* d_out,
                                      const int64_t* ids, int64_t B, int64_t T, int64_t V, int64_t L,
                                      int64_t D) {
  constexpr const char* fn = "tokpos_compose_backward";
  return guard(fn, [&] {
    const bool used = B > 0 && T > 0;  // an empty batch changes nothing and succeeds, NULL buffers included
    const TensorView g = tensor_of(fn, "d_out", d_out, DType::kF32, {{"B", B}, {"T", T}, {"D", D, 1}}, used);
    const TensorView i = tensor_of(fn, "ids", ids, DType::kI64, {{"B", B}, {"T", T}}, used);
    const TensorView d_tok =
        tensor_of(fn, "d_token_table", d_token_table, DType::kF32, {{"V", V, 1}, {"D", D, 1}}, used);
    const TensorView d_pos =
        tensor_of(fn, "d_pos_table", d_pos_table, DType::kF32, {{"L", L, 1}, {"D", D, 1}}, used && d_pos_table);
    if (used)
      tokpos::ops::compose_backward(d_tok.get(), d_pos_table ? d_pos.get() : nullptr, g, i, nullptr, 0, {.where = fn});
  });
}

tokpos_status tokpos_op_compose_forward(const DLTensor* out, const DLTensor* ids, const DLTensor* token_table,
                                        const DLTensor* pos_table, const DLTensor* position_ids, int64_t start) {
  constexpr const char* fn = "tokpos_op_compose_forward";
  return guard(fn, [&] {
    const DLTensor& o = tensor_arg(fn, "out", out);
    const DLTensor& i = tensor_arg(fn, "ids", ids);
    tokpos::ops::compose_forward(o, i, tensor_arg(fn, "token_table", token_table), pos_table, position_ids, start,
                                 {.where = fn});
  });
}

tokpos_status tokpos_op_compose_backward(const DLTensor* d_token_table, const DLTensor* d_pos_table,
                                         const DLTensor* d_out, const DLTensor* ids, const DLTensor* position_ids,
                                         int64_t start) {
  constexpr const char* fn = "tokpos_op_compose_backward";
  return guard(fn, [&] {
    const DLTensor& g = tensor_arg(fn, "d_out", d_out);
    tokpos::ops::compose_backward(d_token_table, d_pos_table, g, tensor_arg(fn, "ids", ids), position_ids, start,
                                  {.where = fn});
  });
}

// vocab_size 0 would mean "not a shard" to the op: here it is an error.
tokpos_status tokpos_op_compose_forward_shard(const DLTensor* out, const DLTensor* ids, const DLTensor* shard_table,
                                              int64_t vocab_size, int64_t row_begin, const DLTensor* pos_table,
                                              const DLTensor* position_ids, int64_t start) {
  constexpr const char* fn = "tokpos_op_compose_forward_shard";
  return guard(fn, [&] {
    const DLTensor& o = tensor_arg(fn, "out", out);
    const DLTensor& i = tensor_arg(fn, "ids", ids);
    const DLTensor& shard = tensor_arg(fn, "shard_table", shard_table);
    check_at_least(fn, "vocab_size", vocab_size, 1);
    tokpos::ops::compose_forward(o, i, shard, pos_table, position_ids, start,
                                 {.where = fn, .shard = {vocab_size, row_begin}});
  });
}

tokpos_status tokpos_op_compose_backward_shard(const DLTensor* d_shard_table, const DLTensor* d_pos_table,
                                               const DLTensor* d_out, const DLTensor* ids, int64_t vocab_size,
                                               int64_t row_begin, const DLTensor* position_ids, int64_t start) {
  constexpr const char* fn = "tokpos_op_compose_backward_shard";
  return guard(fn, [&] {
    const DLTensor& g = tensor_arg(fn, "d_out", d_out);
    const DLTensor& i = tensor_arg(fn, "ids", ids);
    check_at_least(fn, "vocab_size", vocab_size, 1);
    tokpos::ops::compose_backward(d_shard_table, d_pos_table, g, i, position_ids, start,
                                  {.where = fn, .shard = {vocab_size, row_begin}});
  });
}

tokpos_status tokpos_vocab_shard_range(int64_t* row_begin, int64_t* rows, int64_t vocab_size,
                                       int64_t pad_to_multiple_of, int world_size, int rank) {
  constexpr const char* fn = "tokpos_vocab_shard_range";
  return guard(fn, [&] {
    tokpos::detail::check_not_null(fn, "row_begin", row_begin);
    tokpos::detail::check_not_null(fn, "rows", rows);
    const auto r = tokpos::ops::vocab_shard_range(vocab_size, pad_to_multiple_of, world_size, rank);
    *row_begin = r.row_begin;
    *rows = r.rows;
  });
}

tokpos_status tokpos_token_table_rows(float* table, int64_t row_begin, int64_t rows, int64_t vocab_size, int64_t D,
                                      uint64_t seed) {
  constexpr const char* fn = "tokpos_token_table_rows";
  return guard(fn, [&] {
    check_at_least(fn, "vocab_size", vocab_size, 1);
    check_at_least(fn, "D", D, 1);
    check_at_least(fn, "row_begin", row_begin, 0);
    check_at_least(fn, "rows", rows, 0);
    if (row_begin > INT64_MAX - rows)
      fail(Status::kSizeOverflow, fn, "row_begin + rows = ", row_begin, " + ", rows, " overflows int64");
    auto dst = span_of(fn, "table", table, checked_mul(fn, "rows*D", rows, D));
    // The real rows [row_begin, min(row_begin + rows, V)) with the numbers the
    // whole table has there; padding rows zero.
    const int64_t real = std::clamp<int64_t>(vocab_size - row_begin, 0, rows);
    checked_mul(fn, "vocab_size*D", vocab_size, D);
    tokpos::fill_normal(dst.first(static_cast<size_t>(real * D)), seed,
                        tokpos::kTokenTableStream, 0.0, tokpos::TokenEmbeddingOptions{}.init_std,
                        static_cast<uint64_t>(std::min(row_begin, vocab_size)) * static_cast<uint64_t>(D));
    std::fill(dst.begin() + real * D, dst.end(), 0.0f);
  });
}

// ---- token embedding handle ------------------------------------------------

tokpos_status tokpos_token_embedding_create(tokpos_token_embedding** out, int64_t V, int64_t D,
                                            uint64_t seed) {
  constexpr const char* fn = "tokpos_token_embedding_create";
  return guard(fn, [&] {
    tokpos::detail::check_not_null(fn, "out", out);
    *out = new tokpos_token_embedding{tokpos::TokenEmbedding({.vocab_size = V, .dim = D, .seed = seed}), {}};
  });
}

tokpos_status tokpos_token_embedding_from_table(tokpos_token_embedding** out, const float* table, int64_t V,
                                                int64_t D, int frozen) {
  constexpr const char* fn = "tokpos_token_embedding_from_table";
  return guard(fn, [&] {
    tokpos::detail::check_not_null(fn, "out", out);
    auto src = span_of(fn, "table", table, {{"V", V, 1}, {"D", D, 1}});
    *out = new tokpos_token_embedding{tokpos::TokenEmbedding::from_pretrained(
                                          {src.begin(), src.end()}, {.vocab_size = V, .dim = D}, frozen != 0),
                                      {}};
  });
}

tokpos_status tokpos_token_embedding_set_id_policy(tokpos_token_embedding* e, tokpos_id_policy policy,
                                                   int64_t unk_id) {
  constexpr const char* fn = "tokpos_token_embedding_set_id_policy";
  return guard(fn, [&] { handle(fn, e).module.set_id_policy(to_policy(fn, policy, unk_id)); });
}

tokpos_status tokpos_token_embedding_set_padding_idx(tokpos_token_embedding* e, int64_t padding_idx) {
  constexpr const char* fn = "tokpos_token_embedding_set_padding_idx";
  return guard(fn, [&] { handle(fn, e).module.set_padding_idx(optional_row(padding_idx)); });
}

tokpos_status tokpos_token_embedding_forward(const tokpos_token_embedding* e, const int64_t* ids, int64_t B,
                                             int64_t T, float* out) {
  constexpr const char* fn = "tokpos_token_embedding_forward";
  return guard(fn, [&] {
    const auto& m = handle(fn, e).module;
    const auto dst = span_of(fn, "out", out, {{"B", B}, {"T", T}, {"D", m.dim()}});
    m.forward(span_of(fn, "ids", ids, {{"B", B}, {"T", T}}), B, T, dst);
  });
}

tokpos_status tokpos_token_embedding_backward(tokpos_token_embedding* e, const float* d_out,
                                              const int64_t* ids, int64_t B, int64_t T,
                                              int64_t* num_touched) {
  constexpr const char* fn = "tokpos_token_embedding_backward";
  return guard(fn, [&] {
    auto& h = handle(fn, e);
    const auto src = span_of(fn, "d_out", d_out, {{"B", B}, {"T", T}, {"D", h.module.dim()}});
    h.touched = h.module.backward(src, span_of(fn, "ids", ids, {{"B", B}, {"T", T}}), B, T);
    if (num_touched) *num_touched = static_cast<int64_t>(h.touched.size());
  });
}

tokpos_status tokpos_token_embedding_touched_rows(const tokpos_token_embedding* e, int64_t* rows,
                                                  int64_t capacity, int64_t* count) {
  constexpr const char* fn = "tokpos_token_embedding_touched_rows";
  return guard(fn, [&] {
    const auto& h = handle(fn, e);
    check_at_least(fn, "capacity", capacity, 0);
    auto dst = span_of(fn, "rows", rows, std::min<int64_t>(capacity, h.touched.size()));
    std::copy_n(h.touched.begin(), dst.size(), dst.begin());
    if (count) *count = static_cast<int64_t>(h.touched.size());
  });
}

tokpos_status tokpos_token_embedding_table(const tokpos_token_embedding* e, const float** table) {
  constexpr const char* fn = "tokpos_token_embedding_table";
  return guard(fn, [&] {
    const auto& h = handle(fn, e);
    tokpos::detail::check_not_null(fn, "table", table);
    *table = h.module.table().data();
  });
}

tokpos_status tokpos_token_embedding_grad(tokpos_token_embedding* e, const float** grad) {
  constexpr const char* fn = "tokpos_token_embedding_grad";
  return guard(fn, [&] {
    auto& h = handle(fn, e);
    tokpos::detail::check_not_null(fn, "grad", grad);
    *grad = h.module.ensure_grad().data();
  });
}

tokpos_status tokpos_token_embedding_zero_grad(tokpos_token_embedding* e) {
  constexpr const char* fn = "tokpos_token_embedding_zero_grad";
  return guard(fn, [&] { handle(fn, e).module.zero_grad(); });
}

int64_t tokpos_token_embedding_num_parameters(const tokpos_token_embedding* e) {
  return e ? e->module.num_parameters() : -1;
}

void tokpos_token_embedding_free(tokpos_token_embedding* e) {
  delete e;
}

// ---- position embedding handle ---------------------------------------------

tokpos_status tokpos_position_embedding_create_learned(tokpos_position_embedding** out, int64_t L, int64_t D,
                                                       uint64_t seed) {
  constexpr const char* fn = "tokpos_position_embedding_create_learned";
  return guard(fn, [&] {
    tokpos::detail::check_not_null(fn, "out", out);
    *out = new tokpos_position_embedding{std::make_unique<tokpos::LearnedPositionalEmbedding>(
        tokpos::LearnedPositionalOptions{.max_context = L, .dim = D, .seed = seed})};
  });
}

tokpos_status tokpos_position_embedding_create_sinusoidal(tokpos_position_embedding** out, int64_t L,
                                                          int64_t D, double base) {
  constexpr const char* fn = "tokpos_position_embedding_create_sinusoidal";
  return guard(fn, [&] {
    tokpos::detail::check_not_null(fn, "out", out);
    *out = new tokpos_position_embedding{std::make_unique<tokpos::SinusoidalPositionalEmbedding>(
        tokpos::SinusoidalOptions{.max_context = L, .dim = D, .base = base})};
  });
}

tokpos_status tokpos_position_embedding_forward(const tokpos_position_embedding* p, int64_t T, int64_t start,
                                                float* out) {
  constexpr const char* fn = "tokpos_position_embedding_forward";
  return guard(fn, [&] {
    const auto& m = *handle(fn, p).module;
    m.forward(span_of(fn, "out", out, {{"T", T}, {"D", m.dim()}}), T, start);
  });
}

tokpos_status tokpos_position_embedding_backward(tokpos_position_embedding* p, const float* d_out, int64_t B,
                                                 int64_t T, int64_t start) {
  constexpr const char* fn = "tokpos_position_embedding_backward";
  return guard(fn, [&] {
    auto& m = *handle(fn, p).module;
    const auto src = span_of(fn, "d_out", d_out, {{"B", B}, {"T", T}, {"D", m.dim()}});
    m.check_positions(B, T, {.start = start}, fn);  // a sinusoidal table's backward is a no-op that checks nothing
    m.backward(src, B, T, {.start = start});
  });
}

tokpos_status tokpos_position_embedding_table(const tokpos_position_embedding* p, const float** table) {
  constexpr const char* fn = "tokpos_position_embedding_table";
  return guard(fn, [&] {
    const auto& m = *handle(fn, p).module;
    tokpos::detail::check_not_null(fn, "table", table);
    *table = m.table().data();
  });
}

tokpos_status tokpos_position_embedding_grad(tokpos_position_embedding* p, const float** grad) {
  constexpr const char* fn = "tokpos_position_embedding_grad";
  return guard(fn, [&] {
    auto& m = *handle(fn, p).module;
    tokpos::detail::check_not_null(fn, "grad", grad);
    auto g = m.ensure_grad();
    *grad = g.empty() ? nullptr : g.data();
  });
}

tokpos_status tokpos_position_embedding_zero_grad(tokpos_position_embedding* p) {
  constexpr const char* fn = "tokpos_position_embedding_zero_grad";
  return guard(fn, [&] { handle(fn, p).module->zero_grad(); });
}

int64_t tokpos_position_embedding_num_parameters(const tokpos_position_embedding* p) {
  return p ? p->module->num_parameters() : -1;
}

void tokpos_position_embedding_free(tokpos_position_embedding* p) {
  delete p;
}

// ---- composer handle -------------------------------------------------------

tokpos_composer_options tokpos_composer_default_options(int64_t V, int64_t D, int64_t L) {
  tokpos_composer_options o;
  o.vocab_size = V;
  o.dim = D;
  o.max_context = L;
  o.position = TOKPOS_POSITION_SINUSOIDAL;
  o.seed = 0;
  o.init_std = 0.02;
  o.base = tokpos::kDefaultBase;
  o.id_policy = TOKPOS_IDS_ERROR;
  o.unk_id = 1;
  o.padding_idx = -1;
  return o;
}

tokpos_status tokpos_composer_create(tokpos_composer** out, const tokpos_composer_options* o) {
  constexpr const char* fn = "tokpos_composer_create";
  return guard(fn, [&] {
    tokpos::detail::check_not_null(fn, "out", out);
    tokpos::detail::check_not_null(fn, "options", o);
    tokpos::TokenEmbedding token(
        {.vocab_size = o->vocab_size,
         .dim = o->dim,
         .seed = o->seed,
         .init_std = o->init_std,
         .padding_idx = optional_row(o->padding_idx),
         .id_policy = to_policy(fn, o->id_policy, o->unk_id)});
    std::unique_ptr<tokpos::PositionalEmbedding> position;
    switch (o->position) {
      case TOKPOS_POSITION_LEARNED:
        position = std::make_unique<tokpos::LearnedPositionalEmbedding>(tokpos::LearnedPositionalOptions{
            .max_context = o->max_context, .dim = o->dim, .seed = o->seed, .init_std = o->init_std});
        break;
      case TOKPOS_POSITION_SINUSOIDAL:
        position = std::make_unique<tokpos::SinusoidalPositionalEmbedding>(
            tokpos::SinusoidalOptions{.max_context = o->max_context, .dim = o->dim, .base = o->base});
        break;
      default:
        fail(Status::kInvalidArgument, fn, "position kind ", static_cast<int>(o->position),
             " is not TOKPOS_POSITION_LEARNED (0) or TOKPOS_POSITION_SINUSOIDAL (1)");
    }
    *out = new tokpos_composer{tokpos::EmbeddingComposer(std::move(token), std::move(position)), {}};
  });
}

}  // extern "C"

namespace {
tokpos::ComposeOptions compose_options(const char* fn, const int64_t* position_ids, int64_t B, int64_t T,
                                       int64_t start) {
  tokpos::ComposeOptions o;
  o.positions.start = start;
  if (position_ids != nullptr) o.positions.ids = span_of(fn, "position_ids", position_ids, {{"B", B}, {"T", T}});
  return o;
}
}  // namespace

extern "C" {

tokpos_status tokpos_composer_forward(const tokpos_composer* c, const int64_t* ids, int64_t B, int64_t T,
                                      int64_t start, const int64_t* position_ids, float* out) {
  constexpr const char* fn = "tokpos_composer_forward";
  return guard(fn, [&] {
    const auto& m = handle(fn, c).module;
    const auto dst = span_of(fn, "out", out, {{"B", B}, {"T", T}, {"D", m.dim()}});
    m.forward(span_of(fn, "ids", ids, {{"B", B}, {"T", T}}), B, T, dst, compose_options(fn, position_ids, B, T, start));
  });
}

tokpos_status tokpos_composer_backward(tokpos_composer* c, const float* d_out, const int64_t* ids, int64_t B,
                                       int64_t T, int64_t start, const int64_t* position_ids,
                                       int64_t* num_touched) {
  constexpr const char* fn = "tokpos_composer_backward";
  return guard(fn, [&] {
    auto& h = handle(fn, c);
    const auto src = span_of(fn, "d_out", d_out, {{"B", B}, {"T", T}, {"D", h.module.dim()}});
    h.touched = h.module.backward(src, span_of(fn, "ids", ids, {{"B", B}, {"T", T}}), B, T,
                                  compose_options(fn, position_ids, B, T, start));
    if (num_touched) *num_touched = static_cast<int64_t>(h.touched.size());
  });
}

tokpos_status tokpos_composer_token_table(const tokpos_composer* c, const float** t) {
  constexpr const char* fn = "tokpos_composer_token_table";
  return guard(fn, [&] {
    const auto& m = handle(fn, c).module;
    tokpos::detail::check_not_null(fn, "t", t);
    *t = m.token().table().data();
  });
}

tokpos_status tokpos_composer_position_table(const tokpos_composer* c, const float** t) {
  constexpr const char* fn = "tokpos_composer_position_table";
  return guard(fn, [&] {
    const auto& m = handle(fn, c).module;
    tokpos::detail::check_not_null(fn, "t", t);
    *t = m.position().table().data();
  });
}

tokpos_status tokpos_composer_token_grad(tokpos_composer* c, const float** g) {
  constexpr const char* fn = "tokpos_composer_token_grad";
  return guard(fn, [&] {
    auto& m = handle(fn, c).module;
    tokpos::detail::check_not_null(fn, "g", g);
    *g = m.token().ensure_grad().data();
  });
}

tokpos_status tokpos_composer_position_grad(tokpos_composer* c, const float** g) {
  constexpr const char* fn = "tokpos_composer_position_grad";
  return guard(fn, [&] {
    auto& m = handle(fn, c).module;
    tokpos::detail::check_not_null(fn, "g", g);
    auto grad = m.position().ensure_grad();
    *g = grad.empty() ? nullptr : grad.data();
  });
}

tokpos_status tokpos_composer_zero_grad(tokpos_composer* c) {
  constexpr const char* fn = "tokpos_composer_zero_grad";
  return guard(fn, [&] { handle(fn, c).module.zero_grad(); });
}

int64_t tokpos_composer_num_parameters(const tokpos_composer* c) {
  return c ? c->module.num_parameters() : -1;
}

void tokpos_composer_free(tokpos_composer* c) {
  delete c;
}

}  // extern "C"
