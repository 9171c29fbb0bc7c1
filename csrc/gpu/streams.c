/*
 * streams.c - the stream rules, once, as the array API standard states them
 * for __dlpack__(stream=...), and the calls that order work between streams.
 *   CUDA (and CUDA pinned/managed memory): no stream = 1; 1 = the legacy
 *        default stream; 2 = the per-thread default stream; -1 = do not
 *        synchronise; 0 is disallowed (ambiguous); any other value is a CUstream.
 *   ROCm: no stream = 0 = the default stream; -1 = do not synchronise; 1 and
 *        2 are disallowed; any other value is a hipStream_t.
 *   CPU: no stream (and -1) only.
 * The values 1 and 2 are also the driver's own handles CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD, and 0 is the NULL stream of both runtimes, so a
 * checked value is passed to the driver as is.
 * Any other handle is the address of the runtime's stream object, which the
 * driver dereferences: a value in the first page (where Linux maps nothing,
 * vm.mmap_min_addr >= 4096) is refused here instead of crashing there.
 */
#include <inttypes.h>

#include "gpu.h"

/* The lowest address a stream object can have. */
#define SHIM_LOWEST_HANDLE 4096

/* Fails (_STREAM) for a value that is neither a special handle of ops's
 * runtime (CUDA 0, 1, 2; ROCm 0) nor an address past the first page. */
static int shim_check_address(const shim_gpu_ops *ops, const char *what, int64_t stream) {
  int64_t last_special = ops == &shim_cuda_ops ? DLPACKSHIM_STREAM_CUDA_PER_THREAD : 0;
  if (stream <= last_special || stream >= SHIM_LOWEST_HANDLE) return DLPACKSHIM_OK;
  return shim_fail(DLPACKSHIM_ERR_STREAM,
                   "%s%sstream %" PRId64 " is not a %s stream: %s, anything else is the address "
                   "of a stream (%s), and nothing lives below %d",
                   what, *what ? " " : "", stream, ops->name,
                   ops == &shim_cuda_ops ? "1 and 2 are the default streams" : "0 is the default",
                   ops == &shim_cuda_ops ? "a CUstream" : "a hipStream_t", SHIM_LOWEST_HANDLE);
}

DLPACKSHIM_API int dlpackshim_stream_check(int32_t device_type, int has_stream, int64_t stream,
                                           int64_t *normalized) {
  int64_t out = -1;
  if (!shim_known_device_type(device_type))
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "unknown device type %" PRId32,
                     device_type);
  const shim_gpu_ops *ops = shim_gpu_family(device_type);
  if (!has_stream) {
    out = ops == &shim_cuda_ops ? DLPACKSHIM_STREAM_CUDA_LEGACY : ops ? 0 : -1;
  } else if (stream == DLPACKSHIM_STREAM_NONE) {
    out = -1;
  } else if (stream < -1) {
    return shim_fail(DLPACKSHIM_ERR_STREAM,
                     "stream %" PRId64 " is not a stream: the only negative value is -1 (no "
                     "synchronisation)", stream);
  } else if (ops == &shim_cuda_ops) {
    if (stream == 0)
      return shim_fail(DLPACKSHIM_ERR_STREAM,
                       "stream 0 is not allowed for CUDA (it is ambiguous): use 1 for the legacy "
                       "default stream, 2 for the per-thread default stream (PyTorch 1.10-1.12 "
                       "consumers pass 0: PyTorch 1.13 and newer pass 1)");
    int rc = shim_check_address(ops, "", stream);
    if (rc) return rc;
    out = stream;
  } else if (ops == &shim_hip_ops) {
    if (stream == 1 || stream == 2)
      return shim_fail(DLPACKSHIM_ERR_STREAM,
                       "stream %" PRId64 " is not allowed for ROCm: the default stream is 0 "
                       "(or no stream, has_stream = 0)", stream);
    int rc = shim_check_address(ops, "", stream);
    if (rc) return rc;
    out = stream;
  } else if (device_type == kDLCPU) {
    return shim_fail(DLPACKSHIM_ERR_STREAM,
                     "stream %" PRId64 " is not allowed for kDLCPU: it takes no stream "
                     "(has_stream = 0) or -1", stream);
  } else {
    return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED,
                     "stream %" PRId64 " is not allowed for device type %" PRId32
                     ": dlpackshim cannot synchronise its streams, it takes no stream "
                     "(has_stream = 0) or -1", stream, device_type);
  }
  if (normalized) *normalized = out;
  return DLPACKSHIM_OK;
}

/* A stream handle the producer (or a copy) works on, in the runtime's terms:
 * CUDA: 0 (NULL) or 1 = legacy, 2 = per-thread, else a CUstream;
 * ROCm: 0 = default, else a hipStream_t. */
int shim_gpu_check_handle(const shim_gpu_ops *ops, const char *what, int64_t stream) {
  if (stream < 0 || (ops == &shim_hip_ops && (stream == 1 || stream == 2)))
    return shim_fail(DLPACKSHIM_ERR_STREAM, "%s stream %" PRId64 " is not a %s stream%s", what,
                     stream, ops->name,
                     ops == &shim_cuda_ops ? " (0 or 1: legacy default, 2: per-thread default, "
                                             "else a CUstream)"
                                           : " (0: default stream, else a hipStream_t)");
  return shim_check_address(ops, what, stream);
}

DLPACKSHIM_API int dlpackshim_stream_wait(int32_t device_type, int32_t device_id,
                                          int64_t producer_stream, int64_t consumer_stream) {
  int64_t consumer;
  int rc = dlpackshim_stream_check(device_type, 1, consumer_stream, &consumer);
  if (rc) return rc;
  if (consumer == -1) return DLPACKSHIM_OK; /* the consumer asked for no synchronisation */
  const shim_gpu_ops *ops = shim_gpu_family(device_type);
  if (!ops) return DLPACKSHIM_OK; /* unreachable: only GPU types accept a stream */
  rc = shim_gpu_check_handle(ops, "producer", producer_stream);
  if (rc) return rc;
  rc = shim_gpu_check_device_id(device_id);
  if (rc) return rc;
  int64_t producer = producer_stream;
  if (ops == &shim_cuda_ops && producer == 0) producer = DLPACKSHIM_STREAM_CUDA_LEGACY;
  if (producer == consumer) return DLPACKSHIM_OK; /* stream order already holds */
  rc = ops->load();
  if (rc) return rc;
  shim_gpu_scope scope;
  rc = ops->enter(&scope, device_id, (void *)(intptr_t)producer);
  if (rc) return rc;
  rc = ops->wait(&scope, (void *)(intptr_t)consumer);
  return shim_gpu_leave(ops, &scope, rc);
}

DLPACKSHIM_API int dlpackshim_stream_synchronize(int32_t device_type, int32_t device_id,
                                                 int64_t stream) {
  const shim_gpu_ops *ops = shim_gpu_family(device_type);
  if (!ops) {
    if (!shim_known_device_type(device_type))
      return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "unknown device type %" PRId32,
                       device_type);
    return DLPACKSHIM_OK; /* no GPU streams: nothing to wait for */
  }
  if (stream == -1) return DLPACKSHIM_OK;
  int rc = shim_gpu_check_handle(ops, "the", stream);
  if (rc) return rc;
  rc = shim_gpu_check_device_id(device_id);
  if (rc) return rc;
  rc = ops->load();
  if (rc) return rc;
  shim_gpu_scope scope;
  rc = ops->enter(&scope, device_id, (void *)(intptr_t)stream);
  if (rc) return rc;
  rc = ops->synchronize(&scope);
  return shim_gpu_leave(ops, &scope, rc);
}
