/* student.c: the file you edit. Write the two functions below, then run
 *     make clean && make test
 * TASK.md says what each of the four tests checks. */
#include <math.h>

#include "student.h"

/* One value of the sinusoidal position table:
 *     PE(pos, 2i)   = sin(pos / 10000^(2i / hidden_dim))
 *     PE(pos, 2i+1) = cos(pos / 10000^(2i / hidden_dim))
 * What to write:
 *   1. i = dim / 2 (the pair that dim belongs to; dims 2i and 2i+1 share it);
 *   2. the denominator 10000^(2i / hidden_dim) (compute the exponent in
 *      floating point: 2.0 * i / hidden_dim);
 *   3. sin of pos / denominator when dim is even, cos when it is odd.
 * Check first: at pos = 0 the row is 0, 1, 0, 1, ... */
float student_pe_sinusoidal(int pos, int dim, int hidden_dim) {
  (void)pos;
  (void)dim;
  (void)hidden_dim;
  return 0.0f; /* TODO: replace with the formula above */
}

/* The embedding layer's forward pass, into output[seq_len * hidden_dim]:
 *     output[pos * hidden_dim + d] = token_embedding[id * hidden_dim + d]
 *                                    + student_pe_sinusoidal(pos, d, hidden_dim)
 * where id = token_ids[pos]. What to write:
 *   1. return -1, writing nothing, when token_ids, token_embedding or output is
 *      NULL, when vocab_size or hidden_dim is not positive, or when seq_len is
 *      negative; seq_len 0 returns 0 and writes nothing;
 *   2. an id outside [0, vocab_size) uses row unk_id instead (never read
 *      outside the table);
 *   3. an outer loop over pos, an inner loop over d, writing every value;
 *   4. return 0. */
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
  return 0; /* TODO: write the loops above; this baseline writes nothing */
}
