// Private to the cpu back end: ggml's dequantize_row_* one block at a time,
// as ggml-quants.c writes each loop (the same operations in the same order,
// so the same bits), inlined into the forward (quant.cc) so each clone
// vectorises them for its ISA. Each element's value v goes to put(j, v), j
// its index in the block [0, kSize): the forward adds the position element
// and stores it in the same vectorised loop, so no block passes through a
// buffer in memory (a buffer written with one vector width and read back with
// another stalls on store forwarding).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/convert.h"
#include "tokpos/ggml_type.h"

namespace tokpos::kernels::cpu::quant {

#define TOKPOS_QUANT_INLINE __attribute__((always_inline)) inline

TOKPOS_QUANT_INLINE float half_at(const uint8_t* p) {
  fp::f16_t h{};
  std::memcpy(&h.bits, p, 2);
  return fp::to_f32(h);
}

template <GgmlType kType>
struct Block;

// block_q8_0 {ggml_half d; int8_t qs[32];}
template <>
struct Block<GgmlType::kQ8_0> {
  static constexpr int kSize = 32, kBytes = 34;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    const float d = half_at(x);
    const auto* qs = reinterpret_cast<const int8_t*>(x + 2);
    for (int j = 0; j < 32; ++j) put(j, static_cast<float>(qs[j]) * d);
  }
};

// block_q4_0 {ggml_half d; uint8_t qs[16];}
template <>
struct Block<GgmlType::kQ4_0> {
  static constexpr int kSize = 32, kBytes = 18;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    const float d = half_at(x);
    const uint8_t* qs = x + 2;
    for (int j = 0; j < 16; ++j) {
      const int x0 = (qs[j] & 0x0F) - 8;
      const int x1 = (qs[j] >> 4) - 8;
      put(j, static_cast<float>(x0) * d);
      put(j + 16, static_cast<float>(x1) * d);
    }
  }
};

// block_q4_1 {ggml_half d, m; uint8_t qs[16];}
template <>
struct Block<GgmlType::kQ4_1> {
  static constexpr int kSize = 32, kBytes = 20;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    const float d = half_at(x), m = half_at(x + 2);
    const uint8_t* qs = x + 4;
    for (int j = 0; j < 16; ++j) {
      const int x0 = qs[j] & 0x0F;
      const int x1 = qs[j] >> 4;
      put(j, static_cast<float>(x0) * d + m);
      put(j + 16, static_cast<float>(x1) * d + m);
    }
  }
};

// block_q5_0 {ggml_half d; uint8_t qh[4]; uint8_t qs[16];}
template <>
struct Block<GgmlType::kQ5_0> {
  static constexpr int kSize = 32, kBytes = 22;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    const float d = half_at(x);
    uint32_t qh;
    std::memcpy(&qh, x + 2, 4);
    const uint8_t* qs = x + 6;
    for (int j = 0; j < 16; ++j) {
      const auto xh_0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const auto xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int32_t x0 = ((qs[j] & 0x0F) | xh_0) - 16;
      const int32_t x1 = ((qs[j] >> 4) | xh_1) - 16;
      put(j, static_cast<float>(x0) * d);
      put(j + 16, static_cast<float>(x1) * d);
    }
  }
};

// block_q5_1 {ggml_half d, m; uint8_t qh[4]; uint8_t qs[16];}
template <>
struct Block<GgmlType::kQ5_1> {
  static constexpr int kSize = 32, kBytes = 24;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    const float d = half_at(x), m = half_at(x + 2);
    uint32_t qh;
    std::memcpy(&qh, x + 4, 4);
    const uint8_t* qs = x + 8;
    for (int j = 0; j < 16; ++j) {
      const auto xh_0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const auto xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int x0 = (qs[j] & 0x0F) | xh_0;
      const int x1 = (qs[j] >> 4) | xh_1;
      put(j, static_cast<float>(x0) * d + m);
      put(j + 16, static_cast<float>(x1) * d + m);
    }
  }
};

// block_q2_K {uint8_t scales[16]; uint8_t qs[64]; ggml_half d, dmin;}
template <>
struct Block<GgmlType::kQ2_K> {
  static constexpr int kSize = 256, kBytes = 84;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    int i = 0;  // the next element's index
    const float d = half_at(x + 80), min = half_at(x + 82);
    const uint8_t* scales = x;
    const uint8_t* q = x + 16;
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = scales[is++];
        float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l)
          put(i + l, dl * static_cast<float>(static_cast<int8_t>((q[l] >> shift) & 3)) - ml);
        i += 16;
        sc = scales[is++];
        dl = d * static_cast<float>(sc & 0xF);
        ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l)
          put(i + l, dl * static_cast<float>(static_cast<int8_t>((q[l + 16] >> shift) & 3)) - ml);
        i += 16;
        shift += 2;
      }
      q += 32;
    }
  }
};

// block_q3_K {uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; ggml_half d;}
template <>
struct Block<GgmlType::kQ3_K> {
  static constexpr int kSize = 256, kBytes = 110;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    int i = 0;  // the next element's index
    constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    const float d_all = half_at(x + 108);
    uint32_t aux[4];
    std::memcpy(aux, x + 96, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    int8_t scales[16];
    std::memcpy(scales, aux, 16);
    const uint8_t* q = x + 32;
    const uint8_t* hm = x;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          put(i + l, dl * static_cast<float>(static_cast<int8_t>((q[l + 0] >> shift) & 3) -
                                             ((hm[l + 0] & m) ? 0 : 4)));
        i += 16;
        dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          put(i + l, dl * static_cast<float>(static_cast<int8_t>((q[l + 16] >> shift) & 3) -
                                             ((hm[l + 16] & m) ? 0 : 4)));
        i += 16;
        shift += 2;
        m = static_cast<uint8_t>(m << 1);
      }
      q += 32;
    }
  }
};

// ggml-quants.c's get_scale_min_k4.
TOKPOS_QUANT_INLINE void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// block_q4_K {ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128];}
template <>
struct Block<GgmlType::kQ4_K> {
  static constexpr int kSize = 256, kBytes = 144;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    int i = 0;  // the next element's index
    const float d = half_at(x), min = half_at(x + 2);
    const uint8_t* scales = x + 4;
    const uint8_t* q = x + 16;
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < 256; j += 64) {
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) put(i + l, d1 * static_cast<float>(q[l] & 0xF) - m1);
      i += 32;
      for (int l = 0; l < 32; ++l) put(i + l, d2 * static_cast<float>(q[l] >> 4) - m2);
      i += 32;
      q += 32;
      is += 2;
    }
  }
};

// block_q5_K {ggml_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128];}
template <>
struct Block<GgmlType::kQ5_K> {
  static constexpr int kSize = 256, kBytes = 176;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    int i = 0;  // the next element's index
    const float d = half_at(x), min = half_at(x + 2);
    const uint8_t* scales = x + 4;
    const uint8_t* qh = x + 16;
    const uint8_t* ql = x + 48;
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l)
        put(i + l, d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1);
      i += 32;
      for (int l = 0; l < 32; ++l)
        put(i + l, d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2);
      i += 32;
      ql += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
};

// block_q6_K {uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d;}
// ggml's loop over l < 32 takes scale is = l / 16; here each half of it is a
// loop of its own with d * sc hoisted out (the same (d * sc) * q, so the same
// bits), which GCC vectorises: the l / 16 form it leaves scalar.
template <>
struct Block<GgmlType::kQ6_K> {
  static constexpr int kSize = 256, kBytes = 210;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    const float d = half_at(x + 208);
    const uint8_t* ql = x;
    const uint8_t* qh = x + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(x + 192);
    for (int n = 0; n < 256; n += 128) {
      for (int is = 0; is < 2; ++is) {
        const float d1 = d * static_cast<float>(sc[is + 0]), d2 = d * static_cast<float>(sc[is + 2]);
        const float d3 = d * static_cast<float>(sc[is + 4]), d4 = d * static_cast<float>(sc[is + 6]);
        for (int l = 16 * is; l < 16 * is + 16; ++l) {
          const int q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          put(n + l + 0, d1 * static_cast<float>(q1));
          put(n + l + 32, d2 * static_cast<float>(q2));
          put(n + l + 64, d3 * static_cast<float>(q3));
          put(n + l + 96, d4 * static_cast<float>(q4));
        }
      }
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
};

// block_q8_K {float d; int8_t qs[256]; int16_t bsums[16];}
template <>
struct Block<GgmlType::kQ8_K> {
  static constexpr int kSize = 256, kBytes = 292;
  template <typename Put>
  static TOKPOS_QUANT_INLINE void dequant(const uint8_t* x, Put&& put) {
    float d;
    std::memcpy(&d, x, 4);
    const auto* qs = reinterpret_cast<const int8_t*>(x + 4);
    for (int j = 0; j < 256; ++j) put(j, d * static_cast<float>(qs[j]));
  }
};

}  // namespace tokpos::kernels::cpu::quant
