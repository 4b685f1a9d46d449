// Private: the kernels. Free functions on raw pointers with explicit B, T, D.
// They never check: the modules validate every id and position first, so a
// kernel only ever sees valid input. The forward kernels never allocate; the
// backward kernels allocate their O(B*T) plan (never V x D) before writing
// anything, so std::bad_alloc leaves the gradients as they were.
//
// Each back end fills a KernelTable (as ggml's backends do); the reference
// back end is plain loops and is the source of truth, every other back end
// must match it bit for bit (tests/kernels_test.cc runs both on many shapes).
#pragma once

#include <cstdint>

namespace tokpos::kernels {

// out (B, T, D) = token_table[row(b, t)] + (pos_table ? pos_table[pos(b, t)] : 0)
//   row(b, t) = ids[b*T + t] if it is in [0, V), else unk_id   (unk_id in [0, V))
//   pos(b, t) = pos_ids ? pos_ids[b*T + t] : start + t          (already checked < L)
// Under the error policy the module has checked every id, so the UNK branch
// never fires; it keeps the kernel memory-safe and allocation-free either way.
// Overwrites out; each element is written once, with no temporary.
using ComposeForwardFn = void(float* out, const int64_t* ids, const float* token_table, int64_t V,
                              int64_t unk_id, const float* pos_table, const int64_t* pos_ids, int64_t start,
                              int64_t B, int64_t T, int64_t D);

// grad (V, D) += the rows of src (N, D) grouped by rows[i]; rows[i] < 0 is
// skipped (padding). Accumulates; only listed rows change. The order of the
// floating-point additions is part of the definition, so every back end and
// every thread count gives the same bits. For each row v with sources
// i_1 < i_2 < ... < i_n:
//   n <= kRowBlock: one at a time, in order (as llm.c's encoder_backward and
//                   PyTorch's index_add_ do):  grad[v] = ((grad[v] + s_1) + s_2) + ...
//   n >  kRowBlock: blocks of kRowBlock sources, each summed from its first
//                   source, in order; the block sums added to grad[v] in order:
//                   grad[v] = ((grad[v] + (s_1 + ... + s_64)) + (s_65 + ...)) + ...
// Fixed blocks let a row used thousands of times be summed by many threads;
// a row used at most 64 times needs no scratch, so a kernel may add each
// source the moment it reads it (what lets index_add_rows2 read src once).
inline constexpr int64_t kRowBlock = 64;
using IndexAddRowsFn = void(float* grad, const float* src, const int64_t* rows, int64_t N, int64_t V,
                            int64_t D);

// Both gradients of the input stage from one d_out:
//   index_add_rows(grad_a, src, rows_a, N, Va, D) and
//   index_add_rows(grad_b, src, rows_b, N, Vb, D),
// with exactly those bits (grad_b may be null: only the first). grad_a and
// grad_b must not overlap. The cpu back end reads each row of src from
// memory once for both when every rows_b row has at most kRowBlock sources
// (positions: B <= 64), and re-reads only the sources of rows_a rows whose
// sources are split between threads (docs/benchmarks.md).
using IndexAddRows2Fn = void(float* grad_a, const int64_t* rows_a, int64_t Va, float* grad_b,
                             const int64_t* rows_b, int64_t Vb, const float* src, int64_t N, int64_t D);

// Element types of tables and outputs (same values as tokpos::DType and tokpos_dtype).
enum class Elem { kF32 = 0, kBF16 = 1, kF16 = 2 };

// compose_forward for any table types: token and position rows are read as
// their own type, widened to float, added in float, and the sum is stored as
// out_type (kF32 or kBF16, rounded to nearest even). pos_table may be null.
using ComposeForwardMixedFn = void(void* out, Elem out_type, const int64_t* ids, const void* token_table,
                                   Elem token_type, int64_t V, int64_t unk_id, const void* pos_table,
                                   Elem pos_type, const int64_t* pos_ids, int64_t start, int64_t B, int64_t T,
                                   int64_t D);

// BERT's input stage, fused: for each (b, t),
//   x = (token_table[row] + type_table[type_ids[n]]) + pos_table[pos(b, t)]
// in exactly that order (as transformers' BertEmbeddings adds them), then, if
// gamma is not null, LayerNorm over the row: (x - mean) / sqrt(var + eps) *
// gamma + beta, with mean and var accumulated in double. type_ids null means
// type 0 everywhere; type_table null means no token-type term. Overwrites out.
using ComposeTypedFn = void(float* out, const int64_t* ids, const float* token_table, int64_t V,
                            int64_t unk_id, const int64_t* type_ids, const float* type_table,
                            const float* pos_table, const int64_t* pos_ids, int64_t start, const float* gamma,
                            const float* beta, double eps, int64_t B, int64_t T, int64_t D);

struct KernelTable {
  const char* name;
  ComposeForwardFn* compose_forward;
  IndexAddRowsFn* index_add_rows;
  ComposeForwardMixedFn* compose_forward_mixed;
  ComposeTypedFn* compose_typed;
  IndexAddRows2Fn* index_add_rows2;
};

const KernelTable& reference_kernels();
const KernelTable& cpu_kernels();
// What the modules call: cpu_kernels().
const KernelTable& active_kernels();

// Weight tying (tied output projection), cpu back end only; tests compare it
// with an independent double-precision computation.
// logits (N, V) = h (N, D) . W^T. Overwrites logits.
void linear_nt(float* logits, const float* h, const float* W, int64_t N, int64_t V, int64_t D);
// dW (V, D) += d_logits^T . h when dW is not null, each row's sum formed in full
// then added once;
// d_h (N, D) += d_logits . W when d_h is not null.
void linear_nt_backward(float* dW, float* d_h, const float* d_logits, const float* h, const float* W,
                        int64_t N, int64_t V, int64_t D);

}  // namespace tokpos::kernels
