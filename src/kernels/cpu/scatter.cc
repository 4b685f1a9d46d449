// The cpu backward: a scatter-add of d_out rows into the gradient rows, in
// the summation order kernels.h defines, so the bits never depend on the
// thread count. Bitwise equal to the reference.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/kernels.h"

namespace tokpos::kernels::cpu {
namespace {

// block (D) = src[order[k0]] + src[order[k0 + 1]] + ... up to k1, in order.
TOKPOS_KERNEL_CLONES
void sum_block(float* block, const Source& src, const int64_t* order, int64_t k0, int64_t k1) {
  const int64_t D = src.D;
  float* __restrict acc = block;
  const float* __restrict first = src.row(order[k0]);
  for (int64_t d = 0; d < D; ++d) acc[d] = first[d];
  for (int64_t k = k0 + 1; k < k1; ++k) {
    const float* __restrict s = src.row(order[k]);
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
void add_rows_in_order(float* grad_row, const Source& src, const int64_t* order, int64_t k0, int64_t k1) {
  for (int64_t k = k0; k < k1; ++k) add_row(grad_row, src.row(order[k]), src.D);
}

// One row of src added to two gradient rows (either may be null), in one
// pass that reads s once and overlaps the misses on s, a and b.
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

// Both gradients (b optional) in one parallel region, two phases:
//  1. Each thread owns a share of the sources and walks them in increasing i,
//     reading each src row once. With b, it owns a range of b rows
//     (positions), balanced by source count, and adds every row it reads to
//     b; without, it owns the o-th range of i. It also adds the row to a
//     when the a row is "local" (all of its sources are this thread's, so
//     the one-at-a-time order holds), or to the partial sum of a hot a row's
//     block whose sources are all local. With one thread everything is
//     local: one pass over src, in order.
//  2. What phase 1 left, as tasks: a rows whose sources are split between
//     threads (one task per row, its sources in order) and hot blocks (summed
//     into scratch). Then the hot rows add their block sums in order.
// Each phase is a call of common/parallel.h's chunks, owners and tasks taken
// dynamically, and ends when all of its chunks have.
// Which thread does what never changes the order of additions for any row,
// so the bits are the same for every thread count. The constructor makes
// every allocation (in the workspace), so a failed one leaves the gradients
// as they were.
class Scatter {
 public:
  // b_owned: the b target is filled in the same pass (every b row used at
  // most kRowBlock times); else only a.
  Scatter(const GradTarget& a, const GradTarget* b_owned, const Source& src, const Exec& ex, Workspace& ws)
      : a_(a),
        groups_(&a.grouping()),
        src_(src),
        ws_(ws),
        nt_(src.B * src.T <= kDecodeTokens ? 1 : threads_for(ex, src.B * src.T * src.D)) {
    assign_owners(b_owned);
    plan_tasks();
    ws_.scratch.resize(static_cast<size_t>(slots_ * src.D));
  }

  void run(const GradTarget* b);

 private:
  static constexpr int64_t kLater = -1, kDirect = -2;  // tags, with 2 * slot + first for hot blocks
  static constexpr int kTaskWords = 4;                  // row, k0, k1, slot (slot < 0: one at a time)
  static constexpr int kHotWords = 3;                   // row, first slot, blocks

  void assign_owners(const GradTarget* b) {
    const int64_t N = src_.B * src_.T;
    auto& owner = ws_.owner;
    owner.assign(static_cast<size_t>(N), -1);
    if (b != nullptr) {
      const RowGroups& g = b->grouping();
      const auto total = static_cast<int64_t>(g.order.size());
      for (size_t r = 0; r < g.rows.size(); ++r) {
        const auto o = static_cast<int32_t>(g.start[r] * nt_ / std::max<int64_t>(total, 1));
        for (int64_t k = g.start[r]; k < g.start[r + 1]; ++k) owner[g.order[k]] = o;
      }
    } else {
      for (int64_t i = 0; i < N; ++i)
        if (a_.rows[i] >= 0) owner[i] = static_cast<int32_t>(i * nt_ / N);
    }
    auto& ms = ws_.mine_start;
    ms.assign(static_cast<size_t>(nt_) + 1, 0);
    for (int64_t i = 0; i < N; ++i)
      if (owner[i] >= 0) ++ms[owner[i] + 1];
    for (int o = 0; o < nt_; ++o) ms[o + 1] += ms[o];
    ws_.mine.resize(static_cast<size_t>(ms[nt_]));
    // Fill through tag (sized N below anyway) as the running cursor per owner.
    auto& fill = ws_.tag;
    fill.assign(ms.begin(), ms.end() - 1);
    for (int64_t i = 0; i < N; ++i)
      if (owner[i] >= 0) ws_.mine[fill[owner[i]]++] = i;
  }

  // True if the a sources order[k0..k1) all belong to one phase-1 owner.
  bool local(int64_t k0, int64_t k1) const {
    const auto& order = groups_->order;
    const int32_t o = ws_.owner[order[k0]];
    for (int64_t k = k0; k < k1; ++k)
      if (ws_.owner[order[k]] != o || o < 0) return false;
    return true;
  }

  void plan_tasks() {
    const RowGroups& g = *groups_;
    auto& tag = ws_.tag;
    tag.assign(ws_.owner.size(), kLater);
    ws_.tasks.clear();
    ws_.hot.clear();
    for (size_t r = 0; r < g.rows.size(); ++r) {
      const int64_t v = g.rows[r], k0 = g.start[r], k1 = g.start[r + 1];
      if (k1 - k0 <= kRowBlock) {
        if (!local(k0, k1)) {
          ws_.tasks.insert(ws_.tasks.end(), {v, k0, k1, -1});
          continue;
        }
        for (int64_t k = k0; k < k1; ++k) tag[g.order[k]] = kDirect;
        continue;
      }
      ws_.hot.insert(ws_.hot.end(), {v, slots_, (k1 - k0 + kRowBlock - 1) / kRowBlock});
      for (int64_t b0 = k0; b0 < k1; b0 += kRowBlock, ++slots_) {
        const int64_t b1 = std::min(k1, b0 + kRowBlock);
        if (!local(b0, b1)) {
          ws_.tasks.insert(ws_.tasks.end(), {v, b0, b1, slots_});
          continue;
        }
        for (int64_t k = b0; k < b1; ++k) tag[g.order[k]] = 2 * slots_ + (k == b0 ? 1 : 0);
      }
    }
  }

  GradTarget a_;
  const RowGroups* groups_;
  Source src_;
  Workspace& ws_;
  int nt_;
  int64_t slots_ = 0;
};

void Scatter::run(const GradTarget* b) {
  const int64_t D = src_.D;
  const int64_t* tag = ws_.tag.data();
  const int64_t* mine = ws_.mine.data();
  const int64_t* ms = ws_.mine_start.data();
  const int64_t* tasks = ws_.tasks.data();
  const int64_t* hot = ws_.hot.data();
  const int64_t* order = groups_->order.data();
  float* scratch = ws_.scratch.data();
  const auto ntasks = static_cast<int64_t>(ws_.tasks.size()) / kTaskWords;
  const auto nhot = static_cast<int64_t>(ws_.hot.size()) / kHotWords;
  float* grad_a = a_.grad;
  const int64_t as = a_.stride;
  const int64_t* rows_a = a_.rows;
  const Source& src = src_;
  // Phase 1: each owner's sources, an owner a chunk.
  detail::parallel_chunks(nt_, nt_, [&](int64_t o, int) {
    const int64_t j1 = ms[o + 1];
    for (int64_t j = ms[o]; j < j1; ++j) {
      const int64_t i = mine[j];
      if (j + kPrefetchAhead < j1 && tag[mine[j + kPrefetchAhead]] == kDirect)
        prefetch_row(grad_a + rows_a[mine[j + kPrefetchAhead]] * as, D * 4);
      const float* s = src.row(i);
      // A hot block's first source is copied into its partial sum; the
      // others are added to it in the same pass as to the b row.
      float* part = tag[i] >= 0 ? scratch + (tag[i] >> 1) * D : nullptr;
      const bool first = part != nullptr && (tag[i] & 1) != 0;
      if (first) std::copy(s, s + D, part);
      float* g = tag[i] == kDirect ? grad_a + rows_a[i] * as : (first ? nullptr : part);
      add_row2(g, b != nullptr ? b->grad + b->rows[i] * b->stride : nullptr, s, D);
    }
  });
  // Phase 2, in plan order, kTasksPerChunk tasks a chunk, so the rows two
  // tasks ahead can be prefetched.
  constexpr int64_t kTasksPerChunk = 16;
  detail::parallel_chunks(nt_, (ntasks + kTasksPerChunk - 1) / kTasksPerChunk, [&](int64_t c, int) {
    for (int64_t j = c * kTasksPerChunk; j < std::min(ntasks, (c + 1) * kTasksPerChunk); ++j) {
      const int64_t* t = tasks + j * kTaskWords;
      if (j + 2 < ntasks) {
        const int64_t* ahead = t + 2 * kTaskWords;
        prefetch_row(src.row(order[ahead[1]]), D * 4);
        if (ahead[3] < 0) prefetch_row(grad_a + ahead[0] * as, D * 4);
      }
      if (t[3] < 0) {
        add_rows_in_order(grad_a + t[0] * as, src, order, t[1], t[2]);
      } else {
        sum_block(scratch + t[3] * D, src, order, t[1], t[2]);
      }
    }
  });
  // Hot rows: grad[v] += block sums in block order, columns split across threads.
  const int64_t col_chunk = 256;
  const int64_t chunks = (D + col_chunk - 1) / col_chunk;
  detail::parallel_chunks(nt_, nhot * chunks, [&](int64_t item, int) {
    const int64_t* h = hot + (item / chunks) * kHotWords;
    const int64_t c0 = (item % chunks) * col_chunk, len = std::min(col_chunk, D - c0);
    for (int64_t q = 0; q < h[2]; ++q) add_row(grad_a + h[0] * as + c0, scratch + (h[1] + q) * D + c0, len);
  });
}

// ---- No grouping: every row has at most kRowBlock sources -------------------

// ws.uses of the rows of t's first n sources back to zero.
void forget_counts(const GradTarget& t, int64_t n, Workspace& ws) {
  for (int64_t i = 0; i < n; ++i)
    if (const int64_t r = t.rows[i]; r >= 0) ws.uses[r] = 0;
}

// At least the most sources any row of t has, and exact up to kRowBlock + 1
// (0 for an absent t). N <= kRowBlock answers N at once (a decode step); a
// grouping already made answers from its groups; else the sources are
// counted in ws.uses, one byte a row, when V bytes are small beside the
// N * D floats of the call; otherwise the grouping is made and asked. The
// counts are left all zero again, unless `kept` is given and the answer is
// at most kRowBlock: then they stay, *kept says so, and forget_counts clears
// them.
int64_t most_sources(const GradTarget& t, int64_t N, int64_t D, Workspace& ws, bool* kept = nullptr) {
  if (t.grad == nullptr) return 0;
  if (N <= kRowBlock) return N;
  if (t.groups == nullptr && t.V <= std::max<int64_t>(4 * N, N * D / 16)) {
    auto& uses = ws.uses;
    if (uses.size() < static_cast<size_t>(t.V)) uses.resize(static_cast<size_t>(t.V), 0);
    int64_t i = 0, most = 0;
    for (; i < N && most <= kRowBlock; ++i)
      if (const int64_t r = t.rows[i]; r >= 0) most = std::max<int64_t>(most, ++uses[r]);
    if (kept != nullptr && most <= kRowBlock) return *kept = true, most;
    forget_counts(t, i, ws);
    return most;
  }
  return t.grouping().max_sources();
}

// A decode step's form of add_listed over all sources (at most
// kDecodeTokens, whose rows fit in the L2): chunk by chunk of kStepChunk
// channels, every source's chunk is added to its a row, and to a copy of
// its b row's chunk held in a local buffer for as long as consecutive
// sources share that b row (in a batch of one-token sequences every source
// adds to one position row). The b row is then read and written once a run
// instead of once a source; each element still gets its sources one at a
// time in (b, t) order, so the bits are add_listed's. Against add_listed
// itself, a warm step (B 16, D 4096) ran 0.77-0.82x the serial loop's
// speed without the buffer, 1.00x with it (2-vCPU Zen 4).
inline constexpr int64_t kStepChunk = 2048;
TOKPOS_KERNEL_CLONES
void add_step_in_order(const GradTarget& a, const GradTarget& b, const Source& src) {
  const int64_t N = src.B * src.T, D = src.D;
  float* const ga = a.grad;
  float* const gb = b.grad;
  const int64_t as = a.stride, bs = b.stride;
  // Every token row and source row asked for at once, one line a page, as
  // the forward's decode step does: with cold rows (fresh ids each call) the
  // step took 34.8 us against 42.7 us without, warm 10.6 against 10.5 us
  // (2-vCPU Zen 4, B 16, D 4096, medians of 15 interleaved rounds).
  if (prefetch_bytes() != 0) {
    for (int64_t i = 0; i < N; ++i) {
      if (ga != nullptr && a.rows[i] >= 0) prefetch_pages(ga + a.rows[i] * as, D * 4);
      prefetch_pages(src.row(i), D * 4);
    }
  }
  alignas(64) float held[kStepChunk];
  for (int64_t c0 = 0; c0 < D; c0 += kStepChunk) {
    const int64_t len = std::min(kStepChunk, D - c0);
    int64_t held_row = -1;
    for (int64_t i = 0; i < N; ++i) {
      const float* s = src.row(i) + c0;
      if (ga != nullptr && a.rows[i] >= 0) add_row(ga + a.rows[i] * as + c0, s, len);
      if (gb == nullptr) continue;
      if (const int64_t r = b.rows[i]; r != held_row) {
        if (held_row >= 0) std::copy(held, held + len, gb + held_row * bs + c0);
        if (r >= 0) std::copy(gb + r * bs + c0, gb + r * bs + c0 + len, held);
        held_row = r;
      }
      if (held_row >= 0) add_row(held, s, len);
    }
    if (held_row >= 0) std::copy(held, held + len, gb + held_row * bs + c0);
  }
}

// The sources `list` names (n entries 2 i + with_rider, in increasing i; no
// list: sources 0 .. n - 1, each with the rider): t.grad's row of each, and
// rider's where the entry says so (either target may be absent), += the
// source row, whole rows, one source at a time. The rows a few sources
// ahead are prefetched (scattered token rows: nothing else predicts them).
TOKPOS_KERNEL_CLONES
void add_listed(const GradTarget& t, const GradTarget& rider, const Source& src, const int64_t* list, int64_t n) {
  const int64_t D = src.D, ahead = prefetch_rows_ahead(D * 4);
  const bool flat = src.sb == src.T * src.st;  // (B, T, D) rows back to back: no division
  auto entry = [&](int64_t j) { return list != nullptr ? list[j] : 2 * j + 1; };
  auto src_row = [&](int64_t i) { return flat ? src.data + i * src.st : src.row(i); };
  auto row_of = [](const GradTarget& g, int64_t i) -> float* {
    return g.grad != nullptr && g.rows[i] >= 0 ? g.grad + g.rows[i] * g.stride : nullptr;
  };
  for (int64_t j = 0; j < n; ++j) {
    if (ahead > 0 && j + ahead < n) {
      const int64_t e = entry(j + ahead), i = e >> 1;
      if (const float* g = row_of(t, i)) prefetch_pages(g, D * 4);
      if (const float* g = (e & 1) != 0 ? row_of(rider, i) : nullptr) prefetch_pages(g, D * 4);
      prefetch_pages(src_row(i), D * 4);
    }
    const int64_t e = entry(j), i = e >> 1;
    add_row2(row_of(t, i), (e & 1) != 0 ? row_of(rider, i) : nullptr, src_row(i), D);
  }
}

inline constexpr int64_t kOwnersPerThread = 8;  // per target, at least

// The whole scatter without a grouping when the order kernels.h defines is
// plain (b, t) order (no row of either target has more than kRowBlock
// sources); false, with nothing written, where it is not.
// One thread: one pass in (b, t) order, each source row read once for both
// targets. More: the rows of one target p are dealt to owners (row r to
// owner r mod a power of two, so a run of popular ids is spread), each
// owner's sources listed in increasing i, and the owners taken dynamically
// as chunks: every row gets its sources one at a time in (b, t) order
// whoever owns it, so the bits are the serial loop's, and a thread another
// process holds up delays the call by one owner's share. The other target
// q's row of a source is added in the same visit where that row has just
// this one source (it needs no order); q's other sources follow as a second
// pass, dealt to owners the same way. p is a, q b when each b row has at
// most one source (positions with B = 1: d_out is read once); else p is b,
// and a's rows used once ride with it where a's uses were counted.
bool scatter_in_order(const GradTarget& a, const GradTarget& b, const Source& src, const Exec& ex, Workspace& ws) {
  const int64_t N = src.B * src.T, D = src.D;
  const int nt = N <= kDecodeTokens ? 1 : threads_for(ex, N * D);
  const int64_t most_b = most_sources(b, N, D, ws);
  if (most_b > kRowBlock) return false;
  int64_t per = 1;
  while (nt > 1 && per < kOwnersPerThread * nt) per *= 2;
  auto& start = ws.mine_start;
  auto& list = ws.mine;
  auto& cursor = ws.tag;
  if (nt > 1) {  // every allocation before a's uses are counted and kept
    start.assign(static_cast<size_t>(2 * per + 1), 0);
    list.resize(static_cast<size_t>(2 * N));
    cursor.resize(static_cast<size_t>(2 * per));
  }
  const bool b_first = b.grad != nullptr && (most_b > 1 || a.grad == nullptr);
  bool counted = false;  // a's uses stay in ws.uses until the lists are made
  if (most_sources(a, N, D, ws, nt > 1 && b_first ? &counted : nullptr) > kRowBlock) return false;
  if (nt == 1) {
    if (N <= kDecodeTokens) return add_step_in_order(a, b, src), true;
    return add_listed(a, b, src, nullptr, N), true;
  }
  const GradTarget& p = b_first ? b : a;
  const GradTarget& q = b_first ? a : b;
  auto has_row = [](const GradTarget& g, int64_t i) { return g.grad != nullptr && g.rows[i] >= 0; };
  // Source i's entries: 2 i + rides under p's owner of its row (owner i mod
  // per when only q's riding row is there), and 2 i under q's owner (per +
  // its row mod per) when q's row does not ride.
  auto each_entry = [&](auto&& put) {
    for (int64_t i = 0; i < N; ++i) {
      const bool in_p = has_row(p, i), in_q = has_row(q, i);
      const bool rides = in_q && (!b_first || (counted && ws.uses[q.rows[i]] == 1));
      if (in_p || rides) put((in_p ? p.rows[i] : i) & (per - 1), 2 * i + (rides ? 1 : 0));
      if (in_q && !rides) put(per + (q.rows[i] & (per - 1)), 2 * i);
    }
  };
  each_entry([&](int64_t o, int64_t) { ++start[o + 1]; });
  for (int64_t o = 0; o < 2 * per; ++o) start[o + 1] += start[o];
  std::copy(start.begin(), start.end() - 1, cursor.begin());
  each_entry([&](int64_t o, int64_t e) { list[cursor[o]++] = e; });
  if (counted) forget_counts(a, N, ws);
  const GradTarget none{};
  detail::parallel_chunks(nt, 2 * per, [&](int64_t c, int) {
    const int64_t n = start[c + 1] - start[c];
    if (n > 0) add_listed(c < per ? p : q, c < per ? q : none, src, list.data() + start[c], n);
  });
  return true;
}

// ---- Scaled rows (scale_grad_by_freq) -------------------------------------------

// t.grad[v] = fma(t.row_scale[v], s_i, t.grad[v]) for each source i of v in
// increasing i; a thread owns whole rows, so the bits never depend on the
// thread count.
inline constexpr int64_t kRowsPerChunk = 16;
template <typename E>
void index_add_scaled(const GradTargetOf<E>& t, const RowGroups& groups, const SourceOf<E>& src, int nt) {
  const int64_t D = src.D;
  const auto nrows = static_cast<int64_t>(groups.rows.size());
  detail::parallel_chunks(nt, (nrows + kRowsPerChunk - 1) / kRowsPerChunk, [&](int64_t c, int) {
  for (int64_t r = c * kRowsPerChunk; r < std::min(nrows, (c + 1) * kRowsPerChunk); ++r) {
    const int64_t v = groups.rows[r];
    E* grad = t.grad + v * t.stride;
    const E scale = t.row_scale[v];
    for (int64_t k = groups.start[r]; k < groups.start[r + 1]; ++k) {
      const E* s = src.row(groups.order[k]);
      for (int64_t d = 0; d < D; ++d) grad[d] = std::fma(scale, s[d], grad[d]);
    }
  }
  });
}

// ---- float64 -------------------------------------------------------------------

// One gradient in float64, row by row in kernels.h's order: a thread owns
// whole rows, so no two threads add to one row and the bits never depend on
// the thread count. block: D doubles of scratch per thread.
void index_add_f64(const GradTarget64& t, const RowGroups& groups, const Source64& src, int nt,
                   double* scratch) {
  const int64_t D = src.D;
  const auto nrows = static_cast<int64_t>(groups.rows.size());
  detail::parallel_chunks(nt, (nrows + kRowsPerChunk - 1) / kRowsPerChunk, [&](int64_t c, int slot) {
  for (int64_t r = c * kRowsPerChunk; r < std::min(nrows, (c + 1) * kRowsPerChunk); ++r) {
    double* grad = t.grad + groups.rows[r] * t.stride;
    const int64_t k0 = groups.start[r], k1 = groups.start[r + 1];
    if (k1 - k0 <= kRowBlock) {
      for (int64_t k = k0; k < k1; ++k) {
        const double* s = src.row(groups.order[k]);
        for (int64_t d = 0; d < D; ++d) grad[d] += s[d];
      }
      continue;
    }
    double* block = scratch + slot * D;
    for (int64_t b0 = k0; b0 < k1; b0 += kRowBlock) {
      const int64_t b1 = std::min(k1, b0 + kRowBlock);
      const double* first = src.row(groups.order[b0]);
      std::copy(first, first + D, block);
      for (int64_t k = b0 + 1; k < b1; ++k) {
        const double* s = src.row(groups.order[k]);
        for (int64_t d = 0; d < D; ++d) block[d] += s[d];
      }
      for (int64_t d = 0; d < D; ++d) grad[d] += block[d];
    }
  }
  });
}

}  // namespace

// Both groupings and the scratch are made before either gradient is written.
void index_add_rows_f64(const GradTarget64& a, const GradTarget64& b, const Source64& src, const Exec& ex) {
  const int64_t N = src.B * src.T;
  const int nt = N <= kDecodeTokens ? 1 : threads_for(ex, N * src.D);
  const RowGroups* ga = a.grad != nullptr ? &a.grouping() : nullptr;
  const RowGroups* gb = b.grad != nullptr ? &b.grouping() : nullptr;
  std::vector<double> scratch(static_cast<size_t>(nt * src.D));
  if (ga != nullptr && a.row_scale != nullptr) {
    index_add_scaled(a, *ga, src, nt);
  } else if (ga != nullptr) {
    index_add_f64(a, *ga, src, nt, scratch.data());
  }
  if (gb != nullptr && b.row_scale != nullptr) {
    index_add_scaled(b, *gb, src, nt);
  } else if (gb != nullptr) {
    index_add_f64(b, *gb, src, nt, scratch.data());
  }
}

void index_add_rows(const GradTarget& a, const GradTarget& b, const Source& src, const Exec& ex) {
  Workspace local;
  Workspace& ws = ex.ws != nullptr ? *ex.ws : local;
  const bool want_a = a.grad != nullptr, want_b = b.grad != nullptr;
  if (!want_a && !want_b) return;
  if ((want_a && a.row_scale != nullptr) || (want_b && b.row_scale != nullptr)) {
    // Scaled rows take their own pass; the other target's scatter is planned
    // (every allocation made) before either is written.
    const int nt = src.B * src.T <= kDecodeTokens ? 1 : threads_for(ex, src.B * src.T * src.D);
    const GradTarget& scaled = want_a && a.row_scale != nullptr ? a : b;
    const GradTarget& other = &scaled == &a ? b : a;
    const RowGroups& groups = scaled.grouping();
    std::optional<Scatter> rest;
    if (other.grad != nullptr && other.row_scale == nullptr) rest.emplace(other, nullptr, src, ex, ws);
    const RowGroups* other_groups =
        other.grad != nullptr && other.row_scale != nullptr ? &other.grouping() : nullptr;
    index_add_scaled(scaled, groups, src, nt);
    if (other_groups != nullptr) index_add_scaled(other, *other_groups, src, nt);
    if (rest) rest->run(nullptr);
    return;
  }
  if (scatter_in_order(a, b, src, ex, ws)) return;
  if (!want_a) return Scatter(b, nullptr, src, ex, ws).run(nullptr);
  if (!want_b) return Scatter(a, nullptr, src, ex, ws).run(nullptr);
  if (b.grouping().max_sources() <= kRowBlock) return Scatter(a, &b, src, ex, ws).run(&b);
  // A b row used more than kRowBlock times (positions with B > 64) would need
  // its block sums spread over threads: one pass each. The second plan is
  // made before the first pass writes, in a workspace of its own.
  Workspace second_ws;
  Scatter first(a, nullptr, src, ex, ws), second(b, nullptr, src, ex, second_ws);
  first.run(nullptr);
  second.run(nullptr);
}

}  // namespace tokpos::kernels::cpu
