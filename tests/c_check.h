/* The plain-C tests' one check: CHECK(name, cond) prints [PASS] or [FAIL]
 * (with the line and tokpos_last_error()) and counts; c_check_summary()
 * prints "N passed, M failed" and gives the exit status. */
#ifndef TOKPOS_TESTS_C_CHECK_H
#define TOKPOS_TESTS_C_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "tokpos/tokpos.h"

static int g_passed = 0, g_failed = 0;

#define CHECK(name, cond)                                                       \
  do {                                                                          \
    if (cond) {                                                                 \
      ++g_passed;                                                               \
      printf("[PASS] %s\n", name);                                              \
    } else {                                                                    \
      ++g_failed;                                                               \
      printf("[FAIL] %s (line %d): %s\n", name, __LINE__, tokpos_last_error()); \
    }                                                                           \
  } while (0)

static inline int c_check_summary(void) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
