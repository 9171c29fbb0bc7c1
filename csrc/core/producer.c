/*
 * producer.c - counted deleters for test producers (dlpackshim.testing).
 *
 * A checker must know how often a consumer called a tensor's deleter,
 * double calls included, without the second call freeing memory twice.
 * dlpackshim__counted_attach() swaps a managed tensor's deleter and
 * manager_ctx for a counting pair: the deleter only counts (atomically: a
 * consumer may call it from any thread, without the GIL) and frees nothing,
 * so the struct stays readable for a second or third call. The tensor is
 * really deleted, once, by dlpackshim__counted_free(), which puts the
 * original deleter and context back and calls it.
 *
 * A tensor whose consumer never called its deleter is never freed (it may
 * still be read); each live counter stays on a list, so that such memory is
 * still reachable at exit (a leak checker reports only what it cannot reach).
 */
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

struct shim_counted {
  void *managed;    /* DLManagedTensorVersioned * or DLManagedTensor * */
  int versioned;
  void *ctx;        /* the original manager_ctx */
  void (*deleter)(void *self); /* the original deleter (may be NULL) */
  int64_t calls;    /* counting deleter calls, updated atomically */
  shim_counted *prev, *next; /* the live list */
};

static shim_counted *live;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static void counted_hit(void *ctx) {
  shim_counted *c = (shim_counted *)ctx;
  if (c) __atomic_add_fetch(&c->calls, 1, __ATOMIC_SEQ_CST);
}

static void counted_deleter_v(DLManagedTensorVersioned *self) {
  if (self) counted_hit(self->manager_ctx);
}

static void counted_deleter_l(DLManagedTensor *self) {
  if (self) counted_hit(self->manager_ctx);
}

DLPACKSHIM_API shim_counted *dlpackshim__counted_attach(void *managed, int versioned) {
  if (managed == NULL)
    return shim_fail_null(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                          "dlpackshim__counted_attach: managed is NULL");
  shim_counted *c = calloc(1, sizeof *c);
  if (c == NULL)
    return shim_fail_null(DLPACKSHIM_ERR_NO_MEMORY, "dlpackshim__counted_attach: out of memory");
  c->managed = managed;
  c->versioned = versioned != 0;
  if (c->versioned) {
    DLManagedTensorVersioned *m = managed;
    c->ctx = m->manager_ctx;
    c->deleter = (void (*)(void *))m->deleter;
    m->manager_ctx = c;
    m->deleter = counted_deleter_v;
  } else {
    DLManagedTensor *m = managed;
    c->ctx = m->manager_ctx;
    c->deleter = (void (*)(void *))m->deleter;
    m->manager_ctx = c;
    m->deleter = counted_deleter_l;
  }
  pthread_mutex_lock(&live_lock);
  c->next = live;
  if (live) live->prev = c;
  live = c;
  pthread_mutex_unlock(&live_lock);
  return c;
}

DLPACKSHIM_API int64_t dlpackshim__counted_calls(const shim_counted *c) {
  if (c == NULL) return 0;
  return __atomic_load_n(&c->calls, __ATOMIC_SEQ_CST);
}

DLPACKSHIM_API void dlpackshim__counted_free(shim_counted *c) {
  if (c == NULL) return;
  pthread_mutex_lock(&live_lock);
  if (c->prev) c->prev->next = c->next;
  else live = c->next;
  if (c->next) c->next->prev = c->prev;
  pthread_mutex_unlock(&live_lock);
  if (c->versioned) {
    DLManagedTensorVersioned *m = c->managed;
    m->manager_ctx = c->ctx;
    m->deleter = (void (*)(DLManagedTensorVersioned *))c->deleter;
  } else {
    DLManagedTensor *m = c->managed;
    m->manager_ctx = c->ctx;
    m->deleter = (void (*)(DLManagedTensor *))c->deleter;
  }
  if (c->deleter) c->deleter(c->managed);
  free(c);
}
