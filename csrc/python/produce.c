/*
 * produce.c - a Tensor's data handed out: __dlpack__ (capsules), the C
 * exchange table, the buffer protocol, and dlpackshim_capsule_new.
 *
 * Every export references the Tensor's holder (tensor.c), never the Tensor:
 * closing the Tensor leaves capsules, consumers' arrays and buffer views
 * valid. An export is one block, the managed struct followed by its shape
 * and strides, whose deleter drops the holder (from any thread, with or
 * without the GIL, never once the interpreter is shutting down) and frees
 * the block.
 *
 * Rules implemented (dlpack.h, array API standard "DLPack" section): the
 * capsule names "dltensor_versioned" / "dltensor", whose destructor deletes
 * the tensor only while the capsule is unconsumed; no flags travel through
 * the legacy ABI, so read-only and padded sub-byte data are refused there
 * (NumPy refuses read-only data too), unless it came in by that ABI.
 */
#include "binding.h"

#include <stdlib.h>

/* ---- export blocks -------------------------------------------------------- */

static void export_deleter_v(DLManagedTensorVersioned *self);
static void export_deleter_l(DLManagedTensor *self);

/* Drops the holder an export references (GIL taken; skipped once Python can
 * no longer be entered: the process is ending), then frees the block. */
static void release_export(void *holder, void *block) {
  const shim_pyapi *py = shim_py_alive();
  if (py != NULL) {
    int gil = py->PyGILState_Ensure();
    py->Py_DecRef(holder);
    py->PyGILState_Release(gil);
  }
  free(block);
}

/* They never read their own `deleter` field: a consumer may swap it for a
 * wrapper that calls the original (dlpackshim.testing counts calls so). */
static void export_deleter_v(DLManagedTensorVersioned *self) {
  if (self != NULL) release_export(self->manager_ctx, self);
}

static void export_deleter_l(DLManagedTensor *self) {
  if (self != NULL) release_export(self->manager_ctx, self);
}

/* dst = src with shape and strides copied into dims (the snapshot's strides
 * are explicit: every holder's are). */
static void copy_layout(DLTensor *dst, const DLTensor *src, int64_t *dims) {
  *dst = *src;
  dst->shape = src->ndim > 0 ? dims : NULL;
  dst->strides = src->ndim > 0 ? dims + src->ndim : NULL;
  if (src->ndim > 0) {
    memcpy(dims, src->shape, (size_t)src->ndim * sizeof(int64_t));
    memcpy(dims + src->ndim, src->strides, (size_t)src->ndim * sizeof(int64_t));
  }
}

/* An export of t (a holder's snapshot, or a layout placed from one) that
 * references holder, with a new reference to it; NULL with an exception. */
static void *export_block(const shim_pyapi *py, void *holder, const DLTensor *t, uint64_t flags,
                          int versioned) {
  size_t head = versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor);
  void *block;
  int st;
  if (!versioned && (st = shim_check_flagless(t, flags)) != 0) return shim_py_raise(py, st);
  /* Both struct sizes are multiples of 8: the int64 arrays are aligned. */
  block = malloc(head + 2 * (size_t)t->ndim * sizeof(int64_t));
  if (SHIM_UNLIKELY(block == NULL))
    return shim_py_fail(py, DLPACKSHIM_ERR_NO_MEMORY, "__dlpack__: out of memory");
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)block;
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->manager_ctx = holder;
    m->deleter = export_deleter_v;
    m->flags = flags & SHIM_FLAGS_PUBLIC;
    copy_layout(&m->dl_tensor, t, (int64_t *)(m + 1));
  } else {
    DLManagedTensor *m = (DLManagedTensor *)block;
    m->manager_ctx = holder;
    m->deleter = export_deleter_l;
    copy_layout(&m->dl_tensor, t, (int64_t *)(m + 1));
  }
  py->Py_IncRef(holder);
  return block;
}

static int same_layout(const DLTensor *a, const DLTensor *b) {
  return a->data == b->data && a->byte_offset == b->byte_offset &&
         a->device.device_type == b->device.device_type &&
         a->device.device_id == b->device.device_id && a->ndim == b->ndim &&
         a->dtype.code == b->dtype.code && a->dtype.bits == b->dtype.bits &&
         a->dtype.lanes == b->dtype.lanes && a->ndim >= 0 && a->ndim <= DLPACKSHIM_MAX_NDIM &&
         (a->ndim == 0 || (a->shape != NULL && a->strides != NULL &&
                           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t)) == 0 &&
                           memcmp(a->strides, b->strides, (size_t)a->ndim * sizeof(int64_t)) == 0));
}

void *shim_export_root(void *managed, int versioned) {
  const DLTensor *view;
  void *holder;
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)managed;
    if (m->deleter != export_deleter_v || m->version.major != 1) return NULL;
    holder = m->manager_ctx;
    view = &m->dl_tensor;
  } else {
    DLManagedTensor *m = (DLManagedTensor *)managed;
    if (m->deleter != export_deleter_l) return NULL;
    holder = m->manager_ctx;
    view = &m->dl_tensor;
  }
  /* A view a consumer edited, or one placed elsewhere, is a tensor of its own. */
  return same_layout(view, shim_holder_tensor(holder, NULL, NULL, NULL)) ? holder : NULL;
}

/* ---- capsules ---------------------------------------------------------------- */

/* The context of an export capsule one of our consumers took (take_capsule):
 * the tensor is theirs whatever name a third party gives the capsule later.
 * Only its address is used (a constant, never written). */
static const char taken_mark;
#define TAKEN ((void *)&taken_mark)

/* Our capsules' destructor: deletes the tensor unless a consumer took it
 * (renamed the capsule "used_..."). The name is read as text, as NumPy's
 * destructor reads it: a consumer may set the fresh name back with a string
 * of its own, saying it took nothing. */
static void producer_destructor(void *cap) {
  const shim_pyapi *py = shim_py_bound();
  const char *name;
  shim_pending_error pending;
  int versioned;
  void *m;
  /* "used_...", the common end, told by its first letter (a strcmp is ~5 ns) */
  if (py == NULL || (name = py->PyCapsule_GetName(cap)) == NULL || name[0] != 'd') return;
  versioned = name == SHIM_NAME_V || strcmp(name, SHIM_NAME_V) == 0;
  if ((!versioned && name != SHIM_NAME_L && strcmp(name, SHIM_NAME_L) != 0) ||
      py->PyCapsule_GetContext(cap) == TAKEN)
    return;
  m = py->PyCapsule_GetPointer(cap, name);
  if (m == NULL) {
    py->PyErr_Clear();
    return;
  }
  shim_error_set_aside(py, &pending);
  shim_delete_managed(m, versioned);
  shim_error_put_back(py, &pending);
}

void shim_export_taken(const shim_pyapi *py, void *cap) {
  if (py->PyCapsule_GetDestructor(cap) == producer_destructor) (void)py->PyCapsule_SetContext(cap, TAKEN);
}

int shim_export_is_taken(const shim_pyapi *py, void *cap) {
  return py->PyCapsule_GetDestructor(cap) == producer_destructor &&
         py->PyCapsule_GetContext(cap) == TAKEN;
}

/* A capsule ("dltensor_versioned" / "dltensor") of a view of the holder's
 * data described by t (one of the holder's or derived from it: placement)
 * that references `holder`; flags as given (legacy refuses READ_ONLY and
 * padded data). New reference, or NULL with an exception. */
static void *shim_export_capsule(const shim_pyapi *py, void *holder, const DLTensor *t,
                                 uint64_t flags, int versioned) {
  void *block = export_block(py, holder, t, flags, versioned), *cap;
  if (SHIM_UNLIKELY(block == NULL)) return NULL;
  cap = py->PyCapsule_New(block, versioned ? SHIM_NAME_V : SHIM_NAME_L, producer_destructor);
  if (SHIM_UNLIKELY(cap == NULL)) {
    py->Py_DecRef(holder);
    free(block);
  }
  return cap;
}

DLPACKSHIM_API int dlpackshim_capsule_new(void *managed, int versioned, void **capsule_out) {
  const shim_pyapi *py = shim_py();
  void *cap;
  int gil;
  if (py == NULL) return DLPACKSHIM_ERR_NO_PYTHON;
  if (managed == NULL || capsule_out == NULL)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule_new: %s is NULL",
                     managed == NULL ? "managed" : "capsule_out");
  gil = py->PyGILState_Ensure();
  cap = py->PyCapsule_New(managed, versioned ? SHIM_NAME_V : SHIM_NAME_L, producer_destructor);
  if (cap == NULL) py->PyErr_Clear(); /* out of memory: the tensor stays the caller's */
  py->PyGILState_Release(gil);
  if (cap == NULL) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "capsule_new: out of memory");
  *capsule_out = cap;
  return DLPACKSHIM_OK;
}

/* ---- __dlpack__ ---------------------------------------------------------------- */

/* max_version -> 1 (versioned) or 0 (legacy); -1 with TypeError (not None
 * nor a tuple of two ints: the standard) or ValueError (not uint32s). */
static int parse_max_version(const shim_pyapi *py, void *v) {
  /* Part of the call memo (with __dlpack__'s kw_memo): the last exact
   * tuple read and its answer, a reference held (docs/design.md). */
  static void *last;
  static int last_versioned;
  long long part[2];
  void *old;
  if (v == py->Py_None) return 0;
  if (v == last) return last_versioned;
  if (!shim_is_instance(py, v, py->PyTuple_Type) || py->PyTuple_Size(v) != 2) goto type_error;
  for (int i = 0; i < 2; i++) {
    void *item = py->PyTuple_GetItem(v, i), *tp = shim_type_of(py, item);
    if (tp != py->PyLong_Type && (tp == py->PyBool_Type || !py->PyType_IsSubtype(tp, py->PyLong_Type)))
      goto type_error;
    part[i] = py->PyLong_AsLongLong(item);
    if (part[i] == -1 && py->PyErr_Occurred() != NULL) py->PyErr_Clear(); /* too large: below */
  }
  if (part[0] < 0 || part[1] < 0 || part[0] > UINT32_MAX || part[1] > UINT32_MAX ||
      (part[0] == -1 || part[1] == -1)) {
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                       "max_version must be a (major, minor) pair of version numbers from 0 to %u",
                       (unsigned)UINT32_MAX);
  }
  if (shim_is_exact(py, v, py->PyTuple_Type)) { /* a tuple never changes */
    old = last;
    py->Py_IncRef(v);
    last = v;
    last_versioned = part[0] >= 1;
    if (old != NULL) py->Py_DecRef(old); /* a tuple of ints: no code runs */
  }
  return part[0] >= 1;
type_error:
  return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "max_version must be None or a tuple of two ints");
}

/* Makes `consumer` (the caller's stream, checked) wait for data of dev ready
 * on `producer` (a handle): an event, the host does not block. */
static int export_sync(const shim_pyapi *py, DLDevice dev, int64_t producer, int64_t consumer) {
  int st;
  if (consumer == -1 || consumer == producer || shim_gpu_family(dev.device_type) == NULL) return 0;
  st = dlpackshim_stream_wait(dev.device_type, dev.device_id, producer, consumer);
  return st != 0 ? shim_py_raise_err(py, st) : 0;
}

void *shim_tensor_dlpack(void *self, void *const *args, ptrdiff_t nargs, void *kwnames) {
  static const int names[4] = {SHIM_STR_STREAM, SHIM_STR_MAX_VERSION, SHIM_STR_DL_DEVICE,
                               SHIM_STR_COPY};
  static shim_kw_memo kw_memo; /* NumPy's tuple (docs/design.md) */
  const shim_pyapi *py = shim_py_bound();
  shim_request rq = {0, {kDLCPU, 0}, -1, 0, 0};
  shim_data d;
  const DLTensor *dl;
  void *v[4], *placed = NULL, *cap = NULL;
  int versioned, r, moved = 0;
  int64_t consumer;
  if (SHIM_UNLIKELY(nargs != 0))
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "__dlpack__() takes keyword arguments only");
  if (shim_parse_keywords(py, "__dlpack__", args, 0, kwnames, names, 4, v, &kw_memo) != 0 ||
      (versioned = parse_max_version(py, v[1])) < 0 || shim_parse_copy(py, v[3], &rq.copy) != 0 ||
      shim_parse_stream(py, v[0], &rq.has_stream, &rq.stream) != 0 ||
      (dl = shim_tensor_parts(py, self, &d.holder, &d.flags, &d.stream)) == NULL)
    return NULL;
  d.flags &= ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED; /* the Tensor's data, shared: not its copy */
  if (v[2] != py->Py_None) { /* the Tensor's own device too: a copy must be made there */
    if (shim_parse_device(py, v[2], "dl_device", &rq.device) != 0) return NULL;
    rq.has_device = 1;
    moved = rq.device.device_type != dl->device.device_type || rq.device.device_id != dl->device.device_id;
  }
  /* A device the data cannot reach is BufferError, before a stream is
   * judged for it (an unknown device type has no stream rules). */
  if (moved && !shim_placeable(dl->device, &rq)) {
    (void)shim_place(py, &d, &rq, 0, "__dlpack__", &placed);
    return NULL;
  }
  /* The consumer's stream, checked for the device it will use: a consumer
   * on the CPU has none (None or -1). */
  consumer = -1;
  if ((rq.has_stream || shim_gpu_family(dl->device.device_type) != NULL) &&
      (r = dlpackshim_stream_check(rq.has_device ? rq.device.device_type : dl->device.device_type,
                                   rq.has_stream, rq.stream, &consumer)) != 0)
    return shim_py_raise(py, r);
  if (!moved && rq.copy != 1 && consumer == -1) /* no code runs before the export */
    return shim_export_capsule(py, d.holder, dl, d.flags, versioned);
  py->Py_IncRef(d.holder); /* the call may run code that closes the Tensor */
  r = moved || rq.copy == 1 ? shim_place(py, &d, &rq, 0, "__dlpack__", &placed) : 0;
  if (r > 0) { /* a copy or a relabelled view of the data: exported with its own flags */
    void *holder;
    shim_data p;
    dl = shim_tensor_parts(py, placed, &holder, &p.flags, &p.stream);
    if (moved || export_sync(py, dl->device, shim_data_stream(py, &p, dl->device.device_type),
                             consumer) == 0)
      cap = shim_export_capsule(py, holder, dl, p.flags, versioned);
    py->Py_DecRef(placed);
  } else if (r == 0 && (consumer == -1 || export_sync(py, dl->device, shim_data_stream(py, &d, dl->device.device_type),
                                                     consumer) == 0)) {
    cap = shim_export_capsule(py, d.holder, dl, d.flags, versioned); /* the data itself */
  }
  py->Py_DecRef(d.holder);
  return cap;
}

/* ---- the exchange table (dlpack.h 1.3), dlpackshim.Tensor's --------------
 * Consumers call every entry with the GIL held (dlpack.h). */

static int api_from_py(void *obj, DLManagedTensorVersioned **out) {
  const shim_pyapi *py = shim_py_bound();
  const DLTensor *t;
  shim_data d;
  void *m;
  int64_t def;
  if (SHIM_UNLIKELY(obj == NULL || out == NULL))
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "managed_tensor_from_py_object_no_sync: NULL argument");
  if (!shim_is_tensor(py, obj))
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "dlpackshim exchange API: the object is not a dlpackshim.Tensor");
  if ((t = shim_tensor_parts(py, obj, &d.holder, &d.flags, &d.stream)) == NULL) return -1;
  py->Py_IncRef(d.holder); /* a stream wait may run code that closes obj */
  /* GPU data must be ready on the stream current_work_stream names (the
   * default one). */
  m = dlpackshim_stream_check(t->device.device_type, 0, 0, &def) != 0 ||
              export_sync(py, t->device, shim_data_stream(py, &d, t->device.device_type), def) == 0
          ? export_block(py, d.holder, t, d.flags & ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED, 1)
          : NULL;
  py->Py_DecRef(d.holder);
  if (m == NULL) return -1;
  *out = (DLManagedTensorVersioned *)m;
  return 0;
}

static int api_to_py(DLManagedTensorVersioned *m, void **out) {
  const shim_pyapi *py = shim_py_bound();
  void *obj;
  if (SHIM_UNLIKELY(m == NULL || out == NULL)) {
    if (m != NULL) shim_delete_managed(m, 1); /* stolen even on failure */
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "managed_tensor_to_py_object_no_sync: NULL argument");
  }
  if (SHIM_UNLIKELY(shim_pkg.tensor_class == NULL)) {
    shim_delete_managed(m, 1);
    return shim_py_err(py, DLPACKSHIM_ERR_PYTHON, "managed_tensor_to_py_object_no_sync: the dlpackshim "
                                                  "package is not imported");
  }
  if ((obj = shim_tensor_take(py, m, 1, NULL)) == NULL) return -1;
  *out = obj;
  return 0;
}

static int api_dltensor_from_py(void *obj, DLTensor *out) {
  const shim_pyapi *py = shim_py_bound();
  const DLTensor *t;
  shim_data d;
  int st;
  if (SHIM_UNLIKELY(obj == NULL || out == NULL))
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "dltensor_from_py_object_no_sync: NULL argument");
  if (!shim_is_tensor(py, obj))
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "dlpackshim exchange API: the object is not a dlpackshim.Tensor");
  if ((t = shim_tensor_parts(py, obj, &d.holder, &d.flags, NULL)) == NULL) return -1;
  /* A bare DLTensor carries no flags, as a legacy capsule: the same rule. */
  if ((st = shim_check_flagless(t, d.flags)) != 0)
    return shim_py_raise_err(py, st);
  *out = *t;
  return 0;
}

static int api_current_work_stream(DLDeviceType device_type, int32_t device_id, void **out) {
  (void)device_type;
  (void)device_id;
  /* A Tensor's data is ready on its device's default stream: NULL names it
   * for CUDA and ROCm (and means "none" for the CPU). */
  if (out != NULL) *out = NULL;
  return 0;
}

static int api_allocator(DLTensor *proto, DLManagedTensorVersioned **out, void *error_ctx,
                         void (*SetError)(void *error_ctx, const char *kind, const char *message)) {
  DLManagedTensorVersioned *m = NULL;
  int64_t nbytes;
  if (proto == NULL || out == NULL) {
    if (SetError != NULL) SetError(error_ctx, "ValueError", "managed_tensor_allocator: NULL argument");
    return -1;
  }
  if (proto->device.device_type != kDLCPU || proto->device.device_id != 0) {
    if (SetError != NULL)
      SetError(error_ctx, "BufferError",
               "managed_tensor_allocator: dlpackshim allocates host tensors, on (kDLCPU, 0), only");
    return -1;
  }
  if (dlpackshim_tensor_nbytes(proto, 0, &nbytes) != 0 || (m = shim_tensor_alloc(proto, nbytes, 0)) == NULL) {
    if (SetError != NULL)
      SetError(error_ctx,
               dlpackshim_last_status() == DLPACKSHIM_ERR_NO_MEMORY   ? "MemoryError"
               : dlpackshim_last_status() == DLPACKSHIM_ERR_UNSUPPORTED ? "BufferError"
                                                                       : "ValueError",
               dlpackshim_last_error());
    return -1;
  }
  *out = m;
  return 0;
}

/* dlpackshim.Tensor's exchange table. */
static const DLPackExchangeAPI shim_api_table = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    api_allocator,
    api_from_py,
    api_to_py,
    api_dltensor_from_py,
    api_current_work_stream,
};

DLPACKSHIM_API const DLPackExchangeAPI *dlpackshim_exchange_api(void) { return &shim_api_table; }

void *shim_exchange_api_capsule(const shim_pyapi *py) {
  /* The table is static: the capsule needs no destructor. */
  return py->PyCapsule_New((void *)&shim_api_table, SHIM_EXCHANGE_API_NAME, NULL);
}

/* ---- the buffer protocol ---------------------------------------------------
 * memoryview(t), bytes(t), hashlib, files, sockets, mpi4py: the data of
 * host-readable memory, zero copy, for dtypes with a struct format. The view
 * references the Tensor (view->obj), which the collector sees, and the
 * Tensor counts it as lent (shim_tensor_lend): close() while a view lives
 * keeps the memory until the Tensor goes. */

typedef struct {
  char format[4];
  ptrdiff_t dims[]; /* shape[ndim], then strides[ndim] in bytes */
} buffer_export;

/* The struct format of one element of dt in native byte order, or NULL. */
static const char *struct_format(DLDataType dt) {
  if (dt.lanes != 1) return NULL;
  switch (dt.code) {
    case kDLInt: return dt.bits == 8 ? "b" : dt.bits == 16 ? "h" : dt.bits == 32 ? "i" : dt.bits == 64 ? "q" : NULL;
    case kDLUInt: return dt.bits == 8 ? "B" : dt.bits == 16 ? "H" : dt.bits == 32 ? "I" : dt.bits == 64 ? "Q" : NULL;
    case kDLFloat: return dt.bits == 16 ? "e" : dt.bits == 32 ? "f" : dt.bits == 64 ? "d" : NULL;
    case kDLComplex: return dt.bits == 64 ? "Zf" : dt.bits == 128 ? "Zd" : NULL;
    case kDLBool: return dt.bits == 8 ? "?" : NULL;
    default: return NULL;
  }
}

/* The bits of PyBUF_STRIDES and PyBUF_{C,F,ANY}_CONTIGUOUS beyond PyBUF_ND. */
enum { PYBUF_STRIDES_BIT = 0x10, PYBUF_C_BIT = 0x20, PYBUF_F_BIT = 0x40, PYBUF_ANY_BIT = 0x80 };

int shim_tensor_getbuffer(void *self, void *view_, int flags) {
  const shim_pyapi *py = shim_py_bound();
  shim_py_buffer *view = (shim_py_buffer *)view_;
  const DLTensor *t;
  const char *format;
  shim_data d;
  buffer_export *b;
  int64_t nbytes, itemsize;
  int32_t layout;
  static char empty; /* the address of an empty buffer */
  if ((t = shim_tensor_parts(py, self, &d.holder, &d.flags, &d.stream)) == NULL) return -1;
  if (!shim_host_accessible(t->device.device_type))
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "the Tensor's data is on device (%d, %d), which the host cannot read: no buffer "
                       "(copy it to the host with dlpackshim.from_dlpack(t, device=(1, 0)))",
                       (int)t->device.device_type, (int)t->device.device_id);
  /* (a dtype with a struct format has whole-byte elements: padded or not, the same) */
  if ((format = struct_format(t->dtype)) == NULL)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "dtype (code %u, bits %u, lanes %u) has no struct format for the buffer "
                       "protocol; t.tobytes() gives its bytes, DLPack its elements",
                       t->dtype.code, t->dtype.bits, t->dtype.lanes);
  if ((flags & SHIM_PYBUF_WRITABLE) && (d.flags & DLPACKSHIM_FLAG_READ_ONLY))
    return shim_py_err(py, DLPACKSHIM_ERR_READ_ONLY, "the Tensor is read-only: no writable buffer");
  dlpackshim_tensor_nbytes(t, d.flags, &nbytes);
  dlpackshim_tensor_itemsize(t, d.flags, &itemsize);
  dlpackshim_tensor_layout(t, &layout);
  /* PEP 3118: a request without strides reads the buffer as C-contiguous. */
  if (((!(flags & PYBUF_STRIDES_BIT) || (flags & PYBUF_C_BIT)) && !(layout & DLPACKSHIM_LAYOUT_C)) ||
      ((flags & PYBUF_F_BIT) && !(layout & DLPACKSHIM_LAYOUT_F)) || ((flags & PYBUF_ANY_BIT) && !layout)) {
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "the Tensor is not contiguous in the order the buffer request needs");
  }
  if (shim_host_ready(py, &d) != 0) return -1; /* pinned or managed memory */
  b = (buffer_export *)malloc(sizeof(*b) + 2 * (size_t)t->ndim * sizeof(ptrdiff_t));
  if (b == NULL)
    return shim_py_err(py, DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
  snprintf(b->format, sizeof(b->format), "%s", format);
  for (int32_t i = 0; i < t->ndim; i++) {
    b->dims[i] = (ptrdiff_t)t->shape[i];
    /* A stride in bytes that does not fit is one no element is read by
     * (validation bounds those of a non-empty tensor's extents > 1; an
     * empty tensor's may be anything): any value serves, the producer's
     * where it fits, as NumPy's. */
    b->dims[t->ndim + i] = t->strides[i] <= PTRDIFF_MAX / itemsize && t->strides[i] >= -(PTRDIFF_MAX / itemsize)
                               ? (ptrdiff_t)(t->strides[i] * itemsize)
                               : (ptrdiff_t)itemsize;
  }
  view->buf = nbytes == 0 && t->data == NULL ? (void *)&empty : (char *)t->data + t->byte_offset;
  view->obj = self;
  py->Py_IncRef(self);
  view->len = (ptrdiff_t)nbytes;
  view->itemsize = (ptrdiff_t)itemsize;
  view->readonly = (d.flags & DLPACKSHIM_FLAG_READ_ONLY) != 0;
  view->format = (flags & SHIM_PYBUF_FORMAT) ? b->format : NULL;
  if (flags & SHIM_PYBUF_ND) {
    /* The buffer protocol: a scalar's (ndim 0) shape and strides "MUST be NULL". */
    view->ndim = t->ndim;
    view->shape = t->ndim > 0 ? b->dims : NULL;
    view->strides = t->ndim > 0 && (flags & PYBUF_STRIDES_BIT) ? b->dims + t->ndim : NULL;
  } else { /* bytes, C-contiguous (checked above) */
    view->ndim = 1;
    view->shape = NULL;
    view->strides = NULL;
  }
  view->suboffsets = NULL;
  view->internal = b;
  shim_tensor_lend(self, 1);
  return 0;
}

void shim_tensor_releasebuffer(void *self, void *view_) {
  shim_py_buffer *view = (shim_py_buffer *)view_;
  buffer_export *b = (buffer_export *)view->internal;
  if (b == NULL) return;
  /* The last view of a closed Tensor drops the holder, which may run Python
   * code that releases this view again (a PickleBuffer's release() from an
   * owner's __del__): it finds nothing left. PyBuffer_Release decrefs the
   * object it read before calling here, once. */
  view->internal = NULL;
  view->obj = NULL;
  free(b);
  shim_tensor_lend(self, -1);
}
