/*
 * capsule.c - DLPack tensors in and out of PyCapsules.
 *
 * Rules implemented (dlpack.h, array API standard "DLPack" section):
 *  - names: "dltensor_versioned" / "dltensor"; a consumer that takes the tensor
 *    renames the capsule "used_dltensor_versioned" / "used_dltensor". Names are
 *    static strings: a capsule keeps the pointer, not a copy.
 *  - the producer's capsule destructor deletes the tensor only while the name
 *    is unconsumed; a used_* capsule belongs to its consumer.
 *  - a deleter may be NULL (never call it), is called exactly once, with the
 *    GIL held inside Python, preserving any pending exception.
 *  - a versioned tensor of another major version: delete it, read nothing else.
 *
 * On import the consumed capsule itself becomes the tensor's owner. Its
 * context is swapped for a shim_record: a snapshot of the tensor's layout
 * taken and validated at import (a producer that edits its struct later
 * cannot change what we read), the producer's tensor, and the producer's own
 * capsule destructor and context. Our destructor deletes the tensor, puts
 * the context back and then runs the producer's destructor, which sees its
 * own pointer and context and a "used_" name, as with any other consumer (a
 * destructor that releases its context whatever the name still does so).
 * The record is in the context, not the pointer, because the context is
 * read without a name check: PyCapsule_GetPointer strcmp()s the name on
 * every call, and those compares were a tenth of an import (docs/
 * benchmarks.md). The caller keeps the capsule alive for as long as it uses
 * the tensor.
 */
#include "binding.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char NAME_V[] = "dltensor_versioned";
static const char NAME_L[] = "dltensor";
static const char USED_V[] = "used_dltensor_versioned";
static const char USED_L[] = "used_dltensor";

/* ---- deleting with the GIL held ---------------------------------------- */

/* A deleter runs arbitrary code (NumPy's decrefs an array, which may run
 * Python). Keep the caller's pending exception (we may be inside a
 * destructor running during exception handling); an exception the deleter
 * leaves behind is reported as unraisable, with no object: the capsule may
 * be mid-deallocation and must not be touched again. */
static void export_deleter_v(DLManagedTensorVersioned *self);
static void block_free(void *block);

static void delete_versioned(const shim_pyapi *py, DLManagedTensorVersioned *t) {
  shim_pending_error pending;
  if (t == NULL || t->deleter == NULL) return;
  if (t->deleter == export_deleter_v) {
    /* One of our views (the exchange table's round trip): the GIL is held
     * here, so drop the owner directly instead of through PyGILState. What
     * that may run keeps pending exceptions itself (CPython's finalizers,
     * this function one level down). */
    py->Py_DecRef(t->manager_ctx);
    block_free(t);
    return;
  }
  shim_error_set_aside(py, &pending);
  t->deleter(t);
  shim_error_put_back(py, &pending);
}

static void delete_legacy(const shim_pyapi *py, DLManagedTensor *t) {
  shim_pending_error pending;
  if (t == NULL || t->deleter == NULL) return;
  shim_error_set_aside(py, &pending);
  t->deleter(t);
  shim_error_put_back(py, &pending);
}

/* ---- capsule destructors (Python calls them with the GIL held) ---------
 * They use shim_py_bound(), not shim_py(): during Py_FinalizeEx the
 * interpreter already says "not initialized" while it still deallocates
 * objects, and the deleter must still run (NumPy's and ours guard themselves
 * against finalisation). */

/* Capsules we produce: delete the tensor unless a consumer took it. A
 * consumer renames a capsule it took (a "used_" name of its own): that name,
 * the common case, is told apart from ours without comparing strings. */
static void producer_destructor(void *cap) {
  const shim_pyapi *py = shim_py_bound();
  const char *name;
  if (py == NULL) return;
  name = py->PyCapsule_GetName(cap);
  if (name == NULL || (name != NAME_V && name != NAME_L && name[0] != 'd')) return;
  if (py->PyCapsule_IsValid(cap, NAME_V))
    delete_versioned(py, (DLManagedTensorVersioned *)py->PyCapsule_GetPointer(cap, NAME_V));
  else if (py->PyCapsule_IsValid(cap, NAME_L))
    delete_legacy(py, (DLManagedTensor *)py->PyCapsule_GetPointer(cap, NAME_L));
  /* used_* (or renamed by someone else): not ours to delete. */
}

/* ---- the record a consumed capsule points at ---------------------------- */

/* Records live in CPython's small-object allocator (PyMem_Malloc: about
 * half the cost of malloc and free at these sizes): every record is made and
 * freed with the GIL held (imports, capsule destructors, buffer holders). */

struct shim_record {
  DLTensor dl;       /* the snapshot: shape and strides point into dims, strides explicit */
  uint64_t flags;    /* the producer's flags (legacy: READ_ONLY | SHIM_FLAG_LEGACY) */
  uint32_t major, minor; /* 0.0 for a legacy tensor */
  int versioned;
  void *managed;     /* the producer's DLManagedTensor(Versioned), deleted with the record */
  void *root;        /* when managed is one of our export views: the holder it keeps (borrowed) */
  shim_capsule_destructor producer_destructor; /* the capsule's own, run after ours; may be NULL */
  void *producer_context; /* the capsule's own context, put back before that destructor runs */
  int64_t dims[];    /* shape[ndim], then strides[ndim] */
};

static void export_deleter_l(DLManagedTensor *self);

static void delete_managed(const shim_pyapi *py, void *managed, int versioned) {
  if (versioned) delete_versioned(py, (DLManagedTensorVersioned *)managed);
  else delete_legacy(py, (DLManagedTensor *)managed);
}

/* A record holding a copy of src's layout with ndim axes (ndim read once
 * by the caller): shape and strides in its dims, NULL strides made explicit
 * (compact row-major, as before DLPack 1.2). The other fields are the
 * caller's to set. NULL with the last error set. */
static shim_record *record_alloc(const shim_pyapi *py, const DLTensor *src, int32_t ndim) {
  shim_record *r = (shim_record *)py->PyMem_Malloc(sizeof(*r) + 2 * (size_t)ndim * sizeof(int64_t));
  if (SHIM_UNLIKELY(r == NULL)) {
    shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory taking a DLPack tensor");
    return NULL;
  }
  r->dl = *src;
  r->dl.ndim = ndim;
  r->dl.shape = ndim > 0 ? r->dims : NULL;
  r->dl.strides = ndim > 0 ? r->dims + ndim : NULL;
  if (ndim > 0) {
    memcpy(r->dims, src->shape, (size_t)ndim * sizeof(int64_t));
    if (src->strides != NULL) {
      memcpy(r->dims + ndim, src->strides, (size_t)ndim * sizeof(int64_t));
    } else if (shim_compact_strides(ndim, r->dims, r->dims + ndim) != 0) {
      py->PyMem_Free(r);
      return NULL;
    }
  }
  r->managed = NULL;
  r->root = NULL;
  r->producer_destructor = NULL;
  r->producer_context = NULL;
  return r;
}

/* Takes `managed` (a producer's tensor, ours from now on): snapshots its
 * layout and validates the snapshot (`built`: a tensor dlpackshim_tensor_new
 * or _clone just made, validated there: not again). NULL with the last error
 * set on failure, after the tensor was deleted (GIL held). */
static shim_record *record_take(const shim_pyapi *py, void *managed, int versioned, int built) {
  const DLTensor *src;
  shim_record *r;
  uint64_t flags;
  int32_t ndim;
  int st;
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)managed;
    if (SHIM_UNLIKELY(m->version.major != 1)) {
      /* Only the version and the deleter may be read: the rest may be laid
       * out differently. */
      uint32_t major = m->version.major, minor = m->version.minor;
      delete_versioned(py, m);
      shim_fail(DLPACKSHIM_ERR_VERSION,
                "DLPack tensor has version %u.%u; dlpackshim implements %d.%d "
                "(major version 1 only)",
                (unsigned)major, (unsigned)minor, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
      return NULL;
    }
    src = &m->dl_tensor;
    flags = m->flags & SHIM_FLAGS_PUBLIC;
  } else {
    src = &((DLManagedTensor *)managed)->dl_tensor;
    /* A legacy tensor says nothing about writability: treat it as read-only
     * (NumPy >= 2.3 does), but let it leave again through the legacy ABI it
     * came in by (SHIM_FLAG_LEGACY). */
    flags = DLPACKSHIM_FLAG_READ_ONLY | SHIM_FLAG_LEGACY;
  }
  ndim = src->ndim; /* read once: the snapshot is sized and filled from this value */
  if (SHIM_UNLIKELY(ndim < 0 || ndim > DLPACKSHIM_MAX_NDIM || (ndim > 0 && src->shape == NULL))) {
    st = ndim < 0 || ndim > DLPACKSHIM_MAX_NDIM
             ? shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                         "invalid DLPack tensor: ndim %d is out of range [0, %d]", (int)ndim,
                         (int)DLPACKSHIM_MAX_NDIM)
             : shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "invalid DLPack tensor: shape is NULL");
    delete_managed(py, managed, versioned);
    return NULL;
  }
  r = record_alloc(py, src, ndim);
  if (SHIM_UNLIKELY(r == NULL)) {
    if (dlpackshim_last_status() == DLPACKSHIM_ERR_NO_MEMORY) {
      delete_managed(py, managed, versioned);
      return NULL;
    }
    st = DLPACKSHIM_ERR_INVALID_TENSOR; /* strides of this shape overflow int64 */
  } else {
    st = built ? 0 : dlpackshim_tensor_validate(&r->dl, versioned ? flags : 0);
  }
  if (SHIM_UNLIKELY(st != 0)) {
    char msg[384];
    snprintf(msg, sizeof(msg), "%s", dlpackshim_last_error());
    py->PyMem_Free(r);
    delete_managed(py, managed, versioned); /* may fail calls of its own: message saved first */
    shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "invalid DLPack tensor: %s", msg);
    return NULL;
  }
  r->flags = flags;
  r->versioned = versioned;
  r->managed = managed;
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)managed;
    r->major = m->version.major;
    r->minor = m->version.minor;
    if (m->deleter == export_deleter_v) r->root = m->manager_ctx;
  } else {
    DLManagedTensor *m = (DLManagedTensor *)managed;
    r->major = r->minor = 0;
    if (m->deleter == export_deleter_l) r->root = m->manager_ctx;
  }
  return r;
}

void shim_record_free(const shim_pyapi *py, shim_record *r) {
  delete_managed(py, r->managed, r->versioned);
  py->PyMem_Free(r);
}

/* Capsules we consumed (or made to own a record): delete the tensor, then
 * hand the capsule back to its producer's destructor as any consumer would
 * leave it (a used_ name, its own pointer and context). The destructor being
 * this one proves the context is our record: only dlpackshim sets it. */
static void owner_destructor(void *cap) {
  const shim_pyapi *py = shim_py_bound();
  shim_record *r;
  shim_capsule_destructor next;
  if (py == NULL) return;
  r = (shim_record *)py->PyCapsule_GetContext(cap);
  if (r == NULL) return;
  next = r->producer_destructor;
  /* Without a destructor of its own the capsule is gone after this: nothing
   * to put back. A name someone else changed since is made "used_" again:
   * the producer's destructor must not delete the tensor a second time. */
  if (next != NULL) {
    const char *used = r->versioned ? USED_V : USED_L;
    py->PyCapsule_SetContext(cap, r->producer_context);
    if (py->PyCapsule_GetName(cap) != used) py->PyCapsule_SetName(cap, used);
  }
  shim_record_free(py, r);
  if (next != NULL) {
    shim_pending_error pending;
    shim_error_set_aside(py, &pending);
    next(cap);
    shim_error_put_back(py, &pending);
  }
}


/* ---- diagnosing what we were given (error paths only) ------------------ */

/* The type name of obj into buf ("?" if Python cannot say). */
static void type_name(const shim_pyapi *py, void *obj, char *buf, size_t size) {
  void *type = py->PyObject_Type(obj), *name = NULL, *bytes = NULL;
  const char *s = NULL;
  if (type != NULL) name = py->PyObject_GetAttrString(type, "__name__");
  if (name != NULL) bytes = py->PyUnicode_AsUTF8String(name);
  if (bytes != NULL) s = py->PyBytes_AsString(bytes);
  snprintf(buf, size, "%s", s != NULL ? s : "?");
  if (bytes != NULL) py->Py_DecRef(bytes);
  if (name != NULL) py->Py_DecRef(name);
  if (type != NULL) py->Py_DecRef(type);
  if (py->PyErr_Occurred() != NULL) py->PyErr_Clear();
}

/* obj is neither a fresh "dltensor_versioned" nor "dltensor" capsule: say why.
 * `what` names the names we wanted. Leaves the Python error state as it was. */
/* Copies at most 60 bytes of a foreign capsule name into out, escaping
 * anything outside printable ASCII as \xNN: the message becomes a Python
 * str, and a name that is not UTF-8 must not turn a BufferError into a
 * UnicodeDecodeError. */
static void printable_name(const char *name, char *out, size_t size) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (size_t i = 0; name[i] != '\0' && i < 60 && o + 5 < size; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c >= 0x20 && c <= 0x7e && c != '\\') {
      out[o++] = (char)c;
    } else {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    }
  }
  out[o] = '\0';
}

static int not_a_dlpack_capsule(const shim_pyapi *py, void *obj, const char *what) {
  void *etype, *evalue, *etb, *type;
  const char *name;
  char buf[128];
  int status;
  if (obj == NULL) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule is NULL (0)");
  py->PyErr_Fetch(&etype, &evalue, &etb);
  type = py->PyObject_Type(obj);
  if (type != py->PyCapsule_Type) {
    type_name(py, obj, buf, sizeof(buf));
    status = shim_fail(DLPACKSHIM_ERR_TYPE, "expected a DLPack PyCapsule, got %s", buf);
  } else {
    name = py->PyCapsule_GetName(obj);
    if (name != NULL && (strcmp(name, USED_V) == 0 || strcmp(name, USED_L) == 0))
      status = shim_fail(DLPACKSHIM_ERR_CAPSULE, "capsule was already consumed");
    else if (name != NULL) {
      printable_name(name, buf, sizeof(buf));
      status = shim_fail(DLPACKSHIM_ERR_CAPSULE, "expected a capsule named %s, got one named \"%s\"",
                         what, buf);
    }
    else
      status = shim_fail(DLPACKSHIM_ERR_CAPSULE, "expected a capsule named %s, got an unnamed capsule",
                         what);
  }
  if (type != NULL) py->Py_DecRef(type);
  if (py->PyErr_Occurred() != NULL) py->PyErr_Clear();
  py->PyErr_Restore(etype, evalue, etb);
  return status;
}

/* ---- consuming ---------------------------------------------------------- */

/* A tensor that failed validation: delete it, then report the validator's
 * message. The message is saved first and the error recorded last, because
 * a deleter may make failing calls of its own (this thread's last error). */
enum { SHIM_MSG_SIZE = 384 };

static void save_last_error(char *buf) { snprintf(buf, SHIM_MSG_SIZE, "%s", dlpackshim_last_error()); }

static int invalid_tensor(const char *msg) {
  return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "invalid DLPack tensor: %s", msg);
}

/* With the GIL held: renames the capsule (ownership is ours from then on:
 * the producer's destructor now ignores it, whatever happens next). Returns
 * 1 (versioned) / 0 (legacy) with *out set to the tensor, or a negative
 * status. A versioned capsule costs one name compare (PyCapsule_GetPointer
 * makes one and fails on any other name; its error is then ours to clear,
 * so it is tried only where no exception is pending). */
static int take_locked(const shim_pyapi *py, void *cap, void **out) {
  if (SHIM_LIKELY(py->PyErr_Occurred() == NULL)) {
    if (SHIM_LIKELY((*out = py->PyCapsule_GetPointer(cap, NAME_V)) != NULL)) {
      py->PyCapsule_SetName(cap, USED_V);
      return 1;
    }
    py->PyErr_Clear(); /* not a "dltensor_versioned" capsule: told below */
  } else if (py->PyCapsule_IsValid(cap, NAME_V)) {
    *out = py->PyCapsule_GetPointer(cap, NAME_V);
    py->PyCapsule_SetName(cap, USED_V);
    return 1;
  }
  if (py->PyCapsule_IsValid(cap, NAME_L)) {
    *out = py->PyCapsule_GetPointer(cap, NAME_L);
    py->PyCapsule_SetName(cap, USED_L);
    return 0;
  }
  return not_a_dlpack_capsule(py, cap, "\"dltensor_versioned\" or \"dltensor\"");
}

/* The import: the capsule becomes the owner of a record (see the top of the
 * file). The record, or NULL with the last error set; after a failure the
 * capsule owns nothing and keeps the producer's destructor. */
static shim_record *consume_locked(const shim_pyapi *py, void *cap) {
  void *managed = NULL;
  shim_record *r;
  int versioned = take_locked(py, cap, &managed);
  if (SHIM_UNLIKELY(versioned < 0)) return NULL;
  r = record_take(py, managed, versioned, 0);
  if (SHIM_UNLIKELY(r == NULL)) return NULL;
  r->producer_destructor = py->PyCapsule_GetDestructor(cap);
  if (r->producer_destructor == producer_destructor) r->producer_destructor = NULL; /* ours: a no-op */
  r->producer_context = py->PyCapsule_GetContext(cap);
  py->PyCapsule_SetContext(cap, r);
  py->PyCapsule_SetDestructor(cap, owner_destructor);
  return r;
}

const shim_record *shim_import_locked(const shim_pyapi *py, void *capsule) {
  return consume_locked(py, capsule);
}

DLPACKSHIM_API int dlpackshim_capsule_import(void *capsule, const DLTensor **tensor_out) {
  const shim_pyapi *py = shim_py();
  const shim_record *r;
  int gil, st = 0;
  if (SHIM_UNLIKELY(py == NULL)) return DLPACKSHIM_ERR_NO_PYTHON;
  if (SHIM_UNLIKELY(capsule == NULL || tensor_out == NULL))
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule_import: %s is NULL",
                     capsule == NULL ? "capsule" : "tensor_out");
  gil = shim_gil_ensure(py);
  r = consume_locked(py, capsule);
  if (r != NULL)
    *tensor_out = &r->dl;
  else
    st = dlpackshim_last_status();
  shim_gil_release(py, gil);
  return st;
}

const shim_record *shim_record_of(const shim_pyapi *py, void *cap) {
  /* The destructor proves the capsule still owns a live record: a failed
   * consume leaves the producer's destructor, and a capsule another consumer
   * renamed has none of ours. */
  if (cap == NULL || !shim_is_exact(py, cap, py->PyCapsule_Type) ||
      py->PyCapsule_GetDestructor(cap) != owner_destructor)
    return NULL;
  return (const shim_record *)py->PyCapsule_GetContext(cap);
}

const DLTensor *shim_owned_tensor(const shim_pyapi *py, void *cap, uint64_t *flags, int *versioned) {
  const shim_record *r = shim_record_of(py, cap);
  if (r == NULL) return NULL;
  if (flags != NULL) *flags = r->flags;
  if (versioned != NULL) *versioned = r->versioned;
  return &r->dl;
}

const DLTensor *shim_record_tensor(const shim_record *r, uint64_t *flags, uint32_t *major,
                                   uint32_t *minor) {
  if (flags != NULL) *flags = r->flags;
  if (major != NULL) *major = r->major;
  if (minor != NULL) *minor = r->minor;
  return &r->dl;
}

DLPACKSHIM_API int dlpackshim_capsule_info(void *capsule, const DLTensor **tensor_out,
                                           uint32_t *major_out, uint32_t *minor_out,
                                           uint64_t *flags_out) {
  const shim_pyapi *py;
  const shim_record *r;
  const DLTensor *t = NULL;
  uint32_t ma = 0, mi = 0;
  uint64_t fl = 0;
  int gil, st = 0;
  py = shim_py();
  if (py == NULL) return DLPACKSHIM_ERR_NO_PYTHON;
  if (capsule == NULL) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule_info: capsule is NULL");
  gil = shim_gil_ensure(py);
  r = shim_record_of(py, capsule);
  if (r != NULL) {
    t = shim_record_tensor(r, &fl, &ma, &mi);
    fl &= SHIM_FLAGS_PUBLIC;
  } else {
    st = not_a_dlpack_capsule(py, capsule, "\"used_dltensor_versioned\" or \"used_dltensor\"");
    if (st == DLPACKSHIM_ERR_CAPSULE)
      st = shim_fail(DLPACKSHIM_ERR_CAPSULE,
                     "not a capsule owning a tensor taken by dlpackshim_capsule_import");
  }
  shim_gil_release(py, gil);
  if (st < 0) return st;
  if (tensor_out != NULL) *tensor_out = t;
  if (major_out != NULL) *major_out = ma;
  if (minor_out != NULL) *minor_out = mi;
  if (flags_out != NULL) *flags_out = fl;
  return DLPACKSHIM_OK;
}

/* ---- producing ---------------------------------------------------------- */

DLPACKSHIM_API int dlpackshim_capsule_new(void *managed, int versioned, void **capsule_out) {
  const shim_pyapi *py = shim_py();
  void *cap;
  int gil;
  if (py == NULL) return DLPACKSHIM_ERR_NO_PYTHON;
  if (managed == NULL || capsule_out == NULL)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule_new: %s is NULL",
                     managed == NULL ? "managed" : "capsule_out");
  gil = shim_gil_ensure(py);
  cap = py->PyCapsule_New(managed, versioned ? NAME_V : NAME_L, producer_destructor);
  if (cap == NULL) py->PyErr_Clear(); /* only out of memory: the tensor stays the caller's */
  shim_gil_release(py, gil);
  if (cap == NULL) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "capsule_new: out of memory");
  *capsule_out = cap;
  return DLPACKSHIM_OK;
}

/* ---- export blocks: malloc, with spares --------------------------------
 * Every export is one block (the managed struct, then shape and strides).
 * Freed blocks are kept for the next export, in a set the GIL guards: the
 * export holds the GIL, and the deleters give a block back inside the GIL
 * hold they take anyway to drop the owner (shim_py_release_keeping; a block
 * is freed when Python can no longer be entered). Every block is at least
 * SPARE_BLOCK_SIZE bytes (up to 4 dimensions, either struct), so any block
 * may be kept, whatever a consumer did to its ndim; one that needs more is
 * taken from malloc. Kept blocks stay reachable (no leak at exit). */
#define SPARE_BLOCK_SIZE (sizeof(DLManagedTensorVersioned) + 2 * 4 * sizeof(int64_t))
static shim_spares spare_blocks;

static void *block_alloc(size_t size) {
  void *block = size <= SPARE_BLOCK_SIZE ? shim_spare_pop(&spare_blocks) : NULL;
  return block != NULL ? block : malloc(size < SPARE_BLOCK_SIZE ? SPARE_BLOCK_SIZE : size);
}

/* With the GIL held. */
static void block_free(void *block) {
  if (!shim_spare_keep(&spare_blocks, block)) free(block);
}

/* The deleters of exported views, from any thread, with or without the GIL
 * (PyTorch calls them without): drop the owner and give the one block back
 * under one GIL hold; once Python is finalizing the owner is left alone and
 * the block freed (dlpackshim_py_release says why). They never read their
 * own `deleter` field: a consumer may swap it for a wrapper that calls the
 * original (dlpackshim.testing's counting deleters do). */
static void export_deleter_v(DLManagedTensorVersioned *self) {
  if (self == NULL) return;
  shim_py_release_keeping(self->manager_ctx, block_free, self);
}

static void export_deleter_l(DLManagedTensor *self) {
  if (self == NULL) return;
  shim_py_release_keeping(self->manager_ctx, block_free, self);
}

/* dst = src with shape and strides copied into dims[0 .. 2*ndim); NULL
 * strides become explicit compact row-major ones (required since DLPack 1.2).
 * Like NumPy, a zero extent counts as 1 when computing strides. */
static int copy_layout(DLTensor *dst, const DLTensor *src, int64_t *dims) {
  int32_t i, n = src->ndim;
  *dst = *src;
  if (n == 0) {
    dst->shape = NULL;
    dst->strides = NULL;
    return 0;
  }
  dst->shape = dims;
  dst->strides = dims + n;
  memcpy(dst->shape, src->shape, (size_t)n * sizeof(int64_t));
  if (src->strides != NULL) {
    memcpy(dst->strides, src->strides, (size_t)n * sizeof(int64_t));
  } else {
    int64_t s = 1;
    for (i = n - 1; i >= 0; i--) {
      dst->strides[i] = s;
      if (i > 0 && src->shape[i] > 1 && __builtin_mul_overflow(s, src->shape[i], &s))
        return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                         "invalid DLPack tensor: compact strides of this shape overflow int64");
    }
  }
  return 0;
}

/* The managed tensor of an export (one block: the struct, then shape, then
 * strides), with manager_ctx = owner, NOT yet retained: the caller takes the
 * reference once nothing can fail any more. NULL with a Python exception set. */
static void *export_block(const shim_pyapi *py, void *owner, const DLTensor *t, uint64_t flags,
                          int versioned, int trusted) {
  size_t head, size;
  void *block;
  int st;
  if (SHIM_UNLIKELY(owner == NULL || t == NULL)) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule_export: %s is NULL (0)",
              owner == NULL ? "owner" : "src");
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  if (SHIM_UNLIKELY(!versioned) && (st = shim_check_flagless(flags)) != 0)
    return shim_py_raise(py, st);
  flags &= SHIM_FLAGS_PUBLIC;
  st = trusted ? 0 : dlpackshim_tensor_validate(t, flags);
  if (SHIM_UNLIKELY(st != 0)) {
    char msg[SHIM_MSG_SIZE];
    save_last_error(msg);
    invalid_tensor(msg);
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_TENSOR);
  }

  /* One block: the managed struct, then shape, then strides. Both struct
   * sizes are multiples of 8, so the int64 arrays are aligned. */
  head = versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor);
  size = head + 2 * (size_t)t->ndim * sizeof(int64_t);
  block = block_alloc(size);
  if (SHIM_UNLIKELY(block == NULL)) {
    shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "capsule_export: out of memory (%zu bytes)", size);
    return shim_py_raise(py, DLPACKSHIM_ERR_NO_MEMORY);
  }
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)block;
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->manager_ctx = owner;
    m->deleter = export_deleter_v;
    m->flags = flags;
    st = copy_layout(&m->dl_tensor, t, (int64_t *)(m + 1));
  } else {
    DLManagedTensor *m = (DLManagedTensor *)block;
    m->manager_ctx = owner;
    m->deleter = export_deleter_l;
    st = copy_layout(&m->dl_tensor, t, (int64_t *)(m + 1));
  }
  if (SHIM_UNLIKELY(st != 0)) {
    block_free(block);
    return shim_py_raise(py, st);
  }
  return block;
}

/* dlpackshim__capsule_export, owner already shim_export_holder's answer;
 * `trusted`: src is a tensor one of our capsules owns, validated when it was
 * taken (not checked again). */
static void *export_capsule(const shim_pyapi *py, void *owner, const DLTensor *src,
                            uint64_t flags, int versioned, int trusted) {
  void *block, *cap;
  block = export_block(py, owner, src, flags, versioned, trusted);
  if (SHIM_UNLIKELY(block == NULL)) return NULL;
  cap = py->PyCapsule_New(block, versioned ? NAME_V : NAME_L, producer_destructor);
  if (SHIM_UNLIKELY(cap == NULL)) {
    block_free(block); /* the owner was not retained yet */
    return NULL;
  }
  py->Py_IncRef(owner);
  return cap;
}

DLPACKSHIM_API void *dlpackshim__capsule_export(void *owner, const DLTensor *src, uint64_t flags,
                                                int versioned) {
  const shim_pyapi *py = shim_py();
  if (SHIM_UNLIKELY(py == NULL)) return NULL;
  return export_capsule(py, shim_export_holder(py, owner), src, flags, versioned, 0);
}

void *shim_export_owned(const shim_pyapi *py, void *owner, const DLTensor *src, uint64_t flags,
                        int versioned) {
  return export_capsule(py, owner, src, flags, versioned, 1);
}

DLManagedTensorVersioned *shim_export_view(const shim_pyapi *py, void *owner, const DLTensor *src,
                                           uint64_t flags) {
  /* src is a tensor a capsule of ours owns: validated when it was taken. */
  DLManagedTensorVersioned *m;
  owner = shim_export_holder(py, owner);
  m = (DLManagedTensorVersioned *)export_block(py, owner, src, flags, 1, 1);
  if (SHIM_LIKELY(m != NULL)) py->Py_IncRef(owner);
  return m;
}

void shim_delete_versioned(const shim_pyapi *py, DLManagedTensorVersioned *t) {
  delete_versioned(py, t);
}

void *shim_export_holder(const shim_pyapi *py, void *holder) {
  /* A capsule holding one of our own export views: its data is the root's,
   * so exports reference the root and chains of re-imports never nest. */
  const shim_record *r = shim_record_of(py, holder);
  return r != NULL && r->root != NULL ? r->root : holder;
}

void *shim_record_export_holder(const shim_pyapi *py, void *holder, const shim_record *r) {
  /* Only a record of one of our export views has a root: the rule above is
   * asked for those alone (holder may be a (capsule, keep) tuple, whose
   * exports reference the tuple). */
  return SHIM_LIKELY(r->root == NULL) ? holder : shim_export_holder(py, holder);
}

/* A capsule that owns record r, as a consumed one does (named, pointing and
 * destroyed alike), or NULL with an exception (r is the caller's then). */
static void *owning_capsule(const shim_pyapi *py, shim_record *r) {
  void *cap = py->PyCapsule_New(r, USED_V, owner_destructor);
  if (SHIM_LIKELY(cap != NULL)) py->PyCapsule_SetContext(cap, r);
  return cap;
}

shim_record *shim_record_new_layout(const shim_pyapi *py, const DLTensor *t, uint64_t flags) {
  shim_record *r;
  int st = dlpackshim_tensor_validate(t, flags);
  if (SHIM_UNLIKELY(st != 0)) return (shim_record *)shim_py_raise(py, st);
  r = record_alloc(py, t, t->ndim); /* managed stays NULL: the holder's keeper owns the memory */
  if (SHIM_UNLIKELY(r == NULL)) return (shim_record *)shim_py_raise(py, dlpackshim_last_status());
  r->flags = flags & SHIM_FLAGS_PUBLIC;
  r->versioned = 1;
  r->major = DLPACK_MAJOR_VERSION;
  r->minor = DLPACK_MINOR_VERSION;
  return r;
}

void *shim_layout_capsule(const shim_pyapi *py, const DLTensor *t, uint64_t flags,
                          const shim_record **record_out) {
  shim_record *r = shim_record_new_layout(py, t, flags);
  void *cap;
  if (SHIM_UNLIKELY(r == NULL)) return NULL;
  cap = owning_capsule(py, r);
  if (SHIM_UNLIKELY(cap == NULL)) py->PyMem_Free(r);
  else if (record_out != NULL) *record_out = r;
  return cap;
}

void *shim_owner_capsule(const shim_pyapi *py, DLManagedTensorVersioned *m, int built,
                         const shim_record **record_out) {
  /* The state dlpackshim_capsule_import leaves a consumed capsule in. */
  shim_record *r = record_take(py, m, 1, built);
  void *cap;
  if (r == NULL) return shim_py_raise(py, dlpackshim_last_status());
  cap = owning_capsule(py, r);
  if (cap == NULL) shim_record_free(py, r);
  else if (record_out != NULL) *record_out = r;
  return cap;
}

/* Legacy wrapper around a versioned clone: the clone owns the data, shape and
 * strides; the wrapper borrows its DLTensor. */
static void copy_deleter_l(DLManagedTensor *self) {
  if (self == NULL) return;
  dlpackshim_tensor_free((DLManagedTensorVersioned *)self->manager_ctx);
  free(self);
}

DLPACKSHIM_API void *dlpackshim__capsule_export_copy(const DLTensor *src, uint64_t flags,
                                                     int versioned) {
  const shim_pyapi *py = shim_py();
  DLManagedTensorVersioned *clone = NULL;
  void *cap;
  int st;
  if (py == NULL) return NULL;
  if (src == NULL) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule_export_copy: src is NULL (0)");
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  if ((st = dlpackshim_tensor_clone(src, flags, &clone)) != 0) return shim_py_raise(py, st);
  if (versioned) {
    cap = py->PyCapsule_New(clone, NAME_V, producer_destructor);
    if (cap == NULL) dlpackshim_tensor_free(clone);
    return cap;
  } else {
    DLManagedTensor *m = (DLManagedTensor *)malloc(sizeof(*m));
    if (m == NULL) {
      dlpackshim_tensor_free(clone);
      shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "capsule_export_copy: out of memory");
      return shim_py_raise(py, DLPACKSHIM_ERR_NO_MEMORY);
    }
    m->dl_tensor = clone->dl_tensor;
    m->manager_ctx = clone;
    m->deleter = copy_deleter_l;
    cap = py->PyCapsule_New(m, NAME_L, producer_destructor);
    if (cap == NULL) copy_deleter_l(m);
    return cap;
  }
}
