/*
 * cuda_abi.h - the few pieces of the CUDA Driver API that dlpackshim uses,
 * written from the documented layout so that no CUDA header is needed to
 * build. Shared by csrc/gpu/cuda.c and the fake driver tests/fakegpu/fakecuda.c;
 * tests/fakegpu/layout_cuda.c checks every struct offset, constant and
 * prototype below against the real cuda.h when that header exists.
 *
 * Everything is prefixed shim_ / SHIM_ so that this file can be included next
 * to cuda.h. With SHIM_CUDA_REAL_TYPES defined (only the layout test does),
 * the scalar and struct types are the real ones, so that the prototypes are
 * type-checked against the driver's own declarations.
 */
#ifndef DLPACKSHIM_CUDA_ABI_H
#define DLPACKSHIM_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

/* Constants (values fixed by the driver ABI). */
enum {
  SHIM_CUDA_SUCCESS = 0,
  SHIM_CUDA_ERROR_INVALID_VALUE = 1,
  SHIM_CUDA_ERROR_NOT_INITIALIZED = 3,
  SHIM_CUDA_ERROR_NO_DEVICE = 100,
  SHIM_CUDA_ERROR_INVALID_DEVICE = 101,
  SHIM_CUDA_ERROR_INVALID_CONTEXT = 201,
  SHIM_CUDA_ERROR_INVALID_HANDLE = 400,
  SHIM_CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,

  SHIM_CU_MEMORYTYPE_HOST = 1,
  SHIM_CU_MEMORYTYPE_DEVICE = 2,
  SHIM_CU_MEMORYTYPE_ARRAY = 3,
  SHIM_CU_MEMORYTYPE_UNIFIED = 4,

  SHIM_CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  SHIM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  SHIM_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
  SHIM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,

  SHIM_CU_EVENT_DISABLE_TIMING = 2,
  SHIM_CU_EVENT_WAIT_DEFAULT = 0
};

/* The special stream handles (cuda.h: CU_STREAM_LEGACY, CU_STREAM_PER_THREAD). */
#define SHIM_CU_STREAM_LEGACY ((shim_CUstream)0x1)
#define SHIM_CU_STREAM_PER_THREAD ((shim_CUstream)0x2)

/* CUDA_MEMCPY2D (the _v2 layout: size_t fields), as in cuda.h since CUDA 3.2. */
typedef struct shim_cu_memcpy2d {
  size_t srcXInBytes;
  size_t srcY;
  int srcMemoryType; /* CUmemorytype */
  const void *srcHost;
  unsigned long long srcDevice; /* CUdeviceptr */
  void *srcArray;               /* CUarray */
  size_t srcPitch;

  size_t dstXInBytes;
  size_t dstY;
  int dstMemoryType;
  void *dstHost;
  unsigned long long dstDevice;
  void *dstArray;
  size_t dstPitch;

  size_t WidthInBytes;
  size_t Height;
} shim_cu_memcpy2d;

/* CUDA_MEMCPY3D (_v2 layout). reserved0/1 must be NULL. */
typedef struct shim_cu_memcpy3d {
  size_t srcXInBytes;
  size_t srcY;
  size_t srcZ;
  size_t srcLOD;
  int srcMemoryType;
  const void *srcHost;
  unsigned long long srcDevice;
  void *srcArray;
  void *reserved0;
  size_t srcPitch;
  size_t srcHeight; /* rows per slice of the source */

  size_t dstXInBytes;
  size_t dstY;
  size_t dstZ;
  size_t dstLOD;
  int dstMemoryType;
  void *dstHost;
  unsigned long long dstDevice;
  void *dstArray;
  void *reserved1;
  size_t dstPitch;
  size_t dstHeight;

  size_t WidthInBytes;
  size_t Height;
  size_t Depth;
} shim_cu_memcpy3d;

#ifdef SHIM_CUDA_REAL_TYPES
typedef CUresult shim_CUresult;
typedef CUdevice shim_CUdevice;
typedef CUdeviceptr shim_CUdeviceptr;
typedef CUcontext shim_CUcontext;
typedef CUstream shim_CUstream;
typedef CUevent shim_CUevent;
typedef CUpointer_attribute shim_CUpointer_attribute;
typedef CUDA_MEMCPY2D shim_CUDA_MEMCPY2D;
typedef CUDA_MEMCPY3D shim_CUDA_MEMCPY3D;
#else
typedef int shim_CUresult;                  /* enum cudaError_enum */
typedef int shim_CUdevice;                  /* an ordinal */
typedef unsigned long long shim_CUdeviceptr;
typedef struct shim_CUctx_st *shim_CUcontext;
typedef struct shim_CUstream_st *shim_CUstream;
typedef struct shim_CUevent_st *shim_CUevent;
typedef int shim_CUpointer_attribute;       /* enum CUpointer_attribute_enum */
typedef shim_cu_memcpy2d shim_CUDA_MEMCPY2D;
typedef shim_cu_memcpy3d shim_CUDA_MEMCPY3D;
#endif

/* The entry points, each with the exact name dlsym looks up. */
#define SHIM_CUDA_ENTRY_POINTS(X)                                                              \
  X(cuInit, shim_CUresult, (unsigned int flags))                                               \
  X(cuDriverGetVersion, shim_CUresult, (int *version))                                         \
  X(cuDeviceGetCount, shim_CUresult, (int *count))                                             \
  X(cuDeviceGet, shim_CUresult, (shim_CUdevice *device, int ordinal))                          \
  X(cuDeviceGetName, shim_CUresult, (char *name, int len, shim_CUdevice dev))                  \
  X(cuDevicePrimaryCtxRetain, shim_CUresult, (shim_CUcontext *pctx, shim_CUdevice dev))        \
  X(cuCtxPushCurrent_v2, shim_CUresult, (shim_CUcontext ctx))                                  \
  X(cuCtxPopCurrent_v2, shim_CUresult, (shim_CUcontext *pctx))                                 \
  X(cuEventCreate, shim_CUresult, (shim_CUevent *event, unsigned int flags))                   \
  X(cuEventDestroy_v2, shim_CUresult, (shim_CUevent event))                                    \
  X(cuEventRecord, shim_CUresult, (shim_CUevent event, shim_CUstream stream))                  \
  X(cuStreamWaitEvent, shim_CUresult,                                                          \
    (shim_CUstream stream, shim_CUevent event, unsigned int flags))                            \
  X(cuStreamSynchronize, shim_CUresult, (shim_CUstream stream))                                \
  X(cuCtxSynchronize, shim_CUresult, (void))                                                   \
  X(cuMemcpyDtoHAsync_v2, shim_CUresult,                                                       \
    (void *dst, shim_CUdeviceptr src, size_t n, shim_CUstream stream))                         \
  X(cuMemcpyHtoDAsync_v2, shim_CUresult,                                                       \
    (shim_CUdeviceptr dst, const void *src, size_t n, shim_CUstream stream))                   \
  X(cuMemcpyDtoDAsync_v2, shim_CUresult,                                                       \
    (shim_CUdeviceptr dst, shim_CUdeviceptr src, size_t n, shim_CUstream stream))              \
  X(cuMemcpy2DAsync_v2, shim_CUresult, (const shim_CUDA_MEMCPY2D *p, shim_CUstream stream))    \
  X(cuMemcpy3DAsync_v2, shim_CUresult, (const shim_CUDA_MEMCPY3D *p, shim_CUstream stream))    \
  X(cuPointerGetAttribute, shim_CUresult,                                                      \
    (void *data, shim_CUpointer_attribute attribute, shim_CUdeviceptr ptr))                    \
  X(cuMemAlloc_v2, shim_CUresult, (shim_CUdeviceptr * dptr, size_t n))                         \
  X(cuMemFree_v2, shim_CUresult, (shim_CUdeviceptr dptr))

/* Looked up too, but a driver without them still works. */
#define SHIM_CUDA_OPTIONAL_ENTRY_POINTS(X)                                                     \
  X(cuGetErrorString, shim_CUresult, (shim_CUresult error, const char **str))                  \
  X(cuGetErrorName, shim_CUresult, (shim_CUresult error, const char **str))                    \
  X(cuStreamGetCtx, shim_CUresult, (shim_CUstream stream, shim_CUcontext *pctx))

#define SHIM_CUDA_DECLARE_FN(name, ret, args) typedef ret(*shim_##name##_fn) args;
SHIM_CUDA_ENTRY_POINTS(SHIM_CUDA_DECLARE_FN)
SHIM_CUDA_OPTIONAL_ENTRY_POINTS(SHIM_CUDA_DECLARE_FN)
#undef SHIM_CUDA_DECLARE_FN

#endif /* DLPACKSHIM_CUDA_ABI_H */
