// The cpu forward: a gather of token rows plus position rows, split over
// tokens on the library's workers in contiguous token ranges
// (common/parallel.h), vectorised inner loops, streaming stores for outputs
// larger than the cache. Bitwise equal to the reference. The streaming
// helpers (and convert.h's templates, instantiated for them) pass 64-byte GCC
// vectors between always-inline functions: no ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__SSE2__)
#include <immintrin.h>
#define TOKPOS_STREAM_STORES 1  // else "streaming" stores are plain stores
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/convert.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/kernels.h"

namespace tokpos::kernels::cpu {
namespace {

using fp::bf16_t;
using fp::f16_t;
using fp::to_f32;

template <typename Out>
inline void store(Out* out, float v) {
  if constexpr (sizeof(Out) == 4) {
    *out = v;
  } else if constexpr (std::is_same_v<Out, bf16_t>) {
    *out = fp::to_bf16(v);
  } else {
    *out = fp::to_f16(v);
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
  return fp::f16_bits_to_f32<u32x16, f32x16>(load16_bits(&p->bits));
}

// binary16 -> float by the conversion instruction (vcvtph2ps, part of
// AVX-512F), for the functions compiled for AVX-512F only (gather_range_f16).
// Its bits equal fp::f16_bits_to_f32's except that it quiets a signalling NaN
// (fp's keeps it signalling): where every element is a sum of two rows, which
// quiets it anyway, it is used as it is; a token row alone goes through
// load16_exact.
// (Inline assembly, not the intrinsic: the intrinsic may only be inlined into
// functions compiled for AVX-512F, and this one reaches gather_range_f16 only
// through the templates shared with every clone. Clang checks a 512-bit
// register operand against the enclosing function's target, so a clang build
// converts by the formula, as a core without AVX-512F does.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TOKPOS_F16_INSTRUCTION 1
__attribute__((always_inline)) inline f32x16 load16_by_instruction(const f16_t* p) {
  u16x16 h;
  std::memcpy(&h, p, sizeof h);
  f32x16 v;
  asm("vcvtph2ps %1, %0" : "=v"(v) : "m"(h));
  return v;
}
#else
inline f32x16 load16_by_instruction(const f16_t* p) {
  return load16(p);
}
#endif
// The instruction's bits made fp::f16_bits_to_f32's: in a NaN lane
// (exponent all ones, mantissa nonzero) the instruction sets bit 22, the
// formula copies the input's bit 9 there, so bit 22 is cleared where bit 9 is
// clear (a signalling NaN stays signalling). Only an f32 output sees the
// difference (a 16-bit output's rounding quiets every NaN), and
// KernelPaths.F16ForwardMatchesReferenceOnEveryValue checks every f16 value.
__attribute__((always_inline)) inline f32x16 load16_exact(const f16_t* p) {
  const u32x16 h = load16_bits(&p->bits);
  const u32x16 v = std::bit_cast<u32x16>(load16_by_instruction(p));
  const auto nan = (u32x16)((h & 0x7fffu) > 0x7c00u);  // all ones in a NaN lane
  return std::bit_cast<f32x16>(v & ~(nan & ~(h << 13) & 0x400000u));
}
// A row of either table, widened: kByInstruction uses the instruction for f16,
// as it is where the row is added to another (kSum), else repaired.
template <bool kByInstruction, typename T, bool kSum = true>
__attribute__((always_inline)) inline f32x16 widen16(const T* p) {
  if constexpr (kByInstruction && std::is_same_v<T, f16_t>) {
    return kSum ? load16_by_instruction(p) : load16_exact(p);
  } else {
    return load16(p);
  }
}

// Plain (not streamed) stores of 16 elements, the bits of store() on each.
__attribute__((always_inline)) inline void store16(float* p, f32x16 v) {
  std::memcpy(p, &v, sizeof v);
}
__attribute__((always_inline)) inline void store16_bits(uint16_t* p, u32x16 bits) {
  const u16x16 h = __builtin_convertvector(bits, u16x16);
  std::memcpy(p, &h, sizeof h);
}
__attribute__((always_inline)) inline void store16(bf16_t* p, f32x16 v) {
  store16_bits(&p->bits, fp::f32_to_bf16_bits<u32x16, f32x16>(v));
}
__attribute__((always_inline)) inline void store16(f16_t* p, f32x16 v) {
  store16_bits(&p->bits, fp::f32_to_f16_bits<u32x16, f32x16>(v));
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
__attribute__((always_inline)) inline void stream16_bits(uint16_t* p, u32x16 bits) {
  const u16x16 h = __builtin_convertvector(bits, u16x16);
#ifdef TOKPOS_STREAM_STORES
  auto* q = reinterpret_cast<__m128i*>(p);
  _mm_stream_si128(q, std::bit_cast<__m128i>(__builtin_shufflevector(h, h, 0, 1, 2, 3, 4, 5, 6, 7)));
  _mm_stream_si128(q + 1, std::bit_cast<__m128i>(__builtin_shufflevector(h, h, 8, 9, 10, 11, 12, 13, 14, 15)));
#else
  std::memcpy(p, &h, sizeof h);
#endif
}
__attribute__((always_inline)) inline void stream16(bf16_t* p, f32x16 v) {
  stream16_bits(&p->bits, fp::f32_to_bf16_bits<u32x16, f32x16>(v));
}
__attribute__((always_inline)) inline void stream16(f16_t* p, f32x16 v) {
  stream16_bits(&p->bits, fp::f32_to_f16_bits<u32x16, f32x16>(v));
}

// out[from, len) = token row (+ position row), widened, added, stored as
// Out, element by element.
template <typename Tok, typename Pos, typename Out>
__attribute__((always_inline)) inline void row_scalar(Out* __restrict out, const Tok* __restrict wte,
                                                      const Pos* __restrict wpe, int64_t from, int64_t len) {
  if (wpe == nullptr) {
    for (int64_t d = from; d < len; ++d) store(out + d, to_f32(wte[d]));
  } else {
    for (int64_t d = from; d < len; ++d) store(out + d, to_f32(wte[d]) + to_f32(wpe[d]));
  }
}

// f(d) for d = from, from + 16, ... while d + 16 <= len; returns the first d
// left. The counter runs up to zero from below, and each row pointer is
// taken from its end, so the loop holds one counter and its pointers in
// registers and no bound in memory, whatever the function it is inlined into
// keeps live around it: a bound reloaded from the stack on every iteration
// cost a 16-token decode step at D = 4096 a fifth of its time.
template <typename F>
__attribute__((always_inline)) inline int64_t by16(int64_t from, int64_t len, F&& f) {
  const int64_t end = from + (len - from) / 16 * 16;
  for (int64_t i = from - end; i < 0;) {
    f(end + i);
    i += 16;
    asm("" : "+r"(i));  // opaque to the optimiser: no bound is derived from it
  }
  return end;
}

// out[0, len) = token row (+ position row), widened, added, stored as Out:
// 16 elements at a time (the bits of store() on each; kByInstruction: f16
// widened by the instruction), the last len % 16 one by one.
template <typename Tok, typename Pos, typename Out, bool kByInstruction = false>
__attribute__((always_inline)) inline void row_sum(Out* __restrict out, const Tok* __restrict wte,
                                                   const Pos* __restrict wpe, int64_t len) {
  int64_t d = 0;
  if (wpe == nullptr) {
    d = by16(0, len, [&](int64_t e) { store16(out + e, widen16<kByInstruction, Tok, false>(wte + e)); });
  } else {
    d = by16(0, len, [&](int64_t e) {
      store16(out + e, widen16<kByInstruction>(wte + e) + widen16<kByInstruction>(wpe + e));
    });
  }
  row_scalar(out, wte, wpe, d, len);
}

// row_sum with streaming stores: plain stores up to the first 16-byte
// boundary of out and for the last D % 16 elements, streamed in between.
template <typename Tok, typename Pos, typename Out, bool kByInstruction = false>
__attribute__((always_inline)) inline void row_sum_stream(Out* out, const Tok* wte, const Pos* wpe, int64_t D) {
  const auto misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) % 16);
  const int64_t head = std::min(D, misalign == 0 ? 0 : (16 - misalign) / static_cast<int64_t>(sizeof(Out)));
  row_scalar(out, wte, wpe, 0, head);
  int64_t d = 0;
  if (wpe == nullptr) {
    d = by16(head, D, [&](int64_t e) { stream16(out + e, widen16<kByInstruction, Tok, false>(wte + e)); });
  } else {
    d = by16(head, D, [&](int64_t e) {
      stream16(out + e, widen16<kByInstruction>(wte + e) + widen16<kByInstruction>(wpe + e));
    });
  }
  row_scalar(out, wte, wpe, d, D);
}

// The row of an id outside a vocab shard: the position row alone, or zeros.
// Plain stores (a shard's outside rows are the cheap ones: no table read).
template <typename Pos, typename Out>
__attribute__((always_inline)) inline void outside_row(Out* o, const Pos* wpe, int64_t D) {
  if (wpe == nullptr) {
    std::memset(static_cast<void*>(o), 0, static_cast<size_t>(D) * sizeof(Out));
  } else {
    row_sum(o, wpe, static_cast<const Pos*>(nullptr), D);
  }
}

// Tokens [n0, n1): the whole computation, inlined into each clone of
// gather_range so every clone vectorises it for its ISA.
template <typename Tok, typename Pos, typename Out, bool kStream, bool kByInstruction = false>
__attribute__((always_inline)) inline void rows(const Gather& g, int64_t n0, int64_t n1) {
  if (n1 <= n0) return;
  Out* out = static_cast<Out*>(g.out.data);
  const Tok* tok = static_cast<const Tok*>(g.tok.data);
  const Pos* pos = static_cast<const Pos*>(g.pos.data);
  const int64_t T = g.T, D = g.D, V = g.V, ts = g.tok.stride, ps = g.pos.stride;
  const int64_t row_bytes = D * static_cast<int64_t>(sizeof(Tok));
  // The position row of token (b, t); pos must be set. Each id read once and
  // bounded (Index::within), as the token id is below.
  auto pos_row = [&](int64_t b, int64_t t) {
    return pos + (g.pos_ids.data ? g.pos_ids.within(b, t, g.L, 0) : g.start + t) * ps;
  };
  // A thread with at most kDecodeTokens tokens (a decode step, or a small
  // range of a split call) prefetches all its rows at once, one line per 4 KiB
  // page of each token and position row: enough to start the page walks and
  // the hardware's stream prefetch when the rows are cold, and next to
  // nothing when they are already in the cache, where prefetching every line
  // of the next row costs more than it saves.
  const bool decode = n1 - n0 <= kDecodeTokens;
  const int64_t ahead = decode ? 0 : prefetch_rows_ahead(row_bytes);
  if (decode && prefetch_bytes() != 0) {
    for (int64_t m = n0; m < n1; ++m) {
      const int64_t mb = m / T, mt = m % T, id = g.ids.at(mb, mt);
      if (id >= 0 && id < V) prefetch_pages(tok + id * ts, row_bytes);
      if (pos != nullptr) prefetch_pages(pos_row(mb, mt), D * static_cast<int64_t>(sizeof(Pos)));
    }
  }
  // The token row of (b, t), `ahead` tokens before it is needed: every line
  // of it, or, for a row longer than the prefetch distance, one line per page
  // (the hardware's stream prefetch follows within the row; a whole 16 KiB
  // row fetched at once mostly waits in the miss buffers).
  const bool pages_ahead = row_bytes > prefetch_bytes();
  auto prefetch_token = [&](int64_t b, int64_t t) {
    const int64_t id = g.ids.at(b, t);
    if (id < 0 || id >= V) return;
    if (pages_ahead) {
      prefetch_pages(tok + id * ts, row_bytes);
    } else {
      prefetch_row(tok + id * ts, row_bytes);
    }
  };
  auto token = [&](int64_t b, int64_t t) __attribute__((always_inline)) {
    const int64_t id = g.ids.at(b, t);
    const int64_t ix = (id >= 0 && id < V) ? id : g.unk_id;
    const Pos* wpe_p = pos == nullptr ? nullptr : pos_row(b, t);
    Out* o = out + b * g.out.sb + t * g.out.st;
    if (ix != id && g.zero_outside) [[unlikely]] {
      outside_row<Pos, Out>(o, wpe_p, D);
    } else if constexpr (kStream) {
      row_sum_stream<Tok, Pos, Out, kByInstruction>(o, tok + ix * ts, wpe_p, D);
    } else {
      row_sum<Tok, Pos, Out, kByInstruction>(o, tok + ix * ts, wpe_p, D);
    }
  };
  // Token order, (b, t) counted along, and the token `ahead` of it.
  int64_t b = n0 / T, t = n0 % T, ba = b, ta = t;
  auto step = [T](int64_t& bb, int64_t& tt) {
    if (++tt == T) tt = 0, ++bb;
  };
  for (int64_t k = 0; k < ahead && k < n1 - n0; ++k) step(ba, ta);
  for (int64_t n = n0; n < n1; ++n) {
    if (ahead > 0 && n + ahead < n1) {
      prefetch_token(ba, ta);
      step(ba, ta);
    }
    token(b, t);
    step(b, t);
  }
#ifdef TOKPOS_STREAM_STORES
  if constexpr (kStream) _mm_sfence();  // order the streamed lines before the range is counted done
#endif
}

template <typename Tok, typename Pos, bool kBy = false>
__attribute__((always_inline)) inline void rows_out(const Gather& g, int64_t n0, int64_t n1, bool stream) {
  switch (g.out.type) {
    case DType::kBF16:
      return stream ? rows<Tok, Pos, bf16_t, true, kBy>(g, n0, n1) : rows<Tok, Pos, bf16_t, false, kBy>(g, n0, n1);
    case DType::kF16:
      return stream ? rows<Tok, Pos, f16_t, true, kBy>(g, n0, n1) : rows<Tok, Pos, f16_t, false, kBy>(g, n0, n1);
    default:
      return stream ? rows<Tok, Pos, float, true, kBy>(g, n0, n1) : rows<Tok, Pos, float, false, kBy>(g, n0, n1);
  }
}

template <typename Tok, bool kBy = false>
__attribute__((always_inline)) inline void rows_pos(const Gather& g, int64_t n0, int64_t n1, bool stream) {
  switch (g.pos.type) {
    case DType::kBF16: return rows_out<Tok, bf16_t, kBy>(g, n0, n1, stream);
    case DType::kF16: return rows_out<Tok, f16_t, kBy>(g, n0, n1, stream);
    default: return rows_out<Tok, float, kBy>(g, n0, n1, stream);
  }
}

// One dispatch point per ISA; the type switch runs once per range, not per
// element. flatten: everything it calls is inlined into each clone, so no
// 64-byte vector ever crosses a call (whose ABI would differ between clones).
TOKPOS_KERNEL_CLONES __attribute__((flatten))
void gather_range(const Gather& g, int64_t n0, int64_t n1, bool stream) {
  switch (g.tok.type) {
    case DType::kBF16: return rows_pos<bf16_t>(g, n0, n1, stream);
    case DType::kF16: return rows_pos<f16_t>(g, n0, n1, stream);
    default: return rows_pos<float>(g, n0, n1, stream);
  }
}

// A table in f16 (a token table, or a position table that is added), on a
// CPU with AVX-512F: the f16 rows widened by the instruction (the same bits:
// in a sum as it is, a token row alone repaired by load16_exact).
#ifdef TOKPOS_F16_INSTRUCTION
__attribute__((target("avx512f")))
#endif
__attribute__((flatten)) void gather_range_f16(const Gather& g, int64_t n0, int64_t n1,
                                                                  bool stream) {
  switch (g.tok.type) {
    case DType::kBF16: return rows_pos<bf16_t, true>(g, n0, n1, stream);
    case DType::kF16: return rows_pos<f16_t, true>(g, n0, n1, stream);
    default: return rows_pos<float, true>(g, n0, n1, stream);
  }
}

bool has_avx512f() {
#ifdef TOKPOS_F16_INSTRUCTION
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
#else
  return false;
#endif
}

// Tokens [n0, n1) of the float64 forward: plain loops, summed in double
// (the gradient-check path: exactness, not speed).
void rows_f64(const Gather& g, int64_t n0, int64_t n1) {
  const auto* tok = static_cast<const double*>(g.tok.data);
  const auto* pos = static_cast<const double*>(g.pos.data);
  auto* out = static_cast<double*>(g.out.data);
  const int64_t T = g.T, D = g.D;
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t b = n / T, t = n % T, id = g.ids.at(b, t);
    const int64_t ix = (id >= 0 && id < g.V) ? id : g.unk_id;
    const int64_t p = g.pos_ids.data ? g.pos_ids.within(b, t, g.L, 0) : g.start + t;
    const double* wpe = pos == nullptr ? nullptr : pos + p * g.pos.stride;
    double* o = out + b * g.out.sb + t * g.out.st;
    if (ix != id && g.zero_outside) [[unlikely]] {
      for (int64_t d = 0; d < D; ++d) o[d] = wpe == nullptr ? 0.0 : wpe[d];
      continue;
    }
    const double* wte = tok + ix * g.tok.stride;
    if (wpe == nullptr) {
      std::copy(wte, wte + D, o);
    } else {
      for (int64_t d = 0; d < D; ++d) o[d] = wte[d] + wpe[d];
    }
  }
}

}  // namespace

void compose_forward(const Gather& g, const Exec& ex) {
  const int64_t N = g.B * g.T;
  if (g.tok.type == DType::kF64) {
    over_token_ranges(ex, N, N * g.D, [&](int64_t n0, int64_t n1) { rows_f64(g, n0, n1); });
    return;
  }
  const auto out_bytes = static_cast<int64_t>(N * g.D * static_cast<int64_t>(dtype_size(g.out.type)));
  const bool stream = N > kDecodeTokens && out_bytes >= ex.stream_min_bytes;
  const bool f16 = g.tok.type == DType::kF16 || (g.pos.type == DType::kF16 && g.pos.data != nullptr);
  if (f16 && has_avx512f()) {
    over_token_ranges(ex, N, N * g.D, [&](int64_t n0, int64_t n1) { gather_range_f16(g, n0, n1, stream); });
    return;
  }
  over_token_ranges(ex, N, N * g.D, [&](int64_t n0, int64_t n1) { gather_range(g, n0, n1, stream); });
}

}  // namespace tokpos::kernels::cpu
