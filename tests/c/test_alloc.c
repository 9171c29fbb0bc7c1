/*
 * test_alloc.c - the memory of copies (csrc/core/alloc.c), as the kernel
 * sees it in /proc/self/smaps: a block of 2 MiB or more is advised for huge
 * pages (VmFlags "hg"), one of 32 MiB or more is aligned to 2 MiB, and a
 * clone's memory goes back to the kernel when its deleter runs. Linux only;
 * skipped (77) where the kernel has no transparent huge pages.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#define MiB ((size_t)1 << 20)

/* The VmFlags line of the mapping that holds addr, in flags (empty when
 * none does). Returns 1 when a mapping holds addr. */
static int mapping_of(const void *addr, char *flags, size_t len) {
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  int inside = 0, found = 0;
  flags[0] = '\0';
  REQUIRE(f != NULL);
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
      if (found) break;
      inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
      found = inside;
    } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(flags, len, "%s", line + 8);
    }
  }
  fclose(f);
  return found;
}

/* 1 when the mapping holding addr is advised for huge pages. */
static int advised(const void *addr) {
  char flags[256];
  if (!mapping_of(addr, flags, sizeof flags)) return 0;
  return strstr(flags, " hg") != NULL;
}

/* A clone of n float32 elements, all read from one (a zero stride): big
 * copies from a small source. */
static DLManagedTensorVersioned *clone_of(size_t nbytes) {
  static float one = 1.0f;
  int64_t shape[1] = {(int64_t)(nbytes / 4)}, zero[1] = {0};
  DLTensor src = {&one, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, zero, 0};
  DLManagedTensorVersioned *c = NULL;
  CHECK_OK(dlpackshim_tensor_clone(&src, 0, &c));
  REQUIRE(c != NULL);
  return c;
}

static void test_large_clone_is_aligned_and_advised(void) {
  DLManagedTensorVersioned *c = clone_of(40 * MiB);
  const char *data = c->dl_tensor.data;
  /* The block starts on a 2 MiB boundary; the data follows its header. */
  CHECK((uintptr_t)data % (2 * MiB) < 4096);
  CHECK((uintptr_t)data % 256 == 0);
  CHECK(advised(data));
  CHECK(advised(data + 39 * MiB));
  CHECK(((const float *)data)[10 * MiB - 1] == 1.0f);
  dlpackshim_tensor_free(c);
}

static void test_medium_blocks_are_advised(void) {
  /* Below 32 MiB from malloc (glibc reuses them): only their whole pages
   * are advised, so look in the middle. */
  DLManagedTensorVersioned *c = clone_of(4 * MiB);
  CHECK(advised((const char *)c->dl_tensor.data + 2 * MiB));
  dlpackshim_tensor_free(c);
  void *p = NULL;
  CHECK_OK(dlpackshim_block_alloc(8 * MiB, &p));
  REQUIRE(p != NULL);
  CHECK((uintptr_t)p % 256 == 0);
  CHECK(advised((const char *)p + 4 * MiB));
  dlpackshim_block_release(p);
}

static void test_freed_when_the_last_holder_goes(void) {
#if defined(__SANITIZE_ADDRESS__)
  return; /* ASan keeps freed blocks in quarantine */
#endif
  if (RUNNING_ON_VALGRIND) return; /* so does valgrind */
  char flags[256];
  DLManagedTensorVersioned *c = clone_of(64 * MiB);
  const char *data = c->dl_tensor.data;
  CHECK(mapping_of(data + 32 * MiB, flags, sizeof flags));
  dlpackshim_tensor_free(c);
  CHECK(!mapping_of(data + 32 * MiB, flags, sizeof flags));
  void *p = NULL;
  CHECK_OK(dlpackshim_block_alloc(64 * MiB, &p));
  REQUIRE(p != NULL);
  CHECK_OK(dlpackshim_block_retain(p)); /* a second holder */
  dlpackshim_block_release(p);
  CHECK(mapping_of((const char *)p + 32 * MiB, flags, sizeof flags));
  dlpackshim_block_release(p);
  CHECK(!mapping_of((const char *)p + 32 * MiB, flags, sizeof flags));
}

int main(void) {
  FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  FILE *smaps = fopen("/proc/self/smaps", "r");
  if (!thp || !smaps) {
    printf("test_alloc: SKIP (no transparent huge pages or no /proc/self/smaps)\n");
    return 77;
  }
  fclose(thp);
  fclose(smaps);
  test_large_clone_is_aligned_and_advised();
  test_medium_blocks_are_advised();
  test_freed_when_the_last_holder_goes();
  return check_done("test_alloc");
}
