// The cpu forward from a quantized token table: for each token, each block of
// its row dequantized (quant.h, ggml's loops), the position row's element
// added in float and the sum stored, in the same vectorised loop. A streamed
// output goes through a block-sized buffer in L1 for its non-temporal stores;
// the next block overwrites it. Split over tokens as the plain forward
// (cpu_common.h), streaming stores for outputs past the stream threshold.
// Every element is computed by the same operations whatever the clone, the
// thread count or the store, so the bits are the reference's.
#if defined(__SSE2__)
#include <immintrin.h>
#define TOKPOS_QUANT_STREAM 1
#endif

#include <cstring>
#include <type_traits>

#include "common/convert.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/quant.h"
#include "kernels/kernels.h"

namespace tokpos::kernels::cpu {
namespace {

using fp::bf16_t;
using fp::f16_t;

template <typename Out>
__attribute__((always_inline)) inline Out to_out(float v) {
  if constexpr (std::is_same_v<Out, float>) {
    return v;
  } else if constexpr (std::is_same_v<Out, bf16_t>) {
    return fp::to_bf16(v);
  } else {
    return fp::to_f16(v);
  }
}

// o[0, n) = y[0, n), rounded to Out. n is a block (32 or 256 elements, a
// multiple of 16 bytes of any Out), so with o 16-byte aligned every store of
// the streamed form is aligned.
template <typename Out, int kN>
__attribute__((always_inline)) inline void emit(Out* __restrict o, const float* __restrict y, bool stream) {
#ifdef TOKPOS_QUANT_STREAM
  if (stream) {
    if constexpr (std::is_same_v<Out, float>) {
      for (int j = 0; j < kN; j += 4) _mm_stream_ps(o + j, _mm_load_ps(y + j));
    } else {
      alignas(64) Out bits[kN];
      for (int j = 0; j < kN; ++j) bits[j] = to_out<Out>(y[j]);
      for (int j = 0; j < kN; j += 8)
        _mm_stream_si128(reinterpret_cast<__m128i*>(o + j), _mm_load_si128(reinterpret_cast<const __m128i*>(bits + j)));
    }
    return;
  }
#endif
  (void)stream;
  for (int j = 0; j < kN; ++j) o[j] = to_out<Out>(y[j]);
}

// The types whose blocks are dequantized into the block buffer y, the
// position row added in a second loop over y, and then stored or streamed,
// rather than each value added and stored as it comes: Q4_0 and Q4_1, whose
// loops write elements j and j + 16 in turn. On the 2-vCPU Zen 4 (make
// bench-quick, about 200 interleaved rounds) the buffer took a decode step
// (B 16, D 4096, warm rows) from 12.6 to 8.7 us for Q4_0 and from 16.3 to
// 10.4 us for Q4_1, and the Llama-2-7B shape (streamed) from 5.31 to 3.70 ms
// and from 5.40 to 3.84 ms, one thread (the f32 forward: about 4.5 ms);
// without a position row it took Q4_1's decode step from about 2x the f32
// forward's time to under 0.9x. It made Q5_0, Q5_1, Q2_K and Q3_K slower
// (docs/gguf.md, "Speed"). The same bits either way.
template <GgmlType kType>
constexpr bool kRowsViaBuffer = kType == GgmlType::kQ4_0 || kType == GgmlType::kQ4_1;

// Tokens [n0, n1) of a table of type kType.
template <GgmlType kType, typename Pos, typename Out>
__attribute__((always_inline)) inline void rows(const QuantGather& q, int64_t n0, int64_t n1, bool stream) {
  using Blk = quant::Block<kType>;
  constexpr int kN = Blk::kSize;
  const Gather& g = q.g;
  if (n1 <= n0) return;
  Out* out = static_cast<Out*>(g.out.data);
  const Pos* pos = static_cast<const Pos*>(g.pos.data);
  const int64_t T = g.T, D = g.D, V = g.V, ps = g.pos.stride, ts = q.tok.stride;
  const int64_t nblocks = D / kN, row_bytes = nblocks * Blk::kBytes;
  auto pos_row = [&](int64_t b, int64_t t) -> const Pos* {
    if (pos == nullptr) return nullptr;
    return pos + (g.pos_ids.data ? g.pos_ids.within(b, t, g.L, 0) : g.start + t) * ps;
  };
  const bool decode = n1 - n0 <= kDecodeTokens;
  const int64_t ahead = decode ? 0 : prefetch_rows_ahead(row_bytes);
  if (decode && prefetch_bytes() != 0) {
    for (int64_t m = n0; m < n1; ++m) {
      const int64_t id = g.ids.at(m / T, m % T);
      if (id >= 0 && id < V) prefetch_pages(q.tok.data + id * ts, row_bytes);
    }
  }
  alignas(64) float y[kN];
  for (int64_t n = n0; n < n1; ++n) {
    if (ahead > 0 && n + ahead < n1) {
      const int64_t na = n + ahead, id = g.ids.at(na / T, na % T);
      if (id >= 0 && id < V) prefetch_row(q.tok.data + id * ts, row_bytes);
    }
    const int64_t b = n / T, t = n % T;
    const int64_t id = g.ids.at(b, t);
    const int64_t ix = (id >= 0 && id < V) ? id : g.unk_id;
    const Pos* p = pos_row(b, t);
    Out* o = out + b * g.out.sb + t * g.out.st;
    if (ix != id && g.zero_outside) [[unlikely]] {
      for (int64_t d = 0; d < D; ++d) o[d] = to_out<Out>(p != nullptr ? fp::to_f32(p[d]) : 0.0f);
      continue;
    }
    const bool aligned = reinterpret_cast<uintptr_t>(o) % 16 == 0;
    const uint8_t* row = q.tok.data + ix * ts;
    if constexpr (kRowsViaBuffer<kType>) {
      const bool streamed = stream && aligned;
      for (int64_t k = 0; k < nblocks; ++k) {
        Blk::dequant(row + k * Blk::kBytes, [&](int j, float v) { y[j] = v; });
        Out* __restrict ok = o + k * kN;
        const Pos* __restrict pk = p == nullptr ? nullptr : p + k * kN;
        if (pk == nullptr) {
          emit<Out, kN>(ok, y, streamed);
        } else if (streamed) {
          for (int j = 0; j < kN; ++j) y[j] += fp::to_f32(pk[j]);
          emit<Out, kN>(ok, y, true);
        } else {  // stored as summed: a third pass over y (add, then store) was slower at decode
          for (int j = 0; j < kN; ++j) ok[j] = to_out<Out>(y[j] + fp::to_f32(pk[j]));
        }
      }
    } else if (stream && aligned) {
      // The position element added as each value comes (not in a second pass
      // over the block): the Llama-2-7B shape's Q8_0 forward on one thread
      // took 3.92 ms this way against 5.00 ms (f32: 4.47 ms; 2-vCPU Zen 4,
      // medians of 9 interleaved rounds).
      for (int64_t k = 0; k < nblocks; ++k) {
        const Pos* __restrict pk = p == nullptr ? nullptr : p + k * kN;
        if (pk != nullptr) {
          Blk::dequant(row + k * Blk::kBytes, [&](int j, float v) { y[j] = v + fp::to_f32(pk[j]); });
        } else {
          Blk::dequant(row + k * Blk::kBytes, [&](int j, float v) { y[j] = v; });
        }
        emit<Out, kN>(o + k * kN, y, true);
      }
    } else if (p != nullptr) {
      for (int64_t k = 0; k < nblocks; ++k) {
        Out* __restrict ok = o + k * kN;
        const Pos* __restrict pk = p + k * kN;
        Blk::dequant(row + k * Blk::kBytes, [&](int j, float v) { ok[j] = to_out<Out>(v + fp::to_f32(pk[j])); });
      }
    } else {
      for (int64_t k = 0; k < nblocks; ++k) {
        Out* __restrict ok = o + k * kN;
        Blk::dequant(row + k * Blk::kBytes, [&](int j, float v) { ok[j] = to_out<Out>(v); });
      }
    }
  }
#ifdef TOKPOS_QUANT_STREAM
  if (stream) _mm_sfence();
#endif
}

template <GgmlType kType, typename Pos>
__attribute__((always_inline)) inline void rows_out(const QuantGather& q, int64_t n0, int64_t n1, bool stream) {
  switch (q.g.out.type) {
    case DType::kBF16: return rows<kType, Pos, bf16_t>(q, n0, n1, stream);
    case DType::kF16: return rows<kType, Pos, f16_t>(q, n0, n1, stream);
    default: return rows<kType, Pos, float>(q, n0, n1, stream);
  }
}

template <GgmlType kType>
__attribute__((always_inline)) inline void rows_pos(const QuantGather& q, int64_t n0, int64_t n1, bool stream) {
  switch (q.g.pos.type) {
    case DType::kBF16: return rows_out<kType, bf16_t>(q, n0, n1, stream);
    case DType::kF16: return rows_out<kType, f16_t>(q, n0, n1, stream);
    default: return rows_out<kType, float>(q, n0, n1, stream);
  }
}

// One dispatch point per ISA, as gather.cc's gather_range: flatten inlines
// every block loop into each clone.
TOKPOS_KERNEL_CLONES __attribute__((flatten)) void quant_range(const QuantGather& q, int64_t n0, int64_t n1,
                                                               bool stream) {
  switch (static_cast<GgmlType>(q.tok.type)) {
    case GgmlType::kQ8_0: return rows_pos<GgmlType::kQ8_0>(q, n0, n1, stream);
    case GgmlType::kQ4_0: return rows_pos<GgmlType::kQ4_0>(q, n0, n1, stream);
    case GgmlType::kQ4_1: return rows_pos<GgmlType::kQ4_1>(q, n0, n1, stream);
    case GgmlType::kQ5_0: return rows_pos<GgmlType::kQ5_0>(q, n0, n1, stream);
    case GgmlType::kQ5_1: return rows_pos<GgmlType::kQ5_1>(q, n0, n1, stream);
    case GgmlType::kQ2_K: return rows_pos<GgmlType::kQ2_K>(q, n0, n1, stream);
    case GgmlType::kQ3_K: return rows_pos<GgmlType::kQ3_K>(q, n0, n1, stream);
    case GgmlType::kQ4_K: return rows_pos<GgmlType::kQ4_K>(q, n0, n1, stream);
    case GgmlType::kQ5_K: return rows_pos<GgmlType::kQ5_K>(q, n0, n1, stream);
    case GgmlType::kQ6_K: return rows_pos<GgmlType::kQ6_K>(q, n0, n1, stream);
    case GgmlType::kQ8_K: return rows_pos<GgmlType::kQ8_K>(q, n0, n1, stream);
    default: return;  // the ops layer admits only the types above
  }
}

}  // namespace

void compose_quant(const QuantGather& q, const Exec& ex) {
  const Gather& g = q.g;
  const int64_t N = g.B * g.T;
  const auto out_bytes = static_cast<int64_t>(N * g.D * static_cast<int64_t>(dtype_size(g.out.type)));
  const bool stream = N > kDecodeTokens && out_bytes >= ex.stream_min_bytes;
  over_token_ranges(ex, N, N * g.D, [&](int64_t n0, int64_t n1) { quant_range(q, n0, n1, stream); });
}

}  // namespace tokpos::kernels::cpu
