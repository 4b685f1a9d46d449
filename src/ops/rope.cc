// ops::apply_rope: checks every argument, then runs the back end's kernel.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "common/check.h"
#include "common/rope_angle.h"
#include "kernels/kernels.h"
#include "ops/context.h"
#include "ops/index.h"
#include "ops/tensor.h"
#include "tokpos/error.h"
#include "tokpos/rope.h"

namespace tokpos::ops {

using tokpos::detail::fail;

namespace {

// out == x element for element (in place), which the rotations allow; any
// other overlap of out and x is an error.
void check_in_place_or_apart(const char* where, const detail::View& ov, const detail::View& xv) {
  const bool same = ov.data == xv.data && [&] {
    for (int i = 0; i < xv.ndim; ++i) {
      if (xv.shape[i] > 1 && ov.strides[i] != xv.strides[i]) return false;
    }
    return true;
  }();
  if (!same) detail::check_no_overlap(where, ov, xv);
}

// View v's stride i in elements; 0 for i < 0 (a dimension the 3-D form lacks).
int64_t stride_of(const detail::View& v, int i) { return i < 0 ? int64_t{0} : v.strides[i]; }

// x and out of a kernel's rotation, (B, T, H, D) or (T, H, D) (B's stride 0).
template <typename Rotation>
void set_heads(Rotation& r, const detail::View& xv, const detail::View& ov) {
  const int first = xv.ndim == 4 ? 0 : -1;
  r.x = xv.data;
  r.xsb = stride_of(xv, first);
  r.xst = stride_of(xv, first + 1);
  r.xsh = stride_of(xv, first + 2);
  r.out = ov.data;
  r.osb = stride_of(ov, first);
  r.ost = stride_of(ov, first + 1);
  r.osh = stride_of(ov, first + 2);
}

void check_layout(const char* where, RopeLayout layout) {
  if (layout != RopeLayout::kHalf && layout != RopeLayout::kInterleaved) {
    fail(Status::kInvalidArgument, where, "layout ", static_cast<int>(layout), " is not half (0) or interleaved (1)");
  }
}

}  // namespace

void apply_rope(const DLTensor& out, const DLTensor& x, const DLTensor& positions, std::span<const double> inv_freq,
                const RopeApplyOptions& o, const Context* ctx) {
  const char* where = o.where ? o.where : "apply_rope";
  using detail::Role;
  const detail::View xv = detail::check_tensor(where, "x", &x, Role::kTable, {3, 4});
  const detail::View ov = detail::check_tensor(where, "out", &out, Role::kOutput, {3, 4});
  const detail::View pv = detail::check_tensor(where, "positions", &positions, Role::kIndex, {1, 2});
  check_layout(where, o.layout);
  if (ov.dtype != xv.dtype) {
    fail(Status::kInvalidArgument, where, "out has dtype ", dtype_name(ov.dtype), " but x has ", dtype_name(xv.dtype),
         "; they must match");
  }
  if (ov.ndim != xv.ndim) fail(Status::kShapeMismatch, where, "out has ", ov.ndim, " dimensions but x has ", xv.ndim);
  detail::check_leading_shape(where, ov, xv, xv.ndim);
  const bool batched = xv.ndim == 4;
  if (pv.ndim != xv.ndim - 2) {
    fail(Status::kShapeMismatch, where, "positions has ", pv.ndim, " dimensions; x with ", xv.ndim,
         " dimensions needs ", xv.ndim - 2, batched ? " (B, T)" : " (T)");
  }
  detail::check_leading_shape(where, pv, xv, pv.ndim);
  check_in_place_or_apart(where, ov, xv);
  detail::check_no_overlap(where, ov, pv);
  detail::check_no_overlap(where, ov, "inv_freq", inv_freq.data(), inv_freq.size_bytes());
  const int64_t B = batched ? xv.shape[0] : 1, T = xv.shape[batched ? 1 : 0];
  const int64_t H = xv.shape[xv.ndim - 2], D = xv.shape[xv.ndim - 1];
  const auto half = static_cast<int64_t>(inv_freq.size());
  const int64_t rotary = o.rotary_dim < 0 ? 2 * half : o.rotary_dim;
  if (rotary != 2 * half) {
    fail(Status::kInvalidArgument, where, "rotary_dim = ", rotary, " must be 2 * len(inv_freq) = ", 2 * half);
  }
  if (rotary > D) fail(Status::kInvalidArgument, where, "rotary_dim = ", rotary, " must be <= the head dim ", D);
  if (!tokpos::detail::rope_attention_factor_ok(o.attention_factor)) {
    fail(Status::kInvalidArgument, where, "attention_factor = ", o.attention_factor,
         tokpos::detail::kRopeAttentionFactorRange);
  }
  for (int64_t i = 0; i < half; ++i) {
    const double w = inv_freq[static_cast<size_t>(i)];
    if (!(std::fabs(w) <= tokpos::detail::kRopeMaxFrequency)) {
      fail(Status::kInvalidArgument, where, "inv_freq[", i, "] = ", w, " must be finite with |inv_freq| <= 2^20");
    }
  }
  const kernels::Index pos = detail::index_of(pv);
  if (pv.numel > 0) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = pos.at(b, t);
        if (p < 0 || p >= tokpos::detail::kRopeMaxPosition) {
          fail(Status::kPositionOutOfRange, where, "position ", p, " at (b=", b, ", t=", t,
               ") is outside [0, 2^31 = ", tokpos::detail::kRopeMaxPosition, ")");
        }
      }
    }
  }
  if (xv.numel == 0) return;
  const kernels::Exec ex = detail::exec_for(ctx);
  std::vector<float> scratch(static_cast<size_t>(ex.threads) * 2 * static_cast<size_t>(half));
  std::vector<double> turns(2 * static_cast<size_t>(half));  // each frequency's, once for every thread
  for (int64_t i = 0; i < half; ++i) {
    const tokpos::detail::RopeTurns w = tokpos::detail::rope_turns(inv_freq[static_cast<size_t>(i)]);
    turns[static_cast<size_t>(i)] = w.t0;
    turns[static_cast<size_t>(half + i)] = w.t1;
  }
  kernels::RopeApply r;
  set_heads(r, xv, ov);
  r.type = xv.dtype;
  r.pos = pos;
  r.inv_freq = inv_freq.data();
  r.half = half;
  r.B = B;
  r.T = T;
  r.H = H;
  r.D = D;
  r.layout = o.layout == RopeLayout::kHalf ? kernels::RopeLayout::kHalf : kernels::RopeLayout::kInterleaved;
  r.attention_factor = o.attention_factor;
  r.inverse = o.inverse;
  r.scratch = scratch.data();
  r.turns = turns.data();
  detail::kernels_for(ctx).apply_rope(r, ex);
}

void apply_rope_tables(const DLTensor& out, const DLTensor& x, const DLTensor& cos, const DLTensor& sin,
                       const RopeTablesOptions& o, const Context* ctx) {
  const char* where = o.where ? o.where : "apply_rope_tables";
  using detail::Role;
  const detail::View xv = detail::check_tensor(where, "x", &x, Role::kTable, {3, 4});
  const detail::View ov = detail::check_tensor(where, "out", &out, Role::kOutput, {3, 4});
  const detail::View cv = detail::check_tensor(where, "cos", &cos, Role::kTable, {2, 3});
  const detail::View sv = detail::check_tensor(where, "sin", &sin, Role::kTable, {2, 3});
  check_layout(where, o.layout);
  for (const detail::View* v : {&ov, &cv, &sv}) {
    if (v->dtype != xv.dtype) {
      fail(Status::kInvalidArgument, where, v->name, " has dtype ", dtype_name(v->dtype), " but x has ",
           dtype_name(xv.dtype), "; out, x, cos and sin must share one dtype");
    }
  }
  if (ov.ndim != xv.ndim) fail(Status::kShapeMismatch, where, "out has ", ov.ndim, " dimensions but x has ", xv.ndim);
  detail::check_leading_shape(where, ov, xv, xv.ndim);
  const bool batched = xv.ndim == 4;
  for (const detail::View* v : {&cv, &sv}) {
    if (v->ndim != xv.ndim - 1) {
      fail(Status::kShapeMismatch, where, v->name, " has ", v->ndim, " dimensions; x with ", xv.ndim,
           " dimensions needs ", xv.ndim - 1, batched ? " (B, T, R)" : " (T, R)");
    }
    detail::check_leading_shape(where, *v, xv, v->ndim - 1);
  }
  const int64_t R = cv.last(), D = xv.last();
  if (sv.last() != R) {
    fail(Status::kShapeMismatch, where, "sin has ", sv.last(), " rotary dims but cos has ", R, "; they must match");
  }
  if (R % 2 != 0) fail(Status::kInvalidArgument, where, "cos has ", R, " rotary dims; the count must be even");
  if (R > D) fail(Status::kInvalidArgument, where, "cos has ", R, " rotary dims; at most the head dim ", D);
  check_in_place_or_apart(where, ov, xv);
  detail::check_no_overlap(where, ov, cv);
  detail::check_no_overlap(where, ov, sv);
  if (xv.numel == 0) return;
  kernels::RopeTables r;
  set_heads(r, xv, ov);
  const int first = batched ? 0 : -1;
  r.cos = cv.data;
  r.csb = stride_of(cv, first);
  r.cst = stride_of(cv, first + 1);
  r.sin = sv.data;
  r.ssb = stride_of(sv, first);
  r.sst = stride_of(sv, first + 1);
  r.type = xv.dtype;
  r.B = batched ? xv.shape[0] : 1;
  r.T = xv.shape[batched ? 1 : 0];
  r.H = xv.shape[xv.ndim - 2];
  r.D = D;
  r.R = R;
  r.layout = o.layout == RopeLayout::kHalf ? kernels::RopeLayout::kHalf : kernels::RopeLayout::kInterleaved;
  r.inverse = o.inverse;
  detail::kernels_for(ctx).apply_rope_tables(r, detail::exec_for(ctx));
}

}  // namespace tokpos::ops
