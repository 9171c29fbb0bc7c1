/*
 * pyapi.c - the CPython API, bound at run time.
 *
 * libdlpackshim links neither libpython nor Python.h, so that one .so serves
 * every CPython 3.11+ and plain C programs alike. The first call that needs
 * Python resolves every entry point with dlsym(RTLD_DEFAULT, ...): in a
 * Python process the interpreter's symbols are global (python exports them
 * for extension modules; libpython is a global dependency of the program).
 *
 * Only names of CPython's stable ABI are resolved (Misc/stable_abi.toml;
 * tests/python/test_stable_abi.py checks every name in the built library
 * against it). SHIM_BIND names are in the stable ABI of the oldest CPython
 * supported (3.11, pyproject.toml); SHIM_BIND_SINCE names joined it later and
 * are resolved only when the running CPython is at least that version (the
 * field stays NULL otherwise, and its user has a fallback). No object's
 * layout is read in place: types through PyObject_Type, tuples through
 * PyTuple_Size/GetItem, the object header's size from object.__basicsize__.
 *
 * Resolution happens once per process: CPython must be loaded before the
 * first capsule call (a program that dlopens libpython later, after having
 * asked, keeps the "no Python" answer).
 */
#define _GNU_SOURCE 1 /* RTLD_DEFAULT */
#include "binding.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef RTLD_DEFAULT
#define RTLD_DEFAULT ((void *)0)
#endif

static shim_pyapi shim_api;
static int shim_api_ok; /* written once, inside pthread_once */
static int shim_api_ready; /* 1 (release-stored) once shim_api_init ran */
static pthread_once_t shim_api_once = PTHREAD_ONCE_INIT;

/* dlsym returns a data pointer; POSIX guarantees it converts to a function
 * pointer. Going through memcpy keeps -Wpedantic quiet about the cast. */
#define SHIM_BIND(field, symbol)                                  \
  do {                                                            \
    void *sym_ = dlsym(RTLD_DEFAULT, symbol);                     \
    if (sym_ == NULL) return 0;                                   \
    memcpy(&shim_api.field, &sym_, sizeof(sym_));                 \
  } while (0)
#define SHIM_BIND_DATA(field, symbol)                             \
  do {                                                            \
    shim_api.field = dlsym(RTLD_DEFAULT, symbol);                 \
    if (shim_api.field == NULL) return 0;                         \
  } while (0)
/* A function of the stable ABI from CPython major.minor on: left NULL on an
 * older interpreter, even where it exists there outside the stable ABI. */
#define SHIM_BIND_SINCE(field, symbol, major, minor)              \
  do {                                                            \
    if (shim_running_at_least(major, minor)) SHIM_BIND(field, symbol); \
  } while (0)

/* The running CPython's version, from Py_Version (stable ABI 3.11:
 * PY_VERSION_HEX); 0 until shim_api_bind read it. */
static unsigned long shim_py_version;
static int shim_api_too_old; /* a CPython older than 3.11 runs here */

static int shim_running_at_least(int major, int minor) {
  return shim_py_version >= ((unsigned long)major << 24 | (unsigned long)minor << 16);
}

static int shim_api_bind(void) {
  const unsigned long *version;
  /* Py_IsInitialized first: it is the cheapest test for "is there a CPython". */
  SHIM_BIND(Py_IsInitialized, "Py_IsInitialized");
  /* Py_Version exists from 3.11 on: an older CPython is not bound at all. */
  version = (const unsigned long *)dlsym(RTLD_DEFAULT, "Py_Version");
  if (version == NULL || *version < 0x030B0000UL) {
    shim_api_too_old = 1;
    return 0;
  }
  shim_py_version = *version;
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
  SHIM_BIND(PyCapsule_SetPointer, "PyCapsule_SetPointer");

  SHIM_BIND(Py_IncRef, "Py_IncRef");
  SHIM_BIND(Py_DecRef, "Py_DecRef");
  SHIM_BIND(PyObject_Type, "PyObject_Type");
  SHIM_BIND(PyObject_GetAttrString, "PyObject_GetAttrString");
  SHIM_BIND(PyUnicode_AsUTF8String, "PyUnicode_AsUTF8String");
  SHIM_BIND(PyBytes_AsString, "PyBytes_AsString");

  SHIM_BIND(PyErr_SetString, "PyErr_SetString");
  SHIM_BIND(PyErr_Occurred, "PyErr_Occurred");
  SHIM_BIND(PyErr_Fetch, "PyErr_Fetch");
  SHIM_BIND(PyErr_Restore, "PyErr_Restore");
  SHIM_BIND(PyErr_Clear, "PyErr_Clear");
  SHIM_BIND(PyErr_WriteUnraisable, "PyErr_WriteUnraisable");

  SHIM_BIND(PyObject_GetBuffer, "PyObject_GetBuffer");
  SHIM_BIND(PyBuffer_Release, "PyBuffer_Release");
  SHIM_BIND(PyCFunction_NewEx, "PyCFunction_NewEx");
  SHIM_BIND(PyModule_Create2, "PyModule_Create2");
  SHIM_BIND(PyModule_GetState, "PyModule_GetState");
  SHIM_BIND(PyModule_GetDef, "PyModule_GetDef");
  SHIM_BIND(PyLong_FromSsize_t, "PyLong_FromSsize_t");
  SHIM_BIND(PyLong_AsLong, "PyLong_AsLong");
  SHIM_BIND(PyLong_AsLongLong, "PyLong_AsLongLong");
  SHIM_BIND(PyLong_AsUnsignedLongLong, "PyLong_AsUnsignedLongLong");
  SHIM_BIND(PyType_GenericAlloc, "PyType_GenericAlloc");
  SHIM_BIND(PyType_IsSubtype, "PyType_IsSubtype");
  SHIM_BIND(PyTuple_Pack, "PyTuple_Pack");
  SHIM_BIND(PyList_New, "PyList_New");
  SHIM_BIND(PyList_Size, "PyList_Size");
  SHIM_BIND(PyList_GetItem, "PyList_GetItem");
  SHIM_BIND(PyList_SetItem, "PyList_SetItem");
  SHIM_BIND(PyObject_CallFunctionObjArgs, "PyObject_CallFunctionObjArgs");
  SHIM_BIND(PyObject_CallMethodObjArgs, "PyObject_CallMethodObjArgs");
  SHIM_BIND(PyObject_GetAttr, "PyObject_GetAttr");
  SHIM_BIND(PyTuple_Size, "PyTuple_Size");
  SHIM_BIND(PyTuple_GetItem, "PyTuple_GetItem");

  SHIM_BIND(PyDict_GetItem, "PyDict_GetItem");
  SHIM_BIND(PyDict_GetItemWithError, "PyDict_GetItemWithError");
  SHIM_BIND_SINCE(PyObject_VectorcallMethod, "PyObject_VectorcallMethod", 3, 12);
  SHIM_BIND_DATA(PyCFunction_Type, "PyCFunction_Type");
  SHIM_BIND(PyCFunction_GetFlags, "PyCFunction_GetFlags");
  SHIM_BIND(PyCFunction_GetFunction, "PyCFunction_GetFunction");
  SHIM_BIND(PyCFunction_GetSelf, "PyCFunction_GetSelf");
  SHIM_BIND_DATA(PyExc_SystemError, "PyExc_SystemError");
  SHIM_BIND(PyNumber_Index, "PyNumber_Index");
  SHIM_BIND_DATA(PyExc_OverflowError, "PyExc_OverflowError");
  SHIM_BIND_DATA(PyExc_Exception, "PyExc_Exception");
  SHIM_BIND(PyObject_IsTrue, "PyObject_IsTrue");
  SHIM_BIND(PyBuffer_IsContiguous, "PyBuffer_IsContiguous");
  SHIM_BIND(PyLong_FromLongLong, "PyLong_FromLongLong");
  SHIM_BIND(PyObject_Call, "PyObject_Call");
  SHIM_BIND(PyDict_New, "PyDict_New");
  SHIM_BIND(PyDict_SetItem, "PyDict_SetItem");
  SHIM_BIND(PyTuple_New, "PyTuple_New");
  SHIM_BIND(PyTuple_SetItem, "PyTuple_SetItem");
  SHIM_BIND_DATA(PyDict_Type, "PyDict_Type");
  SHIM_BIND(PyUnicode_AsUTF8AndSize, "PyUnicode_AsUTF8AndSize");
  SHIM_BIND_DATA(PyUnicode_Type, "PyUnicode_Type");
  SHIM_BIND_DATA(Py_True, "_Py_TrueStruct");
  SHIM_BIND(PyErr_ExceptionMatches, "PyErr_ExceptionMatches");
  SHIM_BIND_DATA(PyExc_AttributeError, "PyExc_AttributeError");
  SHIM_BIND_DATA(Py_False, "_Py_FalseStruct");
  SHIM_BIND(PyType_FromSpec, "PyType_FromSpec");
  SHIM_BIND(PyType_FromSpecWithBases, "PyType_FromSpecWithBases");
  SHIM_BIND(PyObject_ClearWeakRefs, "PyObject_ClearWeakRefs");
  SHIM_BIND(PyMem_Malloc, "PyMem_Malloc");
  SHIM_BIND(PyMem_Free, "PyMem_Free");
  SHIM_BIND(PyType_GetSlot, "PyType_GetSlot");
  SHIM_BIND(PyType_GetFlags, "PyType_GetFlags");
  SHIM_BIND(PyObject_GC_UnTrack, "PyObject_GC_UnTrack");
  SHIM_BIND(PyObject_GC_Track, "PyObject_GC_Track");
  SHIM_BIND(PyObject_Init, "PyObject_Init");
  SHIM_BIND(PyUnicode_InternFromString, "PyUnicode_InternFromString");
  SHIM_BIND(PyUnicode_CompareWithASCIIString, "PyUnicode_CompareWithASCIIString");
  SHIM_BIND_DATA(PyLong_Type, "PyLong_Type");
  SHIM_BIND_DATA(PyExc_ImportError, "PyExc_ImportError");
  SHIM_BIND_DATA(PyCapsule_Type, "PyCapsule_Type");
  SHIM_BIND_DATA(PyList_Type, "PyList_Type");
  SHIM_BIND_DATA(PyTuple_Type, "PyTuple_Type");
  SHIM_BIND_DATA(Py_None, "_Py_NoneStruct");
  SHIM_BIND_DATA(PyExc_BufferError, "PyExc_BufferError");
  SHIM_BIND_DATA(PyExc_ValueError, "PyExc_ValueError");
  SHIM_BIND_DATA(PyExc_TypeError, "PyExc_TypeError");
  SHIM_BIND_DATA(PyExc_MemoryError, "PyExc_MemoryError");
  SHIM_BIND_DATA(PyExc_RuntimeError, "PyExc_RuntimeError");
  SHIM_BIND(PySequence_Contains, "PySequence_Contains");
  SHIM_BIND(PySequence_Tuple, "PySequence_Tuple");
  SHIM_BIND(PyObject_Str, "PyObject_Str");
  SHIM_BIND_DATA(PyExc_NotImplementedError, "PyExc_NotImplementedError");
  SHIM_BIND_DATA(Py_NotImplemented, "_Py_NotImplementedStruct");

  SHIM_BIND(PyInterpreterState_Get, "PyInterpreterState_Get");
  SHIM_BIND(PyInterpreterState_GetID, "PyInterpreterState_GetID");
  SHIM_BIND_DATA(PyBaseObject_Type, "PyBaseObject_Type");
  /* 3.11 and 3.12 have no stable-ABI Py_IsFinalizing: shim_py_alive uses
   * the package's atexit mark there (dlpackshim__py_at_exit). */
  SHIM_BIND_SINCE(Py_IsFinalizing, "Py_IsFinalizing", 3, 13);
  return 1;
}

static void shim_api_init(void) {
  shim_api_ok = shim_api_bind();
  if (!shim_api_ok) memset(&shim_api, 0, sizeof(shim_api));
  __atomic_store_n(&shim_api_ready, 1, __ATOMIC_RELEASE);
}

/* The table if the symbols exist, whatever the interpreter's state. */
static inline const shim_pyapi *shim_api_get(void) {
  if (SHIM_UNLIKELY(!__atomic_load_n(&shim_api_ready, __ATOMIC_ACQUIRE)))
    pthread_once(&shim_api_once, shim_api_init);
  return shim_api_ok ? &shim_api : NULL;
}

const shim_pyapi *shim_py_bound(void) { return shim_api_get(); }

/* Set (once, never cleared) when the interpreter starts to shut down: from
 * the package's atexit hook, which runs before Py_FinalizeEx marks the
 * runtime finalizing, on the thread that finalizes. The mark is read where
 * Py_IsFinalizing is missing (3.11, 3.12); the thread on every version: it
 * is the one thread that may still take the GIL then (the stable ABI has no
 * PyGILState_Check). */
static int shim_at_exit;
static pthread_t shim_exit_thread;

DLPACKSHIM_API void dlpackshim__py_at_exit(void) {
  shim_exit_thread = pthread_self();
  __atomic_store_n(&shim_at_exit, 1, __ATOMIC_RELEASE);
}

static int shim_on_exit_thread(void) {
  return __atomic_load_n(&shim_at_exit, __ATOMIC_ACQUIRE) &&
         pthread_equal(shim_exit_thread, pthread_self());
}

/* 1 once the interpreter shuts down (py bound). */
static int shim_shutting_down(const shim_pyapi *py) {
  return py->Py_IsFinalizing != NULL ? py->Py_IsFinalizing()
                                     : __atomic_load_n(&shim_at_exit, __ATOMIC_ACQUIRE);
}

const shim_pyapi *shim_py(void) {
  const shim_pyapi *py = shim_api_get();
  if (SHIM_LIKELY(py != NULL && py->Py_IsInitialized())) return py;
  /* Py_FinalizeEx reads "not initialized" while it still runs __del__
   * methods: their calls hold the GIL. Taking it then would hang or end any
   * other thread, so a caller without it is refused. */
  if (py != NULL && shim_shutting_down(py)) {
    if (shim_on_exit_thread()) return py;
    shim_fail(DLPACKSHIM_ERR_NO_PYTHON,
              "CPython is finalizing: dlpackshim can be called then only from the thread "
              "that shuts it down");
    return NULL;
  }
  shim_fail(DLPACKSHIM_ERR_NO_PYTHON, shim_api_too_old
                                          ? "the CPython in this process is older than 3.11"
                                          : "CPython is not running in this process");
  return NULL;
}

const shim_pyapi *shim_py_alive(void) {
  const shim_pyapi *py = shim_api_get();
  if (py == NULL || !py->Py_IsInitialized()) return NULL;
  if (shim_shutting_down(py)) return NULL;
  return py;
}

static const char *const shim_str_text[SHIM_STR_COUNT] = {
    "__dlpack__", "__array_interface__", "version", "mask", "data", "shape", "typestr",
    "descr", "strides", "offset", "max_version", "device", "copy", "stream",
    "enabled"};
static void *shim_str[SHIM_STR_COUNT]; /* interned, kept for the process */

int shim_py_strings(const shim_pyapi *py) {
  int k;
  for (k = 0; k < SHIM_STR_COUNT; k++)
    if (shim_str[k] == NULL && (shim_str[k] = py->PyUnicode_InternFromString(shim_str_text[k])) == NULL)
      return -1;
  return 0;
}

void *shim_py_str(const shim_pyapi *py, int which) {
  (void)py;
  return shim_str[which];
}

void *shim_type_of(const shim_pyapi *py, void *obj) {
  void *type = py->PyObject_Type(obj);
  /* obj holds a reference to its type for as long as the caller holds obj. */
  py->Py_DecRef(type);
  return type;
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

void *shim_py_raise(const shim_pyapi *py, int status) {
  void **type;
  const char *msg;
  if (py == NULL) return NULL;
  if (status == DLPACKSHIM_ERR_PYTHON && py->PyErr_Occurred() != NULL) return NULL;
  switch (status) {
    case DLPACKSHIM_ERR_INVALID_ARGUMENT:
    case DLPACKSHIM_ERR_STREAM: type = py->PyExc_ValueError; break;
    case DLPACKSHIM_ERR_NO_MEMORY: type = py->PyExc_MemoryError; break;
    case DLPACKSHIM_ERR_TYPE: type = py->PyExc_TypeError; break;
    case DLPACKSHIM_ERR_NO_PYTHON:
    case DLPACKSHIM_ERR_PYTHON: type = py->PyExc_RuntimeError; break;
    default: type = py->PyExc_BufferError; break;
  }
  msg = dlpackshim_last_error();
  if (msg == NULL || msg[0] == '\0') msg = dlpackshim_strerror(status);
  py->PyErr_SetString(*type, msg);
  return NULL;
}

/* ---- public ----------------------------------------------------------- */

DLPACKSHIM_API int dlpackshim_python_available(void) {
  const shim_pyapi *py = shim_api_get();
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
  gil = shim_gil_ensure(py);
  py->Py_IncRef(obj);
  shim_gil_release(py, gil);
  return DLPACKSHIM_OK;
}

/* A dlpackshim_release_fn: deleters call it from any thread, with or without
 * the GIL (PyTorch calls foreign deleters without it). Once the interpreter
 * is shutting down the reference is leaked on purpose: taking the GIL then
 * can hang or kill the calling thread, and the process is about to end. */
DLPACKSHIM_API void dlpackshim_py_release(void *obj) {
  if (obj != NULL) shim_py_release_keeping(obj, NULL, NULL);
}

void shim_py_release_keeping(void *obj, void (*keep)(void *block), void *block) {
  const shim_pyapi *py = shim_py_alive();
  int gil;
  if (py == NULL) {
    free(block);
    return;
  }
  gil = shim_gil_ensure(py);
  py->Py_DecRef(obj);
  if (block != NULL) keep(block);
  shim_gil_release(py, gil);
}
