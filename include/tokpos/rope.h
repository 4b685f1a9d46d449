// tokpos/rope.h: rotary position embeddings (RoPE).
//
// rope_frequencies gives the inverse frequencies inv_freq[i], i < dim/2, and
// the attention factor of each scaling scheme in transformers'
// modeling_rope_utils.ROPE_INIT_FUNCTIONS, computed in double
// (docs/positions.md, "RoPE", states each formula). dim is the rotary
// dimension (head_dim times partial_rotary_factor), except for proportional,
// whose dim is the head dimension (it reads partial_rotary_factor itself).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tokpos/export.h"
#include "tokpos/ops.h"

namespace tokpos {

enum class RopeType : int {
  kDefault = 0,   // inv_freq[i] = base^(-2i/dim)
  kLinear = 1,    // default / factor (position interpolation)
  kDynamic = 2,   // dynamic NTK: base grows with seq_len past max_position_embeddings
  kYarn = 3,      // YaRN: a ramp between interpolation and extrapolation, and an attention factor
  kLongrope = 4,  // LongRoPE (Phi-3): per-frequency short or long factors
  kLlama3 = 5,    // Llama 3.1: low frequencies / factor, high ones kept, a smooth ramp between
  kProportional = 6,  // transformers 5.x: the head's default frequencies, the first
                      // int(partial_rotary_factor * dim // 2) / factor, the rest 0
};

// "default", "linear", "dynamic", "yarn", "longrope", "llama3",
// "proportional"; anything else
// is Error(kInvalidArgument) naming it and listing these.
TOKPOS_API RopeType rope_type_from_name(std::string_view name);
TOKPOS_API const char* rope_type_name(RopeType type) noexcept;

// The type of a Hugging Face rope_scaling / rope_parameters dict, from its
// "rope_type" and "type" keys (nullopt: the dict lacks that key), as every
// front end reads it (the CLI's --scaling, Python's scaling=): "rope_type",
// or "type" (the older spelling) when the dict has no "rope_type"; both
// present naming different types is Error(kInvalidArgument) naming both
// values (transformers reads rope_type, older code type: a dict that
// disagrees with itself is refused, not resolved); neither present is
// Error(kInvalidArgument). A name is read by rope_type_from_name.
TOKPOS_API RopeType rope_scaling_type(std::optional<std::string_view> rope_type, std::optional<std::string_view> type);

// The keys of a Hugging Face config's rope_scaling / rope_parameters. An
// empty optional (an empty vector) is a key the config lacks; a type reads
// only its own keys and ignores the rest.
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  std::optional<double> factor;                              // proportional: absent is 1
  std::optional<int64_t> original_max_position_embeddings;
  std::optional<int64_t> max_position_embeddings;
  std::optional<double> low_freq_factor, high_freq_factor;  // llama3
  std::optional<double> beta_fast, beta_slow;                // yarn (0 or absent: 32 and 1)
  std::optional<double> mscale, mscale_all_dim;              // yarn (0 or absent: unused)
  std::optional<double> attention_factor;                    // yarn, longrope
  bool truncate = true;                                      // yarn
  std::vector<double> short_factor, long_factor;             // longrope, dim/2 each
  std::optional<double> partial_rotary_factor;               // proportional, in (0, 1] (absent: 1)
};

struct RopeFrequencies {
  std::vector<double> inv_freq;  // dim / 2 entries
  double attention_factor = 1.0;
};

// The largest rotary dimension rope_frequencies takes (dim / 2 frequencies).
inline constexpr int64_t kRopeMaxDim = int64_t{1} << 20;

// Throws Error(kInvalidArgument) naming the key, its value and its limit for
// an odd or non-positive dim, a dim above kRopeMaxDim, an attention factor
// (given or computed) that is 0 or inf as a float32 (outside [2^-149,
// FLT_MAX]: apply_rope scales float32 cos and sin by it), base or factor NaN, infinite or <= 0, a key the
// type needs and the scaling lacks, beta_fast <= beta_slow, low_freq_factor
// >= high_freq_factor, short_factor or long_factor of a length other than
// dim/2, a partial_rotary_factor outside (0, 1] (NaN included; read by
// proportional only), and seq_len < 0. seq_len (the current sequence length)
// matters to dynamic and longrope only.
TOKPOS_API RopeFrequencies rope_frequencies(int64_t dim, double base, const RopeScaling& scaling = {},
                                            std::optional<int64_t> seq_len = std::nullopt);

// ---- Application ----------------------------------------------------------------

// kHalf: GPT-NeoX / transformers' rotate_half, pairs (i, i + rotary_dim/2);
// kInterleaved: GPT-J / Meta's Llama, pairs (2i, 2i + 1).
enum class RopeLayout : int { kHalf = 0, kInterleaved = 1 };

struct RopeApplyOptions {
  RopeLayout layout = RopeLayout::kHalf;
  // The rotated leading dims of each head: 2 * inv_freq.size(), which any
  // value >= 0 given here must equal; the dims after it are copied. -1: that.
  int64_t rotary_dim = -1;
  double attention_factor = 1.0;  // multiplies float32 cos and sin; in [2^-149, FLT_MAX]
  bool inverse = false;           // the transposed rotation (the backward)
  const char* where = nullptr;    // names the caller in messages; nullptr: "apply_rope"
};

struct RopeTablesOptions {
  RopeLayout layout = RopeLayout::kHalf;
  bool inverse = false;         // the transposed map (the backward)
  const char* where = nullptr;  // names the caller in messages; nullptr: "apply_rope_tables"
};

namespace ops {

// out = RoPE(x): x and out (B, T, H, D) with positions (B, T), or (T, H, D)
// with positions (T); float32, bfloat16 or float16 (out's dtype = x's);
// positions int32 or int64 in [0, 2^31). For each pair i of the layout,
// with angle positions[b, t] * inv_freq[i]:
//   out0 = x0 * c - x1 * s,   out1 = x1 * c + x0 * s
// in float32, rounded once to the dtype, where c and s are cos and sin of the
// exactly reduced angle times attention_factor, each within 2^-24 of the
// exact value when attention_factor is 1 (docs/precision.md). inverse
// negates s. out may be x itself (in place) but may not overlap it
// otherwise. inv_freq: finite, |inv_freq[i]| <= 2^20. Throws Error naming
// the argument, the value and the limit; nothing is written then.
TOKPOS_API void apply_rope(const DLTensor& out, const DLTensor& x, const DLTensor& positions,
                           std::span<const double> inv_freq, const RopeApplyOptions& options = {},
                           const Context* ctx = nullptr);

// out = x rotated by the caller's cos and sin, as transformers'
// apply_rotary_pos_emb computes q * cos + rotate_half(q) * sin in x's dtype:
// x and out (B, T, H, D) with cos and sin (B, T, R), or (T, H, D) with (T, R);
// float32, bfloat16 or float16, all four of one dtype; R even and <= D (the
// rotated dims; the rest are copied); any strides with contiguous rows (a
// stride of 0 shares a cos row between batch rows). For each pair (j0, j1)
// of the layout ((i, i + R/2) for kHalf, transformers' rotate_half;
// (2i, 2i + 1) for kInterleaved), with c and s the (b, t) rows:
//   out[j0] = x[j0] * c[j0] - x[j1] * s[j0],   out[j1] = x[j1] * c[j1] + x[j0] * s[j1]
// each product and the sum rounded to the dtype, as torch rounds each
// elementwise op (so float32 results are torch's bit for bit, and bfloat16
// and float16 ones are torch's CPU eager results). inverse: the transposed map,
//   out[j0] = x[j0] * c[j0] + x[j1] * s[j1],   out[j1] = x[j1] * c[j1] - x[j0] * s[j0]
// (the gradient with respect to x). out may be x itself but may not
// overlap it otherwise, nor cos or sin. Throws Error naming the argument,
// the value and the limit; nothing is written then.
TOKPOS_API void apply_rope_tables(const DLTensor& out, const DLTensor& x, const DLTensor& cos, const DLTensor& sin,
                                  const RopeTablesOptions& options = {}, const Context* ctx = nullptr);

}  // namespace ops
}  // namespace tokpos
