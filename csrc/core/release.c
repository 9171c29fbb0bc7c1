/*
 * release.c - ready-made releases for owners that are not Python.
 *
 * A release runs on whichever thread frees the tensor, so these need no
 * callback into the caller: free() of the data, or a reference-counted block
 * whose count is atomic. The block's header sits just below the data it
 * returns, so the data pointer is the handle.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"

enum { SHIM_BLOCK_ALIGN = 256 };

typedef struct {
  void *base;           /* what shim_data_alloc returned */
  _Atomic int64_t refs; /* the block is freed when it drops to 0 */
} shim_block_head;

static shim_block_head *head_of(const void *data) {
  return (shim_block_head *)((uintptr_t)data - sizeof(shim_block_head));
}

DLPACKSHIM_API void dlpackshim_release_free(void *owner) { free(owner); }

DLPACKSHIM_API int dlpackshim_block_alloc(size_t nbytes, void **data_out) {
  if (!data_out) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "block_alloc: data_out is NULL");
  size_t total;
  if (__builtin_add_overflow(nbytes, sizeof(shim_block_head) + SHIM_BLOCK_ALIGN, &total))
    return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "block_alloc: %zu bytes do not fit in memory",
                     nbytes);
  char *base = shim_data_alloc(total); /* uncleared; huge pages when large */
  if (!base)
    return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "block_alloc: cannot allocate %zu bytes", total);
  /* The data starts at the first 256-byte boundary that leaves room for the head. */
  uintptr_t start = (uintptr_t)base + sizeof(shim_block_head);
  char *data = (char *)base + sizeof(shim_block_head) + (size_t)(-start & (SHIM_BLOCK_ALIGN - 1));
  shim_block_head *h = head_of(data);
  h->base = base;
  atomic_init(&h->refs, 1);
  *data_out = data;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_block_retain(void *data) {
  if (!data) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "block_retain: data is NULL");
  atomic_fetch_add_explicit(&head_of(data)->refs, 1, memory_order_relaxed);
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API void dlpackshim_block_release(void *data) {
  if (!data) return;
  shim_block_head *h = head_of(data);
  /* acq_rel: every write to the block happens before the free. */
  if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1) free(h->base);
}

DLPACKSHIM_API int dlpackshim_block_refcount(const void *data, int64_t *count_out) {
  if (!data || !count_out)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "block_refcount: a pointer is NULL");
  *count_out = atomic_load_explicit(&head_of(data)->refs, memory_order_acquire);
  return DLPACKSHIM_OK;
}
