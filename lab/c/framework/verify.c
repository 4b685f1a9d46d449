/* verify.c: the four tests of this lab (do not edit). Each test runs in a
 * child process, so a crash in student.c is a FAIL and the other tests run.
 * verify.c：本实验的四个测试（不要修改）。每个测试在子进程中运行。 */
#define _POSIX_C_SOURCE 200809L

#include "verify.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "messages.h"
#include "student.h"

enum { kTimeoutSeconds = 10 };

/* The value verify writes into output before each call, to see what the
 * student's code wrote. */
static const float kFill = -12345.0f;
/* The rows around the token table: reading outside the table reads these. */
static const float kGuard = 1.0e6f;

static void say(char *detail, size_t size, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(detail, size, format, args);
  va_end(args);
}

/* Appends "\n    look at: ..." to detail. */
static void look_at(char *detail, size_t size, const char *where) {
  size_t used = strlen(detail);
  if (used + 1 < size) snprintf(detail + used, size - used, "\n    %s%s", MSG_LOOK, where);
}

static int close_to(double got, double expected, double tolerance) {
  return fabs(got - expected) <= tolerance; /* false for NaN */
}

static double formula(int pos, int dim, int hidden_dim) {
  const int i = dim / 2;
  const double angle = pos / pow(10000.0, 2.0 * i / hidden_dim);
  return dim % 2 == 0 ? sin(angle) : cos(angle);
}

/* The token table's value at (id, d): distinct, small, not a PE value. */
static float token_value(int id, int d) { return (float)(((id * 37 + d * 11) % 23) - 11) / 16.0f; }

/* A table of vocab rows with one guard row before and after it; returns the
 * first real row. */
static float *make_table(float *storage, int vocab, int hidden_dim) {
  for (int d = 0; d < hidden_dim; ++d) storage[d] = kGuard;
  float *table = storage + hidden_dim;
  for (int id = 0; id < vocab; ++id)
    for (int d = 0; d < hidden_dim; ++d) table[id * hidden_dim + d] = token_value(id, d);
  for (int d = 0; d < hidden_dim; ++d) table[vocab * hidden_dim + d] = kGuard;
  return table;
}

static void fill(float *output, int n) {
  for (int k = 0; k < n; ++k) output[k] = kFill;
}

/* The first value of output that was not written, or -1. */
static int first_unwritten(const float *output, int n) {
  for (int k = 0; k < n; ++k)
    if (output[k] == kFill) return k;
  return -1;
}

/* TEST 1: pos = 0 gives 0 at every even dim and 1 at every odd dim. */
static int test_pos_zero(char *detail, size_t size) {
  static const int widths[] = {8, 64, 512};
  for (int w = 0; w < 3; ++w) {
    for (int d = 0; d < widths[w]; ++d) {
      const float got = student_pe_sinusoidal(0, d, widths[w]);
      const double expected = d % 2 == 0 ? 0.0 : 1.0;
      if (!close_to(got, expected, 1e-6)) {
        char call[96];
        snprintf(call, sizeof call, "student_pe_sinusoidal(0, %d, %d)", d, widths[w]);
        say(detail, size, MSG_GOT, call, expected, (double)got);
        look_at(detail, size, MSG_LOOK1);
        return 0;
      }
    }
  }
  return 1;
}

/* TEST 2: PE(1, 0) = sin 1, PE(1, 1) = cos 1 within 1e-6, and every value of
 * a 64 x 64 table within 1e-5 of the formula evaluated in double. */
static int test_formula(char *detail, size_t size) {
  enum { kSize = 64 };
  char call[96];
  const struct { int dim; double expected; } first[] = {{0, sin(1.0)}, {1, cos(1.0)}};
  for (int k = 0; k < 2; ++k) {
    const float got = student_pe_sinusoidal(1, first[k].dim, kSize);
    if (!close_to(got, first[k].expected, 1e-6)) {
      snprintf(call, sizeof call, "student_pe_sinusoidal(1, %d, %d)", first[k].dim, kSize);
      say(detail, size, MSG_GOT, call, first[k].expected, (double)got);
      look_at(detail, size, MSG_LOOK2);
      return 0;
    }
  }
  for (int pos = 0; pos < kSize; ++pos) {
    for (int d = 0; d < kSize; ++d) {
      const float got = student_pe_sinusoidal(pos, d, kSize);
      const double expected = formula(pos, d, kSize);
      if (!close_to(got, expected, 1e-5)) {
        snprintf(call, sizeof call, "student_pe_sinusoidal(%d, %d, %d)", pos, d, kSize);
        say(detail, size, MSG_GOT, call, expected, (double)got);
        look_at(detail, size, MSG_LOOK2);
        return 0;
      }
    }
  }
  return 1;
}

/* TEST 3: one token at positions 0 .. 5: every value is the token's row plus
 * the student's own PE (so a wrong PE fails TEST 1 or 2, not this one), and
 * the rows differ. */
static int test_positions(char *detail, size_t size) {
  enum { kVocab = 10, kDim = 16, kLen = 6, kToken = 3 };
  float storage[(kVocab + 2) * kDim];
  const float *table = make_table(storage, kVocab, kDim);
  const int ids[kLen] = {kToken, kToken, kToken, kToken, kToken, kToken};
  float output[kLen * kDim];
  fill(output, kLen * kDim);
  const int rc = student_embedding_forward(ids, kLen, table, kVocab, kDim, 0, output);
  if (rc != 0) {
    say(detail, size, MSG_RETURNED, "student_embedding_forward", rc, 0);
    look_at(detail, size, MSG_LOOK4);
    return 0;
  }
  const int unwritten = first_unwritten(output, kLen * kDim);
  if (unwritten >= 0) {
    say(detail, size, MSG_NOT_WRITTEN, unwritten);
    look_at(detail, size, MSG_LOOK_LOOP);
    return 0;
  }
  for (int pos = 0; pos < kLen; ++pos) {
    for (int d = 0; d < kDim; ++d) {
      const double expected = (double)table[kToken * kDim + d] + (double)student_pe_sinusoidal(pos, d, kDim);
      const float got = output[pos * kDim + d];
      if (!close_to(got, expected, 1e-6)) {
        char what[64];
        snprintf(what, sizeof what, "output[%d * %d + %d]", pos, kDim, d);
        say(detail, size, MSG_GOT, what, expected, (double)got);
        look_at(detail, size, MSG_LOOK3);
        return 0;
      }
    }
  }
  for (int pos = 1; pos < kLen; ++pos) {
    if (memcmp(output, output + pos * kDim, sizeof(float) * kDim) == 0) {
      say(detail, size, MSG_SAME_ROWS, 0, pos);
      look_at(detail, size, MSG_LOOK3);
      return 0;
    }
  }
  return 1;
}

/* Runs the forward pass on ids into output (filled first); 0 when it failed
 * (detail says why). */
static int forward(const int *ids, int len, const float *table, int vocab, int dim, int unk, float *output,
                   char *detail, size_t size) {
  fill(output, len * dim);
  const int rc = student_embedding_forward(ids, len, table, vocab, dim, unk, output);
  if (rc != 0) {
    say(detail, size, MSG_RETURNED, "student_embedding_forward", rc, 0);
    look_at(detail, size, MSG_LOOK4);
    return 0;
  }
  const int unwritten = first_unwritten(output, len * dim);
  if (unwritten >= 0) {
    say(detail, size, MSG_NOT_WRITTEN, unwritten);
    look_at(detail, size, MSG_LOOK_LOOP);
    return 0;
  }
  return 1;
}

/* One call that must return -1 and write nothing. */
static int refuses(const char *call, const int *ids, int len, const float *table, int vocab, int dim,
                   float *output, float *watched, char *detail, size_t size) {
  enum { kWatched = 64 };
  fill(watched, kWatched);
  const int rc = student_embedding_forward(ids, len, table, vocab, dim, 0, output);
  if (rc != -1) {
    say(detail, size, MSG_RETURNED, call, rc, -1);
    look_at(detail, size, MSG_LOOK4);
    return 0;
  }
  for (int k = 0; k < kWatched; ++k) {
    if (watched[k] != kFill) {
      say(detail, size, MSG_TOUCHED, call, k);
      look_at(detail, size, MSG_LOOK4);
      return 0;
    }
  }
  return 1;
}

/* TEST 4: different tokens at one position give different rows, apart by
 * exactly their token rows' difference (whatever the position adds); ids -1
 * and vocab_size give the UNK row's output; a NULL pointer or a bad size
 * returns -1 and leaves output untouched; seq_len 0 writes nothing. */
static int test_tokens(char *detail, size_t size) {
  enum { kVocab = 10, kDim = 16, kLen = 6, kUnk = 1 };
  float storage[(kVocab + 2) * kDim];
  const float *table = make_table(storage, kVocab, kDim);
  const int x[kLen] = {2, 3, 4, 5, 6, 7};
  const int y[kLen] = {7, 6, 5, 4, 3, 2};
  float out_x[kLen * kDim], out_y[kLen * kDim];
  if (!forward(x, kLen, table, kVocab, kDim, kUnk, out_x, detail, size)) return 0;
  if (!forward(y, kLen, table, kVocab, kDim, kUnk, out_y, detail, size)) return 0;
  char what[96];
  for (int pos = 0; pos < kLen; ++pos) {
    for (int d = 0; d < kDim; ++d) {
      const double expected = (double)table[x[pos] * kDim + d] - (double)table[y[pos] * kDim + d];
      const double got = (double)out_x[pos * kDim + d] - (double)out_y[pos * kDim + d];
      if (!close_to(got, expected, 1e-5)) {
        snprintf(what, sizeof what, "output[%d * %d + %d] (id %d) - same for id %d", pos, kDim, d, x[pos], y[pos]);
        say(detail, size, MSG_GOT, what, expected, got);
        look_at(detail, size, MSG_LOOK4);
        return 0;
      }
    }
  }
  const int unk[3] = {kUnk, kUnk, kUnk};
  const int out_of_range[3] = {-1, kVocab, kUnk};
  float out_unk[3 * kDim], out_oor[3 * kDim];
  if (!forward(unk, 3, table, kVocab, kDim, kUnk, out_unk, detail, size)) return 0;
  if (!forward(out_of_range, 3, table, kVocab, kDim, kUnk, out_oor, detail, size)) return 0;
  for (int pos = 0; pos < 3; ++pos) {
    for (int d = 0; d < kDim; ++d) {
      const float expected = out_unk[pos * kDim + d];
      const float got = out_oor[pos * kDim + d];
      if (!close_to(got, expected, 1e-6)) {
        snprintf(what, sizeof what, "output[%d * %d + %d] for id %d (unk_id %d)", pos, kDim, d,
                 out_of_range[pos], kUnk);
        say(detail, size, MSG_GOT, what, (double)expected, (double)got);
        look_at(detail, size, MSG_LOOK4);
        return 0;
      }
    }
  }
  float output[64];
  if (!refuses("student_embedding_forward(NULL ids)", NULL, 2, table, kVocab, kDim, output, output, detail, size) ||
      !refuses("student_embedding_forward(NULL token_embedding)", x, 2, NULL, kVocab, kDim, output, output, detail,
               size) ||
      !refuses("student_embedding_forward(NULL output)", x, 2, table, kVocab, kDim, NULL, output, detail, size) ||
      !refuses("student_embedding_forward(vocab_size 0)", x, 2, table, 0, kDim, output, output, detail, size) ||
      !refuses("student_embedding_forward(hidden_dim 0)", x, 2, table, kVocab, 0, output, output, detail, size) ||
      !refuses("student_embedding_forward(seq_len -1)", x, -1, table, kVocab, kDim, output, output, detail, size))
    return 0;
  fill(output, 64);
  const int rc = student_embedding_forward(x, 0, table, kVocab, kDim, kUnk, output);
  if (rc != 0) {
    say(detail, size, MSG_RETURNED, "student_embedding_forward(seq_len 0)", rc, 0);
    look_at(detail, size, MSG_LOOK4);
    return 0;
  }
  for (int k = 0; k < 64; ++k) {
    if (output[k] != kFill) {
      say(detail, size, MSG_TOUCHED, "student_embedding_forward(seq_len 0)", k);
      look_at(detail, size, MSG_LOOK4);
      return 0;
    }
  }
  return 1;
}

static const char *signal_name(int sig, char *buffer, size_t size) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (segmentation fault: a read or write outside valid memory)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGFPE: return "SIGFPE (arithmetic error, e.g. an integer division by zero)";
    case SIGABRT: return "SIGABRT (abort)";
    case SIGILL: return "SIGILL (illegal instruction)";
    default: snprintf(buffer, size, "%d", sig); return buffer;
  }
}

int verify_run(int number, const char *what, const char *where, verify_test test) {
  char detail[1024] = "";
  int passed = 0;
  int channel[2];
  fflush(stdout);
  fflush(stderr);
  pid_t child = -1;
  if (pipe(channel) == 0) {
    child = fork();
    if (child < 0) {
      close(channel[0]);
      close(channel[1]);
    }
  }
  if (child == 0) {
    close(channel[0]);
    alarm(kTimeoutSeconds);
    const int ok = test(detail, sizeof detail);
    const size_t n = strlen(detail);
    if (write(channel[1], detail, n) != (ssize_t)n) _exit(3);
    fflush(stdout);
    _exit(ok ? 0 : 1);
  }
  if (child < 0) {
    snprintf(detail, sizeof detail, "%s", MSG_NO_CHILD);
  } else {
    close(channel[1]);
    size_t used = 0;
    ssize_t got;
    while ((got = read(channel[0], detail + used, sizeof detail - 1 - used)) > 0) used += (size_t)got;
    detail[used] = '\0';
    close(channel[0]);
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
    }
    if (WIFEXITED(status)) {
      passed = WEXITSTATUS(status) == 0;
    } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
      snprintf(detail, sizeof detail, MSG_TIMEOUT, kTimeoutSeconds);
      look_at(detail, sizeof detail, where);
    } else if (WIFSIGNALED(status)) {
      char number_text[16];
      snprintf(detail, sizeof detail, MSG_SIGNAL, signal_name(WTERMSIG(status), number_text, sizeof number_text));
      look_at(detail, sizeof detail, where);
    }
  }
  printf("[TEST %d] %s ... %s\n", number, what, passed ? "[PASS]" : "[FAIL]");
  if (!passed && detail[0] != '\0') printf("    %s\n", detail);
  fflush(stdout);
  return passed;
}

int main(void) {
  int failed = 0;
  failed += !verify_run(1, MSG_TEST1, MSG_LOOK1, test_pos_zero);
  failed += !verify_run(2, MSG_TEST2, MSG_LOOK2, test_formula);
  failed += !verify_run(3, MSG_TEST3, MSG_LOOK3, test_positions);
  failed += !verify_run(4, MSG_TEST4, MSG_LOOK4, test_tokens);
  if (failed == 0) {
    printf("%s\n", MSG_ALL_PASSED);
    return 0;
  }
  printf(MSG_SOME_FAILED "\n", failed);
  return 1;
}
