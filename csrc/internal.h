/*
 * internal.h - what the library's own .c files share. Nothing here is exported:
 * the library is built with -fvisibility=hidden and only DLPACKSHIM_API
 * functions (all named dlpackshim_*) are visible.
 */
#ifndef DLPACKSHIM_INTERNAL_H
#define DLPACKSHIM_INTERNAL_H

#include "dlpackshim.h"

#if defined(__GNUC__)
#define SHIM_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define SHIM_LIKELY(x) __builtin_expect(!!(x), 1)
#define SHIM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SHIM_PRINTF(f, a)
#define SHIM_LIKELY(x) (x)
#define SHIM_UNLIKELY(x) (x)
#endif

/* ---- error.c ---------------------------------------------------------- */

/* Records status and a printf-style message as this thread's last error;
 * returns status so that callers can write `return shim_fail(...)`. */
int shim_fail(int status, const char *fmt, ...) SHIM_PRINTF(2, 3);

/* The same, returning NULL, for functions that return pointers. */
void *shim_fail_null(int status, const char *fmt, ...) SHIM_PRINTF(2, 3);

#endif /* DLPACKSHIM_INTERNAL_H */
