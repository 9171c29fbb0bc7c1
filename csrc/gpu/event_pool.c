/*
 * event_pool.c - reusable GPU events, for making one stream wait for another
 * (dlpackshim_stream_wait). Creating an event per wait costs a driver call
 * and a kernel object; each back-end keeps a pool of recorded-and-waited
 * events instead, keyed by what an event belongs to (a CUDA context, a ROCm
 * device), which any thread may take from and give back to.
 */
#include <stdlib.h>

#include "gpu.h"

shim_gpu_event *shim_gpu_event_take(shim_gpu_event_pool *pool, uintptr_t key) {
  pthread_mutex_lock(&pool->lock);
  shim_gpu_event **link = &pool->free, *e;
  while ((e = *link) && e->key != key) link = &e->next;
  if (e) *link = e->next;
  pthread_mutex_unlock(&pool->lock);
  return e;
}

void shim_gpu_event_give(shim_gpu_event_pool *pool, shim_gpu_event *e) {
  pthread_mutex_lock(&pool->lock);
  e->next = pool->free;
  pool->free = e;
  pthread_mutex_unlock(&pool->lock);
}

void shim_gpu_event_flush(shim_gpu_event_pool *pool, uintptr_t key) {
  pthread_mutex_lock(&pool->lock);
  shim_gpu_event **link = &pool->free, *e;
  while ((e = *link)) {
    if (e->key == key) {
      *link = e->next;
      free(e);
    } else {
      link = &e->next;
    }
  }
  pthread_mutex_unlock(&pool->lock);
}
