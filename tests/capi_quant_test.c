/* tokpos_op_compose_forward_ggml from plain C: a Q8_0 and a Q4_K token table
 * whose expected rows are computed here from ggml's block layouts
 * (ggml-common.h: block_q8_0 {half d; int8 qs[32]}, block_q4_K {half d;
 * half dmin; uint8 scales[12]; uint8 qs[128]}), element by element, plus
 * the position row (into a float32 and a bfloat16 out); then the refusals
 * (an unsupported type, a value that is no ggml type, a row that is not
 * whole blocks, wrong row bytes, a bad dtype, a NULL table, a bad id, a
 * position past the table), each with its status, a message naming the
 * value, and the output untouched. Prints one line per check and
 * "N passed, M failed". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "c_check.h"
#include "tokpos/tokpos.h"

enum { GGML_F32 = 0, GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_IQ2_XXS = 16 };

/* IEEE binary16 bits as the float they are (every half is a float exactly). */
static float half_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  const float mag = exp == 0 ? ldexpf((float)mant, -24) : ldexpf((float)(1024 + mant), exp - 25);
  return sign ? -mag : mag;
}

static void put_half(uint8_t* p, uint16_t h) {
  p[0] = (uint8_t)(h & 0xFF); /* little-endian, as GGUF stores it */
  p[1] = (uint8_t)(h >> 8);
}

static uint16_t get_half(const uint8_t* p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t g_state = 12345u;
static uint8_t next_byte(void) {
  g_state = g_state * 1664525u + 1013904223u;
  return (uint8_t)(g_state >> 24);
}

static DLTensor tensor(void* data, DLDataType dtype, int ndim, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

static const DLDataType kF32 = {kDLFloat, 32, 1}, kBF16 = {kDLBfloat, 16, 1}, kI64 = {kDLInt, 64, 1},
                        kU8 = {kDLUInt, 8, 1};

/* A canary output: every byte 0xA5, which no result here has. */
enum { CANARY_FLOATS = 6 * 256 };
static union {
  float f[CANARY_FLOATS];
  unsigned char bytes[CANARY_FLOATS * sizeof(float)];
} g_out;
static void fill_canary(void) {
  memset(g_out.bytes, 0xA5, sizeof g_out.bytes);
}
static int canary_intact(void) {
  for (size_t i = 0; i < sizeof g_out.bytes; ++i)
    if (g_out.bytes[i] != 0xA5) return 0;
  return 1;
}

/* A refusal: the status, the output untouched, and name1 (and name2 unless
 * NULL) in the message, which is printed. */
static void refused(const char* what, tokpos_status got, tokpos_status want, const char* name1,
                    const char* name2) {
  const char* msg = tokpos_last_error();
  CHECK(what, got == want && canary_intact() && strstr(msg, name1) != NULL &&
                  (!name2 || strstr(msg, name2) != NULL));
  printf("       %s\n", msg);
}

/* ---- Q8_0: y = qs[j] * d ------------------------------------------------ */

enum { Q8_V = 4, Q8_D = 64, Q8_ROW = 2 * 34, B = 2, T = 3, L = 5 };
static uint8_t q8_blocks[Q8_V * Q8_ROW];
static float pos[(L + 1) * 256]; /* up to L + 1 rows of D = 256 */

static float q8_0_element(const uint8_t* row, int e) {
  const uint8_t* b = row + (e / 32) * 34;
  return (float)(int8_t)b[2 + e % 32] * half_value(get_half(b));
}

static void q8_0_table(void) {
  /* Scales of every kind: exact, inexact, negative, subnormal, large. */
  static const uint16_t scales[Q8_V * 2] = {0x3800, 0x2E66, 0xBE00, 0x0003, 0x5640, 0x1C01, 0xB2AB, 0x3C00};
  for (int v = 0; v < Q8_V; ++v)
    for (int blk = 0; blk < 2; ++blk) {
      uint8_t* b = q8_blocks + v * Q8_ROW + blk * 34;
      put_half(b, scales[v * 2 + blk]);
      for (int j = 0; j < 32; ++j) b[2 + j] = next_byte();
    }
}

static void q8_0_forward(void) {
  static const int64_t ids[B * T] = {3, 0, 1, 1, 2, 3};
  static float out[B * T * Q8_D], want[B * T * Q8_D], want_tok[B * T * Q8_D];
  for (int n = 0; n < B * T; ++n)
    for (int d = 0; d < Q8_D; ++d) {
      want_tok[n * Q8_D + d] = q8_0_element(q8_blocks + ids[n] * Q8_ROW, d);
      want[n * Q8_D + d] = want_tok[n * Q8_D + d] + pos[(n % T) * Q8_D + d];
    }
  int64_t oshape[3] = {B, T, Q8_D}, ishape[2] = {B, T}, bshape[2] = {Q8_V, Q8_ROW}, pshape[2] = {L, Q8_D};
  DLTensor o = tensor(out, kF32, 3, oshape), i = tensor((void*)ids, kI64, 2, ishape),
           tb = tensor(q8_blocks, kU8, 2, bshape), pt = tensor(pos, kF32, 2, pshape);
  CHECK("q8_0 + positions = qs * d + pos, bit for bit",
        tokpos_op_compose_forward_ggml(&o, &i, &tb, GGML_Q8_0, Q8_D, &pt, NULL, 0) == TOKPOS_OK &&
            memcmp(out, want, sizeof out) == 0);
  CHECK("q8_0 without positions = qs * d, bit for bit",
        tokpos_op_compose_forward_ggml(&o, &i, &tb, GGML_Q8_0, Q8_D, NULL, NULL, 0) == TOKPOS_OK &&
            memcmp(out, want_tok, sizeof out) == 0);

  /* A bfloat16 out: the float32 sum rounded once, to nearest even (no NaN here). */
  static uint16_t out_bf16[B * T * Q8_D], want_bf16[B * T * Q8_D];
  for (int n = 0; n < B * T * Q8_D; ++n) {
    uint32_t bits;
    memcpy(&bits, &want[n], sizeof bits);
    want_bf16[n] = (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  }
  DLTensor ob = tensor(out_bf16, kBF16, 3, oshape);
  CHECK("q8_0 + positions into bfloat16 = the float32 sum rounded once, bit for bit",
        tokpos_op_compose_forward_ggml(&ob, &i, &tb, GGML_Q8_0, Q8_D, &pt, NULL, 0) == TOKPOS_OK &&
            memcmp(out_bf16, want_bf16, sizeof out_bf16) == 0);

  DLTensor canary = tensor(g_out.f, kF32, 3, oshape);
  char msg[64];
  fill_canary();
  refused("an unsupported ggml type (iq2_xxs) is TOKPOS_UNIMPLEMENTED naming it, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, &tb, GGML_IQ2_XXS, Q8_D, &pt, NULL, 0),
          TOKPOS_UNIMPLEMENTED, "ggml_type 16", "iq2_xxs");
  refused("ggml_type 99 (past the last type) is TOKPOS_INVALID_ARGUMENT naming it, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, &tb, 99, Q8_D, &pt, NULL, 0), TOKPOS_INVALID_ARGUMENT,
          "ggml_type 99", NULL);
  refused("ggml_type -1 is TOKPOS_INVALID_ARGUMENT naming it, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, &tb, -1, Q8_D, &pt, NULL, 0), TOKPOS_INVALID_ARGUMENT,
          "ggml_type -1", NULL);
  refused("ggml_type 4 (removed from ggml) is TOKPOS_INVALID_ARGUMENT naming it, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, &tb, 4, Q8_D, &pt, NULL, 0), TOKPOS_INVALID_ARGUMENT,
          "ggml_type 4", NULL);

  /* D = 40: not whole q8_0 blocks of 32. */
  int64_t oshape40[3] = {B, T, 40}, bshape40[2] = {Q8_V, 34}, pshape40[2] = {L, 40};
  DLTensor c40 = tensor(g_out.f, kF32, 3, oshape40), tb40 = tensor(q8_blocks, kU8, 2, bshape40),
           pt40 = tensor(pos, kF32, 2, pshape40);
  refused("a row that is not whole q8_0 blocks names the type and the block size, writing nothing",
          tokpos_op_compose_forward_ggml(&c40, &i, &tb40, GGML_Q8_0, 40, &pt40, NULL, 0),
          TOKPOS_INVALID_ARGUMENT, "dim 40", "q8_0 blocks (block size 32");

  int64_t bshape67[2] = {Q8_V, Q8_ROW - 1};
  DLTensor tb67 = tensor(q8_blocks, kU8, 2, bshape67);
  snprintf(msg, sizeof msg, "takes %d", Q8_ROW);
  refused("row bytes that are not a q8_0 row of D are TOKPOS_SHAPE_MISMATCH naming both, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, &tb67, GGML_Q8_0, Q8_D, &pt, NULL, 0),
          TOKPOS_SHAPE_MISMATCH, "has 67 bytes per row", msg);

  DLTensor tbf = tensor(q8_blocks, kF32, 2, bshape);
  refused("token_blocks of dtype float32 is TOKPOS_UNIMPLEMENTED naming it, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, &tbf, GGML_Q8_0, Q8_D, &pt, NULL, 0),
          TOKPOS_UNIMPLEMENTED, "token_blocks", "uint8");

  refused("a NULL token_blocks is TOKPOS_NULL_POINTER naming it, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, NULL, GGML_Q8_0, Q8_D, &pt, NULL, 0),
          TOKPOS_NULL_POINTER, "token_blocks", NULL);

  static const int64_t bad_ids[B * T] = {3, 0, 1, 1, Q8_V, 3};
  DLTensor bi = tensor((void*)bad_ids, kI64, 2, ishape);
  refused("an id outside [0, V) is TOKPOS_ID_OUT_OF_RANGE naming it and (b, t), writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &bi, &tb, GGML_Q8_0, Q8_D, &pt, NULL, 0),
          TOKPOS_ID_OUT_OF_RANGE, "token id 4 at (b=1, t=1)", "[0, 4)");

  /* ggml's F32 through the same entry point: the rows as they are. */
  static float f32_rows[2 * 16];
  for (int n = 0; n < 2 * 16; ++n) f32_rows[n] = (float)n * 0.375f - 3.0f;
  int64_t fshape[2] = {2, 16 * 4}, oshape1[2] = {1, 16}, ishape1[1] = {1};
  static const int64_t one_id[1] = {1};
  static float out1[16];
  DLTensor fb = tensor(f32_rows, kU8, 2, fshape), o1 = tensor(out1, kF32, 2, oshape1),
           i1 = tensor((void*)one_id, kI64, 1, ishape1);
  CHECK("an f32 table as raw bytes (ggml type 0) reads its rows",
        tokpos_op_compose_forward_ggml(&o1, &i1, &fb, GGML_F32, 16, NULL, NULL, 0) == TOKPOS_OK &&
            memcmp(out1, f32_rows + 16, sizeof out1) == 0);
}

/* ---- Q4_K: y = (d * sc) * q - (dmin * m) ------------------------------- */

enum { K_V = 3, K_D = 256, K_ROW = 144, K_N = 5 };
static uint8_t q4k_blocks[K_V * K_ROW];

/* Element e of a Q4_K block: 64-element group g = e / 64 holds sub-blocks
 * 2g (the low nibbles of qs[32g .. 32g + 32)) and 2g + 1 (their high
 * nibbles). Sub-block s has a 6-bit scale and min packed in scales[12]:
 * s < 4: scales[s] and scales[s + 4], low 6 bits; s >= 4: the low and high
 * nibbles of scales[s + 4], their top two bits from the high bits of
 * scales[s - 4] and scales[s]. */
static float q4_k_element(const uint8_t* b, int e) {
  const int g = e / 64, hi = (e % 64) / 32, l = e % 32, s = 2 * g + hi;
  const uint8_t* sc12 = b + 4;
  int sc, m;
  if (s < 4) {
    sc = sc12[s] & 63;
    m = sc12[s + 4] & 63;
  } else {
    sc = (sc12[s + 4] & 0x0F) | ((sc12[s - 4] >> 6) << 4);
    m = (sc12[s + 4] >> 4) | ((sc12[s] >> 6) << 4);
  }
  const uint8_t byte = b[16 + 32 * g + l];
  const int q = hi ? byte >> 4 : byte & 0x0F;
  const float d = half_value(get_half(b)), dmin = half_value(get_half(b + 2));
  const float scale = d * (float)sc, min = dmin * (float)m;
  return scale * (float)q - min;
}

static void q4_k_forward(void) {
  static const uint16_t d[K_V] = {0x2A3D, 0x1E66, 0x3400}, dmin[K_V] = {0x2401, 0x1A00, 0x0000};
  for (int v = 0; v < K_V; ++v) {
    uint8_t* b = q4k_blocks + v * K_ROW;
    put_half(b, d[v]);
    put_half(b + 2, dmin[v]);
    for (int k = 4; k < K_ROW; ++k) b[k] = next_byte();
  }
  static const int64_t ids[K_N] = {2, 0, 1, 0, 2};
  enum { START = 1 };
  static float out[K_N * K_D], want[K_N * K_D];
  for (int n = 0; n < K_N; ++n)
    for (int e = 0; e < K_D; ++e)
      want[n * K_D + e] = q4_k_element(q4k_blocks + ids[n] * K_ROW, e) + pos[(START + n) * K_D + e];
  int64_t oshape[2] = {K_N, K_D}, ishape[1] = {K_N}, bshape[2] = {K_V, K_ROW}, pshape[2] = {L + 1, K_D};
  DLTensor o = tensor(out, kF32, 2, oshape), i = tensor((void*)ids, kI64, 1, ishape),
           tb = tensor(q4k_blocks, kU8, 2, bshape), pt = tensor(pos, kF32, 2, pshape);
  CHECK("q4_K, (N) ids, start 1 + positions = (d*sc)*q - dmin*m + pos, bit for bit",
        tokpos_op_compose_forward_ggml(&o, &i, &tb, GGML_Q4_K, K_D, &pt, NULL, START) == TOKPOS_OK &&
            memcmp(out, want, sizeof out) == 0);

  /* position_ids instead of start + n. */
  static const int64_t position_ids[K_N] = {5, 0, 3, 3, 1};
  DLTensor pi = tensor((void*)position_ids, kI64, 1, ishape);
  for (int n = 0; n < K_N; ++n)
    for (int e = 0; e < K_D; ++e)
      want[n * K_D + e] = q4_k_element(q4k_blocks + ids[n] * K_ROW, e) + pos[position_ids[n] * K_D + e];
  CHECK("q4_K with position_ids = (d*sc)*q - dmin*m + pos[position_ids], bit for bit",
        tokpos_op_compose_forward_ggml(&o, &i, &tb, GGML_Q4_K, K_D, &pt, &pi, 0) == TOKPOS_OK &&
            memcmp(out, want, sizeof out) == 0);

  DLTensor canary = tensor(g_out.f, kF32, 2, oshape);
  fill_canary();
  refused("q4_K with D = 128 (half a block of 256) names the type and the block size, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, &tb, GGML_Q4_K, 128, &pt, NULL, 0),
          TOKPOS_INVALID_ARGUMENT, "dim 128", "q4_K blocks (block size 256");
  refused("q4_K: a position past the table is TOKPOS_POSITION_OUT_OF_RANGE, writing nothing",
          tokpos_op_compose_forward_ggml(&canary, &i, &tb, GGML_Q4_K, K_D, &pt, NULL, L - 3),
          TOKPOS_POSITION_OUT_OF_RANGE, "positions 2 .. 6", "the 6 rows of pos_table");
}

int main(void) {
  for (int n = 0; n < (int)(sizeof pos / sizeof pos[0]); ++n)
    pos[n] = (float)((n * 37) % 101) / 101.0f - 0.5f;
  q8_0_table();
  q8_0_forward();
  q4_k_forward();
  return c_check_summary();
}
