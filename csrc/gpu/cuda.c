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

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static int cu_status = DLPACKSHIM_ERR_DEVICE;
static char cu_message[1024];
static const char *cu_path;
static int cu_count;
static shim_CUcontext *cu_primary; /* cu_count entries, retained lazily */
static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;
static shim_gpu_event_pool cu_events = SHIM_GPU_EVENT_POOL_INIT;

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

static void cu_after_fork_in_child(void) {
  if (cu_status == DLPACKSHIM_OK)
    shim_gpu_unusable_after_fork("CUDA", &cu_status, cu_message, sizeof cu_message, &cu_count);
}

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
  pthread_atfork(NULL, NULL, cu_after_fork_in_child);
}

static int cu_load(void) {
  pthread_once(&cu_once, cu_load_once);
  if (cu_status) return shim_fail(cu_status, "%s", cu_message);
  return DLPACKSHIM_OK;
}

static const char *cu_library(void) { return cu_status ? NULL : cu_path; }

static int cu_check_device(int32_t dev) { return shim_gpu_check_ordinal("CUDA", dev, cu_count); }

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

static int cu_info(int *driver_version, int *runtime_version, int *device_count) {
  int v = 0;
  CU_CALL(cuDriverGetVersion, (&v));
  *driver_version = v;
  *runtime_version = 0; /* the Driver API has no separate runtime */
  *device_count = cu_count;
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

/* What recording a pooled event whose context is gone returns. */
static int cu_stale(shim_CUresult r) {
  return r == SHIM_CUDA_ERROR_INVALID_HANDLE || r == SHIM_CUDA_ERROR_CONTEXT_IS_DESTROYED ||
         r == SHIM_CUDA_ERROR_INVALID_CONTEXT;
}

static int cu_wait(shim_gpu_scope *s, void *consumer) {
  const uintptr_t key = (uintptr_t)s->context;
  shim_gpu_event *node;
  shim_CUresult r;
  for (int attempt = 0;; attempt++) {
    node = shim_gpu_event_take(&cu_events, key);
    int pooled = node != NULL;
    if (!node) {
      shim_CUevent ev;
      node = malloc(sizeof *node);
      if (!node) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "CUDA: out of memory for an event");
      node->key = key;
      /* No timing: the cheapest event, all a stream dependency needs. */
      r = cu.cuEventCreate(&ev, SHIM_CU_EVENT_DISABLE_TIMING);
      if (r != SHIM_CUDA_SUCCESS) {
        free(node);
        return cu_fail("cuEventCreate", r);
      }
      node->event = ev;
    }
    r = cu.cuEventRecord((shim_CUevent)node->event, (shim_CUstream)s->stream);
    if (r == SHIM_CUDA_SUCCESS) break;
    if (pooled && attempt == 0 && cu_stale(r)) {
      /* The pool is keyed by the context's address, which a context
       * created after one was destroyed can reuse: flush, retry once. */
      free(node);
      shim_gpu_event_flush(&cu_events, key);
      continue;
    }
    /* The event's state is unknown after a failed record: do not pool it. */
    cu.cuEventDestroy_v2((shim_CUevent)node->event);
    free(node);
    return cu_fail("cuEventRecord", r);
  }
  /* A default stream (1, 2) is the one of the context current at the wait:
   * the data's device's primary context, where dlpackshim and its peers
   * work on it, not the producer stream's, which may be another device's
   * (CuPy names the current device's stream) or a context of its own. */
  shim_CUcontext own = NULL, popped = NULL;
  int rc = (uintptr_t)consumer <= 2 ? cu_primary_context(s->device_id, &own) : DLPACKSHIM_OK;
  if (rc == DLPACKSHIM_OK && own != NULL && own != (shim_CUcontext)s->context &&
      (r = cu.cuCtxPushCurrent_v2(own)) != SHIM_CUDA_SUCCESS)
    rc = cu_fail("cuCtxPushCurrent_v2", r);
  if (rc == DLPACKSHIM_OK) {
    r = cu.cuStreamWaitEvent((shim_CUstream)consumer, (shim_CUevent)node->event,
                             SHIM_CU_EVENT_WAIT_DEFAULT);
    shim_CUresult pr = own != NULL && own != (shim_CUcontext)s->context
                           ? cu.cuCtxPopCurrent_v2(&popped) : SHIM_CUDA_SUCCESS;
    if (r != SHIM_CUDA_SUCCESS) rc = cu_fail("cuStreamWaitEvent", r);
    else if (pr != SHIM_CUDA_SUCCESS) rc = cu_fail("cuCtxPopCurrent_v2", pr);
  }
  shim_gpu_event_give(&cu_events, node); /* a recorded event is fine to record again */
  return rc;
}

/* A block between two device buffers, one row per call: the route when the
 * driver refuses a pitched device-to-device copy. */
static int cu_copy_rows(shim_CUstream st, const shim_gpu_block *b) {
  for (size_t z = 0; z < b->depth; z++)
    for (size_t y = 0; y < b->height; y++) {
      shim_CUdeviceptr sd = (shim_CUdeviceptr)(uintptr_t)(b->src + (z * b->src_rows + y) * b->src_pitch);
      shim_CUdeviceptr dd = (shim_CUdeviceptr)(uintptr_t)(b->dst + (z * b->dst_rows + y) * b->dst_pitch);
      CU_CALL(cuMemcpyDtoDAsync_v2, (dd, sd, b->width, st));
    }
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
    shim_CUresult r = cu.cuMemcpy2DAsync_v2((const shim_CUDA_MEMCPY2D *)&p, st);
    /* cuda.h: "On intra-device memory copies, cuMemcpy2DAsync() may fail
     * for pitches not computed by cuMemAllocPitch()": then row by row. */
    if (r == SHIM_CUDA_ERROR_INVALID_VALUE && b->src_on_device && b->dst_on_device)
      return cu_copy_rows(st, b);
    if (r != SHIM_CUDA_SUCCESS) return cu_fail("cuMemcpy2DAsync_v2", r);
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
  shim_CUresult r = cu.cuMemcpy3DAsync_v2((const shim_CUDA_MEMCPY3D *)&p, st);
  /* The same pitch rule, not stated for 3-D copies but not excluded. */
  if (r == SHIM_CUDA_ERROR_INVALID_VALUE && b->src_on_device && b->dst_on_device)
    return cu_copy_rows(st, b);
  if (r != SHIM_CUDA_SUCCESS) return cu_fail("cuMemcpy3DAsync_v2", r);
  return DLPACKSHIM_OK;
}

static int cu_synchronize(shim_gpu_scope *s) {
  CU_CALL(cuStreamSynchronize, ((shim_CUstream)s->stream));
  return DLPACKSHIM_OK;
}

/* The three attributes of a pointer; the first failure's result, *what
 * naming the attribute. */
static shim_CUresult cu_query_pointer(shim_CUdeviceptr p, unsigned int *memory_type,
                                      uint64_t *managed, int *ordinal, const char **what) {
  *what = "cuPointerGetAttribute(MEMORY_TYPE)";
  shim_CUresult r = cu.cuPointerGetAttribute(memory_type, SHIM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  if (r != SHIM_CUDA_SUCCESS) return r;
  /* IS_MANAGED is documented as "a boolean" without a width: read it into a
   * zeroed 8-byte word, which is non-zero whatever width the driver writes. */
  *what = "cuPointerGetAttribute(IS_MANAGED)";
  r = cu.cuPointerGetAttribute(managed, SHIM_CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
  if (r != SHIM_CUDA_SUCCESS) return r;
  *what = "cuPointerGetAttribute(DEVICE_ORDINAL)";
  return cu.cuPointerGetAttribute(ordinal, SHIM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
}

static int cu_pointer_device(const void *ptr, int32_t *device_type, int32_t *device_id) {
  if (cu_count == 0) return 0; /* a driver without GPUs owns no memory */
  shim_CUdeviceptr p = (shim_CUdeviceptr)(uintptr_t)ptr;
  unsigned int memory_type = 0;
  uint64_t managed = 0;
  int ordinal = 0;
  const char *what = NULL;
  shim_CUresult r = cu_query_pointer(p, &memory_type, &managed, &ordinal, &what);
  if (r == SHIM_CUDA_ERROR_INVALID_CONTEXT) {
    /* cuda.h lists CUDA_ERROR_INVALID_CONTEXT: a thread with no current
     * context (a fresh worker thread) asks again inside device 0's primary
     * context; with unified addressing any context sees every pointer. */
    shim_CUcontext ctx = NULL, popped = NULL;
    int rc = cu_primary_context(0, &ctx);
    if (rc) return rc;
    CU_CALL(cuCtxPushCurrent_v2, (ctx));
    memory_type = 0;
    managed = 0;
    r = cu_query_pointer(p, &memory_type, &managed, &ordinal, &what);
    shim_CUresult pr = cu.cuCtxPopCurrent_v2(&popped);
    if (r == SHIM_CUDA_SUCCESS && pr != SHIM_CUDA_SUCCESS) return cu_fail("cuCtxPopCurrent_v2", pr);
  }
  /* "not allocated by, mapped by, or registered with a CUcontext": not ours. */
  if (r == SHIM_CUDA_ERROR_INVALID_VALUE && strstr(what, "MEMORY_TYPE")) return 0;
  if (r != SHIM_CUDA_SUCCESS) return cu_fail(what, r);
  if (managed) {
    /* Reachable from the host, but its pages and its work belong to the
     * device it was allocated against: keep that ordinal (as CuPy does), so
     * that stream waits happen in that device's context. */
    *device_type = kDLCUDAManaged;
    *device_id = ordinal;
  } else if (memory_type == SHIM_CU_MEMORYTYPE_HOST) {
    *device_type = kDLCUDAHost; /* pinned (page-locked) host memory */
    *device_id = 0;
  } else {
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
  /* cuda.h: cuMemFree "may perform implicit synchronization" - may. The
   * memory was handed to consumers whose streams we do not know: wait for
   * all work of the context before the memory can be reused. */
  CU_CALL(cuCtxSynchronize, ());
  CU_CALL(cuMemFree_v2, ((shim_CUdeviceptr)(uintptr_t)ptr));
  return DLPACKSHIM_OK;
}

const shim_gpu_ops shim_cuda_ops = {
    "CUDA", INT32_MAX, cu_load, cu_library, cu_info, cu_device_name,
    cu_enter, cu_leave, cu_wait, cu_copy, cu_synchronize, cu_pointer_device,
    cu_alloc, cu_free,
};
