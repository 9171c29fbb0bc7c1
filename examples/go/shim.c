/*
 * shim.c - the C side of the Go example: the release trampoline and the
 * wrappers that copy a failure's message in the failing call (shim.h says why).
 */
#include "shim.h"

#include "_cgo_export.h" /* goRelease, exported by main.go */

/* A dlpackshim_release_fn: owner is the cgo.Handle, as an integer. */
static void release_trampoline(void *owner) { goRelease((uintptr_t)owner); }

int shim_go_tensor_new(void *data, int32_t ndim, const int64_t *shape, const int64_t *strides,
                       uint8_t code, uint8_t bits, uintptr_t owner,
                       DLManagedTensorVersioned **tensor_out, char *err, size_t errsize) {
  int status = dlpackshim_tensor_new(data, kDLCPU, 0, ndim, shape, strides, code, bits, 1, 0, 0,
                                     (void *)owner, release_trampoline, tensor_out);
  if (status != DLPACKSHIM_OK) dlpackshim_last_error_copy(err, errsize);
  return status;
}

int shim_go_tensor_clone(const DLTensor *src, DLManagedTensorVersioned **tensor_out, char *err,
                         size_t errsize) {
  int status = dlpackshim_tensor_clone(src, 0, tensor_out);
  if (status != DLPACKSHIM_OK) dlpackshim_last_error_copy(err, errsize);
  return status;
}
