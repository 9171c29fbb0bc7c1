/*
 * test_leakcheck_tls.c - LeakSanitizer's exit-time check survives a dynamic
 * TLS block at a page offset of 16 (in --enable-sanitizers builds only).
 *
 * GCC 12's sanitizer runtime guesses the bounds of a dynamic TLS block from
 * its address: at a page offset of 16 it reads a glibc 2.19 header that
 * newer glibc does not write, scans a bogus range, and its tracer dies with
 * SIGSEGV at exit ("Tracer caught signal 11", google/sanitizers issue 1322),
 * in whichever process happens to place a block there (CI's check-consumer
 * runs did). check-asan runs with intercept_tls_get_addr=0 (tests/hardening.mk):
 * the runtime then keeps no guessed ranges, and glibc's own table of blocks
 * (on the heap, referenced from static TLS) still makes them reachable.
 *
 * This test places a block there on purpose and keeps a heap block that only
 * dynamic TLS references: with the options of check-asan it exits 0 and
 * reports no leak; without them its tracer crashes (abort: a failure).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif

#define PAGE 4096
#define STEPS 4096

int main(void) {
#ifndef ASAN
  puts("SKIP: not an AddressSanitizer build");
  return 77;
#else
  static void *volatile steps[STEPS];   /* reachable: not leaks */
  char path[4096];
  const char *b = getenv("top_builddir");
  snprintf(path, sizeof path, "%s/tests/c/.libs/libtlsblock.so", b && *b ? b : ".");
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cannot open %s: %s\n", path, dlerror());
    return 99;
  }
  void **(*touch)(void) = (void **(*)(void))dlsym(h, "tlsblock_touch");
  if (!touch) return 99;
  /* ASan gives a 16-byte request a 32-byte chunk whose user bytes start 16
   * in: step the chunks of that size class until the next one starts a
   * page, so that glibc's malloc of this thread's block (16 bytes) lands there. */
  int n = 0;
  while (n < STEPS) {
    steps[n] = malloc(16);
    if ((uintptr_t)steps[n++] % PAGE == PAGE - 16) break;
  }
  void **block = touch();
  if ((uintptr_t)block % PAGE != 16) {
    printf("SKIP: this allocator put the TLS block at page offset %lu, not 16\n",
           (unsigned long)((uintptr_t)block % PAGE));
    return 77;
  }
  printf("the TLS block is at %p (page offset 16) after %d steps; LeakSanitizer checks at exit:\n"
         "a crash of its tracer here means ASAN_OPTIONS lacks intercept_tls_get_addr=0\n",
         (void *)block, n);
  fflush(stdout);
  CHECK(block[0] != NULL);
  return check_done("test_leakcheck_tls");
#endif
}
