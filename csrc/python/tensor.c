/*
 * tensor.c - the C part of dlpackshim.Tensor, and the holder that keeps a
 * Tensor's memory alive.
 *
 * The holder (dlpackshim._Holder) is the one object that owns what a Tensor
 * reads: a snapshot of the layout, taken and validated once (a producer that
 * edits its struct later cannot change what is read), and what keeps the
 * memory valid: a producer's managed tensor (deleted with the holder), a
 * buffer export (released with it: a bytearray cannot resize, an mmap cannot
 * close meanwhile) and/or a Python object. Tensors, exports and pins
 * reference the holder, never the Tensor, so closing a Tensor never frees
 * memory that an export or a running call still reads.
 *
 * The Tensor's base type (dlpackshim._TensorBase) holds the fields C reads
 * (the holder, flags, version, stream) and its C methods: close(), the
 * exports (produce.c) and placement (place.c). The package's class
 * statement derives dlpackshim.Tensor from it (dlpackshim/_tensor.py).
 *
 * Both types are made once per process, in the main interpreter.
 */
#include "binding.h"

#include <stddef.h>
#include <stdlib.h>

/* Where a heap type's C fields start after CPython's object header (whose
 * size is not in the stable ABI): object.__basicsize__, rounded up to 16. */
static ptrdiff_t shim_fields_offset;

/* ---- the holder ---------------------------------------------------------- */

enum { INLINE_DIMS = 4 }; /* axes whose shape and strides live inside the holder */

typedef struct {
  uint64_t flags;         /* the data's flags; SHIM_FLAG_LEGACY: taken through the legacy ABI */
  uint32_t major, minor;  /* of the managed tensor (0.0: legacy), else of this library */
  void *managed;          /* a producer's DLManagedTensor(Versioned), deleted with the holder */
  int versioned;
  int has_view;           /* view holds a buffer export, released with the holder */
  void *keep;             /* a Python object that keeps the memory valid, or NULL */
  DLTensor dl;            /* the snapshot: shape and strides point into dims */
  int64_t *dims;          /* shape[ndim] then strides[ndim]: small_dims, or malloc'ed */
  int64_t small_dims[2 * INLINE_DIMS];
  shim_py_buffer view;    /* last: a holder of a managed tensor alone is allocated without it */
} holder_fields;

/* Two types of one layout: a holder that references Python objects (keep,
 * a buffer's exporter) is tracked by the garbage collector, which must see
 * cycles through it (an owner that references its own Tensor); one that
 * owns a managed tensor alone references none, and skips the collector's
 * bookkeeping (~10 ns an import, docs/design.md). */
static void *holder_type, *plain_holder_type;

static holder_fields *hfields(void *obj) {
  return (holder_fields *)((char *)obj + shim_fields_offset);
}

void shim_delete_managed(void *managed, int versioned) {
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)managed;
    if (m->deleter != NULL) m->deleter(m);
  } else {
    DLManagedTensor *m = (DLManagedTensor *)managed;
    if (m->deleter != NULL) m->deleter(m);
  }
}

/* The exporter of a buffer view is visited (a cycle through it can be
 * collected) unless it is a memoryview: CPython's memoryview tp_clear drops
 * its managed buffer even while it has exports (ours), and its dealloc then
 * crashes. Unvisited, it counts as referenced from outside the garbage and is
 * never cleared while the view lives; a cycle through one is not collected. */
static int holder_traverse(void *self, shim_visitproc visit, void *arg) {
  const shim_pyapi *py = shim_py_bound();
  holder_fields *h = hfields(self);
  int r;
  if ((r = visit(shim_type_of(py, self), arg)) != 0) return r;
  if (h->keep != NULL && (r = visit(h->keep, arg)) != 0) return r;
  if (!h->has_view || h->view.obj == NULL || py->PyType_IsSubtype(shim_type_of(py, h->view.obj),
                                                                  py->PyMemoryView_Type))
    return 0;
  return visit(h->view.obj, arg);
}

/* What the holder owns, released; the snapshot stays readable. Deleters and
 * buffer releases may run Python: a pending exception is kept around them. */
static void holder_release(const shim_pyapi *py, holder_fields *h) {
  shim_pending_error pending;
  void *keep = h->keep;
  shim_error_set_aside(py, &pending);
  if (h->managed != NULL) {
    void *managed = h->managed;
    h->managed = NULL;
    shim_delete_managed(managed, h->versioned);
  }
  if (h->has_view) {
    h->has_view = 0;
    py->PyBuffer_Release(&h->view);
  }
  h->keep = NULL;
  if (keep != NULL) py->Py_DecRef(keep);
  shim_error_put_back(py, &pending);
}

/* One per type (neither can be subclassed): each knows its type and its
 * tp_free. Instances of heap types own a reference to their type. */
static void holder_dealloc(void *self) {
  const shim_pyapi *py = shim_py_bound();
  holder_fields *h = hfields(self);
  py->PyObject_GC_UnTrack(self);
  holder_release(py, h);
  if (h->dims != h->small_dims) free(h->dims);
  py->PyObject_GC_Del(self);
  py->Py_DecRef(holder_type);
}

static void plain_holder_dealloc(void *self) {
  const shim_pyapi *py = shim_py_bound();
  holder_fields *h = hfields(self);
  holder_release(py, h);
  if (h->dims != h->small_dims) free(h->dims);
  py->PyObject_Free(self);
  py->Py_DecRef(plain_holder_type);
}

/* CPython's PyGetSetDef, written from its layout (stable ABI). */
typedef struct {
  const char *name;
  void *get, *set;
  const char *doc;
  void *closure;
} shim_getset_def;

enum { Py_tp_getset = 73 };

/* _addr: the address of the snapshot DLTensor (valid while the holder lives). */
static void *holder_addr(void *self, void *closure) {
  (void)closure;
  return shim_py_bound()->PyLong_FromUnsignedLongLong((uintptr_t)&hfields(self)->dl);
}

static shim_getset_def holder_getset[] = {
    {"_addr", (void *)holder_addr, NULL, "address of the snapshot DLTensor", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static shim_type_slot holder_slots[] = {
    {Py_tp_getset, holder_getset},
    {Py_tp_dealloc, (void *)holder_dealloc},
    {Py_tp_traverse, (void *)holder_traverse},
    {Py_tp_doc, (void *)"What keeps a dlpackshim Tensor's memory alive: a snapshot of its layout "
                        "and the producer's tensor, buffer export or object it came from."},
    {0, NULL},
};

static shim_type_spec holder_spec = {
    "dlpackshim._Holder", 0 /* set with shim_fields_offset */, 0,
    TPFLAGS_HAVE_GC | TPFLAGS_DISALLOW_INSTANTIATION, holder_slots,
};

static shim_type_slot plain_holder_slots[] = {
    {Py_tp_getset, holder_getset},
    {Py_tp_dealloc, (void *)plain_holder_dealloc},
    {Py_tp_doc, (void *)"What keeps a dlpackshim Tensor's memory alive: a snapshot of its layout "
                        "and the producer's tensor."},
    {0, NULL},
};

static shim_type_spec plain_holder_spec = {
    "dlpackshim._ManagedHolder", 0 /* set with shim_fields_offset */, 0,
    TPFLAGS_DISALLOW_INSTANTIATION, plain_holder_slots,
};

/* A holder with a copy of src's layout (ndim read once by the caller; NULL
 * strides made explicit, compact row-major) and the given flags, owning
 * nothing yet. NULL with the last error set (no exception). */
static void *holder_alloc(const shim_pyapi *py, const DLTensor *src, int32_t ndim,
                          uint64_t flags, int tracked) {
  void *obj;
  holder_fields *h;
  if (tracked) {
    obj = py->PyType_GenericAlloc(holder_type, 0); /* zeroed, and tracked */
  } else {
    /* The holder of every DLPack import: not collected, so allocated as
     * PyObject_New allocates plain objects, without GenericAlloc's zeroing
     * (~5 ns). The interpreter's allocator, as for every object: a holder
     * CPython leaves alive at exit is the interpreter's (tests/lsan.supp). */
    obj = py->_PyObject_New(plain_holder_type);
  }
  if (SHIM_UNLIKELY(obj == NULL)) {
    py->PyErr_Clear();
    shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory taking a DLPack tensor");
    return NULL;
  }
  h = hfields(obj);
  h->managed = NULL;
  h->has_view = 0;
  h->keep = NULL;
  h->dims = h->small_dims;
  if (ndim > INLINE_DIMS && (h->dims = (int64_t *)malloc(2 * (size_t)ndim * sizeof(int64_t))) == NULL) {
    h->dims = h->small_dims;
    py->Py_DecRef(obj);
    shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory taking a DLPack tensor");
    return NULL;
  }
  h->dl = *src;
  h->dl.ndim = ndim;
  h->dl.shape = ndim > 0 ? h->dims : NULL;
  h->dl.strides = ndim > 0 ? h->dims + ndim : NULL;
  h->flags = flags;
  h->major = DLPACK_MAJOR_VERSION;
  h->minor = DLPACK_MINOR_VERSION;
  h->versioned = 1;
  if (ndim > 0) {
    memcpy(h->dims, src->shape, (size_t)ndim * sizeof(int64_t));
    if (src->strides != NULL) {
      memcpy(h->dims + ndim, src->strides, (size_t)ndim * sizeof(int64_t));
    } else if (shim_compact_strides(ndim, h->dims, h->dims + ndim) != 0) {
      py->Py_DecRef(obj);
      return NULL; /* strides of this shape overflow int64: _INVALID_TENSOR */
    }
  }
  return obj;
}

void *shim_holder_take(const shim_pyapi *py, void *managed, int versioned, int built) {
  const DLTensor *src;
  uint64_t flags;
  int32_t ndim;
  void *holder;
  holder_fields *h;
  int st;
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)managed;
    if (SHIM_UNLIKELY(m->version.major != 1)) {
      /* Only the version and the deleter may be read: the rest may be laid
       * out differently. */
      uint32_t major = m->version.major, minor = m->version.minor;
      shim_delete_managed(m, 1);
      return shim_py_fail(py, DLPACKSHIM_ERR_VERSION,
                          "DLPack tensor has version %u.%u; dlpackshim implements %d.%d (major "
                          "version 1 only)",
                          (unsigned)major, (unsigned)minor, DLPACK_MAJOR_VERSION,
                          DLPACK_MINOR_VERSION);
    }
    src = &m->dl_tensor;
    flags = m->flags & SHIM_FLAGS_PUBLIC;
  } else {
    src = &((DLManagedTensor *)managed)->dl_tensor;
    /* A legacy tensor says nothing about writability: read-only (NumPy >= 2.3
     * does the same), yet free to leave by the legacy ABI it came in by. */
    flags = DLPACKSHIM_FLAG_READ_ONLY | SHIM_FLAG_LEGACY;
  }
  ndim = src->ndim; /* read once: the snapshot is sized and filled from this value */
  if (SHIM_UNLIKELY(ndim < 0 || ndim > DLPACKSHIM_MAX_NDIM || (ndim > 0 && src->shape == NULL))) {
    shim_delete_managed(managed, versioned);
    if (ndim < 0 || ndim > DLPACKSHIM_MAX_NDIM)
      return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_TENSOR,
                          "invalid DLPack tensor: ndim %d is out of range [0, %d]", (int)ndim,
                          (int)DLPACKSHIM_MAX_NDIM);
    return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_TENSOR, "invalid DLPack tensor: shape is NULL");
  }
  holder = holder_alloc(py, src, ndim, flags, 0);
  st = holder == NULL ? dlpackshim_last_status()
                      : built ? 0 : dlpackshim_tensor_validate(&hfields(holder)->dl,
                                                               versioned ? flags : 0);
  if (SHIM_UNLIKELY(st != 0)) {
    char msg[384];
    snprintf(msg, sizeof(msg), "%s", dlpackshim_last_error());
    if (holder != NULL) py->Py_DecRef(holder); /* owns nothing yet */
    shim_delete_managed(managed, versioned); /* may fail calls of its own: message saved first */
    if (st == DLPACKSHIM_ERR_NO_MEMORY) return shim_py_fail(py, st, "%s", msg);
    return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_TENSOR, "invalid DLPack tensor: %s", msg);
  }
  h = hfields(holder);
  h->managed = managed;
  h->versioned = versioned;
  if (versioned) {
    h->major = ((DLManagedTensorVersioned *)managed)->version.major;
    h->minor = ((DLManagedTensorVersioned *)managed)->version.minor;
  } else {
    h->major = h->minor = 0;
  }
  return holder;
}

void *shim_holder_view(const shim_pyapi *py, const DLTensor *t, uint64_t flags, void *keep,
                       shim_py_buffer *view) {
  void *holder = NULL;
  int st = dlpackshim_tensor_validate(t, flags);
  if (st == 0) holder = holder_alloc(py, t, t->ndim, flags & SHIM_FLAGS_PUBLIC, keep != NULL || view != NULL);
  if (SHIM_UNLIKELY(holder == NULL)) {
    if (view != NULL) py->PyBuffer_Release(view);
    return shim_py_raise(py, dlpackshim_last_status());
  }
  if (keep != NULL) {
    py->Py_IncRef(keep);
    hfields(holder)->keep = keep;
  }
  if (view != NULL) {
    hfields(holder)->view = *view;
    hfields(holder)->has_view = 1;
  }
  return holder;
}

const DLTensor *shim_holder_tensor(void *holder, uint64_t *flags, uint32_t *major,
                                   uint32_t *minor) {
  const holder_fields *h = hfields(holder);
  if (flags != NULL) *flags = h->flags;
  if (major != NULL) *major = h->major;
  if (minor != NULL) *minor = h->minor;
  return &h->dl;
}

/* ---- the Tensor's base type ------------------------------------------------ */

typedef struct {
  void *holder;           /* NULL once closed */
  uint64_t flags;         /* this Tensor's flags (a re-import shares a holder, not IS_COPIED) */
  uint32_t major, minor;  /* DLPack version of the import (0.0: legacy) */
  void *stream;           /* the stream its data is ready on (an int); NULL: the default */
  void *pinned;           /* the holder, kept by close() while the Tensor has lent it */
  void *meta;             /* the package's cache of the metadata as Python values */
  void *weaklist;
  ptrdiff_t lent;         /* readers of the data that reference the Tensor (shim_tensor_lend) */
} tensor_fields;

static void *base_type;

static tensor_fields *tfields(void *obj) {
  return (tensor_fields *)((char *)obj + shim_fields_offset);
}

static int tensor_traverse(void *self, shim_visitproc visit, void *arg) {
  tensor_fields *t = tfields(self);
  int r;
  if ((r = visit(shim_type_of(shim_py_bound(), self), arg)) != 0) return r;
  if (t->holder != NULL && (r = visit(t->holder, arg)) != 0) return r;
  if (t->stream != NULL && (r = visit(t->stream, arg)) != 0) return r;
  if (t->pinned != NULL && (r = visit(t->pinned, arg)) != 0) return r;
  return t->meta != NULL ? visit(t->meta, arg) : 0;
}

static void clear_field(const shim_pyapi *py, void **field) {
  void *v = *field;
  *field = NULL; /* before the decref, which may run code that reads the field */
  if (v != NULL) py->Py_DecRef(v);
}

static int tensor_clear(void *self) {
  const shim_pyapi *py = shim_py_bound();
  tensor_fields *t = tfields(self);
  clear_field(py, &t->meta);
  clear_field(py, &t->pinned);
  clear_field(py, &t->stream);
  clear_field(py, &t->holder);
  return 0;
}

static void tensor_dealloc(void *self) {
  const shim_pyapi *py = shim_py_bound();
  void *tp = shim_type_of(py, self);
  py->PyObject_GC_UnTrack(self);
  if (tfields(self)->weaklist != NULL) py->PyObject_ClearWeakRefs(self);
  tensor_clear(self);
  py->PyObject_GC_Del(self); /* the tp_free of every collected heap type */
  py->Py_DecRef(tp);
}

void *shim_tensor_new(const shim_pyapi *py, void *holder, uint64_t flags, void *stream) {
  void *obj;
  tensor_fields *t;
  const holder_fields *h = hfields(holder);
  /* PyObject_GC_New leaves the fields as they were (GenericAlloc's zeroing
   * costs ~6 ns a Tensor): each is set before the collector can see it. */
  obj = py->_PyObject_GC_New(shim_pkg.tensor_class);
  if (SHIM_UNLIKELY(obj == NULL)) {
    py->Py_DecRef(holder);
    return NULL;
  }
  t = tfields(obj);
  t->holder = holder;
  t->flags = flags;
  t->major = h->major;
  t->minor = h->minor;
  t->stream = t->pinned = t->meta = t->weaklist = NULL;
  t->lent = 0;
  /* Only a device with streams records one: a producer asked with a stream
   * may hand over a host copy (CPU tensors have none). */
  if (stream != NULL && stream != py->Py_None &&
      shim_gpu_family(shim_holder_tensor(holder, NULL, NULL, NULL)->device.device_type) != NULL) {
    py->Py_IncRef(stream);
    t->stream = stream;
  }
  py->PyObject_GC_Track(obj);
  return obj;
}

void shim_tensor_set_version(void *tensor, uint32_t major, uint32_t minor) {
  tfields(tensor)->major = major;
  tfields(tensor)->minor = minor;
}

int shim_is_tensor(const shim_pyapi *py, void *obj) {
  void *type = shim_type_of(py, obj);
  return type == shim_pkg.tensor_class || (base_type != NULL && py->PyType_IsSubtype(type, base_type));
}

const DLTensor *shim_tensor_parts(const shim_pyapi *py, void *tensor, void **holder,
                                  uint64_t *flags, void **stream) {
  const tensor_fields *t = tfields(tensor);
  if (SHIM_UNLIKELY(t->holder == NULL))
    return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "operation on a closed dlpackshim.Tensor");
  *holder = t->holder;
  if (flags != NULL) *flags = t->flags;
  if (stream != NULL) *stream = t->stream;
  return &hfields(t->holder)->dl;
}

/* close(): drops the Tensor's reference to its holder; what still reads the
 * data (exports, calls running in other threads) holds its own. A buffer
 * view and an array made through __array_interface__ reference the Tensor,
 * not the holder (so the collector sees a cycle through one): while the
 * Tensor has lent its data so, the holder stays, as _pinned, until the last
 * view goes (for good once an array interface was handed out). */
static void *tensor_close(void *self, void *unused) {
  const shim_pyapi *py = shim_py_bound();
  tensor_fields *t = tfields(self);
  void *holder = t->holder;
  (void)unused;
  if (holder != NULL) {
    t->holder = NULL;
    clear_field(py, &t->meta);
    if (t->lent > 0) t->pinned = holder; /* the reference moves */
    else py->Py_DecRef(holder);
  }
  py->Py_IncRef(py->Py_None);
  return py->Py_None;
}

void shim_tensor_lend(void *tensor, int delta) {
  tensor_fields *t = tfields(tensor);
  t->lent += delta;
  if (t->lent == 0 && t->holder == NULL) /* closed, and its last view went */
    clear_field(shim_py_bound(), &t->pinned);
}

/* _lend(): for good (an array interface hands the address to an array
 * that references the Tensor; nothing says when it goes). ValueError when
 * the Tensor is closed: then nothing may be lent. */
static void *tensor_lend(void *self, void *unused) {
  const shim_pyapi *py = shim_py_bound();
  void *holder;
  (void)unused;
  if (shim_tensor_parts(py, self, &holder, NULL, NULL) == NULL) return NULL;
  shim_tensor_lend(self, 1);
  py->Py_IncRef(py->Py_None);
  return py->Py_None;
}

/* ---- made from parts: from_pointer, pickles, _place ------------------------ */

/* A tuple of up to DLPACKSHIM_MAX_NDIM ints into a (validated by the caller,
 * dlpackshim/_pointer.py; range-checked here). -1 with an exception. */
static int int64s(const shim_pyapi *py, void *tuple, int64_t *a, ptrdiff_t n) {
  for (ptrdiff_t i = 0; i < n; i++) {
    a[i] = py->PyLong_AsLongLong(py->PyTuple_GetItem(tuple, i));
    if (a[i] == -1 && py->PyErr_Occurred() != NULL) return -1;
  }
  return 0;
}

/* Tensor._from_memory(data, device, shape, strides, dtype, flags, keep):
 * memory described by hand (from_pointer, unpickling), validated as
 * dlpackshim_tensor_new validates it, kept valid by `keep` (None: by the
 * caller). `data`: an address, or an object with the buffer protocol whose
 * contiguous memory (writable unless flags say READ_ONLY) must hold exactly
 * the tensor's bytes (ValueError otherwise: a forged pickle reads nothing
 * beyond its data); its export is held as from_dlpack(buffer) holds one.
 * A static method: it makes Tensors of the package's class. */
static void *from_memory(void *self, void *const *args, ptrdiff_t nargs) {
  enum { PYBUF_ANY_CONTIGUOUS = 0x80 | SHIM_PYBUF_STRIDES };
  const shim_pyapi *py = shim_py_bound();
  DLTensor t;
  int64_t *dims = NULL, dtype[3], nbytes = -1;
  DLDevice device;
  uint64_t flags;
  void *holder = NULL;
  shim_py_buffer view;
  int have_view = 0;
  ptrdiff_t ndim;
  (void)self;
  if (nargs != 7 || shim_type_of(py, args[2]) != py->PyTuple_Type ||
      (args[3] != py->Py_None && (shim_type_of(py, args[3]) != py->PyTuple_Type ||
                                  py->PyTuple_Size(args[3]) != py->PyTuple_Size(args[2]))) ||
      shim_type_of(py, args[4]) != py->PyTuple_Type || py->PyTuple_Size(args[4]) != 3)
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE,
                        "_from_memory(data, device, shape, strides or None, (code, bits, lanes), flags, keep)");
  if (shim_parse_device(py, args[1], "device", &device) != 0) return NULL;
  if ((ndim = py->PyTuple_Size(args[2])) > DLPACKSHIM_MAX_NDIM)
    return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_TENSOR, "ndim is %td: must be in [0, %d]", ndim,
                        (int)DLPACKSHIM_MAX_NDIM);
  flags = py->PyLong_AsUnsignedLongLong(args[5]);
  if (flags == (uint64_t)-1 && py->PyErr_Occurred() != NULL) return NULL;
  if (shim_is_exact(py, args[0], py->PyLong_Type)) {
    t.data = (void *)(uintptr_t)py->PyLong_AsUnsignedLongLong(args[0]);
    if (py->PyErr_Occurred() != NULL) return NULL;
  } else {
    int want = PYBUF_ANY_CONTIGUOUS | ((flags & DLPACKSHIM_FLAG_READ_ONLY) ? 0 : SHIM_PYBUF_WRITABLE);
    if (py->PyObject_GetBuffer(args[0], &view, want) != 0) return NULL;
    have_view = 1;
    t.data = view.buf;
  }
  if ((dims = (int64_t *)malloc(2 * (size_t)ndim * sizeof(int64_t) + 1)) == NULL) {
    shim_py_fail(py, DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
  } else if (int64s(py, args[4], dtype, 3) == 0 && int64s(py, args[2], dims, ndim) == 0 &&
             (args[3] == py->Py_None || int64s(py, args[3], dims + ndim, ndim) == 0)) {
    if (dtype[0] < 0 || dtype[0] > 255 || dtype[1] < 0 || dtype[1] > 255 || dtype[2] < 0 ||
        dtype[2] > 65535) {
      shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "_from_memory: a dtype field out of range");
    } else {
      t.device = device;
      t.ndim = (int32_t)ndim;
      t.dtype.code = (uint8_t)dtype[0];
      t.dtype.bits = (uint8_t)dtype[1];
      t.dtype.lanes = (uint16_t)dtype[2];
      t.shape = ndim > 0 ? dims : NULL;
      t.strides = ndim > 0 && args[3] != py->Py_None ? dims + ndim : NULL;
      t.byte_offset = 0;
      int64_t lo = 0, hi = 0;
      /* A buffer must hold exactly the tensor's bytes, and every byte its
       * strides address must lie inside it. */
      if (have_view && dlpackshim_tensor_nbytes(&t, flags, &nbytes) == 0 && nbytes != (int64_t)view.len) {
        shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "_from_memory: %lld bytes of data for a tensor of %lld bytes",
                     (long long)view.len, (long long)nbytes);
      } else if (have_view && dlpackshim_tensor_byte_span(&t, flags, &lo, &hi) == 0 && hi > lo &&
                 (lo < 0 || hi > (int64_t)view.len)) {
        shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "_from_memory: the strides address bytes %lld to %lld of a %lld-byte buffer",
                     (long long)lo, (long long)hi, (long long)view.len);
      } else {
        holder = shim_holder_view(py, &t, flags, args[6] == py->Py_None ? NULL : args[6],
                                  have_view ? &view : NULL);
        have_view = 0; /* moved into the holder, or released by it on failure */
      }
    }
  }
  if (have_view) py->PyBuffer_Release(&view);
  free(dims);
  return holder != NULL ? shim_tensor_new(py, holder, flags, NULL) : NULL;
}

/* Tensor._place(device=None, copy=None): from_dlpack(self, device=, copy=),
 * for the Tensor's own methods (tobytes, copy.copy, pickles). */
static void *tensor_place(void *self, void *const *args, ptrdiff_t nargs, void *kwnames) {
  static const int names[2] = {SHIM_STR_DEVICE, SHIM_STR_COPY};
  const shim_pyapi *py = shim_py_bound();
  shim_request rq = {0, {kDLCPU, 0}, -1, 0, 0};
  void *v[2];
  if (nargs != 0 || shim_parse_keywords(py, "_place", args, 0, kwnames, names, 2, v, NULL) != 0 ||
      (v[0] != py->Py_None && shim_parse_device(py, v[0], "device", &rq.device) != 0) ||
      shim_parse_copy(py, v[1], &rq.copy) != 0)
    return nargs != 0 ? shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "_place() takes keyword arguments only") : NULL;
  rq.has_device = v[0] != py->Py_None;
  return shim_import(py, self, &rq);
}

/* Tensor._host_ready(): before the package's Python reads the data on the
 * host (tobytes, __array_interface__), as shim_host_ready. */
/* _get_meta(): the metadata the package reads from the holder's DLTensor
 * (shape, strides, dtype, device, address), read once and kept where only
 * this function writes: every read of the memory may trust it. The holder
 * is held while the package's reader runs (Python: another thread may
 * close the Tensor); the first answer stored stays. */
static void *tensor_get_meta(void *self, void *unused) {
  const shim_pyapi *py = shim_py_bound();
  tensor_fields *t = tfields(self);
  void *holder = NULL, *addr, *meta;
  (void)unused;
  if (t->meta != NULL) {
    if (SHIM_UNLIKELY(t->holder == NULL))
      return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "operation on a closed dlpackshim.Tensor");
    py->Py_IncRef(t->meta);
    return t->meta;
  }
  if (shim_tensor_parts(py, self, &holder, NULL, NULL) == NULL) return NULL;
  py->Py_IncRef(holder);
  addr = py->PyLong_FromUnsignedLongLong((uintptr_t)&hfields(holder)->dl);
  meta = addr != NULL ? py->PyObject_CallFunctionObjArgs(shim_pkg.read_meta, addr, NULL) : NULL;
  if (addr != NULL) py->Py_DecRef(addr);
  if (meta != NULL && t->meta == NULL) {
    py->Py_IncRef(meta);
    t->meta = meta;
  }
  py->Py_DecRef(holder);
  return meta;
}

static void *tensor_host_ready(void *self, void *unused) {
  const shim_pyapi *py = shim_py_bound();
  shim_data d;
  (void)unused;
  if (shim_tensor_parts(py, self, &d.holder, &d.flags, &d.stream) == NULL || shim_host_ready(py, &d) != 0)
    return NULL;
  py->Py_IncRef(py->Py_None);
  return py->Py_None;
}

/* CPython's PyMemberDef, written from its layout (stable ABI). */
typedef struct {
  const char *name;
  int type;
  ptrdiff_t offset;
  int flags;
  const char *doc;
} shim_member_def;

enum { T_OBJECT = 6, T_UINT = 11, T_ULONGLONG = 18, T_PYSSIZET = 19, READONLY = 1 };
enum { TPFLAGS_HAVE_VERSION_TAG = 1 << 18 };

/* Offsets relative to the fields: shim_fields_offset is added when the type is made. */
static shim_member_def tensor_members[] = {
    {"_holder", T_OBJECT, offsetof(tensor_fields, holder), READONLY,
     "what keeps the memory alive (dlpackshim._Holder); None once closed"},
    {"_flags", T_ULONGLONG, offsetof(tensor_fields, flags), READONLY,
     "DLPack flags (bit 63: taken through the legacy ABI)"},
    {"_major", T_UINT, offsetof(tensor_fields, major), READONLY, "DLPack major version (0: legacy)"},
    {"_minor", T_UINT, offsetof(tensor_fields, minor), READONLY, "DLPack minor version"},
    {"_stream", T_OBJECT, offsetof(tensor_fields, stream), READONLY,
     "the stream the data is ready on; None: the device's default"},
    {"_pinned", T_OBJECT, offsetof(tensor_fields, pinned), READONLY,
     "the holder, kept by close() while a buffer view or an array interface reads the data"},
    {"_meta", T_OBJECT, offsetof(tensor_fields, meta), READONLY,
     "the metadata _get_meta read (None until then)"},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(tensor_fields, weaklist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};


enum { SHIM_METH_STATIC = 0x0020 };

static shim_method_def tensor_methods[] = {
    {"__dlpack__", (void *)shim_tensor_dlpack, SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS,
     NULL /* the package's, given to dlpackshim__py_base */},
    {"close", (void *)tensor_close, SHIM_METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Drop this Tensor's hold on the memory now; safe to call twice, and from\n"
     "any thread: a call running in another thread keeps the memory it uses.\n\n"
     "Capsules, buffer views and consumer arrays made from the Tensor keep the\n"
     "memory alive on their own. Arrays made through ``__array_interface__``\n"
     "reference the Tensor itself, so once one was made the memory is kept\n"
     "until the Tensor is garbage-collected; the Tensor is closed all the same."},
    {"_place", (void *)tensor_place, SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS,
     "_place($self, /, *, device=None, copy=None)\n--\n\n"
     "from_dlpack(self, device=device, copy=copy): the data moved or copied."},
    {"_lend", (void *)tensor_lend, SHIM_METH_NOARGS,
     "_lend($self, /)\n--\n\n"
     "From now on close() keeps the memory until the Tensor goes (an array\n"
     "interface hands its address to an array that references the Tensor).\n"
     "ValueError when the Tensor is closed."},
    {"_get_meta", (void *)tensor_get_meta, SHIM_METH_NOARGS,
     "_get_meta($self, /)\n--\n\n"
     "(shape, strides, dtype, device, data + byte_offset), read from the\n"
     "holder's DLTensor once. ValueError when the Tensor is closed."},
    {"_host_ready", (void *)tensor_host_ready, SHIM_METH_NOARGS,
     "_host_ready($self, /)\n--\n\n"
     "Wait until the host may read the data (pinned or managed memory a GPU\n"
     "stream may still write)."},
    {"_from_memory", (void *)from_memory, SHIM_METH_FASTCALL | SHIM_METH_STATIC,
     "_from_memory(data, device, shape, strides, dtype, flags, keep)\n--\n\n"
     "A Tensor of memory described by hand (from_pointer)."},
    {NULL, NULL, 0, NULL},
};

static shim_type_slot tensor_slots[] = {
    {Py_tp_dealloc, (void *)tensor_dealloc},
    {Py_tp_traverse, (void *)tensor_traverse},
    {Py_tp_clear, (void *)tensor_clear},
    {Py_tp_members, tensor_members},
    {Py_tp_methods, tensor_methods},
    {Py_bf_getbuffer, (void *)shim_tensor_getbuffer},
    {Py_bf_releasebuffer, (void *)shim_tensor_releasebuffer},
    {Py_tp_doc, (void *)"The C part of dlpackshim.Tensor: its fields, close, exports and buffer."},
    {0, NULL},
};

static shim_type_spec tensor_spec = {
    "dlpackshim._TensorBase", 0 /* set with shim_fields_offset */, 0,
    TPFLAGS_HAVE_VERSION_TAG | TPFLAGS_BASETYPE | TPFLAGS_HAVE_GC, tensor_slots,
};

/* type.<attr> (__basicsize__, __dictoffset__) as a C integer; -1 with an
 * exception. */
static long long type_int(const shim_pyapi *py, void *type, const char *attr) {
  void *v = py->PyObject_GetAttrString(type, attr);
  long long n;
  if (v == NULL) return -1;
  n = py->PyLong_AsLongLong(v);
  py->Py_DecRef(v);
  return n;
}

/* object.__basicsize__ (the object header; larger on free-threaded builds),
 * rounded up to 16. -1 with an exception. */
static ptrdiff_t fields_offset(const shim_pyapi *py) {
  long long header = type_int(py, py->PyBaseObject_Type, "__basicsize__");
  if (header <= 0 || header > 4096) {
    if (py->PyErr_Occurred() == NULL)
      py->PyErr_SetString(*py->PyExc_ImportError, "dlpackshim: object.__basicsize__ is implausible");
    return -1;
  }
  return (ptrdiff_t)((header + 15) / 16 * 16);
}

/* The class the package makes its Tensors of: a C subtype of its class
 * statement (cls, deriving from the base) with the base's own deallocation,
 * as CPython's generic one for classes (subtype_dealloc: finalizer and
 * weakref checks, a second GC tracking) costs every Tensor ~20 ns. It adds
 * nothing else: its methods are cls's. One per import of the package. */
void *shim_tensor_class(const shim_pyapi *py, void *cls) {
  shim_type_slot slots[] = {
      {Py_tp_dealloc, (void *)tensor_dealloc},
      {Py_tp_traverse, (void *)tensor_traverse},
      {Py_tp_clear, (void *)tensor_clear},
      {Py_tp_doc, NULL},
      {0, NULL},
  };
  shim_type_spec spec = {"dlpackshim.Tensor", 0, 0,
                         TPFLAGS_HAVE_VERSION_TAG | TPFLAGS_BASETYPE | TPFLAGS_HAVE_GC, slots};
  void *doc = py->PyObject_GetAttrString(cls, "__doc__"), *bases, *type = NULL;
  if (doc == NULL) return NULL;
  if (doc != py->Py_None && (slots[3].pfunc = (void *)py->PyUnicode_AsUTF8AndSize(doc, NULL)) == NULL) {
    py->Py_DecRef(doc);
    return NULL;
  }
  if (base_type == NULL || !py->PyType_IsSubtype(cls, base_type)) {
    py->Py_DecRef(doc);
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "dlpackshim: the Tensor class must derive from its C base");
  }
  /* shim_tensor_new sets the base's fields only: cls may add none. */
  if (type_int(py, cls, "__basicsize__") != type_int(py, base_type, "__basicsize__") ||
      type_int(py, cls, "__dictoffset__") != 0) {
    py->Py_DecRef(doc);
    if (py->PyErr_Occurred() != NULL) return NULL;
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE,
                        "dlpackshim: the Tensor class may add no fields to its C base (__slots__ = ())");
  }
  if ((bases = py->PyTuple_Pack(1, cls)) != NULL) {
    type = py->PyType_FromSpecWithBases(&spec, bases); /* copies the doc */
    py->Py_DecRef(bases);
  }
  py->Py_DecRef(doc);
  return type;
}

int shim_holder_types(const shim_pyapi *py) {
  int i;
  if (shim_fields_offset == 0) {
    ptrdiff_t offset = fields_offset(py);
    if (offset < 0) return -1;
    shim_fields_offset = offset;
    for (i = 0; tensor_members[i].name != NULL; i++) tensor_members[i].offset += offset;
    tensor_spec.basicsize = (int)(offset + (ptrdiff_t)sizeof(tensor_fields));
    holder_spec.basicsize = (int)(offset + (ptrdiff_t)sizeof(holder_fields));
    plain_holder_spec.basicsize = (int)(offset + (ptrdiff_t)offsetof(holder_fields, view));
  }
  if (holder_type == NULL && (holder_type = py->PyType_FromSpec(&holder_spec)) == NULL) return -1;
  if (plain_holder_type == NULL && (plain_holder_type = py->PyType_FromSpec(&plain_holder_spec)) == NULL)
    return -1;
  return 0;
}

void *shim_tensor_base(const shim_pyapi *py, const char *dlpack_doc) {
  if (base_type != NULL) return base_type;
  if (shim_holder_types(py) != 0) return NULL;
  tensor_methods[0].ml_doc = dlpack_doc; /* the caller keeps it for the process */
  base_type = py->PyType_FromSpec(&tensor_spec);
  return base_type;
}
