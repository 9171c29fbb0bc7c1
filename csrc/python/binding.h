/*
 * binding.h - what the CPython binding's files (csrc/python/) share.
 *
 * The core (csrc/core/, csrc/gpu/) never includes it: the library builds and
 * loads without Python. The binding's files, one job each:
 *   pyapi.c       CPython's stable ABI found at run time; raising statuses
 *   module.c      the package's entry points: its Tensor base type and builtins
 *   tensor.c      the Tensor (C part) and the holder that keeps its memory alive
 *   consume.c     from_dlpack: one function that decides how to import anything
 *   produce.c     exports: __dlpack__, capsules, the Tensor's exchange table
 *   place.c       data moved or copied to a device (both directions use it)
 *   interfaces.c  the imports that are not DLPack: buffers, array interfaces
 */
#ifndef DLPACKSHIM_BINDING_H
#define DLPACKSHIM_BINDING_H

#include <stdio.h>
#include <string.h>

#include "gpu.h"
#include "internal.h"

/* ---- pyapi.c: CPython, found at run time ------------------------------
 * The library never includes Python.h nor links libpython: every CPython
 * entry point below is resolved once with dlsym(RTLD_DEFAULT, ...) from the
 * running process, and only stable-ABI names are used (tests/python
 * checks them). Python objects are `void *` (a PyObject *). */

typedef void (*shim_capsule_destructor)(void *capsule);

/* Py_buffer, written from its layout (stable ABI from 3.11). */
typedef struct {
  void *buf;
  void *obj;
  ptrdiff_t len;
  ptrdiff_t itemsize;
  int readonly;
  int ndim;
  char *format;
  ptrdiff_t *shape;
  ptrdiff_t *strides;
  ptrdiff_t *suboffsets;
  void *internal;
} shim_py_buffer;

/* PEP 3118 request flags. */
enum {
  SHIM_PYBUF_WRITABLE = 0x0001,
  SHIM_PYBUF_FORMAT = 0x0004,
  SHIM_PYBUF_ND = 0x0008,
  SHIM_PYBUF_STRIDES = 0x0010 | 0x0008
};

/* The CPython functions the binding calls, each once: its return type,
 * name, parameters, and the CPython that added it to the stable ABI when
 * that is newer than 3.11 (0, 0 otherwise; NULL on an older interpreter,
 * whose users have a fallback). shim_pyapi's fields and pyapi.c's dlsym
 * calls are both made from this list; tests/python/c_api/test_stable_abi.py
 * checks every name against CPython's stable-ABI manifest. */
#define SHIM_PY_FUNCTIONS(F) \
  F(int, Py_IsInitialized, (void), 0, 0) \
  F(int, Py_IsFinalizing, (void), 3, 13) \
  F(int, Py_AtExit, (void (*func)(void)), 0, 0) \
  F(int, PyGILState_Ensure, (void), 0, 0) \
  F(void, PyGILState_Release, (int state), 0, 0) \
  F(void *, PyCapsule_New, (void *ptr, const char *name, shim_capsule_destructor d), 0, 0) \
  F(void *, PyCapsule_GetPointer, (void *capsule, const char *name), 0, 0) \
  F(const char *, PyCapsule_GetName, (void *capsule), 0, 0) \
  F(int, PyCapsule_SetName, (void *capsule, const char *name), 0, 0) \
  F(shim_capsule_destructor, PyCapsule_GetDestructor, (void *capsule), 0, 0) \
  F(int, PyCapsule_SetDestructor, (void *capsule, shim_capsule_destructor d), 0, 0) \
  F(int, PyCapsule_IsValid, (void *capsule, const char *name), 0, 0) \
  F(void *, PyCapsule_GetContext, (void *capsule), 0, 0) \
  F(int, PyCapsule_SetContext, (void *capsule, void *context), 0, 0) \
  F(void, Py_IncRef, (void *obj), 0, 0) \
  F(void, Py_DecRef, (void *obj), 0, 0) \
  F(void *, PyObject_GetAttr, (void *obj, void *name), 0, 0) \
  F(void *, PyObject_GetAttrString, (void *obj, const char *name), 0, 0) \
  F(int, PyObject_GetOptionalAttr, (void *obj, void *name, void **result), 3, 13) \
  F(int, PyObject_IsTrue, (void *obj), 0, 0) \
  F(int, PyObject_CheckBuffer, (void *obj), 0, 0) \
  F(int, PyObject_GetBuffer, (void *obj, void *view, int flags), 0, 0) \
  F(void, PyBuffer_Release, (void *view), 0, 0) \
  F(int, PyBuffer_IsContiguous, (const void *view, char order), 0, 0) \
  F(void *, PyObject_Call, (void *callable, void *args, void *kwargs), 0, 0) \
  F(void *, PyObject_CallFunctionObjArgs, (void *callable, ...), 0, 0) \
  F(void *, PyObject_CallMethodObjArgs, (void *obj, void *name, ...), 0, 0) \
  F(void *, PyObject_Vectorcall, (void *fn, void *const *args, size_t n, void *kwnames), 3, 12) \
  F(void *, PyObject_VectorcallMethod, (void *nm, void *const *a, size_t n, void *kw), 3, 12) \
  F(void *, PyObject_Str, (void *obj), 0, 0) \
  F(int, PySequence_Contains, (void *seq, void *item), 0, 0) \
  F(void *, PySequence_Tuple, (void *seq), 0, 0) \
  F(void *, PyCFunction_NewEx, (void *method_def, void *self, void *module), 0, 0) \
  F(int, PyCFunction_GetFlags, (void *fn), 0, 0) \
  F(void *, PyCFunction_GetFunction, (void *fn), 0, 0) \
  F(void *, PyCFunction_GetSelf, (void *fn), 0, 0) \
  F(void *, PyImport_ImportModule, (const char *name), 0, 0) \
  F(void *, PyModule_New, (const char *name), 0, 0) \
  F(void *, PyLong_FromLongLong, (long long v), 0, 0) \
  F(void *, PyLong_FromUnsignedLongLong, (unsigned long long v), 0, 0) \
  F(long long, PyLong_AsLongLong, (void *obj), 0, 0) \
  F(unsigned long long, PyLong_AsUnsignedLongLong, (void *obj), 0, 0) \
  F(void *, PyNumber_Index, (void *obj), 0, 0) \
  F(void *, PyTuple_New, (ptrdiff_t size), 0, 0) \
  F(void *, PyTuple_Pack, (ptrdiff_t n, ...), 0, 0) \
  F(ptrdiff_t, PyTuple_Size, (void *tuple), 0, 0) \
  F(void *, PyTuple_GetItem, (void *tuple, ptrdiff_t i), 0, 0) \
  F(int, PyTuple_SetItem, (void *tuple, ptrdiff_t i, void *item), 0, 0) \
  F(void *, PyList_New, (ptrdiff_t size), 0, 0) \
  F(ptrdiff_t, PyList_Size, (void *list), 0, 0) \
  F(ptrdiff_t, PyObject_Size, (void *obj), 0, 0) \
  F(void *, PyObject_GetItem, (void *obj, void *key), 0, 0) \
  F(int, PyList_SetItem, (void *list, ptrdiff_t i, void *item), 0, 0) \
  F(void *, PyDict_New, (void), 0, 0) \
  F(int, PyDict_SetItem, (void *dict, void *key, void *value), 0, 0) \
  F(int, PyDict_SetItemString, (void *dict, const char *key, void *value), 0, 0) \
  F(void *, PyDict_GetItemWithError, (void *dict, void *key), 0, 0) \
  F(const char *, PyUnicode_AsUTF8AndSize, (void *str, ptrdiff_t *size), 0, 0) \
  F(void *, PyUnicode_InternFromString, (const char *s), 0, 0) \
  F(void, PyErr_SetString, (void *type, const char *message), 0, 0) \
  F(void *, PyErr_Occurred, (void), 0, 0) \
  F(void, PyErr_Fetch, (void **type, void **value, void **traceback), 0, 0) \
  F(void, PyErr_Restore, (void *type, void *value, void *traceback), 0, 0) \
  F(void, PyErr_NormalizeException, (void **type, void **value, void **traceback), 0, 0) \
  F(void, PyException_SetCause, (void *exc, void *cause), 0, 0) \
  F(int, PyException_SetTraceback, (void *exc, void *traceback), 0, 0) \
  F(void, PyErr_Clear, (void), 0, 0) \
  F(int, PyErr_ExceptionMatches, (void *exc), 0, 0) \
  F(void, PyErr_WriteUnraisable, (void *obj), 0, 0) \
  F(void *, PyType_FromSpec, (void *spec), 0, 0) \
  F(void *, PyType_FromSpecWithBases, (void *spec, void *bases), 0, 0) \
  F(void *, PyObject_Type, (void *obj), 0, 0) \
  F(void *, PyType_GenericAlloc, (void *type, ptrdiff_t nitems), 0, 0) \
  F(void, PyObject_Free, (void *p), 0, 0) \
  F(void, PyObject_GC_Del, (void *op), 0, 0) \
  F(void *, PyEval_SaveThread, (void), 0, 0) \
  F(void, PyEval_RestoreThread, (void *tstate), 0, 0) \
  F(void *, _PyObject_New, (void *type), 0, 0) \
  F(void *, _PyObject_GC_New, (void *type), 0, 0) \
  F(void, PyObject_GC_Track, (void *obj), 0, 0) \
  F(int, PyType_IsSubtype, (void *a, void *b), 0, 0) \
  F(void *, PyType_GetSlot, (void *type, int slot), 0, 0) \
  F(unsigned long, PyType_GetFlags, (void *type), 0, 0) \
  F(void, PyObject_GC_UnTrack, (void *obj), 0, 0) \
  F(void, PyObject_ClearWeakRefs, (void *obj), 0, 0) \
  F(void *, PyWeakref_NewRef, (void *obj, void *callback), 0, 0) \
  F(void *, PyWeakref_GetObject, (void *ref), 0, 0) \
  F(void *, PyInterpreterState_Get, (void), 0, 0) \
  F(int64_t, PyInterpreterState_GetID, (void *interp), 0, 0)

/* The objects (types, singletons) and the exception variables, by symbol. */
#define SHIM_PY_OBJECTS(O) \
  O(PyBaseObject_Type, "PyBaseObject_Type") \
  O(PyCapsule_Type, "PyCapsule_Type") \
  O(PyLong_Type, "PyLong_Type") \
  O(PyBool_Type, "PyBool_Type") \
  O(PyTuple_Type, "PyTuple_Type") \
  O(PyList_Type, "PyList_Type") \
  O(PyDict_Type, "PyDict_Type") \
  O(PyUnicode_Type, "PyUnicode_Type") \
  O(PyCFunction_Type, "PyCFunction_Type") \
  O(Py_None, "_Py_NoneStruct") \
  O(Py_True, "_Py_TrueStruct") \
  O(Py_False, "_Py_FalseStruct") \
  O(Py_NotImplemented, "_Py_NotImplementedStruct") \
  O(PyMemoryView_Type, "PyMemoryView_Type")
#define SHIM_PY_EXCEPTIONS(E) \
  E(PyExc_AttributeError, "PyExc_AttributeError") \
  E(PyExc_BufferError, "PyExc_BufferError") \
  E(PyExc_ValueError, "PyExc_ValueError") \
  E(PyExc_TypeError, "PyExc_TypeError") \
  E(PyExc_OverflowError, "PyExc_OverflowError") \
  E(PyExc_RuntimeError, "PyExc_RuntimeError") \
  E(PyExc_NotImplementedError, "PyExc_NotImplementedError") \
  E(PyExc_ImportError, "PyExc_ImportError") \
  E(PyExc_MemoryError, "PyExc_MemoryError") \
  E(PyExc_Exception, "PyExc_Exception")

typedef struct shim_pyapi {
#define SHIM_PY_FIELD(ret, name, args, major, minor) ret(*name) args;
  SHIM_PY_FUNCTIONS(SHIM_PY_FIELD)
#define SHIM_PY_OBJECT(name, symbol) void *name;
  SHIM_PY_OBJECTS(SHIM_PY_OBJECT)
#define SHIM_PY_EXCEPTION(name, symbol) void **name;
  SHIM_PY_EXCEPTIONS(SHIM_PY_EXCEPTION)
#undef SHIM_PY_FIELD
#undef SHIM_PY_OBJECT
#undef SHIM_PY_EXCEPTION
} shim_pyapi;

/* The API for the public C functions: NULL (last error _NO_PYTHON) when
 * there is no CPython, it is not initialized, or it is finalizing and the
 * calling thread is not the one that finalizes. */
const shim_pyapi *shim_py(void);

/* The API table if this process has CPython's symbols, whatever the state of
 * the interpreter: for code Python itself calls (builtins, destructors). */
const shim_pyapi *shim_py_bound(void);

/* The API if CPython is initialized and not finalizing, else NULL: for code
 * that may run on any thread at any time (deleters) before it takes the GIL. */
const shim_pyapi *shim_py_alive(void);

/* type(obj), borrowed, through PyObject_Type: the binding reads no object's
 * layout, the header included. obj keeps it alive only until Python code
 * runs: a `__class__` assignment may free it (hold a reference across). */
void *shim_type_of(const shim_pyapi *py, void *obj);

/* 1 when obj's type is exactly `type` / is `type` or a subclass of it. */
static inline int shim_is_exact(const shim_pyapi *py, void *obj, void *type) {
  return shim_type_of(py, obj) == type;
}
static inline int shim_is_instance(const shim_pyapi *py, void *obj, void *type) {
  void *tp = shim_type_of(py, obj);
  return tp == type || py->PyType_IsSubtype(tp, type);
}

/* The type's attribute `attr` ("__name__", "__module__", "__qualname__")
 * into buf ("?" when it has none that is a str); for messages (error paths:
 * the look-up may run a metaclass's code). 0, no exception left; -1 with a
 * KeyboardInterrupt or SystemExit the look-up raised left pending (no more
 * Python code may run before the caller raises it, or clears it in the C
 * API, which leaves no exception). */
int shim_type_name(const shim_pyapi *py, void *type, const char *attr, char *buf, size_t size);

/* obj.name when obj has it: 1 with *value (new reference), 0 when it has
 * not (no exception), -1 with the exception the lookup raised. An absent
 * attribute costs no exception object (CPython 3.13's
 * PyObject_GetOptionalAttr; before, builtins.getattr with a default). */
int shim_lookup(const shim_pyapi *py, void *obj, void *name, void **value);

/* The names the binding looks up, interned once at the package's import
 * (shim_py_names, GIL held; -1 with an exception). */
enum {
  SHIM_STR_DLPACK, SHIM_STR_DLPACK_DEVICE, SHIM_STR_EXCHANGE_API, SHIM_STR_ARRAY_INTERFACE,
  SHIM_STR_CUDA_ARRAY_INTERFACE, SHIM_STR_MAX_VERSION, SHIM_STR_DL_DEVICE, SHIM_STR_COPY,
  SHIM_STR_STREAM, SHIM_STR_DEVICE, SHIM_STR_VERSION, SHIM_STR_MASK, SHIM_STR_DATA, SHIM_STR_SHAPE,
  SHIM_STR_TYPESTR, SHIM_STR_DESCR, SHIM_STR_STRIDES, SHIM_STR_OFFSET, SHIM_STR_MRO,
  SHIM_STR_DICT, SHIM_STR_DICTOFFSET, SHIM_STR_GET, SHIM_STR_COUNT
};
extern void *shim_strs[SHIM_STR_COUNT];
static inline void *shim_str(int which) { return shim_strs[which]; } /* borrowed */
const char *shim_str_text(int which);
ptrdiff_t shim_str_len(int which);
int shim_py_names(const shim_pyapi *py);

/* Clears the pending exception, unless it is no Exception (KeyboardInterrupt,
 * SystemExit: raised by Python code we ran, they must reach the caller):
 * 0 when none is left pending, -1 when such a one is. */
int shim_py_clear(const shim_pyapi *py);

/* Sets the package's exception for status (the table of dlpackshim/_errors.py,
 * read when the package binds the library; RuntimeError before) with this
 * thread's last error message. _PYTHON leaves a pending exception alone, and
 * every status a pending KeyboardInterrupt or SystemExit (never replaced).
 * Returns NULL, for `return shim_py_raise(py, status);`. */
void *shim_py_raise(const shim_pyapi *py, int status);

/* shim_fail(status, fmt, ...) then shim_py_raise: NULL with the exception set. */
void *shim_py_fail(const shim_pyapi *py, int status, const char *fmt, ...) SHIM_PRINTF(3, 4);

/* The same two for functions that say -1 on error: `return shim_py_err(...);`. */
int shim_py_err(const shim_pyapi *py, int status, const char *fmt, ...) SHIM_PRINTF(3, 4);
static inline int shim_py_raise_err(const shim_pyapi *py, int status) {
  shim_py_raise(py, status);
  return -1;
}

/* Around foreign code that may run Python (a deleter, a destructor, an
 * exporter's buffer release) called from a deallocation, GIL held: a pending
 * exception is set aside before and put back after; one the code leaves is
 * reported as unraisable. */
typedef struct {
  void *type, *value, *tb;
} shim_pending_error;

static inline void shim_error_set_aside(const shim_pyapi *py, shim_pending_error *e) {
  e->type = e->value = e->tb = NULL;
  if (SHIM_UNLIKELY(py->PyErr_Occurred() != NULL)) py->PyErr_Fetch(&e->type, &e->value, &e->tb);
}

static inline void shim_error_put_back(const shim_pyapi *py, shim_pending_error *e) {
  if (SHIM_UNLIKELY(py->PyErr_Occurred() != NULL)) py->PyErr_WriteUnraisable(NULL);
  if (SHIM_UNLIKELY(e->type != NULL)) py->PyErr_Restore(e->type, e->value, e->tb);
}

/* Drops a reference (NULL: none) whose release may run a producer's Python
 * code (anything the producer made may own a capsule whose destructor is
 * Python, or a traceback its frames) with the exception about to be raised
 * kept pending: such code may clear it. */
static inline void shim_drop(const shim_pyapi *py, void *obj) {
  shim_pending_error pending;
  if (SHIM_LIKELY(py->PyErr_Occurred() == NULL)) {
    py->Py_DecRef(obj);
    return;
  }
  shim_error_set_aside(py, &pending);
  py->Py_DecRef(obj);
  shim_error_put_back(py, &pending);
}

#define SHIM_EXCHANGE_API_NAME "dlpack_exchange_api"

/* CPython's type-making structs, written from their layouts (stable ABI). */
typedef struct {
  int slot;
  void *pfunc;
} shim_type_slot;

typedef struct {
  const char *name;
  int basicsize;
  int itemsize;
  unsigned int flags;
  shim_type_slot *slots;
} shim_type_spec;

typedef struct {
  const char *ml_name;
  void *ml_meth;
  int ml_flags;
  const char *ml_doc;
} shim_method_def;

typedef int (*shim_visitproc)(void *obj, void *arg);

enum {
  SHIM_METH_KEYWORDS = 0x0002, SHIM_METH_NOARGS = 0x0004, SHIM_METH_O = 0x0008,
  SHIM_METH_FASTCALL = 0x0080
};
enum {
  Py_bf_getbuffer = 1, Py_bf_releasebuffer = 2, Py_tp_clear = 51, Py_tp_dealloc = 52,
  Py_tp_doc = 56, Py_tp_getattro = 58, Py_tp_methods = 64, Py_tp_traverse = 71,
  Py_tp_members = 72, Py_tp_free = 74
};
enum {
  TPFLAGS_DISALLOW_INSTANTIATION = 1 << 7, TPFLAGS_IMMUTABLETYPE = 1 << 8,
  TPFLAGS_BASETYPE = 1 << 10, TPFLAGS_HAVE_GC = 1 << 14, TPFLAGS_TYPE_SUBCLASS = 1u << 31
};

/* ---- module.c: the package, as it bound the library ---------------------
 * The package's private entry points (exported as dlpackshim__*, outside
 * the public API): module.c's (dlpackshim__py_entry_points hands the first
 * three to the package as builtins), and pyapi.c's atexit hook, from which on
 * shim_py_alive answers NULL on other threads (3.11, 3.12). */
DLPACKSHIM_API void *dlpackshim__py_base(void *dlpack_doc);
DLPACKSHIM_API void *dlpackshim__py_tensor_class(void *cls);
DLPACKSHIM_API void *dlpackshim__py_bind(void *config);
DLPACKSHIM_API int dlpackshim__py_entry_points(void *out);
DLPACKSHIM_API void dlpackshim__py_at_exit(void);
/* DLPACKSHIM_BINDING_REVISION, as this library was built: the package
 * refuses a library of another revision (dlpackshim/_ffi.py). */
DLPACKSHIM_API int dlpackshim__binding_revision(void);

/* The package the library is bound to: set by dlpackshim__py_bind (the
 * package's import; GIL held), read by the builtins and the Tensor's methods. */
enum { SHIM_STATUS_COUNT = 14 }; /* 0, then -1 .. -13 */
typedef struct {
  void *tensor_class;       /* dlpackshim.Tensor: new Tensors are of this class */
  void *not_array_like;     /* dlpackshim.NotArrayLikeError */
  void *device_type;        /* dlpackshim.DeviceType (an IntEnum) */
  void *guard_for;          /* guard_for(type) -> checks before a foreign exchange table */
  void *read_meta;          /* read_meta(address of a DLTensor) -> a Tensor's metadata tuple */
  void *exceptions[SHIM_STATUS_COUNT]; /* the exception class of status -i */
  void *max_version;        /* (1, 3) */
  int use_tables;           /* 0: DLPACKSHIM_DISABLE_EXCHANGE_API, no foreign table is used */
} shim_package;
extern shim_package shim_pkg;

/* ---- tensor.c: the holder and the Tensor ----------------------------------
 * A holder is the one object that keeps a Tensor's memory alive: a snapshot
 * of the layout taken and validated once, and what owns the memory: a
 * producer's managed tensor (deleted with the holder), a buffer export
 * (released with it) and/or a Python object (`keep`). Tensors, exports and
 * pins reference the holder, never the Tensor. */

/* The holder types, made once per process: by the package's import, or by
 * the first dlpackshim_capsule_import of a C caller that never imported the
 * package. -1 with an exception. */
int shim_holder_types(const shim_pyapi *py);

/* A holder owning the managed tensor `managed` (versioned or legacy), taken
 * in every case: its version checked, its layout snapshot and validated
 * (`built`: just made by dlpackshim_tensor_new or _clone, valid already),
 * deleted on failure. New reference, or NULL with an exception. */
void *shim_holder_take(const shim_pyapi *py, void *managed, int versioned, int built);

/* A holder of a view of t (validated with flags; its layout copied) whose
 * memory `keep` (may be NULL) and/or the buffer export *view (moved in when
 * view is not NULL, released on failure) keep alive. New reference, or NULL
 * with an exception. */
void *shim_holder_view(const shim_pyapi *py, const DLTensor *t, uint64_t flags, void *keep,
                       shim_py_buffer *view);

/* The holder's snapshot (explicit strides), its flags (SHIM_FLAG_LEGACY
 * included) and version (0.0: legacy); out pointers may be NULL. */
const DLTensor *shim_holder_tensor(void *holder, uint64_t *flags, uint32_t *major,
                                   uint32_t *minor);

/* When a managed tensor is a plain view one of our exports made of a
 * holder, that holder (borrowed: the view keeps it), else NULL: a
 * re-import shares it instead of nesting. */
void *shim_export_root(void *managed, int versioned);

/* A new Tensor of the package's class holding `holder` (reference stolen,
 * also on failure), with flags and the stream its data is ready on
 * (borrowed; NULL or None: the device's default). NULL with an exception. */
void *shim_tensor_new(const shim_pyapi *py, void *holder, uint64_t flags, void *stream);

/* Sets the DLPack version a new Tensor reports (shim_tensor_new takes the
 * holder's; a re-import that shares a holder came in by another version). */
void shim_tensor_set_version(void *tensor, uint32_t major, uint32_t minor);

/* Counts a reader of the Tensor's data that references the Tensor (delta
 * 1, or -1 when it goes): close() keeps the holder while there is one, and
 * the last one to go after close() drops it (may run Python code). */
void shim_tensor_lend(void *tensor, int delta);

/* 1 when obj is a dlpackshim Tensor (of any class deriving from the base). */
int shim_is_tensor(const shim_pyapi *py, void *obj);

/* A Tensor's parts: its holder (borrowed: take a reference before running
 * anything that may close it), flags and stream (borrowed, NULL for the
 * default). NULL with a ValueError set when the Tensor is closed. */
const DLTensor *shim_tensor_parts(const shim_pyapi *py, void *tensor, void **holder,
                                  uint64_t *flags, void **stream);

/* tensor.c: the C base type of dlpackshim.Tensor, made once per process
 * (borrowed), and the class Tensors are made of: a C subtype of the
 * package's class statement cls with the base's deallocation (new
 * reference). NULL with an exception. */
void *shim_tensor_base(const shim_pyapi *py, const char *dlpack_doc);
void *shim_tensor_class(const shim_pyapi *py, void *cls);

/* A deleter called, for any producer's tensor (NULL deleter: nothing). */
void shim_delete_managed(void *managed, int versioned);

/* ---- consume.c ----------------------------------------------------------- */

/* The capsule names (static: a capsule keeps the pointer, and our own
 * capsules are told apart by it). */
extern const char SHIM_NAME_V[], SHIM_NAME_L[], SHIM_USED_V[], SHIM_USED_L[];

/* A Tensor owning `managed` (taken in every case; checked as every import
 * is), recording `stream` (borrowed, may be NULL). NULL with an exception. */
void *shim_tensor_take(const shim_pyapi *py, void *managed, int versioned, void *stream);

/* What a caller asked for besides the data (from_dlpack's device, copy and
 * stream; __dlpack__'s dl_device, copy and stream). */
typedef struct {
  int has_device;
  DLDevice device;
  int copy;        /* -1: when needed (None), 0: never (False), 1: always (True) */
  int has_stream;
  int64_t stream;
} shim_request;

/* Reads a device argument (a Device or (type, id) tuple of ints, or a
 * DeviceType); -1 with TypeError / ValueError naming `what`. */
int shim_parse_device(const shim_pyapi *py, void *obj, const char *what, DLDevice *out);
/* copy: None / True / False; -1 with TypeError. */
int shim_parse_copy(const shim_pyapi *py, void *obj, int *out);
/* stream: None or an int; -1 with TypeError / ValueError. */
int shim_parse_stream(const shim_pyapi *py, void *obj, int *has, int64_t *out);

/* from_dlpack(x, ...) (a new Tensor or NULL with an exception). */
void *shim_import(const shim_pyapi *py, void *x, const shim_request *rq);

/* A caller's memo of the last tuple of keyword names it read: NumPy calls
 * __dlpack__ with one tuple of its own for the life of the process, a call
 * written in Python with one per call site (docs/design.md, what it buys).
 * The memo holds a reference to the tuple: its address cannot be reused. */
enum { SHIM_KW_MAX = 8 };
typedef struct {
  void *kwnames;
  int n;
  signed char slot[SHIM_KW_MAX];
} shim_kw_memo;

/* The keywords of a METH_FASTCALL | METH_KEYWORDS call into values[]
 * (None when absent), by the names (SHIM_STR_*) given; -1 with a TypeError
 * naming fname for any other keyword. `memo` (may be NULL): see above. */
int shim_parse_keywords(const shim_pyapi *py, const char *fname, void *const *args,
                        ptrdiff_t nargs, void *kwnames, const int *names, int count,
                        void **values, shim_kw_memo *memo);

/* What a Tensor imported on consumer stream `consumer` records as its
 * stream (*out: a new reference, or NULL for the device's default). */
int shim_stream_to_record(const shim_pyapi *py, DLDevice dev, int64_t consumer, void **out);

/* The builtins from_dlpack and from_dlpack_many (docs set by module.c). */
extern shim_method_def shim_consume_defs[];
int shim_consume_init(const shim_pyapi *py);
/* Forgets the memo (and turns it off with off = 1: benchmarks). */
void shim_memo_reset(const shim_pyapi *py, int off);

/* ---- produce.c ----------------------------------------------------------- */

/* The Tensor's __dlpack__ (a METH_FASTCALL | METH_KEYWORDS method). */
void *shim_tensor_dlpack(void *self, void *const *args, ptrdiff_t nargs, void *kwnames);

/* A capsule of dlpackshim.Tensor's exchange table. */
void *shim_exchange_api_capsule(const shim_pyapi *py);

/* Marks cap, when it is one of our exports, taken by one of our consumers:
 * its destructor leaves the tensor alone whatever it is renamed later. */
void shim_export_taken(const shim_pyapi *py, void *cap);
/* 1 when cap is one of our exports that one of our consumers took. */
int shim_export_is_taken(const shim_pyapi *py, void *cap);

/* The Tensor's buffer protocol (Py_bf_getbuffer / Py_bf_releasebuffer). */
int shim_tensor_getbuffer(void *self, void *view, int flags);
void shim_tensor_releasebuffer(void *self, void *view);

/* ---- place.c --------------------------------------------------------------- */

/* Data as a Tensor holds it: a holder, flags and the stream it is ready on. */
typedef struct {
  void *holder; /* borrowed */
  uint64_t flags;
  void *stream; /* borrowed, NULL: the device's default */
} shim_data;

/* `in` on the device rq names (none: its own) and copied as rq->copy says,
 * as from_dlpack's `device` and `copy` and __dlpack__'s `dl_device` and
 * `copy` define it: host-accessible memory is relabelled (kDLCPU, 0) once
 * its stream is done (unless rq's stream is -1), GPU memory copied to the
 * host or within its GPU. `copied`: the data is a fresh copy already (then
 * copy=True is met). A relabelled view keeps in->flags: the caller clears
 * IS_COPIED where others view the data. `what`: "from_dlpack" or
 * "__dlpack__", for messages and the error kinds each raises. 1 with *out a
 * new Tensor; 0 when nothing is to be done; -1 with an exception. */
int shim_place(const shim_pyapi *py, const shim_data *in, const shim_request *rq, int copied,
               const char *what, void **out);
/* 1 when shim_place can give data on `own` what rq asks (from_dlpack asks a
 * producer that refused the keywords again only then). */
int shim_placeable(DLDevice own, const shim_request *rq);

/* The stream value a Tensor's data is ready on, as the runtime's handle
 * (the default stream when it records none; -1: no streams). */
int64_t shim_data_stream(const shim_pyapi *py, const shim_data *d, int32_t device_type);

/* Before the host reads d's data: waits for the GPU work queued on it when
 * it is pinned or managed memory (nothing for kDLCPU, or with no GPU
 * runtime: then no GPU wrote it). 0, or -1 with an exception. */
int shim_host_ready(const shim_pyapi *py, const shim_data *d);

/* ---- interfaces.c ---------------------------------------------------------- */

/* x through the buffer protocol / __array_interface__ / __cuda_array_interface__
 * (iface: the attribute's value), as a new Tensor; NULL with an exception
 * (TypeError, ValueError or BufferError as the standard names them, or x's
 * own). */
void *shim_buffer_tensor(const shim_pyapi *py, void *x);
void *shim_array_interface_tensor(const shim_pyapi *py, void *x, void *iface);
void *shim_cuda_interface_tensor(const shim_pyapi *py, void *x, void *iface,
                                 const shim_request *rq);

#endif /* DLPACKSHIM_BINDING_H */
