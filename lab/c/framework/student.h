/* student.h: the two functions of this lab (write them in student.c).
 * student.h：本实验要完成的两个函数（在 student.c 中实现）。 */
#ifndef STUDENT_H
#define STUDENT_H

float student_pe_sinusoidal(int pos, int dim, int hidden_dim);
int student_embedding_forward(const int *token_ids, int seq_len,
                              const float *token_embedding, int vocab_size, int hidden_dim,
                              int unk_id, float *output);

#endif
