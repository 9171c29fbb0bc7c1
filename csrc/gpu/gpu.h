/*
 * gpu.h - what csrc/gpu/ shares: the interface of a GPU back-end (cuda.c:
 * the CUDA Driver API; hip.c: the HIP runtime) and the helpers the files
 * that use it (devices.c, streams.c, copy_plan.c, memory.c) have in common.
 * Private to the library.
 *
 * A back-end loads its runtime with dlopen on first use (once, thread-safe,
 * through loader.c), and offers primitives that run inside a "scope":
 * entering it makes the right device current on this thread (CUDA: pushes a
 * context; HIP: sets the device), leaving restores what the caller had. The
 * planning (stream rules, copy shapes, staging) is never a back-end's.
 */
#ifndef DLPACKSHIM_GPU_H
#define DLPACKSHIM_GPU_H

#include <pthread.h>

#include "internal.h"

/* One pitched block copy: Depth slices of Height rows of WidthInBytes bytes.
 * Height == Depth == 1 is a plain linear copy. */
typedef struct shim_gpu_block {
  const char *src;
  char *dst;
  int src_on_device; /* 1: GPU memory; 0: host-accessible memory */
  int dst_on_device;
  size_t width;      /* bytes per row */
  size_t height;     /* rows per slice */
  size_t depth;      /* slices */
  size_t src_pitch, dst_pitch; /* bytes from one row to the next (height > 1) */
  size_t src_rows, dst_rows;   /* rows from one slice to the next (depth > 1) */
} shim_gpu_block;

/* A device made current on this thread, with the stream to work on. */
typedef struct shim_gpu_scope {
  int32_t device_id;
  void *stream;  /* the runtime's stream handle */
  void *context; /* CUDA: the context pushed (the stream's own, or the device's primary) */
  int previous_device; /* HIP: the device to restore, or -1 */
} shim_gpu_scope;

typedef struct shim_gpu_ops {
  const char *name; /* "CUDA" or "ROCm", for messages */
  /* The largest row pitch (and rows per slice) a 2-D/3-D copy may be given:
   * CUDA refuses pitches above CU_DEVICE_ATTRIBUTE_MAX_PITCH (2^31 - 1 on
   * every GPU so far); HIP refuses a pitch of INT32_MAX itself. */
  int64_t max_pitch;
  /* Loads the runtime (once); 0 or DLPACKSHIM_ERR_DEVICE with the same
   * message on every call when it is missing. */
  int (*load)(void);
  const char *(*library)(void); /* the path that was loaded (after load) */
  int (*info)(int *driver_version, int *runtime_version, int *device_count);
  int (*device_name)(int32_t device_id, char *buf, size_t len);
  /* stream: the runtime's handle (CUDA: NULL, 0x1 legacy, 0x2 per-thread or a CUstream). */
  int (*enter)(shim_gpu_scope *scope, int32_t device_id, void *stream);
  int (*leave)(shim_gpu_scope *scope);
  /* Make `consumer` wait for the work queued so far on scope->stream: one
   * event from the pool, recorded on the producer stream, waited on by the
   * consumer. Never blocks the host. */
  int (*wait)(shim_gpu_scope *scope, void *consumer);
  int (*copy)(shim_gpu_scope *scope, const shim_gpu_block *block);
  int (*synchronize)(shim_gpu_scope *scope); /* host waits for scope->stream */
  /* 1 and the memory's DLPack device when the runtime knows ptr, 0 when it
   * does not (plain host memory), or a negative status. */
  int (*pointer_device)(const void *ptr, int32_t *device_type, int32_t *device_id);
  int (*alloc)(shim_gpu_scope *scope, size_t nbytes, void **out);
  /* Waits until no queued work can still use the memory, then frees it. */
  int (*free)(shim_gpu_scope *scope, void *ptr);
} shim_gpu_ops;

extern const shim_gpu_ops shim_cuda_ops;
extern const shim_gpu_ops shim_hip_ops;

/* ---- loader.c --------------------------------------------------------- */

/* Reads the override variable `env` (e.g. DLPACKSHIM_LIBCUDA) or walks the
 * default names (newest first): first for a copy already in the process
 * (RTLD_NOLOAD: the runtime PyTorch or CuPy loaded, so that there is never
 * a second one), then dlopen-ing each. On failure writes "tried ..." into
 * `tried`. Returns the handle or NULL; *loaded gets the name that worked. */
void *shim_gpu_dlopen(const char *env, const char *const *names, char *tried, size_t tried_len,
                      const char **loaded);

/* For a back-end's pthread_atfork child handler, registered once its
 * runtime is initialised: a GPU runtime does not survive fork() (in the child
 * every CUDA call fails with CUDA_ERROR_NOT_INITIALIZED, and the contexts,
 * streams and pooled events inherited are not the child's). Marks the runtime
 * missing (*status, *count = 0), with why in `message`, so that the child
 * touches none of it and host-accessible memory is read without a wait: no
 * GPU work of the child can be pending. */
void shim_gpu_unusable_after_fork(const char *runtime, int *status, char *message,
                                  size_t message_len, int *count);

/* ---- devices.c -------------------------------------------------------- */

/* The back-end whose streams order work on memory of device_type, or NULL. */
const shim_gpu_ops *shim_gpu_family(int32_t device_type);

/* 1 for memory only the GPU can read (a family's, not host-accessible). */
int shim_gpu_on_device(int32_t device_type);

/* Fails (_INVALID_ARGUMENT) for a negative device id. */
int shim_gpu_check_device_id(int32_t device_id);

/* 0 when dev is one of the `count` devices runtime ("CUDA", "ROCm") found,
 * else _DEVICE saying so. */
int shim_gpu_check_ordinal(const char *runtime, int32_t dev, int count);

/* The back-end of GPU memory (device_type, device_id), its runtime loaded;
 * `what` names the public caller in errors. */
int shim_gpu_device_ops(const char *what, int32_t device_type, int32_t device_id,
                        const shim_gpu_ops **ops);

/* Leaves a scope and returns rc, or leave's own failure when rc is 0: the
 * first error is the one the caller reads. */
int shim_gpu_leave(const shim_gpu_ops *ops, shim_gpu_scope *scope, int rc);

/* ---- streams.c -------------------------------------------------------- */

/* Fails (_STREAM) unless stream is a handle of ops's runtime: what names
 * the stream's role in the message ("producer", "copy"). */
int shim_gpu_check_handle(const shim_gpu_ops *ops, const char *what, int64_t stream);

/* ---- event_pool.c: reusable events, keyed by their context or device ---- */

typedef struct shim_gpu_event {
  uintptr_t key;               /* what the event belongs to */
  void *event;                 /* the runtime's handle */
  struct shim_gpu_event *next;
} shim_gpu_event;

typedef struct shim_gpu_event_pool {
  pthread_mutex_t lock;
  shim_gpu_event *free; /* under lock */
} shim_gpu_event_pool;

#define SHIM_GPU_EVENT_POOL_INIT {PTHREAD_MUTEX_INITIALIZER, NULL}

/* A pooled event of key, taken out of the pool, or NULL when there is none. */
shim_gpu_event *shim_gpu_event_take(shim_gpu_event_pool *pool, uintptr_t key);
/* Puts a recorded event back for the next wait. */
void shim_gpu_event_give(shim_gpu_event_pool *pool, shim_gpu_event *e);
/* Drops key's events without destroying them: its context or device was
 * destroyed or reset, so the handles are dead (and a new context may reuse
 * the address). */
void shim_gpu_event_flush(shim_gpu_event_pool *pool, uintptr_t key);

#endif /* DLPACKSHIM_GPU_H */
