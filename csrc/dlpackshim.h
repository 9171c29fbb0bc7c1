/*
 * dlpackshim.h - the one public header of libdlpackshim.
 *
 * Part 1 is the DLPack 1.3 ABI (written from its layout; it must match dlpack.h
 * field for field). Part 2 is dlpackshim's flat API: plain functions, plain
 * integer arguments and pointers, no structs by value and no macros needed at
 * call sites, so ctypes, ABI-mode cffi, Rust or Julia can call every function.
 *
 * Conventions
 *  - Functions returning int return DLPACKSHIM_OK (0) or a negative
 *    dlpackshim_status; functions returning a pointer return NULL on failure.
 *    Either way dlpackshim_last_error() then names what exactly was wrong
 *    (thread-local: read it from the thread that made the call).
 *  - Python objects are passed as intptr_t holding the object's address
 *    (CPython's id(obj)); the caller keeps the object alive for the call.
 *  - Functions documented "returns a new Python reference" must be called with
 *    the GIL held and return NULL with a Python exception set on failure; bind
 *    them with ctypes.PyDLL(restype=py_object). Every other function that
 *    touches Python takes the GIL itself, so ABI-mode cffi and ctypes.CDLL
 *    (which release the GIL) may call it; but while CPython finalizes (a
 *    __del__ at shutdown), only the thread that finalizes may take the GIL:
 *    from any other thread it fails with _NO_PYTHON (the dlpackshim package
 *    tells the library which thread that is, from its atexit hook).
 *  - CPython is found at run time in the calling process; outside Python the
 *    capsule functions return DLPACKSHIM_ERR_NO_PYTHON.
 */
#ifndef DLPACKSHIM_H
#define DLPACKSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLPACKSHIM_BUILDING) && defined(__GNUC__)
#define DLPACKSHIM_API __attribute__((visibility("default")))
#else
#define DLPACKSHIM_API
#endif

/* ======================================================================
 * Part 1. The DLPack 1.3 ABI.
 *
 * A program that included dlpack.h first keeps its definitions; we only add
 * what an older dlpack.h lacks (the enum values added after 1.3 are then
 * known by number only). Including dlpack.h after this header is a no-op
 * (same include guard).
 * ====================================================================== */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACKSHIM_DEFINES_DLPACK_ 1

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,        /* pinned host memory from cudaMallocHost */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,    /* cudaMallocManaged memory */
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
  kDLTrn = 18,
  /* Added by dlpack's main branch after 1.3 (minor still 3): */
  kDLTPU = 19,            /* Google TPU */
  kDLTPUHost = 20,        /* host memory pinned for a TPU */
  kDLAscend = 21          /* Huawei Ascend NPU */
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U,
  /* Added by dlpack's main branch after 1.3 (minor still 3): */
  kDLBcomplex = 18U       /* complex of two bfloat16: 32 bits */
} DLDataTypeCode;

typedef struct {
  uint8_t code;   /* a DLDataTypeCode */
  uint8_t bits;
  uint16_t lanes; /* 1 for scalars */
} DLDataType;

typedef struct {
  void *data;          /* may be unaligned: add byte_offset, trust nothing else */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;      /* ndim extents; may be NULL when ndim == 0 */
  int64_t *strides;    /* in elements; NULL means compact row-major (pre-1.2) */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
#endif /* !DLPACK_DLPACK_H_ (legacy part) */

/* The versioned ABI (dlpack 1.0). */
#if defined(DLPACKSHIM_DEFINES_DLPACK_) || !defined(DLPACK_MAJOR_VERSION) || \
    DLPACK_MAJOR_VERSION < 1
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
  /* Everything up to and including flags stays put in every 1.x version,
   * so a consumer can always read the version and call the deleter. */
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif

/* The C exchange table (dlpack 1.2), reached through a PyCapsule named
 * "dlpack_exchange_api" stored on the producer's *type* as
 * __dlpack_c_exchange_api__. Every entry returns 0, or -1 with a Python
 * exception set; none synchronises streams. */
#if defined(DLPACKSHIM_DEFINES_DLPACK_) || !defined(DLPACK_MAJOR_VERSION) || \
    DLPACK_MAJOR_VERSION < 1 || (DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION < 2)
typedef int (*DLPackManagedTensorAllocator)(
    DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
    void (*SetError)(void *error_ctx, const char *kind, const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(
    void *py_object, DLManagedTensorVersioned **out);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(
    DLManagedTensorVersioned *tensor, void **out_py_object); /* steals tensor */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(
    DLDeviceType device_type, int32_t device_id, void **out_current_stream);

typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync; /* may be NULL */
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;
#endif

#ifdef DLPACKSHIM_DEFINES_DLPACK_
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3
#endif
#ifndef DLPACK_FLAG_BITMASK_READ_ONLY
#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)
#endif
#ifndef DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)
#endif

/* ======================================================================
 * Part 2. dlpackshim.
 * Every constant a foreign caller needs is an enum with a fixed value.
 * ====================================================================== */

/* DLManagedTensorVersioned.flags bits (dlpack.h has them only as macros). */
typedef enum {
  DLPACKSHIM_FLAG_READ_ONLY = 1,               /* DLPACK_FLAG_BITMASK_READ_ONLY */
  DLPACKSHIM_FLAG_IS_COPIED = 2,               /* DLPACK_FLAG_BITMASK_IS_COPIED */
  DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED = 4   /* each sub-byte element fills a byte */
} dlpackshim_flag;

/* Status codes. Values are fixed forever; new ones are only appended. */
typedef enum {
  DLPACKSHIM_OK = 0,
  DLPACKSHIM_ERR_INVALID_ARGUMENT = -1, /* a parameter of the call is wrong (ValueError) */
  DLPACKSHIM_ERR_NO_MEMORY = -2,        /* allocation failed (MemoryError) */
  DLPACKSHIM_ERR_INVALID_TENSOR = -3,   /* a DLTensor breaks the ABI's rules (BufferError) */
  DLPACKSHIM_ERR_UNSUPPORTED = -4,      /* valid, but not something we can do (BufferError) */
  DLPACKSHIM_ERR_VERSION = -5,          /* DLPack major version we do not speak (BufferError) */
  DLPACKSHIM_ERR_CAPSULE = -6,          /* capsule of the wrong name or already used (BufferError) */
  DLPACKSHIM_ERR_NO_PYTHON = -7,        /* no CPython in this process (RuntimeError) */
  DLPACKSHIM_ERR_TYPE = -8,             /* object of the wrong kind (TypeError) */
  DLPACKSHIM_ERR_DEVICE = -9,           /* GPU runtime missing or a driver call failed (BufferError) */
  DLPACKSHIM_ERR_STREAM = -10,          /* stream value not allowed for the device (ValueError) */
  DLPACKSHIM_ERR_COPY_REQUIRED = -11,   /* copy forbidden but needed (BufferError / ValueError) */
  DLPACKSHIM_ERR_READ_ONLY = -12,       /* read-only data where writable is needed (BufferError) */
  DLPACKSHIM_ERR_PYTHON = -13           /* a Python call failed; its exception is set */
} dlpackshim_status;

/* Stream values of the array API standard (for __dlpack__(stream=...)). */
typedef enum {
  DLPACKSHIM_STREAM_NONE = -1,             /* consumer asks for no synchronisation */
  DLPACKSHIM_STREAM_CUDA_LEGACY = 1,       /* CUDA legacy default stream */
  DLPACKSHIM_STREAM_CUDA_PER_THREAD = 2    /* CUDA per-thread default stream */
} dlpackshim_stream_value;

/* Limits. */
typedef enum {
  DLPACKSHIM_MAX_NDIM = 1024  /* larger ndim is rejected as absurd */
} dlpackshim_limit;

/* Memory layouts, as bits: a tensor may be both (one non-trivial axis, or empty). */
typedef enum {
  DLPACKSHIM_LAYOUT_NONE = 0, /* neither: strided, permuted or overlapping */
  DLPACKSHIM_LAYOUT_C = 1,    /* compact row-major (C order, NumPy's C_CONTIGUOUS) */
  DLPACKSHIM_LAYOUT_F = 2,    /* compact column-major (Fortran order, F_CONTIGUOUS) */
  DLPACKSHIM_LAYOUT_BOTH = 3  /* DLPACKSHIM_LAYOUT_C | DLPACKSHIM_LAYOUT_F */
} dlpackshim_layout;

/* Release callback for the owner of a tensor built with dlpackshim_tensor_new.
 * It runs on whichever thread frees the tensor; see docs/other-languages.md
 * for handing it back to an owner that lives on one thread. */
typedef void (*dlpackshim_release_fn)(void *owner);

/* ---- versions ------------------------------------------------------- */

/*! dlpackshim_version_string(): the library's version, e.g. "0.1.0". */
DLPACKSHIM_API const char *dlpackshim_version_string(void);

/*! dlpackshim_dlpack_version(): the DLPack ABI version implemented (1, 3).
 * Either pointer may be NULL. */
DLPACKSHIM_API void dlpackshim_dlpack_version(uint32_t *major, uint32_t *minor);

/*! dlpackshim_negotiate_version(): the version a producer supporting
 * (producer_major, producer_minor) exports to a consumer asking for at most
 * (max_major, max_minor): the smaller of the two. A producer whose major is
 * above the consumer's cannot go down to it: DLPACKSHIM_ERR_VERSION (the
 * caller may fall back to the legacy ABI when max_major is 0).
 * @return 0 or a negative status; the result in *major_out, *minor_out. */
DLPACKSHIM_API int dlpackshim_negotiate_version(uint32_t producer_major, uint32_t producer_minor,
                                                uint32_t max_major, uint32_t max_minor,
                                                uint32_t *major_out, uint32_t *minor_out);

/* ---- errors --------------------------------------------------------- */

/*! dlpackshim_strerror(): a static description of a status code. */
DLPACKSHIM_API const char *dlpackshim_strerror(int status);

/*! dlpackshim_last_error(): what the last failing call on this thread said
 * ("" if none). Valid until the next failing call on this thread. */
DLPACKSHIM_API const char *dlpackshim_last_error(void);

/*! dlpackshim_last_status(): the status of the last failing call on this thread (0 if none). */
DLPACKSHIM_API int dlpackshim_last_status(void);

/*! dlpackshim_clear_error(): forget the last error of this thread. */
DLPACKSHIM_API void dlpackshim_clear_error(void);

/* ---- building and freeing tensors ----------------------------------- */

/*! dlpackshim_tensor_new(): a DLManagedTensorVersioned (version 1.3) in one
 * allocation holding the struct, its shape and its strides. strides may be
 * NULL (compact row-major); the result always has explicit strides when
 * ndim > 0. The input is validated as by dlpackshim_tensor_validate.
 * owner/release: release(owner) is called exactly once, by the deleter
 * (release may be NULL). On failure release is NOT called.
 * Version: until the tensor is handed over, the caller may set
 * version.minor (e.g. to what dlpackshim_negotiate_version gave); version.major
 * must stay 1, as consumers (dlpackshim_capsule_consume) delete a tensor of
 * another major. dlpackshim_tensor_validate checks the DLTensor, not the version.
 * @return the tensor (free it with dlpackshim_tensor_free) or NULL. */
DLPACKSHIM_API DLManagedTensorVersioned *dlpackshim_tensor_new(
    void *data, int32_t device_type, int32_t device_id, int32_t ndim, const int64_t *shape,
    const int64_t *strides, uint8_t dtype_code, uint8_t dtype_bits, uint16_t dtype_lanes,
    uint64_t byte_offset, uint64_t flags, void *owner, dlpackshim_release_fn release);

/*! dlpackshim_tensor_free(): calls t->deleter(t) if both are non-NULL; for
 * any producer's tensor, not only ours. */
DLPACKSHIM_API void dlpackshim_tensor_free(DLManagedTensorVersioned *t);

/*! dlpackshim_tensor_new_legacy(): as dlpackshim_tensor_new, for the legacy
 * (pre-1.0) DLManagedTensor, which has no version and no flags. */
DLPACKSHIM_API DLManagedTensor *dlpackshim_tensor_new_legacy(
    void *data, int32_t device_type, int32_t device_id, int32_t ndim, const int64_t *shape,
    const int64_t *strides, uint8_t dtype_code, uint8_t dtype_bits, uint16_t dtype_lanes,
    uint64_t byte_offset, void *owner, dlpackshim_release_fn release);

/*! dlpackshim_tensor_free_legacy(): calls t->deleter(t) if both are non-NULL. */
DLPACKSHIM_API void dlpackshim_tensor_free_legacy(DLManagedTensor *t);

/*! dlpackshim_tensor_clone(): a compact row-major copy of src (CPU-accessible
 * memory only, else _UNSUPPORTED) on (kDLCPU, 0), data aligned to 256 bytes
 * (non-NULL even when empty), all in one allocation, with
 * flags | DLPACKSHIM_FLAG_IS_COPIED (READ_ONLY cleared). flags are src's:
 * IS_SUBBYTE_TYPE_PADDED says how its sub-byte elements are stored.
 * @return the new tensor (free with dlpackshim_tensor_free) or NULL. */
DLPACKSHIM_API DLManagedTensorVersioned *dlpackshim_tensor_clone(const DLTensor *src, uint64_t flags);

/*! dlpackshim_managed_dltensor(): &t->dl_tensor of a versioned managed tensor (NULL-safe). */
DLPACKSHIM_API DLTensor *dlpackshim_managed_dltensor(DLManagedTensorVersioned *t);

/* ---- ready-made releases -------------------------------------------- */

/* For owners that cannot be called back from another thread (JavaScript,
 * Lua, an event loop): the library frees the memory itself. Each release
 * is a dlpackshim_release_fn, so it returns nothing. */

/*! dlpackshim_release_free(): calls free(owner): pass it as `release` with
 * the malloc'ed data as `owner` (memory from the C library's malloc). */
DLPACKSHIM_API void dlpackshim_release_free(void *owner);

/*! dlpackshim_block_alloc(): nbytes (0 allowed) of memory aligned to 256
 * bytes with a reference count of 1, held by the caller.
 * @return 0, _INVALID_ARGUMENT (data_out NULL) or _NO_MEMORY; *data_out
 *         gets the memory (non-NULL). */
DLPACKSHIM_API int dlpackshim_block_alloc(size_t nbytes, void **data_out);

/*! dlpackshim_block_retain(): adds one reference (atomic: any thread).
 * @return 0 or _INVALID_ARGUMENT (data NULL). */
DLPACKSHIM_API int dlpackshim_block_retain(void *data);

/*! dlpackshim_block_release(): drops one reference (atomic: any thread) and
 * frees the block with the last; NULL does nothing. Pass it as `release`
 * with the block as `owner`, after a dlpackshim_block_retain for the tensor. */
DLPACKSHIM_API void dlpackshim_block_release(void *data);

/*! dlpackshim_block_refcount(): the block's current reference count.
 * @return 0 or _INVALID_ARGUMENT (a NULL pointer). */
DLPACKSHIM_API int dlpackshim_block_refcount(const void *data, int64_t *count_out);

/* ---- inspecting tensors --------------------------------------------- */

/*! dlpackshim_tensor_validate(): checks every field of t against the ABI:
 * ndim in [0, DLPACKSHIM_MAX_NDIM], shape non-NULL when ndim > 0, extents >= 0,
 * known dtype code, bits valid for the code, lanes >= 1, known device type,
 * device_id >= 0, element count and byte span within int64, byte_offset and
 * byte_offset + span within int64 (and, for host memory, no address
 * wrap-around), data non-NULL when the tensor is not empty, sub-byte rules
 * (packed sub-byte tensors must be compact row-major). Strides of extent-1
 * dims and of empty tensors are never used, so never checked. flags: the managed tensor's flags (0 for legacy).
 * Reads at most ndim entries of shape and strides.
 * @return 0 or DLPACKSHIM_ERR_INVALID_TENSOR / _INVALID_ARGUMENT. */
DLPACKSHIM_API int dlpackshim_tensor_validate(const DLTensor *t, uint64_t flags);

/*! dlpackshim_tensor_numel(): the number of elements (1 for 0-d; 0 when any
 * extent is 0), or a negative status. Checks only ndim and shape. */
DLPACKSHIM_API int64_t dlpackshim_tensor_numel(const DLTensor *t);

/*! dlpackshim_tensor_itemsize(): bytes per element (bits * lanes / 8), 0 for
 * packed sub-byte types, ceil(bits * lanes / 8) for padded ones (flags has
 * IS_SUBBYTE_TYPE_PADDED); or a negative status. Checks only the dtype. */
DLPACKSHIM_API int64_t dlpackshim_tensor_itemsize(const DLTensor *t, uint64_t flags);

/*! dlpackshim_tensor_nbytes(): bytes of the data if stored compactly
 * (packed sub-byte types round up to whole bytes), or a negative status.
 * Checks only shape and dtype, so a prototype without data can be sized. */
DLPACKSHIM_API int64_t dlpackshim_tensor_nbytes(const DLTensor *t, uint64_t flags);

/*! dlpackshim_tensor_is_contiguous(): 1 if t is compact row-major (C order),
 * 0 if not, negative status on a bad ndim or shape. As NumPy: strides of
 * size-1 dimensions are ignored, and a tensor with a zero extent is contiguous. */
DLPACKSHIM_API int dlpackshim_tensor_is_contiguous(const DLTensor *t);

/*! dlpackshim_tensor_layout(): which compact orders t's strides describe, as
 * NumPy's C_CONTIGUOUS / F_CONTIGUOUS: strides of extent-1 axes are ignored,
 * a tensor with a zero extent (or 0-d) is both, NULL strides are C order.
 * Checks only ndim and shape.
 * @return 0 or a negative status; *layout_out gets a dlpackshim_layout. */
DLPACKSHIM_API int dlpackshim_tensor_layout(const DLTensor *t, int32_t *layout_out);

/*! dlpackshim_compact_strides(): the strides, in elements, of a compact
 * tensor of this shape in `order` (DLPACKSHIM_LAYOUT_C or _F); extents 0
 * and 1 count as 1, as NumPy and PyTorch do. Writes ndim entries.
 * @return 0, _INVALID_ARGUMENT (order, ndim, NULL pointers) or
 *         _INVALID_TENSOR (a negative extent, strides overflow int64). */
DLPACKSHIM_API int dlpackshim_compact_strides(int32_t ndim, const int64_t *shape, int32_t order,
                                              int64_t *strides_out);

/*! dlpackshim_tensor_byte_span(): the bytes that t touches, as offsets from
 * (char *)data + byte_offset: [*lo, *hi). Empty tensors give [0, 0).
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_tensor_byte_span(const DLTensor *t, uint64_t flags, int64_t *lo,
                                               int64_t *hi);

/* ---- copies --------------------------------------------------------- */

/*! dlpackshim_copy(): copies src into dst element by element; both
 * host-accessible (kDLCPU, kDLCUDAHost, kDLROCMHost, kDLCUDAManaged, else
 * _UNSUPPORTED), same ndim, shape and dtype (else _INVALID_ARGUMENT), any
 * strides (negative and zero included; zero strides in dst leave one of the
 * values). When the two byte spans overlap, src is read into a temporary
 * first. Contiguous runs become memcpy and transposes are cache-blocked.
 * A DLTensor has no flags, so sub-byte types are taken as packed: both
 * tensors must then be compact (else _UNSUPPORTED).
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_copy(const DLTensor *dst, const DLTensor *src);

/* ---- Python capsules ------------------------------------------------ */

/*! dlpackshim_python_available(): 1 if CPython is running in this process, else 0. */
DLPACKSHIM_API int dlpackshim_python_available(void);

/*! dlpackshim_capsule_new(): wraps a managed tensor in a new capsule named
 * "dltensor_versioned" (versioned != 0) or "dltensor". The capsule's
 * destructor calls the deleter only if the capsule was never consumed.
 * On failure the tensor still belongs to the caller.
 * @return a new Python reference (needs the GIL), or NULL with an exception set. */
DLPACKSHIM_API void *dlpackshim_capsule_new(void *managed, int versioned);

/*! dlpackshim_capsule_consume(): takes the tensor out of a DLPack capsule
 * (capsule = id(obj)): checks the name, renames it "used_dltensor_versioned"
 * or "used_dltensor", and makes the capsule the tensor's owner (its new
 * destructor calls the deleter, with the GIL held, then the producer's own
 * capsule destructor, which sees the "used_" name as after any consumer). A versioned tensor of
 * another major version, or one that fails dlpackshim_tensor_validate, is
 * deleted at once and the call fails. *managed_out gets the managed tensor
 * (NULL on failure); the capsule owns it, so keep the capsule alive while
 * using it. A capsule that is not ours to take (foreign name, used_*) is left
 * untouched and its deleter is not called. Takes the GIL itself.
 * @return 1 (versioned), 0 (legacy) or a negative status
 *         (_TYPE: not a capsule; _CAPSULE: wrong name or used;
 *         _VERSION, _INVALID_TENSOR: taken and deleted; _NO_PYTHON). */
DLPACKSHIM_API int dlpackshim_capsule_consume(intptr_t capsule, void **managed_out);

/*! dlpackshim_capsule_import(): dlpackshim_capsule_consume, returning the
 * DLTensor to read: a snapshot of the producer's layout taken and validated
 * at import (explicit strides, even from a pre-1.2 producer), which a
 * producer that edits its own struct later cannot change. It lives as long
 * as the capsule; dlpackshim_owner_info tells versioned or legacy, and the
 * flags. One GIL round trip.
 * @return the address of the DLTensor, or 0 on failure (see dlpackshim_last_status). */
DLPACKSHIM_API intptr_t dlpackshim_capsule_import(intptr_t capsule);

/*! dlpackshim_owner_tensor(): the DLTensor a capsule that
 * dlpackshim_capsule_consume/import took still owns (what
 * dlpackshim_capsule_import returned), for code that kept only the capsule.
 * Takes the GIL itself.
 * @return its address, or 0 (_CAPSULE: not consumed by dlpackshim, or its
 *         consume failed; _TYPE: not a capsule; see dlpackshim_last_status). */
DLPACKSHIM_API intptr_t dlpackshim_owner_tensor(intptr_t capsule);

/*! dlpackshim_owner_info(): version and flags of a tensor owned by a capsule
 * that dlpackshim_capsule_consume/import took; legacy tensors report 0.0 and
 * flags READ_ONLY (a legacy producer says nothing of writability, so
 * dlpackshim never grants write access to it). Any output pointer may be
 * NULL; they are untouched on failure.
 * @return 1 (versioned), 0 (legacy) or a negative status (_CAPSULE: not
 *         consumed by dlpackshim, or its consume failed; _TYPE: not a capsule). */
DLPACKSHIM_API int dlpackshim_owner_info(intptr_t capsule, uint32_t *major, uint32_t *minor,
                                         uint64_t *flags);

/*! dlpackshim_capsule_export(): a new capsule viewing src, a DLTensor that stays
 * valid while `owner` lives. The exported tensor holds a reference to owner
 * (dropped by its deleter, with the GIL, never after Python finalised) and
 * its own copy of shape and strides. versioned: 1 -> "dltensor_versioned"
 * (version 1.3, flags as given), 0 -> "dltensor" (refused with
 * DLPACKSHIM_ERR_READ_ONLY when flags has READ_ONLY, as NumPy does, and with
 * DLPACKSHIM_ERR_UNSUPPORTED when it has IS_SUBBYTE_TYPE_PADDED, which the
 * legacy ABI cannot carry). When owner is a capsule holding one of
 * dlpackshim's own exports, the new export references that export's owner
 * instead, so re-import chains never nest.
 * src is validated first; NULL strides become explicit compact ones.
 * @return a new Python reference (needs the GIL), or NULL with an exception
 *         set: BufferError (invalid src, read-only legacy), ValueError (owner
 *         or src is 0), MemoryError. */
DLPACKSHIM_API void *dlpackshim_capsule_export(intptr_t owner, intptr_t src, uint64_t flags,
                                               int versioned);

/*! dlpackshim_capsule_export_copy(): as dlpackshim_capsule_export, but the
 * capsule holds a fresh compact copy of src (IS_COPIED set).
 * @return a new Python reference (needs the GIL), or NULL with an exception set. */
DLPACKSHIM_API void *dlpackshim_capsule_export_copy(intptr_t src, uint64_t flags, int versioned);

/*! dlpackshim_py_retain() / dlpackshim_py_release(): take or drop a reference
 * to a Python object, from any thread (GIL taken inside). Both do nothing
 * (0/NULL included) without a running CPython and once it is finalizing:
 * the reference is then leaked on purpose, as taking the GIL at shutdown can
 * hang the thread; retain records DLPACKSHIM_ERR_NO_PYTHON. dlpackshim_py_release
 * is a dlpackshim_release_fn, for owners passed to dlpackshim_tensor_new. */
DLPACKSHIM_API void dlpackshim_py_retain(intptr_t obj);
DLPACKSHIM_API void dlpackshim_py_release(void *obj);

/* ---- buffer protocol ------------------------------------------------ */

/*! dlpackshim_buffer_address(): the address of the first element of a
 * Python buffer-protocol object (obj = id(obj)), asked for as a strided
 * read-only view (PEP 3118 PyBUF_STRIDES) and released again at once: the
 * caller keeps an export of its own (e.g. a memoryview) alive while it uses
 * the address. Takes the GIL itself.
 * @return 0, or _TYPE (no strided buffer), _NO_PYTHON, _INVALID_ARGUMENT. */
DLPACKSHIM_API int dlpackshim_buffer_address(intptr_t obj, intptr_t *address_out);

/* ---- counted deleters (test producers) -------------------------------- */

/* A managed tensor whose deleter counts its calls (dlpackshim.testing). */
typedef struct dlpackshim_counted dlpackshim_counted;

/*! dlpackshim_counted_attach(): makes the deleter of managed (a
 * DLManagedTensorVersioned when versioned != 0, else a DLManagedTensor) count
 * its calls instead of deleting: deleter and manager_ctx are swapped for a
 * counting pair, which any thread may call, with or without the GIL, any
 * number of times; it frees nothing, so a double call is counted, never a
 * double free. The tensor is deleted by dlpackshim_counted_free.
 * @return the counter, or NULL (_INVALID_ARGUMENT, _NO_MEMORY). */
DLPACKSHIM_API dlpackshim_counted *dlpackshim_counted_attach(void *managed, int versioned);

/*! dlpackshim_counted_calls(): how many times the counting deleter was
 * called so far (0 for NULL). */
DLPACKSHIM_API int64_t dlpackshim_counted_calls(const dlpackshim_counted *c);

/*! dlpackshim_counted_free(): puts the original deleter and manager_ctx
 * back, calls that deleter (if non-NULL) once, and frees the counter
 * (NULL-safe). Call it only when no one can call the deleter any more. */
DLPACKSHIM_API void dlpackshim_counted_free(dlpackshim_counted *c);

/* ======================================================================
 * Devices and streams (csrc/gpu/).
 *
 * The GPU runtimes are opened with dlopen on first use, never linked:
 * CUDA's Driver API (libcuda.so.1, or the path in DLPACKSHIM_LIBCUDA) and
 * the HIP runtime (libamdhip64.so, or DLPACKSHIM_LIBHIP). An override, when
 * set, is the only path tried. A missing runtime is DLPACKSHIM_ERR_DEVICE
 * ("CUDA driver not found: tried ..."), the same answer on every call, and
 * CPU-only use never loads anything.
 *
 * Stream values are the array API standard's for __dlpack__(stream=...):
 *   CUDA, CUDA pinned and managed memory: None -> 1; 1 = legacy default
 *     stream; 2 = per-thread default stream; -1 = no synchronisation;
 *     0 is not allowed; anything else is a CUstream.
 *   ROCm: None -> 0 = default stream; -1 = no synchronisation; 1 and 2 are
 *     not allowed; anything else is a hipStream_t.
 *   CPU: None (or -1) only.
 * Every call that uses a device makes it current for the call (CUDA: pushes
 * the context of the stream given, or the device's primary context; ROCm:
 * hipSetDevice) and restores the caller's afterwards.
 * ====================================================================== */

/*! dlpackshim_stream_check(): checks a stream value for a device type by the
 * rules above. has_stream = 0 means Python's None. *normalized (may be NULL)
 * gets the value to use: None becomes 1 (CUDA), 0 (ROCm) or -1 (CPU).
 * @return 0, DLPACKSHIM_ERR_STREAM (value not allowed), _UNSUPPORTED (a
 *         stream for a device type dlpackshim cannot synchronise) or
 *         _INVALID_ARGUMENT (unknown device type). */
DLPACKSHIM_API int dlpackshim_stream_check(int32_t device_type, int has_stream, int64_t stream,
                                           int64_t *normalized);

/*! dlpackshim_stream_sync(): makes the consumer's stream wait for the work
 * queued so far on the producer's stream, without blocking the host: an
 * event (pooled per context, created once) is recorded on the producer
 * stream and cuStreamWaitEvent / hipStreamWaitEvent makes the consumer wait.
 * consumer_stream is the value given to __dlpack__ (checked as by
 * dlpackshim_stream_check; -1 does nothing). producer_stream is the stream
 * the data was written on, as the runtime's handle: CUDA 0 (NULL) or 1
 * legacy, 2 per-thread, else a CUstream; ROCm 0, else a hipStream_t. The
 * same stream on both sides does nothing.
 * @return 0, _STREAM, _INVALID_ARGUMENT or _DEVICE (runtime missing or a
 *         driver call failed: the message has the driver's error string). */
DLPACKSHIM_API int dlpackshim_stream_sync(int32_t device_type, int32_t device_id,
                                          int64_t producer_stream, int64_t consumer_stream);

/*! dlpackshim_stream_synchronize(): the host waits until the stream's work
 * is done (cuStreamSynchronize / hipStreamSynchronize); stream as the
 * producer stream of dlpackshim_stream_sync; -1 and non-GPU device types do
 * nothing. For handing GPU-written pinned or managed memory to the CPU.
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_stream_synchronize(int32_t device_type, int32_t device_id,
                                                 int64_t stream);

/*! dlpackshim_device_copy(): copies src into dst (same shape and dtype, any
 * strides, byte_offset honoured) where either may be GPU memory (kDLCUDA,
 * kDLROCM) and the other GPU memory of the same device or host-accessible
 * memory (CPU, pinned, managed). Work is queued on `stream` (the runtime's
 * handle, as the producer stream of dlpackshim_stream_sync) on the GPU
 * side's device. Layouts that merge to rows with a pitch become one linear,
 * 2-D or 3-D copy (or a few); others are staged through a host buffer and
 * gathered/scattered with dlpackshim_copy. When host memory is involved the
 * stream is synchronised before returning (the caller may read or reuse
 * it); a GPU-to-GPU copy is only queued. Empty tensors load nothing. Two
 * CPU-side tensors are copied as by dlpackshim_copy.
 * @return 0, _INVALID_ARGUMENT (shapes, dtypes), _UNSUPPORTED (two different
 *         GPUs, packed sub-byte strided), _STREAM, _DEVICE or _NO_MEMORY. */
DLPACKSHIM_API int dlpackshim_device_copy(const DLTensor *dst, const DLTensor *src,
                                          int64_t stream);

/*! dlpackshim_pointer_device(): the DLPack device of memory at ptr, asked of
 * a GPU runtime (cuPointerGetAttribute / hipPointerGetAttribute):
 * device memory -> (kDLCUDA | kDLROCM, ordinal); pinned host memory ->
 * (kDLCUDAHost | kDLROCMHost, 0); CUDA managed memory -> (kDLCUDAManaged, 0);
 * HIP managed memory -> (kDLROCM, ordinal); memory the runtime does not
 * know -> (kDLCPU, 0). runtime: kDLCUDA or kDLROCM (that runtime must load:
 * else _DEVICE), or 0 for any (CUDA first, then ROCm; none loading means
 * kDLCPU). @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_pointer_device(int32_t runtime, intptr_t ptr, int32_t *device_type,
                                             int32_t *device_id);

/*! dlpackshim_gpu_runtime_info(): loads the runtime of device_type (kDLCUDA
 * or kDLROCM families) and reports its versions (CUDA: cuDriverGetVersion,
 * runtime 0; ROCm: hipDriverGetVersion, hipRuntimeGetVersion) and how many
 * devices it sees. Any output pointer may be NULL.
 * @return 0, _DEVICE (runtime missing: the message lists the paths tried)
 *         or _INVALID_ARGUMENT. */
DLPACKSHIM_API int dlpackshim_gpu_runtime_info(int32_t device_type, int *driver_version,
                                               int *runtime_version, int *device_count);

/*! dlpackshim_gpu_library(): the library name or path that was loaded for
 * device_type's runtime (loading it if needed), or NULL if it is missing. */
DLPACKSHIM_API const char *dlpackshim_gpu_library(int32_t device_type);

/*! dlpackshim_gpu_device_name(): the device's name, NUL-terminated, cut to len.
 * @return 0 or a negative status (buf then holds ""). */
DLPACKSHIM_API int dlpackshim_gpu_device_name(int32_t device_type, int32_t device_id, char *buf,
                                              size_t len);

/*! dlpackshim_gpu_alloc(): nbytes of device memory (cuMemAlloc / hipMalloc)
 * on (device_type = kDLCUDA or kDLROCM, device_id); nbytes = 0 gives NULL.
 * Free it with dlpackshim_gpu_free. @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_gpu_alloc(int32_t device_type, int32_t device_id, size_t nbytes,
                                        void **out);

/*! dlpackshim_gpu_free(): frees memory from dlpackshim_gpu_alloc (NULL is fine).
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_gpu_free(int32_t device_type, int32_t device_id, void *ptr);

/*! dlpackshim_gpu_set_device(): makes (device_type = kDLCUDA or kDLROCM,
 * device_id) the current device of this thread (CUDA: pushes its primary
 * context; ROCm: hipSetDevice), as CuPy does around a producer's __dlpack__:
 * PyTorch refuses to export a tensor of another device index. *restore gets
 * what dlpackshim_gpu_restore_device needs to undo it, on the same thread.
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_gpu_set_device(int32_t device_type, int32_t device_id,
                                             int64_t *restore);

/*! dlpackshim_gpu_restore_device(): undoes dlpackshim_gpu_set_device (restore
 * as it gave it; -1 does nothing). @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_gpu_restore_device(int32_t device_type, int64_t restore);

/* ======================================================================
 * The DLPack C exchange API (dlpack.h 1.3, csrc/exchange.c).
 *
 * A producer type carries a PyCapsule named "dlpack_exchange_api" as its
 * type attribute __dlpack_c_exchange_api__, pointing at a DLPackExchangeAPI;
 * C consumers call its entries under the GIL and skip __dlpack__ entirely.
 * dlpackshim's Python Tensor carries the table below (the package sets the
 * attribute at import), and dlpackshim's from_dlpack uses other producers'
 * tables (PyTorch >= 2.10, tvm-ffi, ...).
 * ====================================================================== */

/*! dlpackshim_exchange_api(): the table of dlpackshim.Tensor (version 1.3,
 * prev_api NULL), static, never freed. Its entries need the Python package
 * loaded and the GIL held: managed_tensor_from_py_object_no_sync exports a
 * view that keeps the Tensor's memory alive; managed_tensor_to_py_object_no_sync
 * wraps a managed tensor (stolen, deleted on failure) in a new Tensor;
 * dltensor_from_py_object_no_sync fills a non-owning view (valid while the
 * Tensor is open; always with explicit strides, made once and kept with the
 * Tensor's owner when its producer gave NULL ones), which carries no flags:
 * it refuses what a legacy capsule refuses (read-only data, unless it came
 * in flagless; padded sub-byte data) with BufferError; current_work_stream gives NULL (the default stream);
 * managed_tensor_allocator makes compact uninitialised kDLCPU tensors (other
 * devices: SetError "BufferError"). */
DLPACKSHIM_API const DLPackExchangeAPI *dlpackshim_exchange_api(void);

/*! dlpackshim_exchange_api_capsule(): a capsule named "dlpack_exchange_api"
 * holding dlpackshim_exchange_api(), for a type's __dlpack_c_exchange_api__.
 * @return a new Python reference (needs the GIL), or NULL with an exception set. */
DLPACKSHIM_API void *dlpackshim_exchange_api_capsule(void);

/*! dlpackshim_exchange_import(): consumes obj (= id(obj)) through an
 * exchange table: the capsule api_capsule (= id(capsule)), or when it is 0
 * the table of type(obj)'s __dlpack_c_exchange_api__ (cached per type and
 * checked on each use to be still the type's, with the same __dlpack__; not
 * used when a subclass overrides __dlpack__ below the class carrying the
 * table). A table whose major version is not 1 is followed along prev_api.
 * Either way the checks the package makes for obj's type run first (for
 * PyTorch: what torch.Tensor.__dlpack__ refuses and its table lets
 * through). The tensor is checked (major version 1,
 * dlpackshim_tensor_validate; deleted on failure); for GPU data the default
 * stream is made to wait on the producer's current_work_stream.
 * *address_out (may be NULL) gets the DLTensor's address.
 * @return a new Python reference (needs the GIL) to a capsule that owns the
 *         tensor exactly as one dlpackshim_capsule_import consumed, or NULL
 *         with an exception set: the table's own (a RuntimeError or
 *         NotImplementedError from a foreign table becomes BufferError with
 *         its message's first part, as the producer's __dlpack__ raises),
 *         TypeError (no usable table), BufferError (invalid tensor, other
 *         major version). */
DLPACKSHIM_API void *dlpackshim_exchange_import(intptr_t obj, intptr_t api_capsule,
                                                intptr_t *address_out);

#ifdef __cplusplus
}
#endif

#endif /* DLPACKSHIM_H */
