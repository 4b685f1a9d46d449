// The peers of the input stage that bench/side_by_side.py times in C, so that
// no Python call overhead sits in their figures or in tokpos's beside them:
//
//   the plain loop   llm.c's encoder_forward / encoder_backward, the loop an
//                    engine author writes first: OpenMP over B*T,
//                    out[b,t,:] = wte[ids[b,t],:] + wpe[t,:]; the backward
//                    serial (as llm.c), and channel-sliced (each thread a
//                    slice of D, every element summed in (b, t) order, so the
//                    bits do not depend on the thread count either);
//   the gather line  the same token rows copied to the output alone, with
//                    non-temporal stores and the rows prefetched 12 KiB ahead
//                    (no position add): what reading rows at random
//                    addresses costs, whatever is computed on them;
//   tokpos           tokpos_compose_forward / tokpos_compose_backward, the
//                    public C functions, timed the same way.
//
// This translation unit is built on its own (libtokpos_peers.so) with
// -O3 -march=native -fopenmp, as llm.c builds its loop; the library it calls
// for tokpos is the ordinary build. See bench/CMakeLists.txt.
#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "peers.h"
#include "tokpos/tokpos.h"

namespace {

void loop_forward(const PeerArgs& a) {
  const int64_t N = a.B * a.T, T = a.T, D = a.D;
#pragma omp parallel for schedule(static) num_threads(a.threads)
  for (int64_t bt = 0; bt < N; ++bt) {
    float* o = a.out + bt * D;
    const float* w = a.wte + a.ids[bt] * D;
    const float* p = a.wpe + (bt % T) * D;
    for (int64_t i = 0; i < D; ++i) o[i] = w[i] + p[i];
  }
}

void loop_backward_serial(const PeerArgs& a) {
  const int64_t N = a.B * a.T, T = a.T, D = a.D;
  for (int64_t bt = 0; bt < N; ++bt) {
    const float* g = a.d_out + bt * D;
    float* dw = a.d_wte + a.ids[bt] * D;
    for (int64_t i = 0; i < D; ++i) dw[i] += g[i];
    if (a.d_wpe != nullptr) {
      float* dp = a.d_wpe + (bt % T) * D;
      for (int64_t i = 0; i < D; ++i) dp[i] += g[i];
    }
  }
}

// Thread k owns channels [lo, hi) of every row (bounds on 16-float lines, so
// no two threads write one cache line) and walks all (b, t) in order.
void loop_backward_slices(const PeerArgs& a) {
  const int64_t N = a.B * a.T, T = a.T, D = a.D, lines = (D + 15) / 16;
#pragma omp parallel num_threads(a.threads)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t lo = std::min(D, lines * k / team * 16), hi = std::min(D, lines * (k + 1) / team * 16);
    for (int64_t bt = 0; bt < N; ++bt) {
      const float* g = a.d_out + bt * D;
      float* dw = a.d_wte + a.ids[bt] * D;
      for (int64_t i = lo; i < hi; ++i) dw[i] += g[i];
      if (a.d_wpe != nullptr) {
        float* dp = a.d_wpe + (bt % T) * D;
        for (int64_t i = lo; i < hi; ++i) dp[i] += g[i];
      }
    }
  }
}

// Plain stores up to the first 16-byte boundary of dst, non-temporal stores
// after it (as tokpos's streaming forward and bench_kernels.cc's copy_rows_nt).
void copy_nt_span(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  while (i < n && reinterpret_cast<uintptr_t>(dst + i) % 16 != 0) dst[i] = src[i], ++i;
  for (; i + 16 <= n; i += 16) {
    const __m128 x0 = _mm_loadu_ps(src + i), x1 = _mm_loadu_ps(src + i + 4), x2 = _mm_loadu_ps(src + i + 8),
                 x3 = _mm_loadu_ps(src + i + 12);
    _mm_stream_ps(dst + i, x0);
    _mm_stream_ps(dst + i + 4, x1);
    _mm_stream_ps(dst + i + 8, x2);
    _mm_stream_ps(dst + i + 12, x3);
  }
  for (; i < n; ++i) dst[i] = src[i];
}

void gather_rows_nt(const PeerArgs& a) {
  const int64_t N = a.B * a.T, D = a.D;
  const int64_t ahead = std::max<int64_t>(1, (12 << 10) / (D * 4));
#pragma omp parallel num_threads(a.threads)
  {
    const int64_t k = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t lo = N * k / team, hi = N * (k + 1) / team;
    for (int64_t r = lo; r < hi; ++r) {
      if (r + ahead < hi) {
        const char* next = reinterpret_cast<const char*>(a.wte + a.ids[r + ahead] * D);
        for (int64_t off = 0; off < D * 4; off += 64) __builtin_prefetch(next + off, 0, 1);
      }
      copy_nt_span(a.out + r * D, a.wte + a.ids[r] * D, D);
    }
    _mm_sfence();
  }
}

}  // namespace

int peer_call(int kind, const PeerArgs* a) {
  switch (kind) {
    case kTokposForward:
      return tokpos_compose_forward(a->out, a->ids, a->B, a->T, a->wte, a->V, a->wpe, a->L, a->D);
    case kTokposBackward:
      return tokpos_compose_backward(a->d_wte, a->d_wpe, a->d_out, a->ids, a->B, a->T, a->V, a->L, a->D);
    case kLoopForward: loop_forward(*a); return 0;
    case kLoopBackwardSerial: loop_backward_serial(*a); return 0;
    case kLoopBackwardSlices: loop_backward_slices(*a); return 0;
    case kGatherRowsNt: gather_rows_nt(*a); return 0;
    default: return -1;
  }
}

double peer_median_seconds(int kind, const PeerArgs* a, int reps) {
  tokpos_set_num_threads(a->threads);
  if (peer_call(kind, a) != 0) return -1.0;
  std::vector<double> times;
  times.reserve(static_cast<size_t>(std::max(reps, 1)));
  for (int r = 0; r < std::max(reps, 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (peer_call(kind, a) != 0) return -1.0;
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const size_t m = times.size() / 2;
  return times.size() % 2 ? times[m] : 0.5 * (times[m - 1] + times[m]);
}
