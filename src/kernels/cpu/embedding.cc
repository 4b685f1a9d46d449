// CPU kernels: OpenMP over tokens (forward) or over owned row ranges
// (backward), auto-vectorised inner loops. Bitwise equal to the reference.
#include <omp.h>

#include <algorithm>

#include "common/parallel.h"
#include "kernels/kernels.h"

namespace tokpos::kernels {
namespace {

inline void add_rows(float* __restrict out, const float* __restrict a, const float* __restrict b, int64_t D) {
  for (int64_t d = 0; d < D; ++d) out[d] = a[d] + b[d];
}

void compose_forward_cpu(float* out, const int64_t* ids, const float* token_table, int64_t V, int64_t unk_id,
                         const float* pos_table, const int64_t* pos_ids, int64_t start, int64_t B, int64_t T,
                         int64_t D) {
  const int64_t N = B * T;
  // Static schedule over whole tokens: contiguous output per thread, one row per step.
#pragma omp parallel for schedule(static) num_threads(detail::threads_for(N* D))
  for (int64_t n = 0; n < N; ++n) {
    float* out_bt = out + n * D;
    const int64_t ix = (ids[n] >= 0 && ids[n] < V) ? ids[n] : unk_id;
    const float* wte_ix = token_table + ix * D;
    if (pos_table == nullptr) {
      std::copy(wte_ix, wte_ix + D, out_bt);
    } else {
      const int64_t p = pos_ids ? pos_ids[n] : start + n % T;
      add_rows(out_bt, wte_ix, pos_table + p * D, D);
    }
  }
}

void index_add_rows_cpu(float* grad, const float* src, const int64_t* rows, int64_t N, int64_t V, int64_t D) {
  // Row-range ownership: thread k owns rows [V*k/nt, V*(k+1)/nt) and walks all
  // N ids in order, adding only its own. No atomics, no races, and every row
  // sees its contributions in increasing i: identical to the reference for
  // any thread count. (Issue 4 replaces the full scan with a sort plan.)
  const int nt = detail::threads_for(N * D);
#pragma omp parallel num_threads(nt)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t lo = V * k / team, hi = V * (k + 1) / team;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t r = rows[i];
      if (r < lo || r >= hi) continue;  // also skips r < 0 (padding)
      float* __restrict g = grad + r * D;
      const float* __restrict s = src + i * D;
      for (int64_t d = 0; d < D; ++d) g[d] += s[d];
    }
  }
}

}  // namespace

const KernelTable& cpu_kernels() {
  static const KernelTable table{"cpu", compose_forward_cpu, index_add_rows_cpu};
  return table;
}

const KernelTable& active_kernels() {
  return cpu_kernels();
}

void linear_nt(float* logits, const float* h, const float* W, int64_t N, int64_t V, int64_t D) {
#pragma omp parallel for schedule(static) num_threads(detail::threads_for(N* V* D))
  for (int64_t n = 0; n < N; ++n) {
    const float* h_n = h + n * D;
    for (int64_t v = 0; v < V; ++v) {
      const float* w_v = W + v * D;
      float acc = 0.0f;
      for (int64_t d = 0; d < D; ++d) acc += h_n[d] * w_v[d];
      logits[n * V + v] = acc;
    }
  }
}

void linear_nt_backward(float* dW, float* d_h, const float* d_logits, const float* h, const float* W,
                        int64_t N, int64_t V, int64_t D) {
  const int nt = detail::threads_for(N * V * D);
  // dW: one owner per vocabulary row; the row's sum over n is formed in a
  // stack chunk of D, then added once (so a tied gradient is exactly E + S).
  constexpr int64_t kChunk = 256;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t v = 0; v < (dW ? V : 0); ++v) {
    float* dw_v = dW + v * D;
    for (int64_t d0 = 0; d0 < D; d0 += kChunk) {
      const int64_t len = std::min(kChunk, D - d0);
      float acc[kChunk] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float g = d_logits[n * V + v];
        const float* h_n = h + n * D + d0;
        for (int64_t d = 0; d < len; ++d) acc[d] += g * h_n[d];
      }
      for (int64_t d = 0; d < len; ++d) dw_v[d0 + d] += acc[d];
    }
  }
  if (d_h == nullptr) return;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t n = 0; n < N; ++n) {
    float* dh_n = d_h + n * D;
    for (int64_t v = 0; v < V; ++v) {
      const float g = d_logits[n * V + v];
      const float* w_v = W + v * D;
      for (int64_t d = 0; d < D; ++d) dh_n[d] += g * w_v[d];
    }
  }
}

}  // namespace tokpos::kernels
