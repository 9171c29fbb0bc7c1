/*
 * hip.c - the ROCm back-end: the HIP runtime (libamdhip64.so), opened with
 * dlopen on first use. No HIP header is needed to build (hip_abi.h has our
 * prototypes; tests/fakegpu/layout_hip.c checks them against the real header).
 *
 * HIP has no contexts to push: the "current device" of the calling thread is
 * set with hipSetDevice for the duration of a call and restored afterwards.
 * Events: a small pool per device, as in cuda.c (hipStreamWaitEvent, like
 * cuStreamWaitEvent, captures the event's state at the time of the call).
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

typedef struct hip_event_node {
  int32_t device;
  shim_hipEvent_t event;
  struct hip_event_node *next;
} hip_event_node;

static pthread_once_t hip_once = PTHREAD_ONCE_INIT;
static int hip_status = DLPACKSHIM_ERR_DEVICE;
static char hip_message[1024];
static const char *hip_path;
static int hip_count;
static int hip_runtime_version;
static pthread_mutex_t hip_lock = PTHREAD_MUTEX_INITIALIZER;
static hip_event_node *hip_free_events; /* under hip_lock */

static int hip_fail(const char *fn, shim_hipError_t r) {
  const char *name = hip.hipGetErrorName ? hip.hipGetErrorName(r) : NULL;
  const char *text = hip.hipGetErrorString ? hip.hipGetErrorString(r) : NULL;
  return shim_fail(DLPACKSHIM_ERR_DEVICE, "ROCm: %s failed: %s: %s (error %d)", fn,
                   name ? name : "hipError", text ? text : "unknown error", (int)r);
}

#define HIP_CALL(fn, args)                          \
  do {                                              \
    shim_hipError_t hip_r_ = hip.fn args;           \
    if (hip_r_ != SHIM_HIP_SUCCESS) return hip_fail(#fn, hip_r_); \
  } while (0)

static void hip_load_once(void) {
  static const char *const names[] = {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so",
                                      "/opt/rocm/lib/libamdhip64.so", NULL};
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
  shim_hipError_t r = hip.hipRuntimeGetVersion(&hip_runtime_version);
  if (r == SHIM_HIP_SUCCESS) {
    step = "hipGetDeviceCount";
    r = hip.hipGetDeviceCount(&hip_count);
    if (r == SHIM_HIP_ERROR_NO_DEVICE) { /* a runtime without GPUs: zero devices */
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
}

static int hip_load(void) {
  pthread_once(&hip_once, hip_load_once);
  if (hip_status) return shim_fail(hip_status, "%s", hip_message);
  return DLPACKSHIM_OK;
}

static const char *hip_library(void) { return hip_status ? NULL : hip_path; }

static int hip_check_device(int32_t dev) {
  if (dev < 0 || dev >= hip_count)
    return shim_fail(DLPACKSHIM_ERR_DEVICE, "ROCm device %d does not exist (%d device%s found)",
                     (int)dev, hip_count, hip_count == 1 ? "" : "s");
  return DLPACKSHIM_OK;
}

static int hip_versions(int *driver_version, int *runtime_version) {
  int v = 0;
  HIP_CALL(hipDriverGetVersion, (&v));
  *driver_version = v;
  *runtime_version = hip_runtime_version;
  return DLPACKSHIM_OK;
}

static int hip_device_count(int *count) {
  *count = hip_count;
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

static hip_event_node *hip_take_event(int32_t device) {
  pthread_mutex_lock(&hip_lock);
  hip_event_node **link = &hip_free_events, *node;
  while ((node = *link) && node->device != device) link = &node->next;
  if (node) *link = node->next;
  pthread_mutex_unlock(&hip_lock);
  return node;
}

static void hip_give_event(hip_event_node *node) {
  pthread_mutex_lock(&hip_lock);
  node->next = hip_free_events;
  hip_free_events = node;
  pthread_mutex_unlock(&hip_lock);
}

static int hip_wait(shim_gpu_scope *s, void *consumer) {
  hip_event_node *node = hip_take_event(s->device_id);
  if (!node) {
    node = malloc(sizeof *node);
    if (!node) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "ROCm: out of memory for an event");
    node->device = s->device_id;
    shim_hipError_t r = hip.hipEventCreateWithFlags(&node->event, SHIM_HIP_EVENT_DISABLE_TIMING);
    if (r != SHIM_HIP_SUCCESS) {
      free(node);
      return hip_fail("hipEventCreateWithFlags", r);
    }
  }
  shim_hipError_t r = hip.hipEventRecord(node->event, (shim_hipStream_t)s->stream);
  if (r != SHIM_HIP_SUCCESS) {
    hip.hipEventDestroy(node->event);
    free(node);
    return hip_fail("hipEventRecord", r);
  }
  r = hip.hipStreamWaitEvent((shim_hipStream_t)consumer, node->event, 0);
  hip_give_event(node);
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
  if (!hip.hipPointerGetAttribute)
    return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED,
                     "ROCm: this HIP runtime (%s) has no hipPointerGetAttribute (HIP 5.2 or newer "
                     "is needed to find a pointer's device)", hip_path);
  void *p = (void *)(uintptr_t)ptr;
  unsigned int memory_type = 0;
  shim_hipError_t r =
      hip.hipPointerGetAttribute(&memory_type, SHIM_HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  if (r == SHIM_HIP_ERROR_INVALID_VALUE) return 0; /* not memory HIP knows */
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
    "ROCm",        kDLROCM,     kDLROCMHost,      hip_load, hip_library,
    hip_versions,  hip_device_count, hip_device_name, hip_enter, hip_leave,
    hip_wait,      hip_copy,    hip_synchronize,  hip_pointer_device, hip_alloc,
    hip_free,
};
