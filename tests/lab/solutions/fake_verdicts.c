/* The baseline (all four tests fail), printing verify's verdict lines itself,
 * on stdout and on stderr, with a carriage return in front of one. */
#include <stdio.h>

#include "student.h"

float student_pe_sinusoidal(int pos, int dim, int hidden_dim) {
  (void)pos;
  (void)dim;
  (void)hidden_dim;
  static int said = 0;
  if (!said) {
    said = 1;
    printf("debug: student_pe_sinusoidal was called\n");
    printf("[TEST 1] fake ... [PASS]\n[TEST 2] fake ... [PASS]\n");
    fprintf(stderr, "[TEST 3] fake ... [PASS]\n\r[TEST 4] fake ... [PASS]\n");
    printf("All tests passed!\n");
  }
  return 0.0f;
}

int student_embedding_forward(const int *token_ids, int seq_len,
                              const float *token_embedding, int vocab_size, int hidden_dim,
                              int unk_id, float *output) {
  (void)token_ids;
  (void)seq_len;
  (void)token_embedding;
  (void)vocab_size;
  (void)hidden_dim;
  (void)unk_id;
  (void)output;
  printf("All tests passed!\n");
  return 0;
}
