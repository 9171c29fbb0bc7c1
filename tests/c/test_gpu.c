/*
 * test_gpu.c - devices, streams, copies and memory (csrc/gpu/) against the
 * fake runtimes of tests/fakegpu: libfakecuda.so and libfakehip.so,
 * named by DLPACKSHIM_LIBCUDA / DLPACKSHIM_LIBHIP. The test opens the same
 * files itself (dlopen hands back the library's own instance) to reach the
 * fakes' helpers: fake memory, the call log, failure injection.
 *
 * A runtime is loaded once per process, so the cases about loading (missing
 * runtime, failing cuInit, HIP 5 numbering) each run in a forked child; the
 * children's counts are added to the parent's through shared memory.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dlpackshim.h"

/* ---- the fakes' helpers -------------------------------------------------- */

typedef struct {
  void *handle;
  char path[1024];
  const char *(*log_text)(void);
  void (*log_clear)(void);
  int (*calls)(const char *fn);
  void (*fail_next)(const char *fn, int code);
  void *(*alloc)(int kind, int device, size_t size);
  int (*free)(void *p);
  void *(*backing)(void *p);
  int (*live_allocs)(void);
  void *(*stream_create)(int device, void *ctx);
  void (*object_free)(void *p);
  int (*live_events)(void);
  /* CUDA only */
  void *(*ctx_create)(int device);
  int (*ctx_depth)(void);
  int (*primary_retains)(int device);
  /* HIP only */
  int (*current_device)(void);
} fake_api;

static fake_api fcu, fhip;

enum { KIND_DEVICE = 0, KIND_PINNED = 1, KIND_MANAGED = 2 };

static void *need_sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  if (!p) {
    fprintf(stderr, "fake library lacks %s\n", name);
    exit(99);
  }
  return p;
}

static void open_fake(fake_api *f, const char *name, int cuda) {
  const char *b = getenv("top_builddir");
  snprintf(f->path, sizeof f->path, "%s/tests/fakegpu/.libs/%s", b && *b ? b : ".", name);
  f->handle = dlopen(f->path, RTLD_NOW | RTLD_LOCAL);
  if (!f->handle) {
    fprintf(stderr, "cannot open %s: %s\n", f->path, dlerror());
    exit(99);
  }
  void *h = f->handle;
  *(void **)&f->log_text = need_sym(h, "fake_log_text");
  *(void **)&f->log_clear = need_sym(h, "fake_log_clear");
  *(void **)&f->calls = need_sym(h, "fake_calls");
  *(void **)&f->fail_next = need_sym(h, "fake_fail_next");
  *(void **)&f->alloc = need_sym(h, "fake_alloc");
  *(void **)&f->free = need_sym(h, "fake_free");
  *(void **)&f->backing = need_sym(h, "fake_backing");
  *(void **)&f->live_allocs = need_sym(h, "fake_live_allocs");
  *(void **)&f->stream_create = need_sym(h, "fake_stream_create");
  *(void **)&f->object_free = need_sym(h, "fake_object_free");
  *(void **)&f->live_events = need_sym(h, "fake_live_events");
  if (cuda) {
    *(void **)&f->ctx_create = need_sym(h, "fake_ctx_create");
    *(void **)&f->ctx_depth = need_sym(h, "fake_ctx_depth");
    *(void **)&f->primary_retains = need_sym(h, "fake_primary_retains");
  } else {
    *(void **)&f->current_device = need_sym(h, "fake_current_device");
  }
}

/* The log, copied (the fake's buffer moves as it grows). */
static char *log_copy(fake_api *f) { return strdup(f->log_text()); }

/* 1 when the lines containing a, b, c ... appear in that order in log. */
static int log_in_order(const char *log, const char *const *frags) {
  const char *p = log;
  for (; *frags; frags++) {
    const char *q = strstr(p, *frags);
    if (!q) {
      fprintf(stderr, "log lacks \"%s\" (in order); log:\n%s\n", *frags, log);
      return 0;
    }
    p = q + strlen(*frags);
  }
  return 1;
}
#define CHECK_LOG_ORDER(log, ...)                                  \
  do {                                                             \
    const char *const frags_[] = {__VA_ARGS__, NULL};              \
    CHECK(log_in_order((log), frags_));                            \
  } while (0)

/* ---- children ------------------------------------------------------------- */

static int *shared_counts; /* [0] passed, [1] failed, added by children */

static void run_child(const char *name, void (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    check_passed = check_failed = 0;
    fn();
    __atomic_add_fetch(&shared_counts[0], check_passed, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&shared_counts[1], check_failed, __ATOMIC_SEQ_CST);
    printf("  child %s: %d passed, %d failed\n", name, check_passed, check_failed);
    fflush(NULL);
    _exit(check_failed ? 1 : 0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
}

static void child_cuda_missing(void) {
  setenv("DLPACKSHIM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  setenv("DLPACKSHIM_LIBHIP", "/nonexistent/libamdhip64.so", 1);
  int driver = -5, runtime = -5, count = -5;
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLCUDA, &driver, &runtime, &count),
              DLPACKSHIM_ERR_DEVICE,
              "CUDA driver not found: tried DLPACKSHIM_LIBCUDA=/nonexistent/libcuda.so.1 (");
  CHECK_HAS(dlpackshim_last_error(), "No such file");
  CHECK_EQ(driver, -5); /* outputs untouched on failure */
  char first[512];
  snprintf(first, sizeof first, "%s", dlpackshim_last_error());
  /* A second call gives the same answer, from the cached result. */
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLCUDA, NULL, NULL, NULL), DLPACKSHIM_ERR_DEVICE,
              "CUDA driver not found");
  CHECK(strcmp(first, dlpackshim_last_error()) == 0);
  const char *lib = "untouched";
  CHECK_FAILS(dlpackshim_gpu_library(kDLCUDA, &lib), DLPACKSHIM_ERR_DEVICE,
              "CUDA driver not found");
  CHECK(strcmp(lib, "untouched") == 0); /* out-parameter untouched on failure */
  CHECK_FAILS(dlpackshim_gpu_library(kDLROCM, &lib), DLPACKSHIM_ERR_DEVICE,
              "HIP runtime not found");
  CHECK(strcmp(lib, "untouched") == 0);
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, 1, 2), DLPACKSHIM_ERR_DEVICE, "not found");
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLROCM, NULL, NULL, NULL), DLPACKSHIM_ERR_DEVICE,
              "HIP runtime not found: tried DLPACKSHIM_LIBHIP=/nonexistent/libamdhip64.so (");
  /* What needs no runtime still works. */
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 1, -1));
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 0x7f0012345600, 0x7f0012345600));
  int64_t shape[1] = {0};
  float a = 0, b = 0;
  DLTensor dev = {NULL, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor host = {&a, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  CHECK_OK(dlpackshim_copy(&host, &dev, 1)); /* empty: nothing loaded */
  shape[0] = 1;
  a = 3.5f;
  DLTensor host2 = {&b, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  CHECK_OK(dlpackshim_copy(&host2, &host, 1)); /* host to host */
  CHECK(b == 3.5f);
  int32_t type = -1, id = -1;
  /* "any runtime" with none present: plain host memory, and the missing
   * runtimes leave no error behind (nor take the one before away). */
  dlpackshim_clear_error();
  CHECK_OK(dlpackshim_pointer_device(0, (const void *)&a, &type, &id));
  CHECK_EQ(type, kDLCPU);
  CHECK_EQ(id, 0);
  CHECK_EQ(dlpackshim_last_status(), 0);
  CHECK_FAILS(dlpackshim_tensor_validate(NULL, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_OK(dlpackshim_pointer_device(0, (const void *)&a, &type, &id));
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_INVALID_ARGUMENT);
  CHECK_HAS(dlpackshim_last_error(), "NULL");
  type = id = -7;
  CHECK_FAILS(dlpackshim_pointer_device(kDLCUDA, (const void *)&a, &type, &id),
              DLPACKSHIM_ERR_DEVICE, "CUDA driver not found");
  CHECK_EQ(type, -7); /* untouched on failure */
  CHECK_EQ(id, -7);
}

static void child_default_names(void) {
  /* Without an override, the standard names are tried and listed. */
  unsetenv("DLPACKSHIM_LIBCUDA");
  void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (real) { /* a machine with a real driver: nothing to check here */
    dlclose(real);
    CHECK(1);
    return;
  }
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLCUDA, NULL, NULL, NULL), DLPACKSHIM_ERR_DEVICE,
              "CUDA driver not found: tried libcuda.so.1 (");
  CHECK_HAS(dlpackshim_last_error(), ", libcuda.so (");
  CHECK_HAS(dlpackshim_last_error(), "set DLPACKSHIM_LIBCUDA");
}

static void child_cuinit_fails(void) {
  fake_api f;
  open_fake(&f, "libfakecuda.so", 1);
  f.fail_next("cuInit", 100);
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLCUDA, NULL, NULL, NULL), DLPACKSHIM_ERR_DEVICE,
              "cuInit failed: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected (error 100)");
  CHECK_HAS(dlpackshim_last_error(), f.path);
  /* Cached: cuInit is not called again. */
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, 1, 2), DLPACKSHIM_ERR_DEVICE, "cuInit failed");
  CHECK_EQ(f.calls("cuInit"), 1);
}

static void child_hip5_numbering(void) {
  setenv("FAKEHIP_RUNTIME_VERSION", "50200000", 1);
  fake_api f;
  open_fake(&f, "libfakehip.so", 0);
  int driver = 0, runtime = 0, count = 0;
  CHECK_OK(dlpackshim_gpu_runtime_info(kDLROCM, &driver, &runtime, &count));
  CHECK_EQ(runtime, 50200000);
  void *d = f.alloc(KIND_DEVICE, 1, 64), *p = f.alloc(KIND_PINNED, 0, 64),
       *m = f.alloc(KIND_MANAGED, 1, 64);
  int32_t type = -1, id = -1;
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)d, &type, &id));
  CHECK_EQ(type, kDLROCM);
  CHECK_EQ(id, 1);
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)p, &type, &id));
  CHECK_EQ(type, kDLROCMHost); /* HIP 5's 0 is "host", not "unregistered" */
  CHECK_EQ(id, 0);
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)m, &type, &id));
  CHECK_EQ(type, kDLROCM);
  CHECK_EQ(id, 1);
  f.free(d);
  f.free(p);
  f.free(m);
}


/* Issue 14, case 1: HIP installed, no AMD GPU (an NVIDIA or CPU-only box).
 * The fake answers as Debian's HIP 5.2 does there: hipGetDeviceCount fails
 * with hipErrorNoDevice, hipPointerGetAttribute with hipErrorInvalidDevice.
 * With ROCm 7's sticky last error, nothing may be left pending either. */
static void child_hip_no_device(void) {
  setenv("FAKEHIP_DEVICES", "0", 1);
  setenv("FAKEHIP_RUNTIME_VERSION", "70000000", 1);
  fake_api f;
  open_fake(&f, "libfakehip.so", 0);
  int (*peek)(void) = (int (*)(void))need_sym(f.handle, "fake_peek_last_error");
  int count = -1;
  CHECK_OK(dlpackshim_gpu_runtime_info(kDLROCM, NULL, NULL, &count));
  CHECK_EQ(count, 0);
  CHECK_HAS(f.log_text(), "hipGetDeviceCount() [dev0] -> hipErrorNoDevice");
  CHECK_EQ(peek(), 0); /* the error our probe caused was cleared */
  char *host = malloc(64);
  int32_t type = -1, id = -1;
  f.log_clear();
  CHECK_OK(dlpackshim_pointer_device(0, (const void *)host, &type, &id)); /* "any runtime" */
  CHECK_EQ(type, kDLCPU);
  CHECK_EQ(id, 0);
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)host, &type, &id));
  CHECK_EQ(type, kDLCPU);
  CHECK_EQ(f.calls("hipPointerGetAttribute"), 0); /* a runtime with no device is not asked */
  CHECK_EQ(peek(), 0);
  CHECK_FAILS(dlpackshim_stream_wait(kDLROCM, 0, 0, 0x5000), DLPACKSHIM_ERR_DEVICE,
              "ROCm device 0 does not exist (0 devices found)");
  free(host);
}

/* Issue 14, case 3: ROCm 7 keeps a failed call's error pending until
 * hipGetLastError; PyTorch's next launch check would report it. We clear
 * what we caused, and only that. */
static void child_hip7_last_error(void) {
  setenv("FAKEHIP_RUNTIME_VERSION", "70000000", 1);
  fake_api f;
  open_fake(&f, "libfakehip.so", 0);
  int (*peek)(void) = (int (*)(void))need_sym(f.handle, "fake_peek_last_error");
  void (*set)(int) = (void (*)(int))need_sym(f.handle, "fake_set_last_error");
  char *host = malloc(64);
  int32_t type = -1, id = -1;
  CHECK_OK(dlpackshim_gpu_runtime_info(kDLROCM, NULL, NULL, NULL));
  /* An ordinary host pointer: hipErrorInvalidValue, an expected failure. */
  f.log_clear();
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)host, &type, &id));
  CHECK_EQ(type, kDLCPU);
  CHECK_LOG_ORDER(f.log_text(), "hipPointerGetAttribute(2, host) [dev0] -> hipErrorInvalidValue",
                  "hipGetLastError() = hipErrorInvalidValue");
  CHECK_EQ(peek(), 0);
  /* The same answer as "invalid device" (what HIP 5.2 gives without a GPU). */
  f.fail_next("hipPointerGetAttribute", 101);
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)host, &type, &id));
  CHECK_EQ(type, kDLCPU);
  CHECK_EQ(peek(), 0);
  /* A reported failure is cleared too, once its words are in our message. */
  f.fail_next("hipEventRecord", 1);
  CHECK_FAILS(dlpackshim_stream_wait(kDLROCM, 0, 0, 0x5000), DLPACKSHIM_ERR_DEVICE,
              "hipEventRecord failed: hipErrorInvalidValue");
  CHECK_EQ(peek(), 0);
  /* An error someone else left pending is not ours to clear. */
  set(700);
  f.log_clear();
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)host, &type, &id));
  CHECK(peek() != 0);
  CHECK_EQ(f.calls("hipGetLastError"), 0);
  set(0);
  free(host);
}

/* ---- stream rules (no runtime needed) ------------------------------------ */

/* The C API speaks C to its callers: a refused stream is named by its value
 * and "no stream" by has_stream = 0, never by Python's words. */
static void check_c_words(const char *msg) {
  static const char *const python_words[] = {"None", "True", "False", "raise", "Error",
                                             "stream=", "dl_device", "array"};
  for (size_t i = 0; i < sizeof python_words / sizeof *python_words; i++)
    if (strstr(msg, python_words[i])) {
      check_failed++;
      fprintf(stderr, "%s:%d: \"%s\" has the Python word \"%s\"\n", __FILE__, __LINE__, msg,
              python_words[i]);
      return;
    }
  check_passed++;
}

static void test_stream_messages_in_c_words(void) {
  CHECK_FAILS(dlpackshim_stream_check(kDLCPU, 1, 7, NULL), DLPACKSHIM_ERR_STREAM,
              "stream 7 is not allowed for kDLCPU: it takes no stream (has_stream = 0) or -1");
  check_c_words(dlpackshim_last_error());
  CHECK_FAILS(dlpackshim_stream_check(kDLROCM, 1, 2, NULL), DLPACKSHIM_ERR_STREAM,
              "stream 2 is not allowed for ROCm: the default stream is 0 (or no stream, "
              "has_stream = 0)");
  check_c_words(dlpackshim_last_error());
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDA, 1, 0, NULL), DLPACKSHIM_ERR_STREAM,
              "stream 0 is not allowed for CUDA");
  check_c_words(dlpackshim_last_error());
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDA, 1, -5, NULL), DLPACKSHIM_ERR_STREAM,
              "stream -5 is not a stream: the only negative value is -1");
  check_c_words(dlpackshim_last_error());
  CHECK_FAILS(dlpackshim_stream_check(kDLVulkan, 1, 3, NULL), DLPACKSHIM_ERR_UNSUPPORTED,
              "stream 3 is not allowed for device type 7: dlpackshim cannot synchronise its "
              "streams, it takes no stream (has_stream = 0) or -1");
  check_c_words(dlpackshim_last_error());
  CHECK_FAILS(dlpackshim_stream_wait(kDLCPU, 0, 0, 9), DLPACKSHIM_ERR_STREAM,
              "stream 9 is not allowed for kDLCPU");
  check_c_words(dlpackshim_last_error());
  CHECK_FAILS(dlpackshim_stream_synchronize(kDLROCM, 0, 2), DLPACKSHIM_ERR_STREAM,
              "the stream 2 is not a ROCm stream");
  check_c_words(dlpackshim_last_error());
}

static void test_stream_rules(void) {
  int64_t n = 99;
  /* CUDA: None -> 1, 1, 2, handles, -1 pass; 0 and other negatives do not. */
  CHECK_OK(dlpackshim_stream_check(kDLCUDA, 0, 0, &n));
  CHECK_EQ(n, 1);
  CHECK_OK(dlpackshim_stream_check(kDLCUDA, 1, 1, &n));
  CHECK_EQ(n, 1);
  CHECK_OK(dlpackshim_stream_check(kDLCUDA, 1, 2, &n));
  CHECK_EQ(n, 2);
  CHECK_OK(dlpackshim_stream_check(kDLCUDA, 1, -1, &n));
  CHECK_EQ(n, -1);
  CHECK_OK(dlpackshim_stream_check(kDLCUDA, 1, 0x7f0012345600, &n));
  CHECK_EQ(n, 0x7f0012345600);
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDA, 1, 0, &n), DLPACKSHIM_ERR_STREAM,
              "stream 0 is not allowed for CUDA");
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDA, 1, -2, &n), DLPACKSHIM_ERR_STREAM, "stream -2");
  /* A handle is an address, and the first page holds none: the driver would
   * dereference 3..4095 (a real CUDA driver crashed on 7). */
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDA, 1, 3, &n), DLPACKSHIM_ERR_STREAM,
              "stream 3 is not a CUDA stream");
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDA, 1, 4095, &n), DLPACKSHIM_ERR_STREAM,
              "stream 4095 is not a CUDA stream");
  CHECK_OK(dlpackshim_stream_check(kDLCUDA, 1, 4096, &n));
  CHECK_FAILS(dlpackshim_stream_check(kDLROCM, 1, 3, &n), DLPACKSHIM_ERR_STREAM,
              "stream 3 is not a ROCm stream");
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, 7, 1), DLPACKSHIM_ERR_STREAM,
              "producer stream 7 is not a CUDA stream");
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, 1, 7), DLPACKSHIM_ERR_STREAM,
              "stream 7 is not a CUDA stream");
  CHECK_FAILS(dlpackshim_stream_synchronize(kDLROCM, 0, 100), DLPACKSHIM_ERR_STREAM,
              "stream 100 is not a ROCm stream");
  /* Pinned and managed CUDA memory follow CUDA's rules. */
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDAHost, 1, 0, NULL), DLPACKSHIM_ERR_STREAM, "CUDA");
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDAManaged, 1, 0, NULL), DLPACKSHIM_ERR_STREAM, "CUDA");
  CHECK_OK(dlpackshim_stream_check(kDLCUDAManaged, 0, 0, &n));
  CHECK_EQ(n, 1);
  /* ROCm: None -> 0, 0 and handles pass, 1 and 2 do not. */
  CHECK_OK(dlpackshim_stream_check(kDLROCM, 0, 0, &n));
  CHECK_EQ(n, 0);
  CHECK_OK(dlpackshim_stream_check(kDLROCM, 1, 0, &n));
  CHECK_EQ(n, 0);
  CHECK_OK(dlpackshim_stream_check(kDLROCM, 1, -1, &n));
  CHECK_EQ(n, -1);
  CHECK_OK(dlpackshim_stream_check(kDLROCM, 1, 4096, &n));
  CHECK_EQ(n, 4096);
  CHECK_FAILS(dlpackshim_stream_check(kDLROCM, 1, 1, &n), DLPACKSHIM_ERR_STREAM,
              "stream 1 is not allowed for ROCm");
  CHECK_FAILS(dlpackshim_stream_check(kDLROCM, 1, 2, &n), DLPACKSHIM_ERR_STREAM,
              "stream 2 is not allowed for ROCm");
  CHECK_FAILS(dlpackshim_stream_check(kDLROCMHost, 1, 1, NULL), DLPACKSHIM_ERR_STREAM, "ROCm");
  /* CPU: None only (and -1). */
  CHECK_OK(dlpackshim_stream_check(kDLCPU, 0, 0, &n));
  CHECK_EQ(n, -1);
  CHECK_OK(dlpackshim_stream_check(kDLCPU, 1, -1, &n));
  CHECK_EQ(n, -1);
  CHECK_FAILS(dlpackshim_stream_check(kDLCPU, 1, 0, NULL), DLPACKSHIM_ERR_STREAM, "kDLCPU");
  CHECK_FAILS(dlpackshim_stream_check(kDLCPU, 1, 1, NULL), DLPACKSHIM_ERR_STREAM, "kDLCPU");
  CHECK_FAILS(dlpackshim_stream_check(kDLCPU, 1, 2, NULL), DLPACKSHIM_ERR_STREAM, "kDLCPU");
  /* Devices whose streams we do not know: None only; unknown types refused. */
  CHECK_OK(dlpackshim_stream_check(kDLOneAPI, 0, 0, NULL));
  CHECK_FAILS(dlpackshim_stream_check(kDLOneAPI, 1, 7, NULL), DLPACKSHIM_ERR_UNSUPPORTED,
              "device type 14");
  CHECK_FAILS(dlpackshim_stream_check(99, 0, 0, NULL), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "unknown device type 99");
  CHECK_FAILS(dlpackshim_stream_check(5, 0, 0, NULL), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "unknown device type 5");

  /* stream_wait's rules are checked before any runtime is loaded. */
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 0x1234, -1)); /* consumer: no sync */
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 0x1234, 0x1234)); /* same stream */
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 0, 1)); /* NULL is the legacy stream */
  CHECK_OK(dlpackshim_stream_wait(kDLROCM, 0, 0, 0));
  CHECK_OK(dlpackshim_stream_wait(kDLCPU, 0, 0, -1));
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, 1, 0), DLPACKSHIM_ERR_STREAM, "stream 0");
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, -3, 2), DLPACKSHIM_ERR_STREAM,
              "producer stream -3");
  CHECK_FAILS(dlpackshim_stream_wait(kDLROCM, 0, 0, 2), DLPACKSHIM_ERR_STREAM, "ROCm");
  CHECK_FAILS(dlpackshim_stream_wait(kDLROCM, 0, 1, 0x5000), DLPACKSHIM_ERR_STREAM,
              "producer stream 1");
  CHECK_FAILS(dlpackshim_stream_wait(kDLCPU, 0, 0, 1), DLPACKSHIM_ERR_STREAM, "kDLCPU");
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, -1, 1, 2), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "device_id -1");
  CHECK_OK(dlpackshim_stream_synchronize(kDLCPU, 0, 0));
  CHECK_OK(dlpackshim_stream_synchronize(kDLCUDA, 0, -1));
  /* None of that loaded a runtime: CPU-only use costs nothing. */
  CHECK_EQ(fcu.calls("cuInit"), 0);
  CHECK_EQ(fhip.calls("hipGetDeviceCount"), 0);
}

/* ---- CUDA: runtime, sync ---------------------------------------------------- */

static void test_cuda_info(void) {
  int driver = 0, runtime = -1, count = 0;
  CHECK_OK(dlpackshim_gpu_runtime_info(kDLCUDA, &driver, &runtime, &count));
  CHECK_EQ(driver, 12040);
  CHECK_EQ(runtime, 0);
  CHECK_EQ(count, 2);
  CHECK_EQ(fcu.calls("cuInit"), 1);
  const char *lib = NULL;
  CHECK_OK(dlpackshim_gpu_library(kDLCUDA, &lib));
  CHECK(lib != NULL && strcmp(lib, fcu.path) == 0);
  /* The library's own copy: it pointed into the environment, which a
   * caller may change (then a use after free). */
  CHECK(lib != getenv("DLPACKSHIM_LIBCUDA"));
  lib = NULL;
  CHECK_OK(dlpackshim_gpu_library(kDLCUDAManaged, &lib)); /* same family, same library */
  CHECK(lib != NULL && strcmp(lib, fcu.path) == 0);
  lib = "untouched";
  CHECK_FAILS(dlpackshim_gpu_library(kDLCPU, &lib), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "device type 1 has no GPU runtime");
  CHECK_FAILS(dlpackshim_gpu_library(kDLCUDA, NULL), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK(strcmp(lib, "untouched") == 0);
  CHECK_OK(dlpackshim_gpu_runtime_info(kDLCUDAManaged, NULL, NULL, &count)); /* same family */
  CHECK_EQ(fcu.calls("cuInit"), 1); /* loaded once */
  char name[64];
  CHECK_OK(dlpackshim_gpu_device_name(kDLCUDA, 1, name, sizeof name));
  CHECK(strcmp(name, "Fake CUDA Device 1") == 0);
  CHECK_OK(dlpackshim_gpu_device_name(kDLCUDA, 0, name, 6));
  CHECK(strcmp(name, "Fake ") == 0);
  CHECK_FAILS(dlpackshim_gpu_device_name(kDLCUDA, 2, name, sizeof name), DLPACKSHIM_ERR_DEVICE,
              "CUDA device 2 does not exist (2 devices found)");
  CHECK(name[0] == '\0');
  /* A negative id is the caller's mistake, as for every other GPU call. */
  CHECK_FAILS(dlpackshim_gpu_device_name(kDLCUDA, -1, name, sizeof name),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "device_id -1 is negative");
  CHECK(name[0] == '\0');
  CHECK_FAILS(dlpackshim_gpu_device_name(kDLCPU, 0, name, sizeof name),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "no GPU runtime");
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLCPU, NULL, NULL, NULL),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "no GPU runtime");
}

static void test_cuda_sync(void) {
  void *s1 = fcu.stream_create(0, NULL), *s2 = fcu.stream_create(0, NULL),
       *s3 = fcu.stream_create(1, NULL);
  int64_t p = (int64_t)(intptr_t)s1, c = (int64_t)(intptr_t)s2, d1 = (int64_t)(intptr_t)s3;
  int events_before = fcu.live_events();

  /* Record on the producer, wait on the consumer, in the stream's context. */
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, p, c));
  char *log = log_copy(&fcu);
  CHECK_LOG_ORDER(log, "cuStreamGetCtx(S1) = ctx0", "cuCtxPushCurrent_v2(ctx0)",
                  "cuEventCreate(flags=2) = E", "cuEventRecord(E", ", S1) [ctx0]",
                  "cuStreamWaitEvent(S2, E", "recorded on S1, 0) [ctx0]",
                  "cuCtxPopCurrent_v2() = ctx0");
  CHECK(!strstr(log, "Synchronize")); /* never blocks the host */
  CHECK(!strstr(log, "->"));          /* no call failed */
  free(log);
  CHECK_EQ(fcu.ctx_depth(), 0);
  CHECK_EQ(fcu.live_events(), events_before + 1);

  /* The event is reused: three more syncs create nothing. */
  fcu.log_clear();
  for (int i = 0; i < 3; i++) CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, p, c));
  CHECK_EQ(fcu.calls("cuEventCreate"), 0);
  CHECK_EQ(fcu.calls("cuEventRecord"), 3);
  CHECK_EQ(fcu.calls("cuStreamWaitEvent"), 3);
  CHECK_EQ(fcu.calls("cuStreamSynchronize"), 0);
  CHECK_EQ(fcu.live_events(), events_before + 1);

  /* Legacy producer (1), per-thread consumer (2): the device's primary
   * context, retained once however often it is used. */
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 1, 2));
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 2, 1));
  log = log_copy(&fcu);
  CHECK_LOG_ORDER(log, "cuCtxPushCurrent_v2(ctx0)", "cuEventRecord(E", ", legacy) [ctx0]",
                  "cuStreamWaitEvent(per-thread, E", "recorded on legacy",
                  "cuEventRecord(E", ", per-thread) [ctx0]", "cuStreamWaitEvent(legacy, E",
                  "recorded on per-thread");
  CHECK(!strstr(log, "cuStreamGetCtx")); /* special handles carry no context */
  CHECK_EQ(fcu.calls("cuEventCreate"), 0);
  free(log);
  CHECK_EQ(fcu.primary_retains(0), 1);

  /* The NULL stream is the legacy stream, and is accepted as a producer. */
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 0, c));
  CHECK_EQ(fcu.calls("cuEventRecord"), 1);
  CHECK_HAS(fcu.log_text(), "cuEventRecord(E1, legacy) [ctx0]");

  /* Device 1: its own context, its own event. */
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 1, 1, d1));
  log = log_copy(&fcu);
  CHECK_LOG_ORDER(log, "cuDevicePrimaryCtxRetain(1)", "cuCtxPushCurrent_v2(ctx1)",
                  "cuEventCreate(flags=2)", "[ctx1]", "cuEventRecord(E", ", legacy) [ctx1]",
                  "cuStreamWaitEvent(S3", "[ctx1]", "cuCtxPopCurrent_v2() = ctx1");
  free(log);
  CHECK_EQ(fcu.live_events(), events_before + 2);

  /* A stream of device 1 named with device_id 0: the stream's own context
   * records (the fake rejects a record in any other); the consumer's
   * default stream is device 0's, so the wait is made in its context (it
   * was made in device 1's: device 0's legacy stream was never ordered). */
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, d1, 1));
  log = log_copy(&fcu);
  CHECK_LOG_ORDER(log, "cuCtxPushCurrent_v2(ctx1)", ", S3) [ctx1]", "cuCtxPushCurrent_v2(ctx0)",
                  "cuStreamWaitEvent(legacy, E", "[ctx0]", "cuCtxPopCurrent_v2() = ctx0",
                  "cuCtxPopCurrent_v2() = ctx1");
  free(log);
  CHECK_EQ(fcu.ctx_depth(), 0);

  /* A stream of a non-primary context (PyCUDA's way). */
  void *ctx = fcu.ctx_create(0), *s4 = fcu.stream_create(0, ctx);
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, (int64_t)(intptr_t)s4, 1));
  log = log_copy(&fcu);
  CHECK_LOG_ORDER(log, "cuStreamGetCtx(S4) = ctx2", "cuCtxPushCurrent_v2(ctx2)",
                  "cuEventCreate(flags=2) = E", "[ctx2]", ", S4) [ctx2]",
                  "cuCtxPushCurrent_v2(ctx0)", "cuStreamWaitEvent(legacy", "[ctx0]",
                  "cuCtxPopCurrent_v2() = ctx0", "cuCtxPopCurrent_v2() = ctx2");
  free(log);
  /* An explicit consumer stream waits in the context that records. */
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, (int64_t)(intptr_t)s4, p));
  CHECK_LOG_ORDER(fcu.log_text(), ", S4) [ctx2]", "cuStreamWaitEvent(S1", "[ctx2]");
  CHECK(strstr(fcu.log_text(), "cuCtxPushCurrent_v2(ctx0)") == NULL);

  /* The fake really checks contexts: a record with none current fails. So
   * every success above had the right context pushed. */
  {
    typedef int (*rec_fn)(void *, void *);
    typedef int (*create_fn)(void **, unsigned);
    rec_fn rec = (rec_fn)dlsym(fcu.handle, "cuEventRecord");
    create_fn create = (create_fn)dlsym(fcu.handle, "cuEventCreate");
    void *ev = NULL;
    CHECK_EQ(create(&ev, 2), 201); /* CUDA_ERROR_INVALID_CONTEXT */
    CHECK(rec != NULL);
  }

  /* Explicit host synchronisation of one stream. */
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_synchronize(kDLCUDA, 0, p));
  CHECK_LOG_ORDER(fcu.log_text(), "cuCtxPushCurrent_v2(ctx0)", "cuStreamSynchronize(S1) [ctx0]",
                  "cuCtxPopCurrent_v2");

  /* Errors carry the driver's words; the context is popped all the same. */
  fcu.fail_next("cuEventRecord", 700);
  fcu.log_clear();
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, p, c), DLPACKSHIM_ERR_DEVICE,
              "CUDA: cuEventRecord failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access "
              "was encountered (error 700)");
  CHECK_EQ(fcu.ctx_depth(), 0);
  CHECK_EQ(fcu.calls("cuEventDestroy_v2"), 1); /* a failed event is not pooled */
  CHECK_EQ(fcu.calls("cuStreamWaitEvent"), 0);
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, p, c));
  CHECK_EQ(fcu.calls("cuEventCreate"), 1); /* so the next sync makes a new one */

  fcu.fail_next("cuStreamWaitEvent", 400);
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, p, c), DLPACKSHIM_ERR_DEVICE,
              "cuStreamWaitEvent failed: CUDA_ERROR_INVALID_HANDLE");
  CHECK_EQ(fcu.ctx_depth(), 0);
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, p, c));
  CHECK_EQ(fcu.calls("cuEventCreate"), 0); /* that event went back to the pool */

  fcu.fail_next("cuCtxPushCurrent_v2", 201);
  fcu.log_clear();
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, 1, c), DLPACKSHIM_ERR_DEVICE,
              "cuCtxPushCurrent_v2 failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context");
  CHECK_EQ(fcu.calls("cuEventRecord"), 0);
  CHECK_EQ(fcu.calls("cuCtxPopCurrent_v2"), 0); /* nothing pushed, nothing popped */
  CHECK_EQ(fcu.ctx_depth(), 0);

  /* A context whose pool is still empty must create an event: make that fail. */
  void *ctx3 = fcu.ctx_create(1), *s5 = fcu.stream_create(1, ctx3);
  fcu.fail_next("cuEventCreate", 2);
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 1, (int64_t)(intptr_t)s5, 1), DLPACKSHIM_ERR_DEVICE,
              "cuEventCreate failed: CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_EQ(fcu.ctx_depth(), 0);
  fcu.object_free(s5);
  fcu.object_free(ctx3);

  fcu.fail_next("cuStreamGetCtx", 400);
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, p, c), DLPACKSHIM_ERR_DEVICE,
              "cuStreamGetCtx failed");

  /* An error code the driver has no string for. */
  fcu.fail_next("cuEventRecord", 9999);
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, p, c), DLPACKSHIM_ERR_DEVICE,
              "cuEventRecord failed: CUDA_ERROR: unknown error (error 9999)");

  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 5, 1, c), DLPACKSHIM_ERR_DEVICE,
              "CUDA device 5 does not exist (2 devices found)");

  fcu.object_free(s1);
  fcu.object_free(s2);
  fcu.object_free(s3);
  fcu.object_free(s4);
  fcu.object_free(ctx);
}

/* Threads syncing at once each get an event of their own: every wait sees
 * the event recorded on its own thread's producer stream. */
typedef struct {
  int64_t producer, consumer;
  int failures;
} sync_job;

static void *sync_thread(void *arg) {
  sync_job *job = arg;
  for (int i = 0; i < 200; i++)
    if (dlpackshim_stream_wait(kDLCUDA, 0, job->producer, job->consumer) != 0) job->failures++;
  return NULL;
}

static void test_cuda_sync_threads(void) {
  enum { N = 4 };
  void *streams[2 * N];
  sync_job jobs[N];
  pthread_t threads[N];
  for (int i = 0; i < 2 * N; i++) streams[i] = fcu.stream_create(0, NULL);
  fcu.log_clear();
  for (int i = 0; i < N; i++) {
    jobs[i] = (sync_job){(int64_t)(intptr_t)streams[2 * i], (int64_t)(intptr_t)streams[2 * i + 1], 0};
    REQUIRE(pthread_create(&threads[i], NULL, sync_thread, &jobs[i]) == 0);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(threads[i], NULL);
    CHECK_EQ(jobs[i].failures, 0);
  }
  /* Stream ids: the fake numbers them in creation order, so S(k) waits for
   * S(k-1); read every wait line and check its producer. */
  char *log = log_copy(&fcu);
  int waits = 0, wrong = 0;
  for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
    int cs = 0, ev = 0, ps = 0;
    if (sscanf(line, "cuStreamWaitEvent(S%d, E%d recorded on S%d", &cs, &ev, &ps) == 3) {
      waits++;
      if (ps != cs - 1) wrong++;
    }
  }
  free(log);
  CHECK_EQ(waits, N * 200);
  CHECK_EQ(wrong, 0);
  CHECK(fcu.calls("cuEventCreate") <= N); /* a pool, not an event per call */
  for (int i = 0; i < 2 * N; i++) fcu.object_free(streams[i]);
}

/* ---- copies ------------------------------------------------------------------- */

/* A tensor layout for the copy cases: shape, strides (elements) and the
 * element offset of element 0 inside its buffer beyond the lowest address. */
typedef struct {
  int ndim;
  int64_t shape[5];
  int64_t strides[5];
  int64_t extra; /* elements of padding before the lowest element */
} layout;

typedef struct {
  int32_t device_type, device_id; /* where the buffer lives */
  size_t bytes;
  char *ptr;    /* what the tensor points at (may be a device address) */
  char *bytes_; /* where the test can read and write them */
  DLTensor t;
} buffer;

static void span_of(const layout *l, int64_t *lo, int64_t *hi) {
  *lo = 0;
  *hi = 1;
  for (int i = 0; i < l->ndim; i++) {
    if (l->shape[i] == 0) {
      *lo = 0;
      *hi = 0;
      return;
    }
    int64_t e = (l->shape[i] - 1) * l->strides[i];
    if (e < 0) *lo += e;
    else *hi += e;
  }
}

/* A buffer for l of `item`-byte elements on (type, id), bytes filled from seed. */
static void make_buffer(buffer *b, const layout *l, DLDataType dt, int64_t item, int32_t type,
                        int32_t id, unsigned seed, fake_api *f) {
  int64_t lo, hi;
  span_of(l, &lo, &hi);
  int64_t elems = l->extra + (hi - lo) + 3; /* some slack after, to catch overruns */
  b->bytes = (size_t)(elems * item);
  b->device_type = type;
  b->device_id = id;
  if (type == kDLCUDA || type == kDLROCM) {
    b->ptr = f->alloc(KIND_DEVICE, id, b->bytes);
    b->bytes_ = f->backing(b->ptr);
  } else if (type == kDLCUDAHost || type == kDLROCMHost || type == kDLCUDAManaged) {
    b->ptr = f->alloc(type == kDLCUDAManaged ? KIND_MANAGED : KIND_PINNED, 0, b->bytes);
    b->bytes_ = b->ptr;
  } else {
    b->ptr = malloc(b->bytes);
    b->bytes_ = b->ptr;
  }
  REQUIRE(b->ptr && b->bytes_);
  for (size_t i = 0; i < b->bytes; i++) b->bytes_[i] = (char)(seed * 131u + i * 7u + 1u);
  DLTensor t = {b->ptr, {(DLDeviceType)type, id}, l->ndim, dt, (int64_t *)l->shape,
                (int64_t *)l->strides, (uint64_t)((l->extra - lo) * item)};
  b->t = t;
}

static void free_buffer(buffer *b, fake_api *f) {
  if (b->device_type == kDLCPU) free(b->ptr);
  else f->free(b->ptr);
}

/* A host copy of a buffer (same bytes, same layout) for the reference. */
static void host_twin(buffer *twin, const buffer *b) {
  *twin = *b;
  twin->ptr = twin->bytes_ = malloc(b->bytes);
  REQUIRE(twin->ptr);
  memcpy(twin->ptr, b->bytes_, b->bytes);
  twin->t.data = twin->ptr;
  twin->t.device.device_type = kDLCPU;
  twin->t.device.device_id = 0;
  twin->device_type = kDLCPU;
}

/* Copies src -> dst through dlpackshim_copy and checks every byte of the
 * destination buffer (gaps included) against dlpackshim_copy on host twins
 * (its host-only path). Returns 1 when they match. */
static int copy_matches(const char *what, const buffer *dst, const buffer *src, int64_t stream) {
  buffer rs, rd;
  host_twin(&rs, src);
  host_twin(&rd, dst);
  int ok = 1;
  if (dlpackshim_copy(&rd.t, &rs.t, 0) != 0) { /* host to host */
    fprintf(stderr, "%s: reference copy failed: %s\n", what, dlpackshim_last_error());
    ok = 0;
  } else if (dlpackshim_copy(&dst->t, &src->t, stream) != 0) {
    fprintf(stderr, "%s: device copy failed: %s\n", what, dlpackshim_last_error());
    ok = 0;
  } else if (memcmp(dst->bytes_, rd.bytes_, dst->bytes) != 0) {
    fprintf(stderr, "%s: bytes differ from the reference\n", what);
    ok = 0;
  }
  free(rs.ptr);
  free(rd.ptr);
  return ok;
}

static const DLDataType f32 = {kDLFloat, 32, 1};

/* One case: layouts for src and dst, where each lives. */
static int copy_case(const char *what, fake_api *f, const layout *sl, int32_t st, int32_t sid,
                     const layout *dl, int32_t dt, int32_t did, DLDataType dtype, int64_t stream) {
  int64_t item = (dtype.bits * dtype.lanes) / 8;
  buffer s, d;
  make_buffer(&s, sl, dtype, item, st, sid, 1, f);
  make_buffer(&d, dl, dtype, item, dt, did, 2, f);
  f->log_clear();
  int ok = copy_matches(what, &d, &s, stream);
  free_buffer(&s, f);
  free_buffer(&d, f);
  return ok;
}

#define L1(n0, s0, x) ((layout){1, {n0}, {s0}, x})
#define L2(n0, n1, s0, s1, x) ((layout){2, {n0, n1}, {s0, s1}, x})
#define L3(n0, n1, n2, s0, s1, s2, x) ((layout){3, {n0, n1, n2}, {s0, s1, s2}, x})

static void test_cuda_copies(void) {
  layout a, b;
  /* Contiguous, both directions, with a byte_offset: one linear copy, then
   * the stream is synchronised because host memory is involved. */
  a = L1(10, 1, 3);
  b = L1(10, 1, 0);
  CHECK(copy_case("d2h contiguous", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 1);
  CHECK_LOG_ORDER(fcu.log_text(), "cuMemcpyDtoHAsync_v2(dst=host, src=dev0:A", "+12, 40, legacy) [ctx0]",
                  "cuStreamSynchronize(legacy) [ctx0]", "cuCtxPopCurrent_v2");
  CHECK_EQ(fcu.ctx_depth(), 0);
  a = L2(3, 4, 4, 1, 5);
  b = L2(3, 4, 4, 1, 1);
  CHECK(copy_case("h2d contiguous", &fcu, &a, kDLCPU, 0, &b, kDLCUDA, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyHtoDAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), ", 48, legacy) [ctx0]");
  CHECK_EQ(fcu.calls("cuStreamSynchronize"), 1);

  /* A column slice of a 4x5 array: rows with a pitch -> one 2-D copy. */
  a = L2(4, 3, 5, 1, 2);
  b = L2(4, 3, 3, 1, 0);
  CHECK(copy_case("d2h 2-D pitched", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), "pitch 20, dst=host pitch 12, 12x4, legacy) [ctx0]");
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 0);
  a = L2(4, 3, 3, 1, 0);
  b = L2(4, 3, 6, 1, 1);
  CHECK(copy_case("h2d 2-D pitched", &fcu, &a, kDLCPU, 0, &b, kDLCUDA, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), "src=host pitch 12, dst=dev0:A");
  CHECK_HAS(fcu.log_text(), "pitch 24, 12x4");

  /* [:, :3, :4] of a 2x5x6 array: one 3-D copy (5 rows a slice). */
  a = L3(2, 3, 4, 30, 6, 1, 0);
  b = L3(2, 3, 4, 12, 4, 1, 0);
  CHECK(copy_case("d2h 3-D", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpy3DAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), "pitch 24 rows 5, dst=host pitch 16 rows 3, 16x3x2, legacy");
  CHECK(copy_case("h2d 3-D", &fcu, &b, kDLCPU, 0, &a, kDLCUDA, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpy3DAsync_v2"), 1);

  /* 4-D with an outer dim that merges with nothing: a 3-D copy per index. */
  a = (layout){4, {3, 2, 3, 4}, {100, 30, 6, 1}, 0};
  b = (layout){4, {3, 2, 3, 4}, {24, 12, 4, 1}, 0};
  CHECK(copy_case("d2h 4-D", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpy3DAsync_v2"), 3);
  CHECK_EQ(fcu.calls("cuStreamSynchronize"), 1);

  /* Fortran order on both sides merges into one linear copy. */
  a = L2(3, 4, 1, 3, 0);
  CHECK(copy_case("d2h both F-order", &fcu, &a, kDLCUDA, 0, &a, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 1);
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 0);

  /* A transpose: staged through a host buffer laid out like the device
   * data (one contiguous fetch), then gathered on the host. */
  a = L2(3, 4, 1, 3, 0);
  b = L2(3, 4, 4, 1, 0);
  CHECK(copy_case("d2h transpose", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), ", 48, legacy)");
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 0);
  CHECK(copy_case("h2d transpose", &fcu, &b, kDLCPU, 0, &a, kDLCUDA, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyHtoDAsync_v2"), 1);
  CHECK_EQ(fcu.calls("cuStreamSynchronize"), 1); /* before the staging buffer is freed */

  /* Negative strides: reversed on the device only -> staged, one fetch. */
  a = L1(5, -1, 0);
  b = L1(5, 1, 0);
  CHECK(copy_case("d2h reversed", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 1);
  CHECK(copy_case("h2d reversed", &fcu, &b, kDLCPU, 0, &a, kDLCUDA, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyHtoDAsync_v2"), 1);
  /* ... reversed the same way on both sides -> walked backwards, direct. */
  a = L2(4, 3, -3, 1, 0);
  CHECK(copy_case("d2h both reversed", &fcu, &a, kDLCUDA, 0, &a, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), "+0, 48, legacy)");
  /* ... and in 2-D with a pitch: a[::-1, ::2] of a 4x6 array. */
  a = L2(4, 3, -6, 2, 0);
  b = L2(4, 3, 3, 1, 0);
  CHECK(copy_case("d2h reversed strided", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK(copy_case("h2d reversed strided", &fcu, &b, kDLCPU, 0, &a, kDLCUDA, 0, f32, 1));

  /* Broadcast (stride 0) on the device: its 3 elements fetched once. */
  a = L2(4, 3, 0, 1, 0);
  b = L2(4, 3, 3, 1, 0);
  CHECK(copy_case("d2h broadcast", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), ", 12, legacy)");

  /* Overlapping rows (a sliding window): more than 1024 calls any pitched
   * way, so the whole byte span is fetched once and gathered on the host. */
  a = L2(2000, 20, 1, 1, 0);
  b = L2(2000, 20, 20, 1, 0);
  CHECK(copy_case("d2h span staging", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), ", 8076, legacy)");
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 0);

  /* Zero-size: no call at all. */
  a = L2(0, 3, 3, 1, 0);
  CHECK(copy_case("d2h empty", &fcu, &a, kDLCUDA, 0, &a, kDLCPU, 0, f32, 1));
  CHECK(strcmp(fcu.log_text(), "") == 0);

  /* On the GPU: one call, queued, no host synchronisation. */
  a = L2(4, 3, 3, 1, 0);
  CHECK(copy_case("d2d contiguous", &fcu, &a, kDLCUDA, 1, &a, kDLCUDA, 1, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoDAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), "[ctx1]");
  CHECK_EQ(fcu.calls("cuStreamSynchronize"), 0);
  b = L2(4, 3, 5, 1, 1);
  CHECK(copy_case("d2d 2-D", &fcu, &a, kDLCUDA, 0, &b, kDLCUDA, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 1);
  CHECK_HAS(fcu.log_text(), "src=dev0:A");
  CHECK_HAS(fcu.log_text(), "dst=dev0:A");
  /* A small transpose on the GPU: one narrow 2-D copy per column, queued. */
  a = (layout){2, {40, 50}, {1, 40}, 0};
  b = (layout){2, {40, 50}, {50, 1}, 0};
  CHECK(copy_case("d2d transpose", &fcu, &a, kDLCUDA, 0, &b, kDLCUDA, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 40);
  CHECK_EQ(fcu.calls("cuStreamSynchronize"), 0);
  /* A large one would take more than 1024 calls: no kernels here, so two
   * hops through the host, each one contiguous transfer. */
  a = (layout){2, {2000, 3}, {1, 2000}, 0};
  b = (layout){2, {2000, 3}, {3, 1}, 0};
  CHECK(copy_case("d2d big transpose", &fcu, &a, kDLCUDA, 0, &b, kDLCUDA, 0, f32, 1));
  CHECK_EQ(fcu.calls("cuMemcpyDtoHAsync_v2"), 1);
  CHECK_EQ(fcu.calls("cuMemcpyHtoDAsync_v2"), 1);
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 0);
  CHECK_HAS(fcu.log_text(), ", 24000, legacy)");

  /* An explicit stream is used for the copy and its synchronisation. */
  void *s = fcu.stream_create(1, NULL);
  a = L1(8, 1, 0);
  CHECK(copy_case("d2h on a stream", &fcu, &a, kDLCUDA, 1, &a, kDLCPU, 0, f32,
                  (int64_t)(intptr_t)s));
  CHECK_LOG_ORDER(fcu.log_text(), "cuCtxPushCurrent_v2(ctx1)", ", 32, S", ") [ctx1]",
                  "cuStreamSynchronize(S", ") [ctx1]");
  CHECK(copy_case("d2h on the per-thread stream", &fcu, &a, kDLCUDA, 0, &a, kDLCPU, 0, f32, 2));
  CHECK_HAS(fcu.log_text(), "cuStreamSynchronize(per-thread)");
  CHECK(copy_case("d2h on the NULL stream", &fcu, &a, kDLCUDA, 0, &a, kDLCPU, 0, f32, 0));
  CHECK_HAS(fcu.log_text(), "cuStreamSynchronize(null)");
  fcu.object_free(s);

  /* Pinned and managed memory are host memory to copy to or from. */
  CHECK(copy_case("d2h into pinned", &fcu, &a, kDLCUDA, 0, &a, kDLCUDAHost, 0, f32, 1));
  CHECK_HAS(fcu.log_text(), "cuMemcpyDtoHAsync_v2(dst=pinned:A");
  CHECK(copy_case("h2d from managed", &fcu, &a, kDLCUDAManaged, 0, &a, kDLCUDA, 0, f32, 1));
  CHECK(copy_case("host to host", &fcu, &a, kDLCPU, 0, &a, kDLCUDAHost, 0, f32, 1));
  CHECK(strcmp(fcu.log_text(), "") == 0);

  /* Other element sizes: bytes, complex128 in 3-D. */
  a = L2(5, 7, 9, 1, 0);
  b = L2(5, 7, 7, 1, 0);
  CHECK(copy_case("d2h int8 pitched", &fcu, &a, kDLCUDA, 0, &b, kDLCPU, 0,
                  (DLDataType){kDLInt, 8, 1}, 1));
  CHECK_HAS(fcu.log_text(), "pitch 9, dst=host pitch 7, 7x5");
  a = L3(2, 2, 3, 12, 4, 1, 1);
  b = L3(2, 2, 3, 6, 3, 1, 0);
  CHECK(copy_case("h2d complex128 3-D", &fcu, &b, kDLCPU, 0, &a, kDLCUDA, 0,
                  (DLDataType){kDLComplex, 128, 1}, 1));
  CHECK_HAS(fcu.log_text(), "cuMemcpy3DAsync_v2(src=host pitch 48 rows 2, dst=dev0:A");
  CHECK_HAS(fcu.log_text(), "pitch 64 rows 3, 48x2x2, legacy)");

  /* Packed int4: whole compact buffers only. */
  {
    buffer s4, d4;
    layout l = L1(7, 1, 0);
    DLDataType i4 = {kDLInt, 4, 1};
    make_buffer(&s4, &l, (DLDataType){kDLInt, 8, 1}, 1, kDLCUDA, 0, 3, &fcu);
    make_buffer(&d4, &l, (DLDataType){kDLInt, 8, 1}, 1, kDLCPU, 0, 4, &fcu);
    s4.t.dtype = d4.t.dtype = i4;
    s4.t.byte_offset = d4.t.byte_offset = 0;
    fcu.log_clear();
    const unsigned char d4_last = (unsigned char)d4.bytes_[3];
    CHECK_OK(dlpackshim_copy(&d4.t, &s4.t, 1));
    /* 7 nibbles: 3 whole bytes, and the low nibble of the 4th */
    CHECK_HAS(fcu.log_text(), ", 3, legacy)");
    CHECK(memcmp(d4.bytes_, s4.bytes_, 3) == 0);
    CHECK_EQ((unsigned char)d4.bytes_[3],
             (d4_last & 0xF0) | ((unsigned char)s4.bytes_[3] & 0x0F));
    CHECK((unsigned char)d4.bytes_[4] != (unsigned char)s4.bytes_[4]); /* no more */
    int64_t two[1] = {2};
    /* Strided packed elements share bytes: unsupported, as on the host
     * (copy.c), on either side, whichever side is the GPU. */
    s4.t.strides = two;
    CHECK_FAILS(dlpackshim_copy(&d4.t, &s4.t, 1), DLPACKSHIM_ERR_UNSUPPORTED,
                "src has packed sub-byte dtype (code 0, bits 4, lanes 1) with non-compact strides");
    CHECK_FAILS(dlpackshim_copy(&s4.t, &d4.t, 1), DLPACKSHIM_ERR_UNSUPPORTED,
                "dst has packed sub-byte dtype");
    s4.t.strides = NULL;
    d4.t.strides = two;
    CHECK_FAILS(dlpackshim_copy(&d4.t, &s4.t, 1), DLPACKSHIM_ERR_UNSUPPORTED,
                "dst has packed sub-byte dtype");
    free_buffer(&s4, &fcu);
    free_buffer(&d4, &fcu);
  }
}

static void test_cuda_copy_errors(void) {
  layout l = L2(4, 3, 3, 1, 0), m = L2(3, 4, 4, 1, 0);
  buffer d0, d1, h, h2;
  make_buffer(&d0, &l, f32, 4, kDLCUDA, 0, 1, &fcu);
  make_buffer(&d1, &l, f32, 4, kDLCUDA, 1, 2, &fcu);
  make_buffer(&h, &l, f32, 4, kDLCPU, 0, 3, &fcu);
  make_buffer(&h2, &m, f32, 4, kDLCPU, 0, 3, &fcu);
  CHECK_FAILS(dlpackshim_copy(&h2.t, &d0.t, 1), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "copy: dst.shape[0] is 3 but src.shape[0] is 4");
  h.t.dtype = (DLDataType){kDLInt, 32, 1};
  CHECK_FAILS(dlpackshim_copy(&h.t, &d0.t, 1), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "copy: dst.dtype (code 0, bits 32, lanes 1) differs from src.dtype");
  h.t.dtype = f32;
  CHECK_FAILS(dlpackshim_copy(&d1.t, &d0.t, 1), DLPACKSHIM_ERR_UNSUPPORTED,
              "between two GPUs");
  CHECK_FAILS(dlpackshim_copy(&h.t, &d0.t, -1), DLPACKSHIM_ERR_STREAM,
              "copy stream -1 is not a CUDA stream");
  CHECK_FAILS(dlpackshim_copy(NULL, &d0.t, 1), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  DLTensor vk = h.t;
  vk.device.device_type = kDLVulkan;
  CHECK_FAILS(dlpackshim_copy(&h.t, &vk, 1), DLPACKSHIM_ERR_UNSUPPORTED,
              "cannot read memory of device type 7");
  CHECK_FAILS(dlpackshim_copy(&vk, &d0.t, 1), DLPACKSHIM_ERR_UNSUPPORTED,
              "cannot write memory of device type 7");
  /* A pointer of device 1 claimed as device 0: the library pushes ctx0 and
   * the fake refuses device-1 memory there; the error comes back, the
   * context stack is clean. */
  DLTensor lie = d1.t;
  lie.device.device_id = 0;
  CHECK_FAILS(dlpackshim_copy(&h.t, &lie, 1), DLPACKSHIM_ERR_DEVICE,
              "cuMemcpyDtoHAsync_v2 failed: CUDA_ERROR_INVALID_VALUE");
  CHECK_HAS(fcu.log_text(), "memory of another device than the current one");
  CHECK_EQ(fcu.ctx_depth(), 0);
  /* Injected failures in the middle of a copy. */
  layout p = L2(4, 3, 5, 1, 0);
  buffer dp;
  make_buffer(&dp, &p, f32, 4, kDLCUDA, 0, 5, &fcu);
  fcu.fail_next("cuMemcpy2DAsync_v2", 700);
  CHECK_FAILS(dlpackshim_copy(&h.t, &dp.t, 1), DLPACKSHIM_ERR_DEVICE,
              "cuMemcpy2DAsync_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access "
              "was encountered (error 700)");
  CHECK_EQ(fcu.ctx_depth(), 0);
  fcu.fail_next("cuStreamSynchronize", 700);
  CHECK_FAILS(dlpackshim_copy(&h.t, &dp.t, 1), DLPACKSHIM_ERR_DEVICE,
              "cuStreamSynchronize failed");
  CHECK_EQ(fcu.ctx_depth(), 0);
  fcu.fail_next("cuCtxPopCurrent_v2", 201);
  CHECK_FAILS(dlpackshim_copy(&h.t, &dp.t, 1), DLPACKSHIM_ERR_DEVICE,
              "cuCtxPopCurrent_v2 failed");
  /* The pop really failed: pop what the fake left on the stack. */
  {
    typedef int (*pop_fn)(void **);
    pop_fn pop = (pop_fn)dlsym(fcu.handle, "cuCtxPopCurrent_v2");
    void *ctx = NULL;
    CHECK_EQ(pop(&ctx), 0);
    CHECK_EQ(fcu.ctx_depth(), 0);
  }
  /* A staged copy failing halfway frees its buffer (valgrind/ASan watch). */
  layout t = L2(3, 4, 1, 3, 0);
  buffer dt, ht;
  make_buffer(&dt, &t, f32, 4, kDLCUDA, 0, 6, &fcu);
  make_buffer(&ht, &m, f32, 4, kDLCPU, 0, 7, &fcu);
  ht.t.shape = dt.t.shape;
  fcu.fail_next("cuMemcpyDtoHAsync_v2", 700);
  CHECK_FAILS(dlpackshim_copy(&ht.t, &dt.t, 1), DLPACKSHIM_ERR_DEVICE,
              "cuMemcpyDtoHAsync_v2 failed");
  CHECK_EQ(fcu.ctx_depth(), 0);
  free_buffer(&d0, &fcu);
  free_buffer(&d1, &fcu);
  free_buffer(&h, &fcu);
  free_buffer(&h2, &fcu);
  free_buffer(&dp, &fcu);
  free_buffer(&dt, &fcu);
  free_buffer(&ht, &fcu);
}

/* Many random layouts (strided, offset, negative, broadcast, transposed)
 * in every direction, each checked byte for byte against dlpackshim_copy. */
static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void random_layout(layout *l, const int64_t *shape, int ndim, int allow_zero_stride) {
  l->ndim = ndim;
  l->extra = (int64_t)(rng() % 3);
  int perm[5] = {0, 1, 2, 3, 4};
  for (int i = ndim - 1; i > 0; i--) { /* a random dim order in memory */
    int j = (int)(rng() % (uint64_t)(i + 1)), tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  if (rng() % 2) /* half the time keep C order */
    for (int i = 0; i < 5; i++) perm[i] = i;
  int64_t stride = 1;
  for (int q = ndim - 1; q >= 0; q--) {
    int i = perm[q];
    l->shape[i] = shape[i];
    int64_t step = 1 + (int64_t)(rng() % 3 == 0 ? rng() % 3 : 0); /* gaps now and then */
    int64_t s = stride * step;
    if (rng() % 5 == 0) s = -s;
    if (allow_zero_stride && rng() % 9 == 0) s = 0;
    l->strides[i] = s;
    stride *= step * (shape[i] > 0 ? shape[i] : 1) + (int64_t)(rng() % 2);
  }
}

static void test_random_copies(fake_api *f, int32_t gpu, const char *name, int rounds) {
  int failures = 0, linear = 0, pitched2 = 0, pitched3 = 0;
  const int cuda = gpu == kDLCUDA;
  for (int round = 0; round < rounds; round++) {
    int ndim = 1 + (int)(rng() % 4);
    int64_t shape[5];
    for (int i = 0; i < ndim; i++) shape[i] = (int64_t)(rng() % 5) + (rng() % 20 == 0 ? -1 : 0) + 1;
    int dir = (int)(rng() % 3); /* 0 d2h, 1 h2d, 2 d2d */
    layout sl, dl;
    random_layout(&sl, shape, ndim, dir != 1);
    random_layout(&dl, shape, ndim, 0);
    int32_t st = dir == 1 ? kDLCPU : gpu, dt = dir == 0 ? kDLCPU : gpu;
    int32_t dev = (int32_t)(rng() % 2);
    DLDataType dtypes[3] = {{kDLFloat, 32, 1}, {kDLUInt, 8, 1}, {kDLFloat, 64, 1}};
    DLDataType dtype = dtypes[rng() % 3];
    char what[64];
    snprintf(what, sizeof what, "%s random #%d", name, round);
    int ok = copy_case(what, f, &sl, st, dev, &dl, dt, dev, dtype, cuda ? 1 : 0);
    linear += cuda ? f->calls("cuMemcpyDtoHAsync_v2") + f->calls("cuMemcpyHtoDAsync_v2") +
                         f->calls("cuMemcpyDtoDAsync_v2")
                   : f->calls("hipMemcpyAsync");
    pitched2 += f->calls(cuda ? "cuMemcpy2DAsync_v2" : "hipMemcpy2DAsync");
    pitched3 += f->calls(cuda ? "cuMemcpy3DAsync_v2" : "hipMemcpy3DAsync");
    if (!ok) {
      failures++;
      fprintf(stderr, "  dir %d, dtype bits %d, shape", dir, dtype.bits);
      for (int i = 0; i < ndim; i++) fprintf(stderr, " %" PRId64, shape[i]);
      fprintf(stderr, ", src strides");
      for (int i = 0; i < ndim; i++) fprintf(stderr, " %" PRId64, sl.strides[i]);
      fprintf(stderr, ", dst strides");
      for (int i = 0; i < ndim; i++) fprintf(stderr, " %" PRId64, dl.strides[i]);
      fprintf(stderr, "\n");
    }
  }
  CHECK_EQ(failures, 0);
  /* The sweep went down every kind of transfer. */
  CHECK(linear > 0);
  CHECK(pitched2 > 0);
  CHECK(pitched3 > 0);
  printf("  %s random copies: %d linear, %d 2-D, %d 3-D transfers\n", name, linear, pitched2,
         pitched3);
  if (f == &fcu) CHECK_EQ(fcu.ctx_depth(), 0);
}

/* Copies the host bytes `bytes` into, or out of (to_host), n bytes of GPU memory. */
static int bytes_copy(int32_t gpu, void *dev, void *bytes, int64_t n, int to_host) {
  int64_t shape[1] = {n};
  DLTensor h = {bytes, {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, shape, NULL, 0};
  DLTensor d = {dev, {gpu, 0}, 1, {kDLUInt, 8, 1}, shape, NULL, 0};
  return to_host ? dlpackshim_copy(&h, &d, 0) : dlpackshim_copy(&d, &h, 0);
}

/* Views of one allocation that overlap, as the host copy already handles them
 * (test_copy.c): every piece queued on the stream would otherwise read bytes
 * an earlier one wrote. Packed sub-byte elements that end inside a byte leave
 * the rest of it alone. An extent-1 dim's stride is never multiplied (UBSan). */
static void test_overlaps_and_partial_bytes(int32_t gpu) {
  void *dev = NULL;
  uint8_t init[8] = {0, 1, 2, 3, 4, 5, 6, 7}, out[8];
  CHECK_OK(dlpackshim_gpu_alloc(gpu, 0, 16, &dev));
  CHECK_OK(bytes_copy(gpu, dev, init, 8, 0));
  /* src: 2x3 row-major at byte 0; dst: the same shape column-major at byte 2. */
  int64_t shape[2] = {2, 3}, rows[2] = {3, 1}, cols[2] = {1, 2};
  DLTensor src = {dev, {gpu, 0}, 2, {kDLUInt, 8, 1}, shape, rows, 0};
  DLTensor dst = {dev, {gpu, 0}, 2, {kDLUInt, 8, 1}, shape, cols, 2};
  CHECK_OK(dlpackshim_copy(&dst, &src, 0));
  CHECK_OK(bytes_copy(gpu, dev, out, 8, 1));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) CHECK_EQ(out[2 + i + 2 * j], i * 3 + j);
  /* A shift by one element, forwards and backwards. */
  int64_t five[1] = {5};
  DLTensor a = {dev, {gpu, 0}, 1, {kDLUInt, 8, 1}, five, NULL, 0}, b = a;
  b.byte_offset = 1;
  CHECK_OK(bytes_copy(gpu, dev, init, 8, 0));
  CHECK_OK(dlpackshim_copy(&b, &a, 0));
  CHECK_OK(bytes_copy(gpu, dev, out, 8, 1));
  CHECK(memcmp(out, (uint8_t[]){0, 0, 1, 2, 3, 4, 6, 7}, 8) == 0);
  CHECK_OK(dlpackshim_copy(&a, &b, 0));
  CHECK_OK(bytes_copy(gpu, dev, out, 8, 1));
  CHECK(memcmp(out, (uint8_t[]){0, 1, 2, 3, 4, 4, 6, 7}, 8) == 0);

  /* Three int4 elements into the first three of four: the fourth (high
   * nibble of byte 1) stays, host to GPU, GPU to host and on the GPU. */
  uint8_t whole[2] = {0xAB, 0xCD}, three[2] = {0x11, 0x01};
  int64_t n3[1] = {3};
  DLTensor p_dev = {dev, {gpu, 0}, 1, {kDLInt, 4, 1}, n3, NULL, 0};
  DLTensor p_host = {three, {kDLCPU, 0}, 1, {kDLInt, 4, 1}, n3, NULL, 0};
  CHECK_OK(bytes_copy(gpu, dev, whole, 2, 0));
  CHECK_OK(dlpackshim_copy(&p_dev, &p_host, 0));
  CHECK_OK(bytes_copy(gpu, dev, out, 2, 1));
  CHECK(out[0] == 0x11 && out[1] == 0xC1);
  p_host.data = whole;
  CHECK_OK(bytes_copy(gpu, dev, three, 2, 0));
  CHECK_OK(dlpackshim_copy(&p_host, &p_dev, 0));
  CHECK(whole[0] == 0x11 && whole[1] == 0xC1);
  DLTensor p_dev2 = p_dev;
  p_dev2.byte_offset = 8;
  CHECK_OK(bytes_copy(gpu, (char *)dev + 8, (uint8_t[]){0xAB, 0xCD}, 2, 0));
  CHECK_OK(dlpackshim_copy(&p_dev2, &p_dev, 0));
  CHECK_OK(bytes_copy(gpu, (char *)dev + 8, out, 2, 1));
  CHECK(out[0] == 0x11 && out[1] == 0xC1);

  /* Shape (1, 2) float32 with a stride of INT64_MAX on the extent-1 dim. */
  float f[2] = {1.5f, 2.5f}, g[2] = {0, 0};
  int64_t s12[2] = {1, 2}, huge[2] = {INT64_MAX, 1};
  DLTensor fd = {dev, {gpu, 0}, 2, {kDLFloat, 32, 1}, s12, huge, 0};
  DLTensor fh = {f, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, s12, NULL, 0};
  CHECK_OK(dlpackshim_copy(&fd, &fh, 0));
  fh.data = g;
  CHECK_OK(dlpackshim_copy(&fh, &fd, 0));
  CHECK(g[0] == 1.5f && g[1] == 2.5f);
  CHECK_OK(dlpackshim_gpu_free(gpu, 0, dev));
}

/* ---- pointers, allocation ------------------------------------------------------ */

static void test_cuda_pointers(void) {
  char *d = fcu.alloc(KIND_DEVICE, 1, 256), *p = fcu.alloc(KIND_PINNED, 0, 64),
       *m = fcu.alloc(KIND_MANAGED, 1, 64);
  char host[16];
  int32_t type = -1, id = -1;
  CHECK_OK(dlpackshim_pointer_device(kDLCUDA, (const void *)(d + 100), &type, &id));
  CHECK_EQ(type, kDLCUDA);
  CHECK_EQ(id, 1);
  CHECK_OK(dlpackshim_pointer_device(kDLCUDA, (const void *)p, &type, &id));
  CHECK_EQ(type, kDLCUDAHost);
  CHECK_EQ(id, 0);
  CHECK_OK(dlpackshim_pointer_device(kDLCUDA, (const void *)(m + 8), &type, &id));
  CHECK_EQ(type, kDLCUDAManaged);
  CHECK_EQ(id, 1); /* the device it was allocated against, as CuPy reports it */
  CHECK_OK(dlpackshim_pointer_device(kDLCUDA, (const void *)host, &type, &id));
  CHECK_EQ(type, kDLCPU);
  CHECK_EQ(id, 0);
  CHECK_OK(dlpackshim_pointer_device(0, (const void *)d, &type, &id));
  CHECK_EQ(type, kDLCUDA);
  CHECK_EQ(id, 1);
  type = id = -7; /* failures leave the out-parameters alone */
  CHECK_FAILS(dlpackshim_pointer_device(kDLCUDA, NULL, &type, &id), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "NULL pointer");
  CHECK_FAILS(dlpackshim_pointer_device(kDLCPU, (const void *)d, &type, &id),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "runtime must be");
  CHECK_FAILS(dlpackshim_pointer_device(kDLCUDA, (const void *)d, NULL, &id),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL output");
  CHECK_FAILS(dlpackshim_pointer_device(kDLCUDA, (const void *)d, &type, NULL),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL output");
  fcu.fail_next("cuPointerGetAttribute", 700);
  CHECK_FAILS(dlpackshim_pointer_device(kDLCUDA, (const void *)d, &type, &id), DLPACKSHIM_ERR_DEVICE,
              "cuPointerGetAttribute(MEMORY_TYPE) failed: CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK_EQ(type, -7);
  CHECK_EQ(id, -7);
  /* No current context on this thread (cuda.h lists CUDA_ERROR_INVALID_CONTEXT,
   * and the fake returns it): asked again inside device 0's primary context. */
  CHECK_EQ(fcu.ctx_depth(), 0);
  fcu.log_clear();
  CHECK_OK(dlpackshim_pointer_device(kDLCUDA, (const void *)d, &type, &id));
  CHECK_EQ(type, kDLCUDA);
  CHECK_EQ(id, 1);
  CHECK_LOG_ORDER(fcu.log_text(), "cuPointerGetAttribute(2, dev1:A",
                  "[no-ctx] -> CUDA_ERROR_INVALID_CONTEXT", "cuCtxPushCurrent_v2(ctx0)",
                  "cuPointerGetAttribute(2, dev1:A", "[ctx0]", "cuCtxPopCurrent_v2");
  CHECK_EQ(fcu.ctx_depth(), 0);
  fcu.free(d);
  fcu.free(p);
  fcu.free(m);

  int live = fcu.live_allocs();
  void *mem = NULL;
  fcu.log_clear();
  CHECK_OK(dlpackshim_gpu_alloc(kDLCUDA, 1, 100, &mem));
  CHECK(mem != NULL);
  CHECK_HAS(fcu.log_text(), "cuMemAlloc_v2(100) = dev1:A");
  CHECK_EQ(fcu.live_allocs(), live + 1);
  CHECK_OK(dlpackshim_pointer_device(kDLCUDA, (const void *)mem, &type, &id));
  CHECK_EQ(type, kDLCUDA);
  CHECK_EQ(id, 1);
  /* Work queued on the memory, then freed: cuMemFree only "may" wait
   * (cuda.h), so the context is synchronised first. */
  {
    int64_t shape[1] = {25};
    DLTensor a = {mem, {kDLCUDA, 1}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
    void *mem2 = NULL;
    CHECK_OK(dlpackshim_gpu_alloc(kDLCUDA, 1, 100, &mem2));
    DLTensor b = a;
    b.data = mem2;
    CHECK_OK(dlpackshim_copy(&b, &a, 1)); /* queued, not waited for */
    fcu.log_clear();
    CHECK_OK(dlpackshim_gpu_free(kDLCUDA, 1, mem2));
    CHECK_LOG_ORDER(fcu.log_text(), "cuCtxPushCurrent_v2(ctx1)", "cuCtxSynchronize() [ctx1]",
                    "cuMemFree_v2(dev1:A");
    CHECK(strstr(fcu.log_text(), "in use by queued work") == NULL);
  }
  CHECK_OK(dlpackshim_gpu_free(kDLCUDA, 1, mem));
  CHECK_HAS(fcu.log_text(), "cuMemFree_v2(dev1:A");
  CHECK_EQ(fcu.live_allocs(), live);
  CHECK_EQ(fcu.ctx_depth(), 0);
  CHECK_OK(dlpackshim_gpu_alloc(kDLCUDA, 0, 0, &mem));
  CHECK(mem == NULL);
  CHECK_OK(dlpackshim_gpu_free(kDLCUDA, 0, NULL));
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLCPU, 0, 8, &mem), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "kDLCUDA or kDLROCM");
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLCUDA, 3, 8, &mem), DLPACKSHIM_ERR_DEVICE,
              "CUDA device 3 does not exist");
  fcu.fail_next("cuMemAlloc_v2", 2);
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLCUDA, 0, 8, &mem), DLPACKSHIM_ERR_DEVICE,
              "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY");
  /* More than any machine has, as a driver says it (the fake's own rounding
   * of the size wrapped, and it wrote past 256 bytes). */
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLCUDA, 0, SIZE_MAX, &mem), DLPACKSHIM_ERR_DEVICE,
              "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_EQ(fcu.ctx_depth(), 0);
}

/* ---- ROCm -------------------------------------------------------------------------- */

static void test_hip(void) {
  int driver = 0, runtime = 0, count = 0;
  CHECK_OK(dlpackshim_gpu_runtime_info(kDLROCM, &driver, &runtime, &count));
  CHECK_EQ(driver, 60242132);
  CHECK_EQ(runtime, 60242132);
  CHECK_EQ(count, 2);
  char name[64];
  CHECK_OK(dlpackshim_gpu_device_name(kDLROCMHost, 1, name, sizeof name));
  CHECK(strcmp(name, "Fake ROCm Device 1") == 0);

  /* Sync on device 1 from a thread whose current device is 0: set, record,
   * wait, restore. */
  void *s1 = fhip.stream_create(1, NULL), *s0 = fhip.stream_create(0, NULL);
  fhip.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLROCM, 1, (int64_t)(intptr_t)s1, 0));
  CHECK_LOG_ORDER(fhip.log_text(), "hipGetDevice() = 0", "hipSetDevice(1)",
                  "hipEventCreateWithFlags(flags=2) = E", "hipEventRecord(E", ", S1) [dev1]",
                  "hipStreamWaitEvent(null, E", "recorded on S1, 0) [dev1]", "hipSetDevice(0)");
  CHECK(!strstr(fhip.log_text(), "Synchronize"));
  CHECK_EQ(fhip.current_device(), 0);
  fhip.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLROCM, 1, (int64_t)(intptr_t)s1, 0));
  CHECK_EQ(fhip.calls("hipEventCreateWithFlags"), 0); /* reused */
  CHECK_EQ(fhip.calls("hipEventRecord"), 1);
  /* Already on the right device: no switching. */
  fhip.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLROCM, 0, 0, (int64_t)(intptr_t)s0));
  CHECK_EQ(fhip.calls("hipSetDevice"), 0);
  CHECK_HAS(fhip.log_text(), "hipStreamWaitEvent(S2, E");
  /* Failures: the driver's words, the device restored. */
  fhip.fail_next("hipEventRecord", 1);
  CHECK_FAILS(dlpackshim_stream_wait(kDLROCM, 1, (int64_t)(intptr_t)s1, 0), DLPACKSHIM_ERR_DEVICE,
              "ROCm: hipEventRecord failed: hipErrorInvalidValue: invalid argument (error 1)");
  CHECK_EQ(fhip.current_device(), 0);
  CHECK_EQ(fhip.calls("hipEventDestroy"), 1);
  fhip.fail_next("hipSetDevice", 101);
  CHECK_FAILS(dlpackshim_stream_wait(kDLROCM, 1, (int64_t)(intptr_t)s1, 0), DLPACKSHIM_ERR_DEVICE,
              "hipSetDevice failed: hipErrorInvalidDevice");
  CHECK_FAILS(dlpackshim_stream_wait(kDLROCM, 2, 0, 0x5000), DLPACKSHIM_ERR_DEVICE,
              "ROCm device 2 does not exist");
  fhip.log_clear();
  CHECK_OK(dlpackshim_stream_synchronize(kDLROCM, 1, (int64_t)(intptr_t)s1));
  CHECK_HAS(fhip.log_text(), "hipStreamSynchronize(S1) [dev1]");
  CHECK_EQ(fhip.current_device(), 0);

  /* Copies: linear, 2-D, 3-D, on device 1. */
  layout a = L1(10, 1, 3), b = L1(10, 1, 0);
  CHECK(copy_case("hip d2h contiguous", &fhip, &a, kDLROCM, 1, &b, kDLCPU, 0, f32, 0));
  CHECK_LOG_ORDER(fhip.log_text(), "hipSetDevice(1)", "hipMemcpyAsync(dst=host, src=dev1:A",
                  "+12, 40, D2H, null) [dev1]", "hipStreamSynchronize(null) [dev1]",
                  "hipSetDevice(0)");
  a = L2(4, 3, 5, 1, 2);
  b = L2(4, 3, 3, 1, 0);
  CHECK(copy_case("hip h2d 2-D", &fhip, &b, kDLCPU, 0, &a, kDLROCM, 0, f32,
                  (int64_t)(intptr_t)s0));
  CHECK_HAS(fhip.log_text(), "pitch 20, src=host pitch 12, 12x4, H2D, S2) [dev0]");
  a = L3(2, 3, 4, 30, 6, 1, 0);
  b = L3(2, 3, 4, 12, 4, 1, 0);
  CHECK(copy_case("hip d2h 3-D", &fhip, &a, kDLROCM, 0, &b, kDLCPU, 0, f32, 0));
  CHECK_HAS(fhip.log_text(), "hipMemcpy3DAsync(dst=host pitch 16 rows 3, src=dev0:A");
  CHECK_HAS(fhip.log_text(), "pitch 24 rows 5, 16x3x2, D2H, null) [dev0]");
  CHECK(copy_case("hip d2d 3-D", &fhip, &a, kDLROCM, 0, &a, kDLROCM, 0, f32, 0));
  CHECK_HAS(fhip.log_text(), "D2D");
  CHECK_EQ(fhip.calls("hipStreamSynchronize"), 0);
  CHECK_FAILS(dlpackshim_copy(&(DLTensor){0}, &(DLTensor){0}, 1),
              DLPACKSHIM_ERR_INVALID_TENSOR, "");
  {
    buffer d, h;
    make_buffer(&d, &a, f32, 4, kDLROCM, 0, 1, &fhip);
    make_buffer(&h, &b, f32, 4, kDLCPU, 0, 1, &fhip);
    CHECK_FAILS(dlpackshim_copy(&h.t, &d.t, 1), DLPACKSHIM_ERR_STREAM,
                "copy stream 1 is not a ROCm stream");
    fhip.fail_next("hipMemcpy3DAsync", 1);
    CHECK_FAILS(dlpackshim_copy(&h.t, &d.t, 0), DLPACKSHIM_ERR_DEVICE,
                "hipMemcpy3DAsync failed: hipErrorInvalidValue");
    free_buffer(&d, &fhip);
    free_buffer(&h, &fhip);
  }

  /* Pointers (HIP 6 numbering here; HIP 5 in a child). */
  char *d = fhip.alloc(KIND_DEVICE, 1, 64), *p = fhip.alloc(KIND_PINNED, 0, 64),
       *m = fhip.alloc(KIND_MANAGED, 0, 64), host[8];
  int32_t type = -1, id = -1;
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)(d + 5), &type, &id));
  CHECK_EQ(type, kDLROCM);
  CHECK_EQ(id, 1);
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)p, &type, &id));
  CHECK_EQ(type, kDLROCMHost);
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)m, &type, &id));
  CHECK_EQ(type, kDLROCM);
  CHECK_EQ(id, 0);
  CHECK_OK(dlpackshim_pointer_device(kDLROCM, (const void *)host, &type, &id));
  CHECK_EQ(type, kDLCPU);
  /* "Any": CUDA does not know the HIP pointer, ROCm does. */
  CHECK_OK(dlpackshim_pointer_device(0, (const void *)d, &type, &id));
  CHECK_EQ(type, kDLROCM);
  CHECK_EQ(id, 1);
  CHECK_OK(dlpackshim_pointer_device(0, (const void *)host, &type, &id));
  CHECK_EQ(type, kDLCPU);
  fhip.free(d);
  fhip.free(p);
  fhip.free(m);

  void *mem = NULL;
  fhip.log_clear();
  CHECK_OK(dlpackshim_gpu_alloc(kDLROCM, 1, 32, &mem));
  CHECK_HAS(fhip.log_text(), "hipMalloc(32) = dev1:A");
  CHECK_OK(dlpackshim_gpu_free(kDLROCM, 1, mem));
  CHECK_HAS(fhip.log_text(), "hipFree(dev1:A");
  CHECK_EQ(fhip.current_device(), 0);
  fhip.object_free(s0);
  fhip.object_free(s1);
}


/* ---- issue 14: contexts, several GPUs, pitches ------------------------------------- */

static void *nocontext_thread(void *arg) {
  int32_t *out = arg;
  /* A fresh thread has no current context at all. */
  out[2] = dlpackshim_pointer_device(kDLCUDA, *(void **)(out + 4), &out[0],
                                     &out[1]);
  return NULL;
}

static void test_cuda_contexts(void) {
  void (*ctx_reset)(int, void *) = (void (*)(int, void *))need_sym(fcu.handle, "fake_ctx_reset");
  int (*ctx_device)(void) = (int (*)(void))need_sym(fcu.handle, "fake_current_ctx_device");

  /* Pointer query from a worker thread without a context. */
  void *d = fcu.alloc(KIND_DEVICE, 1, 64);
  int32_t out[6] = {-1, -1, -1, 0};
  memcpy(out + 4, &d, sizeof d);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, nocontext_thread, out) == 0);
  REQUIRE(pthread_join(th, NULL) == 0);
  CHECK_EQ(out[2], 0);
  CHECK_EQ(out[0], kDLCUDA);
  CHECK_EQ(out[1], 1);
  fcu.free(d);

  /* A pooled event of a context destroyed and made again at the same
   * address: its handle is dead; the pool is flushed and one retry made. */
  void *ctx = fcu.ctx_create(0);
  void *s = fcu.stream_create(0, ctx);
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, (int64_t)(intptr_t)s, 1)); /* pools an event */
  ctx_reset(0, ctx);
  void *s2 = fcu.stream_create(0, ctx);
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, (int64_t)(intptr_t)s2, 1));
  CHECK_LOG_ORDER(fcu.log_text(), "cuEventRecord(E", "-> CUDA_ERROR_INVALID_HANDLE (event of a destroyed context)",
                  "cuEventCreate(flags=2) = E", "cuEventRecord(E", "cuStreamWaitEvent(legacy, E");
  CHECK_EQ(fcu.ctx_depth(), 0);
  /* The primary context reset (cudaDeviceReset in another library). */
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 1, 1, 2));
  ctx_reset(1, NULL);
  fcu.log_clear();
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 1, 1, 2));
  CHECK_LOG_ORDER(fcu.log_text(), "-> CUDA_ERROR_INVALID_HANDLE", "cuEventCreate(flags=2) = E",
                  "cuStreamWaitEvent(per-thread, E");
  /* A new event that fails is reported, not retried. */
  void *ctx2 = fcu.ctx_create(1);
  void *s3 = fcu.stream_create(1, ctx2);
  fcu.fail_next("cuEventRecord", 400);
  fcu.log_clear();
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 1, (int64_t)(intptr_t)s3, 2), DLPACKSHIM_ERR_DEVICE,
              "cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE");
  CHECK_EQ(fcu.calls("cuEventRecord"), 1);
  CHECK_EQ(fcu.ctx_depth(), 0);
  fcu.object_free(s3);
  fcu.object_free(ctx2);
  fcu.object_free(s);
  fcu.object_free(s2);
  fcu.object_free(ctx); /* kept until here: ctx2 must not reuse its address */

  /* HIP: hipDeviceReset (in another library) kills the pooled events of the device. */
  {
    void (*reset)(int) = (void (*)(int))need_sym(fhip.handle, "fake_device_reset");
    void *hs = fhip.stream_create(1, NULL);
    CHECK_OK(dlpackshim_stream_wait(kDLROCM, 1, 0, (int64_t)(intptr_t)hs)); /* pools an event */
    reset(1);
    fhip.log_clear();
    CHECK_OK(dlpackshim_stream_wait(kDLROCM, 1, 0, (int64_t)(intptr_t)hs));
    CHECK_LOG_ORDER(fhip.log_text(), "hipEventRecord(E",
                    "-> hipErrorInvalidHandle (event from before hipDeviceReset)",
                    "hipEventCreateWithFlags(flags=2) = E", "hipEventRecord(E",
                    "hipStreamWaitEvent(S");
    CHECK_EQ(fhip.current_device(), 0);
    fhip.object_free(hs);
  }

  /* Making a device current around a producer call (CuPy does it; PyTorch
   * refuses to export from another device index). */
  int64_t restore = -5;
  CHECK_EQ(ctx_device(), -1);
  CHECK_OK(dlpackshim_gpu_set_device(kDLCUDA, 1, &restore));
  CHECK_EQ(ctx_device(), 1);
  CHECK_OK(dlpackshim_gpu_restore_device(kDLCUDA, restore));
  CHECK_EQ(ctx_device(), -1);
  CHECK_EQ(fcu.ctx_depth(), 0);
  CHECK_FAILS(dlpackshim_gpu_set_device(kDLCUDA, 2, &restore), DLPACKSHIM_ERR_DEVICE,
              "does not exist");
  CHECK_FAILS(dlpackshim_gpu_set_device(kDLCPU, 0, &restore), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "kDLCUDA or kDLROCM");
  CHECK_OK(dlpackshim_gpu_set_device(kDLROCM, 1, &restore));
  CHECK_EQ(fhip.current_device(), 1);
  CHECK_EQ(restore, 0);
  CHECK_OK(dlpackshim_gpu_restore_device(kDLROCM, restore));
  CHECK_EQ(fhip.current_device(), 0);
  CHECK_OK(dlpackshim_gpu_set_device(kDLROCM, 0, &restore)); /* already current */
  CHECK_EQ(restore, -1);
  CHECK_OK(dlpackshim_gpu_restore_device(kDLROCM, restore));
  CHECK_EQ(fhip.current_device(), 0);
  /* A value set_device never gives is refused: CUDA's popped the caller's
   * own context (any value >= 0 meant "pop one"), ROCm's above INT32_MAX
   * did nothing and returned 0. */
  CHECK_OK(dlpackshim_gpu_set_device(kDLCUDA, 1, &restore)); /* the caller's own, say */
  CHECK_FAILS(dlpackshim_gpu_restore_device(kDLCUDA, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "0 is no value gpu_set_device gives for CUDA");
  CHECK_FAILS(dlpackshim_gpu_restore_device(kDLCUDA, 777), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "no value");
  CHECK_FAILS(dlpackshim_gpu_restore_device(kDLCUDA, -2), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "no value");
  CHECK_EQ(fcu.ctx_depth(), 1);
  CHECK_OK(dlpackshim_gpu_restore_device(kDLCUDA, restore));
  CHECK_EQ(fcu.ctx_depth(), 0);
  CHECK_FAILS(dlpackshim_gpu_restore_device(kDLROCM, (int64_t)INT32_MAX + 1),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "for ROCm");
  CHECK_FAILS(dlpackshim_gpu_restore_device(kDLROCM, -2), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "no value");
  CHECK_EQ(fhip.current_device(), 0);
}

/* Issue 14, case 5: pitched copies as the drivers document them. */
static void test_pitch_rules(void) {
  /* CUDA, device to device with a pitch not from cuMemAllocPitch: the
   * driver refuses the 2-D copy; the rows go one call each. */
  int64_t shape[2] = {4, 8}, sstr[2] = {20, 1}, dstr[2] = {8, 1};
  char *sp = fcu.alloc(KIND_DEVICE, 0, 4 * 20 * 4), *dp = fcu.alloc(KIND_DEVICE, 0, 4 * 8 * 4);
  char *back = fcu.backing(sp);
  for (int i = 0; i < 4 * 20 * 4; i++) back[i] = (char)i;
  DLTensor src = {sp, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, shape, sstr, 0};
  DLTensor dst = {dp, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, shape, dstr, 0};
  fcu.log_clear();
  CHECK_OK(dlpackshim_copy(&dst, &src, 1));
  CHECK_LOG_ORDER(fcu.log_text(), "cuMemcpy2DAsync_v2(src=? pitch 80, dst=? pitch 32, 32x4",
                  "-> CUDA_ERROR_INVALID_VALUE (intra-device copy with a pitch not from "
                  "cuMemAllocPitch)",
                  "cuMemcpyDtoDAsync_v2(dst=dev0:A", "cuMemcpyDtoDAsync_v2(dst=dev0:A");
  CHECK_EQ(fcu.calls("cuMemcpyDtoDAsync_v2"), 4);
  char *dback = fcu.backing(dp);
  int same = 1;
  for (int r = 0; r < 4; r++)
    if (memcmp(dback + r * 32, back + r * 80, 32) != 0) same = 0;
  CHECK(same);
  /* Pitches cuMemAllocPitch would give: one 2-D call. */
  int64_t sstr2[2] = {128, 1}, dstr2[2] = {256, 1};
  char *sp2 = fcu.alloc(KIND_DEVICE, 0, 4 * 512), *dp2 = fcu.alloc(KIND_DEVICE, 0, 4 * 1024);
  DLTensor src2 = {sp2, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, shape, sstr2, 0};
  DLTensor dst2 = {dp2, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, shape, dstr2, 0};
  fcu.log_clear();
  CHECK_OK(dlpackshim_copy(&dst2, &src2, 1));
  CHECK_EQ(fcu.calls("cuMemcpy2DAsync_v2"), 1);
  CHECK_EQ(fcu.calls("cuMemcpyDtoDAsync_v2"), 0);
  CHECK(strstr(fcu.log_text(), "->") == NULL);
  fcu.free(sp);
  fcu.free(dp);
  fcu.free(sp2);
  fcu.free(dp2);

  /* A host row pitch of exactly INT32_MAX bytes: CUDA takes it (at most
   * CU_DEVICE_ATTRIBUTE_MAX_PITCH), HIP refuses it, so ROCm copies row by
   * row. The host buffer is reserved, not touched beyond the two rows. */
  size_t span = (size_t)INT32_MAX + 1024;
  char *huge = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
  if (huge == MAP_FAILED) {
    printf("  (no address space for the INT32_MAX pitch case: skipped)\n");
    return;
  }
  memset(huge, 7, 1024);
  memset(huge + INT32_MAX, 9, 1024);
  int64_t hshape[2] = {2, 1024}, hstr[2] = {INT32_MAX, 1}, cstr[2] = {1024, 1};
  DLTensor host = {huge, {kDLCPU, 0}, 2, {kDLUInt, 8, 1}, hshape, hstr, 0};
  for (int which = 0; which < 2; which++) {
    fake_api *f = which ? &fhip : &fcu;
    int32_t type = which ? kDLROCM : kDLCUDA;
    char *g = f->alloc(KIND_DEVICE, 0, 2048);
    DLTensor gpu = {g, {type, 0}, 2, {kDLUInt, 8, 1}, hshape, cstr, 0};
    f->log_clear();
    CHECK_OK(dlpackshim_copy(&gpu, &host, which ? 0 : 1));
    char *gb = f->backing(g);
    CHECK(gb[0] == 7 && gb[1023] == 7 && gb[1024] == 9 && gb[2047] == 9);
    if (which) {
      CHECK_EQ(f->calls("hipMemcpy2DAsync"), 0);
      CHECK_EQ(f->calls("hipMemcpyAsync"), 2);
    } else {
      CHECK_HAS(f->log_text(), "pitch 2147483647");
      CHECK_EQ(f->calls("cuMemcpy2DAsync_v2"), 1);
    }
    CHECK(strstr(f->log_text(), "->") == NULL);
    f->free(g);
  }
  munmap(huge, span);
}

/* ---- out-parameters ------------------------------------------------------------ */

/* The header's promise (issue 31, item 3): a failing call leaves its
 * out-parameters as they were, whether it fails on its arguments, on a
 * missing device or in the driver; dlpackshim_gpu_device_name's buf is the
 * one documented exception: it then holds "". */
/* What hostile C callers found (issue 30's outside attacks). */
static void test_hostile_callers(void) {
  /* A device-to-host copy whose byte span is above INT64_MAX (lo = -2^62,
   * hi ~ 2^62, both valid): its size was computed as hi - lo in int64
   * (undefined behaviour, then "staging -9223372036589055808 bytes"). */
  enum { ND = 14 };
  int64_t shape[ND], st[ND], s = 1000;
  for (int i = 0; i < ND; i++) shape[i] = 2;
  st[0] = -(INT64_C(1) << 62);
  st[1] = (INT64_C(1) << 62) - 1;
  for (int i = ND - 1; i >= 2; i--, s *= 3) st[i] = s;
  DLTensor src = {0}, dst;
  src.data = fcu.alloc(KIND_DEVICE, 0, 4096);
  src.device = (DLDevice){kDLCUDA, 0};
  src.ndim = ND;
  src.shape = shape;
  src.strides = st;
  src.dtype = (DLDataType){kDLUInt, 8, 1};
  static unsigned char out[1 << ND];
  dst = src;
  dst.data = out;
  dst.device = (DLDevice){kDLCPU, 0};
  dst.strides = NULL;
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 1), DLPACKSHIM_ERR_NO_MEMORY,
              "out of memory staging 9223372037120495808 bytes"); /* 2^63 + 265720000 */
  CHECK_EQ(fcu.ctx_depth(), 0);
  CHECK_EQ(fcu.free(src.data), 0);

  /* 0 bytes on a device that does not exist: refused, as 1 byte is. */
  void *p = (void *)1;
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLCUDA, 7, 0, &p), DLPACKSHIM_ERR_DEVICE,
              "CUDA device 7 does not exist");
  CHECK(p == (void *)1);
  int retains = fcu.calls("cuDevicePrimaryCtxRetain"), pushes = fcu.calls("cuCtxPushCurrent_v2");
  CHECK_OK(dlpackshim_gpu_alloc(kDLCUDA, 1, 0, &p));
  CHECK(p == NULL);
  /* ... and no context is made for it (a real GPU's costs hundreds of MiB) */
  CHECK_EQ(fcu.calls("cuDevicePrimaryCtxRetain"), retains);
  CHECK_EQ(fcu.calls("cuCtxPushCurrent_v2"), pushes);

  /* A context that would not pop is a failure, never a success that leaves
   * it current. */
  int32_t type = -1, id = -1;
  void *mem = fcu.alloc(KIND_DEVICE, 1, 64);
  CHECK_EQ(fcu.ctx_depth(), 0); /* so the query pushes device 0's primary context */
  fcu.fail_next("cuCtxPopCurrent_v2", 201);
  CHECK_FAILS(dlpackshim_pointer_device(kDLCUDA, mem, &type, &id), DLPACKSHIM_ERR_DEVICE,
              "cuCtxPopCurrent_v2 failed");
  CHECK(type == -1 && id == -1);
  CHECK_EQ(fcu.ctx_depth(), 1); /* the driver's failure: pop it here */
  int (*pop)(void **) = (int (*)(void **))need_sym(fcu.handle, "cuCtxPopCurrent_v2");
  void *ctx = NULL;
  CHECK_EQ(pop(&ctx), 0);
  CHECK_OK(dlpackshim_pointer_device(kDLCUDA, mem, &type, &id));
  CHECK_EQ(type, kDLCUDA);
  CHECK_EQ(id, 1);
  CHECK_EQ(fcu.free(mem), 0);

  /* pointer_device asks kDLCUDA, kDLROCM or any: not a family member. */
  CHECK_FAILS(dlpackshim_pointer_device(kDLCUDAHost, out, &type, &id),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "runtime must be 0 (any), kDLCUDA or kDLROCM, not 3");
  CHECK_FAILS(dlpackshim_stream_wait(kDLOpenCL, 0, 0, 4096), DLPACKSHIM_ERR_UNSUPPORTED,
              "dlpackshim cannot synchronise its streams");
}

static void test_failures_leave_outputs_alone(void) {
  const int64_t P = INT64_C(0x5a5a5a5a5a5a5a5a);
  int64_t v = P;
  CHECK_FAILS(dlpackshim_stream_check(kDLCUDA, 1, 0, &v), DLPACKSHIM_ERR_STREAM, "stream 0");
  CHECK_FAILS(dlpackshim_stream_check(kDLROCM, 1, 2, &v), DLPACKSHIM_ERR_STREAM, "ROCm");
  CHECK_FAILS(dlpackshim_stream_check(kDLCPU, 1, 5, &v), DLPACKSHIM_ERR_STREAM, "kDLCPU");
  CHECK_FAILS(dlpackshim_stream_check(kDLVulkan, 1, 5, &v), DLPACKSHIM_ERR_UNSUPPORTED,
              "device type 7");
  CHECK_FAILS(dlpackshim_stream_check(99, 0, 0, &v), DLPACKSHIM_ERR_INVALID_ARGUMENT, "99");
  CHECK_EQ(v, P);

  /* gpu_set_device wrote -1 into restore_out before failing. */
  CHECK_FAILS(dlpackshim_gpu_set_device(kDLCPU, 0, &v), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "kDLCUDA or kDLROCM");
  CHECK_FAILS(dlpackshim_gpu_set_device(kDLCUDA, -1, &v), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "negative");
  CHECK_FAILS(dlpackshim_gpu_set_device(kDLCUDA, 5, &v), DLPACKSHIM_ERR_DEVICE,
              "CUDA device 5 does not exist");
  fcu.fail_next("cuCtxPushCurrent_v2", 201);
  CHECK_FAILS(dlpackshim_gpu_set_device(kDLCUDA, 0, &v), DLPACKSHIM_ERR_DEVICE,
              "cuCtxPushCurrent_v2 failed");
  fhip.fail_next("hipSetDevice", 101);
  CHECK_FAILS(dlpackshim_gpu_set_device(kDLROCM, 1, &v), DLPACKSHIM_ERR_DEVICE,
              "hipSetDevice failed");
  CHECK_EQ(v, P);
  CHECK_EQ(fcu.ctx_depth(), 0);
  CHECK_EQ(fhip.current_device(), 0);

  void *mem = (void *)(uintptr_t)0x5a5a50;
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLCUDAHost, 0, 8, &mem), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "kDLCUDA or kDLROCM");
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLROCM, 2, 8, &mem), DLPACKSHIM_ERR_DEVICE,
              "ROCm device 2 does not exist");
  fcu.fail_next("cuMemAlloc_v2", 2);
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLCUDA, 1, 8, &mem), DLPACKSHIM_ERR_DEVICE, "cuMemAlloc_v2");
  fhip.fail_next("hipMalloc", 2);
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLROCM, 1, 8, &mem), DLPACKSHIM_ERR_DEVICE, "hipMalloc");
  fcu.fail_next("cuCtxPushCurrent_v2", 201);
  CHECK_FAILS(dlpackshim_gpu_alloc(kDLCUDA, 0, 8, &mem), DLPACKSHIM_ERR_DEVICE,
              "cuCtxPushCurrent_v2");
  CHECK(mem == (void *)(uintptr_t)0x5a5a50);

  int driver = -5, runtime = -5, count = -5;
  fcu.fail_next("cuDriverGetVersion", 2);
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLCUDA, &driver, &runtime, &count),
              DLPACKSHIM_ERR_DEVICE, "cuDriverGetVersion");
  fhip.fail_next("hipDriverGetVersion", 2);
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLROCM, &driver, &runtime, &count),
              DLPACKSHIM_ERR_DEVICE, "hipDriverGetVersion");
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLOpenCL, &driver, &runtime, &count),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "no GPU runtime");
  CHECK(driver == -5 && runtime == -5 && count == -5);

  /* Any runtime (0): CUDA does not know the pointer, ROCm fails on it. */
  int32_t type = -7, id = -7;
  char host[8];
  fhip.fail_next("hipPointerGetAttribute", 2);
  CHECK_FAILS(dlpackshim_pointer_device(0, (const void *)host, &type, &id), DLPACKSHIM_ERR_DEVICE,
              "hipPointerGetAttribute(MEMORY_TYPE) failed: hipErrorOutOfMemory");
  CHECK(type == -7 && id == -7);

  /* A driver that fails after writing half a name: buf holds "", never that. */
  char name[64];
  memset(name, 'X', sizeof name);
  fcu.fail_next("cuDeviceGetName", 1);
  CHECK_FAILS(dlpackshim_gpu_device_name(kDLCUDA, 0, name, sizeof name), DLPACKSHIM_ERR_DEVICE,
              "cuDeviceGetName failed");
  CHECK_EQ(name[0], '\0');
  memset(name, 'X', sizeof name);
  CHECK_FAILS(dlpackshim_gpu_device_name(kDLROCM, 7, name, sizeof name), DLPACKSHIM_ERR_DEVICE,
              "ROCm device 7 does not exist");
  CHECK_EQ(name[0], '\0');
  memset(name, 'X', sizeof name);
  CHECK_FAILS(dlpackshim_gpu_device_name(kDLCPU, 0, name, sizeof name),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "no GPU runtime");
  CHECK_EQ(name[0], '\0');
  /* and on success a name cut to len, as before */
  CHECK_OK(dlpackshim_gpu_device_name(kDLCUDA, 1, name, 2));
  CHECK(strcmp(name, "F") == 0);
  CHECK_EQ(fcu.ctx_depth(), 0);
}

/* After fork(): the runtimes the parent used are missing in the child, with
 * why, and the driver (which would refuse every call) is not called. */
static void child_after_fork(void) {
  fcu.log_clear();
  int count = -5;
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLCUDA, NULL, NULL, &count), DLPACKSHIM_ERR_DEVICE,
              "CUDA cannot be used in this process: it was initialised before fork()");
  CHECK_EQ(count, -5);
  CHECK_FAILS(dlpackshim_stream_wait(kDLCUDA, 0, 1, 2), DLPACKSHIM_ERR_DEVICE, "fork()");
  CHECK_FAILS(dlpackshim_gpu_runtime_info(kDLROCM, NULL, NULL, NULL), DLPACKSHIM_ERR_DEVICE,
              "ROCm cannot be used in this process: it was initialised before fork()");
  CHECK_EQ(fcu.calls("cuInit"), 0);
  CHECK(strcmp(fcu.log_text(), "") == 0);
}

int main(void) {
  shared_counts = mmap(NULL, 2 * sizeof(int), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared_counts != MAP_FAILED);
  shared_counts[0] = shared_counts[1] = 0;

  /* Children first: they must load (or fail to load) the runtimes afresh. */
  run_child("cuda_missing", child_cuda_missing);
  run_child("default_names", child_default_names);
  {
    fake_api tmp;
    open_fake(&tmp, "libfakecuda.so", 1); /* only for its path */
    setenv("DLPACKSHIM_LIBCUDA", tmp.path, 1);
    open_fake(&tmp, "libfakehip.so", 0);
    setenv("DLPACKSHIM_LIBHIP", tmp.path, 1);
  }
  run_child("cuinit_fails", child_cuinit_fails);
  run_child("hip5_numbering", child_hip5_numbering);
  run_child("hip_no_device", child_hip_no_device);
  run_child("hip7_last_error", child_hip7_last_error);

  open_fake(&fcu, "libfakecuda.so", 1);
  open_fake(&fhip, "libfakehip.so", 0);
  test_stream_rules();
  test_stream_messages_in_c_words();
  test_cuda_info();
  test_cuda_sync();
  test_cuda_sync_threads();
  test_cuda_copies();
  test_cuda_copy_errors();
  test_random_copies(&fcu, kDLCUDA, "cuda", 600);
  test_cuda_pointers();
  test_hip();
  test_random_copies(&fhip, kDLROCM, "hip", 200);
  test_overlaps_and_partial_bytes(kDLCUDA);
  test_overlaps_and_partial_bytes(kDLROCM);
  test_cuda_contexts();
  test_pitch_rules();
  test_failures_leave_outputs_alone();
  test_hostile_callers();
  run_child("after_fork", child_after_fork);
  CHECK_OK(dlpackshim_stream_wait(kDLCUDA, 0, 1, 2)); /* the parent's runtime still works */
  CHECK_EQ(fcu.live_allocs(), 0);
  CHECK_EQ(fhip.live_allocs(), 0);
  CHECK_EQ(fcu.ctx_depth(), 0);

  check_passed += shared_counts[0];
  check_failed += shared_counts[1];
  munmap(shared_counts, 2 * sizeof(int));
  return check_done("test_gpu");
}
