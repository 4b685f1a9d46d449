// The C API of RoPE: shims over tokpos/rope.h. Each turns its raw pointers,
// enum values and flags into the C++ arguments (capi/buffers.h); the C++
// function checks every value.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "capi/buffers.h"
#include "capi/guard.h"
#include "common/check.h"
#include "tokpos/rope.h"
#include "tokpos/tokpos.h"

namespace {

std::optional<double> real_key(double v) { return std::isnan(v) ? std::nullopt : std::optional<double>(v); }
std::optional<int64_t> length_key(int64_t v) { return v == 0 ? std::nullopt : std::optional<int64_t>(v); }

std::vector<double> factor_list(const char* fn, const char* name, const char* len_name, const double* p, int64_t n) {
  const std::span<const double> values = tokpos::capi::span_of(fn, name, p, {{len_name, n}});
  return std::vector<double>(values.begin(), values.end());
}

// The C struct as the C++ scaling: enum values and flags checked, "absent"
// markers turned into empty optionals, factor lists copied. NULL: the default.
tokpos::RopeScaling scaling_of(const char* fn, const tokpos_rope_scaling* scaling) {
  using tokpos::detail::fail;
  tokpos::RopeScaling s;
  if (scaling == nullptr) return s;
  const int type = static_cast<int>(scaling->type);
  if (type < 0 || type > TOKPOS_ROPE_PROPORTIONAL) {
    fail(tokpos::Status::kInvalidArgument, fn, "scaling->type = ", type,
         " is not a tokpos_rope_type (0 default .. 6 proportional)");
  }
  if (scaling->truncate != 0 && scaling->truncate != 1) {
    fail(tokpos::Status::kInvalidArgument, fn, "scaling->truncate = ", scaling->truncate, " must be 0 or 1");
  }
  s.type = static_cast<tokpos::RopeType>(type);
  s.factor = real_key(scaling->factor);
  s.original_max_position_embeddings = length_key(scaling->original_max_position_embeddings);
  s.max_position_embeddings = length_key(scaling->max_position_embeddings);
  s.low_freq_factor = real_key(scaling->low_freq_factor);
  s.high_freq_factor = real_key(scaling->high_freq_factor);
  s.beta_fast = real_key(scaling->beta_fast);
  s.beta_slow = real_key(scaling->beta_slow);
  s.mscale = real_key(scaling->mscale);
  s.mscale_all_dim = real_key(scaling->mscale_all_dim);
  s.attention_factor = real_key(scaling->attention_factor);
  s.truncate = scaling->truncate == 1;
  s.short_factor =
      factor_list(fn, "short_factor", "short_factor_len", scaling->short_factor, scaling->short_factor_len);
  s.long_factor = factor_list(fn, "long_factor", "long_factor_len", scaling->long_factor, scaling->long_factor_len);
  s.partial_rotary_factor = real_key(scaling->partial_rotary_factor);
  return s;
}

}  // namespace

extern "C" {

void tokpos_rope_scaling_init(tokpos_rope_scaling* s) {
  if (s == nullptr) return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  *s = tokpos_rope_scaling{};
  s->type = TOKPOS_ROPE_DEFAULT;
  s->factor = s->low_freq_factor = s->high_freq_factor = nan;
  s->beta_fast = s->beta_slow = s->mscale = s->mscale_all_dim = s->attention_factor = nan;
  s->partial_rotary_factor = nan;
  s->truncate = 1;
}

tokpos_status tokpos_rope_frequencies(double* inv_freq, double* attention_factor, int64_t dim, double base,
                                      const tokpos_rope_scaling* scaling, int64_t seq_len) {
  constexpr const char* fn = "tokpos_rope_frequencies";
  return tokpos::capi::guard(fn, [&] {
    tokpos::detail::check_not_null(fn, "inv_freq", inv_freq);
    tokpos::detail::check_not_null(fn, "attention_factor", attention_factor);
    const tokpos::RopeScaling s = scaling_of(fn, scaling);
    const tokpos::RopeFrequencies r =
        tokpos::rope_frequencies(dim, base, s, seq_len != 0 ? std::optional<int64_t>(seq_len) : std::nullopt);
    const auto n = static_cast<int64_t>(r.inv_freq.size());
    const std::span<double> out = tokpos::capi::span_of(fn, "inv_freq", inv_freq, n);
    const std::span<double> factor = tokpos::capi::span_of(fn, "attention_factor", attention_factor, 1);
    tokpos::detail::check_disjoint(fn, "attention_factor", factor, "inv_freq", out);
    std::copy(r.inv_freq.begin(), r.inv_freq.end(), out.begin());
    factor[0] = r.attention_factor;
  });
}

// The layout of a C call, checked with its inverse flag (0 or 1).
static tokpos::RopeLayout layout_arg(const char* fn, tokpos_rope_layout layout, int inverse) {
  using tokpos::detail::fail;
  if (layout != TOKPOS_ROPE_HALF && layout != TOKPOS_ROPE_INTERLEAVED) {
    fail(tokpos::Status::kInvalidArgument, fn, "layout = ", static_cast<int>(layout),
         " is not TOKPOS_ROPE_HALF (0) or TOKPOS_ROPE_INTERLEAVED (1)");
  }
  if (inverse != 0 && inverse != 1) fail(tokpos::Status::kInvalidArgument, fn, "inverse = ", inverse, " must be 0 or 1");
  return layout == TOKPOS_ROPE_HALF ? tokpos::RopeLayout::kHalf : tokpos::RopeLayout::kInterleaved;
}

tokpos_status tokpos_op_apply_rope(const DLTensor* out, const DLTensor* x, const DLTensor* positions,
                                   const double* inv_freq, int64_t n_freq, tokpos_rope_layout layout,
                                   int64_t rotary_dim, double attention_factor, int inverse) {
  constexpr const char* fn = "tokpos_op_apply_rope";
  return tokpos::capi::guard(fn, [&] {
    using tokpos::detail::fail;
    const DLTensor& o = tokpos::capi::tensor_arg(fn, "out", out);
    const DLTensor& xt = tokpos::capi::tensor_arg(fn, "x", x);
    const DLTensor& p = tokpos::capi::tensor_arg(fn, "positions", positions);
    const std::span<const double> freqs = tokpos::capi::span_of(fn, "inv_freq", inv_freq, {{"n_freq", n_freq}});
    tokpos::RopeApplyOptions options;
    options.layout = layout_arg(fn, layout, inverse);
    options.rotary_dim = rotary_dim < 0 ? -1 : rotary_dim;
    options.attention_factor = attention_factor;
    options.inverse = inverse == 1;
    options.where = fn;
    tokpos::ops::apply_rope(o, xt, p, freqs, options);
  });
}

tokpos_status tokpos_op_apply_rope_tables(const DLTensor* out, const DLTensor* x, const DLTensor* cos,
                                          const DLTensor* sin, tokpos_rope_layout layout, int inverse) {
  constexpr const char* fn = "tokpos_op_apply_rope_tables";
  return tokpos::capi::guard(fn, [&] {
    const DLTensor& o = tokpos::capi::tensor_arg(fn, "out", out);
    const DLTensor& xt = tokpos::capi::tensor_arg(fn, "x", x);
    const DLTensor& c = tokpos::capi::tensor_arg(fn, "cos", cos);
    const DLTensor& s = tokpos::capi::tensor_arg(fn, "sin", sin);
    tokpos::RopeTablesOptions options;
    options.layout = layout_arg(fn, layout, inverse);
    options.inverse = inverse == 1;
    options.where = fn;
    tokpos::ops::apply_rope_tables(o, xt, c, s, options);
  });
}

}  // extern "C"
