/*
 * fakecuda.c - a libcuda.so look-alike for the tests: the Driver API entry
 * points dlpackshim uses, over fake device memory in host RAM (fakecore.h),
 * with a call log. Two devices, each with a primary context; contexts are a
 * per-thread stack as in the real driver; streams and events are objects
 * that belong to a context; asynchronous copies happen at once.
 *
 * It is stricter than the real driver where that catches our bugs: a call
 * that needs a context fails with CUDA_ERROR_INVALID_CONTEXT when none is
 * current; device memory may only be copied while its own device's context
 * is current (real UVA would let some of that through); an explicit stream
 * must belong to the current context; an event must be recorded in its own
 * context.
 *
 * Modelled on cuda.h's documentation rather than on what dlpackshim needs:
 * - cuPointerGetAttribute lists CUDA_ERROR_INVALID_CONTEXT: it needs a
 *   current context (any: with unified addressing every context sees every
 *   pointer); memory no context knows is CUDA_ERROR_INVALID_VALUE.
 * - cuMemcpy2DAsync "may fail for pitches not computed by cuMemAllocPitch()"
 *   on intra-device copies: here it always does, for any pitch that is not
 *   a multiple of FAKE_ALLOC_PITCH (what our cuMemAllocPitch would give);
 *   2-D and 3-D copies refuse pitches above CU_DEVICE_ATTRIBUTE_MAX_PITCH
 *   (2^31 - 1).
 * - cuMemFree "may" synchronise: this one never does. It records, per
 *   allocation, whether work queued since the last cuCtxSynchronize /
 *   cuStreamSynchronize of its context used it; freeing such memory is
 *   logged as "(in use by queued work)".
 * - A context destroyed (or a primary context reset) and made again at the
 *   same address: fake_ctx_reset bumps its generation; its older streams and
 *   events are dead handles (CUDA_ERROR_INVALID_HANDLE).
 * - fork(): as with the real driver, a child of a process that called
 *   cuInit gets CUDA_ERROR_NOT_INITIALIZED from every call, cuInit included.
 * Log lines look like
 *   cuEventRecord(E1, S2) [ctx0]
 *   cuMemcpy2DAsync_v2(src=dev0:A1+16 pitch 32, dst=host pitch 16, 16x4, legacy) [ctx0]
 * with " -> CUDA_ERROR_..." appended when a call fails.
 */
#include "fakecore.h"

#include "cuda_abi.h"

/* Our prototypes, from the same header the library uses: a definition below
 * that does not match is a compile error. */
#define FAKE_DECLARE(name, ret, args) FAKE_API ret name args;
SHIM_CUDA_ENTRY_POINTS(FAKE_DECLARE)
SHIM_CUDA_OPTIONAL_ENTRY_POINTS(FAKE_DECLARE)
#undef FAKE_DECLARE

struct shim_CUctx_st {
  int id; /* ctx<id>: 0 and 1 are the primary contexts of devices 0 and 1 */
  int device;
  int generation; /* bumped by fake_ctx_reset */
};
struct shim_CUstream_st {
  int id;
  shim_CUcontext ctx;
  int generation;
};
struct shim_CUevent_st {
  struct shim_CUevent_st *next_live; /* the runtime owns every event until destroyed */
  int id;
  shim_CUcontext ctx;
  int generation;
  int recorded;
  char recorded_on[24];
};

enum { FAKE_ALLOC_PITCH = 512 };
#define FAKE_MAX_PITCH ((size_t)2147483647)

static struct shim_CUctx_st fake_primary[FAKE_DEVICES] = {{0, 0, 0}, {1, 1, 0}};
/* Device memory used by queued work not yet synchronised, per device. */
static int fake_busy[FAKE_DEVICES];
static int fake_primary_refs[FAKE_DEVICES];
static int fake_initialized;
static pid_t fake_init_pid; /* the process that called cuInit */
static int fake_next_ctx = FAKE_DEVICES, fake_next_stream = 1, fake_next_event = 1;
static int fake_live_event_count;
/* Every live event: a context reset makes handles dead, not freed (the
 * driver keeps them; a library that drops them leaks nothing of its own). */
static struct shim_CUevent_st *fake_events;
static _Thread_local shim_CUcontext fake_stack[32];
static _Thread_local int fake_depth;

static const char *fake_error_name(int r) {
  switch (r) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    default: return NULL;
  }
}

static const char *fake_error_text(int r) {
  switch (r) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 3: return "initialization error";
    case 100: return "no CUDA-capable device is detected";
    case 101: return "invalid device ordinal";
    case 201: return "invalid device context";
    case 400: return "invalid resource handle";
    case 700: return "an illegal memory access was encountered";
    default: return NULL;
  }
}

static shim_CUcontext fake_current(void) { return fake_depth ? fake_stack[fake_depth - 1] : NULL; }

static void fake_ctx_name(shim_CUcontext c, char *buf, size_t len) {
  if (c) snprintf(buf, len, "ctx%d", c->id);
  else snprintf(buf, len, "no-ctx");
}

static void fake_stream_name(shim_CUstream s, char *buf, size_t len) {
  if (!s) snprintf(buf, len, "null");
  else if (s == SHIM_CU_STREAM_LEGACY) snprintf(buf, len, "legacy");
  else if (s == SHIM_CU_STREAM_PER_THREAD) snprintf(buf, len, "per-thread");
  else snprintf(buf, len, "S%d", s->id);
}

/* Logs "fn(args) [ctx]" and, when r != 0, " -> NAME (why)"; returns r. */
static int fake_result(int r, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fake_result(int r, const char *why, const char *fmt, ...) {
  char call[400], ctx[16];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call, sizeof call, fmt, ap);
  va_end(ap);
  fake_ctx_name(fake_current(), ctx, sizeof ctx);
  if (r)
    fake_logf("%s [%s] -> %s%s%s%s", call, ctx, fake_error_name(r) ? fake_error_name(r) : "?",
              why ? " (" : "", why ? why : "", why ? ")" : "");
  else
    fake_logf("%s [%s]", call, ctx);
  return r;
}

/* The checks most calls share: initialised, an injected failure, a context. */
static int fake_enter(const char *fn, int need_ctx, const char **why) {
  int r = fake_injected(fn);
  if (r) {
    *why = "injected";
    return r;
  }
  if (!fake_initialized) {
    *why = "cuInit was not called";
    return SHIM_CUDA_ERROR_NOT_INITIALIZED;
  }
  if (fake_init_pid != getpid()) {
    *why = "cuInit was called before fork()";
    return SHIM_CUDA_ERROR_NOT_INITIALIZED;
  }
  if (need_ctx && !fake_current()) {
    *why = "no current context";
    return SHIM_CUDA_ERROR_INVALID_CONTEXT;
  }
  return 0;
}

/* A stream usable in the current context: the special handles always are;
 * an explicit stream must belong to the current context. */
static int fake_check_stream(shim_CUstream s, const char **why) {
  if ((uintptr_t)s <= 2) return 0;
  if (s->generation != s->ctx->generation) {
    *why = "stream of a destroyed context";
    return SHIM_CUDA_ERROR_INVALID_HANDLE;
  }
  if (s->ctx != fake_current()) {
    *why = "stream of another context";
    return SHIM_CUDA_ERROR_INVALID_HANDLE;
  }
  return 0;
}

/* ---- the driver ------------------------------------------------------------ */

FAKE_API shim_CUresult cuInit(unsigned int flags) {
  int r = fake_injected("cuInit");
  const char *why = NULL;
  if (!r && flags != 0) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r && fake_initialized && fake_init_pid != getpid()) {
    why = "cuInit was called before fork()";
    r = SHIM_CUDA_ERROR_NOT_INITIALIZED;
  }
  if (!r) {
    fake_initialized = 1;
    fake_init_pid = getpid();
  }
  return fake_result(r, why, "cuInit(%u)", flags);
}

FAKE_API shim_CUresult cuDriverGetVersion(int *version) {
  int r = fake_injected("cuDriverGetVersion"); /* works before cuInit, as the real one */
  if (!r) *version = 12040;
  return fake_result(r, NULL, "cuDriverGetVersion()");
}

FAKE_API shim_CUresult cuDeviceGetCount(int *count) {
  const char *why = NULL;
  int r = fake_enter("cuDeviceGetCount", 0, &why);
  if (!r) *count = FAKE_DEVICES;
  return fake_result(r, why, "cuDeviceGetCount()");
}

FAKE_API shim_CUresult cuDeviceGet(shim_CUdevice *device, int ordinal) {
  const char *why = NULL;
  int r = fake_enter("cuDeviceGet", 0, &why);
  if (!r && (ordinal < 0 || ordinal >= FAKE_DEVICES)) r = SHIM_CUDA_ERROR_INVALID_DEVICE;
  if (!r) *device = ordinal;
  return fake_result(r, why, "cuDeviceGet(%d)", ordinal);
}

FAKE_API shim_CUresult cuDeviceGetName(char *name, int len, shim_CUdevice dev) {
  const char *why = NULL;
  int r = fake_enter("cuDeviceGetName", 0, &why);
  if (!r && (dev < 0 || dev >= FAKE_DEVICES)) r = SHIM_CUDA_ERROR_INVALID_DEVICE;
  if (!r && (len <= 0 || !name)) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r) snprintf(name, (size_t)len, "Fake CUDA Device %d", dev);
  /* cuda.h does not say a failing call leaves `name` alone: an injected
   * failure leaves half a name there, which no caller may pass on. */
  else if (why && strcmp(why, "injected") == 0 && name && len > 0)
    snprintf(name, (size_t)len, "Fake CU");
  return fake_result(r, why, "cuDeviceGetName(%d, %d)", len, dev);
}

FAKE_API shim_CUresult cuDevicePrimaryCtxRetain(shim_CUcontext *pctx, shim_CUdevice dev) {
  const char *why = NULL;
  int r = fake_enter("cuDevicePrimaryCtxRetain", 0, &why);
  if (!r && (dev < 0 || dev >= FAKE_DEVICES)) r = SHIM_CUDA_ERROR_INVALID_DEVICE;
  if (!r) {
    *pctx = &fake_primary[dev];
    fake_primary_refs[dev]++;
  }
  return fake_result(r, why, "cuDevicePrimaryCtxRetain(%d)", dev);
}

FAKE_API shim_CUresult cuCtxPushCurrent_v2(shim_CUcontext ctx) {
  const char *why = NULL;
  char name[16];
  fake_ctx_name(ctx, name, sizeof name);
  int r = fake_enter("cuCtxPushCurrent_v2", 0, &why);
  if (!r && !ctx) r = SHIM_CUDA_ERROR_INVALID_CONTEXT;
  if (!r && fake_depth == 32) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r) fake_stack[fake_depth++] = ctx;
  return fake_result(r, why, "cuCtxPushCurrent_v2(%s)", name);
}

FAKE_API shim_CUresult cuCtxPopCurrent_v2(shim_CUcontext *pctx) {
  const char *why = NULL;
  int r = fake_enter("cuCtxPopCurrent_v2", 1, &why);
  char name[16];
  fake_ctx_name(fake_current(), name, sizeof name);
  if (!r) {
    shim_CUcontext c = fake_stack[--fake_depth];
    if (pctx) *pctx = c;
  }
  return fake_result(r, why, "cuCtxPopCurrent_v2() = %s", name);
}

FAKE_API shim_CUresult cuStreamGetCtx(shim_CUstream stream, shim_CUcontext *pctx) {
  const char *why = NULL;
  char sname[16], cname[16] = "?";
  fake_stream_name(stream, sname, sizeof sname);
  int r = fake_enter("cuStreamGetCtx", (uintptr_t)stream <= 2, &why);
  if (!r) {
    *pctx = (uintptr_t)stream <= 2 ? fake_current() : stream->ctx;
    fake_ctx_name(*pctx, cname, sizeof cname);
  }
  return fake_result(r, why, "cuStreamGetCtx(%s) = %s", sname, cname);
}

FAKE_API shim_CUresult cuEventCreate(shim_CUevent *event, unsigned int flags) {
  const char *why = NULL;
  int r = fake_enter("cuEventCreate", 1, &why);
  struct shim_CUevent_st *e = NULL;
  if (!r) {
    e = calloc(1, sizeof *e);
    if (!e) r = 2;
  }
  if (!r) {
    pthread_mutex_lock(&fake_lock);
    e->id = fake_next_event++;
    fake_live_event_count++;
  e->next_live = fake_events;
  fake_events = e;
    pthread_mutex_unlock(&fake_lock);
    e->ctx = fake_current();
    e->generation = e->ctx->generation;
    *event = e;
    return fake_result(r, why, "cuEventCreate(flags=%u) = E%d", flags, e->id);
  }
  return fake_result(r, why, "cuEventCreate(flags=%u)", flags);
}

FAKE_API shim_CUresult cuEventDestroy_v2(shim_CUevent event) {
  const char *why = NULL;
  int r = fake_enter("cuEventDestroy_v2", 0, &why);
  int id = event ? event->id : 0;
  if (!r && !event) r = SHIM_CUDA_ERROR_INVALID_HANDLE;
  if (!r) {
    pthread_mutex_lock(&fake_lock);
    for (struct shim_CUevent_st **l = &fake_events; *l; l = &(*l)->next_live)
      if (*l == event) {
        *l = event->next_live;
        break;
      }
    free(event);
    fake_live_event_count--;
    pthread_mutex_unlock(&fake_lock);
  }
  return fake_result(r, why, "cuEventDestroy_v2(E%d)", id);
}

FAKE_API shim_CUresult cuEventRecord(shim_CUevent event, shim_CUstream stream) {
  const char *why = NULL;
  char sname[16];
  fake_stream_name(stream, sname, sizeof sname);
  int r = fake_enter("cuEventRecord", 1, &why);
  if (!r) r = fake_check_stream(stream, &why);
  if (!r && event->generation != event->ctx->generation) {
    why = "event of a destroyed context";
    r = SHIM_CUDA_ERROR_INVALID_HANDLE;
  }
  if (!r && event->ctx != fake_current()) {
    why = "event of another context";
    r = SHIM_CUDA_ERROR_INVALID_HANDLE;
  }
  if (!r) {
    event->recorded = 1;
    snprintf(event->recorded_on, sizeof event->recorded_on, "%s", sname);
  }
  return fake_result(r, why, "cuEventRecord(E%d, %s)", event ? event->id : 0, sname);
}

FAKE_API shim_CUresult cuStreamWaitEvent(shim_CUstream stream, shim_CUevent event,
                                         unsigned int flags) {
  const char *why = NULL;
  char sname[16];
  fake_stream_name(stream, sname, sizeof sname);
  /* The event may come from another context; a special stream handle means
   * the current context's, so then one must be current. */
  int r = fake_enter("cuStreamWaitEvent", (uintptr_t)stream <= 2, &why);
  if (!r && flags != 0) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  return fake_result(r, why, "cuStreamWaitEvent(%s, E%d recorded on %s, %u)", sname,
                     event ? event->id : 0,
                     event && event->recorded ? event->recorded_on : "nothing", flags);
}

FAKE_API shim_CUresult cuStreamSynchronize(shim_CUstream stream) {
  const char *why = NULL;
  char sname[16];
  fake_stream_name(stream, sname, sizeof sname);
  int r = fake_enter("cuStreamSynchronize", 1, &why);
  if (!r) r = fake_check_stream(stream, &why);
  /* The fake's copies happen at once: the legacy stream waits for all the
   * context's blocking streams, so its synchronisation clears the mark. */
  if (!r && (uintptr_t)stream <= 1) fake_busy[fake_current()->device] = 0;
  return fake_result(r, why, "cuStreamSynchronize(%s)", sname);
}

FAKE_API shim_CUresult cuCtxSynchronize(void) {
  const char *why = NULL;
  int r = fake_enter("cuCtxSynchronize", 1, &why);
  if (!r) fake_busy[fake_current()->device] = 0;
  return fake_result(r, why, "cuCtxSynchronize()");
}

/* The device of the current context, for bounds checks. */
static int fake_current_device(void) { return fake_current() ? fake_current()->device : -1; }

FAKE_API shim_CUresult cuMemcpyDtoHAsync_v2(void *dst, shim_CUdeviceptr src, size_t n,
                                            shim_CUstream stream) {
  const char *why = NULL;
  char sname[16], sdesc[48], ddesc[48];
  fake_stream_name(stream, sname, sizeof sname);
  fake_describe((uintptr_t)src, sdesc, sizeof sdesc);
  fake_describe((uintptr_t)dst, ddesc, sizeof ddesc);
  int r = fake_enter("cuMemcpyDtoHAsync_v2", 1, &why);
  if (!r) r = fake_check_stream(stream, &why);
  char *from = NULL, *to = NULL;
  if (!r && !(from = fake_device_bytes((uintptr_t)src, n, fake_current_device(), &why)))
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r && !(to = fake_host_bytes((uintptr_t)dst, &why))) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r) memcpy(to, from, n);
  return fake_result(r, why, "cuMemcpyDtoHAsync_v2(dst=%s, src=%s, %zu, %s)", ddesc, sdesc, n,
                     sname);
}

FAKE_API shim_CUresult cuMemcpyHtoDAsync_v2(shim_CUdeviceptr dst, const void *src, size_t n,
                                            shim_CUstream stream) {
  const char *why = NULL;
  char sname[16], sdesc[48], ddesc[48];
  fake_stream_name(stream, sname, sizeof sname);
  fake_describe((uintptr_t)src, sdesc, sizeof sdesc);
  fake_describe((uintptr_t)dst, ddesc, sizeof ddesc);
  int r = fake_enter("cuMemcpyHtoDAsync_v2", 1, &why);
  if (!r) r = fake_check_stream(stream, &why);
  char *from = NULL, *to = NULL;
  if (!r && !(to = fake_device_bytes((uintptr_t)dst, n, fake_current_device(), &why)))
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r && !(from = fake_host_bytes((uintptr_t)src, &why))) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r) memcpy(to, from, n);
  return fake_result(r, why, "cuMemcpyHtoDAsync_v2(dst=%s, src=%s, %zu, %s)", ddesc, sdesc, n,
                     sname);
}

FAKE_API shim_CUresult cuMemcpyDtoDAsync_v2(shim_CUdeviceptr dst, shim_CUdeviceptr src, size_t n,
                                            shim_CUstream stream) {
  const char *why = NULL;
  char sname[16], sdesc[48], ddesc[48];
  fake_stream_name(stream, sname, sizeof sname);
  fake_describe((uintptr_t)src, sdesc, sizeof sdesc);
  fake_describe((uintptr_t)dst, ddesc, sizeof ddesc);
  int r = fake_enter("cuMemcpyDtoDAsync_v2", 1, &why);
  if (!r) r = fake_check_stream(stream, &why);
  char *from = NULL, *to = NULL;
  if (!r && !(from = fake_device_bytes((uintptr_t)src, n, fake_current_device(), &why)))
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r && !(to = fake_device_bytes((uintptr_t)dst, n, fake_current_device(), &why)))
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r) memmove(to, from, n);
  if (!r) fake_busy[fake_current_device()] = 1;
  return fake_result(r, why, "cuMemcpyDtoDAsync_v2(dst=%s, src=%s, %zu, %s)", ddesc, sdesc, n,
                     sname);
}

/* One side of a pitched copy: where its bytes are. */
static char *fake_side(int type, const void *host, shim_CUdeviceptr dev, size_t extent,
                       const char **why, char *desc, size_t desc_len) {
  if (type == SHIM_CU_MEMORYTYPE_DEVICE) {
    fake_describe((uintptr_t)dev, desc, desc_len);
    return fake_device_bytes((uintptr_t)dev, extent, fake_current_device(), why);
  }
  if (type == SHIM_CU_MEMORYTYPE_HOST) {
    fake_describe((uintptr_t)host, desc, desc_len);
    return fake_host_bytes((uintptr_t)host, why);
  }
  snprintf(desc, desc_len, "memorytype-%d", type);
  *why = "memory type not supported by the fake";
  return NULL;
}

FAKE_API shim_CUresult cuMemcpy2DAsync_v2(const shim_CUDA_MEMCPY2D *p, shim_CUstream stream) {
  const char *why = NULL;
  char sname[16], sdesc[48] = "?", ddesc[48] = "?";
  fake_stream_name(stream, sname, sizeof sname);
  int r = fake_enter("cuMemcpy2DAsync_v2", 1, &why);
  if (!r) r = fake_check_stream(stream, &why);
  if (!r && (p->srcXInBytes || p->srcY || p->dstXInBytes || p->dstY || p->srcArray ||
             p->dstArray)) {
    why = "offsets/arrays not used by dlpackshim";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  if (!r && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes)) {
    why = "pitch smaller than the width";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  if (!r && (p->srcPitch > FAKE_MAX_PITCH || p->dstPitch > FAKE_MAX_PITCH)) {
    why = "pitch above CU_DEVICE_ATTRIBUTE_MAX_PITCH";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  if (!r && p->srcMemoryType == SHIM_CU_MEMORYTYPE_DEVICE &&
      p->dstMemoryType == SHIM_CU_MEMORYTYPE_DEVICE &&
      (p->srcPitch % FAKE_ALLOC_PITCH || p->dstPitch % FAKE_ALLOC_PITCH)) {
    why = "intra-device copy with a pitch not from cuMemAllocPitch";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  char *from = NULL, *to = NULL;
  if (!r) {
    size_t se = fake_extent(p->srcPitch, p->Height, p->WidthInBytes, p->Height, 1);
    size_t de = fake_extent(p->dstPitch, p->Height, p->WidthInBytes, p->Height, 1);
    from = fake_side(p->srcMemoryType, p->srcHost, p->srcDevice, se, &why, sdesc, sizeof sdesc);
    if (from) to = fake_side(p->dstMemoryType, p->dstHost, p->dstDevice, de, &why, ddesc,
                             sizeof ddesc);
    if (!from || !to) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  if (!r)
    fake_copy3d(to, p->dstPitch, p->Height, from, p->srcPitch, p->Height, p->WidthInBytes,
                p->Height, 1);
  if (!r && (p->srcMemoryType == SHIM_CU_MEMORYTYPE_DEVICE ||
             p->dstMemoryType == SHIM_CU_MEMORYTYPE_DEVICE))
    fake_busy[fake_current_device()] = 1;
  return fake_result(r, why, "cuMemcpy2DAsync_v2(src=%s pitch %zu, dst=%s pitch %zu, %zux%zu, %s)",
                     sdesc, p->srcPitch, ddesc, p->dstPitch, p->WidthInBytes, p->Height, sname);
}

FAKE_API shim_CUresult cuMemcpy3DAsync_v2(const shim_CUDA_MEMCPY3D *p, shim_CUstream stream) {
  const char *why = NULL;
  char sname[16], sdesc[48] = "?", ddesc[48] = "?";
  fake_stream_name(stream, sname, sizeof sname);
  int r = fake_enter("cuMemcpy3DAsync_v2", 1, &why);
  if (!r) r = fake_check_stream(stream, &why);
  if (!r && (p->srcXInBytes || p->srcY || p->srcZ || p->srcLOD || p->dstXInBytes || p->dstY ||
             p->dstZ || p->dstLOD || p->srcArray || p->dstArray || p->reserved0 ||
             p->reserved1)) {
    why = "offsets/arrays/reserved fields must be 0";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  if (!r && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes ||
             p->srcHeight < p->Height || p->dstHeight < p->Height)) {
    why = "pitch or height smaller than the copy";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  if (!r && (p->srcPitch > FAKE_MAX_PITCH || p->dstPitch > FAKE_MAX_PITCH)) {
    why = "pitch above CU_DEVICE_ATTRIBUTE_MAX_PITCH";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  char *from = NULL, *to = NULL;
  if (!r) {
    size_t se = fake_extent(p->srcPitch, p->srcHeight, p->WidthInBytes, p->Height, p->Depth);
    size_t de = fake_extent(p->dstPitch, p->dstHeight, p->WidthInBytes, p->Height, p->Depth);
    from = fake_side(p->srcMemoryType, p->srcHost, p->srcDevice, se, &why, sdesc, sizeof sdesc);
    if (from) to = fake_side(p->dstMemoryType, p->dstHost, p->dstDevice, de, &why, ddesc,
                             sizeof ddesc);
    if (!from || !to) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  if (!r)
    fake_copy3d(to, p->dstPitch, p->dstHeight, from, p->srcPitch, p->srcHeight, p->WidthInBytes,
                p->Height, p->Depth);
  if (!r && (p->srcMemoryType == SHIM_CU_MEMORYTYPE_DEVICE ||
             p->dstMemoryType == SHIM_CU_MEMORYTYPE_DEVICE))
    fake_busy[fake_current_device()] = 1;
  return fake_result(r, why,
                     "cuMemcpy3DAsync_v2(src=%s pitch %zu rows %zu, dst=%s pitch %zu rows %zu, "
                     "%zux%zux%zu, %s)",
                     sdesc, p->srcPitch, p->srcHeight, ddesc, p->dstPitch, p->dstHeight,
                     p->WidthInBytes, p->Height, p->Depth, sname);
}

FAKE_API shim_CUresult cuPointerGetAttribute(void *data, shim_CUpointer_attribute attribute,
                                             shim_CUdeviceptr ptr) {
  const char *why = NULL;
  char desc[48];
  fake_describe((uintptr_t)ptr, desc, sizeof desc);
  int r = fake_enter("cuPointerGetAttribute", 1, &why);
  fake_alloc_t *a = r ? NULL : fake_find((uintptr_t)ptr, NULL);
  if (!r && !a) {
    why = "unknown pointer";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  if (!r) {
    switch (attribute) {
      case SHIM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data =
            a->kind == FAKE_KIND_PINNED ? SHIM_CU_MEMORYTYPE_HOST : SHIM_CU_MEMORYTYPE_DEVICE;
        break;
      case SHIM_CU_POINTER_ATTRIBUTE_IS_MANAGED:
        /* A "boolean": written as one byte, the narrowest it could be. */
        *(unsigned char *)data = a->kind == FAKE_KIND_MANAGED;
        break;
      case SHIM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a->device; break;
      default:
        why = "attribute not faked";
        r = SHIM_CUDA_ERROR_INVALID_VALUE;
    }
  }
  return fake_result(r, why, "cuPointerGetAttribute(%d, %s)", (int)attribute, desc);
}

FAKE_API shim_CUresult cuMemAlloc_v2(shim_CUdeviceptr *dptr, size_t n) {
  const char *why = NULL;
  int r = fake_enter("cuMemAlloc_v2", 1, &why);
  uintptr_t p = 0;
  if (!r && n == 0) r = SHIM_CUDA_ERROR_INVALID_VALUE;
  if (!r && !(p = fake_new_alloc(FAKE_KIND_DEVICE, fake_current_device(), n))) r = 2;
  if (!r) *dptr = p;
  char desc[48] = "";
  if (p) fake_describe(p, desc, sizeof desc);
  return fake_result(r, why, "cuMemAlloc_v2(%zu) = %s", n, desc);
}

FAKE_API shim_CUresult cuMemFree_v2(shim_CUdeviceptr dptr) {
  const char *why = NULL;
  char desc[48];
  fake_describe((uintptr_t)dptr, desc, sizeof desc);
  int r = fake_enter("cuMemFree_v2", 1, &why);
  size_t off = 0;
  fake_alloc_t *a = r ? NULL : fake_find((uintptr_t)dptr, &off);
  int busy = a && a->kind == FAKE_KIND_DEVICE && fake_busy[a->device];
  if (!r && fake_free_alloc((uintptr_t)dptr) != 0) {
    why = "not the start of an allocation";
    r = SHIM_CUDA_ERROR_INVALID_VALUE;
  }
  /* No implicit wait here (cuda.h only says it "may"): say so when the
   * device still had unsynchronised work. */
  return fake_result(r, why, "cuMemFree_v2(%s)%s", desc, busy ? " (in use by queued work)" : "");
}

FAKE_API shim_CUresult cuGetErrorString(shim_CUresult error, const char **str) {
  *str = fake_error_text(error);
  return *str ? 0 : SHIM_CUDA_ERROR_INVALID_VALUE;
}

FAKE_API shim_CUresult cuGetErrorName(shim_CUresult error, const char **str) {
  *str = fake_error_name(error);
  return *str ? 0 : SHIM_CUDA_ERROR_INVALID_VALUE;
}

/* ---- test helpers ---------------------------------------------------------- */

/* A context of `device` that is not the primary one (as PyCUDA makes). */
FAKE_API void *fake_ctx_create(int device);
FAKE_API void *fake_ctx_create(int device) {
  struct shim_CUctx_st *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  pthread_mutex_lock(&fake_lock);
  c->id = fake_next_ctx++;
  pthread_mutex_unlock(&fake_lock);
  c->device = device;
  return c;
}

/* A stream of a context (NULL: the primary context of `device`). */
FAKE_API void *fake_stream_create(int device, void *ctx);
FAKE_API void *fake_stream_create(int device, void *ctx) {
  struct shim_CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_lock(&fake_lock);
  s->id = fake_next_stream++;
  pthread_mutex_unlock(&fake_lock);
  s->ctx = ctx ? (shim_CUcontext)ctx : &fake_primary[device];
  s->generation = s->ctx->generation;
  return s;
}

/* The current thread's context stack depth: 0 after every library call. */
FAKE_API int fake_ctx_depth(void);
FAKE_API int fake_ctx_depth(void) { return fake_depth; }

FAKE_API int fake_live_events(void);
FAKE_API int fake_live_events(void) { return fake_live_event_count; }

/* Destroys ctx (NULL: resets the primary context of `device`) and makes it
 * again at the same address: its streams and events so far are dead. */
FAKE_API void fake_ctx_reset(int device, void *ctx);
FAKE_API void fake_ctx_reset(int device, void *ctx) {
  struct shim_CUctx_st *c = ctx ? (struct shim_CUctx_st *)ctx : &fake_primary[device];
  pthread_mutex_lock(&fake_lock);
  c->generation++;
  pthread_mutex_unlock(&fake_lock);
  fake_logf("(test) context ctx%d destroyed and made again at the same address", c->id);
}

/* The device of this thread's current context, or -1 when there is none. */
FAKE_API int fake_current_ctx_device(void);
FAKE_API int fake_current_ctx_device(void) { return fake_current() ? fake_current()->device : -1; }

FAKE_API int fake_primary_retains(int device);
FAKE_API int fake_primary_retains(int device) { return fake_primary_refs[device]; }

FAKE_API void fake_object_free(void *p);
FAKE_API void fake_object_free(void *p) { free(p); }
