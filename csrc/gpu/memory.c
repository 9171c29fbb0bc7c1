/*
 * memory.c - GPU memory: allocating and freeing it, and asking the runtimes
 * which device a pointer's memory belongs to.
 */
#include <inttypes.h>

#include "gpu.h"

DLPACKSHIM_API int dlpackshim_pointer_device(int32_t runtime, const void *ptr,
                                             int32_t *device_type, int32_t *device_id) {
  int32_t type = kDLCPU, id = 0; /* what no runtime knowing ptr means */
  if (!device_type || !device_id)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "pointer_device: NULL output");
  if (!ptr) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "pointer_device: NULL pointer");
  const shim_gpu_ops *ops = runtime == kDLCUDA ? &shim_cuda_ops : runtime == kDLROCM ? &shim_hip_ops : NULL;
  if (runtime && !ops)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "pointer_device: runtime must be 0 (any), kDLCUDA or kDLROCM, not %" PRId32,
                     runtime);
  const shim_gpu_ops *const all[] = {&shim_cuda_ops, &shim_hip_ops};
  /* "any" succeeds with a runtime missing: its load failure must not stay
   * this thread's last error, so the one before is put back. */
  char before[DLPACKSHIM_ERROR_MAX];
  int before_status = dlpackshim_last_status();
  dlpackshim_last_error_copy(before, sizeof before);
  for (size_t i = 0; i < 2; i++) {
    if (ops && ops != all[i]) continue;
    int rc = all[i]->load();
    if (rc) {
      if (ops) return rc; /* the caller named this runtime */
      if (before_status) shim_fail(before_status, "%s", before);
      else dlpackshim_clear_error();
      continue; /* "any": a missing runtime cannot own the pointer */
    }
    rc = all[i]->pointer_device(ptr, &type, &id);
    if (rc < 0) return rc;
    if (rc == 1) break;
  }
  *device_type = type;
  *device_id = id;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_gpu_alloc(int32_t device_type, int32_t device_id, size_t nbytes,
                                        void **ptr_out) {
  void *ptr = NULL;
  if (!ptr_out) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "gpu_alloc: ptr_out is NULL");
  const shim_gpu_ops *ops;
  int rc = shim_gpu_device_ops("gpu_alloc", device_type, device_id, &ops);
  if (rc) return rc;
  if (nbytes == 0) { /* NULL, with no context made: but of a device that exists */
    int driver = 0, runtime = 0, count = 0;
    rc = ops->info(&driver, &runtime, &count);
    if (!rc) rc = shim_gpu_check_ordinal(ops->name, device_id, count);
    if (rc) return rc;
  } else {
    shim_gpu_scope scope;
    rc = ops->enter(&scope, device_id, NULL);
    if (rc) return rc;
    int alloc_rc = ops->alloc(&scope, nbytes, &ptr);
    rc = shim_gpu_leave(ops, &scope, alloc_rc);
    if (rc) {
      if (alloc_rc == 0) { /* the scope would not close: the memory goes back */
        char msg[512];
        dlpackshim_last_error_copy(msg, sizeof msg);
        (void)dlpackshim_gpu_free(device_type, device_id, ptr);
        return shim_fail(rc, "%s", msg);
      }
      return rc;
    }
  }
  *ptr_out = ptr;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_gpu_free(int32_t device_type, int32_t device_id, void *ptr) {
  if (!ptr) return DLPACKSHIM_OK;
  const shim_gpu_ops *ops;
  int rc = shim_gpu_device_ops("gpu_free", device_type, device_id, &ops);
  if (rc) return rc;
  shim_gpu_scope scope;
  rc = ops->enter(&scope, device_id, NULL);
  if (rc) return rc;
  rc = ops->free(&scope, ptr);
  return shim_gpu_leave(ops, &scope, rc);
}
