/*
 * binding.h - the CPython binding (csrc/python/): CPython's API found at run
 * time, the capsules, the Tensor's C base, the builtins and the exchange
 * table. The core (csrc/core/) never includes it: the library builds and
 * loads without Python, and only these files touch Python objects.
 */
#ifndef DLPACKSHIM_BINDING_H
#define DLPACKSHIM_BINDING_H

#include <string.h>

#include "internal.h"

/* ---- pyapi.c: CPython, found at run time ------------------------------
 * The library never includes Python.h nor links libpython: every CPython
 * entry point below is resolved once with dlsym(RTLD_DEFAULT, ...) from the
 * running process. Only stable-ABI functions are used. Python objects are
 * plain `void *` (a PyObject *); a capsule destructor is `void (*)(void *)`. */

typedef void (*shim_capsule_destructor)(void *capsule);

/* Py_buffer, written from its layout (CPython's pybuffer.h; part of the
 * stable ABI from 3.11 and unchanged since 3.0). */
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

/* PEP 3118 request flags: PyBUF_STRIDES (includes PyBUF_ND), PyBUF_FORMAT. */
enum { SHIM_PYBUF_STRIDES = 0x0010 | 0x0008, SHIM_PYBUF_FORMAT = 0x0004 };

typedef struct shim_pyapi {
  int (*Py_IsInitialized)(void);
  int (*Py_IsFinalizing)(void); /* 3.13+; NULL before (see shim_py_alive) */
  int (*PyGILState_Ensure)(void); /* returns a PyGILState_STATE (an int-sized enum) */
  void (*PyGILState_Release)(int state);

  void *(*PyCapsule_New)(void *pointer, const char *name, shim_capsule_destructor destructor);
  void *(*PyCapsule_GetPointer)(void *capsule, const char *name);
  const char *(*PyCapsule_GetName)(void *capsule);
  int (*PyCapsule_SetName)(void *capsule, const char *name);
  shim_capsule_destructor (*PyCapsule_GetDestructor)(void *capsule);
  int (*PyCapsule_SetDestructor)(void *capsule, shim_capsule_destructor destructor);
  int (*PyCapsule_IsValid)(void *capsule, const char *name);
  void *(*PyCapsule_GetContext)(void *capsule);
  int (*PyCapsule_SetContext)(void *capsule, void *context);
  int (*PyCapsule_SetPointer)(void *capsule, void *pointer);

  void (*Py_IncRef)(void *obj);
  void (*Py_DecRef)(void *obj);
  void *(*PyObject_Type)(void *obj);                           /* new reference */
  void *(*PyObject_GetAttrString)(void *obj, const char *name); /* new reference */
  void *(*PyUnicode_AsUTF8String)(void *str);                  /* new reference */
  char *(*PyBytes_AsString)(void *bytes);

  void (*PyErr_SetString)(void *type, const char *message);
  void *(*PyErr_Occurred)(void);
  void (*PyErr_Fetch)(void **type, void **value, void **traceback);
  void (*PyErr_Restore)(void *type, void *value, void *traceback);
  void (*PyErr_Clear)(void);
  void (*PyErr_WriteUnraisable)(void *obj);

  /* buffer.c: view is a Py_buffer (struct layout stable since 3.0). */
  int (*PyObject_GetBuffer)(void *obj, void *view, int flags);
  void (*PyBuffer_Release)(void *view);

  /* pyfast.c: builtins for the Python package's hot paths. */
  void *(*PyCFunction_NewEx)(void *method_def, void *self, void *module); /* new reference */
  void *(*PyModule_Create2)(void *module_def, int api_version); /* new reference */
  void *(*PyModule_GetState)(void *module);
  void *(*PyModule_GetDef)(void *module); /* NULL (and SystemError) for a non-module */
  void *(*PyLong_FromSsize_t)(ptrdiff_t v);                              /* new reference */
  long (*PyLong_AsLong)(void *obj);
  long long (*PyLong_AsLongLong)(void *obj);
  unsigned long long (*PyLong_AsUnsignedLongLong)(void *obj);

  /* exchange.c, exchange_table.c: the DLPack C exchange tables and the Tensors they build. */
  void *(*PyType_GenericAlloc)(void *type, ptrdiff_t nitems);  /* new reference */
  int (*PyType_IsSubtype)(void *a, void *b);
  void *(*PyTuple_Pack)(ptrdiff_t n, ...);                    /* new reference */
  void *(*PyList_New)(ptrdiff_t size);                        /* new reference */
  ptrdiff_t (*PyList_Size)(void *list);
  void *(*PyList_GetItem)(void *list, ptrdiff_t i);           /* borrowed */
  int (*PyList_SetItem)(void *list, ptrdiff_t i, void *item); /* steals item */
  void *(*PyObject_CallFunctionObjArgs)(void *callable, ...); /* new reference */
  void *(*PyObject_CallMethodObjArgs)(void *obj, void *name, ...); /* new reference */
  void *(*PyObject_GetAttr)(void *obj, void *name);            /* new reference */
  ptrdiff_t (*PyTuple_Size)(void *tuple);
  void *(*PyTuple_GetItem)(void *tuple, ptrdiff_t i);         /* borrowed */
  void *PyList_Type;
  void *PyTuple_Type;
  void *Py_None; /* &_Py_NoneStruct */

  /* pyconsume.c: from_dlpack's hot path. */
  void *(*PyDict_GetItem)(void *dict, void *key); /* borrowed; never raises */
  void *(*PyDict_GetItemWithError)(void *dict, void *key); /* borrowed; NULL: missing or raised */
  /* 3.12+; NULL before (shim_call_method falls back to PyObject_Call) */
  void *(*PyObject_VectorcallMethod)(void *name, void *const *args, size_t nargsf, void *kwnames);
  /* 3.11's keyword call to a C method (pyconsume.c, call_dlpack) */
  void *PyCFunction_Type;
  int (*PyCFunction_GetFlags)(void *fn);
  void *(*PyCFunction_GetFunction)(void *fn);
  void *(*PyCFunction_GetSelf)(void *fn); /* borrowed */
  void **PyExc_SystemError;
  /* interfaces.c: strict conversions */
  void *(*PyNumber_Index)(void *obj); /* new reference */
  void **PyExc_OverflowError;
  void **PyExc_Exception;
  int (*PyObject_IsTrue)(void *obj);
  int (*PyBuffer_IsContiguous)(const void *view, char order);
  void *(*PyLong_FromLongLong)(long long v); /* new reference */
  void *(*PyObject_Call)(void *callable, void *args, void *kwargs); /* new reference */
  void *(*PyDict_New)(void);                                         /* new reference */
  int (*PyDict_SetItem)(void *dict, void *key, void *value);
  void *(*PyTuple_New)(ptrdiff_t size);                              /* new reference */
  int (*PyTuple_SetItem)(void *tuple, ptrdiff_t i, void *item);      /* steals item */
  void *PyDict_Type;
  const char *(*PyUnicode_AsUTF8AndSize)(void *str, ptrdiff_t *size);
  void *PyUnicode_Type;
  void *Py_True; /* &_Py_TrueStruct */
  int (*PyErr_ExceptionMatches)(void *exc);
  void **PyExc_AttributeError;
  void *Py_False;

  /* pytensor.c: the Tensor's C base type. */
  void *(*PyType_FromSpec)(void *spec);                          /* new reference */
  void *(*PyType_FromSpecWithBases)(void *spec, void *bases);    /* new reference */
  void (*PyObject_ClearWeakRefs)(void *obj);
  void *(*PyMem_Malloc)(size_t size); /* GIL held */
  void (*PyMem_Free)(void *p);
  void *(*PyType_GetSlot)(void *type, int slot);
  unsigned long (*PyType_GetFlags)(void *type);
  void (*PyObject_GC_UnTrack)(void *obj);
  void (*PyObject_GC_Track)(void *obj);
  void *(*PyObject_Init)(void *obj, void *type); /* borrowed: obj */
  void *(*PyUnicode_InternFromString)(const char *s);            /* new reference */
  int (*PyUnicode_CompareWithASCIIString)(void *str, const char *s);
  void *(*PyInterpreterState_Get)(void);
  int64_t (*PyInterpreterState_GetID)(void *interp); /* 0: the main interpreter */
  void *PyBaseObject_Type; /* `object`: its __basicsize__ is the object header's size */
  void *PyLong_Type;
  void **PyExc_ImportError;

  void *PyCapsule_Type; /* the type object itself (&PyCapsule_Type) */
  void **PyExc_BufferError; /* data symbols: the address of a PyObject * */
  void **PyExc_ValueError;
  void **PyExc_TypeError;
  void **PyExc_MemoryError;
  void **PyExc_RuntimeError;
  /* The exchange consumer (exchange.c): per-type cache checks, error mapping. */
  int (*PySequence_Contains)(void *seq, void *item);
  void *(*PySequence_Tuple)(void *seq);              /* new reference */
  void *(*PyObject_Str)(void *obj);                  /* new reference */
  void **PyExc_NotImplementedError;
  void *Py_NotImplemented; /* &_Py_NotImplementedStruct */
} shim_pyapi;

/* The CPython API of this process, or NULL (last error DLPACKSHIM_ERR_NO_PYTHON)
 * when there is no CPython, it is not initialized, or it is finalizing and
 * the calling thread does not hold the GIL (Python code run by Py_FinalizeEx,
 * a __del__, holds it; any other thread must not take it then). For the
 * public functions. Cheap after the first call. */
const shim_pyapi *shim_py(void);

/* The API table if this process has CPython's symbols, whatever the state of
 * the interpreter; sets no error. For code that Python itself calls (capsule
 * destructors): Py_IsInitialized() already reads 0 while Py_FinalizeEx tears
 * modules down, yet the caller holds the GIL and the API works. */
const shim_pyapi *shim_py_bound(void);

/* The API if CPython is initialized and not finalizing, else NULL; sets no
 * error. Use it before taking the GIL from code that may run at any time
 * (deleters, release callbacks): a thread must not take the GIL once the
 * interpreter is shutting down. */
const shim_pyapi *shim_py_alive(void);

/* dlpackshim_py_release(obj) (obj non-NULL), and, inside the same GIL hold,
 * keep(block) when block is non-NULL; when Python can no longer be entered,
 * obj is left alone and block freed with free(). For deleters that give a
 * block back to a set the GIL guards. */
void shim_py_release_keeping(void *obj, void (*keep)(void *block), void *block);

/* type(obj), borrowed (obj keeps its type alive), through PyObject_Type:
 * the object header's layout is not part of the stable ABI. */
void *shim_type_of(const shim_pyapi *py, void *obj);

/* 1 when type(obj) is exactly `type` (an exact-type check: subclasses,
 * which may override anything, are not what the fast paths read). */
static inline int shim_is_exact(const shim_pyapi *py, void *obj, void *type) {
  return shim_type_of(py, obj) == type;
}

/* 1 when obj is an instance of `type` or of a subclass of it. */
static inline int shim_is_instance(const shim_pyapi *py, void *obj, void *type) {
  void *tp = shim_type_of(py, obj);
  return tp == type || py->PyType_IsSubtype(tp, type);
}

#define SHIM_LITTLE_ENDIAN (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)

/* pyapi.c: the names the binding looks up, interned once (shim_py_strings,
 * GIL held, when the package makes its builtins); shim_py_str is then a
 * borrowed reference. */
enum {
  SHIM_STR_DLPACK, SHIM_STR_ARRAY_INTERFACE, SHIM_STR_VERSION, SHIM_STR_MASK, SHIM_STR_DATA,
  SHIM_STR_SHAPE, SHIM_STR_TYPESTR, SHIM_STR_DESCR, SHIM_STR_STRIDES, SHIM_STR_OFFSET,
  SHIM_STR_MAX_VERSION, SHIM_STR_DEVICE, SHIM_STR_COPY, SHIM_STR_STREAM, SHIM_STR_ENABLED,
  SHIM_STR_COUNT
};
int shim_py_strings(const shim_pyapi *py); /* 0, or -1 with an exception */
void *shim_py_str(const shim_pyapi *py, int which);

/* pyapi.c: the package's atexit hook (private): from then on shim_py_alive
 * answers NULL where the interpreter has no Py_IsFinalizing (3.11, 3.12). */
DLPACKSHIM_API void dlpackshim__py_at_exit(void);

/* PyGILState_Ensure / _Release through the table (py must be non-NULL). */
static inline int shim_gil_ensure(const shim_pyapi *py) { return py->PyGILState_Ensure(); }
static inline void shim_gil_release(const shim_pyapi *py, int state) {
  py->PyGILState_Release(state);
}

/* Around foreign code that may run Python (a deleter, a capsule destructor,
 * an exporter's buffer release) called from a deallocation, GIL held: the
 * pending exception, if any, is set aside before and put back after, and an
 * exception the foreign code leaves is reported as unraisable (the object
 * may be half gone: none is named). With nothing pending, as on every hot
 * path, no fetch and restore: PyErr_Occurred is a third of their cost. */
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

/* Spare objects (pytensor.c's Tensors, bufholder.c's holders): instances of
 * one type freed lately, kept for the next ones as CPython keeps floats, so
 * that an object made and dropped at once costs no allocator round trip. A
 * spare is untracked and references nothing; the GIL guards the set. */
enum { SHIM_SPARES = 32 };
typedef struct {
  void *items[SHIM_SPARES];
  int count;
} shim_spares;

/* In a deallocator, after the object's references are dropped and before its
 * type's is: 1 when `obj` was kept (do not free it), 0 when the set is full. */
static inline int shim_spare_keep(shim_spares *s, void *obj) {
  if (s->count == SHIM_SPARES) return 0;
  s->items[s->count++] = obj;
  return 1;
}

/* The last one kept, NULL when none is (for plain memory blocks). */
static inline void *shim_spare_pop(shim_spares *s) {
  return s->count == 0 ? NULL : s->items[--s->count];
}

/* A kept object made new as an instance of `type` (reference count 1, a
 * reference to type, tracked by the GC) with its `size` bytes of fields at
 * `offset` zeroed; NULL when none is kept. */
static inline void *shim_spare_take(const shim_pyapi *py, shim_spares *s, void *type,
                                    ptrdiff_t offset, size_t size) {
  void *obj = shim_spare_pop(s);
  if (obj == NULL) return NULL;
  memset((char *)obj + offset, 0, size);
  py->PyObject_Init(obj, type);
  py->PyObject_GC_Track(obj);
  return obj;
}

/* Sets a Python exception (GIL held) from this thread's last error message,
 * its type chosen from status: INVALID_ARGUMENT/STREAM -> ValueError,
 * NO_MEMORY -> MemoryError, TYPE -> TypeError, NO_PYTHON -> RuntimeError,
 * PYTHON -> leaves the pending exception alone, else BufferError.
 * Returns NULL, for `return shim_py_raise(py, status);`. */
void *shim_py_raise(const shim_pyapi *py, int status);

/* shim_fail(status, fmt, ...) then shim_py_raise: NULL with the exception set. */
void *shim_py_fail(const shim_pyapi *py, int status, const char *fmt, ...) SHIM_PRINTF(3, 4);

/* The name of the capsule that carries a DLPackExchangeAPI (dlpack.h). */
#define SHIM_EXCHANGE_API_NAME "dlpack_exchange_api"

/* exchange_table.c: dlpackshim.Tensor's table (static), and the class its
 * to_py entry builds: the first class registered (a strong reference). */
extern const DLPackExchangeAPI shim_api_table;
void shim_exchange_table_class(const shim_pyapi *py, void *cls);

/* capsule.c: what a capsule dlpackshim consumed points at (opaque): the
 * snapshot of the tensor taken and validated at import, its flags and
 * version, and the producer's tensor that it deletes. */
typedef struct shim_record shim_record;

/* capsule.c (GIL held): the record capsule `cap` owns because
 * dlpackshim_capsule_import (or the exchange table's import) took it. NULL,
 * with no error and no exception, for anything else: a capsule consumed by
 * another library (its tensor may be gone), one whose consume failed (the
 * tensor was deleted), a fresh capsule, or not a capsule. */
const shim_record *shim_record_of(const shim_pyapi *py, void *cap);

/* capsule.c: the record's snapshot DLTensor (explicit strides, valid as long
 * as the record), with its flags (SHIM_FLAG_LEGACY included) and version
 * (0.0 for legacy); any out pointer may be NULL. */
const DLTensor *shim_record_tensor(const shim_record *r, uint64_t *flags, uint32_t *major,
                                   uint32_t *minor);

/* capsule.c (GIL held): shim_record_of, then its tensor, flags and whether it
 * is versioned (1) or legacy (0); either pointer may be NULL. */
const DLTensor *shim_owned_tensor(const shim_pyapi *py, void *cap, uint64_t *flags, int *versioned);

/* capsule.c (GIL held): what an export of holder's data must reference: the
 * holder itself, or, when it owns one of our own export views, the holder
 * that view references (so that re-import chains never nest). Borrowed. */
void *shim_export_holder(const shim_pyapi *py, void *holder);

/* capsule.c (GIL held): shim_export_holder(holder) for a holder whose
 * record (shim_holder_record) is r, without asking Python what holder is
 * unless r is one of our export views. */
void *shim_record_export_holder(const shim_pyapi *py, void *holder, const shim_record *r);

/* capsule.c (GIL held): a versioned view of src (shape and strides copied,
 * NULL strides made explicit) whose deleter drops a reference to owner, taken
 * here; the tensor export of dlpackshim__capsule_export without the capsule.
 * src must be a tensor shim_owned_tensor returned (validated when taken: not
 * checked again). NULL with a Python exception set on failure. */
DLManagedTensorVersioned *shim_export_view(const shim_pyapi *py, void *owner, const DLTensor *src,
                                           uint64_t flags);

/* capsule.c (GIL held): dlpackshim__capsule_export of a src that
 * shim_owned_tensor returned (validated when taken: not checked again);
 * owner is what the export references, shim_export_holder's answer. */
void *shim_export_owned(const shim_pyapi *py, void *owner, const DLTensor *src, uint64_t flags,
                        int versioned);

/* capsule.c (GIL held): calls t's deleter (if any) keeping the pending exception. */
void shim_delete_versioned(const shim_pyapi *py, DLManagedTensorVersioned *t);

/* capsule.c (GIL held): a new capsule owning m exactly as one that
 * dlpackshim_capsule_import consumed ("used_dltensor_versioned", a record),
 * so shim_record_of and the Python Tensor accept it. m is taken in every
 * case: checked (major version, validation; `built`: just made by
 * dlpackshim_tensor_new or _clone, not validated again) and deleted on
 * failure. NULL with an exception set on failure; else *record_out (may be
 * NULL) is the capsule's record. */
void *shim_owner_capsule(const shim_pyapi *py, DLManagedTensorVersioned *m, int built,
                         const shim_record **record_out);

/* capsule.c (GIL held): a capsule like shim_owner_capsule's, whose record
 * holds a copy of t's layout (t validated with flags first; NULL strides
 * made explicit) and no producer tensor: for memory that the Tensor's
 * holder keeps alive through its `keep` (from_pointer's owner). NULL with
 * an exception set; else *record_out (may be NULL) is its record. */
void *shim_layout_capsule(const shim_pyapi *py, const DLTensor *t, uint64_t flags,
                          const shim_record **record_out);

/* capsule.c (GIL held): the record shim_layout_capsule puts in its capsule,
 * for a holder of another kind (bufholder.c); shim_record_free frees it. NULL
 * with an exception set. */
shim_record *shim_record_new_layout(const shim_pyapi *py, const DLTensor *t, uint64_t flags);
void shim_record_free(const shim_pyapi *py, shim_record *r);

/* bufholder.c (GIL held): the holder of a buffer-protocol import: one object
 * holding x's export (PyObject_GetBuffer(x, flags), released when the holder
 * goes) and, once set, the record of its layout. *view_out is the held view,
 * valid while the holder lives. NULL with an exception set. */
void *shim_bufholder_new(const shim_pyapi *py, void *x, int flags, const shim_py_buffer **view_out);
void shim_bufholder_set_record(const shim_pyapi *py, void *holder, shim_record *r);
/* The record of such a holder; NULL (no exception) for any other object. */
const shim_record *shim_bufholder_record(const shim_pyapi *py, void *obj);

/* capsule.c (GIL held): dlpackshim_capsule_import without the GIL round
 * trip: the record the capsule now owns, or NULL with the last error set. */
const shim_record *shim_import_locked(const shim_pyapi *py, void *capsule);

/* ---- the Python package's private entry points --------------------------
 * Exported (named dlpackshim__*, two underscores) because the package reaches
 * them through ctypes, but not part of the public API: no stability promise,
 * not in dlpackshim.h. Both need the GIL (ctypes.PyDLL keeps it). */

/* pytensor.c: the C base type of dlpackshim.Tensor (new reference), made on
 * the first call with dlpack_doc (a str) as __dlpack__'s docstring; NULL
 * with ImportError set outside the main interpreter. */
DLPACKSHIM_API void *dlpackshim__py_tensor_base(void *dlpack_doc);

/* pytensor.c: a new C subtype of that base named dlpackshim.Tensor (new
 * reference), for the package to copy its Tensor class's methods onto. */
DLPACKSHIM_API void *dlpackshim__py_tensor_class(void);

/* pyfast.c: builtin number `which` (pyfast.c lists them, then exchange.c's)
 * bound to `cls`, the package's Tensor class (new reference). */
DLPACKSHIM_API void *dlpackshim__py_builtin(int which, void *cls);

/* pyconsume.c: the package's from_dlpack (new reference): its hot path in C,
 * everything else in the Python function ctx names; doc becomes __doc__. */
DLPACKSHIM_API void *dlpackshim__py_from_dlpack(void *ctx, void *doc);

/* pyconsume.c: the package's from_dlpack_many (new reference), sharing the
 * from_dlpack builtin's module: a list or tuple with the tables on in C,
 * the rest through ctx_many = (slow_many, switches), switches a dict whose
 * "enabled" is True while the C exchange tables are used. */
DLPACKSHIM_API void *dlpackshim__py_from_dlpack_many(void *from_dlpack_fn, void *ctx_many,
                                                     void *doc);

/* capsule.c: a new capsule of a view of src, a DLTensor valid while `owner`
 * (a Python object) lives: the export holds a reference to owner (dropped by
 * its deleter, never after Python finalised) and its own shape and strides
 * (NULL strides made explicit); src is validated first. versioned 1 ->
 * "dltensor_versioned" (version 1.3, flags as given), 0 -> "dltensor"
 * (refused: READ_ONLY data, as NumPy does, and padded sub-byte data). When
 * owner owns one of our own export views, the export references that view's
 * owner, so re-import chains never nest. New reference, or NULL with an
 * exception: BufferError (invalid src, read-only legacy), ValueError (NULL),
 * MemoryError. */
DLPACKSHIM_API void *dlpackshim__capsule_export(void *owner, const DLTensor *src, uint64_t flags,
                                                int versioned);

/* capsule.c: as dlpackshim__capsule_export, of a fresh compact copy of src
 * (IS_COPIED set). */
DLPACKSHIM_API void *dlpackshim__capsule_export_copy(const DLTensor *src, uint64_t flags,
                                                     int versioned);

/* buffer.c: the address of the first element of obj's buffer (asked for as
 * a strided read-only view, released at once: the caller keeps an export of
 * its own alive). Status: 0, _TYPE (no strided buffer, exception cleared). */
DLPACKSHIM_API int dlpackshim__buffer_address(void *obj, void **address_out);

/* exchange_table.c: a capsule named "dlpack_exchange_api" holding
 * dlpackshim_exchange_api(), for Tensor.__dlpack_c_exchange_api__. */
DLPACKSHIM_API void *dlpackshim__exchange_api_capsule(void);

/* exchange.c: imports obj through an exchange table: the capsule api_capsule,
 * or when it is NULL type(obj)'s own (cached per type, re-checked on use, not
 * used when a subclass overrides __dlpack__ below the class carrying it; a
 * table of another major version is followed along prev_api). The package's
 * checks for obj's type run first (PyTorch: what its __dlpack__ refuses). The
 * tensor is checked as dlpackshim_capsule_import checks it; for GPU data the
 * default stream waits on the producer's current_work_stream. *tensor_out
 * (may be NULL) gets its DLTensor. A new reference to a capsule owning the
 * tensor as dlpackshim_capsule_import leaves one, or NULL with an exception:
 * the table's own (a RuntimeError or NotImplementedError from a foreign
 * table becomes BufferError), TypeError (no usable table), BufferError. */
DLPACKSHIM_API void *dlpackshim__exchange_import(void *obj, void *api_capsule,
                                                 const DLTensor **tensor_out);

/* ---- pytensor.c: the C base of dlpackshim.Tensor ----------------------- */

typedef struct shim_tensor shim_tensor;

/* The record a Tensor's holder owns: the holder is a consumed capsule or a
 * tuple (capsule, keep). NULL for anything else (no exception). */
const shim_record *shim_holder_record(const shim_pyapi *py, void *holder);

/* A new instance of cls (a subclass of the base type) holding `holder`
 * (reference stolen, also on failure). NULL with an exception set. */
void *shim_tensor_new(const shim_pyapi *py, void *cls, void *holder);

/* shim_tensor_new when the caller already has holder's record r (it just
 * made or consumed the capsule): no second look-up. */
void *shim_tensor_of_record(const shim_pyapi *py, void *cls, void *holder, const shim_record *r);

/* A new Tensor of class cls owning m (taken in every case: checked, unless
 * `built` says dlpackshim_tensor_new or _clone just made and validated it,
 * and deleted on failure), with keep (NULL or None: nothing) held beside it
 * as (capsule, keep). NULL with an exception set. */
void *shim_tensor_adopt(const shim_pyapi *py, void *cls, DLManagedTensorVersioned *m, void *keep,
                        int built);

/* A new Tensor of class cls viewing t (validated with flags, its layout
 * copied: shim_layout_capsule), memory that keep (not None) keeps alive.
 * NULL with an exception set. */
void *shim_tensor_view(const shim_pyapi *py, void *cls, const DLTensor *t, uint64_t flags,
                       void *keep);

/* obj as a Tensor, or NULL (no exception) when it is none. */
shim_tensor *shim_tensor_check(const shim_pyapi *py, void *obj);

/* 1 when instances of `type` are Tensors (shim_tensor_check's rule, for a
 * caller that already holds the type: a batch asks once per run of a type). */
int shim_tensor_type_check(const shim_pyapi *py, void *type);

/* A new Tensor of class cls sharing src's holder (a re-import of a Tensor:
 * no copy of anything), IS_COPIED dropped, src's stream kept. NULL with an
 * exception set (ValueError when src is closed). */
void *shim_tensor_share(const shim_pyapi *py, void *cls, shim_tensor *src);

/* A Tensor's snapshot DLTensor with its holder (borrowed: take a reference
 * before running anything that may close the Tensor), flags and stream
 * (borrowed, NULL or None for the default); NULL once closed. */
const DLTensor *shim_tensor_parts(const shim_pyapi *py, shim_tensor *t, void **holder,
                                  uint64_t *flags, void **stream);

/* ---- pytensor.c and bufholder.c: the heap types --------------------------- */

/* CPython's PyType_Slot and PyType_Spec, written from their layouts (stable
 * ABI), for the heap types made here with PyType_FromSpec; no object is read
 * in place. */
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

typedef int (*shim_visitproc)(void *obj, void *arg);

enum { Py_tp_dealloc = 52, Py_tp_doc = 56, Py_tp_traverse = 71, Py_tp_free = 74 };
enum { TPFLAGS_DISALLOW_INSTANTIATION = 1 << 7, TPFLAGS_HAVE_GC = 1 << 14 };

/* pytensor.c: where a heap type's C fields start after CPython's object
 * header, whose size is not part of the stable ABI (it grows on
 * free-threaded builds): object.__basicsize__, rounded up to 16. -1 with an
 * exception. */
ptrdiff_t shim_fields_offset(const shim_pyapi *py);

/* ---- pyfast.c, pyconsume.c and exchange.c: the builtins ------------------- */

/* CPython's PyMethodDef, written from its layout (stable ABI). */
typedef struct {
  const char *ml_name;
  void *ml_meth;
  int ml_flags;
  const char *ml_doc;
} shim_method_def;

enum { SHIM_METH_NOARGS = 0x0004, SHIM_METH_O = 0x0008, SHIM_METH_FASTCALL = 0x0080 };

/* exchange.c: the exchange table's builtins (self: the Tensor class they
 * build); *count set to their number. */
const shim_method_def *shim_exchange_defs(int *count);

/* interfaces.c: the builtins _import_buffer, _import_array_interface and
 * _interface_layout; *count set to their number. */
const shim_method_def *shim_interface_defs(int *count);

/* interfaces.c: x through the buffer protocol / its __array_interface__, as
 * a new Tensor of class cls; NULL with an exception (TypeError, ValueError
 * or BufferError as the standard names them, or x's own). */
void *shim_buffer_tensor(const shim_pyapi *py, void *cls, void *x);
void *shim_array_interface_tensor(const shim_pyapi *py, void *cls, void *x);

/* exchange.c: _exchange(x) for a Tensor class: x imported through its type's
 * table. NULL with an exception set. */
void *shim_exchange_one(const shim_pyapi *py, void *cls, void *x);

/* exchange.c: _exchange_many(seq) for a Tensor class (seq a list or tuple):
 * a list of Tensors, or (list, count, items) when count items have no usable
 * table (None in their places; items: the tuple of seq's items it walked). */
void *shim_exchange_many(const shim_pyapi *py, void *cls, void *seq);

/* pyfast.c: _import_tensor(capsule) for a Tensor class. */
void *shim_import_tensor(const shim_pyapi *py, void *cls, void *capsule);

/* pyconsume.c: the from_dlpack builtin: ml_def with doc `doc` (copied),
 * bound to a module whose state holds ctx (see pyconsume.c). New reference,
 * or NULL with an exception. */
void *shim_from_dlpack_builtin(const shim_pyapi *py, void *ctx, void *doc);

/* pyconsume.c: the from_dlpack_many builtin, sharing from_dlpack's module
 * (see pyconsume.c); ctx_many = (slow_many, switches). */
void *shim_from_dlpack_many_builtin(const shim_pyapi *py, void *from_dlpack_fn, void *ctx_many,
                                    void *doc);

#endif /* DLPACKSHIM_BINDING_H */
