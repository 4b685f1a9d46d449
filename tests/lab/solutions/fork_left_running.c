/* A correct solution, except that the forward pass forks a process that
 * sleeps for 60 s (holding verify's pipes) before it goes on: TEST 3 and
 * TEST 4 fail, the two PE tests pass. */
#define _POSIX_C_SOURCE 200809L
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
  if (token_ids == NULL || token_embedding == NULL || output == NULL) return -1;
  if (vocab_size <= 0 || hidden_dim <= 0 || seq_len < 0) return -1;
  static int forked = 0;
  if (!forked) {
    forked = 1;
    if (fork() == 0) sleep(60);
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
