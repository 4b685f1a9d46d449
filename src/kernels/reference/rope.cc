// The reference RoPE: plain loops, every angle computed where it is used.
#include <cstdint>

#include "common/convert.h"
#include "common/rope_angle.h"
#include "kernels/kernels.h"

namespace tokpos::kernels {
namespace {

float load(const void* base, DType type, int64_t off) {
  switch (type) {
    case DType::kBF16: return fp::to_f32(static_cast<const fp::bf16_t*>(base)[off]);
    case DType::kF16: return fp::to_f32(static_cast<const fp::f16_t*>(base)[off]);
    default: return static_cast<const float*>(base)[off];
  }
}

void store(void* base, DType type, int64_t off, float v) {
  switch (type) {
    case DType::kBF16: static_cast<fp::bf16_t*>(base)[off] = fp::to_bf16(v); break;
    case DType::kF16: static_cast<fp::f16_t*>(base)[off] = fp::to_f16(v); break;
    default: static_cast<float*>(base)[off] = v; break;
  }
}

// rnd(v): v rounded to type (float32: v itself).
float rnd(DType type, float v) {
  switch (type) {
    case DType::kBF16: return fp::to_f32(fp::to_bf16(v));
    case DType::kF16: return fp::to_f32(fp::to_f16(v));
    default: return v;
  }
}

}  // namespace

void apply_rope_ref(const RopeApply& r, const Exec&) {
  const bool half_layout = r.layout == RopeLayout::kHalf;
  for (int64_t b = 0; b < r.B; ++b) {
    for (int64_t t = 0; t < r.T; ++t) {
      const int64_t p = r.pos.within(b, t, detail::kRopeMaxPosition, 0);
      for (int64_t h = 0; h < r.H; ++h) {
        const int64_t xo = b * r.xsb + t * r.xst + h * r.xsh;
        const int64_t oo = b * r.osb + t * r.ost + h * r.osh;
        for (int64_t i = 0; i < r.half; ++i) {
          double cd = 0, sd = 0;
          detail::rope_cos_sin(p, detail::rope_turns(r.inv_freq[i]), &cd, &sd);
          const float c = static_cast<float>(cd * r.attention_factor);
          const float s = static_cast<float>((r.inverse ? -sd : sd) * r.attention_factor);
          const int64_t i0 = half_layout ? i : 2 * i;
          const int64_t i1 = half_layout ? i + r.half : 2 * i + 1;
          const float x0 = load(r.x, r.type, xo + i0), x1 = load(r.x, r.type, xo + i1);
          store(r.out, r.type, oo + i0, x0 * c - x1 * s);
          store(r.out, r.type, oo + i1, x1 * c + x0 * s);
        }
        for (int64_t d = 2 * r.half; d < r.D; ++d) store(r.out, r.type, oo + d, load(r.x, r.type, xo + d));
      }
    }
  }
}

void apply_rope_tables_ref(const RopeTables& r, const Exec&) {
  const int64_t half = r.R / 2;
  const bool half_layout = r.layout == RopeLayout::kHalf;
  for (int64_t b = 0; b < r.B; ++b) {
    for (int64_t t = 0; t < r.T; ++t) {
      const int64_t co = b * r.csb + t * r.cst, so = b * r.ssb + t * r.sst;
      for (int64_t h = 0; h < r.H; ++h) {
        const int64_t xo = b * r.xsb + t * r.xst + h * r.xsh;
        const int64_t oo = b * r.osb + t * r.ost + h * r.osh;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t j0 = half_layout ? i : 2 * i, j1 = half_layout ? i + half : 2 * i + 1;
          const float x0 = load(r.x, r.type, xo + j0), x1 = load(r.x, r.type, xo + j1);
          const float c0 = load(r.cos, r.type, co + j0), c1 = load(r.cos, r.type, co + j1);
          const float s0 = load(r.sin, r.type, so + j0), s1 = load(r.sin, r.type, so + j1);
          const float a0 = rnd(r.type, x0 * c0), a1 = rnd(r.type, x1 * c1);
          if (r.inverse) {
            store(r.out, r.type, oo + j0, a0 + rnd(r.type, x1 * s1));
            store(r.out, r.type, oo + j1, a1 - rnd(r.type, x0 * s0));
          } else {
            store(r.out, r.type, oo + j0, a0 - rnd(r.type, x1 * s0));
            store(r.out, r.type, oo + j1, a1 + rnd(r.type, x0 * s1));
          }
        }
        for (int64_t d = r.R; d < r.D; ++d) store(r.out, r.type, oo + d, load(r.x, r.type, xo + d));
      }
    }
  }
}

}  // namespace tokpos::kernels
