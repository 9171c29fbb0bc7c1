/*
 * dlpackshim.h - the one public header of libdlpackshim.
 *
 * Part 1 is the DLPack 1.3 ABI (written from its layout; it must match dlpack.h
 * field for field). Part 2 is dlpackshim's flat API: plain functions, plain
 * integer arguments and pointers, no structs by value and no macros needed at
 * call sites, so ctypes, ABI-mode cffi, Rust or Julia can call every function.
 *
 * Conventions
 *  - Every function that can fail returns an int: DLPACKSHIM_OK (0) or a
 *    negative dlpackshim_status. Results come back through out-parameters
 *    (named *_out), written only on success unless a function says otherwise. dlpackshim_last_error() then
 *    names what exactly was wrong (thread-local: read it on the calling
 *    thread). The few functions that cannot fail return their value
 *    (a version string, a static table) or void.
 *  - Pointers are typed as pointers. A Python object is a `void *` holding
 *    its address (CPython's id(obj)); the caller keeps it alive for the call.
 *  - Functions that touch Python take the GIL themselves, so any caller may
 *    call them, holding the GIL or not (ABI-mode cffi and ctypes.CDLL drop
 *    it); they never leave a Python exception set. A new Python reference
 *    comes back through a `void **` out-parameter and belongs to the caller.
 *    While CPython finalizes (a __del__ at shutdown), only the finalizing
 *    thread may take the GIL: from any other thread they fail with
 *    _NO_PYTHON (the dlpackshim package tells the library which thread that
 *    is, from its atexit hook), and from every thread once Py_FinalizeEx
 *    has returned (a program that embeds CPython).
 *  - CPython is found at run time in the calling process; outside Python the
 *    capsule functions return DLPACKSHIM_ERR_NO_PYTHON. From the first call
 *    that finds it, the library stays loaded until the process ends (a
 *    dlclose leaves it mapped): Python objects then point into it (capsule
 *    destructors, the package's Tensor type and builtins).
 *  - Names with two underscores (dlpackshim__*) are the Python package's
 *    private entry points: not declared here, outside this API's promise.
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
  DLPACKSHIM_ERR_INVALID_ARGUMENT = -1, /* a parameter of the call is wrong: a NULL pointer,
                                           an unknown option (ValueError) */
  DLPACKSHIM_ERR_NO_MEMORY = -2,        /* allocation failed (MemoryError) */
  DLPACKSHIM_ERR_INVALID_TENSOR = -3,   /* a DLTensor, or the tensor that a call's parameters
                                           describe (tensor_new's ndim, shape, strides, dtype,
                                           device, data), breaks the ABI's rules (BufferError) */
  DLPACKSHIM_ERR_UNSUPPORTED = -4,      /* valid, but not something we can do (BufferError) */
  DLPACKSHIM_ERR_VERSION = -5,          /* DLPack major version we do not speak (BufferError) */
  DLPACKSHIM_ERR_CAPSULE = -6,          /* capsule of the wrong name or already used (BufferError) */
  DLPACKSHIM_ERR_NO_PYTHON = -7,        /* no CPython in this process (RuntimeError) */
  DLPACKSHIM_ERR_TYPE = -8,             /* object of the wrong kind (TypeError) */
  DLPACKSHIM_ERR_DEVICE = -9,           /* GPU runtime missing or a driver call failed (BufferError) */
  DLPACKSHIM_ERR_STREAM = -10,          /* stream value not allowed for the device (ValueError) */
  DLPACKSHIM_ERR_COPY_REQUIRED = -11,   /* copy forbidden but needed (BufferError / ValueError) */
  DLPACKSHIM_ERR_READ_ONLY = -12,       /* read-only data where writable is needed (BufferError) */
  DLPACKSHIM_ERR_PYTHON = -13           /* a Python call failed (RuntimeError; in the package, its own exception) */
} dlpackshim_status;

/* Stream values of the array API standard (for __dlpack__(stream=...)). */
typedef enum {
  DLPACKSHIM_STREAM_NONE = -1,             /* consumer asks for no synchronisation */
  DLPACKSHIM_STREAM_CUDA_LEGACY = 1,       /* CUDA legacy default stream */
  DLPACKSHIM_STREAM_CUDA_PER_THREAD = 2    /* CUDA per-thread default stream */
} dlpackshim_stream_value;

/* Limits. */
typedef enum {
  DLPACKSHIM_MAX_NDIM = 1024, /* larger ndim is rejected as absurd */
  DLPACKSHIM_ERROR_MAX = 512  /* bytes of the longest last-error message, its NUL included */
} dlpackshim_limit;

/* The revision of the private contract between this library and the
 * dlpackshim Python package (its dlpackshim__* entry points and the Tensor's
 * C base): the package loads a library only when the library's
 * dlpackshim__binding_revision() is the revision of the header the package
 * was generated from. Raised with each change that a package or library of
 * another build would misread. */
typedef enum { DLPACKSHIM_BINDING_REVISION = 1 } dlpackshim_binding;

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
DLPACKSHIM_API void dlpackshim_dlpack_version(uint32_t *major_out, uint32_t *minor_out);

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

/*! dlpackshim_last_error_copy(): copies this thread's last error message (what
 * dlpackshim_last_error() says) into buf: NUL-terminated, cut to at most
 * size - 1 bytes on a whole UTF-8 character (DLPACKSHIM_ERROR_MAX bytes
 * always hold it whole); nothing is written
 * when buf is NULL or size is 0. For runtimes whose tasks move between
 * threads (Go's goroutines, virtual threads): call it in the same C call as
 * the function that failed, so that both run on one thread
 * (docs/other-languages.md, its section on errors and threads).
 * @return the message's length (as strlen; >= size when it was cut). */
DLPACKSHIM_API size_t dlpackshim_last_error_copy(char *buf, size_t size);

/*! dlpackshim_last_status(): the status of the last failing call on this thread (0 if none). */
DLPACKSHIM_API int dlpackshim_last_status(void);

/*! dlpackshim_clear_error(): forget the last error of this thread. */
DLPACKSHIM_API void dlpackshim_clear_error(void);

/* ---- building and freeing tensors ----------------------------------- */

/*! dlpackshim_tensor_new(): a DLManagedTensorVersioned (version 1.3) in one
 * allocation with its shape and strides (NULL strides: compact row-major,
 * made explicit), validated as by dlpackshim_tensor_validate. The deleter
 * calls release(owner) exactly once (release may be NULL); a failed call
 * never does. Until the tensor is handed over the caller may lower
 * version.minor (dlpackshim_negotiate_version); the major must stay 1.
 * @return 0, _INVALID_ARGUMENT (tensor_out NULL), _NO_MEMORY or
 *         _INVALID_TENSOR (the tensor described breaks the ABI's rules: ndim,
 *         shape, strides, dtype, device, data); *tensor_out gets the tensor
 *         (free it with dlpackshim_tensor_free). */
DLPACKSHIM_API int dlpackshim_tensor_new(void *data, int32_t device_type, int32_t device_id,
                                         int32_t ndim, const int64_t *shape,
                                         const int64_t *strides, uint8_t dtype_code,
                                         uint8_t dtype_bits, uint16_t dtype_lanes,
                                         uint64_t byte_offset, uint64_t flags, void *owner,
                                         dlpackshim_release_fn release,
                                         DLManagedTensorVersioned **tensor_out);

/*! dlpackshim_tensor_free(): calls t->deleter(t) if both are non-NULL; for
 * any producer's tensor, not only ours. */
DLPACKSHIM_API void dlpackshim_tensor_free(DLManagedTensorVersioned *t);

/*! dlpackshim_tensor_new_legacy(): as dlpackshim_tensor_new, for the legacy
 * (pre-1.0) DLManagedTensor, which has no version and no flags.
 * @return 0 or a negative status; *tensor_out gets the tensor (free it with
 *         dlpackshim_tensor_free_legacy). */
DLPACKSHIM_API int dlpackshim_tensor_new_legacy(void *data, int32_t device_type,
                                                int32_t device_id, int32_t ndim,
                                                const int64_t *shape, const int64_t *strides,
                                                uint8_t dtype_code, uint8_t dtype_bits,
                                                uint16_t dtype_lanes, uint64_t byte_offset,
                                                void *owner, dlpackshim_release_fn release,
                                                DLManagedTensor **tensor_out);

/*! dlpackshim_tensor_free_legacy(): calls t->deleter(t) if both are non-NULL. */
DLPACKSHIM_API void dlpackshim_tensor_free_legacy(DLManagedTensor *t);

/*! dlpackshim_tensor_clone(): a compact row-major copy of src (CPU-accessible
 * memory only, else _UNSUPPORTED) on (kDLCPU, 0), data aligned to 256 bytes
 * (non-NULL even when empty), all in one allocation (advised for huge pages
 * from 2 MiB up, freed by the deleter), with
 * flags | DLPACKSHIM_FLAG_IS_COPIED (READ_ONLY cleared). flags are src's:
 * IS_SUBBYTE_TYPE_PADDED says how its sub-byte elements are stored. An empty
 * src whose compact strides overflow int64 (shape {0, 2^62, 4}) is valid but
 * has no compact copy: _UNSUPPORTED.
 * @return 0 or a negative status; *tensor_out gets the copy (free it with
 *         dlpackshim_tensor_free). */
DLPACKSHIM_API int dlpackshim_tensor_clone(const DLTensor *src, uint64_t flags,
                                           DLManagedTensorVersioned **tensor_out);

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
 * bytes, not cleared (advised for huge pages from 2 MiB up), with a
 * reference count of 1, held by the caller.
 * @return 0, _INVALID_ARGUMENT (data_out NULL) or _NO_MEMORY; *data_out
 *         gets the memory (non-NULL). */
DLPACKSHIM_API int dlpackshim_block_alloc(size_t nbytes, void **data_out);

/*! dlpackshim_block_retain(): adds one reference (atomic: any thread).
 * The block functions take only what dlpackshim_block_alloc handed out,
 * while a reference is held: anything else (another allocator's memory, a
 * block released once too often) is undefined behaviour, as free() of it
 * is; the library cannot tell such a pointer. Never pass a block to
 * dlpackshim_release_free.
 * @return 0 or _INVALID_ARGUMENT (data NULL). */
DLPACKSHIM_API int dlpackshim_block_retain(void *data);

/*! dlpackshim_block_release(): drops one reference (atomic: any thread) and
 * frees the block with the last; NULL does nothing. Pass it as `release`
 * with the block as `owner`, after a dlpackshim_block_retain for the tensor. */
DLPACKSHIM_API void dlpackshim_block_release(void *data);

/*! dlpackshim_block_refcount(): the block's current reference count (a
 * block of dlpackshim_block_alloc, as for dlpackshim_block_retain).
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
 * dims and of empty tensors are never used, so never checked; NULL strides
 * stand for the compact row-major ones, which must fit int64 (an empty
 * tensor's too: shape {0, 2^62, 4} has none). flags: the managed tensor's flags (0 for legacy).
 * Reads at most ndim entries of shape and strides.
 * @return 0 or DLPACKSHIM_ERR_INVALID_TENSOR / _INVALID_ARGUMENT. */
DLPACKSHIM_API int dlpackshim_tensor_validate(const DLTensor *t, uint64_t flags);

/*! dlpackshim_tensor_numel(): the number of elements (1 for 0-d; 0 when any
 * extent is 0). Checks only ndim and shape.
 * @return 0 or a negative status; the count in *numel_out. */
DLPACKSHIM_API int dlpackshim_tensor_numel(const DLTensor *t, int64_t *numel_out);

/*! dlpackshim_tensor_itemsize(): bytes per element (bits * lanes / 8), 0 for
 * packed sub-byte types, ceil(bits * lanes / 8) for padded ones (flags has
 * IS_SUBBYTE_TYPE_PADDED). Checks only the dtype.
 * @return 0 or a negative status; the size in *itemsize_out. */
DLPACKSHIM_API int dlpackshim_tensor_itemsize(const DLTensor *t, uint64_t flags,
                                              int64_t *itemsize_out);

/*! dlpackshim_tensor_nbytes(): bytes of the data if stored compactly
 * (packed sub-byte types round up to whole bytes). Checks only shape and
 * dtype, so a prototype without data can be sized.
 * @return 0 or a negative status; the size in *nbytes_out. */
DLPACKSHIM_API int dlpackshim_tensor_nbytes(const DLTensor *t, uint64_t flags,
                                            int64_t *nbytes_out);

/*! dlpackshim_tensor_layout(): which compact orders t's strides describe, as
 * NumPy's C_CONTIGUOUS / F_CONTIGUOUS: strides of extent-1 axes are ignored,
 * a tensor with a zero extent (or 0-d) is both, NULL strides are C order.
 * "Is it row-major?" is (*layout_out & DLPACKSHIM_LAYOUT_C). Checks only
 * ndim and shape.
 * @return 0 or a negative status; *layout_out gets a dlpackshim_layout. */
DLPACKSHIM_API int dlpackshim_tensor_layout(const DLTensor *t, int32_t *layout_out);

/*! dlpackshim_compact_strides(): the strides, in elements, of a compact
 * tensor of this shape in `order` (DLPACKSHIM_LAYOUT_C or _F); extents 0
 * and 1 count as 1, as NumPy and PyTorch do. Writes ndim entries, all
 * checked first (nothing is written on failure).
 * @return 0, _INVALID_ARGUMENT (order, ndim, NULL pointers) or
 *         _INVALID_TENSOR (a negative extent, strides overflow int64). */
DLPACKSHIM_API int dlpackshim_compact_strides(int32_t ndim, const int64_t *shape, int32_t order,
                                              int64_t *strides_out);

/*! dlpackshim_tensor_byte_span(): the bytes that t touches, as offsets from
 * (char *)data + byte_offset: [*lo_out, *hi_out). Empty tensors give [0, 0).
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_tensor_byte_span(const DLTensor *t, uint64_t flags, int64_t *lo_out,
                                               int64_t *hi_out);

/* ---- copies --------------------------------------------------------- */

/*! dlpackshim_copy(): copies src into dst element by element: same ndim,
 * shape and dtype (else _INVALID_ARGUMENT), any strides (negative and zero
 * included; a zero stride in dst keeps one of the values), byte_offset
 * honoured. Two host-accessible tensors (kDLCPU, kDLCUDAHost, kDLROCMHost,
 * kDLCUDAManaged) are copied on the host, through a temporary when their
 * bytes overlap; `stream` is then unused. Either side may be GPU memory
 * (kDLCUDA, kDLROCM) and the other host memory or the same GPU: the copy is
 * queued on `stream` (the runtime's handle, as the producer stream of
 * dlpackshim_stream_wait) and waited for when host memory is involved; two
 * views of one GPU allocation whose bytes overlap go through the host. Sub-byte
 * types are taken as packed, so both tensors must then be compact; when the
 * elements end inside their last byte, its other bits (the next elements of
 * a larger array) are left as they were. dst's
 * data is the result: every check comes before its first byte is written,
 * so a failed host copy leaves it untouched; a driver call failing in the
 * middle of a GPU copy can leave it partly written.
 * @return 0, _INVALID_ARGUMENT, _INVALID_TENSOR (src or dst breaks the ABI's
 *         rules), _UNSUPPORTED (other devices, two GPUs, strided packed
 *         sub-byte data), _STREAM, _DEVICE or _NO_MEMORY. */
DLPACKSHIM_API int dlpackshim_copy(const DLTensor *dst, const DLTensor *src, int64_t stream);

/* ---- Python capsules ------------------------------------------------ */

/*! dlpackshim_python_available(): 1 if CPython is running in this process, else 0. */
DLPACKSHIM_API int dlpackshim_python_available(void);

/*! dlpackshim_capsule_new(): wraps a managed tensor in a new capsule named
 * "dltensor_versioned" (versioned != 0) or "dltensor". The capsule's
 * destructor calls the deleter only if the capsule was never consumed.
 * On failure the tensor still belongs to the caller.
 * @return 0 or a negative status; *capsule_out gets a new reference. */
DLPACKSHIM_API int dlpackshim_capsule_new(void *managed, int versioned, void **capsule_out);

/*! dlpackshim_capsule_import(): consumes a DLPack capsule, as a consumer of
 * __dlpack__'s result must: checks the name, renames it "used_dltensor..."
 * and makes the capsule own the tensor (its destructor calls the deleter,
 * then the producer's own capsule destructor). *tensor_out gets a snapshot
 * of the layout taken and validated at import (explicit strides), valid while
 * the capsule lives; dlpackshim_capsule_info gives its version and flags. A
 * tensor of another major version or an invalid one is deleted at once; a
 * capsule that is not ours to take (foreign name, used_*, one this function
 * took already, renamed since) is left untouched.
 * @return 0, _TYPE (not a capsule), _CAPSULE (name), _VERSION or
 *         _INVALID_TENSOR (taken and deleted), _INVALID_ARGUMENT (NULL),
 *         _NO_PYTHON. */
DLPACKSHIM_API int dlpackshim_capsule_import(void *capsule, const DLTensor **tensor_out);

/*! dlpackshim_capsule_info(): what a capsule that dlpackshim_capsule_import
 * consumed holds: the snapshot (as import gave it), the version (legacy:
 * 0.0) and the producer's flags, every bit but 63 (legacy: READ_ONLY,
 * since a legacy producer says nothing of writability and dlpackshim never
 * grants write access to it). Any out-parameter may be NULL.
 * @return 0, _TYPE (not a capsule) or _CAPSULE (not imported by dlpackshim). */
DLPACKSHIM_API int dlpackshim_capsule_info(void *capsule, const DLTensor **tensor_out,
                                           uint32_t *major_out, uint32_t *minor_out,
                                           uint64_t *flags_out);

/*! dlpackshim_py_retain() / dlpackshim_py_release(): take or drop a reference
 * to a Python object, from any thread. For owners passed to
 * dlpackshim_tensor_new: retain the object, pass it as `owner` and
 * dlpackshim_py_release as `release`. Without a running CPython, and once it
 * finalizes, release does nothing (the reference is leaked on purpose: taking
 * the GIL at shutdown can hang the thread) and retain fails.
 * @return (retain) 0, _INVALID_ARGUMENT (NULL) or _NO_PYTHON. */
DLPACKSHIM_API int dlpackshim_py_retain(void *obj);
DLPACKSHIM_API void dlpackshim_py_release(void *obj);

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
 *   A CUstream or hipStream_t is an address, and the first page holds none:
 *   3..4095 (CUDA) and 1..4095 (ROCm) are refused (DLPACKSHIM_ERR_STREAM).
 * A runtime initialised before fork() counts as missing in the child
 * (DLPACKSHIM_ERR_DEVICE, saying so): the driver refuses every call there.
 *   CPU: None (or -1) only.
 * Every call that uses a device makes it current for the call (CUDA: pushes
 * the context of the stream given, or the device's primary context; ROCm:
 * hipSetDevice) and restores the caller's afterwards.
 * ====================================================================== */

/*! dlpackshim_stream_check(): checks a stream value for a device type by the
 * rules above. has_stream = 0 means Python's None. *normalized_out (may be NULL)
 * gets the value to use: None becomes 1 (CUDA), 0 (ROCm) or -1 (CPU).
 * @return 0, DLPACKSHIM_ERR_STREAM (value not allowed), _UNSUPPORTED (a
 *         stream for a device type dlpackshim cannot synchronise) or
 *         _INVALID_ARGUMENT (unknown device type). */
DLPACKSHIM_API int dlpackshim_stream_check(int32_t device_type, int has_stream, int64_t stream,
                                           int64_t *normalized_out);

/*! dlpackshim_stream_wait(): makes the consumer's stream wait for the work
 * queued so far on the producer's stream, without blocking the host: an
 * event (pooled per context, created once) is recorded on the producer
 * stream and cuStreamWaitEvent / hipStreamWaitEvent makes the consumer wait.
 * consumer_stream is the value given to __dlpack__ (checked as by
 * dlpackshim_stream_check; -1 does nothing). producer_stream is the stream
 * the data was written on, as the runtime's handle: CUDA 0 (NULL) or 1
 * legacy, 2 per-thread, else a CUstream; ROCm 0, else a hipStream_t. The
 * same stream on both sides does nothing.
 * @return 0, _STREAM, _INVALID_ARGUMENT, _UNSUPPORTED (a stream for a
 *         device type dlpackshim cannot synchronise, as by
 *         dlpackshim_stream_check) or _DEVICE (runtime missing or a driver
 *         call failed: the message has the driver's error string). */
DLPACKSHIM_API int dlpackshim_stream_wait(int32_t device_type, int32_t device_id,
                                          int64_t producer_stream, int64_t consumer_stream);

/*! dlpackshim_stream_synchronize(): the host waits until the stream's work
 * is done (cuStreamSynchronize / hipStreamSynchronize); stream as the
 * producer stream of dlpackshim_stream_wait; -1 and non-GPU device types do
 * nothing. For handing GPU-written pinned or managed memory to the CPU.
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_stream_synchronize(int32_t device_type, int32_t device_id,
                                                 int64_t stream);

/*! dlpackshim_pointer_device(): the DLPack device of memory at ptr, asked of
 * a GPU runtime (cuPointerGetAttribute / hipPointerGetAttribute):
 * device memory -> (kDLCUDA | kDLROCM, ordinal); pinned host memory ->
 * (kDLCUDAHost | kDLROCMHost, 0); CUDA managed memory -> (kDLCUDAManaged,
 * the ordinal it was allocated against, as CuPy reports it);
 * HIP managed memory -> (kDLROCM, ordinal); memory the runtime does not
 * know -> (kDLCPU, 0). runtime: kDLCUDA or kDLROCM (that runtime must load:
 * else _DEVICE), or 0 for any (CUDA first, then ROCm; none loading means
 * kDLCPU). @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_pointer_device(int32_t runtime, const void *ptr,
                                             int32_t *device_type_out, int32_t *device_id_out);

/*! dlpackshim_gpu_runtime_info(): loads the runtime of device_type (kDLCUDA
 * or kDLROCM families) and reports its versions (CUDA: cuDriverGetVersion,
 * runtime 0; ROCm: hipDriverGetVersion, hipRuntimeGetVersion) and how many
 * devices it sees. Any output pointer may be NULL.
 * @return 0, _DEVICE (runtime missing: the message lists the paths tried)
 *         or _INVALID_ARGUMENT. */
DLPACKSHIM_API int dlpackshim_gpu_runtime_info(int32_t device_type, int *driver_version_out,
                                               int *runtime_version_out, int *device_count_out);

/*! dlpackshim_gpu_library(): the library name or path loaded for
 * device_type's runtime (loading it if needed): the library's own copy,
 * valid for the life of the process (the environment may change).
 * @return 0, _DEVICE (runtime missing) or _INVALID_ARGUMENT; *path_out. */
DLPACKSHIM_API int dlpackshim_gpu_library(int32_t device_type, const char **path_out);

/*! dlpackshim_gpu_device_name(): the device's name, NUL-terminated, cut to len.
 * @return 0, _INVALID_ARGUMENT (no GPU runtime for device_type, a negative
 *         device_id, an empty buf) or _DEVICE (runtime missing, no such
 *         device); buf then holds "". */
DLPACKSHIM_API int dlpackshim_gpu_device_name(int32_t device_type, int32_t device_id, char *buf,
                                              size_t len);

/*! dlpackshim_gpu_alloc(): nbytes of device memory (cuMemAlloc / hipMalloc)
 * on (device_type = kDLCUDA or kDLROCM, device_id); nbytes = 0 gives NULL
 * (the device must exist all the same).
 * Free it with dlpackshim_gpu_free. @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_gpu_alloc(int32_t device_type, int32_t device_id, size_t nbytes,
                                        void **ptr_out);

/*! dlpackshim_gpu_free(): frees memory from dlpackshim_gpu_alloc (NULL is fine).
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_gpu_free(int32_t device_type, int32_t device_id, void *ptr);

/*! dlpackshim_gpu_set_device(): makes (device_type = kDLCUDA or kDLROCM,
 * device_id) the current device of this thread (CUDA: pushes its primary
 * context; ROCm: hipSetDevice), as CuPy does around a producer's __dlpack__:
 * PyTorch refuses to export a tensor of another device index. *restore_out gets
 * what dlpackshim_gpu_restore_device needs to undo it, on the same thread.
 * @return 0 or a negative status. */
DLPACKSHIM_API int dlpackshim_gpu_set_device(int32_t device_type, int32_t device_id,
                                             int64_t *restore_out);

/*! dlpackshim_gpu_restore_device(): undoes dlpackshim_gpu_set_device (restore
 * as it gave it; -1 does nothing). @return 0 or a negative status
 * (DLPACKSHIM_ERR_INVALID_ARGUMENT for a value set_device never gives). */
DLPACKSHIM_API int dlpackshim_gpu_restore_device(int32_t device_type, int64_t restore);

/* ======================================================================
 * The DLPack C exchange API (dlpack.h 1.3, csrc/python/produce.c).
 *
 * A producer type carries a PyCapsule named "dlpack_exchange_api" as its
 * type attribute __dlpack_c_exchange_api__, pointing at a DLPackExchangeAPI;
 * C consumers call its entries under the GIL and skip __dlpack__ entirely.
 * dlpackshim's Python Tensor carries the table below (the package sets the
 * attribute at import), and dlpackshim's from_dlpack uses other producers'
 * tables (PyTorch >= 2.10, tvm-ffi, ...).
 * ====================================================================== */

/*! dlpackshim_exchange_api(): dlpackshim.Tensor's table (version 1.3,
 * static). Its entries need the package imported and the GIL held. Exports
 * are views that keep the Tensor's memory alive; dltensor_from_py_object_no_sync
 * fills a view without flags, so it refuses read-only data (unless it came
 * in without flags) and padded sub-byte data (BufferError), as a legacy
 * capsule does; to_py steals the tensor (deleted on failure); the allocator
 * makes host tensors, on (kDLCPU, 0), only; a NULL argument or an invalid
 * prototype is a ValueError (an argument of the call), a valid one without
 * a compact layout (dlpackshim_tensor_clone's _UNSUPPORTED) a BufferError,
 * out of memory a MemoryError; current_work_stream gives NULL (default
 * stream). */
DLPACKSHIM_API const DLPackExchangeAPI *dlpackshim_exchange_api(void);

#ifdef __cplusplus
}
#endif

#endif /* DLPACKSHIM_H */
