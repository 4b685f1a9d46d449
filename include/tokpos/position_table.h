// tokpos/position_table.h: exact sinusoidal position tables in every published layout,
// and the seeds' formula (the interleaved layout) by its own names.
//
// Every entry is the exact real value rounded to nearest-even in the output
// type (float32, bfloat16 or float16): for float32 that is within 2^-25 of the
// exact value, inside the 2^-24 contract. This holds for positions below 2^32
// and any D; docs/precision.md says how, docs/layouts.md lists the layouts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tokpos/dtype.h"

#include "tokpos/export.h"

namespace tokpos {

// The base of "Attention Is All You Need" and both seeds.
inline constexpr double kDefaultBase = 10000.0;

enum class Layout {
  kInterleaved,  // sin, cos, sin, cos, ...;  w_k = base^(-2k/D)           (the seeds, DistilBERT/XLM, Keras)
  kHalves,       // [sin ... | cos ...];      w_k = base^(-2k/D)           (Marian)
  kFairseq,      // [sin | cos | 0 if odd D]; w_k = base^(-k/(D/2 - 1)), zero padding row (fairseq, M2M100)
  kT2T,   // [sin | cos | 0 if odd D]; w_k = min_ts (max_ts/min_ts)^(-k/max(D/2 - 1, 1))  (tensor2tensor)
  kGgml,  // [cos | sin | 0 if odd D]; w_k = base^(-k/(D/2))         (ggml timestep embedding)
};

struct TableOptions {
  Layout layout = Layout::kInterleaved;
  double base = kDefaultBase;               // base; tensor2tensor's max_timescale; ggml's max_period
  double min_timescale = 1.0;               // tensor2tensor only
  std::optional<int64_t> padding_idx = {};  // fairseq only: the row of this position is all zeros
};

TOKPOS_API const char* layout_name(Layout layout);  // "interleaved", "halves", ...
TOKPOS_API std::optional<Layout> parse_layout(std::string_view name);
// Every layout, in enum order: the one list behind every list of layout names.
TOKPOS_API std::span<const Layout> all_layouts();

// Number of sin/cos frequency pairs of the layout at width D.
TOKPOS_API int64_t num_frequency_pairs(Layout layout, int64_t D);
// The columns of each pair that has both halves, in pair order.
struct PairColumns {
  int64_t sin_col;
  int64_t cos_col;
};
TOKPOS_API std::vector<PairColumns> pair_columns(Layout layout, int64_t D);

// Frequency of pair k in radians per position (exact value rounded to double).
TOKPOS_API double frequency(int64_t k, int64_t D, const TableOptions& options);

// out holds L*D values of dtype (float, or the uint16 bits of bf16/f16):
// row r is the encoding of position start + r. Overwrites out.
// Throws Error(kInvalidArgument) for L, D < 1, start < 0, a bad base or
// min_timescale, a padding_idx with another layout; kSizeOverflow if
// L*D overflows. Parallel, and identical for every thread count.
TOKPOS_API void position_table(void* out, DType dtype, int64_t L, int64_t D, int64_t start,
                               const TableOptions& options);
TOKPOS_API std::vector<float> position_table(int64_t L, int64_t D, int64_t start = 0,
                                             const TableOptions& options = {});

// One entry of the table (the same bits as position_table), in float.
TOKPOS_API float position_value(int64_t pos, int64_t i, int64_t D, const TableOptions& options = {});

// Reorders the columns of an (L, D) table between kInterleaved and kHalves
// (the same frequencies): interleaved (2k, 2k+1) <-> halves (k, ceil(D/2)+k).
// out and in must not overlap.
TOKPOS_API void convert_layout(std::span<float> out, std::span<const float> in, int64_t L, int64_t D,
                               Layout from, Layout to);

// ---- The seeds' formula: the interleaved layout ---------------------------
//
// For position p, feature i and model width D ("Attention Is All You Need",
// both seeds, and tensor2tensor's first paper):
//   angle(p, i) = p / base^(2*(i/2)/D)        (i/2 is integer division)
//   PE(p, i)    = sin(angle) for even i, cos(angle) for odd i
// Odd D is allowed: the last feature is then a lone sin. These are the
// interleaved case of the functions above, with the same bits and errors.

// Frequency of feature i (0 <= i < D, else Error(kInvalidArgument)):
// base^(-2*(i/2)/D), frequency(i / 2, D) of the interleaved layout.
TOKPOS_API double sinusoidal_frequency(int64_t i, int64_t D, double base = kDefaultBase);

// One element, PE(pos, i) for width D: seed 002's pe(pos, dim, hidden_dim).
// position_value's errors: pos < 0, i outside [0, D), a bad base.
inline float sinusoidal_value(int64_t pos, int64_t i, int64_t D, double base = kDefaultBase) {
  return position_value(pos, i, D, {.layout = Layout::kInterleaved, .base = base});
}

// out (L, D): row r holds PE(start + r, :). Overwrites out; out.size() must
// be L*D (else Error(kShapeMismatch)); position_table's other errors.
TOKPOS_API void sinusoidal_table(std::span<float> out, int64_t L, int64_t D, double base = kDefaultBase,
                                 int64_t start = 0);

}  // namespace tokpos
