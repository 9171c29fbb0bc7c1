/*
 * fakecore.h - what the two fake GPU runtimes (fakecuda.c, fakehip.c) share:
 * fake device memory, a call log and failure injection. Included once by
 * each fake; everything here is static, so the two never clash.
 *
 * Device memory lives in host RAM but is handed out at addresses the CPU
 * cannot touch (0xd000'0000'0000 and up: outside the 47-bit user address
 * space), so a library that dereferenced a device pointer on the host would
 * crash instead of passing. Device d's allocations lie at
 * 0xd000'0000'0000 + d * 2^40, each followed by a 4 KiB gap, and every copy
 * is bounds-checked against the allocation it starts in. Pinned and managed
 * "host" memory is real host memory, registered in the same table.
 */
#ifndef FAKEGPU_FAKECORE_H
#define FAKEGPU_FAKECORE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_API __attribute__((visibility("default")))

enum {
  FAKE_DEVICES = 2,
  FAKE_MAX_ALLOCS = 1024,
  FAKE_KIND_DEVICE = 0,
  FAKE_KIND_PINNED = 1,
  FAKE_KIND_MANAGED = 2
};
/* Each fake has its own range, so that one never mistakes the other's
 * pointers for its own (fakehip.c defines 0xe000'0000'0000). */
#ifndef FAKE_DEVICE_BASE
#define FAKE_DEVICE_BASE ((uintptr_t)0xd00000000000ULL)
#endif
#define FAKE_DEVICE_SPAN ((uintptr_t)1 << 40)

typedef struct {
  int live;
  int id;     /* A<id> in the log */
  int kind;
  int device;
  uintptr_t addr;
  size_t size;
  char *backing; /* where the bytes are */
} fake_alloc_t;

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_alloc_t fake_allocs[FAKE_MAX_ALLOCS];
static int fake_next_alloc_id = 1;
static uintptr_t fake_next_offset[FAKE_DEVICES];
static char *fake_log;
static size_t fake_log_len, fake_log_cap;
static char fake_fail_fn[64];
static int fake_fail_code;

/* ---- the log ------------------------------------------------------------ */

static void fake_logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fake_logf(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) n = sizeof line - 1;
  pthread_mutex_lock(&fake_lock);
  if (fake_log_len + (size_t)n + 2 > fake_log_cap) {
    size_t cap = fake_log_cap ? fake_log_cap * 2 : 4096;
    while (cap < fake_log_len + (size_t)n + 2) cap *= 2;
    char *p = realloc(fake_log, cap);
    if (!p) {
      pthread_mutex_unlock(&fake_lock);
      return;
    }
    fake_log = p;
    fake_log_cap = cap;
  }
  memcpy(fake_log + fake_log_len, line, (size_t)n);
  fake_log_len += (size_t)n;
  fake_log[fake_log_len++] = '\n';
  fake_log[fake_log_len] = '\0';
  pthread_mutex_unlock(&fake_lock);
}

/* The whole log, one call a line (valid until the next call into the fake). */
FAKE_API const char *fake_log_text(void);
FAKE_API const char *fake_log_text(void) { return fake_log ? fake_log : ""; }

FAKE_API void fake_log_clear(void);
FAKE_API void fake_log_clear(void) {
  pthread_mutex_lock(&fake_lock);
  fake_log_len = 0;
  if (fake_log) fake_log[0] = '\0';
  pthread_mutex_unlock(&fake_lock);
}

/* How many logged lines start with "fn(". */
FAKE_API int fake_calls(const char *fn);
FAKE_API int fake_calls(const char *fn) {
  int count = 0;
  size_t n = strlen(fn);
  pthread_mutex_lock(&fake_lock);
  for (const char *p = fake_log; p && *p;) {
    if (strncmp(p, fn, n) == 0 && p[n] == '(') count++;
    const char *nl = strchr(p, '\n');
    p = nl ? nl + 1 : p + strlen(p);
  }
  pthread_mutex_unlock(&fake_lock);
  return count;
}

/* The next call of `fn` fails with `code` (once). */
FAKE_API void fake_fail_next(const char *fn, int code);
FAKE_API void fake_fail_next(const char *fn, int code) {
  pthread_mutex_lock(&fake_lock);
  snprintf(fake_fail_fn, sizeof fake_fail_fn, "%s", fn);
  fake_fail_code = code;
  pthread_mutex_unlock(&fake_lock);
}

/* The injected failure for fn, if one is pending (then consumed), else 0. */
static int fake_injected(const char *fn) {
  int code = 0;
  pthread_mutex_lock(&fake_lock);
  if (fake_fail_fn[0] && strcmp(fake_fail_fn, fn) == 0) {
    code = fake_fail_code;
    fake_fail_fn[0] = '\0';
  }
  pthread_mutex_unlock(&fake_lock);
  return code;
}

/* ---- memory ------------------------------------------------------------- */

static uintptr_t fake_new_alloc(int kind, int device, size_t size) {
  /* A size whose rounding would wrap is more than any machine has. */
  if (device < 0 || device >= FAKE_DEVICES || size > SIZE_MAX / 2) return 0;
  char *backing = aligned_alloc(256, (size + 255) / 256 * 256 + 256);
  if (!backing) return 0;
  /* Recognisable garbage: a copy that forgets bytes shows. */
  memset(backing, 0xEE, size);
  pthread_mutex_lock(&fake_lock);
  int slot = -1;
  for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
    if (!fake_allocs[i].live) {
      slot = i;
      break;
    }
  if (slot < 0) {
    pthread_mutex_unlock(&fake_lock);
    free(backing);
    return 0;
  }
  uintptr_t addr;
  if (kind == FAKE_KIND_DEVICE) {
    addr = FAKE_DEVICE_BASE + (uintptr_t)device * FAKE_DEVICE_SPAN + fake_next_offset[device];
    fake_next_offset[device] += (size + 4096 + 255) / 256 * 256;
  } else {
    addr = (uintptr_t)backing;
  }
  fake_allocs[slot] = (fake_alloc_t){1, fake_next_alloc_id++, kind, device, addr, size, backing};
  pthread_mutex_unlock(&fake_lock);
  return addr;
}

/* The allocation holding p (NULL if none); *offset gets p - start. */
static fake_alloc_t *fake_find(uintptr_t p, size_t *offset) {
  fake_alloc_t *found = NULL;
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < FAKE_MAX_ALLOCS; i++) {
    fake_alloc_t *a = &fake_allocs[i];
    if (a->live && p >= a->addr && p - a->addr < (a->size ? a->size : 1)) {
      found = a;
      if (offset) *offset = p - a->addr;
      break;
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return found;
}

static int fake_free_alloc(uintptr_t p) {
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < FAKE_MAX_ALLOCS; i++) {
    fake_alloc_t *a = &fake_allocs[i];
    if (a->live && a->addr == p) {
      free(a->backing);
      a->live = 0;
      pthread_mutex_unlock(&fake_lock);
      return 0;
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return -1;
}

static int fake_is_device_address(uintptr_t p) {
  return p >= FAKE_DEVICE_BASE && p < FAKE_DEVICE_BASE + FAKE_DEVICES * FAKE_DEVICE_SPAN;
}

/* A printable name for a pointer: "dev1:A3+64", "pinned:A4+0", "host". */
static void fake_describe(uintptr_t p, char *buf, size_t len) {
  size_t off = 0;
  fake_alloc_t *a = fake_find(p, &off);
  if (!a) {
    snprintf(buf, len, fake_is_device_address(p) ? "unmapped-device-address" : "host");
    return;
  }
  if (a->kind == FAKE_KIND_DEVICE)
    snprintf(buf, len, "dev%d:A%d+%zu", a->device, a->id, off);
  else
    snprintf(buf, len, "%s:A%d+%zu", a->kind == FAKE_KIND_PINNED ? "pinned" : "managed", a->id,
             off);
}

/* Where the bytes of a device-side region [p, p + extent) are, checking that
 * the whole region lies in one device (or managed) allocation of `device`
 * (-1: any). *why gets the reason when it returns NULL. */
static char *fake_device_bytes(uintptr_t p, size_t extent, int device, const char **why) {
  size_t off = 0;
  fake_alloc_t *a = fake_find(p, &off);
  if (!a || a->kind == FAKE_KIND_PINNED) {
    *why = "not device memory";
    return NULL;
  }
  if (extent > a->size - off) {
    *why = "out of bounds of its allocation";
    return NULL;
  }
  if (device >= 0 && a->kind == FAKE_KIND_DEVICE && a->device != device) {
    *why = "memory of another device than the current one";
    return NULL;
  }
  return a->backing + off;
}

/* A host-side pointer must be real host memory, never a fake device address. */
static char *fake_host_bytes(uintptr_t p, const char **why) {
  if (fake_is_device_address(p) || p == 0) {
    *why = p ? "a device address passed as host memory" : "NULL host pointer";
    return NULL;
  }
  return (char *)p;
}

/* ---- test helpers --------------------------------------------------------- */

/* kind: 0 device memory of `device`, 1 pinned host, 2 managed. */
FAKE_API void *fake_alloc(int kind, int device, size_t size);
FAKE_API void *fake_alloc(int kind, int device, size_t size) {
  return (void *)fake_new_alloc(kind, device, size);
}

FAKE_API int fake_free(void *p);
FAKE_API int fake_free(void *p) { return fake_free_alloc((uintptr_t)p); }

/* The host address of the bytes behind any fake pointer (NULL if unknown). */
FAKE_API void *fake_backing(void *p);
FAKE_API void *fake_backing(void *p) {
  size_t off = 0;
  fake_alloc_t *a = fake_find((uintptr_t)p, &off);
  return a ? a->backing + off : NULL;
}

/* How many allocations are live (leak checks). */
FAKE_API int fake_live_allocs(void);
FAKE_API int fake_live_allocs(void) {
  int n = 0;
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < FAKE_MAX_ALLOCS; i++) n += fake_allocs[i].live;
  pthread_mutex_unlock(&fake_lock);
  return n;
}

/* Row-by-row copies shared by both fakes' 2-D and 3-D copies. */
static void fake_copy3d(char *dst, size_t dpitch, size_t drows, const char *src, size_t spitch,
                        size_t srows, size_t width, size_t height, size_t depth) {
  for (size_t z = 0; z < depth; z++)
    for (size_t y = 0; y < height; y++)
      memcpy(dst + (z * drows + y) * dpitch, src + (z * srows + y) * spitch, width);
}

/* The bytes a pitched region spans. */
static size_t fake_extent(size_t pitch, size_t rows, size_t width, size_t height, size_t depth) {
  if (!width || !height || !depth) return 0;
  return ((depth - 1) * rows + (height - 1)) * pitch + width;
}

#endif /* FAKEGPU_FAKECORE_H */
