/*
 * pyapi.c - the CPython API, bound at run time.
 *
 * libdlpackshim links neither libpython nor Python.h, so that one .so serves
 * every CPython 3.11+ and plain C programs alike. The first call that needs
 * Python resolves every entry point with dlsym(RTLD_DEFAULT, ...): in a
 * Python process the interpreter's symbols are global.
 *
 * Only names of CPython's stable ABI are resolved (tests/python checks every
 * name in the built library against Misc/stable_abi.toml). SHIM_BIND names are in
 * the stable ABI of the oldest CPython supported (3.11); SHIM_BIND_SINCE names
 * joined it later and stay NULL on an older interpreter, whose users have a
 * fallback. No object's layout is read in place.
 */
#define _GNU_SOURCE 1 /* RTLD_DEFAULT */
#include "binding.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef RTLD_DEFAULT
#define RTLD_DEFAULT ((void *)0)
#endif

static shim_pyapi api;
static int api_ok;                /* written once, inside pthread_once */
static int api_ready;             /* 1 (release-stored) once bind_api ran */
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static unsigned long py_version;  /* the running CPython's PY_VERSION_HEX */
static int too_old;               /* a CPython older than 3.11 runs here */

/* dlsym returns a data pointer; POSIX guarantees it converts to a function
 * pointer. memcpy keeps -Wpedantic quiet about the cast. */
#define SHIM_BIND(field, symbol)                        \
  do {                                             \
    void *sym_ = dlsym(RTLD_DEFAULT, symbol);      \
    if (sym_ == NULL) return 0;                    \
    memcpy(&api.field, &sym_, sizeof(sym_));       \
  } while (0)
#define SHIM_BIND_DATA(field, symbol)                   \
  do {                                             \
    if ((api.field = dlsym(RTLD_DEFAULT, symbol)) == NULL) return 0; \
  } while (0)
#define SHIM_BIND_SINCE(field, symbol, major, minor)    \
  do {                                             \
    if (shim_py_at_least(major, minor)) SHIM_BIND(field, symbol); \
  } while (0)

int shim_py_at_least(int major, int minor) {
  return py_version >= ((unsigned long)major << 24 | (unsigned long)minor << 16);
}

static int bind_api(void) {
  const unsigned long *version;
  SHIM_BIND(Py_IsInitialized, "Py_IsInitialized");
  version = (const unsigned long *)dlsym(RTLD_DEFAULT, "Py_Version"); /* 3.11+ */
  if (version == NULL || *version < 0x030B0000UL) {
    too_old = 1;
    return 0;
  }
  py_version = *version;
  /* 3.11 and 3.12 have no stable-ABI Py_IsFinalizing: see shim_py_alive. */
  SHIM_BIND_SINCE(Py_IsFinalizing, "Py_IsFinalizing", 3, 13);
  SHIM_BIND(PyGILState_Ensure, "PyGILState_Ensure");
  SHIM_BIND(PyGILState_Release, "PyGILState_Release");
  SHIM_BIND(PyCapsule_New, "PyCapsule_New");
  SHIM_BIND(PyCapsule_GetPointer, "PyCapsule_GetPointer");
  SHIM_BIND(PyCapsule_GetName, "PyCapsule_GetName");
  SHIM_BIND(PyCapsule_SetName, "PyCapsule_SetName");
  SHIM_BIND(PyCapsule_GetDestructor, "PyCapsule_GetDestructor");
  SHIM_BIND(PyCapsule_SetDestructor, "PyCapsule_SetDestructor");
  SHIM_BIND(PyCapsule_IsValid, "PyCapsule_IsValid");
  SHIM_BIND(PyCapsule_GetContext, "PyCapsule_GetContext");
  SHIM_BIND(PyCapsule_SetContext, "PyCapsule_SetContext");
  SHIM_BIND(Py_IncRef, "Py_IncRef");
  SHIM_BIND(Py_DecRef, "Py_DecRef");
  SHIM_BIND(PyObject_GetAttr, "PyObject_GetAttr");
  SHIM_BIND(PyObject_GetAttrString, "PyObject_GetAttrString");
  SHIM_BIND_SINCE(PyObject_GetOptionalAttr, "PyObject_GetOptionalAttr", 3, 13);
  SHIM_BIND(PyObject_IsTrue, "PyObject_IsTrue");
  SHIM_BIND(PyObject_IsInstance, "PyObject_IsInstance");
  SHIM_BIND(PyObject_CheckBuffer, "PyObject_CheckBuffer");
  SHIM_BIND(PyObject_GetBuffer, "PyObject_GetBuffer");
  SHIM_BIND(PyBuffer_Release, "PyBuffer_Release");
  SHIM_BIND(PyBuffer_IsContiguous, "PyBuffer_IsContiguous");
  SHIM_BIND(PyObject_Call, "PyObject_Call");
  SHIM_BIND(PyObject_CallFunctionObjArgs, "PyObject_CallFunctionObjArgs");
  SHIM_BIND(PyObject_CallMethodObjArgs, "PyObject_CallMethodObjArgs");
  SHIM_BIND_SINCE(PyObject_Vectorcall, "PyObject_Vectorcall", 3, 12);
  SHIM_BIND_SINCE(PyObject_VectorcallMethod, "PyObject_VectorcallMethod", 3, 12);
  SHIM_BIND(PyObject_Str, "PyObject_Str");
  SHIM_BIND(PySequence_Contains, "PySequence_Contains");
  SHIM_BIND(PySequence_Tuple, "PySequence_Tuple");
  SHIM_BIND(PyCFunction_NewEx, "PyCFunction_NewEx");
  SHIM_BIND(PyCFunction_GetFlags, "PyCFunction_GetFlags");
  SHIM_BIND(PyCFunction_GetFunction, "PyCFunction_GetFunction");
  SHIM_BIND(PyCFunction_GetSelf, "PyCFunction_GetSelf");
  SHIM_BIND(PyImport_ImportModule, "PyImport_ImportModule");
  SHIM_BIND(PyModule_New, "PyModule_New");
  SHIM_BIND(PyLong_FromLongLong, "PyLong_FromLongLong");
  SHIM_BIND(PyLong_FromUnsignedLongLong, "PyLong_FromUnsignedLongLong");
  SHIM_BIND(PyLong_AsLongLong, "PyLong_AsLongLong");
  SHIM_BIND(PyLong_AsUnsignedLongLong, "PyLong_AsUnsignedLongLong");
  SHIM_BIND(PyNumber_Index, "PyNumber_Index");
  SHIM_BIND(PyBool_FromLong, "PyBool_FromLong");
  SHIM_BIND(PyTuple_New, "PyTuple_New");
  SHIM_BIND(PyTuple_Pack, "PyTuple_Pack");
  SHIM_BIND(PyTuple_Size, "PyTuple_Size");
  SHIM_BIND(PyTuple_GetItem, "PyTuple_GetItem");
  SHIM_BIND(PyTuple_SetItem, "PyTuple_SetItem");
  SHIM_BIND(PyList_New, "PyList_New");
  SHIM_BIND(PyList_Size, "PyList_Size");
  SHIM_BIND(PyList_SetItem, "PyList_SetItem");
  SHIM_BIND(PyDict_New, "PyDict_New");
  SHIM_BIND(PyDict_SetItem, "PyDict_SetItem");
  SHIM_BIND(PyDict_SetItemString, "PyDict_SetItemString");
  SHIM_BIND(PyDict_GetItemWithError, "PyDict_GetItemWithError");
  SHIM_BIND(PyUnicode_AsUTF8AndSize, "PyUnicode_AsUTF8AndSize");
  SHIM_BIND(PyUnicode_InternFromString, "PyUnicode_InternFromString");
  SHIM_BIND(PyUnicode_CompareWithASCIIString, "PyUnicode_CompareWithASCIIString");
  SHIM_BIND(PyErr_SetString, "PyErr_SetString");
  SHIM_BIND(PyErr_Occurred, "PyErr_Occurred");
  SHIM_BIND(PyErr_Fetch, "PyErr_Fetch");
  SHIM_BIND(PyErr_Restore, "PyErr_Restore");
  SHIM_BIND(PyErr_Clear, "PyErr_Clear");
  SHIM_BIND(PyErr_ExceptionMatches, "PyErr_ExceptionMatches");
  SHIM_BIND(PyErr_WriteUnraisable, "PyErr_WriteUnraisable");
  SHIM_BIND(PyType_FromSpec, "PyType_FromSpec");
  SHIM_BIND(PyType_FromSpecWithBases, "PyType_FromSpecWithBases");
  SHIM_BIND(PyObject_Type, "PyObject_Type");
  SHIM_BIND(PyType_GenericAlloc, "PyType_GenericAlloc");
  SHIM_BIND(PyObject_Malloc, "PyObject_Malloc");
  SHIM_BIND(PyObject_Free, "PyObject_Free");
  SHIM_BIND(PyObject_GC_Del, "PyObject_GC_Del");
  SHIM_BIND(PyEval_SaveThread, "PyEval_SaveThread");
  SHIM_BIND(PyEval_RestoreThread, "PyEval_RestoreThread");
  SHIM_BIND(PyObject_Init, "PyObject_Init");
  SHIM_BIND(PyType_IsSubtype, "PyType_IsSubtype");
  SHIM_BIND(PyType_GetSlot, "PyType_GetSlot");
  SHIM_BIND(PyType_GetFlags, "PyType_GetFlags");
  SHIM_BIND(PyObject_GC_UnTrack, "PyObject_GC_UnTrack");
  SHIM_BIND(PyObject_ClearWeakRefs, "PyObject_ClearWeakRefs");
  SHIM_BIND(PyWeakref_NewRef, "PyWeakref_NewRef");
  SHIM_BIND(PyWeakref_GetObject, "PyWeakref_GetObject");
  SHIM_BIND(PyInterpreterState_Get, "PyInterpreterState_Get");
  SHIM_BIND(PyInterpreterState_GetID, "PyInterpreterState_GetID");
  SHIM_BIND_DATA(PyBaseObject_Type, "PyBaseObject_Type");
  SHIM_BIND_DATA(PyCapsule_Type, "PyCapsule_Type");
  SHIM_BIND_DATA(PyLong_Type, "PyLong_Type");
  SHIM_BIND_DATA(PyBool_Type, "PyBool_Type");
  SHIM_BIND_DATA(PyTuple_Type, "PyTuple_Type");
  SHIM_BIND_DATA(PyList_Type, "PyList_Type");
  SHIM_BIND_DATA(PyDict_Type, "PyDict_Type");
  SHIM_BIND_DATA(PyUnicode_Type, "PyUnicode_Type");
  SHIM_BIND_DATA(PyCFunction_Type, "PyCFunction_Type");
  SHIM_BIND_DATA(Py_None, "_Py_NoneStruct");
  SHIM_BIND_DATA(Py_True, "_Py_TrueStruct");
  SHIM_BIND_DATA(Py_False, "_Py_FalseStruct");
  SHIM_BIND_DATA(Py_NotImplemented, "_Py_NotImplementedStruct");
  SHIM_BIND_DATA(PyMemoryView_Type, "PyMemoryView_Type");
  SHIM_BIND_DATA(PyExc_AttributeError, "PyExc_AttributeError");
  SHIM_BIND_DATA(PyExc_BufferError, "PyExc_BufferError");
  SHIM_BIND_DATA(PyExc_ValueError, "PyExc_ValueError");
  SHIM_BIND_DATA(PyExc_TypeError, "PyExc_TypeError");
  SHIM_BIND_DATA(PyExc_OverflowError, "PyExc_OverflowError");
  SHIM_BIND_DATA(PyExc_RuntimeError, "PyExc_RuntimeError");
  SHIM_BIND_DATA(PyExc_NotImplementedError, "PyExc_NotImplementedError");
  SHIM_BIND_DATA(PyExc_ImportError, "PyExc_ImportError");
  SHIM_BIND_DATA(PyExc_MemoryError, "PyExc_MemoryError");
  SHIM_BIND_DATA(PyExc_Exception, "PyExc_Exception");
  return 1;
}

static void init_api(void) {
  api_ok = bind_api();
  if (!api_ok) memset(&api, 0, sizeof(api));
  __atomic_store_n(&api_ready, 1, __ATOMIC_RELEASE);
}

const shim_pyapi *shim_py_bound(void) {
  if (SHIM_UNLIKELY(!__atomic_load_n(&api_ready, __ATOMIC_ACQUIRE)))
    pthread_once(&api_once, init_api);
  return api_ok ? &api : NULL;
}

/* From the package's atexit hook on (it runs before Py_FinalizeEx marks the
 * runtime finalizing, on the thread that finalizes): where the stable ABI
 * has no Py_IsFinalizing (3.11, 3.12), the mark says the interpreter is
 * shutting down (shim_py_alive says what follows for the exit thread). */
static int at_exit;
static pthread_t exit_thread;

DLPACKSHIM_API void dlpackshim__py_at_exit(void) {
  exit_thread = pthread_self();
  __atomic_store_n(&at_exit, 1, __ATOMIC_RELEASE);
}

static int shutting_down(const shim_pyapi *py) {
  return py->Py_IsFinalizing != NULL ? py->Py_IsFinalizing()
                                     : __atomic_load_n(&at_exit, __ATOMIC_ACQUIRE);
}

const shim_pyapi *shim_py(void) {
  const shim_pyapi *py = shim_py_bound();
  if (SHIM_LIKELY(py != NULL && py->Py_IsInitialized())) return py;
  /* Py_FinalizeEx reads "not initialized" while it still runs __del__
   * methods, which hold the GIL; any other thread must not take it then. */
  if (py != NULL && shutting_down(py)) {
    if (__atomic_load_n(&at_exit, __ATOMIC_ACQUIRE) && pthread_equal(exit_thread, pthread_self()))
      return py;
    shim_fail(DLPACKSHIM_ERR_NO_PYTHON,
              "CPython is finalizing: dlpackshim can be called then only from the thread "
              "that shuts it down");
    return NULL;
  }
  shim_fail(DLPACKSHIM_ERR_NO_PYTHON, too_old ? "the CPython in this process is older than 3.11"
                                              : "CPython is not running in this process");
  return NULL;
}

const shim_pyapi *shim_py_alive(void) {
  const shim_pyapi *py = shim_py_bound();
  if (py == NULL || !py->Py_IsInitialized()) return NULL;
  if (py->Py_IsFinalizing != NULL) return py->Py_IsFinalizing() ? NULL : py;
  /* 3.11, 3.12: the atexit handlers that run after the package's own still
   * run Python on the exit thread, which may take the GIL; another thread
   * may not tell whether finalization began, and must not take it then. */
  if (__atomic_load_n(&at_exit, __ATOMIC_ACQUIRE) && !pthread_equal(exit_thread, pthread_self()))
    return NULL;
  return py;
}

void *shim_type_of(const shim_pyapi *py, void *obj) {
  void *type = py->PyObject_Type(obj);
  py->Py_DecRef(type); /* obj holds its type for as long as the caller holds obj */
  return type;
}

void shim_type_name(const shim_pyapi *py, void *type, const char *attr, char *buf, size_t size) {
  void *name = py->PyObject_GetAttrString(type, attr);
  const char *s = NULL;
  if (name != NULL && shim_is_instance(py, name, py->PyUnicode_Type)) s = py->PyUnicode_AsUTF8AndSize(name, NULL);
  snprintf(buf, size, "%s", s != NULL ? s : "?");
  if (name != NULL) py->Py_DecRef(name);
  if (py->PyErr_Occurred() != NULL) py->PyErr_Clear();
}

/* ---- names and optional attributes ------------------------------------- */

static const char *const str_text[SHIM_STR_COUNT] = {
    "__dlpack__", "__dlpack_device__", "__dlpack_c_exchange_api__", "__array_interface__",
    "__cuda_array_interface__", "max_version", "dl_device", "copy", "stream", "device",
    "version", "mask", "data", "shape", "typestr", "descr", "strides", "offset", "__mro__",
    "__dict__", "__dictoffset__"};
void *shim_strs[SHIM_STR_COUNT]; /* interned, kept for the process */
#define strs shim_strs

const char *shim_str_text(int which) { return str_text[which]; }
static ptrdiff_t str_len[SHIM_STR_COUNT];
ptrdiff_t shim_str_len(int which) { return str_len[which]; }

/* builtins.getattr, whose three-argument form looks an attribute up without
 * making an AttributeError (_PyObject_LookupAttr): 8 ns for an absent
 * attribute against ~180 ns for PyObject_GetAttr's exception (measured on
 * 3.11). Called through its METH_FASTCALL function: no tuple per call. */
typedef void *(*fastcall_fn)(void *self, void *const *args, ptrdiff_t nargs);
static fastcall_fn getattr_fn;
static void *getattr_obj, *absent; /* held for the process; absent: a sentinel */

/* Once, GIL held, from the package's bind (module.c). -1 with an exception. */
int shim_py_names(const shim_pyapi *py) {
  int k;
  for (k = 0; k < SHIM_STR_COUNT; k++) {
    if (strs[k] == NULL && (strs[k] = py->PyUnicode_InternFromString(str_text[k])) == NULL)
      return -1;
    str_len[k] = (ptrdiff_t)strlen(str_text[k]);
  }
  if (py->PyObject_GetOptionalAttr != NULL || getattr_obj != NULL) return 0;
  {
    void *builtins = py->PyImport_ImportModule("builtins"), *fn, *fnp;
    if (builtins == NULL) return -1;
    getattr_obj = py->PyObject_GetAttrString(builtins, "getattr");
    py->Py_DecRef(builtins);
    if (getattr_obj == NULL) return -1;
    absent = py->PyTuple_New(0);
    if (absent == NULL) return -1;
    /* getattr is METH_FASTCALL in every CPython 3.11 and 3.12; any other
     * convention calls it through PyObject_CallFunctionObjArgs instead. */
    if (shim_type_of(py, getattr_obj) == py->PyCFunction_Type &&
        py->PyCFunction_GetFlags(getattr_obj) == SHIM_METH_FASTCALL) {
      fnp = py->PyCFunction_GetFunction(getattr_obj);
      memcpy(&getattr_fn, &fnp, sizeof(fnp));
    }
    (void)fn;
  }
  return 0;
}

int shim_lookup(const shim_pyapi *py, void *obj, void *name, void **value) {
  void *r;
  if (py->PyObject_GetOptionalAttr != NULL) return py->PyObject_GetOptionalAttr(obj, name, value);
  if (SHIM_LIKELY(getattr_fn != NULL)) {
    void *args[3] = {obj, name, absent};
    r = getattr_fn(py->PyCFunction_GetSelf(getattr_obj), args, 3);
  } else {
    r = py->PyObject_CallFunctionObjArgs(getattr_obj, obj, name, absent, NULL);
  }
  *value = NULL;
  if (r == NULL) return -1;
  if (r == absent) {
    py->Py_DecRef(r);
    return 0;
  }
  *value = r;
  return 1;
}

/* ---- statuses as exceptions ---------------------------------------------- */

void *shim_py_raise(const shim_pyapi *py, int status) {
  void *type = NULL;
  const char *msg, *cut;
  char text[512];
  if (py == NULL) return NULL;
  if (status == DLPACKSHIM_ERR_PYTHON && py->PyErr_Occurred() != NULL) return NULL;
  if (status <= 0 && status > -SHIM_STATUS_COUNT) type = shim_pkg.exceptions[-status];
  if (type == NULL) type = *py->PyExc_RuntimeError; /* before the package bound the library */
  msg = dlpackshim_last_error();
  if (msg == NULL || msg[0] == '\0') msg = dlpackshim_strerror(status);
  if (status == DLPACKSHIM_ERR_STREAM && (cut = strstr(msg, "has_stream = 0")) != NULL) {
    /* The C API's words for "no stream" are Python's None. */
    snprintf(text, sizeof(text), "%.*sNone%s", (int)(cut - msg), msg, cut + strlen("has_stream = 0"));
    msg = text;
  }
  py->PyErr_SetString(type, msg);
  return NULL;
}

void *shim_py_fail(const shim_pyapi *py, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  shim_fail(status, "%s", msg);
  return shim_py_raise(py, status);
}

/* ---- public ----------------------------------------------------------- */

DLPACKSHIM_API int dlpackshim_python_available(void) {
  const shim_pyapi *py = shim_py_bound();
  return py != NULL && py->Py_IsInitialized() ? 1 : 0;
}

DLPACKSHIM_API int dlpackshim_py_retain(void *obj) {
  const shim_pyapi *py;
  int gil;
  if (obj == NULL) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "py_retain: obj is NULL");
  py = shim_py_alive();
  if (py == NULL)
    return shim_fail(DLPACKSHIM_ERR_NO_PYTHON,
                     "py_retain: CPython is not running in this process (or is finalizing)");
  gil = py->PyGILState_Ensure();
  py->Py_IncRef(obj);
  py->PyGILState_Release(gil);
  return DLPACKSHIM_OK;
}

/* A dlpackshim_release_fn: deleters call it from any thread, with or without
 * the GIL (PyTorch calls foreign deleters without it). Once the interpreter
 * is shutting down the reference is leaked on purpose: taking the GIL then
 * can hang or kill the calling thread, and the process is about to end. */
DLPACKSHIM_API void dlpackshim_py_release(void *obj) {
  const shim_pyapi *py;
  int gil;
  if (obj == NULL || (py = shim_py_alive()) == NULL) return;
  gil = py->PyGILState_Ensure();
  py->Py_DecRef(obj);
  py->PyGILState_Release(gil);
}
