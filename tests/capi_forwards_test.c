/* The C API's forward entry points, from plain C, on the same inputs:
 * tokpos_embedding_forward, tokpos_compose_forward, tokpos_compose_forward_ex,
 * tokpos_op_compose_forward, tokpos_op_compose_forward_shard,
 * tokpos_composer_forward, tokpos_token_embedding_forward and
 * tokpos_position_embedding_forward. Each must give, bit for bit, what a plain
 * loop written here gives, out[b, t, :] = tok[id, :] + pos[t, :] (the last
 * two: its token and its position part), and each must refuse a bad id (or
 * position), a NULL pointer and a misaligned output with its status, writing
 * nothing. The raw and the DLPack backward agree too. Prints one line per
 * check and "N passed, M failed". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokpos/tokpos.h"
#include "c_check.h"


enum { V = 37, D = 12, L = 9, B = 2, T = 7, N = B * T * D };

static float tok[V * D], pos[L * D];
static const int64_t ids[B * T] = {0, 36, 5, 5, 17, 2, 30, 8, 1, 36, 0, 22, 22, 9};
static int64_t bad_ids[B * T];
static float want[N], want_tok[N], want_pos[N];

/* out[b, t, :] = tok[id, :] + pos[t, :], one float addition per element. */
static void reference(void) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < D; ++d) {
        const int n = (b * T + t) * D + d;
        want_tok[n] = tok[ids[b * T + t] * D + d];
        want_pos[n] = pos[t * D + d];
        want[n] = want_tok[n] + want_pos[n];
      }
}

/* A canary output: every byte 0xA5, which no result here has. */
static union {
  float f[N + 4];
  unsigned char bytes[(N + 4) * sizeof(float)];
} g_out;
static void fill_canary(void) { memset(g_out.bytes, 0xA5, sizeof g_out.bytes); }
static int canary_intact(void) {
  for (size_t i = 0; i < sizeof g_out.bytes; ++i)
    if (g_out.bytes[i] != 0xA5) return 0;
  return 1;
}
/* A float pointer one byte into the canary: misaligned for float. */
static float* misaligned(void) { return (float*)(void*)(g_out.bytes + 1); }

static int same_bits(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* The three refusals of one entry point, called in this order (the message
 * checked is the misaligned call's, the last). */
#define REFUSALS(what, bad_id_status, bad_id_call, null_call, misaligned_call) \
  do {                                                                     \
    const tokpos_status s1_ = (bad_id_call);                               \
    const tokpos_status s2_ = (null_call);                                 \
    const tokpos_status s3_ = (misaligned_call);                           \
    refusals(what, bad_id_status, s1_, s2_, s3_);                          \
  } while (0)

static void refusals(const char* what, tokpos_status bad_id_status, tokpos_status bad_id, tokpos_status null_st,
                     tokpos_status misaligned_st) {
  char name[160];
  snprintf(name, sizeof name, "%s: a bad id or position is refused, writing nothing", what);
  CHECK(name, bad_id == bad_id_status && canary_intact());
  snprintf(name, sizeof name, "%s: a NULL pointer is TOKPOS_NULL_POINTER, writing nothing", what);
  CHECK(name, null_st == TOKPOS_NULL_POINTER && canary_intact());
  snprintf(name, sizeof name, "%s: a misaligned out is TOKPOS_INVALID_ARGUMENT, writing nothing", what);
  CHECK(name, misaligned_st == TOKPOS_INVALID_ARGUMENT && canary_intact() &&
                  strstr(tokpos_last_error(), "aligned") != NULL);
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

static const DLDataType kF32 = {kDLFloat, 32, 1}, kI64 = {kDLInt, 64, 1};

static void embedding_forward(void) {
  static float out[N];
  tokpos_status st = TOKPOS_OK;
  for (int b = 0; b < B; ++b) st |= tokpos_embedding_forward(ids + b * T, T, tok, V, D, 1, out + b * T * D);
  CHECK("embedding_forward = the loop, bit for bit", st == TOKPOS_OK && same_bits(out, want, N));
  /* The lab's rule: an id outside [0, V) reads row unk_id. */
  int64_t oob[T];
  memcpy(oob, ids, sizeof oob);
  oob[3] = V;
  st = tokpos_embedding_forward(oob, T, tok, V, D, 1, out);
  int ok = st == TOKPOS_OK;
  for (int d = 0; d < D; ++d) ok &= out[3 * D + d] == tok[1 * D + d] + pos[3 * D + d];
  CHECK("embedding_forward: an id outside [0, V) reads unk_id's row", ok);
  fill_canary();
  REFUSALS("embedding_forward", TOKPOS_INVALID_ARGUMENT,
           tokpos_embedding_forward(ids, T, tok, V, D, V, g_out.f) /* unk_id V: no such row */,
           tokpos_embedding_forward(NULL, T, tok, V, D, 1, g_out.f),
           tokpos_embedding_forward(ids, T, tok, V, D, 1, misaligned()));
}

static void compose_forward(void) {
  static float out[N];
  CHECK("compose_forward = the loop, bit for bit",
        tokpos_compose_forward(out, ids, B, T, tok, V, pos, L, D) == TOKPOS_OK && same_bits(out, want, N));
  fill_canary();
  REFUSALS("compose_forward", TOKPOS_ID_OUT_OF_RANGE, tokpos_compose_forward(g_out.f, bad_ids, B, T, tok, V, pos, L, D),
           tokpos_compose_forward(g_out.f, ids, B, T, NULL, V, pos, L, D),
           tokpos_compose_forward(misaligned(), ids, B, T, tok, V, pos, L, D));
}

static void compose_forward_ex(void) {
  static float out[N];
  CHECK("compose_forward_ex (f32) = the loop, bit for bit",
        tokpos_compose_forward_ex(out, TOKPOS_DTYPE_F32, ids, B, T, tok, TOKPOS_DTYPE_F32, V, pos, TOKPOS_DTYPE_F32, L,
                                  D) == TOKPOS_OK &&
            same_bits(out, want, N));
  fill_canary();
  REFUSALS("compose_forward_ex",
           TOKPOS_ID_OUT_OF_RANGE,
           tokpos_compose_forward_ex(g_out.f, TOKPOS_DTYPE_F32, bad_ids, B, T, tok, TOKPOS_DTYPE_F32, V, pos,
                                     TOKPOS_DTYPE_F32, L, D),
           tokpos_compose_forward_ex(g_out.f, TOKPOS_DTYPE_F32, NULL, B, T, tok, TOKPOS_DTYPE_F32, V, pos,
                                     TOKPOS_DTYPE_F32, L, D),
           tokpos_compose_forward_ex(g_out.bytes + 1, TOKPOS_DTYPE_F32, ids, B, T, tok, TOKPOS_DTYPE_F32, V, pos,
                                     TOKPOS_DTYPE_F32, L, D));
}

static void op_compose_forward(void) {
  static float out[N];
  int64_t oshape[3] = {B, T, D}, ishape[2] = {B, T}, tshape[2] = {V, D}, pshape[2] = {L, D};
  DLTensor o = tensor(out, kF32, 3, oshape), i = tensor((void*)ids, kI64, 2, ishape), tt = tensor(tok, kF32, 2, tshape),
           pt = tensor(pos, kF32, 2, pshape), bad = tensor(bad_ids, kI64, 2, ishape);
  CHECK("op_compose_forward = the loop, bit for bit",
        tokpos_op_compose_forward(&o, &i, &tt, &pt, NULL, 0) == TOKPOS_OK && same_bits(out, want, N));
  DLTensor canary = tensor(g_out.f, kF32, 3, oshape), odd = tensor(g_out.bytes + 1, kF32, 3, oshape);
  DLTensor null_ids = tensor(NULL, kI64, 2, ishape);
  fill_canary();
  REFUSALS("op_compose_forward", TOKPOS_ID_OUT_OF_RANGE, tokpos_op_compose_forward(&canary, &bad, &tt, &pt, NULL, 0),
           tokpos_op_compose_forward(&canary, &null_ids, &tt, &pt, NULL, 0),
           tokpos_op_compose_forward(&odd, &i, &tt, &pt, NULL, 0));
  CHECK("op_compose_forward: a NULL DLTensor is TOKPOS_NULL_POINTER, writing nothing",
        tokpos_op_compose_forward(&canary, &i, NULL, &pt, NULL, 0) == TOKPOS_NULL_POINTER && canary_intact());
}

static void op_compose_forward_shard(void) {
  static float out[N], a[N], b[N], sum[N];
  int64_t oshape[3] = {B, T, D}, ishape[2] = {B, T}, tshape[2] = {V, D}, pshape[2] = {L, D};
  DLTensor o = tensor(out, kF32, 3, oshape), i = tensor((void*)ids, kI64, 2, ishape), tt = tensor(tok, kF32, 2, tshape),
           pt = tensor(pos, kF32, 2, pshape), bad = tensor(bad_ids, kI64, 2, ishape);
  CHECK("op_compose_forward_shard (one shard of all V rows) = the loop, bit for bit",
        tokpos_op_compose_forward_shard(&o, &i, &tt, V, 0, &pt, NULL, 0) == TOKPOS_OK && same_bits(out, want, N));
  /* Two shards, rows [0, 20) with the positions and [20, 37), summed. */
  int64_t s0[2] = {20, D}, s1[2] = {V - 20, D};
  DLTensor oa = tensor(a, kF32, 3, oshape), ob = tensor(b, kF32, 3, oshape), t0 = tensor(tok, kF32, 2, s0),
           t1 = tensor(tok + 20 * D, kF32, 2, s1);
  tokpos_status st = tokpos_op_compose_forward_shard(&oa, &i, &t0, V, 0, &pt, NULL, 0);
  st |= tokpos_op_compose_forward_shard(&ob, &i, &t1, V, 20, NULL, NULL, 0);
  for (int n = 0; n < N; ++n) sum[n] = a[n] + b[n];
  CHECK("op_compose_forward_shard: two shards summed = the loop, bit for bit",
        st == TOKPOS_OK && same_bits(sum, want, N));
  DLTensor canary = tensor(g_out.f, kF32, 3, oshape), odd = tensor(g_out.bytes + 1, kF32, 3, oshape);
  fill_canary();
  REFUSALS("op_compose_forward_shard", TOKPOS_ID_OUT_OF_RANGE,
           tokpos_op_compose_forward_shard(&canary, &bad, &t1, V, 20, NULL, NULL, 0),
           tokpos_op_compose_forward_shard(&canary, &i, NULL, V, 0, &pt, NULL, 0),
           tokpos_op_compose_forward_shard(&odd, &i, &tt, V, 0, &pt, NULL, 0));
}

static void composer_forward(tokpos_composer* c) {
  static float out[N];
  CHECK("composer_forward = the loop, bit for bit",
        tokpos_composer_forward(c, ids, B, T, 0, NULL, out) == TOKPOS_OK && same_bits(out, want, N));
  fill_canary();
  REFUSALS("composer_forward", TOKPOS_ID_OUT_OF_RANGE, tokpos_composer_forward(c, bad_ids, B, T, 0, NULL, g_out.f),
           tokpos_composer_forward(c, NULL, B, T, 0, NULL, g_out.f),
           tokpos_composer_forward(c, ids, B, T, 0, NULL, misaligned()));
  CHECK("composer_forward: a NULL handle is TOKPOS_NULL_POINTER, writing nothing",
        tokpos_composer_forward(NULL, ids, B, T, 0, NULL, g_out.f) == TOKPOS_NULL_POINTER && canary_intact());
}

static void module_forwards(void) {
  static float t_out[N], p_out[T * D], sum[N];
  tokpos_token_embedding* e = NULL;
  tokpos_position_embedding* p = NULL;
  CHECK("token embedding from the table", tokpos_token_embedding_from_table(&e, tok, V, D, 0) == TOKPOS_OK);
  CHECK("sinusoidal position embedding", tokpos_position_embedding_create_sinusoidal(&p, L, D, 10000.0) == TOKPOS_OK);
  CHECK("token_embedding_forward = the loop's token rows, bit for bit",
        tokpos_token_embedding_forward(e, ids, B, T, t_out) == TOKPOS_OK && same_bits(t_out, want_tok, N));
  CHECK("position_embedding_forward = the loop's position rows, bit for bit",
        tokpos_position_embedding_forward(p, T, 0, p_out) == TOKPOS_OK && same_bits(p_out, want_pos, T * D));
  for (int n = 0; n < N; ++n) sum[n] = t_out[n] + p_out[n % (T * D)];
  CHECK("token_embedding_forward + position_embedding_forward = the loop, bit for bit", same_bits(sum, want, N));
  fill_canary();
  REFUSALS("token_embedding_forward", TOKPOS_ID_OUT_OF_RANGE, tokpos_token_embedding_forward(e, bad_ids, B, T, g_out.f),
           tokpos_token_embedding_forward(e, NULL, B, T, g_out.f),
           tokpos_token_embedding_forward(e, ids, B, T, misaligned()));
  REFUSALS("position_embedding_forward", TOKPOS_POSITION_OUT_OF_RANGE,
           tokpos_position_embedding_forward(p, T, L - T + 1, g_out.f) /* start + T = L + 1 */,
           tokpos_position_embedding_forward(p, T, 0, NULL), tokpos_position_embedding_forward(p, T, 0, misaligned()));
  tokpos_token_embedding_free(e);
  tokpos_position_embedding_free(p);
}

/* The raw and the DLPack backward are one op: without a position gradient,
 * T > L is no error in either (the token gradient has no positions), and
 * both add the loop's sums. */
static void backwards_agree(void) {
  enum { TL = L + 3 }; /* T > L */
  static float d_out[TL * D], g_raw[V * D], g_op[V * D], g_want[V * D];
  int64_t long_ids[TL];
  for (int t = 0; t < TL; ++t) long_ids[t] = ids[t % (B * T)];
  for (int n = 0; n < TL * D; ++n) d_out[n] = (float)((n * 29) % 83) / 83.0f - 0.5f;
  memset(g_want, 0, sizeof g_want);
  for (int t = 0; t < TL; ++t) /* one addition at a time, in t order */
    for (int d = 0; d < D; ++d) g_want[long_ids[t] * D + d] += d_out[t * D + d];
  memset(g_raw, 0, sizeof g_raw);
  memset(g_op, 0, sizeof g_op);
  int64_t gshape[2] = {V, D}, dshape[3] = {1, TL, D}, ishape[2] = {1, TL};
  DLTensor gt = tensor(g_op, kF32, 2, gshape), dt = tensor(d_out, kF32, 3, dshape),
           it = tensor(long_ids, kI64, 2, ishape);
  const tokpos_status raw = tokpos_compose_backward(g_raw, NULL, d_out, long_ids, 1, TL, V, L, D);
  const tokpos_status op = tokpos_op_compose_backward(&gt, NULL, &dt, &it, NULL, 0);
  CHECK("compose_backward without d_pos_table: T > L is no error, as in op_compose_backward",
        raw == TOKPOS_OK && op == TOKPOS_OK);
  CHECK("compose_backward = op_compose_backward = the loop, bit for bit",
        same_bits(g_raw, g_want, V * D) && same_bits(g_op, g_want, V * D));
  static float g_pos[L * D];
  memcpy(g_op, g_raw, sizeof g_op);
  CHECK("compose_backward with d_pos_table: T > L is TOKPOS_POSITION_OUT_OF_RANGE, writing nothing",
        tokpos_compose_backward(g_raw, g_pos, d_out, long_ids, 1, TL, V, L, D) == TOKPOS_POSITION_OUT_OF_RANGE &&
            same_bits(g_raw, g_op, V * D));
}

int main(void) {
  /* The inputs: the tables of a composer (seeded token rows, the sinusoidal
   * table of base 10000, which tokpos_embedding_forward adds too). */
  tokpos_composer_options o = tokpos_composer_default_options(V, D, L);
  o.seed = 2024;
  tokpos_composer* c = NULL;
  const float *ct = NULL, *cp = NULL;
  CHECK("composer create", tokpos_composer_create(&c, &o) == TOKPOS_OK);
  CHECK("composer tables", tokpos_composer_token_table(c, &ct) == TOKPOS_OK &&
                               tokpos_composer_position_table(c, &cp) == TOKPOS_OK);
  if (g_failed) return EXIT_FAILURE;
  memcpy(tok, ct, sizeof tok);
  memcpy(pos, cp, sizeof pos);
  static float lab[L * D];
  CHECK("the composer's position table is tokpos_sinusoidal_table's",
        tokpos_sinusoidal_table(lab, L, D, 10000.0) == TOKPOS_OK && same_bits(lab, pos, L * D));
  memcpy(bad_ids, ids, sizeof bad_ids);
  bad_ids[B * T - 2] = V; /* (b=1, t=5) */
  reference();

  embedding_forward();
  compose_forward();
  compose_forward_ex();
  op_compose_forward();
  op_compose_forward_shard();
  composer_forward(c);
  module_forwards();
  backwards_agree();
  tokpos_composer_free(c);
  return c_check_summary();
}
