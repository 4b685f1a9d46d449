/* student.c：你要修改的文件。完成下面两个函数，然后运行
 *     make clean && make test
 * 四个测试分别检查什么，见 TASK.md。 */
#include <math.h>

#include "student.h"

/* 正弦位置编码表中的一个值：
 *     PE(pos, 2i)   = sin(pos / 10000^(2i / hidden_dim))
 *     PE(pos, 2i+1) = cos(pos / 10000^(2i / hidden_dim))
 * 需要写的内容：
 *   1. i = dim / 2（dim 所在的那一对；第 2i 维和第 2i+1 维共用同一个 i）；
 *   2. 分母 10000^(2i / hidden_dim)（指数用浮点数计算：2.0 * i / hidden_dim）；
 *   3. dim 为偶数时取 sin(pos / 分母)，为奇数时取 cos(pos / 分母)。
 * 先检查：pos = 0 时这一行是 0, 1, 0, 1, ... */
float student_pe_sinusoidal(int pos, int dim, int hidden_dim) {
  (void)pos;
  (void)dim;
  (void)hidden_dim;
  return 0.0f; /* TODO：换成上面的公式 */
}

/* embedding 层的前向传播，写入 output[seq_len * hidden_dim]：
 *     output[pos * hidden_dim + d] = token_embedding[id * hidden_dim + d]
 *                                    + student_pe_sinusoidal(pos, d, hidden_dim)
 * 其中 id = token_ids[pos]。需要写的内容：
 *   1. token_ids、token_embedding 或 output 为 NULL，vocab_size 或 hidden_dim
 *      不是正数，或 seq_len 为负数时，返回 -1，什么也不写；seq_len 为 0 时
 *      返回 0，什么也不写；
 *   2. 不在 [0, vocab_size) 内的 id 改用第 unk_id 行（绝不读表外的内存）；
 *   3. 外层按 pos 循环，内层按 d 循环，写出每一个值；
 *   4. 返回 0。 */
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
  return 0; /* TODO：写出上面的循环；这个基线什么也不写 */
}
