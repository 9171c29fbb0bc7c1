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
 * On import the consumed capsule itself becomes the tensor's owner: we rename
 * it and replace its destructor with one of ours that calls the deleter. That
 * costs no allocation and no extra Python object, which is what makes
 * dlpackshim_capsule_import cheap; the caller keeps the capsule alive for as
 * long as it uses the tensor.
 */
#include "internal.h"

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

static void delete_versioned(const shim_pyapi *py, DLManagedTensorVersioned *t) {
  void *type, *value, *tb;
  if (t == NULL || t->deleter == NULL) return;
  if (t->deleter == export_deleter_v) {
    /* One of our views (the exchange table's round trip): the GIL is held
     * here, so drop the owner directly instead of through PyGILState. What
     * that may run keeps pending exceptions itself (CPython's finalizers,
     * this function one level down). */
    py->Py_DecRef(t->manager_ctx);
    free(t);
    return;
  }
  py->PyErr_Fetch(&type, &value, &tb);
  t->deleter(t);
  if (SHIM_UNLIKELY(py->PyErr_Occurred() != NULL)) py->PyErr_WriteUnraisable(NULL);
  py->PyErr_Restore(type, value, tb);
}

static void delete_legacy(const shim_pyapi *py, DLManagedTensor *t) {
  void *type, *value, *tb;
  if (t == NULL || t->deleter == NULL) return;
  py->PyErr_Fetch(&type, &value, &tb);
  t->deleter(t);
  if (SHIM_UNLIKELY(py->PyErr_Occurred() != NULL)) py->PyErr_WriteUnraisable(NULL);
  py->PyErr_Restore(type, value, tb);
}

/* ---- capsule destructors (Python calls them with the GIL held) ---------
 * They use shim_py_bound(), not shim_py(): during Py_FinalizeEx the
 * interpreter already says "not initialized" while it still deallocates
 * objects, and the deleter must still run (NumPy's and ours guard themselves
 * against finalisation). */

/* Capsules we produce: delete the tensor unless a consumer took it. */
static void producer_destructor(void *cap) {
  const shim_pyapi *py = shim_py_bound();
  if (py == NULL) return;
  if (py->PyCapsule_IsValid(cap, NAME_V))
    delete_versioned(py, (DLManagedTensorVersioned *)py->PyCapsule_GetPointer(cap, NAME_V));
  else if (py->PyCapsule_IsValid(cap, NAME_L))
    delete_legacy(py, (DLManagedTensor *)py->PyCapsule_GetPointer(cap, NAME_L));
  /* used_* (or renamed by someone else): not ours to delete. */
}

/* Capsules we consumed: the capsule owns the tensor, delete it now. Two
 * functions so that the destructor itself says versioned or legacy
 * (dlpackshim_owner_info relies on it). */
static void owner_destructor_v(void *cap) {
  const shim_pyapi *py = shim_py_bound();
  if (py == NULL || !py->PyCapsule_IsValid(cap, USED_V)) return;
  free(py->PyCapsule_GetContext(cap)); /* strides filled in by exchange.c, or NULL */
  delete_versioned(py, (DLManagedTensorVersioned *)py->PyCapsule_GetPointer(cap, USED_V));
}

static void owner_destructor_l(void *cap) {
  const shim_pyapi *py = shim_py_bound();
  if (py == NULL || !py->PyCapsule_IsValid(cap, USED_L)) return;
  free(py->PyCapsule_GetContext(cap)); /* strides filled in by exchange.c, or NULL */
  delete_legacy(py, (DLManagedTensor *)py->PyCapsule_GetPointer(cap, USED_L));
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

/* With the GIL held. Returns 1 (versioned) / 0 (legacy) with *out set, or a
 * negative status; after a failure the capsule owns nothing. */
static int consume_locked(const shim_pyapi *py, void *cap, void **out) {
  int st;
  if (SHIM_LIKELY(py->PyCapsule_IsValid(cap, NAME_V))) {
    DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)py->PyCapsule_GetPointer(cap, NAME_V);
    /* Ownership is ours from the rename on: the producer's destructor now
     * ignores the capsule, whatever happens next. */
    py->PyCapsule_SetName(cap, USED_V);
    if (SHIM_UNLIKELY(t->version.major != 1)) {
      /* Only the version and the deleter may be read: the rest may be laid
       * out differently. */
      uint32_t major = t->version.major, minor = t->version.minor;
      py->PyCapsule_SetDestructor(cap, NULL);
      delete_versioned(py, t);
      return shim_fail(DLPACKSHIM_ERR_VERSION,
                       "DLPack tensor has version %u.%u; dlpackshim implements %d.%d "
                       "(major version 1 only)",
                       (unsigned)major, (unsigned)minor, DLPACK_MAJOR_VERSION,
                       DLPACK_MINOR_VERSION);
    }
    st = dlpackshim_tensor_validate(&t->dl_tensor, t->flags);
    if (SHIM_UNLIKELY(st != 0)) {
      char msg[SHIM_MSG_SIZE];
      save_last_error(msg);
      py->PyCapsule_SetDestructor(cap, NULL);
      delete_versioned(py, t);
      return invalid_tensor(msg);
    }
    py->PyCapsule_SetDestructor(cap, owner_destructor_v);
    *out = t;
    return 1;
  }
  if (py->PyCapsule_IsValid(cap, NAME_L)) {
    DLManagedTensor *t = (DLManagedTensor *)py->PyCapsule_GetPointer(cap, NAME_L);
    py->PyCapsule_SetName(cap, USED_L);
    st = dlpackshim_tensor_validate(&t->dl_tensor, 0);
    if (SHIM_UNLIKELY(st != 0)) {
      char msg[SHIM_MSG_SIZE];
      save_last_error(msg);
      py->PyCapsule_SetDestructor(cap, NULL);
      delete_legacy(py, t);
      return invalid_tensor(msg);
    }
    py->PyCapsule_SetDestructor(cap, owner_destructor_l);
    *out = t;
    return 0;
  }
  return not_a_dlpack_capsule(py, cap, "\"dltensor_versioned\" or \"dltensor\"");
}

DLPACKSHIM_API int dlpackshim_capsule_consume(intptr_t capsule, void **managed_out) {
  const shim_pyapi *py;
  void *m = NULL;
  int gil, st;
  if (managed_out == NULL)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "dlpackshim_capsule_consume: managed_out is NULL");
  *managed_out = NULL;
  py = shim_py();
  if (py == NULL) return DLPACKSHIM_ERR_NO_PYTHON;
  if (capsule == 0) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule is NULL (0)");
  gil = shim_gil_ensure(py);
  st = consume_locked(py, (void *)capsule, &m);
  shim_gil_release(py, gil);
  *managed_out = m;
  return st;
}

intptr_t shim_import_locked(const shim_pyapi *py, void *capsule) {
  void *m = NULL;
  int st = consume_locked(py, capsule, &m);
  if (SHIM_LIKELY(st == 1)) return (intptr_t)&((DLManagedTensorVersioned *)m)->dl_tensor;
  if (st == 0) return (intptr_t)&((DLManagedTensor *)m)->dl_tensor;
  return 0;
}

DLPACKSHIM_API intptr_t dlpackshim_capsule_import(intptr_t capsule) {
  const shim_pyapi *py = shim_py();
  intptr_t addr;
  int gil;
  if (SHIM_UNLIKELY(py == NULL)) return 0;
  if (SHIM_UNLIKELY(capsule == 0)) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule is NULL (0)");
    return 0;
  }
  gil = shim_gil_ensure(py);
  addr = shim_import_locked(py, (void *)capsule);
  shim_gil_release(py, gil);
  return addr;
}

const DLTensor *shim_owned_tensor(const shim_pyapi *py, void *cap, uint64_t *flags, int *versioned) {
  /* The destructor proves the capsule still owns a live tensor: a failed
   * consume leaves the used_* name with no destructor, and a capsule another
   * consumer renamed has none of ours. */
  shim_capsule_destructor d;
  if (cap == NULL) return NULL;
  if (py->PyCapsule_IsValid(cap, USED_V)) {
    d = py->PyCapsule_GetDestructor(cap);
    if (d == owner_destructor_v) {
      const DLManagedTensorVersioned *m =
          (const DLManagedTensorVersioned *)py->PyCapsule_GetPointer(cap, USED_V);
      if (flags != NULL) *flags = m->flags;
      if (versioned != NULL) *versioned = 1;
      return &m->dl_tensor;
    }
  } else if (py->PyCapsule_IsValid(cap, USED_L)) {
    d = py->PyCapsule_GetDestructor(cap);
    if (d == owner_destructor_l) {
      if (flags != NULL) *flags = 0;
      if (versioned != NULL) *versioned = 0;
      return &((const DLManagedTensor *)py->PyCapsule_GetPointer(cap, USED_L))->dl_tensor;
    }
  }
  return NULL;
}

DLPACKSHIM_API int dlpackshim_owner_info(intptr_t capsule, uint32_t *major, uint32_t *minor,
                                         uint64_t *flags) {
  const shim_pyapi *py;
  const DLTensor *t;
  uint32_t ma = 0, mi = 0;
  uint64_t fl = 0;
  int gil, st = 0;
  py = shim_py();
  if (py == NULL) return DLPACKSHIM_ERR_NO_PYTHON;
  if (capsule == 0) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule is NULL (0)");
  gil = shim_gil_ensure(py);
  t = shim_owned_tensor(py, (void *)capsule, &fl, &st);
  if (t != NULL && st == 1) {
    /* dl_tensor is the last member: step back to the managed struct. */
    const DLManagedTensorVersioned *m = (const DLManagedTensorVersioned *)(const void *)(
        (const char *)t - offsetof(DLManagedTensorVersioned, dl_tensor));
    ma = m->version.major;
    mi = m->version.minor;
  } else if (t == NULL) {
    st = not_a_dlpack_capsule(py, (void *)capsule,
                              "\"used_dltensor_versioned\" or \"used_dltensor\"");
    if (st == DLPACKSHIM_ERR_CAPSULE)
      st = shim_fail(DLPACKSHIM_ERR_CAPSULE,
                     "not a capsule owning a tensor taken by dlpackshim_capsule_consume/import");
  }
  shim_gil_release(py, gil);
  if (st < 0) return st;
  if (major != NULL) *major = ma;
  if (minor != NULL) *minor = mi;
  if (flags != NULL) *flags = fl;
  return st;
}

DLPACKSHIM_API intptr_t dlpackshim_owner_tensor(intptr_t capsule) {
  const shim_pyapi *py = shim_py();
  const DLTensor *t;
  int gil;
  if (py == NULL) return 0;
  if (capsule == 0) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule is NULL (0)");
    return 0;
  }
  gil = shim_gil_ensure(py);
  t = shim_owned_tensor(py, (void *)capsule, NULL, NULL);
  if (t == NULL &&
      not_a_dlpack_capsule(py, (void *)capsule,
                           "\"used_dltensor_versioned\" or \"used_dltensor\"") == DLPACKSHIM_ERR_CAPSULE)
    shim_fail(DLPACKSHIM_ERR_CAPSULE,
              "not a capsule owning a tensor taken by dlpackshim_capsule_consume/import");
  shim_gil_release(py, gil);
  return (intptr_t)t;
}

/* ---- producing ---------------------------------------------------------- */

DLPACKSHIM_API void *dlpackshim_capsule_new(void *managed, int versioned) {
  const shim_pyapi *py = shim_py();
  if (py == NULL) return NULL;
  if (managed == NULL) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "dlpackshim_capsule_new: managed tensor is NULL");
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  /* On failure PyCapsule_New has set the exception and the tensor stays the caller's. */
  return py->PyCapsule_New(managed, versioned ? NAME_V : NAME_L, producer_destructor);
}

/* The deleters of exported views: drop the owner (dlpackshim_py_release takes
 * the GIL itself, as PyTorch calls deleters without it, and does nothing once
 * Python is finalizing), then free the one block. */
static void export_deleter_v(DLManagedTensorVersioned *self) {
  if (self == NULL) return;
  dlpackshim_py_release(self->manager_ctx);
  free(self);
}

static void export_deleter_l(DLManagedTensor *self) {
  if (self == NULL) return;
  dlpackshim_py_release(self->manager_ctx);
  free(self);
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
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "dlpackshim_capsule_export: %s is NULL (0)",
              owner == NULL ? "owner" : "src");
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  if (SHIM_UNLIKELY(!versioned && (flags & DLPACKSHIM_FLAG_READ_ONLY))) {
    shim_fail(DLPACKSHIM_ERR_READ_ONLY,
              "cannot export a read-only tensor through the legacy (unversioned) DLPack ABI; "
              "pass max_version=(1, 0) or newer");
    return shim_py_raise(py, DLPACKSHIM_ERR_READ_ONLY);
  }
  st = trusted ? 0 : dlpackshim_tensor_validate(t, versioned ? flags : 0);
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
  block = malloc(size);
  if (SHIM_UNLIKELY(block == NULL)) {
    shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "dlpackshim_capsule_export: out of memory (%zu bytes)", size);
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
    free(block);
    return shim_py_raise(py, st);
  }
  return block;
}

/* dlpackshim_capsule_export; `trusted`: src is a tensor one of our capsules
 * owns, validated when it was taken (not checked again). */
static void *export_capsule(const shim_pyapi *py, void *owner, const DLTensor *src,
                            uint64_t flags, int versioned, int trusted) {
  void *block, *cap;
  block = export_block(py, owner, src, flags, versioned, trusted);
  if (SHIM_UNLIKELY(block == NULL)) return NULL;
  cap = py->PyCapsule_New(block, versioned ? NAME_V : NAME_L, producer_destructor);
  if (SHIM_UNLIKELY(cap == NULL)) {
    free(block); /* the owner was not retained yet */
    return NULL;
  }
  py->Py_IncRef(owner);
  return cap;
}

DLPACKSHIM_API void *dlpackshim_capsule_export(intptr_t owner, intptr_t src, uint64_t flags,
                                               int versioned) {
  const shim_pyapi *py = shim_py();
  if (SHIM_UNLIKELY(py == NULL)) return NULL;
  return export_capsule(py, (void *)owner, (const DLTensor *)src, flags, versioned, 0);
}

void *shim_export_owned(const shim_pyapi *py, void *owner, const DLTensor *src, uint64_t flags,
                        int versioned) {
  return export_capsule(py, owner, src, flags, versioned, 1);
}

DLManagedTensorVersioned *shim_export_view(const shim_pyapi *py, void *owner, const DLTensor *src,
                                           uint64_t flags) {
  /* src is a tensor a capsule of ours owns: validated when it was taken. */
  DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)export_block(py, owner, src, flags, 1, 1);
  if (SHIM_LIKELY(m != NULL)) py->Py_IncRef(owner);
  return m;
}

void shim_delete_versioned(const shim_pyapi *py, DLManagedTensorVersioned *t) {
  delete_versioned(py, t);
}

void *shim_owner_capsule(const shim_pyapi *py, DLManagedTensorVersioned *m) {
  /* The state dlpackshim_capsule_import leaves a consumed capsule in. */
  return py->PyCapsule_New(m, USED_V, owner_destructor_v);
}

/* Legacy wrapper around a versioned clone: the clone owns the data, shape and
 * strides; the wrapper borrows its DLTensor. */
static void copy_deleter_l(DLManagedTensor *self) {
  if (self == NULL) return;
  dlpackshim_tensor_free((DLManagedTensorVersioned *)self->manager_ctx);
  free(self);
}

DLPACKSHIM_API void *dlpackshim_capsule_export_copy(intptr_t src, uint64_t flags, int versioned) {
  const shim_pyapi *py = shim_py();
  DLManagedTensorVersioned *clone;
  void *cap;
  if (py == NULL) return NULL;
  if (src == 0) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "dlpackshim_capsule_export_copy: src is NULL (0)");
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  clone = dlpackshim_tensor_clone((const DLTensor *)src, flags);
  if (clone == NULL) {
    int st = dlpackshim_last_status();
    return shim_py_raise(py, st != 0 ? st : DLPACKSHIM_ERR_NO_MEMORY);
  }
  if (versioned) {
    cap = py->PyCapsule_New(clone, NAME_V, producer_destructor);
    if (cap == NULL) dlpackshim_tensor_free(clone);
    return cap;
  } else {
    DLManagedTensor *m = (DLManagedTensor *)malloc(sizeof(*m));
    if (m == NULL) {
      dlpackshim_tensor_free(clone);
      shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "dlpackshim_capsule_export_copy: out of memory");
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
