// ggml's block types for the benchmarks: the block structs (ggml-common.h),
// dequantize_row_* (ggml-quants.c) written out as a user copies them, random
// tables with finite scales, and the plain dequantize-then-add forward that
// tokpos's quantized forward is timed against. Shared by quant_bench.cc and
// quick.cc; compiled in each with -O3 -march=native, OpenMP and
// -ffp-contract=off (tokpos_flags), so q*d + m rounds as ggml's scalar loops.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tokpos/ggml_type.h"

namespace tokpos::bench {

// ---------------------------------------------------------------------------
// ggml's block structs (ggml-common.h) and dequantize_row_* (ggml-quants.c),
// written out as a user copies them: one function per type over a row of k
// elements. ggml_half is the raw fp16 bits.

inline float fp16_to_fp32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else {
    const float f = static_cast<float>(mant) * 0x1p-24f;  // exact: a subnormal half is mant * 2^-24
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

inline float bf16_to_fp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline constexpr int QK = 32, QK_K = 256;

struct block_q8_0 {
  uint16_t d;
  int8_t qs[QK];
};
struct block_q4_0 {
  uint16_t d;
  uint8_t qs[QK / 2];
};
struct block_q4_1 {
  uint16_t d, m;
  uint8_t qs[QK / 2];
};
struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[QK / 2];
};
struct block_q5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[QK / 2];
};
struct block_q2_K {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  uint16_t d, dmin;
};
struct block_q3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct block_q4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[QK_K / 2];
};
struct block_q5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
struct block_q6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
struct block_q8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};
static_assert(sizeof(block_q8_0) == 34 && sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24 && sizeof(block_q2_K) == 84);
static_assert(sizeof(block_q3_K) == 110 && sizeof(block_q4_K) == 144 && sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292);

inline void dequantize_row_q8_0(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q8_0*>(vx);
  for (int64_t i = 0; i < k / QK; i++) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK; ++j) y[i * QK + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

inline void dequantize_row_q4_0(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q4_0*>(vx);
  for (int64_t i = 0; i < k / QK; i++) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[i * QK + j + 0] = static_cast<float>(x0) * d;
      y[i * QK + j + QK / 2] = static_cast<float>(x1) * d;
    }
  }
}

inline void dequantize_row_q4_1(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q4_1*>(vx);
  for (int64_t i = 0; i < k / QK; i++) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < QK / 2; ++j) {
      const int x0 = x[i].qs[j] & 0x0F;
      const int x1 = x[i].qs[j] >> 4;
      y[i * QK + j + 0] = static_cast<float>(x0) * d + m;
      y[i * QK + j + QK / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

inline void dequantize_row_q5_0(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q5_0*>(vx);
  for (int64_t i = 0; i < k / QK; i++) {
    const float d = fp16_to_fp32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < QK / 2; ++j) {
      const auto xh_0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const auto xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh_0) - 16;
      const int32_t x1 = ((x[i].qs[j] >> 4) | xh_1) - 16;
      y[i * QK + j + 0] = static_cast<float>(x0) * d;
      y[i * QK + j + QK / 2] = static_cast<float>(x1) * d;
    }
  }
}

inline void dequantize_row_q5_1(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q5_1*>(vx);
  for (int64_t i = 0; i < k / QK; i++) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < QK / 2; ++j) {
      const auto xh_0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const auto xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int x0 = (x[i].qs[j] & 0x0F) | xh_0;
      const int x1 = (x[i].qs[j] >> 4) | xh_1;
      y[i * QK + j + 0] = static_cast<float>(x0) * d + m;
      y[i * QK + j + QK / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

inline void dequantize_row_q2_K(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q2_K*>(vx);
  for (int64_t i = 0; i < k / QK_K; i++) {
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int n = 0; n < QK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = x[i].scales[is++];
        float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>(static_cast<int8_t>((q[l] >> shift) & 3)) - ml;
        sc = x[i].scales[is++];
        dl = d * static_cast<float>(sc & 0xF);
        ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>(static_cast<int8_t>((q[l + 16] >> shift) & 3)) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

inline void dequantize_row_q3_K(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q3_K*>(vx);
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  const auto* scales = reinterpret_cast<const int8_t*>(aux);
  for (int64_t i = 0; i < k / QK_K; i++) {
    const float d_all = fp16_to_fp32(x[i].d);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    std::memcpy(aux, x[i].scales, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    int is = 0;
    for (int n = 0; n < QK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl *
                 static_cast<float>(static_cast<int8_t>((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
        dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>(static_cast<int8_t>((q[l + 16] >> shift) & 3) -
                                         ((hm[l + 16] & m) ? 0 : 4));
        shift += 2;
        m = static_cast<uint8_t>(m << 1);
      }
      q += 32;
    }
  }
}

inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

inline void dequantize_row_q4_K(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q4_K*>(vx);
  for (int64_t i = 0; i < k / QK_K; i++) {
    const uint8_t* q = x[i].qs;
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < QK_K; j += 64) {
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

inline void dequantize_row_q5_K(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q5_K*>(vx);
  for (int64_t i = 0; i < k / QK_K; i++) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

inline void dequantize_row_q6_K(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q6_K*>(vx);
  for (int64_t i = 0; i < k / QK_K; i++) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < QK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

inline void dequantize_row_q8_K(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q8_K*>(vx);
  for (int64_t i = 0; i < k / QK_K; i++)
    for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
}

inline void dequantize_row_f16(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const uint16_t*>(vx);
  for (int64_t i = 0; i < k; i++) y[i] = fp16_to_fp32(x[i]);
}

inline void dequantize_row_bf16(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const uint16_t*>(vx);
  for (int64_t i = 0; i < k; i++) y[i] = bf16_to_fp32(x[i]);
}

using DequantizeRow = void (*)(const void*, float*, int64_t);

// The benchmarked types, and where each block's scales sit (fp16 fields,
// or Q8_K's float d), so the random blocks can be given finite ones.
struct TypeCase {
  const char* name;
  DequantizeRow dequantize;
  int scale_offsets[2];  // -1: none
};
inline const TypeCase kCases[] = {
    {"q8_0", dequantize_row_q8_0, {0, -1}},   {"q4_0", dequantize_row_q4_0, {0, -1}},
    {"q4_1", dequantize_row_q4_1, {0, 2}},    {"q5_0", dequantize_row_q5_0, {0, -1}},
    {"q5_1", dequantize_row_q5_1, {0, 2}},    {"q2_K", dequantize_row_q2_K, {80, 82}},
    {"q3_K", dequantize_row_q3_K, {108, -1}}, {"q4_K", dequantize_row_q4_K, {0, 2}},
    {"q5_K", dequantize_row_q5_K, {0, 2}},    {"q6_K", dequantize_row_q6_K, {208, -1}},
    {"q8_K", dequantize_row_q8_K, {0, -1}},   {"f16", dequantize_row_f16, {-1, -1}},
    {"bf16", dequantize_row_bf16, {-1, -1}},
};

// ---------------------------------------------------------------------------
// Random data (splitmix64: fast enough to fill half a gigabyte).

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f * 2.0f - 1.0f; }  // [-1, 1)
};

// A finite fp16 value from random bits: an all-ones exponent (Inf, NaN) is
// moved to a random finite one.
inline uint16_t finite_half(uint16_t h) {
  if (((h >> 10) & 0x1F) == 0x1F) h = static_cast<uint16_t>((h & 0x83FF) | ((h % 31) << 10));
  return h;
}
inline uint16_t finite_bf16(uint16_t h) {
  if (((h >> 7) & 0xFF) == 0xFF) h = static_cast<uint16_t>((h & 0x807F) | ((h % 255) << 7));
  return h;
}

// V rows of random blocks of the type, every scale finite (f16 and bf16:
// every element finite; q8_K: d uniform in [-1, 1)).
inline std::vector<uint8_t> random_table(const TypeCase& c, const tokpos::GgmlTypeTraits& tr, int64_t V,
                                         size_t row_bytes, uint64_t seed) {
  std::vector<uint8_t> b(row_bytes * static_cast<size_t>(V));
  Rng rng{seed};
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(b.data() + i, &r, 8);
  }
  for (; i < b.size(); ++i) b[i] = static_cast<uint8_t>(rng.next());
  auto fix16 = [&](uint8_t* p, uint16_t (*finite)(uint16_t)) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    h = finite(h);
    std::memcpy(p, &h, 2);
  };
  const std::string name = c.name;
  if (name == "f16" || name == "bf16") {
    for (size_t k = 0; k < b.size(); k += 2) fix16(b.data() + k, name == "f16" ? finite_half : finite_bf16);
    return b;
  }
  for (size_t blk = 0; blk < b.size() / tr.type_size; ++blk) {
    uint8_t* p = b.data() + blk * tr.type_size;
    if (name == "q8_K") {
      const float d = rng.uniform();
      std::memcpy(p, &d, 4);
      continue;
    }
    for (int off : c.scale_offsets)
      if (off >= 0) fix16(p + off, finite_half);
  }
  return b;
}

// ---------------------------------------------------------------------------
// The lines beside tokpos.

// out (N, D) = dequantize(row ids[n]) + pos[start + n % T], or the rows alone
// when pos is null: the plain loop.
inline void plain_forward(float* out, const int64_t* ids, int64_t N, int64_t T, const uint8_t* blocks,
                          size_t row_bytes, DequantizeRow dequantize, const float* pos, int64_t start,
                          int64_t D, int threads) {
#pragma omp parallel num_threads(threads)
  {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* x = blocks + static_cast<size_t>(ids[n]) * row_bytes;
      float* o = out + n * D;
      if (pos == nullptr) {
        dequantize(x, o, D);
        continue;
      }
      dequantize(x, row.data(), D);
      const float* p = pos + (start + n % T) * D;
      for (int64_t i = 0; i < D; ++i) o[i] = row[static_cast<size_t>(i)] + p[i];
    }
  }
}

}  // namespace tokpos::bench
