/*
 * pyapi.c - the CPython API, bound at run time.
 *
 * libdlpackshim links neither libpython nor Python.h, so that one .so serves
 * every CPython 3.11+ and plain C programs alike. The first call that needs
 * Python resolves every entry point with dlsym(RTLD_DEFAULT, ...): in a
 * Python process the interpreter's symbols are global.
 *
 * Only names of CPython's stable ABI are resolved, those of binding.h's
 * lists (tests/python/c_api/test_stable_abi.py checks every name in the
 * built library against Misc/stable_abi.toml); a name the stable ABI gained
 * after 3.11 carries its version there and stays NULL on an older
 * interpreter, whose users have a fallback. No object's layout is read in
 * place.
 */
#define _GNU_SOURCE 1 /* RTLD_DEFAULT, RTLD_NODELETE, dladdr */
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

/* 1 when the running CPython is at least major.minor. */
static int shim_py_at_least(int major, int minor) {
  return py_version >= ((unsigned long)major << 24 | (unsigned long)minor << 16);
}

/* Every name of binding.h's lists, by dlsym. dlsym returns a data pointer;
 * POSIX guarantees it converts to a function pointer (memcpy keeps
 * -Wpedantic quiet about the cast). */
static int bind_api(void) {
  const unsigned long *version = (const unsigned long *)dlsym(RTLD_DEFAULT, "Py_Version");
  void *sym;
  if (dlsym(RTLD_DEFAULT, "Py_IsInitialized") == NULL) return 0; /* no CPython here */
  if (version == NULL || *version < 0x030B0000UL) {
    too_old = 1;
    return 0;
  }
  py_version = *version;
#define SHIM_PY_BIND(ret, name, args, major, minor)                      \
  if ((major) == 0 || shim_py_at_least(major, minor)) {                    \
    if ((sym = dlsym(RTLD_DEFAULT, #name)) == NULL) return 0;              \
    memcpy(&api.name, &sym, sizeof(sym));                                  \
  }
  SHIM_PY_FUNCTIONS(SHIM_PY_BIND)
#define SHIM_PY_BIND_DATA(name, symbol) \
  if ((sym = dlsym(RTLD_DEFAULT, symbol)) == NULL) return 0; \
  memcpy(&api.name, &sym, sizeof(sym));
  SHIM_PY_OBJECTS(SHIM_PY_BIND_DATA)
  SHIM_PY_EXCEPTIONS(SHIM_PY_BIND_DATA)
#undef SHIM_PY_BIND
#undef SHIM_PY_BIND_DATA
  return 1;
}

/* Once Python is bound, its objects point into this library: the Tensor
 * type's slots, the builtins' method tables, capsule destructors, holders'
 * deallocators. So the library stays loaded for the life of the process:
 * a dlclose that would unload it (cffi closes its handle when its Lib object
 * dies, which may be before those objects die at exit) leaves it mapped. */
static void pin_library(void) {
  Dl_info info;
  if (dladdr(&api, &info) != 0 && info.dli_fname != NULL)
    (void)dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
}

static void init_api(void) {
  api_ok = bind_api();
  if (api_ok) pin_library();
  if (!api_ok) memset(&api, 0, sizeof(api));
  __atomic_store_n(&api_ready, 1, __ATOMIC_RELEASE);
}

const shim_pyapi *shim_py_bound(void) {
  if (SHIM_UNLIKELY(!__atomic_load_n(&api_ready, __ATOMIC_ACQUIRE)))
    pthread_once(&api_once, init_api);
  return api_ok ? &api : NULL;
}

/* From the package's atexit hook on (it runs before Py_FinalizeEx marks the
 * runtime finalizing, on the thread that finalizes) to the end of
 * Py_FinalizeEx (Py_AtExit's functions run last): where the stable ABI has
 * no Py_IsFinalizing (3.11, 3.12), the mark says the interpreter is
 * shutting down (shim_py_alive says what follows for the exit thread).
 * After Py_FinalizeEx returned, an embedding program's calls find no
 * Python (they took the GIL of an interpreter that is gone: a crash). */
static int at_exit;
static pthread_t exit_thread;

static void finalized(void) {
  __atomic_store_n(&at_exit, 0, __ATOMIC_RELEASE);
}

DLPACKSHIM_API void dlpackshim__py_at_exit(void) {
  exit_thread = pthread_self();
  /* Once per finalization (each import of the package registers this hook;
   * Py_AtExit has 32 places for the whole process); -1 when full: the mark
   * stays. */
  if (!__atomic_exchange_n(&at_exit, 1, __ATOMIC_ACQ_REL) && api.Py_AtExit != NULL)
    (void)api.Py_AtExit(finalized);
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
              "CPython is finalizing or finalized: dlpackshim can be called then only from "
              "the thread that shuts it down, until Py_FinalizeEx returns");
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

int shim_type_name(const shim_pyapi *py, void *type, const char *attr, char *buf, size_t size) {
  void *name = py->PyObject_GetAttrString(type, attr);
  const char *s = NULL;
  if (name != NULL && shim_is_instance(py, name, py->PyUnicode_Type)) s = py->PyUnicode_AsUTF8AndSize(name, NULL);
  snprintf(buf, size, "%s", s != NULL ? s : "?");
  if (name != NULL) py->Py_DecRef(name);
  return shim_py_clear(py);
}

/* ---- names and optional attributes ------------------------------------- */

static const char *const str_text[SHIM_STR_COUNT] = {
    "__dlpack__", "__dlpack_device__", "__dlpack_c_exchange_api__", "__array_interface__",
    "__cuda_array_interface__", "max_version", "dl_device", "copy", "stream", "device",
    "version", "mask", "data", "shape", "typestr", "descr", "strides", "offset", "__mro__",
    "__dict__", "__dictoffset__", "__get__"};
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
static void *getattr_obj, *absent; /* held for the process; absent: a sentinel no
                                    * attribute can hold (never handed out) */

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
    void *builtins = py->PyImport_ImportModule("builtins"), *fnp;
    if (builtins == NULL) return -1;
    getattr_obj = py->PyObject_GetAttrString(builtins, "getattr");
    py->Py_DecRef(builtins);
    if (getattr_obj == NULL) return -1;
    absent = py->PyList_New(0); /* not the empty tuple: a singleton, an attribute's value */
    if (absent == NULL) return -1;
    /* getattr is METH_FASTCALL in every CPython 3.11 and 3.12; any other
     * convention calls it through PyObject_CallFunctionObjArgs instead. */
    if (shim_type_of(py, getattr_obj) == py->PyCFunction_Type &&
        py->PyCFunction_GetFlags(getattr_obj) == SHIM_METH_FASTCALL) {
      fnp = py->PyCFunction_GetFunction(getattr_obj);
      memcpy(&getattr_fn, &fnp, sizeof(fnp));
    }
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

int shim_py_clear(const shim_pyapi *py) {
  if (py->PyErr_Occurred() == NULL) return 0;
  if (!py->PyErr_ExceptionMatches(*py->PyExc_Exception)) return -1;
  py->PyErr_Clear();
  return 0;
}

void *shim_py_raise(const shim_pyapi *py, int status) {
  void *type = NULL;
  const char *msg, *cut;
  char text[512];
  if (py == NULL) return NULL;
  if (py->PyErr_Occurred() != NULL &&
      (status == DLPACKSHIM_ERR_PYTHON || !py->PyErr_ExceptionMatches(*py->PyExc_Exception)))
    return NULL;
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

/* Records the formatted message under status and raises it. */
static void py_vfail(const shim_pyapi *py, int status, const char *fmt, va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  shim_fail(status, "%s", msg);
  shim_py_raise(py, status);
}

void *shim_py_fail(const shim_pyapi *py, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  py_vfail(py, status, fmt, ap);
  va_end(ap);
  return NULL;
}

int shim_py_err(const shim_pyapi *py, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  py_vfail(py, status, fmt, ap);
  va_end(ap);
  return -1;
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
