// Private: the kernels. Free functions on raw pointers with explicit B, T, D.
// They never allocate and never check: the modules validate every id and
// position first, so a kernel only ever sees valid input.
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

// grad (V, D): for i = 0 .. N-1 in increasing order, if rows[i] >= 0,
//   grad[rows[i]] += src[i]            (src is (N, D))
// Accumulates; rows < 0 are skipped (padding). Only listed rows change.
// Each row receives its contributions in increasing i, so the result is the
// same bits for every thread count.
using IndexAddRowsFn = void(float* grad, const float* src, const int64_t* rows, int64_t N, int64_t V,
                            int64_t D);

struct KernelTable {
  const char* name;
  ComposeForwardFn* compose_forward;
  IndexAddRowsFn* index_add_rows;
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
