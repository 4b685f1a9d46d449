// CPU kernels: OpenMP over tokens (forward) or over owned row ranges
// (backward), auto-vectorised inner loops. Bitwise equal to the reference.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/parallel.h"
#include "kernels/cpu/convert.h"
#include "kernels/kernels.h"
#include "kernels/layer_norm.h"

namespace tokpos::kernels {
namespace {

// Run-time dispatch (GCC ifunc): wide vectors where the CPU has them, one
// binary everywhere. Clones do the same IEEE operations in the same order.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TOKPOS_NO_TARGET_CLONES)
#define TOKPOS_KERNEL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TOKPOS_KERNEL_CLONES
#endif

constexpr int64_t kDecodeTokens = 16;  // at most this many tokens: no threading at all
constexpr int64_t kPrefetchAhead = 8;  // rows ahead whose token row is prefetched

inline void prefetch_row(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 1);
}

template <typename Out>
inline void store(Out* out, float v) {
  if constexpr (sizeof(Out) == 4) {
    *out = v;
  } else {
    *out = to_bf16(v);
  }
}

// Tokens [n0, n1) of compose_forward_mixed: the whole computation, inlined
// into each clone of compose_range so every clone vectorises it for its ISA.
template <typename Tok, typename Pos, typename Out>
__attribute__((always_inline)) inline void rows(void* out_v, const int64_t* ids, const void* tok_v, int64_t V,
                                                int64_t unk_id, const void* pos_v, const int64_t* pos_ids,
                                                int64_t start, int64_t T, int64_t D, int64_t n0, int64_t n1) {
  Out* __restrict out = static_cast<Out*>(out_v);
  const Tok* tok = static_cast<const Tok*>(tok_v);
  const Pos* pos = static_cast<const Pos*>(pos_v);
  for (int64_t n = n0; n < n1; ++n) {
    if (n + kPrefetchAhead < n1) {
      const int64_t id = ids[n + kPrefetchAhead];
      if (id >= 0 && id < V) prefetch_row(tok + id * D, D * static_cast<int64_t>(sizeof(Tok)));
    }
    const int64_t ix = (ids[n] >= 0 && ids[n] < V) ? ids[n] : unk_id;
    const Tok* __restrict wte_ix = tok + ix * D;
    Out* __restrict out_n = out + n * D;
    if (pos == nullptr) {
      for (int64_t d = 0; d < D; ++d) store(out_n + d, to_f32(wte_ix[d]));
    } else {
      const int64_t p = pos_ids ? pos_ids[n] : start + n % T;
      const Pos* __restrict wpe_p = pos + p * D;
      for (int64_t d = 0; d < D; ++d) store(out_n + d, to_f32(wte_ix[d]) + to_f32(wpe_p[d]));
    }
  }
}

template <typename Tok, typename Pos>
__attribute__((always_inline)) inline void rows_out(void* out, Elem out_type, const int64_t* ids,
                                                    const void* tok, int64_t V, int64_t unk, const void* pos,
                                                    const int64_t* pos_ids, int64_t start, int64_t T,
                                                    int64_t D, int64_t n0, int64_t n1) {
  if (out_type == Elem::kF32)
    return rows<Tok, Pos, float>(out, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
  rows<Tok, Pos, bf16_t>(out, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
}

template <typename Tok>
__attribute__((always_inline)) inline void rows_pos(void* out, Elem out_type, const int64_t* ids,
                                                    const void* tok, int64_t V, int64_t unk, const void* pos,
                                                    Elem pos_type, const int64_t* pos_ids, int64_t start,
                                                    int64_t T, int64_t D, int64_t n0, int64_t n1) {
  switch (pos_type) {
    case Elem::kF32:
      return rows_out<Tok, float>(out, out_type, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
    case Elem::kBF16:
      return rows_out<Tok, bf16_t>(out, out_type, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
    case Elem::kF16:
      return rows_out<Tok, f16_t>(out, out_type, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
  }
}

// One dispatch point per ISA; the type switch runs once per range, not per element.
TOKPOS_KERNEL_CLONES
void compose_range(void* out, Elem out_type, const int64_t* ids, const void* tok, Elem tok_type, int64_t V,
                   int64_t unk, const void* pos, Elem pos_type, const int64_t* pos_ids, int64_t start,
                   int64_t T, int64_t D, int64_t n0, int64_t n1) {
  switch (tok_type) {
    case Elem::kF32:
      return rows_pos<float>(out, out_type, ids, tok, V, unk, pos, pos_type, pos_ids, start, T, D, n0, n1);
    case Elem::kBF16:
      return rows_pos<bf16_t>(out, out_type, ids, tok, V, unk, pos, pos_type, pos_ids, start, T, D, n0, n1);
    case Elem::kF16:
      return rows_pos<f16_t>(out, out_type, ids, tok, V, unk, pos, pos_type, pos_ids, start, T, D, n0, n1);
  }
}

// Calls rows(n0, n1) over all N tokens: once, with no OpenMP region at all,
// for a decode step or little `work`; else one contiguous token range per
// thread, so each thread streams its own part of the output.
template <typename Rows>
void over_token_ranges(int64_t N, int64_t work, Rows&& rows) {
  const int nt = N <= kDecodeTokens ? 1 : detail::threads_for(work);
  if (nt == 1) return rows(int64_t{0}, N);
#pragma omp parallel num_threads(nt)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    rows(N * k / team, N * (k + 1) / team);
  }
}

void compose_forward_mixed_cpu(void* out, Elem out_type, const int64_t* ids, const void* tok, Elem tok_type,
                               int64_t V, int64_t unk, const void* pos, Elem pos_type, const int64_t* pos_ids,
                               int64_t start, int64_t B, int64_t T, int64_t D) {
  over_token_ranges(B * T, B * T * D, [&](int64_t n0, int64_t n1) {
    compose_range(out, out_type, ids, tok, tok_type, V, unk, pos, pos_type, pos_ids, start, T, D, n0, n1);
  });
}

void compose_forward_cpu(float* out, const int64_t* ids, const float* token_table, int64_t V, int64_t unk_id,
                         const float* pos_table, const int64_t* pos_ids, int64_t start, int64_t B, int64_t T,
                         int64_t D) {
  compose_forward_mixed_cpu(out, Elem::kF32, ids, token_table, Elem::kF32, V, unk_id, pos_table, Elem::kF32,
                            pos_ids, start, B, T, D);
}

// block (D) = src[order[k0]] + src[order[k0 + 1]] + ... up to k1, in order.
TOKPOS_KERNEL_CLONES
void sum_block(float* block, const float* src, const int64_t* order, int64_t k0, int64_t k1, int64_t D) {
  float* __restrict acc = block;
  const float* __restrict first = src + order[k0] * D;
  for (int64_t d = 0; d < D; ++d) acc[d] = first[d];
  for (int64_t k = k0 + 1; k < k1; ++k) {
    const float* __restrict s = src + order[k] * D;
    for (int64_t d = 0; d < D; ++d) acc[d] += s[d];
  }
}

TOKPOS_KERNEL_CLONES
void add_row(float* grad_row, const float* block, int64_t D) {
  float* __restrict g = grad_row;
  const float* __restrict b = block;
  for (int64_t d = 0; d < D; ++d) g[d] += b[d];
}

void index_add_rows_cpu(float* grad, const float* src, const int64_t* rows, int64_t N, int64_t V, int64_t D) {
  // The plan (never V x D scratch): the sources sorted stably by row, so each
  // row's sources are contiguous and in increasing i, and the touched rows in
  // order with their ranges. Counting sort, O(N + V), when V is not much
  // larger than N; otherwise a comparison sort, O(N log N), so a decode step
  // does not pay for the whole vocabulary.
  std::vector<int64_t> order, touched_rows, touched_start;
  order.reserve(static_cast<size_t>(N));
  if (V <= 4 * N) {
    std::vector<int64_t> start(static_cast<size_t>(V) + 1, 0);
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) ++start[rows[i] + 1];
    for (int64_t v = 0; v < V; ++v) start[v + 1] += start[v];
    order.resize(static_cast<size_t>(start[V]));
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) order[fill[rows[i]]++] = i;
    for (int64_t v = 0; v < V; ++v) {
      if (start[v + 1] > start[v]) {
        touched_rows.push_back(v);
        touched_start.push_back(start[v]);
      }
    }
  } else {
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
    for (size_t k = 0; k < order.size(); ++k) {
      if (k == 0 || rows[order[k]] != rows[order[k - 1]]) {
        touched_rows.push_back(rows[order[k]]);
        touched_start.push_back(static_cast<int64_t>(k));
      }
    }
  }
  touched_start.push_back(static_cast<int64_t>(order.size()));
  // Blocks of kRowBlock sources. A row with one block is summed and added by
  // one task; a hot row's blocks are summed in parallel into scratch, then
  // added to the row in block order (split by columns across threads).
  struct Block {
    int64_t row, k0, k1, slot;  // slot >= 0: a hot row's partial sum lives in scratch[slot]
  };
  std::vector<Block> blocks;
  std::vector<int64_t> hot_rows, hot_first_slot, hot_blocks;
  int64_t slots = 0;
  for (size_t g = 0; g + 1 < touched_start.size(); ++g) {
    const int64_t v = touched_rows[g], k0 = touched_start[g], k1 = touched_start[g + 1];
    if (k1 - k0 <= kRowBlock) {
      blocks.push_back({v, k0, k1, -1});
      continue;
    }
    hot_rows.push_back(v);
    hot_first_slot.push_back(slots);
    hot_blocks.push_back((k1 - k0 + kRowBlock - 1) / kRowBlock);
    for (int64_t b0 = k0; b0 < k1; b0 += kRowBlock)
      blocks.push_back({v, b0, std::min(k1, b0 + kRowBlock), slots++});
  }
  const int nt = N <= kDecodeTokens ? 1 : detail::threads_for(N * D);
  std::vector<float> scratch(static_cast<size_t>((slots + nt) * D));  // hot partial sums + one row per thread
  const auto nb = static_cast<int64_t>(blocks.size());
#pragma omp parallel num_threads(nt)
  {
    float* mine = scratch.data() + (slots + omp_get_thread_num()) * D;
    // Blocks in plan order: static contiguous ranges, so the rows two blocks
    // ahead can be prefetched (hot rows are already cut into 64-source blocks).
#pragma omp for schedule(static)
    for (int64_t j = 0; j < nb; ++j) {
      if (j + 2 < nb) {
        prefetch_row(src + order[blocks[j + 2].k0] * D, D * 4);
        prefetch_row(grad + blocks[j + 2].row * D, D * 4);
      }
      const Block& b = blocks[j];
      if (b.slot < 0 && b.k1 - b.k0 == 1) {  // one source: grad += s, the same bits as the block sum
        add_row(grad + b.row * D, src + order[b.k0] * D, D);
        continue;
      }
      float* dst = b.slot >= 0 ? scratch.data() + b.slot * D : mine;
      sum_block(dst, src, order.data(), b.k0, b.k1, D);
      if (b.slot < 0) add_row(grad + b.row * D, dst, D);  // the row has no other block
    }
    // Hot rows: grad[v] += partial sums in block order, columns split across threads.
    const int64_t col_chunk = 256;
    const int64_t chunks = (D + col_chunk - 1) / col_chunk;
    const auto hot = static_cast<int64_t>(hot_rows.size());
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < hot * chunks; ++item) {
      const int64_t h = item / chunks, c0 = (item % chunks) * col_chunk, len = std::min(col_chunk, D - c0);
      const int64_t v = hot_rows[h];
      for (int64_t q = 0; q < hot_blocks[h]; ++q) {
        add_row(grad + v * D + c0, scratch.data() + (hot_first_slot[h] + q) * D + c0, len);
      }
    }
  }
}

TOKPOS_KERNEL_CLONES
void typed_rows(float* out, const int64_t* ids, const float* tok, int64_t V, int64_t unk_id,
                const int64_t* type_ids, const float* types, const float* pos, const int64_t* pos_ids,
                int64_t start, const float* gamma, const float* beta, double eps, int64_t T, int64_t D,
                int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    if (n + kPrefetchAhead < n1 && ids[n + kPrefetchAhead] >= 0 && ids[n + kPrefetchAhead] < V) {
      prefetch_row(tok + ids[n + kPrefetchAhead] * D, D * 4);
    }
    const int64_t ix = (ids[n] >= 0 && ids[n] < V) ? ids[n] : unk_id,
                  p = pos_ids ? pos_ids[n] : start + n % T;
    const float* __restrict w = tok + ix * D;
    const float* __restrict ps = pos + p * D;
    float* __restrict x = out + n * D;
    if (types != nullptr) {
      const float* __restrict ty = types + (type_ids ? type_ids[n] : 0) * D;
      for (int64_t d = 0; d < D; ++d) x[d] = (w[d] + ty[d]) + ps[d];
    } else {
      for (int64_t d = 0; d < D; ++d) x[d] = w[d] + ps[d];
    }
    if (gamma == nullptr) continue;
    // The row is in L1 now: LayerNorm in the same pass, statistics in double
    // (the same order as the reference, so the same bits).
    layer_norm_row(x, gamma, beta, eps, D);
  }
}

void compose_typed_cpu(float* out, const int64_t* ids, const float* tok, int64_t V, int64_t unk_id,
                       const int64_t* type_ids, const float* types, const float* pos, const int64_t* pos_ids,
                       int64_t start, const float* gamma, const float* beta, double eps, int64_t B, int64_t T,
                       int64_t D) {
  over_token_ranges(B * T, B * T * D * 4, [&](int64_t n0, int64_t n1) {  // LayerNorm: ~4 passes per row
    typed_rows(out, ids, tok, V, unk_id, type_ids, types, pos, pos_ids, start, gamma, beta, eps, T, D, n0,
               n1);
  });
}

}  // namespace

const KernelTable& cpu_kernels() {
  static const KernelTable table{"cpu", compose_forward_cpu, index_add_rows_cpu, compose_forward_mixed_cpu,
                                 compose_typed_cpu};
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
