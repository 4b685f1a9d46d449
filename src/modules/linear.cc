// The tied output head (tests compare it with an independent double-precision
// computation). The library's workers over the output rows
// (detail::parallel_ranges); each element's sum in order.
#include "modules/linear.h"

#include <algorithm>

#include "common/parallel.h"

namespace tokpos::detail {

void linear_nt(float* logits, const float* h, const float* W, int64_t N, int64_t V, int64_t D) {
  parallel_ranges(threads_for(N * V * D), N, [&](int64_t n0, int64_t n1, int) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* h_n = h + n * D;
      for (int64_t v = 0; v < V; ++v) {
        const float* w_v = W + v * D;
        float acc = 0.0f;
        for (int64_t d = 0; d < D; ++d) acc += h_n[d] * w_v[d];
        logits[n * V + v] = acc;
      }
    }
  });
}

void linear_nt_backward(float* dW, float* d_h, const float* d_logits, const float* h, const float* W,
                        int64_t N, int64_t V, int64_t D) {
  const int nt = threads_for(N * V * D);
  // dW: one owner per vocabulary row; the row's sum over n is formed in a
  // stack chunk of D, then added once (so a tied gradient is exactly E + S).
  constexpr int64_t kChunk = 256;
  parallel_ranges(nt, dW ? V : 0, [&](int64_t v0, int64_t v1, int) {
    for (int64_t v = v0; v < v1; ++v) {
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
  });
  if (d_h == nullptr) return;
  parallel_ranges(nt, N, [&](int64_t n0, int64_t n1, int) {
    for (int64_t n = n0; n < n1; ++n) {
      float* dh_n = d_h + n * D;
      for (int64_t v = 0; v < V; ++v) {
        const float g = d_logits[n * V + v];
        const float* w_v = W + v * D;
        for (int64_t d = 0; d < D; ++d) dh_n[d] += g * w_v[d];
      }
    }
  });
}

}  // namespace tokpos::detail
