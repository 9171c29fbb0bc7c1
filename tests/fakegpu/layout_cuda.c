/*
 * layout_cuda.c - csrc/gpu/cuda_abi.h against the real <cuda.h>: every struct
 * field's offset and size, every constant, and every prototype (with the
 * real types substituted, assigning each driver function to our pointer
 * type must compile under -Werror). Built and run by check-layout.sh only
 * when cuda.h exists; the library itself never includes it.
 */
#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SHIM_CUDA_REAL_TYPES 1
#include "cuda_abi.h"

#define SAME_FIELD(ours, theirs, f)                                            \
  _Static_assert(offsetof(ours, f) == offsetof(theirs, f), #ours "." #f " offset"); \
  _Static_assert(sizeof(((ours *)0)->f) == sizeof(((theirs *)0)->f), #ours "." #f " size")

SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, srcXInBytes);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, srcY);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, srcMemoryType);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, srcHost);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, srcDevice);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, srcArray);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, srcPitch);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, dstXInBytes);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, dstY);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, dstMemoryType);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, dstHost);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, dstDevice);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, dstArray);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, dstPitch);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, WidthInBytes);
SAME_FIELD(shim_cu_memcpy2d, CUDA_MEMCPY2D, Height);
_Static_assert(sizeof(shim_cu_memcpy2d) == sizeof(CUDA_MEMCPY2D), "CUDA_MEMCPY2D size");

SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcXInBytes);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcY);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcZ);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcLOD);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcMemoryType);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcHost);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcDevice);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcArray);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, reserved0);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcPitch);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, srcHeight);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstXInBytes);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstY);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstZ);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstLOD);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstMemoryType);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstHost);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstDevice);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstArray);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, reserved1);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstPitch);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, dstHeight);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, WidthInBytes);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, Height);
SAME_FIELD(shim_cu_memcpy3d, CUDA_MEMCPY3D, Depth);
_Static_assert(sizeof(shim_cu_memcpy3d) == sizeof(CUDA_MEMCPY3D), "CUDA_MEMCPY3D size");

/* The scalar stand-ins the library uses when it is built without cuda.h. */
_Static_assert(sizeof(CUresult) == sizeof(int), "CUresult is int-sized");
_Static_assert(__builtin_types_compatible_p(CUdevice, int), "CUdevice is int");
_Static_assert(__builtin_types_compatible_p(CUdeviceptr, unsigned long long), "CUdeviceptr");
_Static_assert(sizeof(CUpointer_attribute) == sizeof(int), "CUpointer_attribute is int-sized");
_Static_assert(sizeof(CUmemorytype) == sizeof(int), "CUmemorytype is int-sized");

#define SAME_VALUE(ours, theirs) _Static_assert((long long)(ours) == (long long)(theirs), #theirs)
SAME_VALUE(SHIM_CUDA_SUCCESS, CUDA_SUCCESS);
SAME_VALUE(SHIM_CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME_VALUE(SHIM_CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME_VALUE(SHIM_CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME_VALUE(SHIM_CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME_VALUE(SHIM_CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT);
SAME_VALUE(SHIM_CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE);
SAME_VALUE(SHIM_CUDA_ERROR_CONTEXT_IS_DESTROYED, CUDA_ERROR_CONTEXT_IS_DESTROYED);
SAME_VALUE(SHIM_CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST);
SAME_VALUE(SHIM_CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
SAME_VALUE(SHIM_CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_ARRAY);
SAME_VALUE(SHIM_CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED);
SAME_VALUE(SHIM_CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_CONTEXT);
SAME_VALUE(SHIM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME_VALUE(SHIM_CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_IS_MANAGED);
SAME_VALUE(SHIM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
SAME_VALUE(SHIM_CU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME_VALUE(SHIM_CU_EVENT_WAIT_DEFAULT, CU_EVENT_WAIT_DEFAULT);

/* Every prototype: the driver's declaration has exactly our pointer type
 * (checked at compile time, so nothing needs libcuda to link or run). */
#define SAME_PROTOTYPE(name, ret, args)                                          \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), shim_##name##_fn), \
                 "prototype of " #name);
SHIM_CUDA_ENTRY_POINTS(SAME_PROTOTYPE)
SHIM_CUDA_OPTIONAL_ENTRY_POINTS(SAME_PROTOTYPE)

int main(void) {
  int failed = 0;
  /* Pointer constants cannot be compared at compile time. */
  if (SHIM_CU_STREAM_LEGACY != CU_STREAM_LEGACY) failed = puts("CU_STREAM_LEGACY differs");
  if (SHIM_CU_STREAM_PER_THREAD != CU_STREAM_PER_THREAD)
    failed = puts("CU_STREAM_PER_THREAD differs");
  printf("layout_cuda (CUDA_VERSION %d): %d passed, %d failed\n", CUDA_VERSION,
         failed ? 0 : 1, failed ? 1 : 0);
  return failed ? 1 : 0;
}
