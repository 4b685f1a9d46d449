// Private to the modules: the tied output head's matmul. Not a lookup
// kernel: it lives with the module that ties its table to the output side.
#pragma once

#include <cstdint>

namespace tokpos::detail {

// logits (N, V) = h (N, D) . W^T. Overwrites logits.
void linear_nt(float* logits, const float* h, const float* W, int64_t N, int64_t V, int64_t D);
// dW (V, D) += d_logits^T . h when dW is not null, each row's sum formed in
// full then added once (so a tied gradient is exactly lookup + head);
// d_h (N, D) += d_logits . W when d_h is not null.
void linear_nt_backward(float* dW, float* d_h, const float* d_logits, const float* h, const float* W,
                        int64_t N, int64_t V, int64_t D);

}  // namespace tokpos::detail
