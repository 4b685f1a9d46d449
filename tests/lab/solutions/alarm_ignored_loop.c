/* A correct solution, except that the forward pass ignores SIGALRM and loops
 * for ever on TEST 3's input (token 3 at position 0): TEST 3 runs out of time,
 * the other three pass. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stddef.h>

#include "student.h"

float student_pe_sinusoidal(int pos, int dim, int hidden_dim) {
  const int i = dim / 2;
  const double angle = pos / pow(10000.0, 2.0 * i / hidden_dim);
  return (float)(dim % 2 == 0 ? sin(angle) : cos(angle));
}

int student_embedding_forward(const int *token_ids, int seq_len,
                              const float *token_embedding, int vocab_size, int hidden_dim,
                              int unk_id, float *output) {
  if (token_ids == NULL || token_embedding == NULL || output == NULL) return -1;
  if (vocab_size <= 0 || hidden_dim <= 0 || seq_len < 0) return -1;
  if (seq_len > 0 && token_ids[0] == 3) {
    signal(SIGALRM, SIG_IGN);
    for (volatile int spin = 0;; spin = spin + 1) {
    }
  }
  for (int pos = 0; pos < seq_len; ++pos) {
    int id = token_ids[pos];
    if (id < 0 || id >= vocab_size) id = unk_id;
    for (int d = 0; d < hidden_dim; ++d) {
      output[pos * hidden_dim + d] = token_embedding[id * hidden_dim + d] + student_pe_sinusoidal(pos, d, hidden_dim);
    }
  }
  return 0;
}
