/*
 * test_release.c - the ready-made releases (dlpackshim_release_free, the
 * reference-counted block) and the documented pattern for an owner that
 * lives on one thread: releases queued by whichever thread frees a tensor,
 * drained and run on the owner's thread, each exactly once.
 */
#include <pthread.h>
#include <stdint.h>

#include "check.h"

static DLManagedTensorVersioned *new_over(void *data, int64_t n, void *owner,
                                          dlpackshim_release_fn release) {
  int64_t shape[1] = {n};
  DLManagedTensorVersioned *m = NULL;
  CHECK_OK(dlpackshim_tensor_new(data, kDLCPU, 0, 1, shape, NULL, kDLFloat, 32, 1, 0, 0, owner,
                                 release, &m));
  return m; /* NULL when it failed: the callers REQUIRE it */
}

static void test_release_free_frees_malloced_data(void) {
  /* valgrind / ASan see a leak or a double free if this is wrong. */
  float *data = malloc(8 * sizeof *data);
  REQUIRE(data != NULL);
  DLManagedTensorVersioned *m = new_over(data, 8, data, dlpackshim_release_free);
  REQUIRE(m != NULL);
  dlpackshim_tensor_free(m);
  dlpackshim_release_free(NULL); /* free(NULL) */
}

static void test_block_counts_its_references(void) {
  void *data = NULL;
  int64_t refs = 0;
  CHECK_OK(dlpackshim_block_alloc(16 * sizeof(float), &data));
  REQUIRE(data != NULL);
  CHECK_EQ((uintptr_t)data % 256, 0);
  memset(data, 0xab, 16 * sizeof(float)); /* all of it is ours */
  CHECK_OK(dlpackshim_block_refcount(data, &refs));
  CHECK_EQ(refs, 1);
  /* Two tensors over the block, each holding a reference. */
  CHECK_OK(dlpackshim_block_retain(data));
  DLManagedTensorVersioned *a = new_over(data, 16, data, dlpackshim_block_release);
  CHECK_OK(dlpackshim_block_retain(data));
  DLManagedTensorVersioned *b = new_over(data, 8, data, dlpackshim_block_release);
  REQUIRE(a && b);
  CHECK_OK(dlpackshim_block_refcount(data, &refs));
  CHECK_EQ(refs, 3);
  dlpackshim_block_release(data); /* ours */
  dlpackshim_tensor_free(a);
  CHECK_OK(dlpackshim_block_refcount(data, &refs));
  CHECK_EQ(refs, 1);
  CHECK_EQ(((unsigned char *)b->dl_tensor.data)[31], 0xab); /* still alive */
  dlpackshim_tensor_free(b); /* the last reference frees it */

  void *empty = NULL;
  CHECK_OK(dlpackshim_block_alloc(0, &empty));
  CHECK(empty != NULL);
  dlpackshim_block_release(empty);
  dlpackshim_block_release(NULL);
}

static void test_block_bad_arguments(void) {
  int64_t refs;
  void *data;
  CHECK_FAILS(dlpackshim_block_alloc(8, NULL), DLPACKSHIM_ERR_INVALID_ARGUMENT, "data_out");
  CHECK_FAILS(dlpackshim_block_alloc(SIZE_MAX - 8, &data), DLPACKSHIM_ERR_NO_MEMORY, "bytes");
  CHECK_FAILS(dlpackshim_block_retain(NULL), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS(dlpackshim_block_refcount(NULL, &refs), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
}

/* The block's count is atomic: tensors freed on many threads at once. */
enum { N_THREADS = 4, PER_THREAD = 200 };
static DLManagedTensorVersioned *shared[N_THREADS][PER_THREAD];

static void *free_row(void *arg) {
  DLManagedTensorVersioned **row = arg;
  for (int i = 0; i < PER_THREAD; i++) dlpackshim_tensor_free(row[i]);
  return NULL;
}

static void test_block_released_from_many_threads(void) {
  void *data = NULL;
  int64_t refs = 0;
  CHECK_OK(dlpackshim_block_alloc(64, &data));
  for (int t = 0; t < N_THREADS; t++)
    for (int i = 0; i < PER_THREAD; i++) {
      CHECK_OK(dlpackshim_block_retain(data));
      shared[t][i] = new_over(data, 4, data, dlpackshim_block_release);
      REQUIRE(shared[t][i] != NULL);
    }
  pthread_t th[N_THREADS];
  for (int t = 0; t < N_THREADS; t++) REQUIRE(pthread_create(&th[t], NULL, free_row, shared[t]) == 0);
  for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
  CHECK_OK(dlpackshim_block_refcount(data, &refs));
  CHECK_EQ(refs, 1);
  dlpackshim_block_release(data);
}

/* ---- the pattern of docs/other-languages.md: hand the release back ------
 * The release only queues the owner; the owner's thread drains the queue and
 * does the real work there (a JavaScript or Lua runtime would free its object). */
typedef struct owner {
  struct owner *next;
  pthread_t made_on;
  int released; /* touched on the owner's thread only */
} owner;

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static owner *queue_head;

static void queue_release(void *p) {
  owner *o = p;
  pthread_mutex_lock(&queue_lock);
  o->next = queue_head;
  queue_head = o;
  pthread_mutex_unlock(&queue_lock);
  /* a real loop would be woken here: uv_async_send, a pipe, an eventfd */
}

/* On the owner's thread: run every queued release; returns how many. */
static int drain(void) {
  pthread_mutex_lock(&queue_lock);
  owner *o = queue_head;
  queue_head = NULL;
  pthread_mutex_unlock(&queue_lock);
  int n = 0;
  for (; o; o = o->next, n++) {
    CHECK(pthread_equal(o->made_on, pthread_self()));
    o->released++;
  }
  return n;
}

static void test_release_handed_back_to_the_owner_thread(void) {
  static owner owners[N_THREADS][PER_THREAD];
  static float buf[4];
  for (int t = 0; t < N_THREADS; t++)
    for (int i = 0; i < PER_THREAD; i++) {
      owners[t][i].made_on = pthread_self();
      shared[t][i] = new_over(buf, 4, &owners[t][i], queue_release);
      REQUIRE(shared[t][i] != NULL);
    }
  pthread_t th[N_THREADS];
  for (int t = 0; t < N_THREADS; t++) REQUIRE(pthread_create(&th[t], NULL, free_row, shared[t]) == 0);
  int drained = 0;
  for (int t = 0; t < N_THREADS; t++) {
    drained += drain(); /* the owner's loop keeps draining while others free */
    pthread_join(th[t], NULL);
  }
  drained += drain();
  CHECK_EQ(drained, N_THREADS * PER_THREAD);
  int once = 1;
  for (int t = 0; t < N_THREADS; t++)
    for (int i = 0; i < PER_THREAD; i++) once &= owners[t][i].released == 1;
  CHECK(once);
}

int main(void) {
  test_release_free_frees_malloced_data();
  test_block_counts_its_references();
  test_block_bad_arguments();
  test_block_released_from_many_threads();
  test_release_handed_back_to_the_owner_thread();
  return check_done("test_release");
}
