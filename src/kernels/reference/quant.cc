// The reference dequantizer: element d of a quantized row, one element at a
// time, straight from ggml's block layouts (ggml/src/ggml-common.h, the
// block_* structs; QK_K = 256) and the arithmetic of ggml-quants.c's
// dequantize_row_* (which operations, in which order, on which types). The
// cpu back end (cpu/quant.cc) follows ggml's loops a block at a time; this
// file says, for each element, which bits it reads and what it computes, so
// the two are written independently and checked against each other.
//
// Every block starts at row + (d / block_size) * block_bytes; j = d % block_size.
// Scales are IEEE binary16 widened exactly (GGML_FP16_TO_FP32), except
// Q8_K's, a float32. An integer quant q enters float arithmetic as float(q),
// which is exact (|q| < 2^24).
#include <cstring>

#include "common/convert.h"
#include "kernels/kernels.h"
#include "tokpos/ggml_type.h"

namespace tokpos::kernels {
namespace {

float half_at(const uint8_t* p) {
  fp::f16_t h{};
  std::memcpy(&h.bits, p, 2);  // little-endian, as GGUF stores it (and this library's targets are)
  return fp::to_f32(h);
}

// get_scale_min_k4 of ggml-quants.c: the 6-bit scale and min of sub-block
// `is` (0..7) of a Q4_K or Q5_K block's 12 scale bytes.
void scale_min_k4(int is, const uint8_t* q, int& sc, int& m) {
  if (is < 4) {
    sc = q[is] & 63;
    m = q[is + 4] & 63;
  } else {
    sc = (q[is + 4] & 0xF) | ((q[is - 4] >> 6) << 4);
    m = (q[is + 4] >> 4) | ((q[is] >> 6) << 4);
  }
}

// Q3_K's 6-bit scale of sub-block is (0..15), unsigned (0..63): low four bits
// in bytes 0..7 (low nibble for 0..7, high nibble for 8..15), high two bits
// in bytes 8..11, two per sub-block.
int scale_q3_k(int is, const uint8_t* s) {
  const int lo = is < 8 ? (s[is] & 0xF) : (s[is - 8] >> 4);
  const int hi = (s[8 + is % 4] >> (2 * (is / 4))) & 3;
  return lo | (hi << 4);
}

}  // namespace

bool is_quant_block_type(int type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ8_K: return true;
    default: return false;
  }
}

float dequant_element_ref(int type, const uint8_t* row, int64_t d) {
  const GgmlTypeTraits& tr = *ggml_type_traits(type);
  const uint8_t* b = row + (d / tr.block_size) * static_cast<int64_t>(tr.type_size);
  const int j = static_cast<int>(d % tr.block_size);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kQ8_0: {  // {half d; int8 qs[32]}: qs[j] * d
      const auto q = static_cast<int8_t>(b[2 + j]);
      return static_cast<float>(q) * half_at(b);
    }
    case GgmlType::kQ4_0: {  // {half d; uint8 qs[16]}: element j < 16 the low nibble of qs[j], else the high one of qs[j-16]
      const uint8_t* qs = b + 2;
      const int x = (j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4)) - 8;
      return static_cast<float>(x) * half_at(b);
    }
    case GgmlType::kQ4_1: {  // {half d, m; uint8 qs[16]}: x * d + m
      const uint8_t* qs = b + 4;
      const int x = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
      return static_cast<float>(x) * half_at(b) + half_at(b + 2);
    }
    case GgmlType::kQ5_0:    // {half d; uint8 qh[4]; uint8 qs[16]}: bit j of qh is element j's fifth bit
    case GgmlType::kQ5_1: {  // {half d, m; uint8 qh[4]; uint8 qs[16]}
      const bool one = static_cast<GgmlType>(type) == GgmlType::kQ5_1;
      const uint8_t* qh = b + (one ? 4 : 2);
      const uint8_t* qs = qh + 4;
      uint32_t h = 0;
      std::memcpy(&h, qh, 4);
      const int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
      const int x = (lo | static_cast<int>(((h >> j) & 1u) << 4)) - (one ? 0 : 16);
      if (one) return static_cast<float>(x) * half_at(b) + half_at(b + 2);
      return static_cast<float>(x) * half_at(b);
    }
    case GgmlType::kQ2_K: {  // {uint8 scales[16]; uint8 qs[64]; half d, dmin}
      // Element j: half n = j / 128 holds qs[32n .. 32n + 32), four 2-bit
      // planes of it (plane j % 128 / 32); sub-block j / 16 has scale byte
      // scales[j / 16]: low nibble times d, high nibble times dmin.
      const uint8_t* qs = b + 16;
      const int n = j / 128, plane = j % 128 / 32, l = j % 32;
      const int q = (qs[32 * n + l] >> (2 * plane)) & 3;
      const uint8_t sc = b[j / 16];
      const float dl = half_at(b + 80) * static_cast<float>(sc & 0xF);
      const float ml = half_at(b + 82) * static_cast<float>(sc >> 4);
      return dl * static_cast<float>(q) - ml;
    }
    case GgmlType::kQ3_K: {  // {uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; half d}
      // As Q2_K for the low two bits; the third is bit 4n + plane of
      // hmask[j % 32], and a clear bit subtracts 4. Scales are 6-bit, minus 32.
      const uint8_t* hmask = b;
      const uint8_t* qs = b + 32;
      const int n = j / 128, plane = j % 128 / 32, l = j % 32;
      const int low = (qs[32 * n + l] >> (2 * plane)) & 3;
      const bool high = (hmask[l] >> (4 * n + plane)) & 1;
      const int q = low - (high ? 0 : 4);
      const float dl = half_at(b + 108) * static_cast<float>(scale_q3_k(j / 16, b + 96) - 32);
      return dl * static_cast<float>(q);
    }
    case GgmlType::kQ4_K:    // {half d, dmin; uint8 scales[12]; uint8 qs[128]}
    case GgmlType::kQ5_K: {  // {half d, dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}
      // Chunk c = j / 64 holds qs[32c .. 32c + 32): its first 32 elements the
      // low nibbles, the next 32 the high ones; sub-block is = j / 32. Q5_K's
      // fifth bit of element j is bit `is` of qh[j % 32].
      const bool five = static_cast<GgmlType>(type) == GgmlType::kQ5_K;
      const uint8_t* qs = b + (five ? 48 : 16);
      const int c = j / 64, is = j / 32, l = j % 32;
      int q = (j % 64 < 32) ? (qs[32 * c + l] & 0xF) : (qs[32 * c + l] >> 4);
      if (five && ((b[16 + l] >> is) & 1)) q += 16;
      int sc = 0, m = 0;
      scale_min_k4(is, b + 4, sc, m);
      const float d1 = half_at(b) * static_cast<float>(sc);
      const float m1 = half_at(b + 2) * static_cast<float>(m);
      return d1 * static_cast<float>(q) - m1;
    }
    case GgmlType::kQ6_K: {  // {uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d}
      // Half n = j / 128 holds ql[64n .. 64n + 64) and qh[32n .. 32n + 32);
      // plane g = j % 128 / 32: low nibbles of ql[64n + l] (g 0) and
      // ql[64n + 32 + l] (g 1), their high nibbles (g 2, 3); the top two bits
      // are bits 2g, 2g + 1 of qh[32n + l]; minus 32. (d * scale) * q.
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int n = j / 128, g = j % 128 / 32, l = j % 32;
      const uint8_t byte = ql[64 * n + (g & 1) * 32 + l];
      const int lo = g < 2 ? (byte & 0xF) : (byte >> 4);
      const int hi = (qh[32 * n + l] >> (2 * g)) & 3;
      const int q = (lo | (hi << 4)) - 32;
      const auto sc = static_cast<int8_t>(b[192 + j / 16]);
      return half_at(b + 208) * static_cast<float>(sc) * static_cast<float>(q);
    }
    case GgmlType::kQ8_K: {  // {float d; int8 qs[256]; int16 bsums[16]}: d * qs[j]
      float dd = 0;
      std::memcpy(&dd, b, 4);
      return dd * static_cast<float>(static_cast<int8_t>(b[4 + j]));
    }
    default: return 0.0f;  // the ops layer admits only the types above
  }
}

namespace {

float load_pos(const Rows& r, int64_t row, int64_t d) {
  const int64_t k = row * r.stride + d;
  switch (r.type) {
    case DType::kBF16: return fp::to_f32(static_cast<const fp::bf16_t*>(r.data)[k]);
    case DType::kF16: return fp::to_f32(static_cast<const fp::f16_t*>(r.data)[k]);
    default: return static_cast<const float*>(r.data)[k];
  }
}

void store_out(const OutRows& o, int64_t b, int64_t t, int64_t d, float v) {
  const int64_t k = b * o.sb + t * o.st + d;
  switch (o.type) {
    case DType::kBF16: static_cast<fp::bf16_t*>(o.data)[k] = fp::to_bf16(v); break;
    case DType::kF16: static_cast<fp::f16_t*>(o.data)[k] = fp::to_f16(v); break;
    default: static_cast<float*>(o.data)[k] = v; break;
  }
}

}  // namespace

// The definition in kernels.h (QuantGather), element by element.
void compose_quant_ref(const QuantGather& q, const Exec&) {
  const Gather& g = q.g;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t t = 0; t < g.T; ++t) {
      const int64_t id = g.ids.at(b, t), ix = (id >= 0 && id < g.V) ? id : g.unk_id;
      const int64_t p = g.pos_ids.data ? g.pos_ids.within(b, t, g.L, 0) : g.start + t;
      const bool outside = g.zero_outside && ix != id;
      const uint8_t* row = q.tok.data + ix * q.tok.stride;
      for (int64_t d = 0; d < g.D; ++d) {
        float v;
        if (outside) {
          v = g.pos.data ? load_pos(g.pos, p, d) : 0.0f;
        } else {
          v = dequant_element_ref(q.tok.type, row, d);
          if (g.pos.data) v = v + load_pos(g.pos, p, d);
        }
        store_out(g.out, b, t, d, v);
      }
    }
}

}  // namespace tokpos::kernels
