/*
 * tlsblock.c - a module with a thread-local variable, for test_leakcheck_tls.
 * Loaded with dlopen, so its TLS is dynamic: glibc mallocs a thread's block
 * (16 bytes: two pointers) on the thread's first access.
 */
#include <stdlib.h>

__attribute__((tls_model("global-dynamic"))) __thread void *tlsblock_slots[2];

/* The address of this thread's block; its first slot keeps a heap block that
 * only this thread's dynamic TLS points to. */
void **tlsblock_touch(void);
void **tlsblock_touch(void) {
  if (!tlsblock_slots[0]) tlsblock_slots[0] = malloc(100);
  return tlsblock_slots;
}
