// The cpu RoPE: OpenMP over (b, t) rows. Each row's cos and sin are computed
// once (common/rope_angle.h) into the thread's scratch and reused for every
// head; the rotary part of each head is widened into the scratch first, so
// the loops that rotate and store have no aliasing between x and out (out may
// be x) and vectorise. The same float operations as the reference, in the
// same order: bitwise equal to it.
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
__attribute__((always_inline)) inline void cos_sin_row(int64_t p, const double* __restrict__ inv_freq,
                                                       int64_t half, double factor, double sin_factor,
                                                       float* __restrict__ cs, float* __restrict__ sn) {
  for (int64_t i = 0; i < half; ++i) {
    double cd, sd;
    detail::rope_cos_sin(p, detail::rope_turns(inv_freq[i]), &cd, &sd);
    cs[i] = static_cast<float>(cd * factor);
    sn[i] = static_cast<float>(sd * sin_factor);
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
  float* __restrict__ a = scratch + 2 * half;   // first of each pair, half
  float* __restrict__ bb = scratch + 3 * half;  // second of each pair, half
  const E* x = static_cast<const E*>(r.x);
  E* out = static_cast<E*>(r.out);
  const bool half_layout = r.layout == RopeLayout::kHalf;
  const double* inv_freq = r.inv_freq;
  const double factor = r.attention_factor, sin_factor = r.inverse ? -r.attention_factor : r.attention_factor;
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t b = n / r.T, t = n % r.T;
    const int64_t p = r.pos.at(b, t);
    cos_sin_row(p, inv_freq, half, factor, sin_factor, cs, sn);
    for (int64_t h = 0; h < r.H; ++h) {
      const E* xr = x + b * r.xsb + t * r.xst + h * r.xsh;
      E* orow = out + b * r.osb + t * r.ost + h * r.osh;
      if (half_layout) {
        for (int64_t i = 0; i < half; ++i) a[i] = widen(xr[i]);
        for (int64_t i = 0; i < half; ++i) bb[i] = widen(xr[i + half]);
        for (int64_t i = 0; i < half; ++i) orow[i] = narrow<E>(a[i] * cs[i] - bb[i] * sn[i]);
        for (int64_t i = 0; i < half; ++i) orow[i + half] = narrow<E>(bb[i] * cs[i] + a[i] * sn[i]);
      } else {
        for (int64_t i = 0; i < half; ++i) {
          a[i] = widen(xr[2 * i]);
          bb[i] = widen(xr[2 * i + 1]);
        }
        for (int64_t i = 0; i < half; ++i) {
          const float o0 = a[i] * cs[i] - bb[i] * sn[i];
          const float o1 = bb[i] * cs[i] + a[i] * sn[i];
          orow[2 * i] = narrow<E>(o0);
          orow[2 * i + 1] = narrow<E>(o1);
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
  if (nt == 1) return rope_rows<E>(r, r.scratch, 0, N);
#pragma omp parallel num_threads(nt)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    rope_rows<E>(r, r.scratch + k * 4 * r.half, N * k / team, N * (k + 1) / team);
  }
}

}  // namespace

void apply_rope(const RopeApply& r, const Exec& ex) {
  switch (r.type) {
    case DType::kBF16: return apply<fp::bf16_t>(r, ex);
    case DType::kF16: return apply<fp::f16_t>(r, ex);
    default: return apply<float>(r, ex);
  }
}

}  // namespace tokpos::kernels::cpu
