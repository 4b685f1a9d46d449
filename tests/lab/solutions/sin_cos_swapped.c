/* cos at even dims and sin at odd ones: TEST 1 and TEST 2 fail. */
#include <math.h>
#include <stddef.h>

#include "student.h"

float student_pe_sinusoidal(int pos, int dim, int hidden_dim) {
  const int i = dim / 2;
  const double angle = pos / pow(10000.0, 2.0 * i / hidden_dim);
  return (float)(dim % 2 == 0 ? cos(angle) : sin(angle));
}

int student_embedding_forward(const int *token_ids, int seq_len,
                              const float *token_embedding, int vocab_size, int hidden_dim,
                              int unk_id, float *output) {
  if (token_ids == NULL || token_embedding == NULL || output == NULL) return -1;
  if (vocab_size <= 0 || hidden_dim <= 0 || seq_len < 0) return -1;
  for (int pos = 0; pos < seq_len; ++pos) {
    int id = token_ids[pos];
    if (id < 0 || id >= vocab_size) id = unk_id;
    for (int d = 0; d < hidden_dim; ++d) {
      output[pos * hidden_dim + d] = token_embedding[id * hidden_dim + d] + student_pe_sinusoidal(pos, d, hidden_dim);
    }
  }
  return 0;
}
