// CPU kernels: OpenMP over tokens (forward) or over owned row ranges
// (backward), auto-vectorised inner loops. Bitwise equal to the reference.
// The streaming helpers (and convert.h's templates, instantiated for them) pass
// 64-byte GCC vectors between always-inline functions: no ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__SSE2__)
#include <emmintrin.h>
#define TOKPOS_STREAM_STORES 1  // else "streaming" stores are plain stores
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/parallel.h"
#include "kernels/cpu/convert.h"
#include "kernels/kernels.h"
#include "kernels/layer_norm.h"
#include "tokpos/threading.h"

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

// Streaming stores. Sixteen elements at a time in GCC vectors, which each
// clone compiles to its widest registers (one zmm, two ymm or four xmm), using
// the same bit formulas as the scalar conversions (convert.h), so the same
// bits. The stores are SSE2 non-temporal stores, available in every clone: the
// line goes to memory without first being read (no read-for-ownership) and
// without evicting the tables from the cache.
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));

__attribute__((always_inline)) inline f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline u32x16 load16_bits(const uint16_t* p) {
  u16x16 h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, u32x16);
}
__attribute__((always_inline)) inline f32x16 load16(const bf16_t* p) {
  return std::bit_cast<f32x16>(u32x16(load16_bits(&p->bits) << 16));
}
__attribute__((always_inline)) inline f32x16 load16(const f16_t* p) {
  return f16_bits_to_f32<u32x16, f32x16>(load16_bits(&p->bits));
}

// p must be 16-byte aligned.
__attribute__((always_inline)) inline void stream16(float* p, f32x16 v) {
#ifdef TOKPOS_STREAM_STORES
  _mm_stream_ps(p, __builtin_shufflevector(v, v, 0, 1, 2, 3));
  _mm_stream_ps(p + 4, __builtin_shufflevector(v, v, 4, 5, 6, 7));
  _mm_stream_ps(p + 8, __builtin_shufflevector(v, v, 8, 9, 10, 11));
  _mm_stream_ps(p + 12, __builtin_shufflevector(v, v, 12, 13, 14, 15));
#else
  std::memcpy(p, &v, sizeof v);
#endif
}
__attribute__((always_inline)) inline void stream16(bf16_t* p, f32x16 v) {
  const u16x16 h = __builtin_convertvector(f32_to_bf16_bits<u32x16, f32x16>(v), u16x16);
#ifdef TOKPOS_STREAM_STORES
  auto* q = reinterpret_cast<__m128i*>(p);
  _mm_stream_si128(q, std::bit_cast<__m128i>(__builtin_shufflevector(h, h, 0, 1, 2, 3, 4, 5, 6, 7)));
  _mm_stream_si128(q + 1, std::bit_cast<__m128i>(__builtin_shufflevector(h, h, 8, 9, 10, 11, 12, 13, 14, 15)));
#else
  std::memcpy(p, &h, sizeof h);
#endif
}

// out[0, len) = token row (+ position row), widened, added, stored as Out.
template <typename Tok, typename Pos, typename Out>
__attribute__((always_inline)) inline void row_sum(Out* __restrict out, const Tok* __restrict wte,
                                                   const Pos* __restrict wpe, int64_t len) {
  if (wpe == nullptr) {
    for (int64_t d = 0; d < len; ++d) store(out + d, to_f32(wte[d]));
  } else {
    for (int64_t d = 0; d < len; ++d) store(out + d, to_f32(wte[d]) + to_f32(wpe[d]));
  }
}

// row_sum with streaming stores: plain stores up to the first 16-byte
// boundary of out and for the last D % 16 elements, streamed in between.
template <typename Tok, typename Pos, typename Out>
__attribute__((always_inline)) inline void row_sum_stream(Out* out, const Tok* wte, const Pos* wpe, int64_t D) {
  const auto misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) % 16);
  const int64_t head = std::min(D, misalign == 0 ? 0 : (16 - misalign) / static_cast<int64_t>(sizeof(Out)));
  row_sum(out, wte, wpe, head);
  int64_t d = head;
  if (wpe == nullptr) {
    for (; d + 16 <= D; d += 16) stream16(out + d, load16(wte + d));
  } else {
    for (; d + 16 <= D; d += 16) stream16(out + d, load16(wte + d) + load16(wpe + d));
  }
  row_sum(out + d, wte + d, wpe == nullptr ? nullptr : wpe + d, D - d);
}

// Tokens [n0, n1) of compose_forward_mixed: the whole computation, inlined
// into each clone of compose_range so every clone vectorises it for its ISA.
template <typename Tok, typename Pos, typename Out, bool kStream>
__attribute__((always_inline)) inline void rows(void* out_v, const int64_t* ids, const void* tok_v, int64_t V,
                                                int64_t unk_id, const void* pos_v, const int64_t* pos_ids,
                                                int64_t start, int64_t T, int64_t D, int64_t n0, int64_t n1) {
  Out* out = static_cast<Out*>(out_v);
  const Tok* tok = static_cast<const Tok*>(tok_v);
  const Pos* pos = static_cast<const Pos*>(pos_v);
  for (int64_t n = n0; n < n1; ++n) {
    if (n + kPrefetchAhead < n1) {
      const int64_t id = ids[n + kPrefetchAhead];
      if (id >= 0 && id < V) prefetch_row(tok + id * D, D * static_cast<int64_t>(sizeof(Tok)));
    }
    const int64_t ix = (ids[n] >= 0 && ids[n] < V) ? ids[n] : unk_id;
    const Pos* wpe_p = pos == nullptr ? nullptr : pos + (pos_ids ? pos_ids[n] : start + n % T) * D;
    if constexpr (kStream) {
      row_sum_stream(out + n * D, tok + ix * D, wpe_p, D);
    } else {
      row_sum(out + n * D, tok + ix * D, wpe_p, D);
    }
  }
#ifdef TOKPOS_STREAM_STORES
  if constexpr (kStream) _mm_sfence();  // order the streamed lines before the team's barrier
#endif
}

template <typename Tok, typename Pos>
__attribute__((always_inline)) inline void rows_out(void* out, Elem out_type, const int64_t* ids,
                                                    const void* tok, int64_t V, int64_t unk, const void* pos,
                                                    const int64_t* pos_ids, int64_t start, int64_t T,
                                                    int64_t D, int64_t n0, int64_t n1, bool stream) {
  if (out_type == Elem::kF32) {
    if (stream) return rows<Tok, Pos, float, true>(out, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
    return rows<Tok, Pos, float, false>(out, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
  }
  if (stream) return rows<Tok, Pos, bf16_t, true>(out, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
  rows<Tok, Pos, bf16_t, false>(out, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1);
}

template <typename Tok>
__attribute__((always_inline)) inline void rows_pos(void* out, Elem out_type, const int64_t* ids,
                                                    const void* tok, int64_t V, int64_t unk, const void* pos,
                                                    Elem pos_type, const int64_t* pos_ids, int64_t start,
                                                    int64_t T, int64_t D, int64_t n0, int64_t n1,
                                                    bool stream) {
  switch (pos_type) {
    case Elem::kF32:
      return rows_out<Tok, float>(out, out_type, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1, stream);
    case Elem::kBF16:
      return rows_out<Tok, bf16_t>(out, out_type, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1, stream);
    case Elem::kF16:
      return rows_out<Tok, f16_t>(out, out_type, ids, tok, V, unk, pos, pos_ids, start, T, D, n0, n1, stream);
  }
}

// One dispatch point per ISA; the type switch runs once per range, not per element.
TOKPOS_KERNEL_CLONES
void compose_range(void* out, Elem out_type, const int64_t* ids, const void* tok, Elem tok_type, int64_t V,
                   int64_t unk, const void* pos, Elem pos_type, const int64_t* pos_ids, int64_t start,
                   int64_t T, int64_t D, int64_t n0, int64_t n1, bool stream) {
  switch (tok_type) {
    case Elem::kF32:
      return rows_pos<float>(out, out_type, ids, tok, V, unk, pos, pos_type, pos_ids, start, T, D, n0, n1,
                           stream);
    case Elem::kBF16:
      return rows_pos<bf16_t>(out, out_type, ids, tok, V, unk, pos, pos_type, pos_ids, start, T, D, n0, n1,
                           stream);
    case Elem::kF16:
      return rows_pos<f16_t>(out, out_type, ids, tok, V, unk, pos, pos_type, pos_ids, start, T, D, n0, n1,
                           stream);
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
  const int64_t out_bytes = B * T * D * (out_type == Elem::kF32 ? 4 : 2);
  const bool stream = B * T > kDecodeTokens && out_bytes >= stream_min_bytes();
  over_token_ranges(B * T, B * T * D, [&](int64_t n0, int64_t n1) {
    compose_range(out, out_type, ids, tok, tok_type, V, unk, pos, pos_type, pos_ids, start, T, D, n0, n1,
                  stream);
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

// grad_row += src[order[k0]], then += src[order[k0 + 1]], ... (a row with at
// most kRowBlock sources, one at a time).
void add_rows_in_order(float* grad_row, const float* src, const int64_t* order, int64_t k0, int64_t k1,
                       int64_t D) {
  for (int64_t k = k0; k < k1; ++k) add_row(grad_row, src + order[k] * D, D);
}

// One row of src read once, added to two gradient rows (either may be null).
TOKPOS_KERNEL_CLONES
void add_row2(float* a_row, float* b_row, const float* s_row, int64_t D) {
  const float* __restrict s = s_row;
  if (a_row != nullptr && b_row != nullptr) {
    float* __restrict a = a_row;
    float* __restrict b = b_row;
    for (int64_t d = 0; d < D; ++d) {
      const float x = s[d];
      a[d] += x;
      b[d] += x;
    }
    return;
  }
  float* __restrict g = a_row != nullptr ? a_row : b_row;
  if (g != nullptr)
    for (int64_t d = 0; d < D; ++d) g[d] += s[d];
}

// The plan (never V x D scratch): the sources (rows[i] >= 0) sorted stably by
// row, so each row's sources are contiguous and in increasing i, and the
// touched rows in order with their ranges in `order` (start has one entry
// more than rows). Counting sort, O(N + V), when V is not much larger than N;
// otherwise a comparison sort, O(N log N), so a decode step does not pay for
// the whole vocabulary.
struct RowPlan {
  std::vector<int64_t> order, rows, start;
  int64_t sources(size_t g) const { return start[g + 1] - start[g]; }
};

RowPlan make_plan(const int64_t* rows, int64_t N, int64_t V) {
  RowPlan p;
  p.order.reserve(static_cast<size_t>(N));
  if (V <= 4 * N) {
    std::vector<int64_t> start(static_cast<size_t>(V) + 1, 0);
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) ++start[rows[i] + 1];
    for (int64_t v = 0; v < V; ++v) start[v + 1] += start[v];
    p.order.resize(static_cast<size_t>(start[V]));
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) p.order[fill[rows[i]]++] = i;
    for (int64_t v = 0; v < V; ++v) {
      if (start[v + 1] > start[v]) {
        p.rows.push_back(v);
        p.start.push_back(start[v]);
      }
    }
  } else {
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) p.order.push_back(i);
    std::stable_sort(p.order.begin(), p.order.end(), [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
    for (size_t k = 0; k < p.order.size(); ++k) {
      if (k == 0 || rows[p.order[k]] != rows[p.order[k - 1]]) {
        p.rows.push_back(rows[p.order[k]]);
        p.start.push_back(static_cast<int64_t>(k));
      }
    }
  }
  p.start.push_back(static_cast<int64_t>(p.order.size()));
  return p;
}

// index_add_rows2 (and, with grad_b null, index_add_rows). Two phases in one
// parallel region:
//  1. Each thread owns a share of the sources and walks them in increasing i,
//     reading each src row once. With grad_b, it owns a range of b rows
//     (positions), balanced by source count, and adds every row it reads to
//     grad_b; without, it owns the o-th range of i. It also adds the row to
//     grad_a when the a row is "local" (all of its sources are this thread's,
//     so the one-at-a-time order holds), or to the partial sum of a hot a
//     row's block whose sources are all local. With one thread everything is
//     local: one pass over src, in order.
//  2. What phase 1 left, as tasks: a rows whose sources are split between
//     threads (one task per row, its sources in order) and hot blocks (summed
//     into scratch). Then the hot rows add their block sums in order.
// Which thread does what never changes the order of additions for any row,
// so the bits are the same for every thread count. The constructor makes
// every allocation, so a failed one leaves the gradients as they were.
class Scatter {
 public:
  // b: the plan of rows_b, to fill grad_b in the same pass (every b row used
  // at most kRowBlock times), or null for grad_a alone.
  Scatter(const int64_t* rows_a, int64_t Va, const int64_t* rows_b, const RowPlan* b, int64_t N, int64_t D)
      : rows_a_(rows_a), rows_b_(rows_b), D_(D), nt_(N <= kDecodeTokens ? 1 : detail::threads_for(N * D)),
        a_(make_plan(rows_a, N, Va)) {
    assign_owners(b, N);
    plan_tasks();
    scratch_.resize(static_cast<size_t>(slots_ * D));
  }

  void run(float* grad_a, float* grad_b, const float* src);

 private:
  // Phase 1's owners: with b, thread o owns the b rows whose sources start
  // in the o-th share of b's sources; without, the o-th range of i. mine_
  // lists each owner's sources in increasing i.
  void assign_owners(const RowPlan* b, int64_t N) {
    owner_.assign(static_cast<size_t>(N), -1);
    if (b != nullptr) {
      const auto total = static_cast<int64_t>(b->order.size());
      for (size_t g = 0; g < b->rows.size(); ++g) {
        const auto o = static_cast<int32_t>(b->start[g] * nt_ / std::max<int64_t>(total, 1));
        for (int64_t k = b->start[g]; k < b->start[g + 1]; ++k) owner_[b->order[k]] = o;
      }
    } else {
      for (int64_t i = 0; i < N; ++i)
        if (rows_a_[i] >= 0) owner_[i] = static_cast<int32_t>(i * nt_ / N);
    }
    mine_start_.assign(static_cast<size_t>(nt_) + 1, 0);
    for (int64_t i = 0; i < N; ++i)
      if (owner_[i] >= 0) ++mine_start_[owner_[i] + 1];
    for (int o = 0; o < nt_; ++o) mine_start_[o + 1] += mine_start_[o];
    mine_.resize(static_cast<size_t>(mine_start_[nt_]));
    std::vector<int64_t> fill(mine_start_.begin(), mine_start_.end() - 1);
    for (int64_t i = 0; i < N; ++i)
      if (owner_[i] >= 0) mine_[fill[owner_[i]]++] = i;
  }

  // True if the a sources order[k0..k1) all belong to one phase-1 owner.
  bool local(int64_t k0, int64_t k1) const {
    const int32_t o = owner_[a_.order[k0]];
    for (int64_t k = k0; k < k1; ++k)
      if (owner_[a_.order[k]] != o || o < 0) return false;
    return true;
  }

  // Tags for phase 1, tasks for phase 2, slots for hot blocks.
  void plan_tasks() {
    tag_.assign(owner_.size(), kLater);
    for (size_t g = 0; g < a_.rows.size(); ++g) {
      const int64_t v = a_.rows[g], k0 = a_.start[g], k1 = a_.start[g + 1];
      if (k1 - k0 <= kRowBlock) {
        if (!local(k0, k1)) {
          tasks_.push_back({v, k0, k1, -1});
          continue;
        }
        for (int64_t k = k0; k < k1; ++k) tag_[a_.order[k]] = kDirect;
        continue;
      }
      hot_rows_.push_back(v);
      hot_first_slot_.push_back(slots_);
      hot_blocks_.push_back((k1 - k0 + kRowBlock - 1) / kRowBlock);
      for (int64_t b0 = k0; b0 < k1; b0 += kRowBlock, ++slots_) {
        const int64_t b1 = std::min(k1, b0 + kRowBlock);
        if (!local(b0, b1)) {
          tasks_.push_back({v, b0, b1, slots_});
          continue;
        }
        for (int64_t k = b0; k < b1; ++k) tag_[a_.order[k]] = 2 * slots_ + (k == b0 ? 1 : 0);
      }
    }
  }

  // What phase 1 does with each source's a row: kLater (phase 2 does it),
  // kDirect (grad_a row += it), or 2 * slot + first (a hot block's partial sum).
  static constexpr int64_t kLater = -1, kDirect = -2;
  struct Task {
    int64_t row, k0, k1, slot;  // slot < 0: the row's sources one at a time; else a hot block into scratch
  };
  const int64_t* rows_a_;
  const int64_t* rows_b_;
  int64_t D_;
  int nt_;
  RowPlan a_;
  std::vector<int32_t> owner_;
  std::vector<int64_t> mine_, mine_start_, tag_;
  std::vector<Task> tasks_;
  std::vector<int64_t> hot_rows_, hot_first_slot_, hot_blocks_;
  int64_t slots_ = 0;
  std::vector<float> scratch_;  // hot rows' block sums
};

void Scatter::run(float* grad_a, float* grad_b, const float* src) {
  const int64_t D = D_;
  const auto ntasks = static_cast<int64_t>(tasks_.size());
#pragma omp parallel num_threads(nt_)
  {
    // Phase 1. A team smaller than asked for takes the extra owners in turn.
    const int team = omp_get_num_threads();
    for (int o = omp_get_thread_num(); o < nt_; o += team) {
      const int64_t j1 = mine_start_[o + 1];
      for (int64_t j = mine_start_[o]; j < j1; ++j) {
        const int64_t i = mine_[j];
        if (j + kPrefetchAhead < j1 && tag_[mine_[j + kPrefetchAhead]] == kDirect)
          prefetch_row(grad_a + rows_a_[mine_[j + kPrefetchAhead]] * D, D * 4);
        const float* s = src + i * D;
        float* g = tag_[i] == kDirect ? grad_a + rows_a_[i] * D : nullptr;
        add_row2(g, grad_b != nullptr ? grad_b + rows_b_[i] * D : nullptr, s, D);
        if (tag_[i] >= 0) {
          float* part = scratch_.data() + (tag_[i] >> 1) * D;
          if (tag_[i] & 1) {
            std::copy(s, s + D, part);
          } else {
            add_row(part, s, D);
          }
        }
      }
    }
    // Phase 2, in plan order, so the rows two tasks ahead can be prefetched.
#pragma omp for schedule(dynamic, 16) nowait
    for (int64_t j = 0; j < ntasks; ++j) {
      if (j + 2 < ntasks) {
        prefetch_row(src + a_.order[tasks_[j + 2].k0] * D, D * 4);
        if (tasks_[j + 2].slot < 0) prefetch_row(grad_a + tasks_[j + 2].row * D, D * 4);
      }
      const Task& t = tasks_[j];
      if (t.slot < 0) {
        add_rows_in_order(grad_a + t.row * D, src, a_.order.data(), t.k0, t.k1, D);
      } else {
        sum_block(scratch_.data() + t.slot * D, src, a_.order.data(), t.k0, t.k1, D);
      }
    }
#pragma omp barrier
    // Hot rows: grad[v] += block sums in block order, columns split across threads.
    const int64_t col_chunk = 256;
    const int64_t chunks = (D + col_chunk - 1) / col_chunk;
    const auto hot = static_cast<int64_t>(hot_rows_.size());
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < hot * chunks; ++item) {
      const int64_t h = item / chunks, c0 = (item % chunks) * col_chunk, len = std::min(col_chunk, D - c0);
      const int64_t v = hot_rows_[h];
      for (int64_t q = 0; q < hot_blocks_[h]; ++q) {
        add_row(grad_a + v * D + c0, scratch_.data() + (hot_first_slot_[h] + q) * D + c0, len);
      }
    }
  }
}

void index_add_cpu(float* grad_a, const int64_t* rows_a, int64_t Va, float* grad_b, const int64_t* rows_b,
                   int64_t Vb, const float* src, int64_t N, int64_t D) {
  if (grad_b == nullptr) return Scatter(rows_a, Va, nullptr, nullptr, N, D).run(grad_a, nullptr, src);
  const RowPlan b = make_plan(rows_b, N, Vb);
  bool hot_b = false;
  for (size_t g = 0; g < b.rows.size(); ++g) hot_b = hot_b || b.sources(g) > kRowBlock;
  if (!hot_b) return Scatter(rows_a, Va, rows_b, &b, N, D).run(grad_a, grad_b, src);
  // A b row used more than kRowBlock times (positions with B > 64) would need
  // its block sums spread over threads: one call each, both planned first.
  Scatter first(rows_a, Va, nullptr, nullptr, N, D), second(rows_b, Vb, nullptr, nullptr, N, D);
  first.run(grad_a, nullptr, src);
  second.run(grad_b, nullptr, src);
}

void index_add_rows_cpu(float* grad, const float* src, const int64_t* rows, int64_t N, int64_t V, int64_t D) {
  index_add_cpu(grad, rows, V, nullptr, nullptr, 0, src, N, D);
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
                                 compose_typed_cpu, index_add_cpu};
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
