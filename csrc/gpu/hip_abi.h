/*
 * hip_abi.h - the few pieces of the HIP runtime API (libamdhip64) that
 * dlpackshim uses, written from the documented layout so that no HIP header
 * is needed to build. Shared by csrc/gpu/hip.c and tests/fakegpu/fakehip.c;
 * tests/fakegpu/layout_hip.c checks them against <hip/hip_runtime_api.h>
 * when that header exists.
 *
 * Only interfaces whose layout is the same in HIP 5 and HIP 6 are used:
 * flat-argument calls, hipMemcpy3DParms (it mirrors cudaMemcpy3DParms and has
 * not changed), and single-attribute pointer queries (hipPointerGetAttribute)
 * instead of hipPointerGetAttributes, whose struct renamed its first field
 * and whose hipMemoryType values were renumbered in HIP 6. The one value
 * that still differs, the hipMemoryType returned for
 * HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, is decoded by runtime version in hip.c.
 */
#ifndef DLPACKSHIM_HIP_ABI_H
#define DLPACKSHIM_HIP_ABI_H

#include <stddef.h>

enum {
  SHIM_HIP_SUCCESS = 0,
  SHIM_HIP_ERROR_INVALID_VALUE = 1,
  SHIM_HIP_ERROR_INVALID_PITCH_VALUE = 12,
  SHIM_HIP_ERROR_NO_DEVICE = 100,
  SHIM_HIP_ERROR_INVALID_DEVICE = 101,
  SHIM_HIP_ERROR_INVALID_CONTEXT = 201,
  SHIM_HIP_ERROR_INVALID_HANDLE = 400,
  SHIM_HIP_ERROR_CONTEXT_IS_DESTROYED = 709,

  SHIM_HIP_MEMCPY_HOST_TO_HOST = 0,
  SHIM_HIP_MEMCPY_HOST_TO_DEVICE = 1,
  SHIM_HIP_MEMCPY_DEVICE_TO_HOST = 2,
  SHIM_HIP_MEMCPY_DEVICE_TO_DEVICE = 3,

  SHIM_HIP_EVENT_DISABLE_TIMING = 2,

  SHIM_HIP_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  SHIM_HIP_POINTER_ATTRIBUTE_IS_MANAGED = 8,
  SHIM_HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,

  /* hipMemoryType as HIP 5 numbers it ... */
  SHIM_HIP5_MEMORY_TYPE_HOST = 0,
  SHIM_HIP5_MEMORY_TYPE_DEVICE = 1,
  SHIM_HIP5_MEMORY_TYPE_ARRAY = 2,
  SHIM_HIP5_MEMORY_TYPE_UNIFIED = 3,
  SHIM_HIP5_MEMORY_TYPE_MANAGED = 4, /* added late in HIP 5 */
  /* ... and as HIP 6 does (the CUDA runtime's cudaMemoryType numbering). */
  SHIM_HIP6_MEMORY_TYPE_UNREGISTERED = 0,
  SHIM_HIP6_MEMORY_TYPE_HOST = 1,
  SHIM_HIP6_MEMORY_TYPE_DEVICE = 2,
  SHIM_HIP6_MEMORY_TYPE_MANAGED = 3,

  /* HIP_VERSION = major * 10000000 + minor * 100000 + patch */
  SHIM_HIP_VERSION_6 = 60000000
};

typedef struct shim_hip_pos {
  size_t x, y, z;
} shim_hip_pos;

typedef struct shim_hip_pitched_ptr {
  void *ptr;
  size_t pitch; /* bytes per row */
  size_t xsize; /* row width in bytes (informational for linear memory) */
  size_t ysize; /* rows per slice */
} shim_hip_pitched_ptr;

typedef struct shim_hip_extent {
  size_t width; /* bytes, for linear memory */
  size_t height;
  size_t depth;
} shim_hip_extent;

typedef struct shim_hip_memcpy3d_parms {
  void *srcArray; /* hipArray_t: NULL for linear memory */
  shim_hip_pos srcPos;
  shim_hip_pitched_ptr srcPtr;
  void *dstArray;
  shim_hip_pos dstPos;
  shim_hip_pitched_ptr dstPtr;
  shim_hip_extent extent;
  int kind; /* hipMemcpyKind */
} shim_hip_memcpy3d_parms;

#ifdef SHIM_HIP_REAL_TYPES
typedef hipError_t shim_hipError_t;
typedef hipDevice_t shim_hipDevice_t;
typedef hipStream_t shim_hipStream_t;
typedef hipEvent_t shim_hipEvent_t;
typedef hipMemcpyKind shim_hipMemcpyKind;
typedef hipPointer_attribute shim_hipPointer_attribute;
typedef hipDeviceptr_t shim_hipDeviceptr_t;
typedef struct hipMemcpy3DParms shim_hipMemcpy3DParms;
#else
typedef int shim_hipError_t;
typedef int shim_hipDevice_t;
typedef struct shim_ihipStream_t *shim_hipStream_t;
typedef struct shim_ihipEvent_t *shim_hipEvent_t;
typedef int shim_hipMemcpyKind;
typedef int shim_hipPointer_attribute;
typedef void *shim_hipDeviceptr_t;
typedef shim_hip_memcpy3d_parms shim_hipMemcpy3DParms;
#endif

#define SHIM_HIP_ENTRY_POINTS(X)                                                               \
  X(hipGetDeviceCount, shim_hipError_t, (int *count))                                          \
  X(hipDriverGetVersion, shim_hipError_t, (int *version))                                      \
  X(hipRuntimeGetVersion, shim_hipError_t, (int *version))                                     \
  X(hipDeviceGet, shim_hipError_t, (shim_hipDevice_t * device, int ordinal))                   \
  X(hipDeviceGetName, shim_hipError_t, (char *name, int len, shim_hipDevice_t device))         \
  X(hipGetDevice, shim_hipError_t, (int *device))                                              \
  X(hipSetDevice, shim_hipError_t, (int device))                                               \
  X(hipEventCreateWithFlags, shim_hipError_t, (shim_hipEvent_t * event, unsigned flags))       \
  X(hipEventDestroy, shim_hipError_t, (shim_hipEvent_t event))                                 \
  X(hipEventRecord, shim_hipError_t, (shim_hipEvent_t event, shim_hipStream_t stream))         \
  X(hipStreamWaitEvent, shim_hipError_t,                                                       \
    (shim_hipStream_t stream, shim_hipEvent_t event, unsigned int flags))                      \
  X(hipStreamSynchronize, shim_hipError_t, (shim_hipStream_t stream))                          \
  X(hipDeviceSynchronize, shim_hipError_t, (void))                                             \
  X(hipMemcpyAsync, shim_hipError_t,                                                           \
    (void *dst, const void *src, size_t n, shim_hipMemcpyKind kind, shim_hipStream_t stream))  \
  X(hipMemcpy2DAsync, shim_hipError_t,                                                         \
    (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,    \
     shim_hipMemcpyKind kind, shim_hipStream_t stream))                                        \
  X(hipMemcpy3DAsync, shim_hipError_t,                                                         \
    (const shim_hipMemcpy3DParms *p, shim_hipStream_t stream))                                 \
  X(hipMalloc, shim_hipError_t, (void **ptr, size_t n))                                        \
  X(hipFree, shim_hipError_t, (void *ptr))                                                     \
  X(hipGetErrorString, const char *, (shim_hipError_t error))

/* hipGetLastError/hipPeekAtLastError: in every HIP, but only read to undo
 * the last error our own expected failures leave pending (sticky in ROCm 7). */
#define SHIM_HIP_OPTIONAL_ENTRY_POINTS(X)                                                      \
  X(hipGetLastError, shim_hipError_t, (void))                                                  \
  X(hipPeekAtLastError, shim_hipError_t, (void))                                               \
  X(hipGetErrorName, const char *, (shim_hipError_t error))                                    \
  X(hipPointerGetAttribute, shim_hipError_t,                                                   \
    (void *data, shim_hipPointer_attribute attribute, shim_hipDeviceptr_t ptr))

#define SHIM_HIP_DECLARE_FN(name, ret, args) typedef ret(*shim_##name##_fn) args;
SHIM_HIP_ENTRY_POINTS(SHIM_HIP_DECLARE_FN)
SHIM_HIP_OPTIONAL_ENTRY_POINTS(SHIM_HIP_DECLARE_FN)
#undef SHIM_HIP_DECLARE_FN

#endif /* DLPACKSHIM_HIP_ABI_H */
