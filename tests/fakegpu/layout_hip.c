/*
 * layout_hip.c - csrc/gpu/hip_abi.h against the real <hip/hip_runtime_api.h>
 * (HIP 5 or 6): struct layouts, constants and every prototype, at compile
 * time. Built and run by check-layout.sh only when the header exists; the
 * library itself never includes it.
 */
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>
#include <stddef.h>
#include <stdio.h>

#define SHIM_HIP_REAL_TYPES 1
#include "hip_abi.h"

#define SAME_FIELD(ours, theirs, f)                                            \
  _Static_assert(offsetof(ours, f) == offsetof(theirs, f), #ours "." #f " offset"); \
  _Static_assert(sizeof(((ours *)0)->f) == sizeof(((theirs *)0)->f), #ours "." #f " size")

SAME_FIELD(shim_hip_pos, struct hipPos, x);
SAME_FIELD(shim_hip_pos, struct hipPos, y);
SAME_FIELD(shim_hip_pos, struct hipPos, z);
SAME_FIELD(shim_hip_pitched_ptr, struct hipPitchedPtr, ptr);
SAME_FIELD(shim_hip_pitched_ptr, struct hipPitchedPtr, pitch);
SAME_FIELD(shim_hip_pitched_ptr, struct hipPitchedPtr, xsize);
SAME_FIELD(shim_hip_pitched_ptr, struct hipPitchedPtr, ysize);
SAME_FIELD(shim_hip_extent, struct hipExtent, width);
SAME_FIELD(shim_hip_extent, struct hipExtent, height);
SAME_FIELD(shim_hip_extent, struct hipExtent, depth);
SAME_FIELD(shim_hip_memcpy3d_parms, struct hipMemcpy3DParms, srcArray);
SAME_FIELD(shim_hip_memcpy3d_parms, struct hipMemcpy3DParms, srcPos);
SAME_FIELD(shim_hip_memcpy3d_parms, struct hipMemcpy3DParms, srcPtr);
SAME_FIELD(shim_hip_memcpy3d_parms, struct hipMemcpy3DParms, dstArray);
SAME_FIELD(shim_hip_memcpy3d_parms, struct hipMemcpy3DParms, dstPos);
SAME_FIELD(shim_hip_memcpy3d_parms, struct hipMemcpy3DParms, dstPtr);
SAME_FIELD(shim_hip_memcpy3d_parms, struct hipMemcpy3DParms, extent);
SAME_FIELD(shim_hip_memcpy3d_parms, struct hipMemcpy3DParms, kind);
_Static_assert(sizeof(shim_hip_memcpy3d_parms) == sizeof(struct hipMemcpy3DParms),
               "hipMemcpy3DParms size");

_Static_assert(sizeof(hipError_t) == sizeof(int), "hipError_t is int-sized");
_Static_assert(sizeof(hipMemcpyKind) == sizeof(int), "hipMemcpyKind is int-sized");
_Static_assert(sizeof(hipPointer_attribute) == sizeof(int), "hipPointer_attribute is int-sized");
_Static_assert(__builtin_types_compatible_p(hipDevice_t, int), "hipDevice_t is int");
_Static_assert(__builtin_types_compatible_p(hipDeviceptr_t, void *), "hipDeviceptr_t is void *");

#define SAME_VALUE(ours, theirs) _Static_assert((long long)(ours) == (long long)(theirs), #theirs)
SAME_VALUE(SHIM_HIP_SUCCESS, hipSuccess);
SAME_VALUE(SHIM_HIP_ERROR_INVALID_VALUE, hipErrorInvalidValue);
SAME_VALUE(SHIM_HIP_ERROR_NO_DEVICE, hipErrorNoDevice);
SAME_VALUE(SHIM_HIP_ERROR_INVALID_DEVICE, hipErrorInvalidDevice);
SAME_VALUE(SHIM_HIP_ERROR_INVALID_HANDLE, hipErrorInvalidHandle);
SAME_VALUE(SHIM_HIP_ERROR_INVALID_PITCH_VALUE, hipErrorInvalidPitchValue);
SAME_VALUE(SHIM_HIP_ERROR_INVALID_CONTEXT, hipErrorInvalidContext);
SAME_VALUE(SHIM_HIP_ERROR_CONTEXT_IS_DESTROYED, hipErrorContextIsDestroyed);
SAME_VALUE(SHIM_HIP_MEMCPY_HOST_TO_HOST, hipMemcpyHostToHost);
SAME_VALUE(SHIM_HIP_MEMCPY_HOST_TO_DEVICE, hipMemcpyHostToDevice);
SAME_VALUE(SHIM_HIP_MEMCPY_DEVICE_TO_HOST, hipMemcpyDeviceToHost);
SAME_VALUE(SHIM_HIP_MEMCPY_DEVICE_TO_DEVICE, hipMemcpyDeviceToDevice);
SAME_VALUE(SHIM_HIP_EVENT_DISABLE_TIMING, hipEventDisableTiming);
SAME_VALUE(SHIM_HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, HIP_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME_VALUE(SHIM_HIP_POINTER_ATTRIBUTE_IS_MANAGED, HIP_POINTER_ATTRIBUTE_IS_MANAGED);
SAME_VALUE(SHIM_HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
SAME_VALUE(SHIM_HIP_VERSION_6, 6 * 10000000);
#if HIP_VERSION_MAJOR >= 6
SAME_VALUE(SHIM_HIP6_MEMORY_TYPE_UNREGISTERED, hipMemoryTypeUnregistered);
SAME_VALUE(SHIM_HIP6_MEMORY_TYPE_HOST, hipMemoryTypeHost);
SAME_VALUE(SHIM_HIP6_MEMORY_TYPE_DEVICE, hipMemoryTypeDevice);
SAME_VALUE(SHIM_HIP6_MEMORY_TYPE_MANAGED, hipMemoryTypeManaged);
#else
SAME_VALUE(SHIM_HIP5_MEMORY_TYPE_HOST, hipMemoryTypeHost);
SAME_VALUE(SHIM_HIP5_MEMORY_TYPE_DEVICE, hipMemoryTypeDevice);
SAME_VALUE(SHIM_HIP5_MEMORY_TYPE_ARRAY, hipMemoryTypeArray);
SAME_VALUE(SHIM_HIP5_MEMORY_TYPE_UNIFIED, hipMemoryTypeUnified);
#endif

#define SAME_PROTOTYPE(name, ret, args)                                          \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), shim_##name##_fn), \
                 "prototype of " #name);
SHIM_HIP_ENTRY_POINTS(SAME_PROTOTYPE)
SHIM_HIP_OPTIONAL_ENTRY_POINTS(SAME_PROTOTYPE)

int main(void) {
  printf("layout_hip (HIP %d.%d): 1 passed, 0 failed\n", HIP_VERSION_MAJOR, HIP_VERSION_MINOR);
  return 0;
}
