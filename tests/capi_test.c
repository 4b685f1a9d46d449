/* The C API from plain C: the lab's four checks (seed 002's verify.c), the
 * fused kernels, the module handles, and thread-count independence. Prints
 * one line per check and a closing "N passed, M failed" line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokpos/tokpos.h"
#include "c_check.h"


enum { V = 260, D = 16, L = 32 };

static float table[V * D];

static void fill_table(void) {
  unsigned s = 12345u;
  for (int i = 0; i < V * D; ++i) {
    s = s * 1103515245u + 12345u;
    table[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

static void lab_checks(void) {
  int ok = 1;
  for (int d = 0; d < D; ++d) ok &= tokpos_pe_sinusoidal(0, d, D) == (d % 2 ? 1.0f : 0.0f);
  CHECK("TEST 1: position 0 is 0, 1, 0, 1, ...", ok);

  CHECK("TEST 2: PE(1,0) = sin 1 and PE(1,1) = cos 1",
        fabsf(tokpos_pe_sinusoidal(1, 0, D) - (float)sin(1.0)) < 1e-7f &&
            fabsf(tokpos_pe_sinusoidal(1, 1, D) - (float)cos(1.0)) < 1e-7f);

  int64_t same[2] = {76, 76};
  float out[2 * D];
  int differ = 0;
  tokpos_status st = tokpos_embedding_forward(same, 2, table, V, D, 1, out);
  for (int d = 0; d < D; ++d) differ |= out[d] != out[D + d];
  CHECK("TEST 3: one token at two positions differs", st == TOKPOS_OK && differ);

  int64_t two[2] = {76, 109};
  float a[D], b[D];
  st = tokpos_embedding_forward(&two[0], 1, table, V, D, 1, a);
  st |= tokpos_embedding_forward(&two[1], 1, table, V, D, 1, b);
  differ = 0;
  for (int d = 0; d < D; ++d) differ |= a[d] != b[d];
  CHECK("TEST 4: two tokens at one position differ", st == TOKPOS_OK && differ);

  int64_t oob[1] = {9999};
  int64_t unk[1] = {1};
  float x[D], y[D];
  st = tokpos_embedding_forward(oob, 1, table, V, D, 1, x);
  st |= tokpos_embedding_forward(unk, 1, table, V, D, 1, y);
  CHECK("out-of-range id falls back to UNK", st == TOKPOS_OK && memcmp(x, y, sizeof x) == 0);
  CHECK("NULL token_ids is an error",
        tokpos_embedding_forward(NULL, 1, table, V, D, 1, x) == TOKPOS_NULL_POINTER);
  CHECK("seq_len 0 succeeds", tokpos_embedding_forward(NULL, 0, NULL, V, D, 1, NULL) == TOKPOS_OK);
  CHECK("invalid PE argument is NaN", isnan(tokpos_pe_sinusoidal(0, D, D)));
}

static void compose_checks(void) {
  enum { B = 2, T = 5 };
  float pos[L * D];
  CHECK("sinusoidal table", tokpos_sinusoidal_table(pos, L, D, 10000.0) == TOKPOS_OK);
  int64_t ids[B * T] = {72, 101, 108, 108, 111, 44, 32, 116, 114, 97};
  float out[B * T * D];
  CHECK("compose forward", tokpos_compose_forward(out, ids, B, T, table, V, pos, L, D) == TOKPOS_OK);
  int ok = 1;
  for (int n = 0; n < B * T; ++n)
    for (int d = 0; d < D; ++d) ok &= out[n * D + d] == table[ids[n] * D + d] + pos[(n % T) * D + d];
  CHECK("compose forward = token row + position row t", ok);
  float streamed[B * T * D];
  tokpos_set_stream_min_bytes(0);
  CHECK("stream setting reads back", tokpos_get_stream_min_bytes() == 0);
  CHECK("streamed forward", tokpos_compose_forward(streamed, ids, B, T, table, V, pos, L, D) == TOKPOS_OK);
  CHECK("streamed forward = the same bits", memcmp(out, streamed, sizeof out) == 0);
  tokpos_set_stream_min_bytes(-1);
  CHECK("negative stream setting restores a positive default", tokpos_get_stream_min_bytes() > 0);

  /* Backward: the same bits for 1, 2 and 7 threads. */
  static float g1[V * D], g2[V * D], p1[L * D], p2[L * D];
  float d_out[B * T * D];
  for (int i = 0; i < B * T * D; ++i) d_out[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
  tokpos_set_num_threads(1);
  tokpos_status st = tokpos_compose_backward(g1, p1, d_out, ids, B, T, V, L, D);
  ok = 1;
  for (int threads = 2; threads <= 7; threads += 5) {
    memset(g2, 0, sizeof g2);
    memset(p2, 0, sizeof p2);
    tokpos_set_num_threads(threads);
    st |= tokpos_compose_backward(g2, p2, d_out, ids, B, T, V, L, D);
    ok &= memcmp(g1, g2, sizeof g1) == 0 && memcmp(p1, p2, sizeof p1) == 0;
  }
  tokpos_set_num_threads(0);
  CHECK("compose backward is thread-count independent", st == TOKPOS_OK && ok);
  /* Row 108 ('l' + 4) appears twice: its gradient is the sum of both rows. */
  CHECK("compose backward sums repeated ids", g1[108 * D] == d_out[2 * D] + d_out[3 * D]);
  CHECK("compose backward leaves unused rows at zero", g1[0] == 0.0f && g1[259 * D] == 0.0f);

  float keep[B * T * D];
  memcpy(keep, out, sizeof out);
  ids[3] = V;
  st = tokpos_compose_forward(out, ids, B, T, table, V, pos, L, D);
  CHECK("bad id: TOKPOS_ID_OUT_OF_RANGE, output untouched",
        st == TOKPOS_ID_OUT_OF_RANGE && memcmp(keep, out, sizeof out) == 0);
  CHECK("bad id: message names id, (b,t) and V",
        strstr(tokpos_last_error(), "token id 260 at (b=0, t=3) is outside [0, 260)") != NULL);
  ids[3] = 108;
  st = tokpos_compose_forward(out, ids, 1, 10, table, V, pos, 8, D);
  CHECK("T > L: TOKPOS_POSITION_OUT_OF_RANGE naming T and L", st == TOKPOS_POSITION_OUT_OF_RANGE &&
                                                                  strstr(tokpos_last_error(), "T = 10") &&
                                                                  strstr(tokpos_last_error(), "exceed the 8 rows of pos_table"));
  CHECK("status string", strcmp(tokpos_status_string(st), "TOKPOS_POSITION_OUT_OF_RANGE") == 0);
}

static void handle_checks(void) {
  tokpos_composer_options o = tokpos_composer_default_options(V, D, L);
  o.position = TOKPOS_POSITION_LEARNED;
  o.seed = 7;
  tokpos_composer* c = NULL;
  CHECK("composer create", tokpos_composer_create(&c, &o) == TOKPOS_OK && c != NULL);
  CHECK("composer parameter count", tokpos_composer_num_parameters(c) == (int64_t)V * D + (int64_t)L * D);
  int64_t ids[3] = {10, 20, 10};
  float out[3 * D];
  CHECK("composer forward at start 4", tokpos_composer_forward(c, ids, 1, 3, 4, NULL, out) == TOKPOS_OK);
  const float *tok = NULL, *pos = NULL;
  tokpos_composer_token_table(c, &tok);
  tokpos_composer_position_table(c, &pos);
  CHECK("composer forward reads position rows 4..6", out[2 * D + 1] == tok[10 * D + 1] + pos[6 * D + 1]);
  float d_out[3 * D];
  for (int i = 0; i < 3 * D; ++i) d_out[i] = 1.0f;
  int64_t touched = 0, rows[4] = {0, 0, 0, 0}, count = 0;
  CHECK("composer backward",
        tokpos_composer_backward(c, d_out, ids, 1, 3, 4, NULL, &touched) == TOKPOS_OK && touched == 2);
  const float* g = NULL;
  tokpos_composer_token_grad(c, &g);
  CHECK("token grad of id 10 is 2, of id 11 is 0", g[10 * D] == 2.0f && g[11 * D] == 0.0f);
  tokpos_composer_position_grad(c, &g);
  CHECK("position grad at rows 4..6 only", g[4 * D] == 1.0f && g[3 * D] == 0.0f && g[7 * D] == 0.0f);
  tokpos_composer_free(c);

  tokpos_token_embedding* e = NULL;
  CHECK("token embedding from table", tokpos_token_embedding_from_table(&e, table, V, D, 0) == TOKPOS_OK);
  CHECK("token embedding parameters", tokpos_token_embedding_num_parameters(e) == (int64_t)V * D);
  CHECK("token backward", tokpos_token_embedding_backward(e, d_out, ids, 1, 3, &touched) == TOKPOS_OK);
  CHECK("touched rows", tokpos_token_embedding_touched_rows(e, rows, 4, &count) == TOKPOS_OK && count == 2 &&
                            rows[0] == 10 && rows[1] == 20);
  tokpos_token_embedding_free(e);

  tokpos_position_embedding* p = NULL;
  CHECK("sinusoidal handle", tokpos_position_embedding_create_sinusoidal(&p, L, D, 10000.0) == TOKPOS_OK);
  CHECK("sinusoidal has zero parameters", tokpos_position_embedding_num_parameters(p) == 0);
  tokpos_position_embedding_grad(p, &g);
  CHECK("sinusoidal has no gradient", g == NULL);
  tokpos_position_embedding_free(p);
}

static void table_ex_checks(void) {
  float a[16 * 8], b[16 * 8];
  unsigned short h[16 * 8];
  CHECK("table_ex f32 interleaved = tokpos_sinusoidal_table",
        tokpos_sinusoidal_table(a, 16, 8, 10000.0) == TOKPOS_OK &&
            tokpos_sinusoidal_table_ex(b, TOKPOS_DTYPE_F32, 16, 8, 0, TOKPOS_LAYOUT_INTERLEAVED, 10000.0, 1.0, -1) ==
                TOKPOS_OK &&
            memcmp(a, b, sizeof a) == 0);
  CHECK("table_ex f16 ggml", tokpos_sinusoidal_table_ex(h, TOKPOS_DTYPE_F16, 16, 8, 0, TOKPOS_LAYOUT_GGML, 10000.0,
                                                        1.0, -1) == TOKPOS_OK &&
                                 h[0] == 0x3c00 /* cos 0 = 1.0 in binary16 */ && h[4] == 0);
  CHECK("table_ex rejects a bad dtype",
        tokpos_sinusoidal_table_ex(h, (tokpos_dtype)7, 16, 8, 0, TOKPOS_LAYOUT_GGML, 1e4, 1.0, -1) ==
            TOKPOS_INVALID_ARGUMENT);
}

/* RoPE from C: the frequencies of a Llama 3.1 and a proportional scaling, and a rotation of
 * pairs (1, 0), which come out as (cos, sin) of position * inv_freq. */
static void rope_checks(void) {
  tokpos_rope_scaling s;
  double inv[4], af = 0.0;
  tokpos_rope_scaling_init(&s);
  CHECK("rope default frequencies", tokpos_rope_frequencies(inv, &af, 8, 10000.0, &s, 0) == TOKPOS_OK &&
                                        inv[0] == 1.0 && fabs(inv[1] - 0.1) < 1e-15 &&
                                        fabs(inv[3] - 0.001) < 1e-15 && af == 1.0);
  s.type = TOKPOS_ROPE_LLAMA3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  CHECK("rope llama3 without original_max_position_embeddings is an error",
        tokpos_rope_frequencies(inv, &af, 8, 500000.0, &s, 0) == TOKPOS_INVALID_ARGUMENT &&
            strstr(tokpos_last_error(), "original_max_position_embeddings") != NULL);
  tokpos_rope_scaling_init(&s);
  s.type = TOKPOS_ROPE_PROPORTIONAL;
  s.partial_rotary_factor = 0.5;
  CHECK("rope proportional: the first half of the head's frequencies, the rest 0",
        tokpos_rope_frequencies(inv, &af, 8, 10000.0, &s, 0) == TOKPOS_OK && inv[0] == 1.0 &&
            fabs(inv[1] - 0.1) < 1e-15 && inv[2] == 0.0 && inv[3] == 0.0 && af == 1.0);
  s.partial_rotary_factor = 2.0;
  CHECK("rope proportional: partial_rotary_factor 2 is refused by name",
        tokpos_rope_frequencies(inv, &af, 8, 10000.0, &s, 0) == TOKPOS_INVALID_ARGUMENT &&
            strstr(tokpos_last_error(), "partial_rotary_factor = 2 must be in (0, 1]") != NULL);
  {
    float x[3 * 1 * 4] = {1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0}, out[12];
    int64_t pos[3] = {0, 1, 1000000};
    int64_t xshape[3] = {3, 1, 4}, pshape[1] = {3};
    const double freqs[2] = {1.0, 0.01};
    DLTensor xt = {x, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, xshape, NULL, 0};
    DLTensor ot = {out, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, xshape, NULL, 0};
    DLTensor pt = {pos, {kDLCPU, 0}, 1, {kDLInt, 64, 1}, pshape, NULL, 0};
    const tokpos_status st = tokpos_op_apply_rope(&ot, &xt, &pt, freqs, 2, TOKPOS_ROPE_HALF, -1, 1.0, 0);
    CHECK("rope apply", st == TOKPOS_OK);
    CHECK("rope apply: (cos, sin) of p * w", out[0] == 1.0f && out[2] == 0.0f && out[4] == (float)cos(1.0) &&
                                                 out[6] == (float)sin(1.0) && out[9] == (float)cos(10000.0) &&
                                                 out[11] == (float)sin(10000.0));
  }
}

int main(void) {
  fill_table();
  rope_checks();
  lab_checks();
  compose_checks();
  handle_checks();
  table_ex_checks();
  return c_check_summary();
}
