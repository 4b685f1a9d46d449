// Reference kernels: the plainest loops that state the definition.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/kernels.h"
#include "kernels/layer_norm.h"

namespace tokpos::kernels {
namespace {

inline int64_t row_of(const int64_t* ids, int64_t n, int64_t V, int64_t unk_id) {
  return (ids[n] >= 0 && ids[n] < V) ? ids[n] : unk_id;
}

void compose_forward_ref(float* out, const int64_t* ids, const float* token_table, int64_t V, int64_t unk_id,
                         const float* pos_table, const int64_t* pos_ids, int64_t start, int64_t B, int64_t T,
                         int64_t D) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = b * T + t;
      float* out_bt = out + n * D;
      const float* wte_ix = token_table + row_of(ids, n, V, unk_id) * D;
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

template <typename Tok, typename Pos, typename Out>
void mixed_ref(void* out_v, const int64_t* ids, const void* tok_v, int64_t V, int64_t unk_id,
               const void* pos_v, const int64_t* pos_ids, int64_t start, int64_t B, int64_t T, int64_t D) {
  auto* out = static_cast<Out*>(out_v);
  const auto* tok = static_cast<const Tok*>(tok_v);
  const auto* pos = static_cast<const Pos*>(pos_v);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = b * T + t, ix = row_of(ids, n, V, unk_id);
      const int64_t p = pos_ids ? pos_ids[n] : start + t;
      for (int64_t d = 0; d < D; ++d) {
        float v = to_f32(tok[ix * D + d]);
        if (pos) v = v + to_f32(pos[p * D + d]);
        if constexpr (sizeof(Out) == 4) {
          out[n * D + d] = v;
        } else {
          out[n * D + d] = to_bf16(v);
        }
      }
    }
}

template <typename Tok, typename Pos>
void mixed_out(void* out, Elem out_type, const int64_t* ids, const void* tok, int64_t V, int64_t unk_id,
               const void* pos, const int64_t* pos_ids, int64_t start, int64_t B, int64_t T, int64_t D) {
  if (out_type == Elem::kF32)
    return mixed_ref<Tok, Pos, float>(out, ids, tok, V, unk_id, pos, pos_ids, start, B, T, D);
  mixed_ref<Tok, Pos, bf16_t>(out, ids, tok, V, unk_id, pos, pos_ids, start, B, T, D);
}

template <typename Tok>
void mixed_pos(void* out, Elem out_type, const int64_t* ids, const void* tok, int64_t V, int64_t unk_id,
               const void* pos, Elem pos_type, const int64_t* pos_ids, int64_t start, int64_t B, int64_t T,
               int64_t D) {
  switch (pos_type) {
    case Elem::kF32:
      return mixed_out<Tok, float>(out, out_type, ids, tok, V, unk_id, pos, pos_ids, start, B, T, D);
    case Elem::kBF16:
      return mixed_out<Tok, bf16_t>(out, out_type, ids, tok, V, unk_id, pos, pos_ids, start, B, T, D);
    case Elem::kF16:
      return mixed_out<Tok, f16_t>(out, out_type, ids, tok, V, unk_id, pos, pos_ids, start, B, T, D);
  }
}

void compose_forward_mixed_ref(void* out, Elem out_type, const int64_t* ids, const void* tok, Elem tok_type,
                               int64_t V, int64_t unk_id, const void* pos, Elem pos_type,
                               const int64_t* pos_ids, int64_t start, int64_t B, int64_t T, int64_t D) {
  switch (tok_type) {
    case Elem::kF32:
      return mixed_pos<float>(out, out_type, ids, tok, V, unk_id, pos, pos_type, pos_ids, start, B, T, D);
    case Elem::kBF16:
      return mixed_pos<bf16_t>(out, out_type, ids, tok, V, unk_id, pos, pos_type, pos_ids, start, B, T, D);
    case Elem::kF16:
      return mixed_pos<f16_t>(out, out_type, ids, tok, V, unk_id, pos, pos_type, pos_ids, start, B, T, D);
  }
}

void index_add_rows_ref(float* grad, const float* src, const int64_t* rows, int64_t N, int64_t V, int64_t D) {
  // Row by row, sources in increasing i: one at a time for a row with at most
  // kRowBlock sources, else blocks of kRowBlock summed from their first source.
  std::vector<std::vector<int64_t>> sources(static_cast<size_t>(V));
  for (int64_t i = 0; i < N; ++i)
    if (rows[i] >= 0) sources[rows[i]].push_back(i);
  std::vector<float> block(static_cast<size_t>(D));
  for (int64_t v = 0; v < V; ++v) {
    const auto& list = sources[v];
    if (list.size() <= static_cast<size_t>(kRowBlock)) {
      for (const int64_t i : list)
        for (int64_t d = 0; d < D; ++d) grad[v * D + d] += src[i * D + d];
      continue;
    }
    for (size_t b0 = 0; b0 < list.size(); b0 += kRowBlock) {
      const size_t b1 = std::min(list.size(), b0 + kRowBlock);
      for (int64_t d = 0; d < D; ++d) block[d] = src[list[b0] * D + d];
      for (size_t k = b0 + 1; k < b1; ++k)
        for (int64_t d = 0; d < D; ++d) block[d] += src[list[k] * D + d];
      for (int64_t d = 0; d < D; ++d) grad[v * D + d] += block[d];
    }
  }
}

// The definition of index_add_rows2: the two index_add_rows it equals.
void index_add_rows2_ref(float* grad_a, const int64_t* rows_a, int64_t Va, float* grad_b, const int64_t* rows_b,
                         int64_t Vb, const float* src, int64_t N, int64_t D) {
  index_add_rows_ref(grad_a, src, rows_a, N, Va, D);
  if (grad_b != nullptr) index_add_rows_ref(grad_b, src, rows_b, N, Vb, D);
}

void compose_typed_ref(float* out, const int64_t* ids, const float* tok, int64_t V, int64_t unk_id,
                       const int64_t* type_ids, const float* types, const float* pos, const int64_t* pos_ids,
                       int64_t start, const float* gamma, const float* beta, double eps, int64_t B, int64_t T,
                       int64_t D) {
  for (int64_t n = 0; n < B * T; ++n) {
    const int64_t ix = row_of(ids, n, V, unk_id), p = pos_ids ? pos_ids[n] : start + n % T;
    const int64_t ty = type_ids ? type_ids[n] : 0;
    float* x = out + n * D;
    for (int64_t d = 0; d < D; ++d) {
      float v = tok[ix * D + d];
      if (types) v = v + types[ty * D + d];
      x[d] = v + pos[p * D + d];
    }
    if (gamma == nullptr) continue;
    layer_norm_row(x, gamma, beta, eps, D);
  }
}

}  // namespace

const KernelTable& reference_kernels() {
  static const KernelTable table{"reference", compose_forward_ref, index_add_rows_ref,
                                 compose_forward_mixed_ref, compose_typed_ref,
                                 index_add_rows2_ref};
  return table;
}

}  // namespace tokpos::kernels
