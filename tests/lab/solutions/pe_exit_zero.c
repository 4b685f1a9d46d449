/* student_pe_sinusoidal calls exit(0) (the forward pass is right): every test
 * ends before it finishes, so all four fail. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "student.h"

float student_pe_sinusoidal(int pos, int dim, int hidden_dim) {
  (void)pos;
  (void)dim;
  (void)hidden_dim;
  exit(0);
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
