/*
 * fakehip.c - a libamdhip64.so look-alike for the tests: the HIP runtime
 * entry points dlpackshim uses, over fake device memory in host RAM
 * (fakecore.h), with a call log. Two devices; a current device per thread
 * (hipSetDevice), as in the real runtime; streams and events belong to a
 * device; asynchronous copies happen at once.
 *
 * Stricter than the real runtime where that catches our bugs: device memory
 * may only be copied while its device is current, an explicit stream must
 * belong to the current device, and an event must be recorded on its own
 * device. hipPointerGetAttribute numbers hipMemoryType as HIP 6 does, or as
 * HIP 5 when FAKEHIP_RUNTIME_VERSION (read by hipRuntimeGetVersion) is below
 * 60000000.
 *
 * Modelled on the HIP documentation and ROCm's clr, not on dlpackshim:
 * - FAKEHIP_DEVICES (0, 1 or 2; default 2) devices. With none,
 *   hipGetDeviceCount fails with hipErrorNoDevice (count 0) and
 *   hipPointerGetAttribute of any pointer with hipErrorInvalidDevice (what
 *   Debian's HIP 5.2 answers on a machine without an AMD GPU).
 * - The last error (hipGetLastError / hipPeekAtLastError, per thread):
 *   before ROCm 7 every call sets it, success included; from ROCm 7
 *   (FAKEHIP_RUNTIME_VERSION >= 70000000) only failures do, and it stays
 *   until hipGetLastError reads it (sticky, as in CUDA).
 * - 2-D/3-D copies refuse a pitch of INT32_MAX or more
 *   (hipErrorInvalidPitchValue).
 * - fake_device_reset: hipDeviceReset; events made before are dead handles.
 * Log lines look like
 *   hipEventRecord(E1, S2) [dev0]
 *   hipMemcpy2DAsync(dst=host pitch 16, src=dev0:A1+16 pitch 32, 16x4, D2H, null) [dev0]
 */
#define FAKE_DEVICE_BASE ((uintptr_t)0xe00000000000ULL)
#include "fakecore.h"

#include "hip_abi.h"

/* Our prototypes, from the same header the library uses: a definition below
 * that does not match is a compile error. */
#define FAKE_DECLARE(name, ret, args) FAKE_API ret name args;
SHIM_HIP_ENTRY_POINTS(FAKE_DECLARE)
SHIM_HIP_OPTIONAL_ENTRY_POINTS(FAKE_DECLARE)
#undef FAKE_DECLARE

struct shim_ihipStream_t {
  int id;
  int device;
};
struct shim_ihipEvent_t {
  struct shim_ihipEvent_t *next_live; /* the runtime owns every event until destroyed */
  int id;
  int device;
  int generation;
  int recorded;
  char recorded_on[24];
};

static _Thread_local int fake_device; /* the current device of this thread */
static _Thread_local int fake_last_error;
static int fake_generation[FAKE_DEVICES]; /* bumped by fake_device_reset */
static int fake_next_stream = 1, fake_next_event = 1, fake_live_event_count;
/* Every live event: a context reset makes handles dead, not freed (the
 * driver keeps them; a library that drops them leaks nothing of its own). */
static struct shim_ihipEvent_t *fake_events;

static const char *fake_error_name(int r) {
  switch (r) {
    case 0: return "hipSuccess";
    case 1: return "hipErrorInvalidValue";
    case 2: return "hipErrorOutOfMemory";
    case 12: return "hipErrorInvalidPitchValue";
    case 100: return "hipErrorNoDevice";
    case 101: return "hipErrorInvalidDevice";
    case 400: return "hipErrorInvalidHandle";
    default: return "hipErrorUnknown";
  }
}

static const char *fake_error_text(int r) {
  switch (r) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 12: return "invalid pitch argument";
    case 100: return "no ROCm-capable device is detected";
    case 101: return "invalid device ordinal";
    case 400: return "invalid resource handle";
    default: return "unknown error";
  }
}

static int fake_runtime_version(void) {
  const char *v = getenv("FAKEHIP_RUNTIME_VERSION");
  return v && *v ? atoi(v) : 60242132; /* HIP 6.2 */
}

static int fake_ndev(void) {
  const char *v = getenv("FAKEHIP_DEVICES");
  int n = v && *v ? atoi(v) : FAKE_DEVICES;
  return n < 0 ? 0 : n > FAKE_DEVICES ? FAKE_DEVICES : n;
}

static int fake_sticky(void) { return fake_runtime_version() >= 70000000; }

static void fake_stream_name(shim_hipStream_t s, char *buf, size_t len) {
  if (!s) snprintf(buf, len, "null");
  else snprintf(buf, len, "S%d", s->id);
}

static int fake_result(int r, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fake_result(int r, const char *why, const char *fmt, ...) {
  char call[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call, sizeof call, fmt, ap);
  va_end(ap);
  if (r || !fake_sticky()) fake_last_error = r;
  if (r)
    fake_logf("%s [dev%d] -> %s%s%s%s", call, fake_device, fake_error_name(r), why ? " (" : "",
              why ? why : "", why ? ")" : "");
  else
    fake_logf("%s [dev%d]", call, fake_device);
  return r;
}

static int fake_enter(const char *fn, const char **why) {
  int r = fake_injected(fn);
  if (r) *why = "injected";
  return r;
}

static int fake_check_stream(shim_hipStream_t s, const char **why) {
  if (s && s->device != fake_device) {
    *why = "stream of another device";
    return SHIM_HIP_ERROR_INVALID_HANDLE;
  }
  return 0;
}

FAKE_API shim_hipError_t hipGetDeviceCount(int *count) {
  const char *why = NULL;
  int r = fake_enter("hipGetDeviceCount", &why);
  if (!r) *count = fake_ndev();
  if (!r && !*count) r = SHIM_HIP_ERROR_NO_DEVICE;
  return fake_result(r, why, "hipGetDeviceCount()");
}

FAKE_API shim_hipError_t hipDriverGetVersion(int *version) {
  const char *why = NULL;
  int r = fake_enter("hipDriverGetVersion", &why);
  if (!r) *version = 60242132;
  return fake_result(r, why, "hipDriverGetVersion()");
}

FAKE_API shim_hipError_t hipRuntimeGetVersion(int *version) {
  const char *why = NULL;
  int r = fake_enter("hipRuntimeGetVersion", &why);
  if (!r) *version = fake_runtime_version();
  return fake_result(r, why, "hipRuntimeGetVersion()");
}

FAKE_API shim_hipError_t hipDeviceGet(shim_hipDevice_t *device, int ordinal) {
  const char *why = NULL;
  int r = fake_enter("hipDeviceGet", &why);
  if (!r && (ordinal < 0 || ordinal >= fake_ndev())) r = SHIM_HIP_ERROR_INVALID_DEVICE;
  if (!r) *device = ordinal;
  return fake_result(r, why, "hipDeviceGet(%d)", ordinal);
}

FAKE_API shim_hipError_t hipDeviceGetName(char *name, int len, shim_hipDevice_t device) {
  const char *why = NULL;
  int r = fake_enter("hipDeviceGetName", &why);
  if (!r && (device < 0 || device >= fake_ndev())) r = SHIM_HIP_ERROR_INVALID_DEVICE;
  if (!r && (len <= 0 || !name)) r = SHIM_HIP_ERROR_INVALID_VALUE;
  if (!r) snprintf(name, (size_t)len, "Fake ROCm Device %d", device);
  return fake_result(r, why, "hipDeviceGetName(%d, %d)", len, device);
}

FAKE_API shim_hipError_t hipGetDevice(int *device) {
  const char *why = NULL;
  int r = fake_enter("hipGetDevice", &why);
  if (!r) *device = fake_device;
  return fake_result(r, why, "hipGetDevice() = %d", fake_device);
}

FAKE_API shim_hipError_t hipSetDevice(int device) {
  const char *why = NULL;
  int r = fake_enter("hipSetDevice", &why);
  if (!r && (device < 0 || device >= fake_ndev())) r = SHIM_HIP_ERROR_INVALID_DEVICE;
  if (!r) fake_device = device;
  return fake_result(r, why, "hipSetDevice(%d)", device);
}

FAKE_API shim_hipError_t hipEventCreateWithFlags(shim_hipEvent_t *event, unsigned flags) {
  const char *why = NULL;
  int r = fake_enter("hipEventCreateWithFlags", &why);
  struct shim_ihipEvent_t *e = NULL;
  if (!r && !(e = calloc(1, sizeof *e))) r = 2;
  if (r) return fake_result(r, why, "hipEventCreateWithFlags(flags=%u)", flags);
  pthread_mutex_lock(&fake_lock);
  e->id = fake_next_event++;
  fake_live_event_count++;
  e->next_live = fake_events;
  fake_events = e;
  pthread_mutex_unlock(&fake_lock);
  e->device = fake_device;
  e->generation = fake_generation[fake_device];
  *event = e;
  return fake_result(r, why, "hipEventCreateWithFlags(flags=%u) = E%d", flags, e->id);
}

FAKE_API shim_hipError_t hipEventDestroy(shim_hipEvent_t event) {
  const char *why = NULL;
  int r = fake_enter("hipEventDestroy", &why);
  int id = event ? event->id : 0;
  if (!r && !event) r = SHIM_HIP_ERROR_INVALID_HANDLE;
  if (!r) {
    pthread_mutex_lock(&fake_lock);
    for (struct shim_ihipEvent_t **l = &fake_events; *l; l = &(*l)->next_live)
      if (*l == event) {
        *l = event->next_live;
        break;
      }
    free(event);
    fake_live_event_count--;
    pthread_mutex_unlock(&fake_lock);
  }
  return fake_result(r, why, "hipEventDestroy(E%d)", id);
}

FAKE_API shim_hipError_t hipEventRecord(shim_hipEvent_t event, shim_hipStream_t stream) {
  const char *why = NULL;
  char sname[16];
  fake_stream_name(stream, sname, sizeof sname);
  int r = fake_enter("hipEventRecord", &why);
  if (!r) r = fake_check_stream(stream, &why);
  if (!r && event->generation != fake_generation[event->device]) {
    why = "event from before hipDeviceReset";
    r = SHIM_HIP_ERROR_INVALID_HANDLE;
  }
  if (!r && event->device != fake_device) {
    why = "event of another device";
    r = SHIM_HIP_ERROR_INVALID_HANDLE;
  }
  if (!r) {
    event->recorded = 1;
    snprintf(event->recorded_on, sizeof event->recorded_on, "%s", sname);
  }
  return fake_result(r, why, "hipEventRecord(E%d, %s)", event ? event->id : 0, sname);
}

FAKE_API shim_hipError_t hipStreamWaitEvent(shim_hipStream_t stream, shim_hipEvent_t event,
                                            unsigned int flags) {
  const char *why = NULL;
  char sname[16];
  fake_stream_name(stream, sname, sizeof sname);
  int r = fake_enter("hipStreamWaitEvent", &why);
  if (!r && flags != 0) r = SHIM_HIP_ERROR_INVALID_VALUE;
  return fake_result(r, why, "hipStreamWaitEvent(%s, E%d recorded on %s, %u)", sname,
                     event ? event->id : 0,
                     event && event->recorded ? event->recorded_on : "nothing", flags);
}

FAKE_API shim_hipError_t hipStreamSynchronize(shim_hipStream_t stream) {
  const char *why = NULL;
  char sname[16];
  fake_stream_name(stream, sname, sizeof sname);
  int r = fake_enter("hipStreamSynchronize", &why);
  if (!r) r = fake_check_stream(stream, &why);
  return fake_result(r, why, "hipStreamSynchronize(%s)", sname);
}

static const char *fake_kind_name(int kind) {
  switch (kind) {
    case SHIM_HIP_MEMCPY_HOST_TO_DEVICE: return "H2D";
    case SHIM_HIP_MEMCPY_DEVICE_TO_HOST: return "D2H";
    case SHIM_HIP_MEMCPY_DEVICE_TO_DEVICE: return "D2D";
    default: return "other";
  }
}

/* Both sides of a copy by kind; NULL + why on a mismatch. */
static int fake_sides(int kind, uintptr_t dst, size_t dext, uintptr_t src, size_t sext,
                      char **to, char **from, const char **why) {
  int src_dev = kind == SHIM_HIP_MEMCPY_DEVICE_TO_HOST || kind == SHIM_HIP_MEMCPY_DEVICE_TO_DEVICE;
  int dst_dev = kind == SHIM_HIP_MEMCPY_HOST_TO_DEVICE || kind == SHIM_HIP_MEMCPY_DEVICE_TO_DEVICE;
  if (!src_dev && !dst_dev) {
    *why = "copy kind not used by dlpackshim";
    return SHIM_HIP_ERROR_INVALID_VALUE;
  }
  *from = src_dev ? fake_device_bytes(src, sext, fake_device, why) : fake_host_bytes(src, why);
  if (!*from) return SHIM_HIP_ERROR_INVALID_VALUE;
  *to = dst_dev ? fake_device_bytes(dst, dext, fake_device, why) : fake_host_bytes(dst, why);
  if (!*to) return SHIM_HIP_ERROR_INVALID_VALUE;
  return 0;
}

FAKE_API shim_hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n,
                                        shim_hipMemcpyKind kind, shim_hipStream_t stream) {
  const char *why = NULL;
  char sname[16], sdesc[48], ddesc[48];
  fake_stream_name(stream, sname, sizeof sname);
  fake_describe((uintptr_t)src, sdesc, sizeof sdesc);
  fake_describe((uintptr_t)dst, ddesc, sizeof ddesc);
  int r = fake_enter("hipMemcpyAsync", &why);
  if (!r) r = fake_check_stream(stream, &why);
  char *to = NULL, *from = NULL;
  if (!r) r = fake_sides(kind, (uintptr_t)dst, n, (uintptr_t)src, n, &to, &from, &why);
  if (!r) memmove(to, from, n);
  return fake_result(r, why, "hipMemcpyAsync(dst=%s, src=%s, %zu, %s, %s)", ddesc, sdesc, n,
                     fake_kind_name(kind), sname);
}

FAKE_API shim_hipError_t hipMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                                          size_t spitch, size_t width, size_t height,
                                          shim_hipMemcpyKind kind, shim_hipStream_t stream) {
  const char *why = NULL;
  char sname[16], sdesc[48], ddesc[48];
  fake_stream_name(stream, sname, sizeof sname);
  fake_describe((uintptr_t)src, sdesc, sizeof sdesc);
  fake_describe((uintptr_t)dst, ddesc, sizeof ddesc);
  int r = fake_enter("hipMemcpy2DAsync", &why);
  if (!r) r = fake_check_stream(stream, &why);
  if (!r && (spitch < width || dpitch < width)) {
    why = "pitch smaller than the width";
    r = SHIM_HIP_ERROR_INVALID_VALUE;
  }
  if (!r && (spitch >= 2147483647u || dpitch >= 2147483647u)) {
    why = "pitch of INT32_MAX or more";
    r = SHIM_HIP_ERROR_INVALID_PITCH_VALUE;
  }
  char *to = NULL, *from = NULL;
  if (!r)
    r = fake_sides(kind, (uintptr_t)dst, fake_extent(dpitch, height, width, height, 1),
                   (uintptr_t)src, fake_extent(spitch, height, width, height, 1), &to, &from,
                   &why);
  if (!r) fake_copy3d(to, dpitch, height, from, spitch, height, width, height, 1);
  return fake_result(r, why, "hipMemcpy2DAsync(dst=%s pitch %zu, src=%s pitch %zu, %zux%zu, %s, %s)",
                     ddesc, dpitch, sdesc, spitch, width, height, fake_kind_name(kind), sname);
}

FAKE_API shim_hipError_t hipMemcpy3DAsync(const shim_hipMemcpy3DParms *p,
                                          shim_hipStream_t stream) {
  const char *why = NULL;
  char sname[16], sdesc[48], ddesc[48];
  fake_stream_name(stream, sname, sizeof sname);
  fake_describe((uintptr_t)p->srcPtr.ptr, sdesc, sizeof sdesc);
  fake_describe((uintptr_t)p->dstPtr.ptr, ddesc, sizeof ddesc);
  int r = fake_enter("hipMemcpy3DAsync", &why);
  if (!r) r = fake_check_stream(stream, &why);
  const shim_hip_extent *e = &p->extent;
  if (!r && (p->srcArray || p->dstArray || p->srcPos.x || p->srcPos.y || p->srcPos.z ||
             p->dstPos.x || p->dstPos.y || p->dstPos.z)) {
    why = "arrays/positions not used by dlpackshim";
    r = SHIM_HIP_ERROR_INVALID_VALUE;
  }
  if (!r && (p->srcPtr.pitch < e->width || p->dstPtr.pitch < e->width ||
             p->srcPtr.ysize < e->height || p->dstPtr.ysize < e->height)) {
    why = "pitch or ysize smaller than the copy";
    r = SHIM_HIP_ERROR_INVALID_VALUE;
  }
  if (!r && (p->srcPtr.pitch >= 2147483647u || p->dstPtr.pitch >= 2147483647u)) {
    why = "pitch of INT32_MAX or more";
    r = SHIM_HIP_ERROR_INVALID_PITCH_VALUE;
  }
  char *to = NULL, *from = NULL;
  if (!r)
    r = fake_sides(p->kind, (uintptr_t)p->dstPtr.ptr,
                   fake_extent(p->dstPtr.pitch, p->dstPtr.ysize, e->width, e->height, e->depth),
                   (uintptr_t)p->srcPtr.ptr,
                   fake_extent(p->srcPtr.pitch, p->srcPtr.ysize, e->width, e->height, e->depth),
                   &to, &from, &why);
  if (!r)
    fake_copy3d(to, p->dstPtr.pitch, p->dstPtr.ysize, from, p->srcPtr.pitch, p->srcPtr.ysize,
                e->width, e->height, e->depth);
  return fake_result(r, why,
                     "hipMemcpy3DAsync(dst=%s pitch %zu rows %zu, src=%s pitch %zu rows %zu, "
                     "%zux%zux%zu, %s, %s)",
                     ddesc, p->dstPtr.pitch, p->dstPtr.ysize, sdesc, p->srcPtr.pitch,
                     p->srcPtr.ysize, e->width, e->height, e->depth, fake_kind_name(p->kind),
                     sname);
}

FAKE_API shim_hipError_t hipMalloc(void **ptr, size_t n) {
  const char *why = NULL;
  int r = fake_enter("hipMalloc", &why);
  uintptr_t p = 0;
  if (!r && n && !(p = fake_new_alloc(FAKE_KIND_DEVICE, fake_device, n))) r = 2;
  if (!r) *ptr = (void *)p;
  char desc[48] = "";
  if (p) fake_describe(p, desc, sizeof desc);
  return fake_result(r, why, "hipMalloc(%zu) = %s", n, desc);
}

FAKE_API shim_hipError_t hipFree(void *ptr) {
  const char *why = NULL;
  char desc[48];
  fake_describe((uintptr_t)ptr, desc, sizeof desc);
  int r = fake_enter("hipFree", &why);
  if (!r && ptr && fake_free_alloc((uintptr_t)ptr) != 0) {
    why = "not the start of an allocation";
    r = SHIM_HIP_ERROR_INVALID_VALUE;
  }
  return fake_result(r, why, "hipFree(%s)", desc);
}

FAKE_API shim_hipError_t hipDeviceSynchronize(void) {
  const char *why = NULL;
  int r = fake_enter("hipDeviceSynchronize", &why);
  return fake_result(r, why, "hipDeviceSynchronize()");
}

/* Not logged: dlpackshim peeks before every call. */
FAKE_API shim_hipError_t hipPeekAtLastError(void) { return fake_last_error; }

FAKE_API shim_hipError_t hipGetLastError(void) {
  int r = fake_last_error;
  fake_last_error = 0;
  fake_logf("hipGetLastError() = %s [dev%d]", fake_error_name(r), fake_device);
  return r;
}

FAKE_API const char *hipGetErrorString(shim_hipError_t error) { return fake_error_text(error); }

FAKE_API const char *hipGetErrorName(shim_hipError_t error) { return fake_error_name(error); }

FAKE_API shim_hipError_t hipPointerGetAttribute(void *data, shim_hipPointer_attribute attribute,
                                                shim_hipDeviceptr_t ptr) {
  const char *why = NULL;
  char desc[48];
  fake_describe((uintptr_t)ptr, desc, sizeof desc);
  int r = fake_enter("hipPointerGetAttribute", &why);
  fake_alloc_t *a = r ? NULL : fake_find((uintptr_t)ptr, NULL);
  int hip6 = fake_runtime_version() >= SHIM_HIP_VERSION_6;
  if (!r && fake_ndev() == 0) {
    why = "no device";
    r = SHIM_HIP_ERROR_INVALID_DEVICE;
  }
  if (!r && !a) {
    why = "unknown pointer";
    r = SHIM_HIP_ERROR_INVALID_VALUE;
  }
  if (!r) {
    switch (attribute) {
      case SHIM_HIP_POINTER_ATTRIBUTE_MEMORY_TYPE:
        if (a->kind == FAKE_KIND_PINNED)
          *(unsigned int *)data = hip6 ? SHIM_HIP6_MEMORY_TYPE_HOST : SHIM_HIP5_MEMORY_TYPE_HOST;
        else if (a->kind == FAKE_KIND_MANAGED)
          *(unsigned int *)data =
              hip6 ? SHIM_HIP6_MEMORY_TYPE_MANAGED : SHIM_HIP5_MEMORY_TYPE_MANAGED;
        else
          *(unsigned int *)data =
              hip6 ? SHIM_HIP6_MEMORY_TYPE_DEVICE : SHIM_HIP5_MEMORY_TYPE_DEVICE;
        break;
      case SHIM_HIP_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = a->kind == FAKE_KIND_MANAGED; break;
      case SHIM_HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a->device; break;
      default:
        why = "attribute not faked";
        r = SHIM_HIP_ERROR_INVALID_VALUE;
    }
  }
  return fake_result(r, why, "hipPointerGetAttribute(%d, %s)", (int)attribute, desc);
}

/* ---- test helpers ------------------------------------------------------------ */

FAKE_API void *fake_stream_create(int device, void *unused);
FAKE_API void *fake_stream_create(int device, void *unused) {
  struct shim_ihipStream_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_lock(&fake_lock);
  s->id = fake_next_stream++;
  pthread_mutex_unlock(&fake_lock);
  s->device = device;
  return s;
}

FAKE_API void fake_object_free(void *p);
FAKE_API void fake_object_free(void *p) { free(p); }

FAKE_API int fake_current_device(void);
FAKE_API int fake_current_device(void) { return fake_device; }

/* The calling thread's pending last error, unread; and a way to set one
 * (an error "someone else" left, which dlpackshim must not clear). */
FAKE_API int fake_peek_last_error(void);
FAKE_API int fake_peek_last_error(void) { return fake_last_error; }
FAKE_API void fake_set_last_error(int code);
FAKE_API void fake_set_last_error(int code) { fake_last_error = code; }

/* hipDeviceReset(device): its events so far are dead handles. */
FAKE_API void fake_device_reset(int device);
FAKE_API void fake_device_reset(int device) {
  pthread_mutex_lock(&fake_lock);
  fake_generation[device]++;
  pthread_mutex_unlock(&fake_lock);
  fake_logf("(test) hipDeviceReset(%d)", device);
}

FAKE_API int fake_live_events(void);
FAKE_API int fake_live_events(void) { return fake_live_event_count; }
