/*
 * devices.c - which GPU runtime serves a device type, the scope every call
 * on a device runs in, and the calls about a runtime and its devices
 * (versions, names, the current device).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gpu.h"

const shim_gpu_ops *shim_gpu_family(int32_t device_type) {
  switch (device_type) {
    case kDLCUDA:
    case kDLCUDAHost:
    case kDLCUDAManaged: return &shim_cuda_ops;
    case kDLROCM:
    case kDLROCMHost: return &shim_hip_ops;
    default: return NULL;
  }
}

int shim_gpu_on_device(int32_t device_type) {
  return shim_gpu_family(device_type) && !shim_host_accessible(device_type);
}

int shim_gpu_check_device_id(int32_t device_id) {
  if (device_id < 0)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "device_id %" PRId32 " is negative",
                     device_id);
  return DLPACKSHIM_OK;
}

int shim_gpu_check_ordinal(const char *runtime, int32_t dev, int count) {
  if (dev < 0 || dev >= count)
    return shim_fail(DLPACKSHIM_ERR_DEVICE, "%s device %d does not exist (%d device%s found)",
                     runtime, (int)dev, count, count == 1 ? "" : "s");
  return DLPACKSHIM_OK;
}

int shim_gpu_leave(const shim_gpu_ops *ops, shim_gpu_scope *scope, int rc) {
  if (rc) {
    /* The earlier failure is what the caller needs to read. */
    char saved[512];
    int status = dlpackshim_last_status();
    snprintf(saved, sizeof saved, "%s", dlpackshim_last_error());
    ops->leave(scope);
    shim_fail(status, "%s", saved);
    return rc;
  }
  return ops->leave(scope);
}

static const shim_gpu_ops *shim_gpu_runtime(int32_t device_type) {
  const shim_gpu_ops *ops = shim_gpu_family(device_type);
  if (!ops)
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "device type %" PRId32 " has no GPU runtime (kDLCUDA or kDLROCM)", device_type);
  return ops;
}

DLPACKSHIM_API int dlpackshim_gpu_runtime_info(int32_t device_type, int *driver_version,
                                               int *runtime_version, int *device_count) {
  const shim_gpu_ops *ops = shim_gpu_runtime(device_type);
  if (!ops) return DLPACKSHIM_ERR_INVALID_ARGUMENT;
  int rc = ops->load();
  if (rc) return rc;
  int driver = 0, runtime = 0, count = 0;
  rc = ops->info(&driver, &runtime, &count);
  if (rc) return rc;
  if (driver_version) *driver_version = driver;
  if (runtime_version) *runtime_version = runtime;
  if (device_count) *device_count = count;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_gpu_library(int32_t device_type, const char **path_out) {
  if (!path_out) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "gpu_library: path_out is NULL");
  const shim_gpu_ops *ops = shim_gpu_runtime(device_type);
  if (!ops) return DLPACKSHIM_ERR_INVALID_ARGUMENT;
  int rc = ops->load();
  if (rc) return rc;
  *path_out = ops->library();
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_gpu_device_name(int32_t device_type, int32_t device_id, char *buf,
                                              size_t len) {
  /* The driver writes into a buffer of ours, never the caller's: on failure
   * buf holds "" (as documented), not what a failing driver call left. CUDA
   * and HIP keep names in char[256] (cudaDeviceProp, hipDeviceProp_t). */
  char name[256] = "";
  if (!buf || len == 0)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "device_name: empty buffer");
  const shim_gpu_ops *ops = shim_gpu_runtime(device_type);
  int rc = ops ? shim_gpu_check_device_id(device_id) : DLPACKSHIM_ERR_INVALID_ARGUMENT;
  if (!rc) rc = ops->load();
  if (!rc) rc = ops->device_name(device_id, name, sizeof name);
  name[sizeof name - 1] = '\0';
  size_t n = rc ? 0 : strlen(name);
  if (n > len - 1) n = len - 1;
  memcpy(buf, name, n);
  buf[n] = '\0';
  return rc;
}

int shim_gpu_device_ops(const char *what, int32_t device_type, int32_t device_id,
                           const shim_gpu_ops **ops) {
  if (!shim_gpu_on_device(device_type))
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "%s: device type must be kDLCUDA or kDLROCM, not %" PRId32, what,
                     device_type);
  int rc = shim_gpu_check_device_id(device_id);
  if (rc) return rc;
  *ops = shim_gpu_family(device_type);
  return (*ops)->load();
}

/* A producer that checks "the current device" (PyTorch refuses to export a
 * tensor of another device index) is called with the data's device made
 * current, as CuPy's from_dlpack does. */
DLPACKSHIM_API int dlpackshim_gpu_set_device(int32_t device_type, int32_t device_id,
                                             int64_t *restore) {
  if (!restore) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "gpu_set_device: NULL output");
  const shim_gpu_ops *ops;
  int rc = shim_gpu_device_ops("gpu_set_device", device_type, device_id, &ops);
  if (rc) return rc;
  shim_gpu_scope scope;
  rc = ops->enter(&scope, device_id, NULL);
  if (rc) return rc;
  /* CUDA: a context was pushed (1); HIP: the device to set back, or -1. */
  *restore = ops == &shim_cuda_ops ? (scope.context ? 1 : -1) : scope.previous_device;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_gpu_restore_device(int32_t device_type, int64_t restore) {
  if (!shim_gpu_on_device(device_type))
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "gpu_restore_device: device type must be kDLCUDA or kDLROCM, not %" PRId32,
                     device_type);
  if (restore == -1) return DLPACKSHIM_OK;
  const shim_gpu_ops *ops = shim_gpu_family(device_type);
  /* Only what set_device hands out: another value would pop a context the
   * caller pushed itself (CUDA), or do nothing and say it did (ROCm). */
  if (ops == &shim_cuda_ops ? restore != 1 : restore < 0 || restore > INT32_MAX)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "gpu_restore_device: %" PRId64 " is no value gpu_set_device gives for %s",
                     restore, ops->name);
  int rc = ops->load();
  if (rc) return rc;
  shim_gpu_scope scope;
  memset(&scope, 0, sizeof scope);
  scope.previous_device = -1;
  if (ops == &shim_cuda_ops)
    scope.context = (void *)1; /* "pop one": cu_leave pops whatever is on top */
  else
    scope.previous_device = (int)restore;
  return ops->leave(&scope);
}
