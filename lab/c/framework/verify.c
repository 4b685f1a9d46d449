/* verify.c: the four tests of this lab (do not edit). Each test runs in a
 * child process, so a crash in student.c is a FAIL and the other tests run.
 * A test passes only when it reports its own success over a pipe after its
 * checks (an exit() in student.c is a FAIL), and it has 10 s: at that
 * deadline verify kills the test's whole process group. What the student
 * code prints is shown under the test's verdict, each line after "    | ".
 * verify.c：本实验的四个测试（不要修改）。每个测试在子进程中运行，
 * 限时 10 秒；学生代码打印的内容显示在该测试的结果下面，每行以 "    | " 开头。 */
#define _POSIX_C_SOURCE 200809L

#include "verify.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "messages.h"
#include "student.h"

/* The time each test has. VERIFY_TIMEOUT_SECONDS (1 to 3600) changes it, for
 * verify's own tests. */
enum { kTimeoutSeconds = 10, kMaxTimeoutSeconds = 3600 };

/* What a test writes over the result pipe once its checks are done: this tag,
 * '1' (passed) or '0' (failed), a newline, then the detail. */
static const char kDoneTag[] = "verify: test finished: ";

/* At most this much of what the student code prints is shown per test. */
enum { kShownBytes = 4096 };

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

/* Runs the forward pass on ids into output (filled first); 0 when it failed
 * (detail says why: for a value left unwritten, what it should have been, the
 * token's row plus the student's own PE, and the value verify put there). */
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
    const int pos = unwritten / dim, d = unwritten % dim;
    const int id = ids[pos] >= 0 && ids[pos] < vocab ? ids[pos] : unk;
    const double row = (double)table[id * dim + d];
    const double pe = (double)student_pe_sinusoidal(pos, d, dim);
    char what[64];
    snprintf(what, sizeof what, "output[%d * %d + %d]", pos, dim, d);
    say(detail, size, MSG_NOT_WRITTEN, what, row + pe, row, pe, (double)output[unwritten]);
    look_at(detail, size, MSG_LOOK_LOOP);
    return 0;
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
  if (!forward(ids, kLen, table, kVocab, kDim, 0, output, detail, size)) return 0;
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

/* The test's process (and its process group) while it runs, for the signal
 * handler below; 0 when none runs. */
static volatile sig_atomic_t running_test = 0;

/* Ctrl-C (or a kill) of verify also ends the test and what it started. */
static void stop_test_and_die(int sig) {
  const pid_t test = (pid_t)running_test;
  if (test > 0) {
    kill(-test, SIGKILL);
    kill(test, SIGKILL);
    waitpid(test, NULL, 0);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static const int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void set_stop_handlers(void (*handler)(int)) {
  for (size_t k = 0; k < sizeof kStopSignals / sizeof kStopSignals[0]; ++k) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    sigaction(kStopSignals[k], &action, NULL);
  }
}

static int timeout_seconds(void) {
  const char *text = getenv("VERIFY_TIMEOUT_SECONDS");
  if (text == NULL || *text == '\0') return kTimeoutSeconds;
  char *end = NULL;
  errno = 0;
  const long seconds = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || seconds < 1 || seconds > kMaxTimeoutSeconds) return kTimeoutSeconds;
  return (int)seconds;
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A pipe being read: what came in (up to capacity bytes, the rest counted in
 * dropped) and whether its write ends are all closed. */
struct inbox {
  int fd;
  int at_end;
  char *data;
  size_t capacity, used, dropped;
};

static void receive(struct inbox *box) {
  char chunk[4096];
  const ssize_t got = read(box->fd, chunk, sizeof chunk);
  if (got == 0) {
    box->at_end = 1;
  } else if (got > 0) {
    size_t keep = (size_t)got;
    if (keep > box->capacity - box->used) keep = box->capacity - box->used;
    memcpy(box->data + box->used, chunk, keep);
    box->used += keep;
    box->dropped += (size_t)got - keep;
  } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
    box->at_end = 1;
  }
}

/* Waits up to timeout_ms for data on the boxes not at their end and reads
 * what came; returns how many were ready. */
static int receive_some(struct inbox *boxes, int count, int timeout_ms) {
  struct pollfd fds[2];
  int index[2];
  int n = 0;
  for (int k = 0; k < count; ++k) {
    if (boxes[k].at_end) continue;
    fds[n].fd = boxes[k].fd;
    fds[n].events = POLLIN;
    fds[n].revents = 0;
    index[n++] = k;
  }
  if (n == 0) {
    if (timeout_ms > 0) {
      struct timespec pause = {0, (long)timeout_ms * 1000000L};
      nanosleep(&pause, NULL);
    }
    return 0;
  }
  const int ready = poll(fds, (nfds_t)n, timeout_ms);
  if (ready <= 0) return 0;
  for (int k = 0; k < n; ++k)
    if (fds[k].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) receive(&boxes[index[k]]);
  return ready;
}

/* Prints what the student code printed, each line after "    | ", with
 * control characters shown as '?', so that no line of it can pass for one
 * of verify's own. */
static void show_printed(const struct inbox *printed) {
  if (printed->used == 0 && printed->dropped == 0) return;
  printf("    %s\n", MSG_PRINTED);
  int line_start = 1;
  for (size_t k = 0; k < printed->used; ++k) {
    const unsigned char c = (unsigned char)printed->data[k];
    if (line_start) fputs("    | ", stdout);
    line_start = c == '\n';
    putchar(c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f) ? c : '?');
  }
  if (!line_start) putchar('\n');
  if (printed->dropped > 0) printf("    | " MSG_NOT_SHOWN "\n", (unsigned long)printed->dropped);
}

static void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/* The test's own process: its own process group, its output into printed_fd,
 * and its result, once the checks are done, into result_fd. */
static void run_test_child(verify_test test, int result_fd, int printed_fd, int seconds) {
  setpgid(0, 0);
  for (size_t k = 0; k < sizeof kStopSignals / sizeof kStopSignals[0]; ++k) signal(kStopSignals[k], SIG_DFL);
  dup2(printed_fd, STDOUT_FILENO);
  dup2(printed_fd, STDERR_FILENO);
  if (printed_fd != STDOUT_FILENO && printed_fd != STDERR_FILENO) close(printed_fd);
  setvbuf(stdout, NULL, _IONBF, 0); /* a printf just before a crash still shows */
  alarm((unsigned)seconds);         /* verify kills it at the deadline too */
  char detail[1024] = "";
  const int ok = test(detail, sizeof detail);
  fflush(stdout);
  fflush(stderr);
  char record[sizeof kDoneTag + 2 + sizeof detail];
  const int n = snprintf(record, sizeof record, "%s%c\n%s", kDoneTag, ok ? '1' : '0', detail);
  /* One write of less than PIPE_BUF bytes: all of it arrives or none. */
  if (n > 0 && write(result_fd, record, (size_t)n) != n) _exit(3);
  _exit(0);
}

int verify_run(int number, const char *what, const char *where, verify_test test) {
  const int seconds = timeout_seconds();
  char detail[1024] = "";
  int passed = 0;
  int result_pipe[2], printed_pipe[2];
  char result_data[sizeof kDoneTag + 2 + sizeof detail];
  static char printed_data[kShownBytes];
  struct inbox boxes[2] = {{-1, 0, result_data, sizeof result_data, 0, 0},
                           {-1, 0, printed_data, sizeof printed_data, 0, 0}};
  fflush(stdout);
  fflush(stderr);
  pid_t child = -1;
  if (pipe(result_pipe) == 0) {
    if (pipe(printed_pipe) == 0) {
      child = fork();
      if (child < 0) {
        close(printed_pipe[0]);
        close(printed_pipe[1]);
      }
    }
    if (child < 0) {
      close(result_pipe[0]);
      close(result_pipe[1]);
    }
  }
  if (child == 0) {
    close(result_pipe[0]);
    close(printed_pipe[0]);
    run_test_child(test, result_pipe[1], printed_pipe[1], seconds);
  }
  if (child < 0) {
    snprintf(detail, sizeof detail, "%s", MSG_NO_CHILD);
  } else {
    setpgid(child, child); /* as the child does, so that the group exists for kill() below */
    running_test = (sig_atomic_t)child;
    close(result_pipe[1]);
    close(printed_pipe[1]);
    boxes[0].fd = result_pipe[0];
    boxes[1].fd = printed_pipe[0];
    set_nonblocking(boxes[0].fd);
    set_nonblocking(boxes[1].fd);
    /* Read both pipes until the test's process ends or the deadline comes. */
    const long long deadline = now_ms() + 1000LL * seconds;
    int ended = 0, timed_out = 0;
    for (;;) {
      siginfo_t info;
      memset(&info, 0, sizeof info);
      /* WNOWAIT: the ended process stays a zombie, so its process group
       * cannot be reused before the kill() below. */
      if (waitid(P_PID, (id_t)child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == child) {
        ended = 1;
        break;
      }
      const long long left = deadline - now_ms();
      if (left <= 0) {
        timed_out = 1;
        break;
      }
      receive_some(boxes, 2, left < 20 ? (int)left : 20);
    }
    /* What the ended test wrote is in the pipes now. A pipe that is still
     * open has a writer left: a process the student code started. */
    int left_running = 0;
    if (ended) {
      for (int round = 0; round < 64 && receive_some(boxes, 2, 0) > 0; ++round) {
      }
      left_running = !boxes[0].at_end || !boxes[1].at_end;
    }
    kill(-child, SIGKILL);
    kill(child, SIGKILL);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    running_test = 0;
    close(boxes[0].fd);
    close(boxes[1].fd);
    const size_t tag = sizeof kDoneTag - 1;
    const int reported = boxes[0].used >= tag + 2 && boxes[0].dropped == 0 &&
                         memcmp(result_data, kDoneTag, tag) == 0 &&
                         (result_data[tag] == '1' || result_data[tag] == '0') && result_data[tag + 1] == '\n';
    char number_text[16];
    if (timed_out || (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)) {
      snprintf(detail, sizeof detail, MSG_TIMEOUT, seconds);
      look_at(detail, sizeof detail, where);
    } else if (WIFSIGNALED(status)) {
      snprintf(detail, sizeof detail, MSG_SIGNAL, signal_name(WTERMSIG(status), number_text, sizeof number_text));
      look_at(detail, sizeof detail, where);
    } else if (left_running) {
      snprintf(detail, sizeof detail, "%s", MSG_LEFT_RUNNING);
      look_at(detail, sizeof detail, where);
    } else if (!reported || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      snprintf(detail, sizeof detail, MSG_EXITED, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      look_at(detail, sizeof detail, where);
    } else {
      passed = result_data[tag] == '1';
      const size_t n = boxes[0].used - tag - 2;
      memcpy(detail, result_data + tag + 2, n < sizeof detail ? n : sizeof detail - 1);
      detail[n < sizeof detail ? n : sizeof detail - 1] = '\0';
    }
  }
  printf("[TEST %d] %s ... %s\n", number, what, passed ? "[PASS]" : "[FAIL]");
  if (!passed && detail[0] != '\0') printf("    %s\n", detail);
  show_printed(&boxes[1]);
  fflush(stdout);
  return passed;
}

int main(void) {
  set_stop_handlers(stop_test_and_die);
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
