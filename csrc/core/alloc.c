/*
 * alloc.c - memory for the data of copies: the one allocator of every block
 * whose data the library writes in full (clones, dlpackshim_block_alloc, the
 * staging buffers of copies).
 *
 * A fresh block costs its first touch: the kernel maps it a page at a time,
 * zeroing each page on its first write. With 4 KiB pages a 64 MiB copy takes
 * 16384 faults and cost 4.5x NumPy's copy of the same array (issue 32); with
 * transparent huge pages it takes 32. So, as NumPy does
 * (numpy/_core/src/multiarray/alloc.c: madvise(MADV_HUGEPAGE) from 4 MiB up),
 * a large block is advised for huge pages. Two sizes matter (64-bit glibc,
 * measured in docs/benchmarks.md, "Copies"):
 *  - below 32 MiB (glibc's largest dynamic mmap threshold), malloc keeps a
 *    freed block in its heap, mapped, and hands it out again: the next copy
 *    of that size touches no new page. Only malloc itself does that (an
 *    aligned request is larger than the block freed, so it is always a fresh
 *    mapping: twice the time of a 16 MiB copy), so these blocks come from
 *    malloc and only their whole pages are advised, as NumPy's are;
 *  - from 32 MiB, every block is a fresh mapping, freed to the kernel at
 *    once: aligned to 2 MiB, every 2 MiB of it can be a huge page (an
 *    unaligned block keeps up to 2 MiB in small pages: 18% of a 64 MiB copy).
 *
 * The memory is never cleared (the copy writes every byte), and it comes
 * from malloc's family, so free() gives it back, and valgrind and ASan see
 * it. Where the kernel has no transparent huge pages (or a policy of
 * "never"), madvise fails or is ignored, and the block is an ordinary one.
 */
#include <stdint.h>
#include <stdlib.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "internal.h"

/* The x86-64 (and 4 KiB-page arm64) PMD huge page. */
#define SHIM_HUGE_PAGE ((size_t)2 << 20)
/* glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the largest block its heap
 * keeps for reuse. */
#define SHIM_FRESH_MAPPING ((size_t)32 << 20)

/* Asks for huge pages for the whole pages of [p, p + size). */
static void shim_advise_huge(void *p, size_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + size) & ~(page - 1);
  /* A hint: an older kernel, or one built without huge pages, says EINVAL. */
  if (lo < hi) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)size;
#endif
}

void *shim_data_alloc(size_t size) {
  void *p;
  if (size < SHIM_FRESH_MAPPING) {
    p = malloc(size > 0 ? size : 1);
    if (p && size >= SHIM_HUGE_PAGE) shim_advise_huge(p, size);
    return p;
  }
  if (posix_memalign(&p, SHIM_HUGE_PAGE, size) != 0) return NULL;
  shim_advise_huge(p, size);
  return p;
}
