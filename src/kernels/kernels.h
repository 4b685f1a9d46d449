// Private: the kernels. Functions on typed, strided views that never check
// anything: the ops layer (src/ops) validates every argument first, so a
// kernel only ever sees valid input, except that a caller's index array may
// change after the check: each index is bounded as it is read (Index). The
// forward kernels never allocate; the backward kernels make every
// allocation (in the caller's Workspace) before writing anything, so
// std::bad_alloc leaves the gradients as they were.
//
// Each back end fills a KernelTable (as ggml's backends do) and registers it
// (backends()). The reference back end is plain loops and is the source of
// truth; every other back end declares whether it matches it bit for bit or
// within a tolerance, and tests/kernels_test.cc checks each registered back
// end against that declaration on many shapes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tokpos/dtype.h"

namespace tokpos::kernels {

// ---- Views ------------------------------------------------------------------

// An int32 or int64 index per (b, t): element (b, t) at data[b*sb + t*st].
// data == nullptr means "none" (the kernel documents what that stands for).
//
// The array is the caller's, and another thread may change it while a call
// runs, after the ops layer checked it. So at() reads an element exactly
// once (a relaxed atomic load: a plain load on every target, which the
// compiler may not repeat), and every kernel that addresses memory with an
// index takes it through within(): the one value read, bounded in a
// register. A raced caller then gets rows it did not ask for, never an
// access outside the buffers it passed. Without a race the bound never
// fires (the ops layer checked every value), so the results are unchanged.
struct Index {
  const void* data = nullptr;
  DType type = DType::kI64;
  int64_t sb = 0, st = 1;
  int64_t at(int64_t b, int64_t t) const {
    const int64_t off = b * sb + t * st;
    return type == DType::kI64 ? __atomic_load_n(static_cast<const int64_t*>(data) + off, __ATOMIC_RELAXED)
                               : __atomic_load_n(static_cast<const int32_t*>(data) + off, __ATOMIC_RELAXED);
  }
  // at(b, t) when it lies in [0, limit), else fallback.
  int64_t within(int64_t b, int64_t t, int64_t limit, int64_t fallback) const {
    const int64_t x = at(b, t);
    return static_cast<uint64_t>(x) < static_cast<uint64_t>(limit) ? x : fallback;
  }
  static Index contiguous(const int64_t* p, int64_t T) { return {p, DType::kI64, T, 1}; }
};

// A table: row r at data + r*stride elements of type, unit stride inside.
struct Rows {
  const void* data = nullptr;
  DType type = DType::kF32;
  int64_t stride = 0;
};

// Where (b, t)'s output row starts: data + b*sb + t*st elements of type.
struct OutRows {
  void* data = nullptr;
  DType type = DType::kF32;
  int64_t sb = 0, st = 0;
};

// How a call runs (the ops layer resolves it from a Context).
struct Workspace;
struct Exec {
  int threads = 1;                    // >= 1
  int64_t stream_min_bytes = INT64_MAX;  // outputs of at least this many bytes are streamed
  Workspace* ws = nullptr;            // scratch kept between calls; nullptr: allocate per call
};

// Threads for a job of `work` float operations under ex (common/parallel.h's
// rule with ex.threads as the most).
int threads_for(const Exec& ex, int64_t work);

// ---- Forward ------------------------------------------------------------------

// out(b, t) = tok[row(b, t)] (+ pos[pos(b, t)] when pos.data is set), widened
// to float, added in float, rounded once to out.type (f32, bf16 or f16,
// round to nearest even):
//   row(b, t) = ids(b, t) if it is in [0, V), else unk_id   (unk_id in [0, V))
//   pos(b, t) = pos_ids(b, t) if pos_ids.data is set, else start + t
// Under the error policy the ops layer has checked every id, so the UNK
// branch never fires; it keeps the kernel memory-safe either way. Likewise
// an explicit position outside [0, L), L the rows of pos, which only a
// caller changing pos_ids during the call can produce, reads row 0
// (Index::within); start + t is checked by the ops layer and not re-read.
// zero_outside (a vocab shard): an id outside [0, V) adds nothing instead,
//   out(b, t) = pos[pos(b, t)] rounded to out.type (zeros without pos).
// Overwrites out; each element is written once, with no temporary.
// float64: tok, pos (when set) and out are all f64 (the ops layer checks
// it), and the sum is taken in double: out(b, t) = tok[row] + pos[pos], no
// widening and no rounding.
struct Gather {
  OutRows out;
  Index ids;
  int64_t V = 0, unk_id = 0;
  bool zero_outside = false;
  Rows tok, pos;
  Index pos_ids;
  int64_t L = 0;  // the rows of pos (when pos.data is set)
  int64_t start = 0;
  int64_t B = 0, T = 0, D = 0;
};
using ComposeForwardFn = void(const Gather& g, const Exec& ex);

// BERT's input stage, fused: for each (b, t),
//   x = (tok[row] + types[type_ids(b, t)]) + pos[pos(b, t)]
// in exactly that order (as transformers' BertEmbeddings adds them), then, if
// gamma is not null, LayerNorm over the row: (x - mean) / sqrt(var + eps) *
// gamma + beta, with mean and var accumulated in double. f32 tables and
// output. type_ids.data null means type 0; types.data null means no
// token-type term; a type id outside [0, type_rows) reads row 0 (a raced
// caller's, as for positions). Overwrites out.
struct TypedGather {
  Gather g;
  Index type_ids;
  Rows types;
  int64_t type_rows = 0;  // the rows of types (>= 1 when types.data is set)
  const float* gamma = nullptr;
  const float* beta = nullptr;
  double eps = 0;
};
using ComposeTypedFn = void(const TypedGather& g, const Exec& ex);

// ---- Quantized token tables ----------------------------------------------------

// A token table in one of ggml's block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K; the plain types F32, F16 and BF16 take
// the Gather path): row r is the D / block_size blocks at data + r*stride
// bytes, D a whole number of blocks (the ops layer checks it).
struct QuantRows {
  const uint8_t* data = nullptr;
  int type = 0;         // ggml's type value (tokpos::GgmlType)
  int64_t stride = 0;   // bytes from one row to the next
};
// out(b, t) = dequant(tok, row(b, t)) (+ pos[pos(b, t)]) rounded once to
// out.type, where dequant(tok, r)[d] is the float ggml's dequantize_row_<type>
// gives for element d of row r (ggml-quants.c, the operations in its order:
// fp16 scales widened exactly, then (d * sc) * q, the min subtracted last),
// and the position row added to it in float as the Gather path adds it.
// Everything else (ids, UNK, shards, positions, out) as Gather, whose tok
// field is unused.
struct QuantGather {
  Gather g;
  QuantRows tok;
};
using ComposeQuantFn = void(const QuantGather& g, const Exec& ex);
// The supported block types, and the reference's element d of a row (the
// definition above, one element at a time: reference/quant.cc).
bool is_quant_block_type(int type);
float dequant_element_ref(int type, const uint8_t* row, int64_t d);

// ---- Backward -----------------------------------------------------------------

// The sources of each row, grouped: order lists the sources i (rows[i] >= 0)
// sorted stably by row, so each row's sources are contiguous and in
// increasing i; rows lists the touched rows in increasing order and
// start[g] .. start[g+1] their range in order (start has one entry more).
struct RowGroups {
  std::vector<int64_t> order, rows, start;
  int64_t sources(size_t g) const { return start[g + 1] - start[g]; }
  int64_t max_sources() const;
};
// Counting sort, O(N + V), when V is not much larger than N; otherwise a
// comparison sort, O(N log N), so a decode step does not pay for the whole
// vocabulary. rows[i] < 0 are left out.
RowGroups group_rows(const int64_t* rows, int64_t N, int64_t V);

// One gradient: grad row r at grad + r*stride; source i adds to row rows[i]
// (rows[i] < 0: skipped); groups = group_rows(rows, N, V), or nullptr when
// the caller makes them on demand: then make_groups(make_arg) returns them
// (and may throw std::bad_alloc), so a kernel path that needs no grouping
// never pays for the sort. A kernel asks for them, if at all, before it
// writes anything.
template <typename E>
struct GradTargetOf {
  E* grad = nullptr;  // nullptr: this gradient is not wanted
  int64_t stride = 0;
  const int64_t* rows = nullptr;
  const RowGroups* groups = nullptr;
  int64_t V = 0;
  const RowGroups& (*make_groups)(const void* arg) = nullptr;
  const void* make_arg = nullptr;
  // Set: row v's sources are scaled by row_scale[v] (V entries), each
  // source added as one fused multiply-add, one at a time in increasing i
  // whatever the count (no blocks), as PyTorch's CPU backward adds
  // scale_grad_by_freq's rows: grad[v] = fma(row_scale[v], s_i, grad[v]).
  const E* row_scale = nullptr;
  const RowGroups& grouping() const { return groups != nullptr ? *groups : make_groups(make_arg); }
};
using GradTarget = GradTargetOf<float>;
using GradTarget64 = GradTargetOf<double>;

// Source i = (b, t) = (i / T, i % T) is the row src + b*sb + t*st, (D) elements.
template <typename E>
struct SourceOf {
  const E* data = nullptr;
  int64_t sb = 0, st = 0;
  int64_t B = 0, T = 0, D = 0;
  const E* row(int64_t i) const { return data + (i / T) * sb + (i % T) * st; }
};
using Source = SourceOf<float>;
using Source64 = SourceOf<double>;

// a.grad += the sources grouped by a.rows, and b.grad likewise (either may
// be absent). Accumulates; only listed rows change; the two gradients must
// not overlap. The order of the floating-point additions is part of the
// definition, so every back end and every thread count gives the same bits.
// For each row v with sources i_1 < i_2 < ... < i_n:
//   n <= kRowBlock: one at a time, in order (as llm.c's encoder_backward and
//                   PyTorch's index_add_ do):  grad[v] = ((grad[v] + s_1) + s_2) + ...
//   n >  kRowBlock: blocks of kRowBlock sources, each summed from its first
//                   source, in order; the block sums added to grad[v] in order:
//                   grad[v] = ((grad[v] + (s_1 + ... + s_64)) + (s_65 + ...)) + ...
// When no row of either target has more than kRowBlock sources, that order
// is plain (b, t) order for every element, and the cpu back end needs no
// grouping: one pass in (b, t) order, or with several threads rows dealt to
// owners, each owner adding its rows' sources in (b, t) order.
// Fixed blocks let a row used thousands of times be summed by many threads;
// a row used at most 64 times needs no scratch, so a kernel may add each
// source the moment it reads it.
inline constexpr int64_t kRowBlock = 64;
using IndexAddRowsFn = void(const GradTarget& a, const GradTarget& b, const Source& src, const Exec& ex);
// The same in float64 (f64 gradients and sources), in the same order, so
// the same definition: each row's sources in increasing i, blocks of
// kRowBlock beyond kRowBlock sources.
using IndexAddRows64Fn = void(const GradTarget64& a, const GradTarget64& b, const Source64& src,
                              const Exec& ex);

// ---- RoPE ----------------------------------------------------------------------

// Rotary position embedding of x (B, T, H, D) into out (the same shape and
// dtype; out may be x itself, element for element): for each (b, t) the
// position p = pos(b, t) in [0, 2^31) (read through Index::within: a value
// a racing caller put outside that range counts as 0), and for each pair
// i < half (rotary dims 2 * half <= D) the angle p * inv_freq[i] from
// common/rope_angle.h,
//   c = float(cos * attention_factor), s = float(sin * attention_factor)
// (negated s when inverse: the transposed rotation), then in float
//   out[i0] = x[i0] * c - x[i1] * s,   out[i1] = x[i1] * c + x[i0] * s
// with (i0, i1) = (i, i + half) for kHalf, (2i, 2i + 1) for kInterleaved,
// rounded once to out's type; dims past 2 * half are copied. Element
// (b, t, h, d) is at data + b*sb + t*st + h*sh + d. turns holds
// rope_turns(inv_freq[i]) (common/rope_angle.h), t0 at [i] and t1 at
// [half + i], made once per call by the ops layer; a back end may use them
// instead of inv_freq. scratch holds 2 * half floats per thread of ex.threads.
enum class RopeLayout : int { kHalf = 0, kInterleaved = 1 };
struct RopeApply {
  const void* x = nullptr;
  int64_t xsb = 0, xst = 0, xsh = 0;
  void* out = nullptr;
  int64_t osb = 0, ost = 0, osh = 0;
  DType type = DType::kF32;
  Index pos;
  const double* inv_freq = nullptr;
  int64_t half = 0;
  int64_t B = 0, T = 0, H = 0, D = 0;
  RopeLayout layout = RopeLayout::kHalf;
  double attention_factor = 1.0;
  bool inverse = false;
  const double* turns = nullptr;
  float* scratch = nullptr;
};
using ApplyRopeFn = void(const RopeApply& r, const Exec& ex);

// out = x rotated by the caller's cos and sin tables (ops::apply_rope_tables,
// transformers' apply_rotary_pos_emb): for each (b, t, h) and each pair
// (j0, j1) of the layout among the first R dims ((i, i + R/2) for kHalf,
// (2i, 2i + 1) for kInterleaved), with c and s the row (b, t) of cos and sin
// and rnd the rounding to the type (none for float32), in float
//   out[j0] = rnd(rnd(x[j0] * c[j0]) - rnd(x[j1] * s[j0]))
//   out[j1] = rnd(rnd(x[j1] * c[j1]) + rnd(x[j0] * s[j1]))
// and with inverse (the transposed map, the backward)
//   out[j0] = rnd(rnd(x[j0] * c[j0]) + rnd(x[j1] * s[j1]))
//   out[j1] = rnd(rnd(x[j1] * c[j1]) - rnd(x[j0] * s[j0]));
// dims past R are copied. x, out, cos and sin share the type; out may be x
// itself, element for element. Element (b, t, h, d) of x at x + b*xsb +
// t*xst + h*xsh + d, element (b, t, d) of cos at cos + b*csb + t*cst + d
// (strides may be 0: a row shared by every b).
struct RopeTables {
  const void* x = nullptr;
  int64_t xsb = 0, xst = 0, xsh = 0;
  void* out = nullptr;
  int64_t osb = 0, ost = 0, osh = 0;
  const void* cos = nullptr;
  int64_t csb = 0, cst = 0;
  const void* sin = nullptr;
  int64_t ssb = 0, sst = 0;
  DType type = DType::kF32;
  int64_t B = 0, T = 0, H = 0, D = 0, R = 0;
  RopeLayout layout = RopeLayout::kHalf;
  bool inverse = false;
};
using ApplyRopeTablesFn = void(const RopeTables& r, const Exec& ex);

// ---- Back ends -----------------------------------------------------------------

struct KernelTable {
  const char* name;
  // 0: bitwise equal to the reference; else the largest relative difference
  // from it that the back end allows (kernels_test checks the declaration).
  double tolerance;
  ComposeForwardFn* compose_forward;
  ComposeTypedFn* compose_typed;
  IndexAddRowsFn* index_add_rows;
  ApplyRopeFn* apply_rope;
  ComposeQuantFn* compose_quant;
  IndexAddRows64Fn* index_add_rows_f64;
  ApplyRopeTablesFn* apply_rope_tables;
};

const KernelTable& reference_kernels();
const KernelTable& cpu_kernels();
// Every registered back end, the reference first.
std::span<const KernelTable* const> backends();
// What the ops layer calls: cpu_kernels().
const KernelTable& active_kernels();

// Scratch kept between backward calls (Context owns one); grown, never shrunk.
struct Workspace {
  std::vector<int32_t> owner;
  std::vector<int64_t> mine, mine_start, tag, tasks, hot;
  std::vector<float> scratch;
  std::vector<uint8_t> uses;  // per row, sources counted up to kRowBlock + 1; all zero between calls
  size_t bytes() const;
  void release();
};

}  // namespace tokpos::kernels
