/*
 * place.c - data put on another device, or copied: what from_dlpack's
 * `device` and `copy` and __dlpack__'s `dl_device` and `copy` ask, in one
 * place for both directions.
 *
 * dlpackshim moves data between a GPU and the host only: host-accessible
 * memory (pinned, managed) is relabelled (kDLCPU, 0) once the GPU work
 * queued on it is done, GPU memory (kDLCUDA, kDLROCM) is copied to the host,
 * and a copy stays on its device (host memory, or new memory of the same
 * GPU, filled on the data's stream). Copies are compact row-major and
 * IS_COPIED; every other flag travels with the data.
 */
#include "binding.h"

#include <stdlib.h>

int64_t shim_data_stream(const shim_pyapi *py, const shim_data *d, int32_t device_type) {
  int64_t s;
  if (d->stream != NULL && d->stream != py->Py_None) {
    s = py->PyLong_AsLongLong(d->stream);
    if (s == -1 && py->PyErr_Occurred() != NULL) py->PyErr_Clear(); /* recorded by us: an int64 */
    return s;
  }
  return dlpackshim_stream_check(device_type, 0, 0, &s) == 0 ? s : -1;
}

/* A Tensor owning m (just built: valid), recording `stream` (borrowed). */
static void *adopt(const shim_pyapi *py, DLManagedTensorVersioned *m, void *stream) {
  uint64_t flags;
  void *holder = shim_holder_take(py, m, 1, 1);
  if (holder == NULL) return NULL;
  shim_holder_tensor(holder, &flags, NULL, NULL);
  return shim_tensor_new(py, holder, flags, stream);
}

/* GPU memory of a copy, freed (after the GPU's work on it) with its tensor. */
typedef struct {
  int32_t device_type, device_id;
  void *ptr;
} gpu_memory;

static void gpu_release(void *owner) {
  gpu_memory *g = (gpu_memory *)owner;
  dlpackshim_gpu_free(g->device_type, g->device_id, g->ptr);
  free(g);
}

/* A compact copy of src (a GPU tensor, flags `flags`) on `where` (the host,
 * or src's GPU), filled by dlpackshim_copy on `stream` (waited for when it
 * lands in host memory), as a Tensor recording `record` (borrowed). */
static void *gpu_copy(const shim_pyapi *py, const DLTensor *src, uint64_t flags, DLDevice where,
                      int64_t stream, void *record) {
  uint64_t out_flags = DLPACKSHIM_FLAG_IS_COPIED | (flags & DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED);
  DLManagedTensorVersioned *m = NULL;
  DLTensor proto = *src;
  int64_t nbytes;
  int st = dlpackshim_tensor_nbytes(src, flags, &nbytes);
  if (st != 0) return shim_py_raise(py, st);
  proto.device = where;
  if (where.device_type == kDLCPU) {
    if ((m = shim_tensor_alloc(&proto, nbytes, out_flags)) == NULL) return shim_py_raise(py, dlpackshim_last_status());
  } else {
    gpu_memory *g = (gpu_memory *)calloc(1, sizeof(*g));
    if (g == NULL) return shim_py_fail(py, DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
    g->device_type = where.device_type;
    g->device_id = where.device_id;
    st = dlpackshim_gpu_alloc(where.device_type, where.device_id, (size_t)(nbytes > 0 ? nbytes : 1), &g->ptr);
    if (st == 0)
      st = dlpackshim_tensor_new(g->ptr, where.device_type, where.device_id, src->ndim, src->shape, NULL,
                                 src->dtype.code, src->dtype.bits, src->dtype.lanes, 0, out_flags, g,
                                 gpu_release, &m);
    if (st != 0) {
      if (g->ptr != NULL) dlpackshim_gpu_free(g->device_type, g->device_id, g->ptr);
      free(g);
      return shim_py_raise(py, st);
    }
  }
  if ((st = dlpackshim_copy(&m->dl_tensor, src, stream)) != 0) {
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", dlpackshim_last_error());
    dlpackshim_tensor_free(m);
    return shim_py_fail(py, st, "%s", msg);
  }
  return adopt(py, m, record);
}

/* The host waits for the GPU work queued on `stream` (nothing for -1, for
 * devices without streams, or with no runtime: then no GPU wrote it). The
 * one place this rule lives: every host read of pinned or managed memory
 * (placement, buffers, tobytes, __array_interface__) comes through here. */
static int host_synchronize(const shim_pyapi *py, DLDevice dev, int64_t stream) {
  int count = 0, st;
  if (stream == -1 || shim_gpu_family(dev.device_type) == NULL ||
      dlpackshim_gpu_runtime_info(dev.device_type, NULL, NULL, &count) != 0 || count == 0)
    return 0;
  st = dlpackshim_stream_synchronize(dev.device_type, dev.device_id, stream);
  return st != 0 ? shim_py_raise_err(py, st) : 0;
}

int shim_host_ready(const shim_pyapi *py, const shim_data *d) {
  DLDevice dev = shim_holder_tensor(d->holder, NULL, NULL, NULL)->device;
  if (dev.device_type == kDLCPU) return 0;
  return host_synchronize(py, dev, shim_data_stream(py, d, dev.device_type));
}

int shim_placeable(DLDevice own, const shim_request *rq) {
  int on_gpu = shim_gpu_on_device(own.device_type), host = shim_host_accessible(own.device_type);
  int there = rq->has_device && (rq->device.device_type != own.device_type ||
                                 rq->device.device_id != own.device_id);
  if (there) {
    if (rq->device.device_type != kDLCPU || rq->device.device_id != 0) return 0;
    return on_gpu ? rq->copy != 0 : host;
  }
  if (rq->copy == 1 && rq->has_device && own.device_type != kDLCPU && !on_gpu)
    return 0; /* a copy on pinned or managed memory's own device would be plain host memory */
  return rq->copy != 1 || host || on_gpu;
}

int shim_place(const shim_pyapi *py, const shim_data *in, const shim_request *rq, int copied,
               const char *what, void **out) {
  const DLTensor *src = shim_holder_tensor(in->holder, NULL, NULL, NULL);
  DLDevice own = src->device, cpu = {kDLCPU, 0};
  int to_host = rq->has_device && (rq->device.device_type != own.device_type ||
                                   rq->device.device_id != own.device_id);
  int host_readable = shim_host_accessible(own.device_type), on_gpu = shim_gpu_on_device(own.device_type);
  int no_sync = rq->has_stream && rq->stream == -1; /* the consumer orders the work itself */
  if (to_host && (rq->device.device_type != kDLCPU || rq->device.device_id != 0 ||
                  !(host_readable || on_gpu))) {
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "%s: cannot place data from (%d, %d) on (%d, %d): dlpackshim moves data only "
                       "between a GPU and the host (kDLCPU, 0)",
                       what, (int)own.device_type, (int)own.device_id, (int)rq->device.device_type,
                       (int)rq->device.device_id);
  }
  if (to_host && on_gpu && rq->copy == 0) {
    /* from_dlpack: ValueError (array API 2024.12); __dlpack__: BufferError. */
    return shim_py_err(py, strcmp(what, "from_dlpack") == 0 ? DLPACKSHIM_ERR_INVALID_ARGUMENT
                                                            : DLPACKSHIM_ERR_COPY_REQUIRED,
                       "%s: copy=False, but placing data from (%d, %d) on (1, 0) needs a copy", what,
                       (int)own.device_type, (int)own.device_id);
  }
  if (!to_host && !(rq->copy == 1 && !copied)) return 0; /* nothing to do */
  if (on_gpu) { /* to the host, or a copy on the same GPU */
    *out = gpu_copy(py, src, in->flags, to_host ? cpu : own, shim_data_stream(py, in, own.device_type),
                    to_host ? NULL : in->stream);
    return *out != NULL ? 1 : -1;
  }
  if (!host_readable)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "%s: cannot copy data on (%d, %d): dlpackshim copies host-accessible memory and "
                       "CUDA/ROCm device memory only",
                       what, (int)own.device_type, (int)own.device_id);
  if (rq->copy == 1 && !copied && !shim_placeable(own, rq)) { /* on its own device */
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "%s: cannot copy data into new (%d, %d) memory: dlpackshim copies "
                       "host-accessible memory into host memory (kDLCPU, 0); ask for that device",
                       what, (int)own.device_type, (int)own.device_id);
  }
  /* Host-readable memory: the host reads it once the GPU is done with it. */
  if (!no_sync && own.device_type != kDLCPU &&
      host_synchronize(py, own, shim_data_stream(py, in, own.device_type)) != 0)
    return -1;
  if (rq->copy == 1 && !copied) {
    DLManagedTensorVersioned *m = NULL;
    uint64_t padded = in->flags & DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED;
    shim_info info;
    void *tstate = NULL;
    int st = shim_inspect(src, padded, &info);
    /* Other threads run while a large copy does (NumPy lets them from 500
     * elements); the caller's reference keeps the holder, so the source. */
    if (st == 0 && info.nbytes >= 65536) tstate = py->PyEval_SaveThread();
    if (st == 0) st = shim_clone_inspected(src, padded, &info, &m);
    if (tstate != NULL) py->PyEval_RestoreThread(tstate);
    if (st != 0) return shim_py_raise_err(py, st);
    *out = adopt(py, m, NULL);
  } else { /* the same bytes, labelled (kDLCPU, 0): a view kept valid by the holder, with
            * in's flags (IS_COPIED only where the caller says nobody else views them)
            * and the DLPack version they came in by (0.0: legacy) */
    DLTensor view = *src;
    uint32_t major, minor;
    void *holder;
    view.device = cpu;
    shim_holder_tensor(in->holder, NULL, &major, &minor);
    holder = shim_holder_view(py, &view, in->flags, in->holder, NULL);
    *out = holder != NULL ? shim_tensor_new(py, holder, in->flags, NULL) : NULL;
    if (*out != NULL) shim_tensor_set_version(*out, major, minor);
  }
  return *out != NULL ? 1 : -1;
}
