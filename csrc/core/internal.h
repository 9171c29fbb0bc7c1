/*
 * internal.h - what the Python-free core's .c files share (and the CPython
 * binding builds on, csrc/python/binding.h). Nothing here is exported: the
 * library is built with -fvisibility=hidden and only DLPACKSHIM_API
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

/* Flag bits the library keeps beside a tensor's DLPack flags, never exported:
 * SHIM_FLAG_LEGACY marks a tensor that came in through the legacy ABI (its
 * writability unknown, so it is READ_ONLY too, yet may leave by that ABI).
 * Every other bit is the producer's, kept and handed on as it came (bits a
 * later DLPack defines included). */
#define SHIM_FLAG_LEGACY ((uint64_t)1 << 63)
#define SHIM_FLAGS_PUBLIC (~SHIM_FLAG_LEGACY)

/* ---- error.c ---------------------------------------------------------- */

/* Records status and a printf-style message as this thread's last error;
 * returns status so that callers can write `return shim_fail(...)`. */
int shim_fail(int status, const char *fmt, ...) SHIM_PRINTF(2, 3);

/* The length of s's longest prefix of at most max bytes that ends on a
 * whole UTF-8 character: for "%.*s" of a message Python must decode. */
size_t shim_utf8_cut(const char *s, size_t max);

/* The same, returning NULL, for functions that return pointers. */
void *shim_fail_null(int status, const char *fmt, ...) SHIM_PRINTF(2, 3);

/* ---- validate.c ------------------------------------------------------- */

/* What validation learns about a tensor; the other files build on it. */
typedef struct {
  int64_t numel;      /* element count (1 for 0-d, 0 when any extent is 0) */
  int64_t elem_bits;  /* dtype.bits * dtype.lanes */
  int64_t itemsize;   /* bytes per element; 0 for packed sub-byte types */
  int64_t nbytes;     /* bytes if stored compactly */
  int64_t lo, hi;     /* byte span from data + byte_offset: [lo, hi) */
} shim_info;

/* Full validation (the rules of dlpackshim_tensor_validate); fills *info. */
int shim_inspect(const DLTensor *t, uint64_t flags, shim_info *info);

/* Packed sub-byte data whose elements end inside their last byte: the mask
 * of that byte's bits that are the tensor's (DLPack packs element i from bit
 * i * bits up), 0 when the elements fill it. A copy leaves the other bits
 * alone: they may be the next elements of a larger array. */
unsigned shim_packed_tail_mask(const shim_info *info);

/* 1 when strides (NULL = compact) are C-contiguous, NumPy's way: extent-1
 * dims ignored, any zero extent is compact. shape must be valid. */
int shim_is_compact(int32_t ndim, const int64_t *shape, const int64_t *strides);

/* Compact row-major strides (zero extents count as 1, as NumPy and PyTorch
 * do); fails when they overflow int64, which only an empty tensor can do. */
int shim_compact_strides(int32_t ndim, const int64_t *shape, int64_t *out);

/* 1 when the CPU can read the device's memory directly. */
int shim_host_accessible(int32_t device_type);

/* 0 when t's memory is host-accessible, else _UNSUPPORTED with a message
 * naming who (the operation) and name (the argument). */
int shim_check_host(const DLTensor *t, const char *who, const char *name);

/* 1 for a device type dlpack.h names. */
int shim_known_device_type(int32_t device_type);

/* The Python package's private entry point (exported as dlpackshim__*, two
 * underscores, outside the public API's promise): shim_host_accessible, so
 * that the package asks this rule instead of keeping a copy of the set. */
DLPACKSHIM_API int dlpackshim__host_accessible(int32_t device_type);

/* ---- producer.c: counted deleters (private, for dlpackshim.testing) ---- */

/* A managed tensor whose deleter counts its calls. */
typedef struct shim_counted shim_counted;

/* Swaps the deleter and manager_ctx of managed (versioned != 0: a
 * DLManagedTensorVersioned, else a DLManagedTensor) for a counting pair that
 * any thread may call any number of times; it frees nothing, so a double call
 * is counted, never a double free. NULL with the last error set. */
DLPACKSHIM_API shim_counted *dlpackshim__counted_attach(void *managed, int versioned);

/* How many times the counting deleter was called so far (0 for NULL). */
DLPACKSHIM_API int64_t dlpackshim__counted_calls(const shim_counted *c);

/* Puts the original deleter and context back, calls that deleter once and
 * frees the counter (NULL-safe); only once no one can call the deleter. */
DLPACKSHIM_API void dlpackshim__counted_free(shim_counted *c);

/* 0 when a tensor with these flags may be handed out where no flags travel
 * (a legacy "dltensor" capsule, the exchange table's bare DLTensor); else
 * _READ_ONLY or _UNSUPPORTED with the last error set. */
int shim_check_flagless(const DLTensor *t, uint64_t flags);

/* ---- copy.c ----------------------------------------------------------- */

/* Inspects one side of a copy (`name`: "dst" or "src", put in front of the
 * message): a packed sub-byte tensor that is not compact is _UNSUPPORTED
 * (its elements share bytes), not invalid. Host and GPU copies alike. */
int shim_copy_inspect(const DLTensor *t, const char *name, uint64_t flags, shim_info *info);

/* Fails (_INVALID_ARGUMENT) unless dst and src (both valid) have the same
 * ndim, shape and dtype: what every copy needs. */
int shim_copy_match(const DLTensor *dst, const DLTensor *src);

/* dlpackshim_copy with flags that say how sub-byte elements are stored. */
int shim_copy(const DLTensor *dst, const DLTensor *src, uint64_t flags);
/* The copy into a block just made for src (shim_tensor_alloc: compact, of
 * src's shape and dtype, apart from it), src inspected into si: shim_copy
 * without its checks, which would repeat those (a clone of one element,
 * timed from C: 48 -> 31 ns). */
void shim_copy_fresh(const DLTensor *dst, const DLTensor *src, const shim_info *si);

/* ---- alloc.c ---------------------------------------------------------- */

/* size bytes (at least 1) for data that the caller writes in full: not
 * cleared; from 2 MiB up advised for huge pages, from 32 MiB up aligned to
 * 2 MiB (else malloc's alignment). Freed with free(). NULL when out of
 * memory (no error recorded: the caller says what it was for). */
void *shim_data_alloc(size_t size);

/* ---- tensor.c --------------------------------------------------------- */

/* tensor.c: an uninitialised compact row-major tensor shaped like proto
 * (shape and dtype only are read) on proto's device type and id, data
 * aligned to 256 bytes, in one allocation; freed by its deleter. flags are
 * stored as given. proto is valid and nbytes its compact size, as
 * dlpackshim_tensor_nbytes gives it: the callers have validated it already.
 * NULL with the last error set. */
DLManagedTensorVersioned *shim_tensor_alloc(const DLTensor *proto, int64_t nbytes, uint64_t flags);

/* dlpackshim_tensor_clone of a src that shim_inspect(src, flags) described
 * in *info: for a caller that needed the size first (the binding, to decide
 * whether other threads run meanwhile), without inspecting src twice (with
 * shim_tensor_alloc no longer validating it again, a one-element clone from
 * C takes 27 ns, 30 before). */
int shim_clone_inspected(const DLTensor *src, uint64_t flags, const shim_info *info,
                         DLManagedTensorVersioned **tensor_out);

#endif /* DLPACKSHIM_INTERNAL_H */
