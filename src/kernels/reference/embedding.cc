// Reference kernels: the plainest loops that state the definition.
#include "kernels/kernels.h"

namespace tokpos::kernels {
namespace {

void compose_forward_ref(float* out, const int64_t* ids, const float* token_table, int64_t V, int64_t unk_id,
                         const float* pos_table, const int64_t* pos_ids, int64_t start, int64_t B, int64_t T,
                         int64_t D) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = b * T + t;
      float* out_bt = out + n * D;
      const int64_t ix = (ids[n] >= 0 && ids[n] < V) ? ids[n] : unk_id;
      const float* wte_ix = token_table + ix * D;
      if (pos_table == nullptr) {
        for (int64_t d = 0; d < D; ++d) out_bt[d] = wte_ix[d];
        continue;
      }
      const int64_t p = pos_ids ? pos_ids[n] : start + t;
      const float* wpe_p = pos_table + p * D;
      for (int64_t d = 0; d < D; ++d) out_bt[d] = wte_ix[d] + wpe_p[d];
    }
  }
}

void index_add_rows_ref(float* grad, const float* src, const int64_t* rows, int64_t N, int64_t /*V*/,
                        int64_t D) {
  for (int64_t i = 0; i < N; ++i) {
    if (rows[i] < 0) continue;
    float* g = grad + rows[i] * D;
    const float* s = src + i * D;
    for (int64_t d = 0; d < D; ++d) g[d] += s[d];
  }
}

}  // namespace

const KernelTable& reference_kernels() {
  static const KernelTable table{"reference", compose_forward_ref, index_add_rows_ref};
  return table;
}

}  // namespace tokpos::kernels
