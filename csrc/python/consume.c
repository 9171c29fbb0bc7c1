/*
 * consume.c - from_dlpack: one function that decides how to import an object.
 *
 * shim_import() reads from top to bottom, as NumPy's from_dlpack does, and
 * takes the first kind the object is:
 *   1. a DLPack capsule ("dltensor_versioned", "dltensor"): consumed;
 *   2. a dlpackshim Tensor: a new Tensor sharing its holder;
 *   3. a DLPack producer (__dlpack__): through its type's C exchange table
 *      when it has a usable one and nothing but the data is asked, else
 *      __dlpack__(max_version=(1, 3), ...) with the standard's fall-backs;
 *   4. the buffer protocol (NumPy asks it before the array interfaces too);
 *   5. __cuda_array_interface__, 6. __array_interface__ (interfaces.c);
 * and then places the result where `device` and `copy` say (place.c).
 * Nothing here enters Python code of the package: the producer's own code
 * and attribute look-ups are the only Python that runs.
 *
 * One memo, for speed (docs/design.md has what it buys): the route of a
 * type whose attributes can never change (immutable, with the generic
 * attribute look-up and no instance __dict__, all of its bases too), and
 * the verdict on a type's exchange table, checked on every use. It is keyed
 * by weak references: it keeps no type alive.
 */
#include "binding.h"

#include <stdio.h>
#include <stdlib.h>

const char SHIM_NAME_V[] = "dltensor_versioned";
const char SHIM_NAME_L[] = "dltensor";
const char SHIM_USED_V[] = "used_dltensor_versioned";
const char SHIM_USED_L[] = "used_dltensor";

/* ---- capsules ---------------------------------------------------------- */

/* Copies at most 60 bytes of a foreign capsule name, escaping what is not
 * printable ASCII as \xNN: a name that is not UTF-8 must not turn the
 * BufferError into a UnicodeDecodeError. */
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

static void owner_destructor(void *cap);

/* Hands a fresh DLPack capsule's tensor over, renaming it "used_...": from
 * then on its producer's destructor leaves the tensor alone. 1 versioned, 0
 * legacy, or a negative status with the last error set (capsule untouched).
 * A capsule dlpackshim_capsule_import took owns its tensor whatever its name
 * says, and one of our exports we took is marked so (shim_export_taken):
 * one renamed back to "dltensor" would be deleted twice. */
static int take_capsule(const shim_pyapi *py, void *cap, void **managed) {
  const char *name;
  char buf[256];
  /* One compare of the name; GetPointer given the capsule's own name pointer
   * compares the pointers only. GetName checks that cap is a capsule. */
  name = py->PyCapsule_GetName(cap);
  if (name == NULL && py->PyErr_Occurred() != NULL) {
    py->PyErr_Clear();
    /* an interrupt in a metaclass's code stays pending: from_dlpack raises
     * it (shim_py_raise), the C API clears it */
    (void)shim_type_name(py, shim_type_of(py, cap), "__name__", buf, sizeof(buf));
    return shim_fail(DLPACKSHIM_ERR_TYPE, "expected a DLPack PyCapsule, got %s", buf);
  }
  if (name != NULL && (strcmp(name, SHIM_NAME_V) == 0 || strcmp(name, SHIM_NAME_L) == 0)) {
    if (py->PyCapsule_GetDestructor(cap) == owner_destructor || shim_export_is_taken(py, cap))
      return shim_fail(DLPACKSHIM_ERR_CAPSULE,
                       "capsule was already consumed (by dlpackshim, and renamed \"%s\" since)",
                       name);
    if ((*managed = py->PyCapsule_GetPointer(cap, name)) != NULL) {
      int versioned = name[8] == '_'; /* "dltensor_versioned" */
      py->PyCapsule_SetName(cap, versioned ? SHIM_USED_V : SHIM_USED_L);
      shim_export_taken(py, cap);
      return versioned;
    }
  }
  if (py->PyErr_Occurred() != NULL) py->PyErr_Clear(); /* a NULL pointer: invalid, told below */
  if (name != NULL && (strcmp(name, SHIM_USED_V) == 0 || strcmp(name, SHIM_USED_L) == 0))
    return shim_fail(DLPACKSHIM_ERR_CAPSULE, "capsule was already consumed");
  if (name == NULL)
    return shim_fail(DLPACKSHIM_ERR_CAPSULE,
                     "expected a capsule named \"dltensor_versioned\" or \"dltensor\", got an "
                     "unnamed capsule");
  printable_name(name, buf, sizeof(buf));
  return shim_fail(DLPACKSHIM_ERR_CAPSULE,
                   "expected a capsule named \"dltensor_versioned\" or \"dltensor\", got one "
                   "named \"%s\"",
                   buf);
}

/* A Tensor owning `managed` (taken in every case): when it is a plain view
 * one of our exports made, it shares that export's holder, so that chains of
 * re-imports never nest; else a holder takes it (checked there). */
void *shim_tensor_take(const shim_pyapi *py, void *managed, int versioned, void *stream) {
  void *root = shim_export_root(managed, versioned), *holder, *t;
  uint64_t flags;
  DLPackVersion version = {0, 0}; /* legacy */
  if (root != NULL) {
    /* What came in is this capsule, not the root's import: its flags and
     * its DLPack version. */
    if (versioned) {
      flags = ((DLManagedTensorVersioned *)managed)->flags & SHIM_FLAGS_PUBLIC;
      version = ((DLManagedTensorVersioned *)managed)->version;
    } else {
      flags = (uint64_t)DLPACKSHIM_FLAG_READ_ONLY | SHIM_FLAG_LEGACY;
    }
    py->Py_IncRef(root);
    shim_delete_managed(managed, versioned); /* the view's own reference goes */
    t = shim_tensor_new(py, root, flags, stream);
    if (t != NULL) shim_tensor_set_version(t, version.major, version.minor);
    return t;
  }
  holder = shim_holder_take(py, managed, versioned, 0);
  if (holder == NULL) return NULL;
  shim_holder_tensor(holder, &flags, NULL, NULL);
  return shim_tensor_new(py, holder, flags, stream);
}

static void *import_capsule(const shim_pyapi *py, void *cap, void *stream) {
  void *managed = NULL;
  int versioned = take_capsule(py, cap, &managed);
  if (versioned < 0) return shim_py_raise(py, versioned);
  return shim_tensor_take(py, managed, versioned, stream);
}

/* ---- dlpackshim_capsule_import: a capsule that owns what it held --------
 * For C callers, which keep the capsule: its context becomes the holder,
 * its destructor ours, which drops the holder (deleting the tensor) and then
 * hands the capsule back to the producer's destructor as any consumer
 * leaves it: a used_ name, its own context. */
typedef struct {
  void *holder;
  shim_capsule_destructor producer_destructor;
  void *producer_context;
} capsule_owner;

static void owner_destructor(void *cap) {
  const shim_pyapi *py = shim_py_bound();
  capsule_owner *o;
  shim_capsule_destructor next;
  const char *used;
  if (py == NULL || (o = (capsule_owner *)py->PyCapsule_GetContext(cap)) == NULL) return;
  next = o->producer_destructor;
  used = shim_holder_tensor(o->holder, NULL, NULL, NULL) != NULL && py->PyCapsule_IsValid(cap, SHIM_USED_L)
             ? SHIM_USED_L
             : SHIM_USED_V;
  py->PyCapsule_SetContext(cap, o->producer_context);
  /* A name someone changed since is made used_ again: the producer's
   * destructor must not delete the tensor a second time. */
  if (strncmp(py->PyCapsule_GetName(cap) ? py->PyCapsule_GetName(cap) : "", "used_", 5) != 0)
    py->PyCapsule_SetName(cap, used);
  py->Py_DecRef(o->holder);
  free(o);
  if (next != NULL) {
    shim_pending_error pending;
    shim_error_set_aside(py, &pending);
    next(cap);
    shim_error_put_back(py, &pending);
  }
}

static capsule_owner *owner_of(const shim_pyapi *py, void *cap) {
  if (shim_type_of(py, cap) != py->PyCapsule_Type ||
      py->PyCapsule_GetDestructor(cap) != owner_destructor)
    return NULL;
  return (capsule_owner *)py->PyCapsule_GetContext(cap);
}

DLPACKSHIM_API int dlpackshim_capsule_import(void *capsule, const DLTensor **tensor_out) {
  const shim_pyapi *py = shim_py();
  void *managed = NULL, *holder;
  capsule_owner *o = NULL;
  int gil, st = 0, versioned;
  if (SHIM_UNLIKELY(py == NULL)) return DLPACKSHIM_ERR_NO_PYTHON;
  if (SHIM_UNLIKELY(capsule == NULL || tensor_out == NULL))
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule_import: %s is NULL",
                     capsule == NULL ? "capsule" : "tensor_out");
  gil = py->PyGILState_Ensure();
  if (shim_holder_types(py) != 0) { /* a C caller that never imported the package */
    py->PyErr_Clear();
    st = shim_fail(DLPACKSHIM_ERR_PYTHON, "capsule_import: cannot make the holder types");
  } else if ((o = (capsule_owner *)malloc(sizeof(*o))) == NULL) {
    st = shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "capsule_import: out of memory");
  } else if ((versioned = take_capsule(py, capsule, &managed)) < 0) {
    py->PyErr_Clear(); /* an interrupt naming the type: the C API leaves no exception */
    st = versioned;
  } else if ((holder = shim_holder_take(py, managed, versioned, 0)) == NULL) {
    py->PyErr_Clear(); /* the status and message are this thread's last error */
    st = dlpackshim_last_status();
  } else {
    o->holder = holder;
    o->producer_destructor = py->PyCapsule_GetDestructor(capsule);
    o->producer_context = py->PyCapsule_GetContext(capsule);
    py->PyCapsule_SetContext(capsule, o);
    py->PyCapsule_SetDestructor(capsule, owner_destructor);
    *tensor_out = shim_holder_tensor(holder, NULL, NULL, NULL);
    o = NULL;
  }
  free(o);
  py->PyGILState_Release(gil);
  return st;
}

DLPACKSHIM_API int dlpackshim_capsule_info(void *capsule, const DLTensor **tensor_out,
                                           uint32_t *major_out, uint32_t *minor_out,
                                           uint64_t *flags_out) {
  const shim_pyapi *py = shim_py();
  const DLTensor *t = NULL;
  const capsule_owner *o;
  uint32_t major = 0, minor = 0;
  uint64_t flags = 0;
  int gil, st = 0;
  if (py == NULL) return DLPACKSHIM_ERR_NO_PYTHON;
  if (capsule == NULL) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "capsule_info: capsule is NULL");
  gil = py->PyGILState_Ensure();
  if (shim_type_of(py, capsule) != py->PyCapsule_Type) {
    char name[256]; /* as take_capsule says it: the type it got */
    if (shim_type_name(py, shim_type_of(py, capsule), "__name__", name, sizeof(name)) != 0)
      py->PyErr_Clear(); /* the C API leaves no exception */
    st = shim_fail(DLPACKSHIM_ERR_TYPE, "capsule_info: expected a DLPack PyCapsule, got %s", name);
  } else if ((o = owner_of(py, capsule)) == NULL)
    st = shim_fail(DLPACKSHIM_ERR_CAPSULE,
                   "not a capsule owning a tensor taken by dlpackshim_capsule_import");
  else
    t = shim_holder_tensor(o->holder, &flags, &major, &minor);
  py->PyGILState_Release(gil);
  if (st < 0) return st;
  if (tensor_out != NULL) *tensor_out = t;
  if (major_out != NULL) *major_out = major;
  if (minor_out != NULL) *minor_out = minor;
  if (flags_out != NULL) *flags_out = flags & SHIM_FLAGS_PUBLIC;
  return DLPACKSHIM_OK;
}

/* ---- arguments ------------------------------------------------------------ */

/* An int of Python (not a bool) that fits int64 into *out: 1; 0 for another
 * kind of object; -1 with OverflowError's ValueError for a value too large. */
static int int64_of(const shim_pyapi *py, void *obj, int64_t *out, const char *what) {
  void *tp = shim_type_of(py, obj);
  long long v;
  if (tp == py->PyBool_Type || !(tp == py->PyLong_Type || py->PyType_IsSubtype(tp, py->PyLong_Type)))
    return 0;
  v = py->PyLong_AsLongLong(obj);
  if (v == -1 && py->PyErr_Occurred() != NULL) {
    if (!py->PyErr_ExceptionMatches(*py->PyExc_OverflowError)) return -1;
    py->PyErr_Clear();
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s does not fit in 64 bits", what);
  }
  *out = v;
  return 1;
}

int shim_parse_device(const shim_pyapi *py, void *obj, const char *what, DLDevice *out) {
  int64_t type = 0, id = 0;
  int r = 0;
  void *tp = shim_type_of(py, obj);
  if (shim_pkg.device_type != NULL && py->PyType_IsSubtype(tp, shim_pkg.device_type)) {
    r = int64_of(py, obj, &type, what); /* a DeviceType: (type, 0) */
  } else if ((tp == py->PyTuple_Type || py->PyType_IsSubtype(tp, py->PyTuple_Type)) &&
             py->PyTuple_Size(obj) == 2) {
    r = int64_of(py, py->PyTuple_GetItem(obj, 0), &type, what);
    if (r == 1) r = int64_of(py, py->PyTuple_GetItem(obj, 1), &id, what);
  }
  if (r < 0) return -1;
  if (r == 0)
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE,
                       "%s must be a dlpackshim.Device, a (device_type, device_id) tuple of ints or a "
                       "dlpackshim.DeviceType",
                       what);
  if (type < INT32_MIN || type > INT32_MAX || id < INT32_MIN || id > INT32_MAX)
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                       "%s (%lld, %lld): device type and id are int32 values", what, (long long)type,
                       (long long)id);
  out->device_type = (DLDeviceType)type;
  out->device_id = (int32_t)id;
  return 0;
}

int shim_parse_copy(const shim_pyapi *py, void *obj, int *out) {
  if (obj == py->Py_None) *out = -1;
  else if (obj == py->Py_True) *out = 1;
  else if (obj == py->Py_False) *out = 0;
  else {
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "copy must be True, False or None");
  }
  return 0;
}

int shim_parse_stream(const shim_pyapi *py, void *obj, int *has, int64_t *out) {
  int r;
  *has = 0;
  if (obj == py->Py_None) return 0;
  r = int64_of(py, obj, out, "stream");
  if (r < 0) return -1;
  if (r == 0)
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "stream must be None or an int");
  *has = 1;
  return 0;
}

/* ---- calling producers ---------------------------------------------------- */

typedef void *(*fastcall_kw_fn)(void *self, void *const *args, ptrdiff_t nargs, void *kwnames);

static void *kw_mv; /* ("max_version",): the keywords of the plain call */
static void *method_descriptor; /* the type of a C type's methods (memo_sealed) */

/* callable(**dict(zip(kwnames, vals))). Vectorcall where the stable ABI has
 * it (3.12+); on 3.11 a C method's own fast convention when it has one, else
 * a keyword dict. */
static void *call_kw(const shim_pyapi *py, void *callable, void *const *vals, void *kwnames) {
  ptrdiff_t i, n = kwnames != NULL ? py->PyTuple_Size(kwnames) : 0;
  void *kwargs, *empty, *r = NULL, *fn;
  if (py->PyObject_Vectorcall != NULL) return py->PyObject_Vectorcall(callable, vals, 0, kwnames);
  if (shim_type_of(py, callable) == py->PyCFunction_Type &&
      py->PyCFunction_GetFlags(callable) == (SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS)) {
    fastcall_kw_fn call;
    fn = py->PyCFunction_GetFunction(callable);
    memcpy(&call, &fn, sizeof(fn));
    r = call(py->PyCFunction_GetSelf(callable), vals, 0, n > 0 ? kwnames : NULL);
    if (r == NULL && py->PyErr_Occurred() == NULL)
      shim_py_fail(py, DLPACKSHIM_ERR_PYTHON, "__dlpack__ returned NULL without an exception");
    return r;
  }
  kwargs = py->PyDict_New();
  empty = py->PyTuple_New(0);
  for (i = 0; kwargs != NULL && empty != NULL && i < n; i++)
    if (py->PyDict_SetItem(kwargs, py->PyTuple_GetItem(kwnames, i), vals[i]) != 0) break;
  if (kwargs != NULL && empty != NULL && i == n) r = py->PyObject_Call(callable, empty, kwargs);
  if (kwargs != NULL) py->Py_DecRef(kwargs);
  if (empty != NULL) py->Py_DecRef(empty);
  return r;
}

/* x.__dlpack_device__() as a DLDevice; NotArrayLikeError without it. */
static int producer_device(const shim_pyapi *py, void *x, DLDevice *out) {
  void *fn, *dev;
  int found = shim_lookup(py, x, shim_str(SHIM_STR_DLPACK_DEVICE), &fn), st;
  if (found < 0) return -1;
  if (found == 0) {
    py->PyErr_SetString(shim_pkg.not_array_like,
                        "the object has __dlpack__ but no __dlpack_device__");
    return -1;
  }
  dev = py->PyObject_CallFunctionObjArgs(fn, NULL);
  py->Py_DecRef(fn);
  if (dev == NULL) return -1;
  st = shim_parse_device(py, dev, "__dlpack_device__()", out);
  shim_drop(py, dev); /* the producer's: an error may be pending */
  return st;
}

/* An error fetched into (t, v, tb), put back when `back` (any error set
 * meanwhile, by a producer's __dlpack_device__, cleared), else dropped. A
 * KeyboardInterrupt or SystemExit set meanwhile stays instead. */
static void restore_error(const shim_pyapi *py, void *t, void *v, void *tb, int back) {
  if (back && shim_py_clear(py) == 0) {
    py->PyErr_Restore(t, v, tb);
    return;
  }
  shim_drop(py, t); /* an interrupt may be pending */
  shim_drop(py, v);
  shim_drop(py, tb);
}

static int same_device(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

/* 1 when data on `own` is seen on `target` without a copy. */
static int viewable(DLDevice own, DLDevice target) {
  return same_device(own, target) ||
         (target.device_type == kDLCPU && target.device_id == 0 && shim_host_accessible(own.device_type));
}

static void *copy_needed(const shim_pyapi *py, DLDevice own, DLDevice target) {
  /* Array API 2024.12 from_dlpack, Raises: "ValueError - If data exchange is
   * possible via an explicit copy but copy is set to False." */
  return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                      "from_dlpack: copy=False, but placing data from (%d, %d) on (%d, %d) "
                      "needs a copy",
                      (int)own.device_type, (int)own.device_id, (int)target.device_type,
                      (int)target.device_id);
}

/* A keyword call's pieces: up to four names and their values. */
typedef struct {
  void *names[4], *vals[4];
  int n;
} kw_call;

static void kw_add(kw_call *k, int name, void *value) {
  k->names[k->n] = shim_str(name);
  k->vals[k->n++] = value;
}

/* dl(**k), with a names tuple of its own unless it is the plain call. */
static void *call_with(const shim_pyapi *py, void *dl, const kw_call *k) {
  void *names, *r;
  if (k->n == 1 && k->names[0] == shim_str(SHIM_STR_MAX_VERSION)) return call_kw(py, dl, k->vals, kw_mv);
  if (k->n == 0) return py->PyObject_CallFunctionObjArgs(dl, NULL);
  names = py->PyTuple_New(k->n);
  if (names == NULL) return NULL;
  for (int i = 0; i < k->n; i++) {
    py->Py_IncRef(k->names[i]);
    py->PyTuple_SetItem(names, i, k->names[i]);
  }
  r = call_kw(py, dl, k->vals, names);
  py->Py_DecRef(names);
  return r;
}

/* The stream a Tensor imported on consumer stream `consumer` records (*out:
 * NULL for the device's default, and for -1: the caller orders its work
 * itself). CUDA's per-thread default stream (2) is another stream in every
 * thread: the data is made ready on the legacy default stream instead (an
 * event; the host does not block), and the default recorded. */
int shim_stream_to_record(const shim_pyapi *py, DLDevice dev, int64_t consumer, void **out) {
  int64_t def;
  *out = NULL;
  if (dlpackshim_stream_check(dev.device_type, 0, 0, &def) != 0 || consumer == -1 || consumer == def)
    return 0;
  if (consumer == 2 && def == 1) {
    int st = dlpackshim_stream_wait(dev.device_type, dev.device_id, 2, 1);
    return st != 0 ? shim_py_raise_err(py, st) : 0;
  }
  *out = py->PyLong_FromLongLong(consumer);
  return *out == NULL ? -1 : 0;
}

/* A producer that cannot export raises BufferError (DLPack); PyTorch's
 * table lets its c10::Error out as a RuntimeError carrying a C++ backtrace,
 * and asked for a device it cannot reach, PyTorch raises NotImplementedError
 * and JAX RuntimeError. Those two exactly (not their subclasses, such as
 * PyTorch's OutOfMemoryError) become BufferError with the message's first
 * part, and the device asked when `asked`; every other exception stays. */
static void map_producer_error(const shim_pyapi *py, const DLDevice *asked) {
  void *t, *v, *tb, *s = NULL;
  const char *msg = NULL, *cut;
  ptrdiff_t len = 0;
  py->PyErr_Fetch(&t, &v, &tb);
  if (t != *py->PyExc_RuntimeError && t != *py->PyExc_NotImplementedError) {
    py->PyErr_Restore(t, v, tb);
    return;
  }
  /* Normalized while nothing is pending (3.11 may hand out the raw value,
   * and making the instance runs Python code); then its class is known. */
  py->PyErr_NormalizeException(&t, &v, &tb);
  if (t != *py->PyExc_RuntimeError && t != *py->PyExc_NotImplementedError) {
    py->PyErr_Restore(t, v, tb);
    return;
  }
  if (v != NULL && (s = py->PyObject_Str(v)) != NULL) msg = py->PyUnicode_AsUTF8AndSize(s, &len);
  if (msg == NULL) {
    (void)shim_py_clear(py); /* an interrupt stays, over the BufferError below */
    msg = "";
  }
  cut = strstr(msg, "\nException raised from ");
  if (cut != NULL) len = cut - msg;
  while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' ')) len--;
  len = (ptrdiff_t)shim_utf8_cut(msg, (size_t)(len < 400 ? len : 400));
  if (asked != NULL)
    shim_fail(DLPACKSHIM_ERR_UNSUPPORTED, "the producer cannot export to dl_device=(%d, %d)%s%.*s",
              (int)asked->device_type, (int)asked->device_id, len != 0 ? ": " : "", (int)len,
              msg);
  else
    shim_fail(DLPACKSHIM_ERR_UNSUPPORTED, "%.*s", (int)len,
              len != 0 ? msg : "the producer's exchange table cannot export the object");
  /* The producer's exception becomes the BufferError's __cause__ (its type
   * and traceback kept). What can run Python code (a decref) runs while no
   * exception is pending: a destructor may clear one. */
  if (v != NULL && tb != NULL) (void)py->PyException_SetTraceback(v, tb);
  if (s != NULL) py->Py_DecRef(s);
  if (t != NULL) py->Py_DecRef(t);
  if (tb != NULL) py->Py_DecRef(tb);
  shim_py_raise(py, DLPACKSHIM_ERR_UNSUPPORTED);
  if (v != NULL) {
    void *bt, *bv, *btb;
    int ours = py->PyErr_ExceptionMatches(*py->PyExc_Exception); /* not an interrupt */
    py->PyErr_Fetch(&bt, &bv, &btb);
    if (ours) py->PyErr_NormalizeException(&bt, &bv, &btb);
    if (ours && bv != NULL)
      py->PyException_SetCause(bv, v); /* steals v */
    else
      py->Py_DecRef(v);
    py->PyErr_Restore(bt, bv, btb);
  }
}

/* Calls an older producer again after it refused the keywords (a TypeError)
 * or the device or the copy (BufferError, NotImplementedError: PyTorch and
 * NumPy's ways to say it; apache-tvm-ffi cannot copy): with max_version
 * alone, then (after another TypeError) as a legacy producer; `stream`
 * (may be NULL) rides along, being older than the other keywords. Only
 * when dlpackshim can then itself honour what the dropped keywords asked
 * (*own: the producer's device, known whenever a device or copy is asked);
 * else the producer's error stands: a TypeError becomes a BufferError
 * saying why, and a refusal of dl_device (sent_device) the standard's
 * BufferError (map_producer_error). The capsule, or NULL with an exception. */
static void *call_again(const shim_pyapi *py, void *dl, const shim_request *rq, const DLDevice *own,
                        int sent_device, void *stream, int *sent_copy) {
  kw_call k = {{NULL}, {NULL}, 0};
  void *t, *v, *tb, *cap;
  const int extras = sent_device || *sent_copy;
  int type_error = py->PyErr_ExceptionMatches(*py->PyExc_TypeError);
  if (!type_error && !((rq->has_device || rq->copy == 1) &&
                       (py->PyErr_ExceptionMatches(*py->PyExc_BufferError) ||
                        py->PyErr_ExceptionMatches(*py->PyExc_NotImplementedError)))) {
    if (sent_device) map_producer_error(py, &rq->device); /* its refusal stands */
    return NULL;
  }
  py->PyErr_Fetch(&t, &v, &tb);
  if (!shim_placeable(*own, rq)) {
    /* The TypeError goes before ours is raised (its traceback holds the
     * producer's frames: Python code may run as it goes). */
    if (type_error) restore_error(py, t, v, tb, 0);
    else py->PyErr_Restore(t, v, tb);
    if (type_error)
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                   "the producer's __dlpack__ does not take the DLPack 2023.12 keywords, and "
                   "dlpackshim cannot do what they ask itself (dl_device=(%d, %d), copy=%s): it "
                   "moves data only between a GPU and the host",
                   (int)rq->device.device_type, (int)rq->device.device_id,
                   rq->copy < 0 ? "None" : rq->copy ? "True" : "False");
    else if (sent_device)
      map_producer_error(py, &rq->device);
    return NULL;
  }
  restore_error(py, t, v, tb, 0);
  *sent_copy = 0;
  kw_add(&k, SHIM_STR_MAX_VERSION, shim_pkg.max_version);
  if (stream != NULL) kw_add(&k, SHIM_STR_STREAM, stream);
  /* Without `extras` (dl_device, copy) the first call was this one: legacy next. */
  cap = extras ? call_with(py, dl, &k) : NULL;
  if (cap == NULL && (!extras || py->PyErr_ExceptionMatches(*py->PyExc_TypeError))) {
    py->PyErr_Clear();
    k.n = 0;
    if (stream != NULL) kw_add(&k, SHIM_STR_STREAM, stream);
    cap = call_with(py, dl, &k);
  }
  return cap;
}

/* x, a producer whose bound __dlpack__ is dl: asks it for max_version (1,
 * 3), plus dl_device when rq's device is not the producer's own, copy when
 * given and stream for GPU data (not with a CPU dl_device: a CPU consumer
 * has no stream). `known`: the producer's device, when a plain call's
 * capsule told it (else __dlpack_device__ is asked when something is asked).
 * *copied: the producer says it made the copy asked for. */
static void *import_producer(const shim_pyapi *py, void *x, void *dl, const shim_request *rq,
                             const DLDevice *known, int refused, int *copied) {
  DLDevice own = {kDLCPU, 0};
  kw_call k = {{NULL}, {NULL}, 0};
  void *dl_device = NULL, *stream = NULL, *cap = NULL, *t = NULL, *record = NULL;
  int64_t consumer = -1, restore = -1;
  int know_own = 0, want_device = 0, gpu = 0, sent_copy = 0, sent_stream;
  if (known != NULL) {
    own = *known;
    know_own = 1;
  } else if (rq->has_device || rq->has_stream || rq->copy >= 0) { /* the producer's device is asked */
    if (producer_device(py, x, &own) != 0) return NULL;
    know_own = 1;
  }
  gpu = know_own && shim_gpu_family(own.device_type) != NULL;
  if (rq->has_device && !same_device(own, rq->device)) {
    /* ValueError when a copy would do; where dlpackshim cannot move the data
     * at all, the producer is asked (its BufferError, as for copy=None). */
    shim_request with_copy = *rq;
    with_copy.copy = 1;
    if (rq->copy == 0 && !viewable(own, rq->device) && shim_placeable(own, &with_copy))
      return copy_needed(py, own, rq->device);
    want_device = 1;
  }
  if (rq->has_stream || gpu) {
    /* Checked before the producer runs; None stands for the default stream. */
    int st = dlpackshim_stream_check(own.device_type, rq->has_stream, rq->stream, &consumer);
    if (st != 0) return shim_py_raise(py, st);
  }
  kw_add(&k, SHIM_STR_MAX_VERSION, shim_pkg.max_version);
  if (want_device) {
    /* Signed: C makes the enum (positive values only) unsigned, and -1 would
     * reach the producer as 4294967295. */
    void *kind = py->PyLong_FromLongLong((int32_t)rq->device.device_type);
    void *id = kind != NULL ? py->PyLong_FromLongLong(rq->device.device_id) : NULL;
    if (id != NULL) dl_device = py->PyTuple_Pack(2, kind, id);
    if (kind != NULL) py->Py_DecRef(kind);
    if (id != NULL) py->Py_DecRef(id);
    if (dl_device == NULL) return NULL;
    kw_add(&k, SHIM_STR_DL_DEVICE, dl_device);
  }
  if (rq->copy >= 0) {
    kw_add(&k, SHIM_STR_COPY, rq->copy ? py->Py_True : py->Py_False);
    sent_copy = 1;
  }
  /* A GPU producer gets the consumer's stream, None named explicitly (PyTorch
   * takes a missing stream for "no synchronisation"); not with a CPU
   * dl_device (a CPU consumer has no stream), but on the retries. */
  if (gpu && (stream = py->PyLong_FromLongLong(consumer)) == NULL) goto done;
  if (stream != NULL && !want_device) kw_add(&k, SHIM_STR_STREAM, stream);
  sent_stream = stream != NULL && !want_device;
  /* PyTorch exports a tensor of its current device only: make it current. */
  if (gpu && shim_gpu_on_device(own.device_type)) {
    int count = 0;
    if (dlpackshim_gpu_runtime_info(own.device_type, NULL, NULL, &count) == 0 && count > 1 &&
        dlpackshim_gpu_set_device(own.device_type, own.device_id, &restore) != 0) {
      shim_py_raise(py, dlpackshim_last_status());
      goto done;
    }
  }
  if (refused) k.n = 0; /* the plain call (max_version alone) raised TypeError: legacy */
  cap = call_with(py, dl, &k);
  if (cap == NULL && !refused) {
    cap = call_again(py, dl, rq, &own, want_device, stream, &sent_copy);
    sent_stream = stream != NULL;
  }
  if (cap == NULL) goto done;
  if (sent_stream && shim_stream_to_record(py, own, consumer, &record) != 0) goto done;
  t = import_capsule(py, cap, record);
  /* Trusted only when the producer says it copied (IS_COPIED): one that
   * ignores the keyword is copied again by the placement. One that copies
   * when told copy=False breaks the protocol: refused. */
  if (t != NULL && rq->copy >= 0) {
    void *holder;
    uint64_t flags = 0;
    if (shim_tensor_parts(py, t, &holder, &flags, NULL) != NULL) {
      *copied = sent_copy && rq->copy == 1 && (flags & DLPACKSHIM_FLAG_IS_COPIED) != 0;
      if (rq->copy == 0 && (flags & DLPACKSHIM_FLAG_IS_COPIED)) {
        shim_drop(py, t);
        t = shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                         "from_dlpack: copy=False, but the producer's export is a copy "
                         "(IS_COPIED)");
      }
    }
  }
done:
  if (restore != -1 && dlpackshim_gpu_restore_device(own.device_type, restore) != 0 && t != NULL) {
    py->Py_DecRef(t); /* a failure to restore matters only when all else went well */
    t = shim_py_raise(py, dlpackshim_last_status());
  }
  if (cap != NULL) shim_drop(py, cap); /* an error may be pending */
  if (dl_device != NULL) py->Py_DecRef(dl_device);
  if (stream != NULL) py->Py_DecRef(stream);
  if (record != NULL) py->Py_DecRef(record);
  return t;
}

/* ---- foreign exchange tables ------------------------------------------------
 * A producer type may carry a C table (__dlpack_c_exchange_api__, dlpack.h
 * 1.3) that hands a tensor over without a capsule or a Python call. It is
 * used for plain imports (no device, no stream) when it is a capsule named
 * "dlpack_exchange_api", a table of major version 1 is found along prev_api,
 * it stands for the type's __dlpack__ (no class below the one carrying the
 * table overrides __dlpack__), and the package's guard_for(type) does not
 * refuse it. Anything else: __dlpack__, which gives the same data. */

/* The major-1 table reachable from h with the entry consumers call, or NULL. */
static const DLPackExchangeAPI *pick_version(const DLPackExchangeAPIHeader *h) {
  for (int hops = 0; h != NULL && hops < 64; h = h->prev_api, hops++)
    if (h->version.major == 1) {
      const DLPackExchangeAPI *api = (const DLPackExchangeAPI *)h;
      return api->managed_tensor_from_py_object_no_sync != NULL ? api : NULL;
    }
  return NULL;
}

/* type's table, or NULL (*error: 1 when the look-up raised), with *owner a
 * new reference to the capsule that carries it: held while the table is
 * used, since Python code that runs meanwhile (the producer's, a guard) may
 * take the attribute away, and the capsule may own the table's memory. */
static const DLPackExchangeAPI *table_of(const shim_pyapi *py, void *type, int *error,
                                         void **owner) {
  void *cap;
  const DLPackExchangeAPI *api = NULL;
  int found = shim_lookup(py, type, shim_str(SHIM_STR_EXCHANGE_API), &cap);
  *error = found < 0;
  *owner = NULL;
  if (found <= 0) return NULL;
  if (py->PyCapsule_IsValid(cap, SHIM_EXCHANGE_API_NAME))
    api = pick_version((const DLPackExchangeAPIHeader *)py->PyCapsule_GetPointer(cap, SHIM_EXCHANGE_API_NAME));
  if (api != NULL) *owner = cap;
  else py->Py_DecRef(cap);
  return api;
}

/* 1 when, walking type's MRO, the class that defines the table comes no
 * later than the first that defines __dlpack__ (class G(torch.Tensor) with a
 * __dlpack__ of its own must be asked through it); 0 otherwise; -1 with an
 * exception. *own: 1 when type itself decided it (the table or __dlpack__
 * in its own __dict__). */
static int table_stands_for_dunder(const shim_pyapi *py, void *type, int *own) {
  void *mro = py->PyObject_GetAttr(type, shim_str(SHIM_STR_MRO));
  ptrdiff_t i, n;
  int r = 0;
  *own = 0;
  if (mro == NULL) return -1;
  n = shim_type_of(py, mro) == py->PyTuple_Type ? py->PyTuple_Size(mro) : 0;
  for (i = 0; i < n; i++) {
    void *d = py->PyObject_GetAttr(py->PyTuple_GetItem(mro, i), shim_str(SHIM_STR_DICT));
    int has_api = d != NULL ? py->PySequence_Contains(d, shim_str(SHIM_STR_EXCHANGE_API)) : -1;
    int has_dunder = has_api < 0 ? -1 : py->PySequence_Contains(d, shim_str(SHIM_STR_DLPACK));
    shim_drop(py, d); /* a metaclass's: an error may be pending (so below) */
    if (has_api < 0 || has_dunder < 0) {
      r = -1;
      break;
    }
    if (has_api || has_dunder) {
      r = has_api;
      *own = i == 0;
      break;
    }
  }
  shim_drop(py, mro);
  return r;
}

/* ---- the guard -------------------------------------------------------------
 * guard_for(type), the package's (dlpackshim/_consume.py), says which checks
 * a producer's __dlpack__ makes and its table skips (PyTorch's table exports
 * conjugate and negative views raw): None (none), NotImplemented (the table
 * does not stand for the type's __dlpack__), or (callable, checks[, False]),
 * each check (name, expected, call, code): obj.name (or obj.name() when
 * call) compared by identity with expected, before the export (code -1) or
 * after it when the export's dtype code is `code`. When one differs the
 * callable decides: it raises the producer's own error. A third item False
 * says the answer read classes that may change: it is not remembered. An
 * answer of another form, or an exception, gives no checks to make: the
 * table is not used then (__dlpack__ makes its own checks). */

/* guard_for's answer, read once: (callable, checks[, False]), each check
 * (name, expected, call, code). Its items are borrowed from the tuple,
 * which the plan's holder keeps (a tuple never changes). */
enum { GUARD_CHECKS = 8 };
typedef struct {
  void *guard; /* the tuple; NULL: no guard */
  void *fn;
  int lasting; /* 0: judged again on the next import (the third item False) */
  int n;
  struct {
    void *name, *expected;
    int call, code;
  } check[GUARD_CHECKS];
} guard_plan;

/* 1 with *plan read from g when g has the form above: an exact tuple
 * (callable, checks) or (callable, checks, False), checks an exact tuple of
 * at most GUARD_CHECKS exact 4-tuples (str, any, True or False, an int from
 * -1 to 255). Anything else (guard_for gone wrong) means no guard can be
 * run: the table is not used. */
static int guard_parse(const shim_pyapi *py, void *g, guard_plan *plan) {
  void *checks;
  ptrdiff_t i, n, size = shim_is_exact(py, g, py->PyTuple_Type) ? py->PyTuple_Size(g) : 0;
  if ((size != 2 && !(size == 3 && py->PyTuple_GetItem(g, 2) == py->Py_False)) ||
      !shim_is_exact(py, checks = py->PyTuple_GetItem(g, 1), py->PyTuple_Type) ||
      (n = py->PyTuple_Size(checks)) > GUARD_CHECKS)
    return 0;
  plan->guard = g;
  plan->fn = py->PyTuple_GetItem(g, 0);
  plan->lasting = size == 2;
  plan->n = (int)n;
  for (i = 0; i < n; i++) {
    void *c = py->PyTuple_GetItem(checks, i), *call, *code;
    long long v;
    if (!shim_is_exact(py, c, py->PyTuple_Type) || py->PyTuple_Size(c) != 4 ||
        !shim_is_exact(py, py->PyTuple_GetItem(c, 0), py->PyUnicode_Type))
      return 0;
    call = py->PyTuple_GetItem(c, 2);
    code = py->PyTuple_GetItem(c, 3);
    if ((call != py->Py_True && call != py->Py_False) || !shim_is_exact(py, code, py->PyLong_Type))
      return 0;
    v = py->PyLong_AsLongLong(code);
    if (v == -1 && py->PyErr_Occurred() != NULL) {
      py->PyErr_Clear(); /* too large */
      return 0;
    }
    if (v < -1 || v > 255) return 0;
    plan->check[i].name = py->PyTuple_GetItem(c, 0);
    plan->check[i].expected = py->PyTuple_GetItem(c, 1);
    plan->check[i].call = call == py->Py_True;
    plan->check[i].code = (int)v;
  }
  return 1;
}

/* The checks of plan whose code is `code` (-1: before the export); when a
 * value differs, the guard's callable, which raises the producer's error. */
static int run_guard(const shim_pyapi *py, const guard_plan *plan, void *x, int code) {
  int i, differs = 0;
  for (i = 0; i < plan->n && !differs; i++) {
    void *v;
    if (plan->check[i].code != code) continue;
    v = plan->check[i].call ? py->PyObject_CallMethodObjArgs(x, plan->check[i].name, NULL)
                            : py->PyObject_GetAttr(x, plan->check[i].name);
    if (v == NULL) return -1;
    differs = v != plan->check[i].expected;
    py->Py_DecRef(v);
  }
  if (differs) {
    void *r = py->PyObject_CallFunctionObjArgs(plan->fn, x, NULL);
    if (r == NULL) return -1;
    py->Py_DecRef(r);
  }
  return 0;
}

/* The table refused x with a BufferError: the guard's callable may say why
 * in the producer's own words (PyTorch's table says "Cannot access data
 * pointer" for a sparse tensor, its __dlpack__ names the layout). */
static void explain_failure(const shim_pyapi *py, const guard_plan *plan, void *x) {
  void *t, *v, *tb, *r;
  if (!py->PyErr_ExceptionMatches(*py->PyExc_BufferError)) return;
  py->PyErr_Fetch(&t, &v, &tb);
  r = py->PyObject_CallFunctionObjArgs(plan->fn, x, NULL);
  if (r == NULL) { /* its exception replaces the table's */
    if (t != NULL) py->Py_DecRef(t);
    if (v != NULL) py->Py_DecRef(v);
    if (tb != NULL) py->Py_DecRef(tb);
    return;
  }
  py->Py_DecRef(r);
  py->PyErr_Restore(t, v, tb);
}

/* GPU data is ready on the producer's current work stream; a Tensor
 * promises the default one: make it wait (the host does not block). */
static int sync_to_default(const shim_pyapi *py, const DLPackExchangeAPI *api, DLDevice dev) {
  void *stream = NULL;
  int64_t consumer;
  int st;
  if (shim_gpu_family(dev.device_type) == NULL || api->current_work_stream == NULL ||
      dlpackshim_stream_check(dev.device_type, 0, 0, &consumer) != 0)
    return 0;
  if (api->current_work_stream(dev.device_type, dev.device_id, &stream) != 0 ||
      py->PyErr_Occurred() != NULL) { /* an exception set with 0 is a failure too */
    if (py->PyErr_Occurred() == NULL) shim_py_fail(py, DLPACKSHIM_ERR_DEVICE, "current_work_stream failed");
    return -1;
  }
  st = dlpackshim_stream_wait(dev.device_type, dev.device_id, (int64_t)(intptr_t)stream, consumer);
  return st != 0 ? shim_py_raise_err(py, st) : 0;
}

/* x's tensor through api, checked as every import is (tensor.c). */
static void *import_table(const shim_pyapi *py, void *x, const DLPackExchangeAPI *api,
                          const guard_plan *plan) {
  DLManagedTensorVersioned *m = NULL;
  const DLTensor *t;
  DLDevice device;
  void *tensor, *holder;
  int status, code;
  if (plan->guard != NULL && run_guard(py, plan, x, -1) != 0) return NULL;
  status = api->managed_tensor_from_py_object_no_sync(x, &m);
  if (SHIM_UNLIKELY(status == 0 && py->PyErr_Occurred() != NULL))
    status = -1; /* success and an exception both: a failure */
  if (SHIM_UNLIKELY(status != 0 && m != NULL)) {
    /* dlpack.h: NULL on failure. A tensor handed out all the same is
     * deleted, once (the exception set aside meanwhile: a deleter may run
     * Python code). */
    shim_pending_error e;
    shim_error_set_aside(py, &e);
    shim_delete_managed(m, 1);
    shim_error_put_back(py, &e);
    m = NULL;
  }
  if (SHIM_UNLIKELY(status != 0 || m == NULL)) {
    if (status == 0)
      shim_py_fail(py, DLPACKSHIM_ERR_INVALID_TENSOR, "managed_tensor_from_py_object_no_sync "
                                                      "returned no tensor");
    else if (py->PyErr_Occurred() == NULL)
      shim_py_fail(py, DLPACKSHIM_ERR_PYTHON, "managed_tensor_from_py_object_no_sync failed "
                                              "without setting an exception");
    else
      map_producer_error(py, NULL);
    if (plan->guard != NULL) explain_failure(py, plan, x);
    return NULL;
  }
  tensor = shim_tensor_take(py, m, 1, NULL);
  if (tensor == NULL) return NULL;
  /* Read before the guard's Python code runs: it may close the new Tensor. */
  t = shim_tensor_parts(py, tensor, &holder, NULL, NULL);
  code = t->dtype.code;
  device = t->device;
  if ((plan->guard != NULL && run_guard(py, plan, x, code) != 0) ||
      sync_to_default(py, api, device) != 0) {
    py->Py_DecRef(tensor);
    return NULL;
  }
  return tensor;
}

/* ---- the memo -------------------------------------------------------------
 * What a type's attributes say of its objects, remembered for two kinds of
 * type: a *sealed* one, whose attributes can never change (immutable, the
 * generic attribute look-up, no instance __dict__, every base immutable:
 * numpy.ndarray, bytes, array.array), and a type whose exchange table was
 * judged (its verdict checked on every use: judge_table). Entries hold weak references, never the type, and nothing
 * else the type references; the guard is the package's own tuple. */
enum { ROUTE_PRODUCER = 1, ROUTE_TABLE, ROUTE_BUFFER, ROUTE_CUDA, ROUTE_ARRAY };
enum { MEMO_SIZE = 16 };

typedef struct {
  void *type;                    /* compared by address while wr lives */
  void *wr;                      /* weak reference to the type; NULL: a free entry */
  int route;
  int sealed;
  fastcall_kw_fn dlpack;         /* 3.11, a sealed producer: its __dlpack__'s C function */
  const DLPackExchangeAPI *api;  /* ROUTE_TABLE: the table judged */
  guard_plan plan;               /* ROUTE_TABLE: guard_for's answer (plan.guard a reference) */
} memo_entry;

static memo_entry memo[MEMO_SIZE];
/* memo[i]'s type, apart, in sets of MEMO_WAYS by the type's address: a miss
 * (a first sight, every object of a type that cannot be remembered) reads
 * four pointers. */
enum { MEMO_WAYS = 4 };
static void *memo_type[MEMO_SIZE];

static int memo_set(void *type) {
  uintptr_t a = (uintptr_t)type;
  return (int)(((a >> 4) ^ (a >> 10)) % (MEMO_SIZE / MEMO_WAYS)) * MEMO_WAYS;
}
static unsigned memo_next;
static int memo_off; /* _configure(use_tables, False): what the memo buys (benchmarks) */

/* Drops what an entry held (it is no longer in the memo: a decref may run
 * Python code, which may use the memo). */
static void memo_drop(const shim_pyapi *py, const memo_entry *old) {
  if (old->wr != NULL) py->Py_DecRef(old->wr);
  if (old->plan.guard != NULL) py->Py_DecRef(old->plan.guard);
}

static void memo_clear(const shim_pyapi *py, memo_entry *e) {
  memo_entry old = *e;
  memset(e, 0, sizeof(*e));
  memo_type[e - memo] = NULL;
  memo_drop(py, &old);
}

static memo_entry *memo_find(const shim_pyapi *py, void *type) {
  int set = memo_set(type);
  for (int i = set; i < set + MEMO_WAYS; i++)
    if (memo_type[i] == type)
      return memo[i].wr != NULL && py->PyWeakref_GetObject(memo[i].wr) == type ? &memo[i] : NULL;
  return NULL;
}

/* A new entry for type, to be filled and then stored: 0 with its weak
 * reference to the type, -1 when none can be made (nothing is remembered). */
static int memo_begin(const shim_pyapi *py, void *type, memo_entry *fresh) {
  memset(fresh, 0, sizeof(*fresh));
  if (memo_off) return -1;
  if ((fresh->wr = py->PyWeakref_NewRef(type, NULL)) == NULL) {
    py->PyErr_Clear();
    return -1;
  }
  fresh->type = type;
  return 0;
}

/* Stores a whole entry (its references handed over) in a free entry of its
 * type's set, the type's own or the oldest: nothing runs between its first
 * field and its last, and what it replaces is dropped afterwards. */
static void memo_store(const shim_pyapi *py, const memo_entry *fresh) {
  memo_entry old;
  int set = memo_set(fresh->type), slot = -1;
  for (int i = set; i < set + MEMO_WAYS && slot < 0; i++)
    if (memo[i].wr == NULL || memo[i].type == fresh->type ||
        py->PyWeakref_GetObject(memo[i].wr) != memo[i].type)
      slot = i;
  if (slot < 0) slot = set + (int)(memo_next++ % MEMO_WAYS);
  old = memo[slot];
  memo[slot] = *fresh;
  memo_type[slot] = fresh->type;
  memo_drop(py, &old);
}

/* cls's __mro__, __dict__ or __dictoffset__ (name) as `type` itself gives it, through its
 * own descriptor (type.__dict__[name].__get__(cls)): a metaclass's attribute
 * of that name cannot stand in. A new reference, or NULL with an exception. */
static void *type_own(const shim_pyapi *py, void *cls, int name) {
  void *type = shim_type_of(py, py->PyLong_Type); /* `type`, its own metaclass */
  void *d = py->PyObject_GetAttr(type, shim_str(SHIM_STR_DICT)), *descr = NULL, *get = NULL;
  void *r = NULL;
  if (d != NULL) descr = py->PyObject_GetItem(d, shim_str(name));
  if (descr != NULL) get = py->PyObject_GetAttr(descr, shim_str(SHIM_STR_GET));
  if (get != NULL) r = py->PyObject_CallFunctionObjArgs(get, cls, NULL);
  shim_drop(py, get);
  shim_drop(py, descr);
  shim_drop(py, d);
  return r;
}

/* 1 when type's attributes can never change for any of its objects. */
static int is_sealed(const shim_pyapi *py, void *type) {
  void *v;
  ptrdiff_t i, n;
  long long dictoffset;
  int sealed = 1;
  if (!(py->PyType_GetFlags(type) & TPFLAGS_IMMUTABLETYPE) ||
      py->PyType_GetSlot(type, Py_tp_getattro) != py->PyType_GetSlot(py->PyBaseObject_Type, Py_tp_getattro))
    return 0;
  if ((v = type_own(py, type, SHIM_STR_DICTOFFSET)) == NULL) return -1;
  dictoffset = py->PyLong_AsLongLong(v);
  py->Py_DecRef(v);
  if (dictoffset != 0) return dictoffset == -1 && py->PyErr_Occurred() != NULL ? -1 : 0;
  if ((v = type_own(py, type, SHIM_STR_MRO)) == NULL) return -1;
  n = shim_type_of(py, v) == py->PyTuple_Type ? py->PyTuple_Size(v) : 0;
  for (i = 0; i < n && sealed; i++)
    sealed = (py->PyType_GetFlags(py->PyTuple_GetItem(v, i)) & TPFLAGS_IMMUTABLETYPE) != 0;
  py->Py_DecRef(v);
  return n > 0 && sealed;
}

/* 1 when a class of type's MRO holds name in its own __dict__, with
 * *value (a new reference, when value is not NULL) the first such entry:
 * what an object of a sealed type finds (it has no instance dict), read
 * without calling a descriptor or a metaclass (the type's own look-up
 * does both). 0 when none does; -1 with an exception. */
static int mro_holds(const shim_pyapi *py, void *type, int name, void **value) {
  void *mro = type_own(py, type, SHIM_STR_MRO), *d;
  ptrdiff_t i, n;
  int r = 0;
  if (mro == NULL) return -1;
  n = shim_type_of(py, mro) == py->PyTuple_Type ? py->PyTuple_Size(mro) : 0;
  for (i = 0; i < n && r == 0; i++) { /* the tuple, ours, keeps its items */
    d = type_own(py, py->PyTuple_GetItem(mro, i), SHIM_STR_DICT);
    r = d != NULL ? py->PySequence_Contains(d, shim_str(name)) : -1;
    if (r == 1 && value != NULL && (*value = py->PyObject_GetItem(d, shim_str(name))) == NULL) r = -1;
    shim_drop(py, d);
  }
  shim_drop(py, mro);
  return r;
}

/* Remembers route for a sealed type, when its classes decide it for every
 * object: a producer's __dlpack__ a method of the type (a method
 * descriptor, which binds each object to its one C function; a property,
 * or a builtin bound to one object, may hand the next object another); for
 * the other routes no __dlpack__ in its classes at all, and for an array
 * interface not the other interface either (each may be a descriptor that
 * answers for one object and raises for the next). On 3.11 it keeps the
 * method's C function, to call it without a bound method. Nothing is
 * remembered of an object that is no array, nor when an Exception stops
 * these checks (a metaclass's code): the import goes on unremembered. 0, or
 * -1 with an exception (an interrupt). */
static int memo_sealed(const shim_pyapi *py, void *type, void *x, int route, void *dl) {
  memo_entry fresh;
  void *fn = NULL, *attr = NULL;
  int sealed = is_sealed(py, type), found = 0, method = 0;
  if (sealed > 0 && (found = mro_holds(py, type, SHIM_STR_DLPACK, &attr)) == 1)
    method = shim_type_of(py, attr) == method_descriptor;
  shim_drop(py, attr);
  if (sealed > 0 && found == 0 && (route == ROUTE_CUDA || route == ROUTE_ARRAY))
    found = mro_holds(py, type, route == ROUTE_CUDA ? SHIM_STR_ARRAY_INTERFACE
                                                    : SHIM_STR_CUDA_ARRAY_INTERFACE, NULL);
  if (sealed < 0 || found < 0) {
    if (!py->PyErr_ExceptionMatches(*py->PyExc_Exception)) return -1;
    py->PyErr_Clear();
    return 0;
  }
  if (sealed == 0) return 0;
  if (route == ROUTE_PRODUCER) {
    if (!method || dl == NULL || shim_type_of(py, dl) != py->PyCFunction_Type ||
        py->PyCFunction_GetSelf(dl) != x)
      return 0;
    if (py->PyCFunction_GetFlags(dl) == (SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS))
      fn = py->PyCFunction_GetFunction(dl);
  } else if (found) {
    return 0; /* a __dlpack__, or the other interface, may answer for the next object */
  }
  if (memo_begin(py, type, &fresh) != 0) return 0;
  fresh.route = route;
  fresh.sealed = 1;
  memcpy(&fresh.dlpack, &fn, sizeof(fn));
  memo_store(py, &fresh);
  return 0;
}

/* 1 when type's own __dict__ holds a table (not only a base's); 0 when
 * not; -1 with an exception. */
static int carries_table(const shim_pyapi *py, void *type) {
  void *d = py->PyObject_GetAttr(type, shim_str(SHIM_STR_DICT));
  int r = d != NULL ? py->PySequence_Contains(d, shim_str(SHIM_STR_EXCHANGE_API)) : -1;
  shim_drop(py, d);
  return r;
}

/* The table of x's type to use, with its guard (*plan; plan->guard a new
 * reference, or NULL), or NULL when __dlpack__ is to be used (*error: 1
 * with an exception). The table is the type's attribute (dlpack.h 1.3), so
 * both are looked up on the type. Python code may run here (look-ups,
 * guard_for): what a memo entry holds is copied before any of it.
 *
 * A verdict is remembered for a sealed type, and for a mutable one only
 * when the type carries the table itself (torch.Tensor): then it holds
 * while the type's own __dict__ still holds the same table, checked on each
 * use, for nothing else decides it: the table then stands for __dlpack__,
 * and a guard's answer that read classes that may change says so (a third
 * item False) and is not remembered. A subclass (nn.Parameter) is judged
 * afresh on each import: its classes may change in any way. */
static const DLPackExchangeAPI *judge_table(const shim_pyapi *py, void *type, guard_plan *plan,
                                            void **owner, int *error) {
  const DLPackExchangeAPI *api, *remembered = NULL;
  memo_entry *e = memo_find(py, type);
  memo_entry fresh;
  void *g;
  int stands, sealed = 0, own;
  plan->guard = NULL;
  if (e != NULL && e->route == ROUTE_TABLE) {
    remembered = e->api;
    sealed = e->sealed;
    *plan = e->plan;
    if (plan->guard != NULL) py->Py_IncRef(plan->guard);
  }
  api = table_of(py, type, error, owner);
  if (remembered != NULL && api == remembered && !*error) {
    int same = sealed || carries_table(py, type);
    if (same > 0) return api;
    *error = same < 0;
  }
  if (plan->guard != NULL) py->Py_DecRef(plan->guard);
  plan->guard = NULL;
  if (api == NULL || *error) return NULL;
  /* Judged afresh: the table must stand for __dlpack__ and the guard allow it. */
  if ((stands = table_stands_for_dunder(py, type, &own)) <= 0) {
    *error = stands < 0;
    return NULL;
  }
  if (shim_pkg.guard_for == NULL) {
    g = NULL;
  } else if ((g = py->PyObject_CallFunctionObjArgs(shim_pkg.guard_for, type, NULL)) == NULL) {
    /* A guard that fails: no table, __dlpack__ checks. KeyboardInterrupt
     * and SystemExit are not failures of the guard: they go on. */
    if (!py->PyErr_ExceptionMatches(*py->PyExc_Exception)) *error = 1;
    else py->PyErr_Clear();
    return NULL;
  } else if (g == py->Py_None) {
    py->Py_DecRef(g);
    g = NULL;
  } else if (g == py->Py_NotImplemented || !guard_parse(py, g, plan)) {
    py->Py_DecRef(g);
    plan->guard = NULL;
    return NULL;
  }
  if ((sealed = is_sealed(py, type)) < 0) {
    if (g != NULL) py->Py_DecRef(g);
    plan->guard = NULL;
    *error = 1;
    return NULL;
  }
  if ((sealed || own) && (g == NULL || plan->lasting) && memo_begin(py, type, &fresh) == 0) {
    fresh.route = ROUTE_TABLE;
    fresh.sealed = sealed;
    fresh.api = api;
    if (g != NULL) {
      py->Py_IncRef(g);
      fresh.plan = *plan;
    }
    memo_store(py, &fresh);
  }
  return api;
}

/* judge_table, with *owner (the table's capsule) released when no table is
 * to be used. */
static const DLPackExchangeAPI *usable_table(const shim_pyapi *py, void *type, guard_plan *plan,
                                             void **owner, int *error) {
  const DLPackExchangeAPI *api = judge_table(py, type, plan, owner, error);
  if (api == NULL && *owner != NULL) {
    py->Py_DecRef(*owner);
    *owner = NULL;
  }
  return api;
}

/* A producer called through __dlpack__ (a device or stream asked for, or
 * tables off) whose type has a table with a guard gets the guard's checks
 * before the export all the same: PyTorch's __dlpack__ exports a view with
 * the negative bit raw, as its table does (silently wrong values). 0, or -1
 * with the guard's exception. */
static int guard_dunder(const shim_pyapi *py, void *x, void *type) {
  guard_plan plan;
  void *owner = NULL;
  int error = 0;
  const DLPackExchangeAPI *api = judge_table(py, type, &plan, &owner, &error);
  if (api != NULL && plan.guard != NULL && run_guard(py, &plan, x, -1) != 0) error = 1;
  if (plan.guard != NULL) py->Py_DecRef(plan.guard);
  if (owner != NULL) py->Py_DecRef(owner);
  return error ? -1 : 0;
}

/* ---- from_dlpack ---------------------------------------------------------- */

/* Refuses a stream for data the host reads (only None or -1 are allowed). */
static int check_host_stream(const shim_pyapi *py, const shim_request *rq) {
  int64_t out;
  int st = rq->has_stream ? dlpackshim_stream_check(kDLCPU, 1, rq->stream, &out) : 0;
  return st != 0 ? shim_py_raise_err(py, st) : 0;
}

static void *not_array_like(const shim_pyapi *py, void *x, void *type, int is_class) {
  char module[128], name[256], msg[640];
  if (shim_type_name(py, is_class ? x : type, "__module__", module, sizeof(module)) != 0 ||
      shim_type_name(py, is_class ? x : type, "__qualname__", name, sizeof(name)) != 0)
    return NULL; /* an interrupt in a metaclass's code */
  if (is_class)
    snprintf(msg, sizeof(msg), "from_dlpack: expected an array, got the class %s.%s itself (a "
             "type); pass an instance of it", module, name);
  else
    snprintf(msg, sizeof(msg), "from_dlpack: expected an object with __dlpack__ and "
             "__dlpack_device__, a DLPack PyCapsule, or an object with the buffer protocol, "
             "__cuda_array_interface__ or __array_interface__; got %s.%s", module, name);
  py->PyErr_SetString(shim_pkg.not_array_like, msg);
  return NULL;
}

/* A sealed producer's plain call, by name (its __dlpack__ is known to be
 * the type's): no bound method is made. 3.11, without vectorcall in the
 * stable ABI, calls the method's C function (fn) directly. */
static void *call_sealed(const shim_pyapi *py, void *x, fastcall_kw_fn fn) {
  void *args[2] = {x, shim_pkg.max_version}, *r;
  if (py->PyObject_VectorcallMethod != NULL)
    return py->PyObject_VectorcallMethod(shim_str(SHIM_STR_DLPACK), args, 1, kw_mv);
  r = fn(x, args + 1, 0, kw_mv);
  if (r == NULL && py->PyErr_Occurred() == NULL)
    shim_py_fail(py, DLPACKSHIM_ERR_PYTHON, "__dlpack__ returned NULL without an exception");
  return r;
}

/* After a plain call failed (its exception set): 1 when x's
 * __dlpack_device__ says GPU (*dev; the exception cleared, to ask again),
 * else 0 with the plain call's exception put back. */
static int gpu_producer(const shim_pyapi *py, void *x, DLDevice *dev) {
  void *t, *v, *tb;
  int gpu;
  py->PyErr_Fetch(&t, &v, &tb);
  gpu = producer_device(py, x, dev) == 0 && shim_gpu_family(dev->device_type) != NULL;
  restore_error(py, t, v, tb, !gpu); /* what __dlpack_device__ said of itself matters less */
  return gpu;
}

/* x, a DLPack producer (dl: its bound __dlpack__, or NULL for a sealed type
 * called by name through fn). A plain request goes out as NumPy's
 * from_dlpack makes it: max_version alone, the standard's stream=None, no
 * __dlpack_device__. When the capsule holds GPU data it is let go and the
 * producer asked again on the device the capsule named, made current, with
 * the consumer's stream named: PyTorch takes a missing stream for "no
 * synchronisation", and exports a tensor of its current device only (a
 * plain call that fails is asked again so when __dlpack_device__ says GPU).
 * So nothing is remembered of a type's devices, and one that exports both
 * kinds is right every time. */
static void *import_from_producer(const shim_pyapi *py, void *x, void *dl, fastcall_kw_fn fn,
                                  const shim_request *rq, int *copied) {
  void *cap, *t, *owned = NULL, *holder, *first = NULL;
  const DLTensor *d;
  DLDevice gpu, *known = NULL;
  int found, refused = 0;
  if (!rq->has_device && !rq->has_stream && rq->copy < 0) {
    cap = dl != NULL ? call_kw(py, dl, &shim_pkg.max_version, kw_mv) : call_sealed(py, x, fn);
    if (cap != NULL) {
      t = import_capsule(py, cap, NULL);
      shim_drop(py, cap); /* an error may be pending */
      if (t == NULL || (d = shim_tensor_parts(py, t, &holder, NULL, NULL)) == NULL ||
          shim_gpu_family(d->device.device_type) == NULL)
        return t;
      gpu = d->device;
      known = &gpu;
      first = t; /* kept until the second export is in: a producer may refuse it */
    } else if (py->PyErr_ExceptionMatches(*py->PyExc_TypeError)) {
      /* An older producer: the full call's fall-backs follow, naming the
       * consumer's stream for GPU data (PyTorch 1.10-1.12's __dlpack__ took
       * a missing stream for "no synchronisation"); else the legacy call. */
      py->PyErr_Clear();
      if (gpu_producer(py, x, &gpu) > 0) known = &gpu;
      else if (py->PyErr_Occurred() != NULL) return NULL; /* an interrupt */
      else refused = 1;
    } else if (!py->PyErr_ExceptionMatches(*py->PyExc_Exception) || gpu_producer(py, x, &gpu) <= 0) {
      return NULL; /* the producer's error stands */
    } else {
      known = &gpu; /* PyTorch refuses a tensor of another device than the current one */
    }
  }
  if (dl == NULL) {
    if ((found = shim_lookup(py, x, shim_str(SHIM_STR_DLPACK), &owned)) == 0)
      py->PyErr_SetString(*py->PyExc_AttributeError, "__dlpack__");
    dl = owned;
  }
  t = dl != NULL ? import_producer(py, x, dl, rq, known, refused, copied) : NULL;
  if (owned != NULL) py->Py_DecRef(owned);
  if (first != NULL) {
    if (t == NULL && py->PyErr_ExceptionMatches(*py->PyExc_Exception)) {
      py->PyErr_Clear(); /* refused with a stream: the plain export, ready on the default one */
      return first;
    }
    shim_drop(py, first); /* the producer's first tensor goes (an interrupt may be pending) */
  }
  return t;
}

/* x, neither a capsule nor one of our Tensors, as it comes (rq honoured as
 * far as its producer does; the placement follows); e: its type's memo entry. */
static void *import_object(const shim_pyapi *py, void *x, void *type, memo_entry *e,
                           const shim_request *rq, int *copied) {
  int plain = !rq->has_device && !rq->has_stream, found, error = 0, route = 0;
  fastcall_kw_fn fn = NULL;
  void *dl = NULL, *iface = NULL, *t;
  if (e != NULL && e->sealed) {
    route = e->route;
    fn = e->dlpack;
  }
  if (py->PyType_GetFlags(type) & TPFLAGS_TYPE_SUBCLASS) /* numpy.ndarray itself has its */
    return not_array_like(py, x, type, 1);             /* instances' attributes */
  if (route == ROUTE_PRODUCER && (fn != NULL || py->PyObject_VectorcallMethod != NULL))
    return import_from_producer(py, x, NULL, fn, rq, copied);
  if (route == 0 || route == ROUTE_PRODUCER || route == ROUTE_TABLE) {
    /* A type whose table was judged goes to it straight (its verdict is
     * checked there, on the type); any other is a producer only when its
     * objects have __dlpack__ (a look-up that misses cheaply, where one on
     * the type raises and clears an AttributeError on CPython < 3.13). */
    int table_known = e != NULL && e->route == ROUTE_TABLE;
    found = 1;
    if (!table_known && (found = shim_lookup(py, x, shim_str(SHIM_STR_DLPACK), &dl)) < 0) return NULL;
    if (found && plain && shim_pkg.use_tables && route != ROUTE_PRODUCER) {
      guard_plan plan;
      void *owner = NULL;
      const DLPackExchangeAPI *api = usable_table(py, type, &plan, &owner, &error);
      if (api != NULL || error) {
        t = error ? NULL : import_table(py, x, api, &plan);
        if (plan.guard != NULL) py->Py_DecRef(plan.guard);
        shim_drop(py, owner); /* the producer's (so below): an error may be pending */
        shim_drop(py, dl);
        return t;
      }
    }
    if (found && dl == NULL && (found = shim_lookup(py, x, shim_str(SHIM_STR_DLPACK), &dl)) < 0)
      return NULL; /* the table went: __dlpack__ now */
    if (found && !(plain && shim_pkg.use_tables) && route != ROUTE_PRODUCER &&
        guard_dunder(py, x, type) != 0) {
      shim_drop(py, dl);
      return NULL;
    }
    if (found) {
      t = NULL;
      if (route == 0 && memo_sealed(py, type, x, ROUTE_PRODUCER, dl) < 0) error = 1;
      if (!error) t = import_from_producer(py, x, dl, NULL, rq, copied);
      shim_drop(py, dl);
      return t;
    }
  }
  if ((route == 0 || route == ROUTE_BUFFER) && py->PyObject_CheckBuffer(x)) {
    if (check_host_stream(py, rq) != 0) return NULL;
    if (route == 0 && memo_sealed(py, type, x, ROUTE_BUFFER, NULL) < 0) return NULL;
    return shim_buffer_tensor(py, x);
  }
  if (route == 0 || route == ROUTE_CUDA) {
    if ((found = shim_lookup(py, x, shim_str(SHIM_STR_CUDA_ARRAY_INTERFACE), &iface)) < 0) return NULL;
    if (found) {
      t = route == 0 && memo_sealed(py, type, x, ROUTE_CUDA, NULL) < 0
              ? NULL
              : shim_cuda_interface_tensor(py, x, iface, rq);
      shim_drop(py, iface); /* the producer's: an error may be pending */
      return t;
    }
  }
  if (route == 0 || route == ROUTE_ARRAY) {
    if ((found = shim_lookup(py, x, shim_str(SHIM_STR_ARRAY_INTERFACE), &iface)) < 0) return NULL;
    if (found) {
      t = check_host_stream(py, rq) != 0 ||
                  (route == 0 && memo_sealed(py, type, x, ROUTE_ARRAY, NULL) < 0)
              ? NULL
              : shim_array_interface_tensor(py, x, iface);
      shim_drop(py, iface); /* the producer's: an error may be pending */
      return t;
    }
  }
  return not_array_like(py, x, type, 0);
}

/* A Tensor of x's data as it is, honouring rq's stream (a capsule was made
 * already: the stream is only checked and recorded). */
static void *import_as_is(const shim_pyapi *py, void *x, const shim_request *rq, int *copied) {
  void *type = shim_type_of(py, x), *t, *holder, *record = NULL;
  const DLTensor *dl;
  uint64_t flags;
  int64_t consumer;
  int st;
  if (type == py->PyCapsule_Type) {
    t = import_capsule(py, x, NULL);
  } else if (!rq->has_stream && type == shim_pkg.tensor_class) {
    void *stream;
    /* Our own Tensor: a new one sharing its holder, not an exclusive copy
     * (the placement does what device and copy ask; a stream is the
     * producer's business: its __dlpack__ orders its work before it). A
     * subclass may override __dlpack__: it is a producer like any other. */
    if ((dl = shim_tensor_parts(py, x, &holder, &flags, &stream)) == NULL) return NULL;
    py->Py_IncRef(holder);
    return shim_tensor_new(py, holder, flags & ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED, stream);
  } else {
    /* x's own code may assign x.__class__ and free a mutable type: held; a
     * sealed type is immutable, and CPython refuses to reassign those */
    memo_entry *e = memo_find(py, type);
    int hold = e == NULL || !e->sealed;
    if (hold) py->Py_IncRef(type);
    t = import_object(py, x, type, e, rq, copied);
    if (hold) py->Py_DecRef(type);
    return t;
  }
  if (t == NULL || !rq->has_stream) return t;
  dl = shim_tensor_parts(py, t, &holder, &flags, NULL);
  st = dlpackshim_stream_check(dl->device.device_type, 1, rq->stream, &consumer);
  if (st == 0 && shim_stream_to_record(py, dl->device, consumer, &record) == 0 && record != NULL) {
    py->Py_IncRef(holder); /* t may own the only reference to it */
    py->Py_DecRef(t);      /* the same data, recorded as ready on `consumer` */
    t = shim_tensor_new(py, holder, flags, record);
    py->Py_DecRef(record);
    return t;
  }
  if (st != 0) shim_py_raise(py, st);
  if (py->PyErr_Occurred() != NULL) {
    py->Py_DecRef(t);
    return NULL;
  }
  return t;
}

/* x as from_dlpack hands it back: imported, then placed as rq asks. Our own
 * Tensor is placed from its own holder, with no Tensor made in between (a
 * one-element copy=True: 183 -> 148 ns); the holder and stream are held
 * meanwhile, since a large copy lets other threads run and one may close x. */
void *shim_import(const shim_pyapi *py, void *x, const shim_request *rq) {
  int copied = 0, own, r;
  void *t = NULL, *src, *out = NULL;
  shim_data d;
  if (!rq->has_device && rq->copy != 1) return import_as_is(py, x, rq, &copied);
  own = !rq->has_stream && shim_type_of(py, x) == shim_pkg.tensor_class;
  src = own ? x : (t = import_as_is(py, x, rq, &copied));
  if (src == NULL) return NULL;
  if (shim_tensor_parts(py, src, &d.holder, &d.flags, &d.stream) == NULL) {
    if (t != NULL) py->Py_DecRef(t);
    return NULL;
  }
  if (own) d.flags &= ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED; /* what an import hands on */
  py->Py_IncRef(d.holder);
  if (d.stream != NULL) py->Py_IncRef(d.stream);
  r = shim_place(py, &d, rq, copied, "from_dlpack", &out);
  if (d.stream != NULL) py->Py_DecRef(d.stream);
  py->Py_DecRef(d.holder);
  if (r == 0) /* nothing to do: x as it is, a new Tensor for our own */
    return own ? import_as_is(py, x, rq, &copied) : t;
  if (t != NULL) py->Py_DecRef(t);
  return r < 0 ? NULL : out;
}

int shim_parse_keywords(const shim_pyapi *py, const char *fname, void *const *args,
                        ptrdiff_t nargs, void *kwnames, const int *names, int count,
                        void **values, shim_kw_memo *kw) {
  signed char slot[SHIM_KW_MAX];
  ptrdiff_t i, nkw, n;
  int k;
  for (k = 0; k < count; k++) values[k] = py->Py_None;
  if (kwnames == NULL) return 0;
  if (kw != NULL && kwnames == kw->kwnames) {
    for (i = 0; i < kw->n; i++) values[kw->slot[i]] = args[nargs + i];
    return 0;
  }
  nkw = py->PyTuple_Size(kwnames);
  for (i = 0; i < nkw; i++) {
    void *name = py->PyTuple_GetItem(kwnames, i);
    const char *text = NULL;
    /* Interned names (a call written in Python) compare by identity; others
     * (NumPy builds its own) by their text. */
    for (k = 0; k < count && name != shim_str(names[k]); k++) continue;
    if (k == count && (text = py->PyUnicode_AsUTF8AndSize(name, &n)) != NULL) {
      for (k = 0; k < count; k++)
        if (shim_str_len(names[k]) == n && memcmp(text, shim_str_text(names[k]), (size_t)n) == 0) break;
    }
    if (k == count) {
      if (text == NULL) py->PyErr_Clear(); /* lone surrogates: no name of ours */
      if (text == NULL) text = "?";
      return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "%s() got an unexpected keyword argument '%.*s'",
                         fname, (int)shim_utf8_cut(text, 100), text);
    }
    values[k] = args[nargs + i];
    if (i < SHIM_KW_MAX) slot[i] = (signed char)k;
  }
  if (kw != NULL && nkw <= SHIM_KW_MAX) {
    void *old = kw->kwnames;
    py->Py_IncRef(kwnames);
    kw->kwnames = kwnames;
    kw->n = (int)nkw;
    memcpy(kw->slot, slot, sizeof(slot));
    if (old != NULL) py->Py_DecRef(old); /* a tuple of str: no code runs */
  }
  return 0;
}

static void *from_dlpack(void *self, void *const *args, ptrdiff_t nargs, void *kwnames) {
  static const int names[3] = {SHIM_STR_DEVICE, SHIM_STR_COPY, SHIM_STR_STREAM};
  const shim_pyapi *py = shim_py_bound();
  shim_request rq = {0, {kDLCPU, 0}, -1, 0, 0};
  void *v[3];
  (void)self;
  if (nargs != 1)
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE,
                        "from_dlpack() takes exactly one positional argument (%td given)", nargs);
  if (kwnames == NULL) return shim_import(py, args[0], &rq); /* the plain call */
  if (shim_parse_keywords(py, "from_dlpack", args, nargs, kwnames, names, 3, v, NULL) != 0 ||
      (v[0] != py->Py_None && shim_parse_device(py, v[0], "device", &rq.device) != 0) ||
      shim_parse_copy(py, v[1], &rq.copy) != 0 ||
      shim_parse_stream(py, v[2], &rq.has_stream, &rq.stream) != 0)
    return NULL;
  rq.has_device = v[0] != py->Py_None;
  return shim_import(py, args[0], &rq);
}

/* from_dlpack_many(objs): each item of a snapshot of objs, in order, as by
 * from_dlpack; the first that fails raises, and the Tensors made go. The
 * list is made once every item is in: producers run Python code, which
 * could find (gc.get_objects) a list whose slots are still empty. */
static void *from_dlpack_many(void *self, void *objs) {
  const shim_pyapi *py = shim_py_bound();
  shim_request rq = {0, {kDLCPU, 0}, -1, 0, 0};
  void *items, *out = NULL, **made;
  ptrdiff_t i, n, done = 0;
  (void)self;
  if (shim_type_of(py, objs) == py->PyTuple_Type) {
    items = objs;
    py->Py_IncRef(items);
  } else if ((items = py->PySequence_Tuple(objs)) == NULL) { /* producers may change a list */
    return NULL;
  }
  n = py->PyTuple_Size(items);
  if ((made = (void **)malloc((size_t)(n > 0 ? n : 1) * sizeof(void *))) == NULL) {
    py->Py_DecRef(items);
    return shim_py_fail(py, DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
  }
  for (; done < n; done++) {
    int copied = 0;
    made[done] = import_as_is(py, py->PyTuple_GetItem(items, done), &rq, &copied); /* items holds it */
    if (made[done] == NULL) break;
  }
  if (done == n && (out = py->PyList_New(n)) != NULL) {
    for (i = 0; i < n; i++) py->PyList_SetItem(out, i, made[i]); /* steals */
  } else {
    for (i = 0; i < done; i++) py->Py_DecRef(made[i]); /* a deleter may run Python: after */
  }
  free(made);
  if (out == NULL) shim_drop(py, items); /* the last owner of the producers' capsules */
  else py->Py_DecRef(items);
  return out;
}

/* The memo forgotten (DLPACKSHIM_DISABLE_EXCHANGE_API re-read, tests). */
void shim_memo_reset(const shim_pyapi *py, int off) {
  for (int i = 0; i < MEMO_SIZE; i++) memo_clear(py, &memo[i]);
  memo_off = off;
}

int shim_consume_init(const shim_pyapi *py) {
  if (kw_mv == NULL && (kw_mv = py->PyTuple_Pack(1, shim_str(SHIM_STR_MAX_VERSION))) == NULL)
    return -1;
  if (method_descriptor == NULL) { /* type(object.__dir__): a static type, never freed */
    void *name = py->PyUnicode_InternFromString("__dir__");
    void *m = name != NULL ? py->PyObject_GetAttr(py->PyBaseObject_Type, name) : NULL;
    if (name != NULL) py->Py_DecRef(name);
    if (m == NULL) return -1;
    method_descriptor = shim_type_of(py, m);
    py->Py_DecRef(m);
  }
  return 0;
}

shim_method_def shim_consume_defs[] = {
    {"from_dlpack", (void *)from_dlpack, SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS, NULL},
    {"from_dlpack_many", (void *)from_dlpack_many, SHIM_METH_O, NULL},
    {NULL, NULL, 0, NULL},
};
