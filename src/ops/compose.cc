// The compose ops: every argument checked once, then one kernel call.
#include <algorithm>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.h"
#include "common/validate.h"
#include "kernels/kernels.h"
#include "ops/context.h"
#include "ops/index.h"
#include "ops/tensor.h"
#include "tokpos/ggml_type.h"
#include "tokpos/ops.h"

namespace tokpos::ops {

// The groupings are made on first use (a forward never needs them; a token
// backward needs only the token rows'), once, safely from several threads.
struct RowPlan::Impl {
  int ndim = 2;
  int64_t B = 0, T = 0, V = 0, padding_idx = -1;
  VocabShard shard;                 // vocab_size 0: not a shard
  std::vector<int64_t> token_rows;  // the row each (b, t) reads; -1: outside the shard
  std::vector<int64_t> grad_rows;   // the row each (b, t) adds to; -1 for padding_idx
  std::vector<int64_t> positions;   // empty when the plan was made without them
  int64_t position_limit = 0;

  const kernels::RowGroups& token_groups() const {
    std::call_once(token_once_, [&] { token_groups_ = kernels::group_rows(grad_rows.data(), B * T, V); });
    return token_groups_;
  }
  const kernels::RowGroups& position_groups() const {
    std::call_once(position_once_,
                   [&] { position_groups_ = kernels::group_rows(positions.data(), B * T, position_limit); });
    return position_groups_;
  }

 private:
  mutable std::once_flag token_once_, position_once_;
  mutable kernels::RowGroups token_groups_, position_groups_;
};

namespace {

using detail::check_leading_shape;
using detail::check_no_overlap;
using detail::check_tensor;
using detail::index_of;
using detail::Role;
using detail::View;
using tokpos::detail::fail;

constexpr const char* kForward = "tokpos::ops::compose_forward";
constexpr const char* kBackward = "tokpos::ops::compose_backward";

// A batch of ids and (optional) position ids, checked against each other.
struct Batch {
  View ids, pos_ids;
  int64_t B = 0, T = 0;
};

Batch check_batch(const char* where, const DLTensor* ids, const DLTensor* position_ids) {
  Batch b;
  b.ids = check_tensor(where, "ids", ids, Role::kIndex, {1, 2});
  b.B = b.ids.ndim == 2 ? b.ids.shape[0] : 1;
  b.T = b.ids.ndim == 2 ? b.ids.shape[1] : b.ids.shape[0];
  b.pos_ids = check_tensor(where, "position_ids", position_ids, Role::kIndex, {1, 2}, /*optional=*/true);
  if (b.pos_ids.present) {
    if (b.pos_ids.ndim != b.ids.ndim)
      fail(Status::kInvalidArgument, where, "position_ids has ", b.pos_ids.ndim, " dimensions but ids has ",
           b.ids.ndim);
    check_leading_shape(where, b.pos_ids, b.ids, b.ids.ndim);
  }
  return b;
}

// out or d_out: (B, T, D) for 2-D ids, (N, D) for 1-D.
void check_rows_shape(const char* where, const View& rows, const Batch& b) {
  if (rows.ndim != b.ids.ndim + 1)
    fail(Status::kInvalidArgument, where, rows.name, " has ", rows.ndim, " dimensions; with ", b.ids.ndim,
         "-D ids it must have ", b.ids.ndim + 1);
  check_leading_shape(where, rows, b.ids, b.ids.ndim);
}

// A (rows, D) table whose D must match.
void check_table_width(const char* where, const View& table, int64_t D, const char* d_from) {
  if (table.present && table.shape[1] != D)
    fail(Status::kShapeMismatch, where, table.name, " has D = ", table.shape[1], " but ", d_from, " has D = ", D);
}

void check_unk(const char* where, int64_t unk_id, int64_t V) {
  if (unk_id >= 0 && unk_id >= V)
    fail(Status::kInvalidArgument, where, "unk_id ", unk_id, " is outside [0, ", V, ")");
}

void check_ids(const char* where, const Batch& b, int64_t V, int64_t unk_id) {
  check_unk(where, unk_id, V);
  if (unk_id >= 0) return;  // every id reads a valid row
  const kernels::Index ids = index_of(b.ids);
  tokpos::detail::check_token_ids(where, [&](int64_t bb, int64_t t) { return ids.at(bb, t); }, b.B, b.T, V);
}

bool is_shard(const VocabShard& s) { return s.vocab_size != 0; }
bool is_shard(const LookupOptions& o) { return is_shard(o.shard); }

// A shard of R rows: its vocabulary and first row, no UNK mapping, and the ids
// checked against the whole vocabulary (so every rank fails alike).
void check_shard(const char* where, const LookupOptions& o, int64_t R) {
  const VocabShard& s = o.shard;
  tokpos::detail::check_at_least(where, "shard vocab_size", s.vocab_size, 1);
  tokpos::detail::check_at_least(where, "shard row_begin", s.row_begin, 0);
  if (s.row_begin > INT64_MAX - R)
    fail(Status::kSizeOverflow, where, "shard row_begin + rows = ", s.row_begin, " + ", R, " overflows int64");
  if (o.unk_id >= 0)
    fail(Status::kInvalidArgument, where, "unk_id ", o.unk_id,
         " is not allowed on a vocab shard (ids are never remapped there); use -1");
}

// The shard's row of a checked global id, or -1 outside the shard.
int64_t shard_row(const LookupOptions& o, int64_t R, int64_t id) {
  const int64_t r = id - o.shard.row_begin;
  return (r >= 0 && r < R) ? r : -1;
}

void check_start(const char* where, const Batch& b, int64_t start) {
  tokpos::detail::check_at_least(where, "start", start, 0);
  if (!b.pos_ids.present && start > INT64_MAX - b.T)
    fail(Status::kSizeOverflow, where, "start + T = ", start, " + ", b.T, " overflows int64");
}

// Every position of the batch in [0, L).
void check_positions(const char* where, const Batch& b, int64_t start, int64_t L, const char* table) {
  if (b.B == 0 || b.T == 0) return;
  if (!b.pos_ids.present) {
    if (start >= L || b.T > L - start)
      fail(Status::kPositionOutOfRange, where, "positions ", start, " .. ", start + b.T - 1, " (start ", start,
           ", T = ", b.T, ") exceed the ", L, " rows of ", table);
    return;
  }
  const kernels::Index p = index_of(b.pos_ids);
  tokpos::detail::check_position_ids(where, [&](int64_t bb, int64_t t) { return p.at(bb, t); }, b.B, b.T, L,
                                     std::string(" (the rows of ") + table + ")");
}

kernels::Rows rows_of(const View& table) {
  if (!table.present) return {};
  return {table.data, table.dtype, table.strides[0]};
}

kernels::OutRows out_rows_of(const View& out) {
  if (out.ndim == 2) return {out.data, out.dtype, 0, out.strides[0]};
  return {out.data, out.dtype, out.strides[0], out.strides[1]};
}

template <typename E = float>
kernels::SourceOf<E> source_of(const View& d_out, int64_t B, int64_t T, int64_t D) {
  const auto* data = reinterpret_cast<const E*>(d_out.data);
  if (d_out.ndim == 2) return {data, 0, d_out.strides[0], B, T, D};
  return {data, d_out.strides[0], d_out.strides[1], B, T, D};
}

// A float64 lookup is float64 throughout: the kernels sum in double and
// never mix it with narrower types. Error(kUnimplemented) naming the first
// tensor that differs from the first one given.
void check_f64_together(const char* where, std::initializer_list<const View*> views) {
  const View* f64 = nullptr;
  const View* other = nullptr;
  for (const View* v : views) {
    if (!v->present) continue;
    const View*& first = v->dtype == DType::kF64 ? f64 : other;
    if (first == nullptr) first = v;
  }
  if (f64 != nullptr && other != nullptr)
    fail(Status::kUnimplemented, where, f64->name, " is f64 but ", other->name, " is ",
         dtype_name(other->dtype), "; a float64 lookup takes float64 for every table, output and gradient");
}

const char* where_of(const LookupOptions& o, const char* fallback) {
  return o.where != nullptr ? o.where : fallback;
}

// Runs f, turning std::bad_alloc into Error(kOutOfMemory) naming the call.
template <typename F>
auto allocating(const char* where, const char* what, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    fail(Status::kOutOfMemory, where, "cannot allocate ", what);
  }
}

// The plan for a validated batch: token rows when V >= 0, positions when
// with_positions. The groupings are made on first use, inside `allocating`.
// The plan is the op's own copy of the caller's ids, and what the kernels
// index with: each value is read once and bounded as it is copied (an id to
// [0, V) or unk_id, a position id to [0, position_bound), else 0), so ids
// that another thread changed since they were checked give garbage rows,
// never rows outside the tables. position_bound: the bound the positions
// were checked against, at most INT64_MAX (so position_limit cannot overflow).
// with_token_rows = false: only the gradient rows (a backward reads no others).
void fill_plan(RowPlan::Impl* p, const Batch& b, int64_t V, int64_t start, const LookupOptions& o,
               bool with_positions, int64_t position_bound, bool with_token_rows) {
  p->ndim = b.ids.ndim;
  p->B = b.B;
  p->T = b.T;
  p->V = V;
  p->padding_idx = o.padding_idx;
  if (is_shard(o)) p->shard = o.shard;
  const auto N = static_cast<size_t>(b.B * b.T);
  if (with_positions) {
    p->positions.resize(N);
    const kernels::Index pi = index_of(b.pos_ids);
    size_t n = 0;
    for (int64_t bb = 0; bb < b.B; ++bb)
      for (int64_t t = 0; t < b.T; ++t, ++n) {
        p->positions[n] = pi.data ? pi.within(bb, t, position_bound, 0) : start + t;  // start + t: checked
        p->position_limit = std::max(p->position_limit, p->positions[n] + 1);
      }
  }
  if (V < 0) return;
  if (with_token_rows) p->token_rows.resize(N);
  p->grad_rows.resize(N);
  const kernels::Index ids = index_of(b.ids);
  size_t n = 0;
  for (int64_t bb = 0; bb < b.B; ++bb)
    for (int64_t t = 0; t < b.T; ++t, ++n) {
      const int64_t id = ids.at(bb, t);
      int64_t row = 0;
      if (is_shard(o)) {  // padding_idx is a global id
        row = shard_row(o, V, id);
        p->grad_rows[n] = id == o.padding_idx ? -1 : row;
      } else {
        row = (id >= 0 && id < V) ? id : o.unk_id;
        p->grad_rows[n] = row == o.padding_idx ? -1 : row;
      }
      if (with_token_rows) p->token_rows[n] = row;
    }
}

std::shared_ptr<RowPlan::Impl> make_plan(const char* where, const Batch& b, int64_t V, int64_t start,
                                         const LookupOptions& o, bool with_positions,
                                         int64_t position_bound) {
  return allocating(where, "the row plan", [&] {
    auto p = std::make_shared<RowPlan::Impl>();
    fill_plan(p.get(), b, V, start, o, with_positions, position_bound, /*with_token_rows=*/true);
    return p;
  });
}

void check_padding(const char* where, int64_t padding_idx, int64_t V) {
  // V: the whole vocabulary (a shard's vocab_size when the table is a shard)
  if (padding_idx < -1 || (V >= 0 && padding_idx >= V))
    fail(Status::kInvalidArgument, where, "padding_idx ", padding_idx, " is outside [-1, ", V, ")");
}

// Negative explicit positions are refused when the plan is made; the upper
// bound waits for the table.
void check_plan_positions(const char* where, const Batch& b) {
  if (!b.pos_ids.present) return;
  const kernels::Index p = index_of(b.pos_ids);
  for (int64_t bb = 0; bb < b.B; ++bb)
    for (int64_t t = 0; t < b.T; ++t)
      if (const int64_t x = p.at(bb, t); x < 0 || x == INT64_MAX)
        fail(Status::kPositionOutOfRange, where, "position id ", x, " at (b=", bb, ", t=", t, ") is outside [0, ",
             INT64_MAX, ")");
}

// A plan used with a position table of L rows.
void check_plan_table(const char* where, const RowPlan::Impl& p, int64_t L, const char* table) {
  if (p.position_limit <= L) return;
  const auto it = std::find_if(p.positions.begin(), p.positions.end(), [&](int64_t x) { return x >= L; });
  const int64_t n = it - p.positions.begin();
  fail(Status::kPositionOutOfRange, where, "position ", *it, " at (b=", n / p.T, ", t=", n % p.T,
       ") is outside the ", L, " rows of ", table);
}

void check_plan_rows(const char* where, const View& rows, const RowPlan::Impl& p) {
  const int want = p.ndim + 1;
  if (rows.ndim != want)
    fail(Status::kInvalidArgument, where, rows.name, " has ", rows.ndim, " dimensions; the plan's ", p.ndim,
         "-D ids need ", want);
  const bool match = p.ndim == 2 ? (rows.shape[0] == p.B && rows.shape[1] == p.T) : rows.shape[0] == p.T;
  if (!match)
    fail(Status::kShapeMismatch, where, rows.name, " starts with (", rows.shape[0], p.ndim == 2 ? ", " : "",
         p.ndim == 2 ? std::to_string(rows.shape[1]) : std::string(), ") but the plan's ids are ",
         p.ndim == 2 ? "(" + std::to_string(p.B) + ", " + std::to_string(p.T) + ")"
                     : "(" + std::to_string(p.T) + ",)");
}

void check_plan_vocab(const char* where, const View& table, const RowPlan::Impl& p) {
  if (table.shape[0] != p.V)
    fail(Status::kShapeMismatch, where, table.name, " has V = ", table.shape[0], " rows but the plan was made for V = ",
         p.V);
}

// A forward's out, token_table and pos_table (optional): each checked, their
// D agreed, out apart from both tables.
struct ForwardTensors {
  View out, tok, pos;
};
ForwardTensors check_forward_tensors(const char* where, const DLTensor& out, const DLTensor& token_table,
                                     const DLTensor* pos_table) {
  ForwardTensors f;
  f.out = check_tensor(where, "out", &out, Role::kLookupOutput, {2, 3});
  f.tok = check_tensor(where, "token_table", &token_table, Role::kLookupTable, {2});
  f.pos = check_tensor(where, "pos_table", pos_table, Role::kLookupTable, {2}, true);
  check_f64_together(where, {&f.tok, &f.pos, &f.out});
  check_table_width(where, f.tok, f.out.last(), "out");
  check_table_width(where, f.pos, f.out.last(), "out");
  check_no_overlap(where, f.out, f.tok);
  check_no_overlap(where, f.out, f.pos);
  return f;
}

void run_forward(const View& out, const RowPlan::Impl* plan, const Batch* batch, const View& tok, const View& pos,
                 int64_t start, int64_t unk_id, const Context* ctx) {
  kernels::Gather g;
  g.out = out_rows_of(out);
  g.tok = rows_of(tok);
  g.pos = rows_of(pos);
  g.L = pos.present ? pos.shape[0] : 0;
  g.V = tok.shape[0];
  g.D = out.last();
  if (plan != nullptr) {
    g.B = plan->B;
    g.T = plan->T;
    g.ids = kernels::Index::contiguous(plan->token_rows.data(), plan->T);
    g.pos_ids = kernels::Index::contiguous(plan->positions.data(), plan->T);
    g.zero_outside = is_shard(plan->shard);
  } else {
    g.B = batch->B;
    g.T = batch->T;
    g.ids = index_of(batch->ids);
    g.pos_ids = index_of(batch->pos_ids);
    g.start = start;
    g.unk_id = std::max<int64_t>(unk_id, 0);
  }
  if (g.B == 0 || g.T == 0 || g.D == 0) return;
  detail::kernels_for(ctx).compose_forward(g, detail::exec_for(ctx));
}

// Validates the backward's gradients against d_out and each other.
struct Grads {
  View d_tok, d_pos, d_out;
};
Grads check_grads(const char* where, const DLTensor* d_token_table, const DLTensor* d_pos_table, const DLTensor& d_out) {
  Grads g;
  g.d_out = check_tensor(where, "d_out", &d_out, Role::kLookupGradIn, {2, 3});
  g.d_tok = check_tensor(where, "d_token_table", d_token_table, Role::kLookupGradient, {2}, true);
  g.d_pos = check_tensor(where, "d_pos_table", d_pos_table, Role::kLookupGradient, {2}, true);
  check_f64_together(where, {&g.d_out, &g.d_tok, &g.d_pos});
  const int64_t D = g.d_out.last();
  check_table_width(where, g.d_tok, D, "d_out");
  check_table_width(where, g.d_pos, D, "d_out");
  check_no_overlap(where, g.d_tok, g.d_pos);
  check_no_overlap(where, g.d_tok, g.d_out);
  check_no_overlap(where, g.d_pos, g.d_out);
  return g;
}

template <typename E>
void run_backward_as(const Grads& g, const RowPlan::Impl& p, Context* ctx, bool scale_grad_by_freq) {
  const int64_t D = g.d_out.last();
  kernels::GradTargetOf<E> a, b;
  std::vector<E> row_scale;
  if (g.d_tok.present) {
    a = {reinterpret_cast<E*>(g.d_tok.data), g.d_tok.strides[0], p.grad_rows.data(), nullptr, p.V};
  }
  if (g.d_tok.present && scale_grad_by_freq) {
    allocating(kBackward, "the row scales", [&] {
      std::vector<int64_t> counts(static_cast<size_t>(p.V), 0);
      for (const int64_t r : p.grad_rows)
        if (r >= 0) ++counts[r];
      row_scale.resize(counts.size());
      for (size_t v = 0; v < counts.size(); ++v)
        row_scale[v] = counts[v] != 0 ? static_cast<E>(1.0 / static_cast<double>(counts[v])) : E(0);
      return 0;
    });
    a.row_scale = row_scale.data();
  }
  if (g.d_pos.present) {
    b = {reinterpret_cast<E*>(g.d_pos.data), g.d_pos.strides[0], p.positions.data(), nullptr,
         g.d_pos.shape[0]};
  }
  // The groupings on demand: a kernel path that needs none skips the sort.
  a.make_groups = [](const void* plan) -> const kernels::RowGroups& {
    return static_cast<const RowPlan::Impl*>(plan)->token_groups();
  };
  b.make_groups = [](const void* plan) -> const kernels::RowGroups& {
    return static_cast<const RowPlan::Impl*>(plan)->position_groups();
  };
  a.make_arg = b.make_arg = &p;
  const kernels::SourceOf<E> src = source_of<E>(g.d_out, p.B, p.T, D);
  allocating(kBackward, "the backward's plan and workspace", [&] {
    const kernels::KernelTable& k = detail::kernels_for(ctx);
    const kernels::Exec ex = detail::exec_for(ctx, detail::workspace_of(ctx));
    if constexpr (std::is_same_v<E, double>) {
      k.index_add_rows_f64(a, b, src, ex);
    } else {
      k.index_add_rows(a, b, src, ex);
    }
    return 0;
  });
}

void run_backward(const Grads& g, const RowPlan::Impl& p, Context* ctx, bool scale_grad_by_freq = false) {
  const int64_t D = g.d_out.last();
  if (p.B * p.T == 0 || D == 0 || (!g.d_tok.present && !g.d_pos.present)) return;
  if (g.d_out.dtype == DType::kF64) return run_backward_as<double>(g, p, ctx, scale_grad_by_freq);
  run_backward_as<float>(g, p, ctx, scale_grad_by_freq);
}

}  // namespace

// ---- Vocab shards --------------------------------------------------------------

VocabShardRange vocab_shard_range(int64_t vocab_size, int64_t pad_to_multiple_of, int64_t world_size, int64_t rank) {
  const char* where = "tokpos::ops::vocab_shard_range";
  tokpos::detail::check_at_least(where, "vocab_size", vocab_size, 1);
  tokpos::detail::check_at_least(where, "pad_to_multiple_of", pad_to_multiple_of, 1);
  tokpos::detail::check_at_least(where, "world_size", world_size, 1);
  if (rank < 0 || rank >= world_size)
    fail(Status::kInvalidArgument, where, "rank ", rank, " is outside [0, ", world_size, ")");
  const int64_t groups = vocab_size / pad_to_multiple_of + (vocab_size % pad_to_multiple_of != 0);
  if (groups > INT64_MAX / pad_to_multiple_of)
    fail(Status::kSizeOverflow, where, "vocab_size ", vocab_size, " padded to a multiple of ", pad_to_multiple_of,
         " overflows int64");
  const int64_t padded = groups * pad_to_multiple_of;
  const int64_t rows = padded / world_size + (padded % world_size != 0);
  return {rank * rows, rows};  // rank * rows < world_size * rows <= padded + world_size - 1: no overflow
}

// ---- RowPlan -------------------------------------------------------------------

RowPlan::RowPlan(const DLTensor& ids, int64_t vocab_size, const DLTensor* position_ids, int64_t start,
                 const LookupOptions& o) {
  const char* where = where_of(o, "tokpos::ops::RowPlan");
  const Batch b = check_batch(where, &ids, position_ids);
  if (is_shard(o)) {
    tokpos::detail::check_at_least(where, "shard rows", vocab_size, 0);
    check_shard(where, o, vocab_size);
  } else {
    tokpos::detail::check_at_least(where, "vocab_size", vocab_size, 1);
  }
  const int64_t V = is_shard(o) ? o.shard.vocab_size : vocab_size;  // what the ids index
  check_padding(where, o.padding_idx, V);
  check_start(where, b, start);
  check_ids(where, b, V, o.unk_id);
  check_plan_positions(where, b);
  impl_ = make_plan(where, b, vocab_size, start, o, /*with_positions=*/true, INT64_MAX);
}

RowPlan::~RowPlan() = default;
RowPlan::RowPlan(const RowPlan&) = default;
RowPlan& RowPlan::operator=(const RowPlan&) = default;
RowPlan::RowPlan(RowPlan&&) noexcept = default;
RowPlan& RowPlan::operator=(RowPlan&&) noexcept = default;

const RowPlan::Impl& RowPlan::impl() const {
  if (!impl_) fail(Status::kInvalidArgument, "tokpos::ops::RowPlan", "this plan was moved from; make a new one");
  return *impl_;
}
int RowPlan::ids_ndim() const { return impl().ndim; }
int64_t RowPlan::batch() const { return impl().B; }
int64_t RowPlan::time() const { return impl().T; }
int64_t RowPlan::size() const { return impl().B * impl().T; }
int64_t RowPlan::vocab_size() const { return impl().V; }
int64_t RowPlan::padding_idx() const { return impl().padding_idx; }
const VocabShard& RowPlan::shard() const { return impl().shard; }
std::span<const int64_t> RowPlan::token_rows() const { return impl().token_rows; }
std::span<const int64_t> RowPlan::positions() const { return impl().positions; }
int64_t RowPlan::position_limit() const { return impl().position_limit; }
std::span<const int64_t> RowPlan::touched_rows() const {
  const Impl& p = impl();
  return allocating("tokpos::ops::RowPlan::touched_rows", "the row grouping",
                    [&]() -> std::span<const int64_t> { return p.token_groups().rows; });
}

namespace {
// The plan of a shard's ids, as the ids-taking ops make it: errors name the op.
RowPlan shard_plan(const char* where, const DLTensor& ids, int64_t shard_rows, const DLTensor* position_ids,
                   int64_t start, const LookupOptions& o) {
  LookupOptions named = o;
  named.where = where;
  return RowPlan(ids, shard_rows, position_ids, start, named);
}
}  // namespace

// ---- Forward -------------------------------------------------------------------

void compose_forward(const DLTensor& out, const DLTensor& ids, const DLTensor& token_table, const DLTensor* pos_table,
                     const DLTensor* position_ids, int64_t start, const LookupOptions& o, const Context* ctx) {
  const char* where = where_of(o, kForward);
  const Batch b = check_batch(where, &ids, position_ids);
  const auto [vout, tok, pos] = check_forward_tensors(where, out, token_table, pos_table);
  check_rows_shape(where, vout, b);
  if (is_shard(o)) {
    for (const View* in : {&b.ids, &b.pos_ids}) check_no_overlap(where, vout, *in);
    const RowPlan plan = shard_plan(where, ids, tok.shape[0], position_ids, start, o);
    if (pos.present) check_plan_table(where, plan.impl(), pos.shape[0], "pos_table");
    run_forward(vout, &plan.impl(), nullptr, tok, pos, 0, -1, ctx);
    return;
  }
  check_start(where, b, start);
  for (const View* in : {&b.ids, &b.pos_ids}) check_no_overlap(where, vout, *in);
  check_ids(where, b, tok.shape[0], o.unk_id);
  if (pos.present) check_positions(where, b, start, pos.shape[0], "pos_table");
  run_forward(vout, nullptr, &b, tok, pos, start, o.unk_id, ctx);
}

void compose_forward(const DLTensor& out, const RowPlan& plan, const DLTensor& token_table, const DLTensor* pos_table,
                     const Context* ctx) {
  const char* where = kForward;
  const RowPlan::Impl& p = plan.impl();
  const auto [vout, tok, pos] = check_forward_tensors(where, out, token_table, pos_table);
  check_plan_rows(where, vout, p);
  check_plan_vocab(where, tok, p);
  if (pos.present) check_plan_table(where, p, pos.shape[0], "pos_table");
  run_forward(vout, &p, nullptr, tok, pos, 0, -1, ctx);
}

void compose_typed_forward(const DLTensor& out, const RowPlan& plan, const DLTensor& token_table,
                           const DLTensor* type_ids, const DLTensor* type_table, const DLTensor& pos_table,
                           const DLTensor* gamma, const DLTensor* beta, double eps, const Context* ctx) {
  const char* where = "tokpos::ops::compose_typed_forward";
  const RowPlan::Impl& p = plan.impl();
  if (is_shard(p.shard))
    fail(Status::kUnimplemented, where, "a vocab-shard plan (vocab_size ", p.shard.vocab_size,
         ", row_begin ", p.shard.row_begin, ") is not supported by the typed forward");
  const View vout = check_tensor(where, "out", &out, Role::kGradient, {2, 3});  // f32 only
  check_plan_rows(where, vout, p);
  const int64_t D = vout.last();
  const View tok = check_tensor(where, "token_table", &token_table, Role::kGradIn, {2});
  const View pos = check_tensor(where, "pos_table", &pos_table, Role::kGradIn, {2});
  const View types = check_tensor(where, "type_table", type_table, Role::kGradIn, {2}, true);
  const View tids = check_tensor(where, "type_ids", type_ids, Role::kIndex, {1, 2}, true);
  const View g = check_tensor(where, "gamma", gamma, Role::kGradIn, {1}, true);
  const View bt = check_tensor(where, "beta", beta, Role::kGradIn, {1}, true);
  for (const View* t : {&tok, &pos, &types}) check_table_width(where, *t, D, "out");
  check_plan_vocab(where, tok, p);
  check_plan_table(where, p, pos.shape[0], "pos_table");
  if (g.present != bt.present) fail(Status::kInvalidArgument, where, "gamma and beta must be given together");
  for (const View* t : {&g, &bt})
    if (t->present && t->shape[0] != D)
      fail(Status::kShapeMismatch, where, t->name, " has ", t->shape[0], " elements; expected D = ", D);
  if (g.present && !(eps > 0.0)) fail(Status::kInvalidArgument, where, "eps = ", eps, " must be > 0");
  if (types.present && types.shape[0] == 0)
    fail(Status::kShapeMismatch, where, "type_table has no rows; it needs at least row 0");
  if (tids.present) {
    if (!types.present) fail(Status::kInvalidArgument, where, "type_ids given without a type_table");
    if (tids.ndim != p.ndim)
      fail(Status::kShapeMismatch, where, "type_ids has ", tids.ndim, " dimensions; the plan's ids have ", p.ndim);
    const kernels::Index ti = index_of(tids);
    if ((p.ndim == 2 && (tids.shape[0] != p.B || tids.shape[1] != p.T)) || (p.ndim == 1 && tids.shape[0] != p.T))
      fail(Status::kShapeMismatch, where, "type_ids does not have the shape of the plan's ids");
    const int64_t ntypes = types.shape[0];
    for (int64_t bb = 0; bb < p.B; ++bb)
      for (int64_t t = 0; t < p.T; ++t) {
        const int64_t v = ti.at(bb, t);
        if (v < 0 || v >= ntypes)
          fail(Status::kIdOutOfRange, where, "token type id ", v, " at (b=", bb, ", t=", t, ") is outside [0, ",
               ntypes, ")");
      }
  }
  for (const View* in : {&tok, &pos, &types, &tids, &g, &bt}) check_no_overlap(where, vout, *in);
  kernels::TypedGather tg;
  tg.g.out = out_rows_of(vout);
  tg.g.tok = rows_of(tok);
  tg.g.pos = rows_of(pos);
  tg.g.L = pos.shape[0];
  tg.g.V = tok.shape[0];
  tg.g.D = D;
  tg.g.B = p.B;
  tg.g.T = p.T;
  tg.g.ids = kernels::Index::contiguous(p.token_rows.data(), p.T);
  tg.g.pos_ids = kernels::Index::contiguous(p.positions.data(), p.T);
  tg.types = rows_of(types);
  tg.type_rows = types.present ? types.shape[0] : 0;
  tg.type_ids = index_of(tids);
  tg.gamma = g.present ? reinterpret_cast<const float*>(g.data) : nullptr;
  tg.beta = bt.present ? reinterpret_cast<const float*>(bt.data) : nullptr;
  tg.eps = eps;
  if (p.B * p.T == 0 || D == 0) return;
  detail::kernels_for(ctx).compose_typed(tg, detail::exec_for(ctx));
}

// ---- Quantized tables ------------------------------------------------------------

namespace {

constexpr const char* kQuantTypes = "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, q8_K";

const GgmlTypeTraits& check_ggml_type(const char* where, int type) {
  const GgmlTypeTraits* tr = ggml_type_traits(type);
  if (tr == nullptr)
    fail(Status::kInvalidArgument, where, "ggml_type ", type, " is not a ggml type; token tables take ", kQuantTypes);
  if (!ggml_float_dtype(tr->type) && !kernels::is_quant_block_type(type))
    fail(Status::kUnimplemented, where, "ggml_type ", type, " (", tr->name, ") is not supported for a token table; ",
         "supported: ", kQuantTypes);
  return *tr;
}

// The blocks of a quantized table, checked against its type and D.
View check_quantized(const char* where, const QuantizedTable& q, const GgmlTypeTraits& tr) {
  View v = check_tensor(where, "token_blocks", q.blocks, Role::kBlocks, {2});
  tokpos::detail::check_at_least(where, "dim", q.dim, 0);
  const std::optional<size_t> row = ggml_row_bytes(tr, q.dim);
  if (q.dim % tr.block_size != 0)
    fail(Status::kInvalidArgument, where, "dim ", q.dim, " is not a whole number of ", tr.name, " blocks (block size ",
         tr.block_size, " elements)");
  if (!row || *row > static_cast<size_t>(INT64_MAX))
    fail(Status::kSizeOverflow, where, "a ", tr.name, " row of dim ", q.dim, " takes more than int64 bytes");
  if (v.shape[1] != static_cast<int64_t>(*row))
    fail(Status::kShapeMismatch, where, "token_blocks has ", v.shape[1], " bytes per row but a ", tr.name,
         " row of dim ", q.dim, " takes ", *row, " (", q.dim / tr.block_size, " blocks of ", tr.type_size, " bytes)");
  return v;
}

// A plain-typed table (f32, f16, bf16) as the float table it is.
View plain_view(const char* where, View v, const GgmlTypeTraits& tr, int64_t D) {
  const DType d = *ggml_float_dtype(tr.type);
  const auto es = static_cast<int64_t>(dtype_size(d));
  const auto at = static_cast<int64_t>(reinterpret_cast<uintptr_t>(v.data) % static_cast<uintptr_t>(es));
  if (v.numel > 0 && at != 0)
    fail(Status::kInvalidArgument, where, "the ", tr.name, " token table's first row starts ", at,
         " bytes past a multiple of ", es, " bytes in memory; ", tr.name, " rows must start at multiples of ", es,
         " (copy the blocks to aligned memory)");
  if (v.numel > 0 && v.shape[0] > 1 && v.strides[0] % es != 0)
    fail(Status::kInvalidArgument, where, "the ", tr.name, " token table's row stride ", v.strides[0],
         " bytes is not a multiple of ", es, " bytes; ", tr.name, " rows must start at multiples of ", es);
  v.dtype = d;
  v.shape[1] = D;
  v.strides[0] = v.shape[0] > 1 ? v.strides[0] / es : D;
  v.strides[1] = 1;
  return v;
}

}  // namespace

void compose_forward(const DLTensor& out, const DLTensor& ids, const QuantizedTable& q, const DLTensor* pos_table,
                     const DLTensor* position_ids, int64_t start, const LookupOptions& o, const Context* ctx) {
  const char* where = where_of(o, kForward);
  const GgmlTypeTraits& tr = check_ggml_type(where, q.ggml_type);
  const View blocks = check_quantized(where, q, tr);
  const Batch b = check_batch(where, &ids, position_ids);
  const View vout = check_tensor(where, "out", &out, Role::kOutput, {2, 3});
  const View pos = check_tensor(where, "pos_table", pos_table, Role::kTable, {2}, true);
  if (vout.last() != q.dim)
    fail(Status::kShapeMismatch, where, "token table has D = ", q.dim, " but out has D = ", vout.last());
  check_table_width(where, pos, vout.last(), "out");
  check_no_overlap(where, vout, blocks);
  check_no_overlap(where, vout, pos);
  check_rows_shape(where, vout, b);
  for (const View* in : {&b.ids, &b.pos_ids}) check_no_overlap(where, vout, *in);
  const int64_t V = blocks.shape[0];
  // f32, f16, bf16 are read as the float table they are.
  const std::optional<View> tok =
      tr.block_size == 1 ? std::optional<View>(plain_view(where, blocks, tr, q.dim)) : std::nullopt;
  // The ids: a shard's plan, or the ids, start and positions checked in place.
  std::optional<RowPlan> plan;
  if (is_shard(o)) {
    plan.emplace(shard_plan(where, ids, V, position_ids, start, o));
    if (pos.present) check_plan_table(where, plan->impl(), pos.shape[0], "pos_table");
  } else {
    check_start(where, b, start);
    check_ids(where, b, V, o.unk_id);
    if (pos.present) check_positions(where, b, start, pos.shape[0], "pos_table");
  }
  if (tok) {  // the float forward
    if (plan) run_forward(vout, &plan->impl(), nullptr, *tok, pos, 0, -1, ctx);
    else run_forward(vout, nullptr, &b, *tok, pos, start, o.unk_id, ctx);
    return;
  }
  kernels::QuantGather qg;
  kernels::Gather& g = qg.g;
  qg.tok = {reinterpret_cast<const uint8_t*>(blocks.data), q.ggml_type, blocks.strides[0]};
  g.out = out_rows_of(vout);
  g.pos = rows_of(pos);
  g.L = pos.present ? pos.shape[0] : 0;
  g.V = V;
  g.D = q.dim;
  if (plan) {
    const RowPlan::Impl& p = plan->impl();
    g.B = p.B;
    g.T = p.T;
    g.ids = kernels::Index::contiguous(p.token_rows.data(), p.T);
    g.pos_ids = kernels::Index::contiguous(p.positions.data(), p.T);
    g.zero_outside = true;
  } else {
    g.B = b.B;
    g.T = b.T;
    g.ids = index_of(b.ids);
    g.pos_ids = index_of(b.pos_ids);
    g.start = start;
    g.unk_id = std::max<int64_t>(o.unk_id, 0);
  }
  if (g.B == 0 || g.T == 0 || g.D == 0) return;
  detail::kernels_for(ctx).compose_quant(qg, detail::exec_for(ctx));
}

void compose_backward_quantized(const QuantizedTable& q, const char* where) {
  const char* w = where != nullptr ? where : kBackward;
  const GgmlTypeTraits* tr = ggml_type_traits(q.ggml_type);
  fail(Status::kUnimplemented, w, "d_token_table is a ", tr ? tr->name : "block", " table (ggml_type ", q.ggml_type,
       tr ? "" : ", not a ggml type", "): the backward is defined for float tables only (a float32 or float64 ",
       "(V, D) gradient), not for ggml block types; dequantize the table to float32 to train it");
}

// ---- Backward ------------------------------------------------------------------

void compose_backward(const DLTensor* d_token_table, const DLTensor* d_pos_table, const DLTensor& d_out,
                      const DLTensor& ids, const DLTensor* position_ids, int64_t start, const LookupOptions& o,
                      Context* ctx) {
  const char* where = where_of(o, kBackward);
  const Batch b = check_batch(where, &ids, position_ids);
  const Grads g = check_grads(where, d_token_table, d_pos_table, d_out);
  check_rows_shape(where, g.d_out, b);
  for (const View* in : {&b.ids, &b.pos_ids}) {
    check_no_overlap(where, g.d_tok, *in);
    check_no_overlap(where, g.d_pos, *in);
  }
  check_start(where, b, start);
  const int64_t V = g.d_tok.present ? g.d_tok.shape[0] : -1;
  if (is_shard(o) && g.d_tok.present) {
    const RowPlan plan = shard_plan(where, ids, V, position_ids, start, o);
    if (g.d_pos.present) check_plan_table(where, plan.impl(), g.d_pos.shape[0], "d_pos_table");
    run_backward(g, plan.impl(), ctx, o.scale_grad_by_freq);
    return;
  }
  if (g.d_tok.present) {
    check_padding(where, o.padding_idx, V);
    check_ids(where, b, V, o.unk_id);
  }
  if (g.d_pos.present) check_positions(where, b, start, g.d_pos.shape[0], "d_pos_table");
  if (b.B * b.T == 0 || (!g.d_tok.present && !g.d_pos.present)) return;
  // The call's own plan, on the stack: no shared ownership, and no token rows
  // beside the gradient rows (only a forward reads those).
  RowPlan::Impl plan;
  allocating(where, "the row plan", [&] {
    fill_plan(&plan, b, V, start, o, /*with_positions=*/g.d_pos.present, g.d_pos.present ? g.d_pos.shape[0] : 0,
              /*with_token_rows=*/false);
    return 0;
  });
  run_backward(g, plan, ctx, o.scale_grad_by_freq);
}

void compose_backward(const DLTensor* d_token_table, const DLTensor* d_pos_table, const DLTensor& d_out,
                      const RowPlan& plan, Context* ctx) {
  const char* where = kBackward;
  const RowPlan::Impl& p = plan.impl();
  const Grads g = check_grads(where, d_token_table, d_pos_table, d_out);
  check_plan_rows(where, g.d_out, p);
  if (g.d_tok.present) check_plan_vocab(where, g.d_tok, p);
  if (g.d_pos.present) check_plan_table(where, p, g.d_pos.shape[0], "d_pos_table");
  run_backward(g, p, ctx);
}

void token_gradient_rows(const DLTensor& values, const DLTensor& d_out, const RowPlan& plan, Context* ctx) {
  const char* where = "tokpos::ops::token_gradient_rows";
  const RowPlan::Impl& p = plan.impl();
  const View vals = check_tensor(where, "values", &values, Role::kGradient, {2});
  const View dout = check_tensor(where, "d_out", &d_out, Role::kGradIn, {2, 3});
  check_plan_rows(where, dout, p);
  const int64_t D = dout.last();
  const auto U = static_cast<int64_t>(plan.touched_rows().size());
  if (vals.shape[0] != U || vals.shape[1] != D)
    fail(Status::kShapeMismatch, where, "values has shape (", vals.shape[0], ", ", vals.shape[1],
         "); the plan touches U = ", U, " rows of D = ", D);
  check_no_overlap(where, vals, dout);
  if (U == 0 || D == 0) return;
  // The same scatter into a zeroed (U, D) buffer of our own, where row g
  // stands for touched row g (the g-th group), then one copy into values:
  // every allocation comes before values is written.
  allocating(where, "the sparse gradient", [&] {
    const kernels::RowGroups& groups = p.token_groups();
    kernels::RowGroups compact = groups;
    std::vector<int64_t> rows(p.grad_rows.size(), -1);
    for (size_t g = 0; g + 1 < groups.start.size(); ++g) {
      compact.rows[g] = static_cast<int64_t>(g);
      for (int64_t k = groups.start[g]; k < groups.start[g + 1]; ++k) rows[groups.order[k]] = static_cast<int64_t>(g);
    }
    std::vector<float> sum(static_cast<size_t>(U * D), 0.0f);
    const kernels::GradTarget a{sum.data(), D, rows.data(), &compact, U};
    detail::kernels_for(ctx).index_add_rows(a, {}, source_of(dout, p.B, p.T, D),
                                            detail::exec_for(ctx, detail::workspace_of(ctx)));
    auto* out = reinterpret_cast<float*>(vals.data);
    for (int64_t u = 0; u < U; ++u) std::copy_n(sum.data() + u * D, D, out + u * vals.strides[0]);
    return 0;
  });
}

}  // namespace tokpos::ops
