#include <stdio.h>
#include <tokpos/tokpos.h>

int main(void) {
  float table[4 * 2] = {0};
  float out[2 * 2];
  const int64_t ids[2] = {1, 3};
  tokpos_status s = tokpos_embedding_forward(ids, 2, table, 4, 2, 0, out);
  printf("consumer.c: %s, out[1] = %.1f\n", tokpos_status_string(s), out[1]);
  return s == TOKPOS_OK && out[1] == 1.0f ? 0 : 1;
}
