/*
 * test_error.c - status strings and the thread-local last error (error.c,
 * linked in directly so shim_fail itself can be driven).
 */
#include <pthread.h>

#include "check.h"
#include "internal.h"

static void test_strerror_names_every_status(void) {
  const char *seen[14];
  for (int s = 0; s >= DLPACKSHIM_ERR_PYTHON; s--) {
    const char *msg = dlpackshim_strerror(s);
    CHECK(msg != NULL && msg[0] != '\0');
    CHECK(strstr(msg, "unknown") == NULL);
    for (int k = 0; k < -s; k++) CHECK(strcmp(seen[k], msg) != 0); /* all distinct */
    seen[-s] = msg;
  }
  CHECK_HAS(dlpackshim_strerror(DLPACKSHIM_ERR_INVALID_TENSOR), "tensor");
  CHECK_HAS(dlpackshim_strerror(1), "unknown");
  CHECK_HAS(dlpackshim_strerror(-14), "unknown");
  CHECK_HAS(dlpackshim_strerror(-2147483647 - 1), "unknown");
}

static void test_fresh_thread_has_no_error(void) {
  CHECK_EQ(dlpackshim_last_status(), 0);
  CHECK(strcmp(dlpackshim_last_error(), "") == 0);
}

static void test_fail_records_status_and_message(void) {
  CHECK_EQ(shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "shape[%d] is %d", 2, -3),
           DLPACKSHIM_ERR_INVALID_TENSOR);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_INVALID_TENSOR);
  CHECK(strcmp(dlpackshim_last_error(), "shape[2] is -3") == 0);
  CHECK(shim_fail_null(DLPACKSHIM_ERR_NO_MEMORY, "out of %s", "memory") == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_MEMORY);
  CHECK(strcmp(dlpackshim_last_error(), "out of memory") == 0);
}

static void test_clear_error_forgets(void) {
  shim_fail(DLPACKSHIM_ERR_TYPE, "x");
  dlpackshim_clear_error();
  CHECK_EQ(dlpackshim_last_status(), 0);
  CHECK(strcmp(dlpackshim_last_error(), "") == 0);
}

static void test_long_message_is_truncated_not_overflowed(void) {
  char big[2000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s", big);
  size_t n = strlen(dlpackshim_last_error());
  CHECK(n > 400 && n < 512);
  CHECK(dlpackshim_last_error()[0] == 'a');
}

static void test_last_error_copy_fills_the_callers_buffer(void) {
  char buf[DLPACKSHIM_ERROR_MAX];
  shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "shape[%d] is %d", 1, -7);
  memset(buf, 'x', sizeof buf);
  CHECK_EQ(dlpackshim_last_error_copy(buf, sizeof buf), strlen("shape[1] is -7"));
  CHECK(strcmp(buf, "shape[1] is -7") == 0);
  /* Cut to size - 1 and terminated; the return says how long it was. */
  memset(buf, 'x', sizeof buf);
  CHECK_EQ(dlpackshim_last_error_copy(buf, 6), 14);
  CHECK(strcmp(buf, "shape") == 0 && buf[6] == 'x');
  CHECK_EQ(dlpackshim_last_error_copy(buf, 1), 14);
  CHECK(buf[0] == '\0' && buf[1] == 'h');
  /* Nothing is written without room; NULL is fine. */
  buf[0] = 'x';
  CHECK_EQ(dlpackshim_last_error_copy(buf, 0), 14);
  CHECK(buf[0] == 'x');
  CHECK_EQ(dlpackshim_last_error_copy(NULL, 100), 14);
  /* The longest message fits a buffer of DLPACKSHIM_ERROR_MAX bytes whole. */
  char big[2000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s", big);
  size_t n = dlpackshim_last_error_copy(buf, sizeof buf);
  CHECK(n < sizeof buf && n == strlen(dlpackshim_last_error()) && strlen(buf) == n);
  /* Cut on a whole UTF-8 character: "d\xc3\xa9j\xc3\xa0" (5 bytes in a
   * buffer of 4, then of 3) keeps "d\xc3\xa9", then "d", never half an
   * "\xc3\xa9" a decoder refuses. */
  shim_fail(DLPACKSHIM_ERR_DEVICE, "d\xc3\xa9j\xc3\xa0");
  CHECK_EQ(dlpackshim_last_error_copy(buf, 5), 6);
  CHECK(strcmp(buf, "d\xc3\xa9j") == 0);
  CHECK_EQ(dlpackshim_last_error_copy(buf, 3), 6);
  CHECK(strcmp(buf, "d") == 0);
  /* A message that fits is copied whole, whatever its bytes (a Latin-1
   * path is no UTF-8, and its return says it was not cut). */
  shim_fail(DLPACKSHIM_ERR_DEVICE, "path /tmp/caf\xe9s");
  CHECK_EQ(dlpackshim_last_error_copy(buf, 16), 15);
  CHECK(strcmp(buf, "path /tmp/caf\xe9s") == 0);
  dlpackshim_clear_error();
  CHECK_EQ(dlpackshim_last_error_copy(buf, sizeof buf), 0);
  CHECK(buf[0] == '\0');
}

/* A second thread sees its own (empty) error and its failure stays its own. */
static void *other_thread(void *arg) {
  int *ok = arg;
  ok[0] = dlpackshim_last_status() == 0 && strcmp(dlpackshim_last_error(), "") == 0;
  shim_fail(DLPACKSHIM_ERR_DEVICE, "thread two");
  ok[1] = dlpackshim_last_status() == DLPACKSHIM_ERR_DEVICE &&
          strcmp(dlpackshim_last_error(), "thread two") == 0;
  return NULL;
}

static void test_last_error_is_thread_local(void) {
  shim_fail(DLPACKSHIM_ERR_STREAM, "thread one");
  int ok[2] = {0, 0};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, other_thread, ok) == 0);
  REQUIRE(pthread_join(th, NULL) == 0);
  CHECK(ok[0]);
  CHECK(ok[1]);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_STREAM);
  CHECK(strcmp(dlpackshim_last_error(), "thread one") == 0);
}

int main(void) {
  test_fresh_thread_has_no_error();
  test_strerror_names_every_status();
  test_fail_records_status_and_message();
  test_clear_error_forgets();
  test_long_message_is_truncated_not_overflowed();
  test_last_error_is_thread_local();
  test_last_error_copy_fills_the_callers_buffer();
  return check_done("test_error");
}
