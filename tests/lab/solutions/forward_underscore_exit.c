/* The forward pass calls _exit(0) before writing anything (the PE is right):
 * TEST 3 and TEST 4 end before they finish and fail. */
#include <math.h>
#include <stddef.h>
#include <unistd.h>

#include "student.h"

float student_pe_sinusoidal(int pos, int dim, int hidden_dim) {
  const int i = dim / 2;
  const double angle = pos / pow(10000.0, 2.0 * i / hidden_dim);
  return (float)(dim % 2 == 0 ? sin(angle) : cos(angle));
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
  _exit(0);
}
