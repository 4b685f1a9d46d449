// The cpu forward of BERT's input stage: (word + token type) + position, and
// the LayerNorm epilogue in the same pass while the row is in L1.
#include "kernels/cpu/cpu_common.h"
#include "kernels/kernels.h"
#include "kernels/layer_norm.h"

namespace tokpos::kernels::cpu {
namespace {

TOKPOS_KERNEL_CLONES
void typed_rows(const TypedGather& tg, int64_t n0, int64_t n1) {
  const Gather& g = tg.g;
  const auto* tok = static_cast<const float*>(g.tok.data);
  const auto* pos = static_cast<const float*>(g.pos.data);
  const auto* types = static_cast<const float*>(tg.types.data);
  auto* out = static_cast<float*>(g.out.data);
  const int64_t T = g.T, D = g.D, V = g.V;
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t b = n / T, t = n % T;
    if (n + kPrefetchAhead < n1) {
      const int64_t ahead = g.ids.at((n + kPrefetchAhead) / T, (n + kPrefetchAhead) % T);
      if (ahead >= 0 && ahead < V) prefetch_row(tok + ahead * g.tok.stride, D * 4);
    }
    const int64_t id = g.ids.at(b, t);
    const int64_t ix = (id >= 0 && id < V) ? id : g.unk_id;
    const int64_t p = g.pos_ids.data ? g.pos_ids.within(b, t, g.L, 0) : g.start + t;
    const float* __restrict w = tok + ix * g.tok.stride;
    const float* __restrict ps = pos + p * g.pos.stride;
    float* __restrict x = out + b * g.out.sb + t * g.out.st;
    if (types != nullptr) {
      const int64_t q = tg.type_ids.data ? tg.type_ids.within(b, t, tg.type_rows, 0) : 0;
      const float* __restrict ty = types + q * tg.types.stride;
      for (int64_t d = 0; d < D; ++d) x[d] = (w[d] + ty[d]) + ps[d];
    } else {
      for (int64_t d = 0; d < D; ++d) x[d] = w[d] + ps[d];
    }
    if (tg.gamma == nullptr) continue;
    // Statistics in double, in the reference's order, so the same bits.
    layer_norm_row(x, tg.gamma, tg.beta, tg.eps, D);
  }
}

}  // namespace

void compose_typed(const TypedGather& tg, const Exec& ex) {
  const int64_t N = tg.g.B * tg.g.T;
  // LayerNorm: about four passes over each row.
  over_token_ranges(ex, N, N * tg.g.D * 4, [&](int64_t n0, int64_t n1) { typed_rows(tg, n0, n1); });
}

}  // namespace tokpos::kernels::cpu
