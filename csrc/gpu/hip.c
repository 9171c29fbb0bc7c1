/*
 * hip.c - the ROCm back-end: the HIP runtime (libamdhip64.so), opened with
 * dlopen on first use. No HIP header is needed to build (hip_abi.h has our
 * prototypes; tests/fakegpu/layout_hip.c checks them against the real header).
 *
 * HIP has no contexts to push: the "current device" of the calling thread is
 * set with hipSetDevice for the duration of a call and restored afterwards.
 * Events: a small pool per device, as in cuda.c (hipStreamWaitEvent, like
 * cuStreamWaitEvent, captures the event's state at the time of the call).
 *
 * The last error: a failed HIP call leaves its error pending for
 * hipGetLastError, and from ROCm 7 it stays pending (sticky, as in CUDA)
 * until read, so that PyTorch's next kernel-launch check would report it.
 * Every call here notes what was pending before (hipPeekAtLastError) and,
 * when it fails and nothing was, clears the error it caused (hipGetLastError)
 * - never an error someone else left.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "hip_abi.h"

static struct {
#define SHIM_HIP_FIELD(name, ret, args) shim_##name##_fn name;
  SHIM_HIP_ENTRY_POINTS(SHIM_HIP_FIELD)
  SHIM_HIP_OPTIONAL_ENTRY_POINTS(SHIM_HIP_FIELD)
#undef SHIM_HIP_FIELD
} hip;

static pthread_once_t hip_once = PTHREAD_ONCE_INIT;
static int hip_status = DLPACKSHIM_ERR_DEVICE;
static char hip_message[1024];
static const char *hip_path;
static int hip_count;
static int hip_runtime_version;
static shim_gpu_event_pool hip_events = SHIM_GPU_EVENT_POOL_INIT;

static int hip_fail(const char *fn, shim_hipError_t r) {
  const char *name = hip.hipGetErrorName ? hip.hipGetErrorName(r) : NULL;
  const char *text = hip.hipGetErrorString ? hip.hipGetErrorString(r) : NULL;
  return shim_fail(DLPACKSHIM_ERR_DEVICE, "ROCm: %s failed: %s: %s (error %d)", fn,
                   name ? name : "hipError", text ? text : "unknown error", (int)r);
}

/* The error pending before a call of ours (success when it cannot be read). */
static shim_hipError_t hip_pending(void) {
  return hip.hipPeekAtLastError ? hip.hipPeekAtLastError() : SHIM_HIP_SUCCESS;
}

/* After a call of ours failed: clear its error, unless one was pending before. */
static void hip_forget(shim_hipError_t before) {
  if (before == SHIM_HIP_SUCCESS && hip.hipGetLastError) (void)hip.hipGetLastError();
}

#define HIP_CALL(fn, args)                                      \
  do {                                                          \
    shim_hipError_t hip_before_ = hip_pending();                \
    shim_hipError_t hip_r_ = hip.fn args;                       \
    if (hip_r_ != SHIM_HIP_SUCCESS) {                           \
      hip_forget(hip_before_);                                  \
      return hip_fail(#fn, hip_r_);                             \
    }                                                           \
  } while (0)

/* A call whose failure is handled, not reported: the result, error cleared. */
#define HIP_TRY(var, fn, args)                                  \
  do {                                                          \
    shim_hipError_t hip_before_ = hip_pending();                \
    var = hip.fn args;                                          \
    if (var != SHIM_HIP_SUCCESS) hip_forget(hip_before_);       \
  } while (0)

static void hip_after_fork_in_child(void) {
  if (hip_status == DLPACKSHIM_OK)
    shim_gpu_unusable_after_fork("ROCm", &hip_status, hip_message, sizeof hip_message, &hip_count);
}

static void hip_load_once(void) {
  /* Newest first; ROCm 7 (TheRock wheels) ships only the versioned name. */
  static const char *const names[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5",
                                      "libamdhip64.so", "/opt/rocm/lib/libamdhip64.so", NULL};
  char tried[768];
  void *h = shim_gpu_dlopen("DLPACKSHIM_LIBHIP", names, tried, sizeof tried, &hip_path);
  if (!h) {
    snprintf(hip_message, sizeof hip_message, "HIP runtime not found: tried %s", tried);
    return;
  }
  const char *missing = NULL;
#define SHIM_HIP_LOOKUP(name, ret, args)               \
  hip.name = (shim_##name##_fn)dlsym(h, #name);        \
  if (!hip.name && !missing) missing = #name;
  SHIM_HIP_ENTRY_POINTS(SHIM_HIP_LOOKUP)
#undef SHIM_HIP_LOOKUP
#define SHIM_HIP_LOOKUP_OPTIONAL(name, ret, args) hip.name = (shim_##name##_fn)dlsym(h, #name);
  SHIM_HIP_OPTIONAL_ENTRY_POINTS(SHIM_HIP_LOOKUP_OPTIONAL)
#undef SHIM_HIP_LOOKUP_OPTIONAL
  if (missing) {
    snprintf(hip_message, sizeof hip_message, "HIP runtime %s lacks %s", hip_path, missing);
    return;
  }
  const char *step = "hipRuntimeGetVersion";
  shim_hipError_t r;
  HIP_TRY(r, hipRuntimeGetVersion, (&hip_runtime_version));
  if (r == SHIM_HIP_SUCCESS) {
    step = "hipGetDeviceCount";
    HIP_TRY(r, hipGetDeviceCount, (&hip_count));
    /* A runtime without GPUs (an NVIDIA or CPU-only machine with a HIP
     * package): zero devices, not an error. */
    if (r == SHIM_HIP_ERROR_NO_DEVICE || r == SHIM_HIP_ERROR_INVALID_DEVICE) {
      hip_count = 0;
      r = SHIM_HIP_SUCCESS;
    }
  }
  if (r != SHIM_HIP_SUCCESS) {
    hip_fail(step, r);
    snprintf(hip_message, sizeof hip_message, "HIP runtime %s: %s", hip_path,
             dlpackshim_last_error());
    return;
  }
  hip_status = DLPACKSHIM_OK;
  pthread_atfork(NULL, NULL, hip_after_fork_in_child);
}

static int hip_load(void) {
  pthread_once(&hip_once, hip_load_once);
  if (hip_status) return shim_fail(hip_status, "%s", hip_message);
  return DLPACKSHIM_OK;
}

static const char *hip_library(void) { return hip_status ? NULL : hip_path; }

static int hip_check_device(int32_t dev) { return shim_gpu_check_ordinal("ROCm", dev, hip_count); }

static int hip_info(int *driver_version, int *runtime_version, int *device_count) {
  int v = 0;
  HIP_CALL(hipDriverGetVersion, (&v));
  *driver_version = v;
  *runtime_version = hip_runtime_version;
  *device_count = hip_count;
  return DLPACKSHIM_OK;
}

static int hip_device_name(int32_t dev, char *buf, size_t len) {
  int rc = hip_check_device(dev);
  if (rc) return rc;
  shim_hipDevice_t d;
  HIP_CALL(hipDeviceGet, (&d, dev));
  HIP_CALL(hipDeviceGetName, (buf, len > INT_MAX ? INT_MAX : (int)len, d));
  return DLPACKSHIM_OK;
}

static int hip_enter(shim_gpu_scope *s, int32_t dev, void *stream) {
  s->device_id = dev;
  s->stream = stream;
  s->context = NULL;
  s->previous_device = -1;
  int rc = hip_check_device(dev);
  if (rc) return rc;
  int current = -1;
  HIP_CALL(hipGetDevice, (&current));
  if (current != dev) {
    HIP_CALL(hipSetDevice, (dev));
    s->previous_device = current;
  }
  return DLPACKSHIM_OK;
}

static int hip_leave(shim_gpu_scope *s) {
  int previous = s->previous_device;
  s->previous_device = -1;
  if (previous >= 0) HIP_CALL(hipSetDevice, (previous));
  return DLPACKSHIM_OK;
}

static int hip_stale(shim_hipError_t r) {
  return r == SHIM_HIP_ERROR_INVALID_HANDLE || r == SHIM_HIP_ERROR_CONTEXT_IS_DESTROYED ||
         r == SHIM_HIP_ERROR_INVALID_CONTEXT;
}

static int hip_wait(shim_gpu_scope *s, void *consumer) {
  const uintptr_t key = (uintptr_t)(uint32_t)s->device_id;
  shim_gpu_event *node;
  shim_hipError_t r;
  for (int attempt = 0;; attempt++) {
    node = shim_gpu_event_take(&hip_events, key);
    int pooled = node != NULL;
    if (!node) {
      shim_hipEvent_t ev;
      node = malloc(sizeof *node);
      if (!node) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "ROCm: out of memory for an event");
      node->key = key;
      HIP_TRY(r, hipEventCreateWithFlags, (&ev, SHIM_HIP_EVENT_DISABLE_TIMING));
      if (r != SHIM_HIP_SUCCESS) {
        free(node);
        return hip_fail("hipEventCreateWithFlags", r);
      }
      node->event = ev;
    }
    HIP_TRY(r, hipEventRecord, ((shim_hipEvent_t)node->event, (shim_hipStream_t)s->stream));
    if (r == SHIM_HIP_SUCCESS) break;
    if (pooled && attempt == 0 && hip_stale(r)) { /* the device was reset: flush, retry once */
      free(node);
      shim_gpu_event_flush(&hip_events, key);
      continue;
    }
    hip.hipEventDestroy((shim_hipEvent_t)node->event);
    free(node);
    return hip_fail("hipEventRecord", r);
  }
  HIP_TRY(r, hipStreamWaitEvent, ((shim_hipStream_t)consumer, (shim_hipEvent_t)node->event, 0));
  shim_gpu_event_give(&hip_events, node);
  if (r != SHIM_HIP_SUCCESS) return hip_fail("hipStreamWaitEvent", r);
  return DLPACKSHIM_OK;
}

static int hip_copy(shim_gpu_scope *s, const shim_gpu_block *b) {
  shim_hipStream_t st = (shim_hipStream_t)s->stream;
  int kind;
  if (b->src_on_device && b->dst_on_device) kind = SHIM_HIP_MEMCPY_DEVICE_TO_DEVICE;
  else if (b->src_on_device) kind = SHIM_HIP_MEMCPY_DEVICE_TO_HOST;
  else if (b->dst_on_device) kind = SHIM_HIP_MEMCPY_HOST_TO_DEVICE;
  else return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "ROCm: host to host block copy");
  if (b->height == 1 && b->depth == 1) {
    HIP_CALL(hipMemcpyAsync, (b->dst, b->src, b->width, kind, st));
    return DLPACKSHIM_OK;
  }
  if (b->depth == 1) {
    HIP_CALL(hipMemcpy2DAsync, (b->dst, b->dst_pitch, b->src, b->src_pitch, b->width, b->height,
                                kind, st));
    return DLPACKSHIM_OK;
  }
  shim_hip_memcpy3d_parms p;
  memset(&p, 0, sizeof p); /* no arrays, positions 0 */
  p.srcPtr.ptr = (void *)(uintptr_t)b->src;
  p.srcPtr.pitch = b->src_pitch;
  p.srcPtr.xsize = b->width;
  p.srcPtr.ysize = b->src_rows;
  p.dstPtr.ptr = b->dst;
  p.dstPtr.pitch = b->dst_pitch;
  p.dstPtr.xsize = b->width;
  p.dstPtr.ysize = b->dst_rows;
  p.extent.width = b->width;
  p.extent.height = b->height;
  p.extent.depth = b->depth;
  p.kind = kind;
  HIP_CALL(hipMemcpy3DAsync, ((const shim_hipMemcpy3DParms *)&p, st));
  return DLPACKSHIM_OK;
}

static int hip_synchronize(shim_gpu_scope *s) {
  HIP_CALL(hipStreamSynchronize, ((shim_hipStream_t)s->stream));
  return DLPACKSHIM_OK;
}

static int hip_pointer_device(const void *ptr, int32_t *device_type, int32_t *device_id) {
  /* No GPU: no memory of this runtime, and nothing to ask (HIP 5.2 answers
   * hipErrorInvalidDevice for an ordinary host pointer then). */
  if (hip_count == 0) return 0;
  if (!hip.hipPointerGetAttribute)
    return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED,
                     "ROCm: this HIP runtime (%s) has no hipPointerGetAttribute (HIP 5.2 or newer "
                     "is needed to find a pointer's device)", hip_path);
  void *p = (void *)(uintptr_t)ptr;
  unsigned int memory_type = 0;
  shim_hipError_t r;
  HIP_TRY(r, hipPointerGetAttribute, (&memory_type, SHIM_HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
  /* Not memory HIP knows: "invalid value", or "invalid/no device" (the
   * pointer belongs to no device). The error it left pending is cleared. */
  if (r == SHIM_HIP_ERROR_INVALID_VALUE || r == SHIM_HIP_ERROR_INVALID_DEVICE ||
      r == SHIM_HIP_ERROR_NO_DEVICE)
    return 0;
  if (r != SHIM_HIP_SUCCESS) return hip_fail("hipPointerGetAttribute(MEMORY_TYPE)", r);
  /* hipMemoryType was renumbered in HIP 6 (to the CUDA runtime's values). */
  int host;
  if (hip_runtime_version >= SHIM_HIP_VERSION_6) {
    if (memory_type == SHIM_HIP6_MEMORY_TYPE_UNREGISTERED) return 0;
    host = memory_type == SHIM_HIP6_MEMORY_TYPE_HOST;
  } else {
    host = memory_type == SHIM_HIP5_MEMORY_TYPE_HOST;
  }
  uint64_t managed = 0; /* a boolean of unstated width: see cuda.c */
  HIP_CALL(hipPointerGetAttribute, (&managed, SHIM_HIP_POINTER_ATTRIBUTE_IS_MANAGED, p));
  if (host && !managed) {
    *device_type = kDLROCMHost; /* pinned host memory */
    *device_id = 0;
    return 1;
  }
  /* Device memory, and managed memory, which DLPack has no ROCm type for:
   * it is reported as kDLROCM on the device it belongs to. */
  int ordinal = 0;
  HIP_CALL(hipPointerGetAttribute, (&ordinal, SHIM_HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
  *device_type = kDLROCM;
  *device_id = ordinal;
  return 1;
}

static int hip_alloc(shim_gpu_scope *s, size_t nbytes, void **out) {
  void *p = NULL;
  HIP_CALL(hipMalloc, (&p, nbytes));
  *out = p;
  return DLPACKSHIM_OK;
}

static int hip_free(shim_gpu_scope *s, void *ptr) {
  HIP_CALL(hipFree, (ptr));
  return DLPACKSHIM_OK;
}

const shim_gpu_ops shim_hip_ops = {
    "ROCm", INT32_MAX - 1, hip_load, hip_library, hip_info, hip_device_name,
    hip_enter, hip_leave, hip_wait, hip_copy, hip_synchronize, hip_pointer_device,
    hip_alloc, hip_free,
};
