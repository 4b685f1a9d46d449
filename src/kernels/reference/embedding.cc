// Reference kernels: the plainest loops that state the definitions in
// kernels.h. One thread, no vectors, no plan: the source of truth.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/convert.h"
#include "kernels/kernels.h"
#include "kernels/layer_norm.h"

namespace tokpos::kernels {
namespace {

float load(const Rows& r, int64_t row, int64_t d) {
  const int64_t k = row * r.stride + d;
  switch (r.type) {
    case DType::kBF16: return fp::to_f32(static_cast<const fp::bf16_t*>(r.data)[k]);
    case DType::kF16: return fp::to_f32(static_cast<const fp::f16_t*>(r.data)[k]);
    default: return static_cast<const float*>(r.data)[k];
  }
}

void store(const OutRows& o, int64_t b, int64_t t, int64_t d, float v) {
  const int64_t k = b * o.sb + t * o.st + d;
  switch (o.type) {
    case DType::kBF16: static_cast<fp::bf16_t*>(o.data)[k] = fp::to_bf16(v); break;
    case DType::kF16: static_cast<fp::f16_t*>(o.data)[k] = fp::to_f16(v); break;
    default: static_cast<float*>(o.data)[k] = v; break;
  }
}

int64_t row_of(const Gather& g, int64_t b, int64_t t) {
  const int64_t id = g.ids.at(b, t);
  return (id >= 0 && id < g.V) ? id : g.unk_id;
}

int64_t position_of(const Gather& g, int64_t b, int64_t t) {
  return g.pos_ids.data ? g.pos_ids.within(b, t, g.L, 0) : g.start + t;
}

// The float64 forward: every table and out f64, summed in double.
void compose_forward_f64_ref(const Gather& g) {
  const auto* tok = static_cast<const double*>(g.tok.data);
  const auto* pos = static_cast<const double*>(g.pos.data);
  auto* out = static_cast<double*>(g.out.data);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t t = 0; t < g.T; ++t) {
      const int64_t id = g.ids.at(b, t), ix = (id >= 0 && id < g.V) ? id : g.unk_id, p = position_of(g, b, t);
      const bool outside = g.zero_outside && ix != id;
      for (int64_t d = 0; d < g.D; ++d) {
        double v;
        if (outside) {
          v = pos ? pos[p * g.pos.stride + d] : 0.0;
        } else {
          v = tok[ix * g.tok.stride + d];
          if (pos) v = v + pos[p * g.pos.stride + d];
        }
        out[b * g.out.sb + t * g.out.st + d] = v;
      }
    }
}

void compose_forward_ref(const Gather& g, const Exec&) {
  if (g.tok.type == DType::kF64) return compose_forward_f64_ref(g);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t t = 0; t < g.T; ++t) {
      const int64_t id = g.ids.at(b, t), ix = (id >= 0 && id < g.V) ? id : g.unk_id, p = position_of(g, b, t);
      const bool outside = g.zero_outside && ix != id;  // an id outside the vocab shard adds nothing
      for (int64_t d = 0; d < g.D; ++d) {
        float v;
        if (outside) {
          v = g.pos.data ? load(g.pos, p, d) : 0.0f;
        } else {
          v = load(g.tok, ix, d);
          if (g.pos.data) v = v + load(g.pos, p, d);
        }
        store(g.out, b, t, d, v);
      }
    }
}

void compose_typed_ref(const TypedGather& tg, const Exec&) {
  const Gather& g = tg.g;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t t = 0; t < g.T; ++t) {
      const int64_t ix = row_of(g, b, t), p = position_of(g, b, t);
      const int64_t ty = tg.type_ids.data ? tg.type_ids.within(b, t, tg.type_rows, 0) : 0;
      float* x = static_cast<float*>(g.out.data) + b * g.out.sb + t * g.out.st;
      for (int64_t d = 0; d < g.D; ++d) {
        float v = load(g.tok, ix, d);
        if (tg.types.data) v = v + load(tg.types, ty, d);
        x[d] = v + load(g.pos, p, d);
      }
      if (tg.gamma != nullptr) layer_norm_row(x, tg.gamma, tg.beta, tg.eps, g.D);
    }
}

// The sources of each row of a, in increasing i: (V) lists. Allocates.
template <typename E>
std::vector<std::vector<int64_t>> sources_of(const GradTargetOf<E>& a, const SourceOf<E>& src) {
  const int64_t N = src.B * src.T;
  std::vector<std::vector<int64_t>> sources(static_cast<size_t>(a.V));
  for (int64_t i = 0; i < N; ++i)
    if (a.rows[i] >= 0) sources[a.rows[i]].push_back(i);
  return sources;
}

// Row by row, sources in increasing i: one at a time for a row with at most
// kRowBlock sources, else blocks of kRowBlock summed from their first source.
// `block` is D floats of scratch; nothing here allocates.
template <typename E>
void index_add_one(const GradTargetOf<E>& a, const SourceOf<E>& src,
                   const std::vector<std::vector<int64_t>>& sources, std::vector<E>& block) {
  const int64_t D = src.D;
  for (int64_t v = 0; v < a.V; ++v) {
    const auto& list = sources[v];
    E* grad = a.grad + v * a.stride;
    if (a.row_scale != nullptr) {
      for (const int64_t i : list)
        for (int64_t d = 0; d < D; ++d) grad[d] = std::fma(a.row_scale[v], src.row(i)[d], grad[d]);
      continue;
    }
    if (list.size() <= static_cast<size_t>(kRowBlock)) {
      for (const int64_t i : list)
        for (int64_t d = 0; d < D; ++d) grad[d] += src.row(i)[d];
      continue;
    }
    for (size_t b0 = 0; b0 < list.size(); b0 += kRowBlock) {
      const size_t b1 = std::min(list.size(), b0 + kRowBlock);
      for (int64_t d = 0; d < D; ++d) block[d] = src.row(list[b0])[d];
      for (size_t k = b0 + 1; k < b1; ++k)
        for (int64_t d = 0; d < D; ++d) block[d] += src.row(list[k])[d];
      for (int64_t d = 0; d < D; ++d) grad[d] += block[d];
    }
  }
}

// Two gradients are, by definition, the two one-gradient scatters. Every
// allocation (both source lists, the scratch row) comes before the first
// write, as kernels.h asks of a backward kernel: a bad_alloc leaves both
// gradients untouched.
template <typename E>
void index_add_rows_any(const GradTargetOf<E>& a, const GradTargetOf<E>& b, const SourceOf<E>& src) {
  std::vector<std::vector<int64_t>> sources_a, sources_b;
  if (a.grad != nullptr) sources_a = sources_of(a, src);
  if (b.grad != nullptr) sources_b = sources_of(b, src);
  std::vector<E> block(static_cast<size_t>(src.D));
  if (a.grad != nullptr) index_add_one(a, src, sources_a, block);
  if (b.grad != nullptr) index_add_one(b, src, sources_b, block);
}

void index_add_rows_ref(const GradTarget& a, const GradTarget& b, const Source& src, const Exec&) {
  index_add_rows_any(a, b, src);
}

void index_add_rows_f64_ref(const GradTarget64& a, const GradTarget64& b, const Source64& src, const Exec&) {
  index_add_rows_any(a, b, src);
}

}  // namespace

void apply_rope_ref(const RopeApply& r, const Exec& ex);  // reference/rope.cc
void apply_rope_tables_ref(const RopeTables& r, const Exec& ex);  // reference/rope.cc
void compose_quant_ref(const QuantGather& q, const Exec& ex);  // reference/quant.cc

const KernelTable& reference_kernels() {
  static const KernelTable table{"reference",         0.0,
                                 compose_forward_ref, compose_typed_ref,
                                 index_add_rows_ref,  apply_rope_ref,
                                 compose_quant_ref,   index_add_rows_f64_ref,
                                 apply_rope_tables_ref};
  return table;
}

}  // namespace tokpos::kernels
