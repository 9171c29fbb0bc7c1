/*
 * check.h - the few macros the C tests share.
 *
 * A failed CHECK prints file:line and the expression and the test goes on;
 * check_done() prints "N passed, N failed" and gives automake's exit code
 * (0 pass, 1 fail). REQUIRE stops at once with 99 (a hard error: the test
 * itself cannot go on). Exit 77 (skip) is the test's own business.
 */
#ifndef DLPACKSHIM_TEST_CHECK_H
#define DLPACKSHIM_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpackshim.h"

static int check_passed, check_failed;

#define CHECK(expr)                                                           \
  do {                                                                        \
    if (expr) {                                                               \
      check_passed++;                                                         \
    } else {                                                                  \
      check_failed++;                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #expr); \
    }                                                                         \
  } while (0)

/* Integers, printing both values when they differ. */
#define CHECK_EQ(a, b)                                                          \
  do {                                                                          \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);             \
    if (check_a_ == check_b_) {                                                 \
      check_passed++;                                                           \
    } else {                                                                    \
      check_failed++;                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, \
              __LINE__, #a, #b, check_a_, check_b_);                            \
    }                                                                           \
  } while (0)

/* A string containing a fragment (messages must name the field and value). */
#define CHECK_HAS(str, frag)                                                      \
  do {                                                                            \
    const char *check_s_ = (str);                                                 \
    if (check_s_ && strstr(check_s_, (frag))) {                                   \
      check_passed++;                                                             \
    } else {                                                                      \
      check_failed++;                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s contains \"%s\" (it is \"%s\")\n", \
              __FILE__, __LINE__, #str, (frag), check_s_ ? check_s_ : "(null)");   \
    }                                                                             \
  } while (0)

/* A call that fails with `status` and a last error naming `frag`. */
#define CHECK_FAILS(call, status, frag)                                      \
  do {                                                                       \
    dlpackshim_clear_error();                                                \
    long long check_rc_ = (long long)(call);                                 \
    CHECK_EQ(check_rc_, (status));                                           \
    CHECK_EQ(dlpackshim_last_status(), (status));                            \
    CHECK_HAS(dlpackshim_last_error(), (frag));                              \
  } while (0)

/* A call returning a pointer that fails: NULL, `status` and `frag`. */
#define CHECK_FAILS_NULL(call, status, frag)       \
  do {                                             \
    dlpackshim_clear_error();                      \
    CHECK((call) == NULL);                         \
    CHECK_EQ(dlpackshim_last_status(), (status));  \
    CHECK_HAS(dlpackshim_last_error(), (frag));    \
  } while (0)

/* A call that succeeds, showing the library's message when it does not. */
#define CHECK_OK(call)                                                                  \
  do {                                                                                  \
    long long check_rc_ = (long long)(call);                                            \
    if (check_rc_ == 0) {                                                               \
      check_passed++;                                                                   \
    } else {                                                                            \
      check_failed++;                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s returned %lld: %s\n", __FILE__, __LINE__, \
              #call, check_rc_, dlpackshim_last_error());                               \
    }                                                                                   \
  } while (0)

#define REQUIRE(expr)                                                              \
  do {                                                                             \
    if (!(expr)) {                                                                 \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s (cannot go on)\n", __FILE__, __LINE__, \
              #expr);                                                              \
      exit(99);                                                                    \
    }                                                                              \
  } while (0)

static inline int check_done(const char *name) {
  printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
  return check_failed ? 1 : 0;
}

#endif /* DLPACKSHIM_TEST_CHECK_H */
