/* verify.h: the test runner of this lab (do not edit).
 * verify.h：本实验的测试程序（不要修改）。 */
#ifndef VERIFY_H
#define VERIFY_H

#include <stddef.h>

/* A test writes what went wrong into detail (at most size bytes) and returns
 * 1 when it passes, 0 when it fails. */
typedef int (*verify_test)(char *detail, size_t size);

/* Runs one test in a child process of its own process group and prints its
 * [TEST n] line (and, on a FAIL, what went wrong; on a crash, an exit before
 * the test's end, a process left running or a timeout, `where` to look),
 * then what the test printed, each line after "    | ". The test passes only
 * when it reports its success over a pipe after its checks; at the deadline
 * (10 s) the whole process group is killed. Returns 1 when it passed. */
int verify_run(int number, const char *what, const char *where, verify_test test);

#endif
