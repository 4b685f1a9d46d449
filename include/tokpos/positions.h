// tokpos/positions.h: position ids as the models compute them, and ALiBi.
//
// One implementation of each rule, shared by the presets, the command-line
// tool, the C API and the Python package (docs/positions.md has the formulas,
// their sources and the models that use them).
//
// The tensor functions take DLTensors as the ops do (tokpos/ops.h): ids,
// masks, positions and cu_seqlens int32 or int64, any strides, kDLCPU; ALiBi
// biases float32, bfloat16 or float16 with a unit innermost stride. Every
// argument and every value is checked before anything is written: a call that
// throws tokpos::Error leaves its output as it was, and the message names the
// bad value, where it is and its limit. An output may not overlap an input.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <span>
#include <vector>

#include "tokpos/export.h"

namespace tokpos {

// ---- Position ids ----

// transformers' generation rule (GPT-2, Llama and most decoders when they
// generate from a left-padded batch): along each row of `mask` (B, S), which
// covers the cached tokens and the new ones, position = cumsum(mask) - 1, and
// 1 where mask is 0. `out` (B, T), T <= S, receives the last T columns.
// Mask values other than 0 and 1 are Error(kInvalidArgument) naming the value
// and its (b, s).
TOKPOS_API void position_ids_from_mask(const DLTensor* mask, const DLTensor* out);
// The same with pad_value where mask is 0: transformers 5.x's generation
// (GenerationMixin._prepare_position_ids_for_generation) puts 0 there, 4.x's
// prepare_inputs_for_generation put 1 (the function above). Any int64 is
// accepted: the value is written, never used as an index here.
TOKPOS_API void position_ids_from_mask(const DLTensor* mask, const DLTensor* out, int64_t pad_value);
// The same on a row-major int64 mask (B, S); returns (B, T) row-major.
TOKPOS_API std::vector<int64_t> position_ids_from_mask(std::span<const int64_t> mask, int64_t B, int64_t S,
                                                       int64_t T);

// RoBERTa / XLM-R (transformers' create_position_ids_from_input_ids):
// position = (cumsum(ids != padding_idx) + past_length) * (ids != padding_idx)
//            + padding_idx
// along each row; pads get padding_idx, the first real token padding_idx + 1
// + past_length. ids (B, S) or (S); out the same shape.
TOKPOS_API void roberta_position_ids(const DLTensor* ids, int64_t padding_idx, int64_t past_length,
                                     const DLTensor* out);

// Packed sequences (flash-attn's varlen layout): documents d = 0..D-1 occupy
// [cu_seqlens[d], cu_seqlens[d+1]) of N = cu_seqlens[D] tokens, and positions
// restart at `start` in each: out[n] = start + n - cu_seqlens[d]. cu_seqlens
// (D + 1) must start at 0 and never decrease (empty documents are allowed);
// out is (N).
TOKPOS_API void packed_position_ids(const DLTensor* cu_seqlens, int64_t start, const DLTensor* out);

// The inverse: a document starts at index 0 and at every i where
// position_ids[i] != position_ids[i - 1] + 1. position_ids (N), or (B, S) read
// in row-major order as N = B * S tokens. Returns the number of documents
// (0 for N == 0); cu_seqlens_from_position_ids writes their boundaries to out
// (documents + 1): 0, the start of each later document, then N.
TOKPOS_API int64_t packed_document_count(const DLTensor* position_ids);
TOKPOS_API void cu_seqlens_from_position_ids(const DLTensor* position_ids, const DLTensor* out);

// ---- ALiBi ----

// The head slopes of ALiBi (Press et al., "Train Short, Test Long"), computed
// as the paper's get_slopes computes them, in double: for a power of two n,
// start = 2^(-max_bias / n) and slope[h] = start * start^h; otherwise, with
// c the largest power of two below n, the c slopes for c heads followed by
// every other slope for 2c heads (the 0th, 2nd, ...) up to n in all. With
// max_bias = 8 these are the paper's values bit for bit; other max_bias follow
// MPT's gen_slopes and ggml's alibi (the same values: m0^(h+1) and
// m1^(2(h-c)+1) with m0 = 2^(-max_bias/c), m1 = 2^(-max_bias/(2c))).
// 1 <= out.size() (num_heads) <= kAlibiMaxHeads; max_bias finite and > 0.
inline constexpr int64_t kAlibiMaxHeads = int64_t{1} << 20;
TOKPOS_API void alibi_slopes(std::span<double> out, double max_bias = 8.0);
TOKPOS_API std::vector<double> alibi_slopes(int64_t num_heads, double max_bias = 8.0);

enum class AlibiMode : int {
  kCausal = 0,     // slope * (k - q) where k <= q, -inf where k > q
  kSymmetric = 1,  // -slope * |q - k|
};

// out[h, i, j] = the bias between query position q_positions[i] and key
// position k_positions[j] under slopes[h], computed in double and rounded
// once to out's dtype. slopes (H); q_positions (Tq) and k_positions (Tk),
// int32 or int64, every one >= 0; out (H, Tq, Tk).
TOKPOS_API void alibi_bias(std::span<const double> slopes, const DLTensor* q_positions,
                           const DLTensor* k_positions, AlibiMode mode, const DLTensor* out);

}  // namespace tokpos
