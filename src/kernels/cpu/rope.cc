// The cpu RoPE: (b, t) rows split over the library's workers. Each row's cos
// and sin are made once from the frequencies' turns (common/rope_angle.h, a
// vectorised loop) into the thread's scratch and reused for every head; each
// head's pairs are rotated in one loop that reads a pair before it writes it,
// so it vectorises whether out is x or apart from it. The same float
// operations as the reference, in the same order: bitwise equal to it.
#include <cstdint>
#include <type_traits>

#include "common/convert.h"
#include "common/rope_angle.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/kernels.h"

namespace tokpos::kernels::cpu {
namespace {

template <typename E>
inline float widen(E v) {
  return fp::to_f32(v);
}

template <typename E>
inline E narrow(float v) {
  if constexpr (std::is_same_v<E, float>) {
    return v;
  } else if constexpr (std::is_same_v<E, fp::bf16_t>) {
    return fp::to_bf16(v);
  } else {
    return fp::to_f16(v);
  }
}

// One row's cos and sin (times the attention factor; sin_factor carries the
// inverse's sign, an exact negation), rounded to float: a loop of plain
// double arithmetic and fma, which the clones vectorise.
// t0, t1: rope_turns(inv_freq[i]) (RopeApply::turns).
__attribute__((always_inline)) inline void cos_sin_row(int64_t p, const double* __restrict__ t0,
                                                       const double* __restrict__ t1, int64_t half, double factor,
                                                       double sin_factor, float* __restrict__ cs,
                                                       float* __restrict__ sn) {
  for (int64_t i = 0; i < half; ++i) {
    double cd, sd;
    detail::rope_cos_sin(p, detail::RopeTurns{t0[i], t1[i]}, &cd, &sd);
    cs[i] = static_cast<float>(cd * factor);
    sn[i] = static_cast<float>(sd * sin_factor);
  }
}

// The loop that follows has no dependence the compiler must respect (GCC's
// ivdep). Other compilers (clang builds the fuzz targets) go without: their
// loop is correct either way, only perhaps not vectorised.
#if defined(__GNUC__) && !defined(__clang__)
#define TOKPOS_IVDEP _Pragma("GCC ivdep")
#else
#define TOKPOS_IVDEP
#endif

// out[i], out[i + half] = the pair (x[i], x[i + half]) rotated by (c[i],
// s[i]). Iteration i reads x[i] and x[i + half] and then writes out[i] and
// out[i + half], and no other iteration touches those elements; out is x
// itself or apart from it (the ops layer checks), so vectors of iterations
// are safe either way (ivdep). Inlined, so a constant half unrolls.
template <typename E>
__attribute__((always_inline)) inline void rotate_halves(const E* xr, E* orow, const float* __restrict__ cs,
                                                         const float* __restrict__ sn, int64_t half) {
TOKPOS_IVDEP
  for (int64_t i = 0; i < half; ++i) {
    const float x0 = widen(xr[i]), x1 = widen(xr[i + half]);
    orow[i] = narrow<E>(x0 * cs[i] - x1 * sn[i]);
    orow[i + half] = narrow<E>(x1 * cs[i] + x0 * sn[i]);
  }
}

// The cpu kernels' clones, with FMA beside AVX2 (every AVX2 server core has
// it): the angle loop's exact products are fma, a call to libm without it.
// fma is exact, so every clone gives the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TOKPOS_NO_TARGET_CLONES)
#define TOKPOS_ROPE_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define TOKPOS_ROPE_CLONES TOKPOS_KERNEL_CLONES
#endif

template <typename E>
TOKPOS_ROPE_CLONES void rope_rows(const RopeApply& r, float* __restrict__ scratch, int64_t n0, int64_t n1) {
  const int64_t half = r.half;
  float* __restrict__ cs = scratch;             // cos, half
  float* __restrict__ sn = scratch + half;      // sin, half
  const double* __restrict__ t0 = r.turns;  // rope_turns of each frequency: t0, then t1
  const double* __restrict__ t1 = r.turns + half;
  const E* x = static_cast<const E*>(r.x);
  E* out = static_cast<E*>(r.out);
  const bool half_layout = r.layout == RopeLayout::kHalf;
  const double factor = r.attention_factor, sin_factor = r.inverse ? -r.attention_factor : r.attention_factor;
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t b = n / r.T, t = n % r.T;
    const int64_t p = r.pos.within(b, t, detail::kRopeMaxPosition, 0);
    cos_sin_row(p, t0, t1, half, factor, sin_factor, cs, sn);
    for (int64_t h = 0; h < r.H; ++h) {
      const E* xr = x + b * r.xsb + t * r.xst + h * r.xsh;
      E* orow = out + b * r.osb + t * r.ost + h * r.osh;
      if (half_layout) {
        // The common head sizes with a fixed trip count: no loop prologue or
        // remainder per head (a head is only a few vectors long).
        if (half == 64) {
          rotate_halves<E>(xr, orow, cs, sn, 64);
        } else if (half == 32) {
          rotate_halves<E>(xr, orow, cs, sn, 32);
        } else {
          rotate_halves<E>(xr, orow, cs, sn, half);
        }
      } else {
        // Pairs (2i, 2i + 1): iteration i reads and writes only its own pair.
TOKPOS_IVDEP
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = widen(xr[2 * i]), x1 = widen(xr[2 * i + 1]);
          orow[2 * i] = narrow<E>(x0 * cs[i] - x1 * sn[i]);
          orow[2 * i + 1] = narrow<E>(x1 * cs[i] + x0 * sn[i]);
        }
      }
      for (int64_t d = 2 * half; d < r.D; ++d) orow[d] = narrow<E>(widen(xr[d]));
    }
  }
}

template <typename E>
void apply(const RopeApply& r, const Exec& ex) {
  const int64_t N = r.B * r.T;
  const int64_t work = N * (r.H * r.D + 40 * r.half);  // sin and cos cost about 40 flops a pair
  const int nt = N <= kDecodeTokens ? 1 : threads_for(ex, work);
  detail::parallel_ranges(nt, N,
                          [&](int64_t n0, int64_t n1, int slot) { rope_rows<E>(r, r.scratch + slot * 2 * r.half, n0, n1); });
}

// A value rounded to E and back (the rounding torch applies after each
// elementwise op in E); float32 is left as it is.
template <typename E>
__attribute__((always_inline)) inline float rnd(float v) {
  if constexpr (std::is_same_v<E, float>) {
    return v;
  } else {
    return widen(narrow<E>(v));
  }
}

// One head of apply_rope_tables' forward (sign +1) or inverse (sign -1) for
// the half layout: pair i is (i, i + half), its cos and sin at [i] and
// [i + half] of the row. Each iteration reads its pair before writing it
// and touches no other element, so vectors of iterations are safe when out
// is x (ivdep).
template <typename E, bool Inverse>
__attribute__((always_inline)) inline void rotate_halves_by(const E* xr, E* orow, const E* __restrict__ cr,
                                                            const E* __restrict__ sr, int64_t half) {
TOKPOS_IVDEP
  for (int64_t i = 0; i < half; ++i) {
    const float x0 = widen(xr[i]), x1 = widen(xr[i + half]);
    const float c0 = widen(cr[i]), c1 = widen(cr[i + half]), s0 = widen(sr[i]), s1 = widen(sr[i + half]);
    const float a0 = rnd<E>(x0 * c0), a1 = rnd<E>(x1 * c1);
    if constexpr (Inverse) {
      orow[i] = narrow<E>(a0 + rnd<E>(x1 * s1));
      orow[i + half] = narrow<E>(a1 - rnd<E>(x0 * s0));
    } else {
      orow[i] = narrow<E>(a0 - rnd<E>(x1 * s0));
      orow[i + half] = narrow<E>(a1 + rnd<E>(x0 * s1));
    }
  }
}

// The same for the interleaved layout, pair i = (2i, 2i + 1). Written as
// one loop, GCC's vectorizer turns its alternating difference and sum into
// fused multiply-add-subtract instructions (vfmaddsub) in spite of
// -ffp-contract=off, rounding each pair once instead of three times; so the
// rounded products of a chunk of pairs go through a buffer first and are
// combined in a second loop. A chunk is read whole before any of it is
// written, so out may be x.
template <typename E, bool Inverse>
__attribute__((always_inline)) inline void rotate_pairs_by(const E* xr, E* orow, const E* __restrict__ cr,
                                                           const E* __restrict__ sr, int64_t half) {
  constexpr int64_t kChunk = 32;  // pairs
  float with_cos[2 * kChunk], with_sin[2 * kChunk];
  for (int64_t i0 = 0; i0 < half; i0 += kChunk) {
    const int64_t n = half - i0 < kChunk ? half - i0 : kChunk;
    const E* x = xr + 2 * i0;
    const E* c = cr + 2 * i0;
    const E* s = sr + 2 * i0;
    for (int64_t i = 0; i < n; ++i) {
      const float x0 = widen(x[2 * i]), x1 = widen(x[2 * i + 1]);
      with_cos[2 * i] = rnd<E>(x0 * widen(c[2 * i]));
      with_cos[2 * i + 1] = rnd<E>(x1 * widen(c[2 * i + 1]));
      // Forward: x1 s0 and x0 s1; inverse: x1 s1 and x0 s0.
      with_sin[2 * i] = rnd<E>(x1 * widen(s[2 * i + (Inverse ? 1 : 0)]));
      with_sin[2 * i + 1] = rnd<E>(x0 * widen(s[2 * i + (Inverse ? 0 : 1)]));
    }
    E* o = orow + 2 * i0;
    for (int64_t i = 0; i < n; ++i) {
      o[2 * i] = narrow<E>(Inverse ? with_cos[2 * i] + with_sin[2 * i] : with_cos[2 * i] - with_sin[2 * i]);
      o[2 * i + 1] =
          narrow<E>(Inverse ? with_cos[2 * i + 1] - with_sin[2 * i + 1] : with_cos[2 * i + 1] + with_sin[2 * i + 1]);
    }
  }
}

template <typename E, bool Inverse>
TOKPOS_KERNEL_CLONES void rope_table_rows(const RopeTables& r, int64_t n0, int64_t n1) {
  const int64_t half = r.R / 2;
  const E* x = static_cast<const E*>(r.x);
  E* out = static_cast<E*>(r.out);
  const E* cosv = static_cast<const E*>(r.cos);
  const E* sinv = static_cast<const E*>(r.sin);
  const bool half_layout = r.layout == RopeLayout::kHalf;
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t b = n / r.T, t = n % r.T;
    const E* cr = cosv + b * r.csb + t * r.cst;
    const E* sr = sinv + b * r.ssb + t * r.sst;
    for (int64_t h = 0; h < r.H; ++h) {
      const E* xr = x + b * r.xsb + t * r.xst + h * r.xsh;
      E* orow = out + b * r.osb + t * r.ost + h * r.osh;
      if (half_layout) {
        // The common head sizes with a fixed trip count (see rope_rows).
        if (half == 64) {
          rotate_halves_by<E, Inverse>(xr, orow, cr, sr, 64);
        } else if (half == 32) {
          rotate_halves_by<E, Inverse>(xr, orow, cr, sr, 32);
        } else {
          rotate_halves_by<E, Inverse>(xr, orow, cr, sr, half);
        }
      } else {
        rotate_pairs_by<E, Inverse>(xr, orow, cr, sr, half);
      }
      for (int64_t d = r.R; d < r.D; ++d) orow[d] = xr[d];
    }
  }
}

template <typename E, bool Inverse>
void apply_tables(const RopeTables& r, const Exec& ex) {
  const int64_t N = r.B * r.T;
  const int nt = N <= kDecodeTokens ? 1 : threads_for(ex, N * r.H * r.D);
  detail::parallel_ranges(nt, N, [&](int64_t n0, int64_t n1, int) { rope_table_rows<E, Inverse>(r, n0, n1); });
}

template <typename E>
void apply_tables(const RopeTables& r, const Exec& ex) {
  return r.inverse ? apply_tables<E, true>(r, ex) : apply_tables<E, false>(r, ex);
}

}  // namespace

void apply_rope_tables(const RopeTables& r, const Exec& ex) {
  switch (r.type) {
    case DType::kBF16: return apply_tables<fp::bf16_t>(r, ex);
    case DType::kF16: return apply_tables<fp::f16_t>(r, ex);
    default: return apply_tables<float>(r, ex);
  }
}

void apply_rope(const RopeApply& r, const Exec& ex) {
  switch (r.type) {
    case DType::kBF16: return apply<fp::bf16_t>(r, ex);
    case DType::kF16: return apply<fp::f16_t>(r, ex);
    default: return apply<float>(r, ex);
  }
}

}  // namespace tokpos::kernels::cpu
