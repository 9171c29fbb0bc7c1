/*
 * cuda.c - the CUDA back-end: the Driver API of libcuda.so.1, opened with
 * dlopen on first use. No CUDA header is needed to build: the prototypes
 * are ours (cuda_abi.h, checked against cuda.h by tests/fakegpu/layout_cuda.c).
 *
 * Contexts: every call runs with a context pushed on this thread - the
 * context of the stream when the caller gives an explicit CUstream (so that
 * streams of non-primary contexts, e.g. PyCUDA's, work), else the primary
 * context of the device, retained once and kept for the life of the process.
 * Events: a small pool per context, created lazily under a mutex. An event
 * is taken from the pool, recorded on the producer stream, waited on by the
 * consumer stream and given back at once: cuStreamWaitEvent captures the
 * event's state when it is called, so a later record cannot disturb it, and
 * taking the event out of the pool keeps two threads from interleaving
 * record/wait on one event.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"
#include "gpu.h"

static struct {
#define SHIM_CU_FIELD(name, ret, args) shim_##name##_fn name;
  SHIM_CUDA_ENTRY_POINTS(SHIM_CU_FIELD)
  SHIM_CUDA_OPTIONAL_ENTRY_POINTS(SHIM_CU_FIELD)
#undef SHIM_CU_FIELD
} cu;

typedef struct cu_event_node {
  shim_CUcontext ctx;
  shim_CUevent event;
  struct cu_event_node *next;
} cu_event_node;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static int cu_status = DLPACKSHIM_ERR_DEVICE;
static char cu_message[1024];
static const char *cu_path;
static int cu_count;
static shim_CUcontext *cu_primary; /* cu_count entries, retained lazily */
static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;
static cu_event_node *cu_free_events; /* under cu_lock */

/* The driver's own words for a failed call. */
static int cu_fail(const char *fn, shim_CUresult r) {
  const char *name = NULL, *text = NULL;
  if (cu.cuGetErrorName && cu.cuGetErrorName(r, &name) != SHIM_CUDA_SUCCESS) name = NULL;
  if (cu.cuGetErrorString && cu.cuGetErrorString(r, &text) != SHIM_CUDA_SUCCESS) text = NULL;
  return shim_fail(DLPACKSHIM_ERR_DEVICE, "CUDA: %s failed: %s: %s (error %d)", fn,
                   name ? name : "CUDA_ERROR", text ? text : "unknown error", (int)r);
}

#define CU_CALL(fn, args)                         \
  do {                                            \
    shim_CUresult cu_r_ = cu.fn args;             \
    if (cu_r_ != SHIM_CUDA_SUCCESS) return cu_fail(#fn, cu_r_); \
  } while (0)

static void cu_load_once(void) {
  static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
  char tried[768];
  void *h = shim_gpu_dlopen("DLPACKSHIM_LIBCUDA", names, tried, sizeof tried, &cu_path);
  if (!h) {
    snprintf(cu_message, sizeof cu_message, "CUDA driver not found: tried %s", tried);
    return;
  }
  const char *missing = NULL;
#define SHIM_CU_LOOKUP(name, ret, args)                \
  cu.name = (shim_##name##_fn)dlsym(h, #name);         \
  if (!cu.name && !missing) missing = #name;
  SHIM_CUDA_ENTRY_POINTS(SHIM_CU_LOOKUP)
#undef SHIM_CU_LOOKUP
#define SHIM_CU_LOOKUP_OPTIONAL(name, ret, args) cu.name = (shim_##name##_fn)dlsym(h, #name);
  SHIM_CUDA_OPTIONAL_ENTRY_POINTS(SHIM_CU_LOOKUP_OPTIONAL)
#undef SHIM_CU_LOOKUP_OPTIONAL
  if (missing) {
    snprintf(cu_message, sizeof cu_message,
             "CUDA driver %s lacks %s (a driver for CUDA 9.2 or newer is needed)", cu_path,
             missing);
    return;
  }
  const char *step = "cuInit";
  shim_CUresult r = cu.cuInit(0);
  if (r == SHIM_CUDA_SUCCESS) {
    step = "cuDeviceGetCount";
    r = cu.cuDeviceGetCount(&cu_count);
  }
  if (r != SHIM_CUDA_SUCCESS) {
    cu_fail(step, r);
    snprintf(cu_message, sizeof cu_message, "CUDA driver %s: %s", cu_path,
             dlpackshim_last_error());
    return;
  }
  cu_primary = calloc(cu_count > 0 ? (size_t)cu_count : 1, sizeof *cu_primary);
  if (!cu_primary) {
    snprintf(cu_message, sizeof cu_message, "CUDA: out of memory");
    return;
  }
  cu_status = DLPACKSHIM_OK;
}

static int cu_load(void) {
  pthread_once(&cu_once, cu_load_once);
  if (cu_status) return shim_fail(cu_status, "%s", cu_message);
  return DLPACKSHIM_OK;
}

static const char *cu_library(void) { return cu_status ? NULL : cu_path; }

static int cu_check_device(int32_t dev) {
  if (dev < 0 || dev >= cu_count)
    return shim_fail(DLPACKSHIM_ERR_DEVICE, "CUDA device %d does not exist (%d device%s found)",
                     (int)dev, cu_count, cu_count == 1 ? "" : "s");
  return DLPACKSHIM_OK;
}

static int cu_primary_context(int32_t dev, shim_CUcontext *out) {
  pthread_mutex_lock(&cu_lock);
  shim_CUcontext ctx = cu_primary[dev];
  pthread_mutex_unlock(&cu_lock);
  if (!ctx) {
    /* Retained outside the lock: a primary context is one per device, so a
     * second thread racing here only adds a reference that is never dropped. */
    shim_CUdevice d;
    CU_CALL(cuDeviceGet, (&d, dev));
    CU_CALL(cuDevicePrimaryCtxRetain, (&ctx, d));
    pthread_mutex_lock(&cu_lock);
    if (!cu_primary[dev]) cu_primary[dev] = ctx;
    ctx = cu_primary[dev];
    pthread_mutex_unlock(&cu_lock);
  }
  *out = ctx;
  return DLPACKSHIM_OK;
}

static int cu_versions(int *driver_version, int *runtime_version) {
  int v = 0;
  CU_CALL(cuDriverGetVersion, (&v));
  *driver_version = v;
  *runtime_version = 0; /* the Driver API has no separate runtime */
  return DLPACKSHIM_OK;
}

static int cu_device_count(int *count) {
  *count = cu_count;
  return DLPACKSHIM_OK;
}

static int cu_device_name(int32_t dev, char *buf, size_t len) {
  int rc = cu_check_device(dev);
  if (rc) return rc;
  shim_CUdevice d;
  CU_CALL(cuDeviceGet, (&d, dev));
  CU_CALL(cuDeviceGetName, (buf, len > INT_MAX ? INT_MAX : (int)len, d));
  return DLPACKSHIM_OK;
}

static int cu_enter(shim_gpu_scope *s, int32_t dev, void *stream) {
  s->device_id = dev;
  s->stream = stream;
  s->context = NULL;
  s->previous_device = -1;
  int rc = cu_check_device(dev);
  if (rc) return rc;
  shim_CUcontext ctx = NULL;
  /* An explicit stream carries its context; the special handles (NULL,
   * legacy, per-thread) mean "the default stream of the current context". */
  if ((uintptr_t)stream > 2 && cu.cuStreamGetCtx)
    CU_CALL(cuStreamGetCtx, ((shim_CUstream)stream, &ctx));
  if (!ctx) {
    rc = cu_primary_context(dev, &ctx);
    if (rc) return rc;
  }
  CU_CALL(cuCtxPushCurrent_v2, (ctx));
  s->context = ctx;
  return DLPACKSHIM_OK;
}

static int cu_leave(shim_gpu_scope *s) {
  if (!s->context) return DLPACKSHIM_OK;
  shim_CUcontext popped = NULL;
  s->context = NULL;
  CU_CALL(cuCtxPopCurrent_v2, (&popped));
  return DLPACKSHIM_OK;
}

static cu_event_node *cu_take_event(shim_CUcontext ctx) {
  pthread_mutex_lock(&cu_lock);
  cu_event_node **link = &cu_free_events, *node;
  while ((node = *link) && node->ctx != ctx) link = &node->next;
  if (node) *link = node->next;
  pthread_mutex_unlock(&cu_lock);
  return node;
}

static void cu_give_event(cu_event_node *node) {
  pthread_mutex_lock(&cu_lock);
  node->next = cu_free_events;
  cu_free_events = node;
  pthread_mutex_unlock(&cu_lock);
}

static int cu_wait(shim_gpu_scope *s, void *consumer) {
  cu_event_node *node = cu_take_event((shim_CUcontext)s->context);
  if (!node) {
    node = malloc(sizeof *node);
    if (!node) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "CUDA: out of memory for an event");
    node->ctx = (shim_CUcontext)s->context;
    /* No timing: the cheapest event, all a stream dependency needs. */
    shim_CUresult r = cu.cuEventCreate(&node->event, SHIM_CU_EVENT_DISABLE_TIMING);
    if (r != SHIM_CUDA_SUCCESS) {
      free(node);
      return cu_fail("cuEventCreate", r);
    }
  }
  shim_CUresult r = cu.cuEventRecord(node->event, (shim_CUstream)s->stream);
  if (r != SHIM_CUDA_SUCCESS) {
    /* The event's state is unknown after a failed record: do not pool it. */
    cu.cuEventDestroy_v2(node->event);
    free(node);
    return cu_fail("cuEventRecord", r);
  }
  r = cu.cuStreamWaitEvent((shim_CUstream)consumer, node->event, SHIM_CU_EVENT_WAIT_DEFAULT);
  cu_give_event(node); /* a recorded event is fine to record again */
  if (r != SHIM_CUDA_SUCCESS) return cu_fail("cuStreamWaitEvent", r);
  return DLPACKSHIM_OK;
}

static int cu_copy(shim_gpu_scope *s, const shim_gpu_block *b) {
  shim_CUstream st = (shim_CUstream)s->stream;
  if (!b->src_on_device && !b->dst_on_device)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "CUDA: host to host block copy");
  shim_CUdeviceptr sd = (shim_CUdeviceptr)(uintptr_t)b->src;
  shim_CUdeviceptr dd = (shim_CUdeviceptr)(uintptr_t)b->dst;
  if (b->height == 1 && b->depth == 1) {
    if (b->src_on_device && b->dst_on_device)
      CU_CALL(cuMemcpyDtoDAsync_v2, (dd, sd, b->width, st));
    else if (b->src_on_device)
      CU_CALL(cuMemcpyDtoHAsync_v2, (b->dst, sd, b->width, st));
    else
      CU_CALL(cuMemcpyHtoDAsync_v2, (dd, b->src, b->width, st));
    return DLPACKSHIM_OK;
  }
  if (b->depth == 1) {
    shim_cu_memcpy2d p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = b->src_on_device ? SHIM_CU_MEMORYTYPE_DEVICE : SHIM_CU_MEMORYTYPE_HOST;
    if (b->src_on_device) p.srcDevice = sd; else p.srcHost = b->src;
    p.srcPitch = b->src_pitch;
    p.dstMemoryType = b->dst_on_device ? SHIM_CU_MEMORYTYPE_DEVICE : SHIM_CU_MEMORYTYPE_HOST;
    if (b->dst_on_device) p.dstDevice = dd; else p.dstHost = b->dst;
    p.dstPitch = b->dst_pitch;
    p.WidthInBytes = b->width;
    p.Height = b->height;
    CU_CALL(cuMemcpy2DAsync_v2, ((const shim_CUDA_MEMCPY2D *)&p, st));
    return DLPACKSHIM_OK;
  }
  shim_cu_memcpy3d p;
  memset(&p, 0, sizeof p); /* reserved0/1 must be NULL, LOD and offsets 0 */
  p.srcMemoryType = b->src_on_device ? SHIM_CU_MEMORYTYPE_DEVICE : SHIM_CU_MEMORYTYPE_HOST;
  if (b->src_on_device) p.srcDevice = sd; else p.srcHost = b->src;
  p.srcPitch = b->src_pitch;
  p.srcHeight = b->src_rows;
  p.dstMemoryType = b->dst_on_device ? SHIM_CU_MEMORYTYPE_DEVICE : SHIM_CU_MEMORYTYPE_HOST;
  if (b->dst_on_device) p.dstDevice = dd; else p.dstHost = b->dst;
  p.dstPitch = b->dst_pitch;
  p.dstHeight = b->dst_rows;
  p.WidthInBytes = b->width;
  p.Height = b->height;
  p.Depth = b->depth;
  CU_CALL(cuMemcpy3DAsync_v2, ((const shim_CUDA_MEMCPY3D *)&p, st));
  return DLPACKSHIM_OK;
}

static int cu_synchronize(shim_gpu_scope *s) {
  CU_CALL(cuStreamSynchronize, ((shim_CUstream)s->stream));
  return DLPACKSHIM_OK;
}

static int cu_pointer_device(const void *ptr, int32_t *device_type, int32_t *device_id) {
  shim_CUdeviceptr p = (shim_CUdeviceptr)(uintptr_t)ptr;
  unsigned int memory_type = 0;
  shim_CUresult r = cu.cuPointerGetAttribute(&memory_type, SHIM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  if (r == SHIM_CUDA_ERROR_INVALID_VALUE) return 0; /* not memory CUDA knows */
  if (r != SHIM_CUDA_SUCCESS) return cu_fail("cuPointerGetAttribute(MEMORY_TYPE)", r);
  /* IS_MANAGED is documented as "a boolean" without a width: read it into a
   * zeroed 8-byte word, which is non-zero whatever width the driver writes. */
  uint64_t managed = 0;
  CU_CALL(cuPointerGetAttribute, (&managed, SHIM_CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
  if (managed) {
    *device_type = kDLCUDAManaged; /* host-accessible memory: device_id 0 by DLPack convention */
    *device_id = 0;
  } else if (memory_type == SHIM_CU_MEMORYTYPE_HOST) {
    *device_type = kDLCUDAHost; /* pinned (page-locked) host memory */
    *device_id = 0;
  } else {
    int ordinal = 0;
    CU_CALL(cuPointerGetAttribute, (&ordinal, SHIM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    *device_type = kDLCUDA;
    *device_id = ordinal;
  }
  return 1;
}

static int cu_alloc(shim_gpu_scope *s, size_t nbytes, void **out) {
  shim_CUdeviceptr p = 0;
  CU_CALL(cuMemAlloc_v2, (&p, nbytes));
  *out = (void *)(uintptr_t)p;
  return DLPACKSHIM_OK;
}

static int cu_free(shim_gpu_scope *s, void *ptr) {
  CU_CALL(cuMemFree_v2, ((shim_CUdeviceptr)(uintptr_t)ptr));
  return DLPACKSHIM_OK;
}

const shim_gpu_ops shim_cuda_ops = {
    "CUDA",       kDLCUDA,    kDLCUDAHost,      cu_load, cu_library,
    cu_versions,  cu_device_count, cu_device_name, cu_enter, cu_leave,
    cu_wait,      cu_copy,    cu_synchronize,   cu_pointer_device, cu_alloc,
    cu_free,
};
