// The forward from a token table in ggml's block types (as llama.cpp's GGUF
// files hold token_embd.weight), side by side with the lines it should sit
// at, at the Llama-2-7B table (V 32000, D 4096):
//
//   quant   tokpos::ops::compose_forward over QuantizedTable{blocks, type, D}:
//           each row dequantized and the position row added in one pass;
//   f32     the same forward over a float32 table of the same shape;
//   copy    a memcpy of the output's bytes from a same-size buffer, each
//           thread one contiguous range;
//   plain   dequantize-then-add as a user writes it: for each (b, t), the row
//           dequantized into a float buffer by ggml's dequantize_row_* loops
//           (written below from ggml-common.h's block structs), then the
//           position row added; OpenMP over rows.
//
// ggml's own get_rows + add would be the fourth line; the program looks for
// libggml and says why it is absent (see ggml_note). The plain loop's output
// is compared with tokpos's bit for bit once per type, shape and position
// case: a mismatch is printed and makes the exit status 1 (the smoke test in
// tests/CMakeLists.txt runs `--quick --shape tiny` for that check only; no
// time is judged anywhere).
//
// Shapes: prefill (B 4, T 512, positions 0..511) and decode (B 16, T 1, at
// position 1000), each with a float32 position table (L 4096, D 4096: the
// learned-table case) and without one (Llama: RoPE, token rows only);
// threads 1 and 2. In every repetition the four lines run once each, in an
// order that rotates, and each call reads its own fresh random ids, so no
// line finds rows another has just pulled into the cache, and a slow moment
// on a shared machine hits all four alike. Medians (and 90th percentiles of
// tokpos and the plain loop) after one warm-up call.
//
// Built with -O3 -march=native and OpenMP, as the peers in bench/peers.cc;
// -ffp-contract=off (tokpos_flags) keeps the plain loop's q*d + m from
// becoming a fused multiply-add, as ggml's scalar loops round.
//
//   build/bin/tokpos_quant_bench              (half a minute idle, two on a loaded machine)
//   build/bin/tokpos_quant_bench --quick --shape tiny
#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <immintrin.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tokpos/ggml_type.h"
#include "dl_tensor.h"
#include "tokpos/ops.h"
#include "tokpos/threading.h"

namespace {

// ---------------------------------------------------------------------------
// ggml's block structs (ggml-common.h) and dequantize_row_* (ggml-quants.c),
// written out as a user copies them: one function per type over a row of k
// elements. ggml_half is the raw fp16 bits.

float fp16_to_fp32(uint16_t h) {
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

float bf16_to_fp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

constexpr int QK = 32, QK_K = 256;

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

void dequantize_row_q8_0(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q8_0*>(vx);
  for (int64_t i = 0; i < k / QK; i++) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK; ++j) y[i * QK + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_row_q4_0(const void* vx, float* y, int64_t k) {
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

void dequantize_row_q4_1(const void* vx, float* y, int64_t k) {
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

void dequantize_row_q5_0(const void* vx, float* y, int64_t k) {
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

void dequantize_row_q5_1(const void* vx, float* y, int64_t k) {
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

void dequantize_row_q2_K(const void* vx, float* y, int64_t k) {
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

void dequantize_row_q3_K(const void* vx, float* y, int64_t k) {
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

void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

void dequantize_row_q4_K(const void* vx, float* y, int64_t k) {
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

void dequantize_row_q5_K(const void* vx, float* y, int64_t k) {
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

void dequantize_row_q6_K(const void* vx, float* y, int64_t k) {
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

void dequantize_row_q8_K(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const block_q8_K*>(vx);
  for (int64_t i = 0; i < k / QK_K; i++)
    for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
}

void dequantize_row_f16(const void* vx, float* y, int64_t k) {
  const auto* x = static_cast<const uint16_t*>(vx);
  for (int64_t i = 0; i < k; i++) y[i] = fp16_to_fp32(x[i]);
}

void dequantize_row_bf16(const void* vx, float* y, int64_t k) {
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
const TypeCase kCases[] = {
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
uint16_t finite_half(uint16_t h) {
  if (((h >> 10) & 0x1F) == 0x1F) h = static_cast<uint16_t>((h & 0x83FF) | ((h % 31) << 10));
  return h;
}
uint16_t finite_bf16(uint16_t h) {
  if (((h >> 7) & 0xFF) == 0xFF) h = static_cast<uint16_t>((h & 0x807F) | ((h % 255) << 7));
  return h;
}

// V rows of random blocks of the type, every scale finite (f16 and bf16:
// every element finite; q8_K: d uniform in [-1, 1)).
std::vector<uint8_t> random_table(const TypeCase& c, const tokpos::GgmlTypeTraits& tr, int64_t V,
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
void plain_forward(float* out, const int64_t* ids, int64_t N, int64_t T, const uint8_t* blocks,
                   size_t row_bytes, DequantizeRow dequantize, const float* pos, int64_t start, int64_t D,
                   int threads) {
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

void parallel_memcpy(void* dst, const void* src, size_t bytes, int threads) {
#pragma omp parallel num_threads(threads)
  {
    const auto k = static_cast<size_t>(omp_get_thread_num()),
               team = static_cast<size_t>(omp_get_num_threads());
    const size_t lo = bytes * k / team, hi = bytes * (k + 1) / team;
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  }
}

// ---------------------------------------------------------------------------
// The machine, as bench/machine.py reports it.

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string last_level_cache() {
  std::string best = "unknown";
  for (int i = 0; i < 16; ++i) {
    const std::string d = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string type = first_line((d + "type").c_str());
    if (type.empty()) continue;
    if (type != "Instruction")
      best = "L" + first_line((d + "level").c_str()) + " " + first_line((d + "size").c_str());
  }
  return best;
}

// ggml is reachable only as a shared library on the loader path; llama.cpp's
// get_rows and add are not called through it here either way.
std::string ggml_note() {
  for (const char* lib : {"libggml.so", "libggml-base.so", "libggml-cpu.so"}) {
    if (void* h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(h);
      return std::string(lib) +
             " is on the loader path, but this program does not call it: the plain loop stands in for "
             "ggml's get_rows + add";
    }
  }
  return "not found (no libggml on the loader path: Debian packages no ggml, the PyPI package "
         "llama-cpp-python, which builds it, is not installed, and building llama.cpp from source is out of "
         "scope); the plain dequantize-then-add loop stands in for ggml's get_rows + add";
}

// ---------------------------------------------------------------------------
// Timing.

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.empty() ? 0.0 : (v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]));
}

// The 90th percentile (nearest rank): the tail a slow moment leaves.
double p90_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[(v.size() * 9 + 9) / 10 - 1];
}

std::string fmt_time(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

struct Shape {
  const char* name;
  int64_t V, D, L, B, T, start;
};

struct Result {
  std::string shape;
  bool pos;
  int threads;
  std::string type;
  double wall[4];  // medians, seconds: quant, f32, copy, plain
  double p90[4];   // 90th percentiles of the same
  double cpu[4];   // the calling thread's CPU time (1 thread only: all four run on it)
  size_t out_bytes;
};

// The calling thread's CPU seconds: at 1 thread every line runs on the
// calling thread, so this leaves out the time other processes held the core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

using tokpos::bench::Dl;
using tokpos::bench::kF32;
using tokpos::bench::kI64;
using tokpos::bench::kU8;

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{
      "tokpos_quant_bench: the forward from ggml block-type token tables against the f32 forward, "
      "a copy of the output and a plain dequantize-then-add loop"};
  bool quick = false;
  std::string shape_name = "llama";
  int reps = 9;
  app.add_flag("--quick", quick, "decode only, 3 repetitions (a smoke test)");
  app.add_option("--shape", shape_name, "llama (V 32000, D 4096, L 4096) or tiny (V 512, D 512, L 64)")
      ->check(CLI::IsMember({"llama", "tiny"}));
  app.add_option("--reps", reps, "timed repetitions per prefill case after one warm-up (decode: 5x)")
      ->check(CLI::Range(1, 1000));
  std::vector<std::string> type_names;
  std::vector<std::string> known;
  for (const TypeCase& c : kCases) known.push_back(c.name);
  app.add_option("--types", type_names, "the types to time (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(known));
  CLI11_PARSE(app, argc, argv);
  auto chosen = [&](const TypeCase& c) {
    return type_names.empty() || std::find(type_names.begin(), type_names.end(), c.name) != type_names.end();
  };
  if (quick) reps = 3;

  const bool tiny = shape_name == "tiny";
  const int64_t V = tiny ? 512 : 32000, D = tiny ? 512 : 4096, L = tiny ? 64 : 4096;
  std::vector<Shape> shapes;
  if (!quick) shapes.push_back({"prefill", V, D, L, tiny ? 2 : 4, tiny ? 8 : 512, 0});
  shapes.push_back({"decode", V, D, L, tiny ? 4 : 16, 1, tiny ? 10 : 1000});
  const int thread_counts[] = {1, 2};

  std::printf("tokpos_quant_bench --shape %s%s: V %lld, D %lld, position table f32 (L %lld, D %lld)\n",
              shape_name.c_str(), quick ? " --quick" : "", static_cast<long long>(V),
              static_cast<long long>(D), static_cast<long long>(L), static_cast<long long>(D));
  std::printf("CPU: %s, %u logical CPUs, last-level cache %s; load average %s\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), last_level_cache().c_str(),
              first_line("/proc/loadavg").c_str());
  std::printf("tokpos stream threshold: %lld bytes\n", static_cast<long long>(tokpos::stream_min_bytes()));
  std::printf("ggml: %s\n\n", ggml_note().c_str());
  std::fflush(stdout);

  // The float32 token table, the position table and the buffers, once.
  Rng rng{42};
  std::vector<float> tok32(static_cast<size_t>(V * D)), pos(static_cast<size_t>(L * D));
  for (auto& x : tok32) x = rng.uniform();
  for (auto& x : pos) x = rng.uniform();
  int64_t max_n = 0;
  for (const Shape& s : shapes) max_n = std::max(max_n, s.B * s.T);
  const auto out_len = static_cast<size_t>(max_n * D);
  std::vector<float> out(out_len), out_plain(out_len), out_f32(out_len), copy_src(out_len, 1.0f),
      copy_dst(out_len);
  const Dl tok32_dl(tok32.data(), kF32, {V, D}), pos_dl(pos.data(), kF32, {L, D});

  std::vector<Result> results;
  int mismatches = 0;
  for (const TypeCase& c : kCases) {
    if (!chosen(c)) continue;
    const tokpos::GgmlTypeTraits* tr = tokpos::ggml_type_by_name(c.name);
    if (tr == nullptr) {
      std::fprintf(stderr, "ggml type %s unknown to tokpos\n", c.name);
      return 1;
    }
    const size_t row_bytes = *tokpos::ggml_row_bytes(*tr, D);
    const std::vector<uint8_t> blocks =
        random_table(c, *tr, V, row_bytes, 1000 + static_cast<uint64_t>(tr->type));
    const Dl blocks_dl(blocks.data(), kU8, {V, static_cast<int64_t>(row_bytes)});
    const tokpos::ops::QuantizedTable qt{&blocks_dl.t, static_cast<int>(tr->type), D};
    std::fprintf(stderr, "%s", c.name);
    for (const Shape& s : shapes) {
      const int64_t N = s.B * s.T;
      const size_t out_bytes = static_cast<size_t>(N * D) * sizeof(float);
      const int r_count = s.T == 1 ? 5 * reps : reps;
      // Ids: a fresh set for every call (the check's, then for each position
      // case and thread count 1 + r_count calls of each of the four lines).
      std::vector<int64_t> ids(static_cast<size_t>(N * (1 + 2 * 2 * 4 * (1 + r_count))));
      size_t set = 1;
      for (auto& id : ids) id = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(V));
      for (const bool with_pos : {true, false}) {
        const DLTensor* p_dl = with_pos ? &pos_dl.t : nullptr;
        const float* p = with_pos ? pos.data() : nullptr;
        const Dl out_dl(out.data(), kF32, {s.B, s.T, D}), out32_dl(out_f32.data(), kF32, {s.B, s.T, D});
        // The bit check: tokpos and the plain loop on the same ids.
        {
          const Dl ids_dl(ids.data(), kI64, {s.B, s.T});
          tokpos::Context ctx;
          ctx.set_num_threads(1);
          tokpos::ops::compose_forward(out_dl, ids_dl, qt, p_dl, nullptr, s.start, {}, &ctx);
          plain_forward(out_plain.data(), ids.data(), N, s.T, blocks.data(), row_bytes, c.dequantize, p,
                        s.start, D, 1);
          if (std::memcmp(out.data(), out_plain.data(), out_bytes) != 0) {
            size_t first = 0;
            while (std::memcmp(&out[first], &out_plain[first], 4) == 0) ++first;
            std::printf(
                "MISMATCH %s %s %s: tokpos and the plain loop differ first at element %zu "
                "(%.9g vs %.9g)\n",
                c.name, s.name, with_pos ? "with positions" : "no positions", first,
                static_cast<double>(out[first]), static_cast<double>(out_plain[first]));
            ++mismatches;
          }
        }
        for (const int threads : thread_counts) {
          tokpos::Context ctx;
          ctx.set_num_threads(threads);
          std::vector<double> t[4], u[4];
          auto run = [&](int line, bool timed) {
            const int64_t* id = ids.data() + static_cast<size_t>(N) * set++;
            const Dl ids_dl(id, kI64, {s.B, s.T});
            const double c0 = thread_cpu_seconds();
            const auto t0 = std::chrono::steady_clock::now();
            switch (line) {
              case 0:
                tokpos::ops::compose_forward(out_dl, ids_dl, qt, p_dl, nullptr, s.start, {}, &ctx);
                break;
              case 1:
                tokpos::ops::compose_forward(out32_dl, ids_dl, tok32_dl, p_dl, nullptr, s.start, {}, &ctx);
                break;
              case 2: parallel_memcpy(copy_dst.data(), copy_src.data(), out_bytes, threads); break;
              default:
                plain_forward(out_plain.data(), id, N, s.T, blocks.data(), row_bytes, c.dequantize, p,
                              s.start, D, threads);
            }
            const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const double dc = thread_cpu_seconds() - c0;
            if (timed) t[line].push_back(dt), u[line].push_back(dc);
          };
          for (int line = 0; line < 4; ++line) run(line, false);
          for (int r = 0; r < r_count; ++r)
            for (int k = 0; k < 4; ++k) run((r + k) % 4, true);
          Result res{s.name, with_pos, threads, c.name, {}, {}, {}, out_bytes};
          for (int k = 0; k < 4; ++k)
            res.wall[k] = median_of(t[k]), res.p90[k] = p90_of(t[k]), res.cpu[k] = median_of(u[k]);
          results.push_back(res);
        }
      }
    }
    std::fprintf(stderr, " ");
  }
  std::fprintf(stderr, "\n");

  // Per shape, position case and thread count: one table.
  for (const Shape& s : shapes)
    for (const bool with_pos : {true, false})
      for (const int threads : thread_counts) {
        std::printf("%s (B %lld, T %lld), %s, %d thread%s; medians of %d calls after a warm-up\n", s.name,
                    static_cast<long long>(s.B), static_cast<long long>(s.T),
                    with_pos ? "f32 position table added" : "no position table (token rows only)", threads,
                    threads == 1 ? "" : "s", s.T == 1 ? 5 * reps : reps);
        std::printf("  %-5s %10s %7s %10s %6s %10s %6s %10s %6s | %10s %10s %6s", "type", "tokpos", "GB/s", "f32 fwd",
                    "/f32", "copy", "/copy", "plain", "/plain", "p90 tokpos", "p90 plain", "/plain");
        if (threads == 1) std::printf(" | %10s %6s %6s %6s", "cpu tokpos", "/f32", "/copy", "/plain");
        std::printf("\n");
        for (const Result& r : results) {
          if (r.shape != s.name || r.pos != with_pos || r.threads != threads) continue;
          const double* w = r.wall;
          std::printf("  %-5s %10s %7.2f %10s %5.2fx %10s %5.2fx %10s %5.2fx", r.type.c_str(),
                      fmt_time(w[0]).c_str(), static_cast<double>(r.out_bytes) / w[0] * 1e-9,
                      fmt_time(w[1]).c_str(), w[0] / w[1], fmt_time(w[2]).c_str(), w[0] / w[2],
                      fmt_time(w[3]).c_str(), w[0] / w[3]);
          std::printf(" | %10s %10s %5.2fx", fmt_time(r.p90[0]).c_str(), fmt_time(r.p90[3]).c_str(),
                      r.p90[0] / r.p90[3]);
          if (threads == 1) {
            const double* u = r.cpu;
            std::printf(" | %10s %5.2fx %5.2fx %5.2fx", fmt_time(u[0]).c_str(), u[0] / u[1], u[0] / u[2],
                        u[0] / u[3]);
          }
          std::printf("\n");
        }
        std::printf("\n");
      }
  std::printf(
      "Ratios are tokpos's quantized forward / the line's median, from the same run (below 1: tokpos "
      "faster). GB/s: output bytes / tokpos's wall median. p90: the 90th percentile of the wall times of "
      "tokpos and the plain loop. cpu (1 thread): the same from the thread's CPU time, which leaves out the "
      "time other processes held the core.\n\n");

  std::printf("Table memory, V %lld x D %lld\n  %-5s %12s %9s %9s\n", static_cast<long long>(V),
              static_cast<long long>(D), "type", "MiB", "of f32", "bits/wt");
  const double f32_bytes = static_cast<double>(V * D) * 4.0;
  std::printf("  %-5s %12.1f %8.3fx %9.2f\n", "f32", f32_bytes / (1 << 20), 1.0, 32.0);
  for (const TypeCase& c : kCases) {
    const tokpos::GgmlTypeTraits* tr = tokpos::ggml_type_by_name(c.name);
    const double bytes = static_cast<double>(*tokpos::ggml_row_bytes(*tr, D)) * static_cast<double>(V);
    std::printf("  %-5s %12.1f %8.3fx %9.2f\n", c.name, bytes / (1 << 20), bytes / f32_bytes,
                bytes * 8.0 / static_cast<double>(V * D));
  }
  std::printf("\nload average at the end: %s\n", first_line("/proc/loadavg").c_str());
  if (mismatches != 0) {
    std::printf("%d MISMATCH(ES) between tokpos and the plain loop\n", mismatches);
    return 1;
  }
  std::printf("bits: tokpos's output equals the plain loop's for every type, shape and position case\n");
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokpos_quant_bench: %s\n", e.what());
    return 1;
  }
}
