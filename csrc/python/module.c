/*
 * module.c - the package's entry points into the library.
 *
 * dlpackshim/_ffi.py calls them as builtins that dlpackshim__py_entry_points
 * makes (below; the GIL held, as for any builtin; each returns a new
 * reference, or NULL with an exception set):
 *   dlpackshim__py_base(doc)     the C base type of dlpackshim.Tensor (one
 *                                per process); doc: __dlpack__'s docstring
 *   dlpackshim__py_tensor_class(cls)  the class Tensors are made of: cls
 *                                (the package's class statement) with the
 *                                base's C deallocation
 *   dlpackshim__py_bind(config)  binds the package's own objects (its Tensor
 *                                class, its errors, ...) and returns its
 *                                builtins; a re-imported package binds anew
 * and registers dlpackshim__py_at_exit (pyapi.c) with atexit.
 *
 * Builtins are CPython functions made here at run time (no extension
 * module): the interpreter calls them directly with the GIL held, ~40 ns,
 * where an ABI-mode cffi or ctypes call costs 150-300 ns.
 */
#include "binding.h"

#include <stdlib.h>

shim_package shim_pkg;

/* Raises ImportError unless this is the main interpreter: the library keeps
 * process-wide state (its types, the package it is bound to). */
static int check_main_interpreter(const shim_pyapi *py) {
  if (py->PyInterpreterState_GetID(py->PyInterpreterState_Get()) == 0) return 0;
  py->PyErr_SetString(*py->PyExc_ImportError,
                      "dlpackshim runs in the main interpreter only: it keeps process-wide "
                      "state (its Tensor type, the package it is bound to) that a "
                      "subinterpreter must not share");
  return -1;
}

/* *slot, once: a copy of str's text that lives as long as the process
 * (docstrings: a builtin points at its method table's). A second import of
 * the package binds again and keeps the first copy. 0, or -1 with an
 * exception. */
static int keep_text(const shim_pyapi *py, void *str, const char **slot) {
  ptrdiff_t n;
  const char *s;
  char *copy;
  if (*slot != NULL) return 0;
  if ((s = py->PyUnicode_AsUTF8AndSize(str, &n)) == NULL) return -1;
  if ((copy = (char *)malloc((size_t)n + 1)) == NULL) {
    py->PyErr_SetString(*py->PyExc_MemoryError, "out of memory");
    return -1;
  }
  memcpy(copy, s, (size_t)n + 1);
  *slot = copy;
  return 0;
}

static const char *dlpack_doc; /* Tensor.__dlpack__'s, kept for the process */

DLPACKSHIM_API void *dlpackshim__py_base(void *doc) {
  const shim_pyapi *py = shim_py();
  void *base;
  if (py == NULL || check_main_interpreter(py) != 0 || shim_py_names(py) != 0) return NULL;
  if (keep_text(py, doc, &dlpack_doc) != 0) return NULL;
  if ((base = shim_tensor_base(py, dlpack_doc)) == NULL) return NULL;
  py->Py_IncRef(base);
  return base;
}

/* Replaces *field with a new reference to value. */
static void set_field(const shim_pyapi *py, void **field, void *value) {
  void *old = *field;
  py->Py_IncRef(value);
  *field = value;
  if (old != NULL) py->Py_DecRef(old);
}

/* _configure(use_tables, memo[, guard_for]): the consumer's switches, for
 * the package's DLPACKSHIM_DISABLE_EXCHANGE_API and for tests and benchmarks
 * (guard_for: another guard factory, asked for types met from now on). */
static void *configure(void *self, void *const *args, ptrdiff_t nargs) {
  const shim_pyapi *py = shim_py_bound();
  int tables, memo;
  (void)self;
  if (nargs < 2 || nargs > 3 || (tables = py->PyObject_IsTrue(args[0])) < 0 ||
      (memo = py->PyObject_IsTrue(args[1])) < 0)
    return nargs < 2 || nargs > 3 ? shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "_configure(use_tables, memo[, guard_for])")
                                  : NULL;
  shim_pkg.use_tables = tables;
  if (nargs == 3) set_field(py, &shim_pkg.guard_for, args[2]);
  shim_memo_reset(py, !memo);
  py->Py_IncRef(py->Py_None);
  return py->Py_None;
}

static shim_method_def module_defs[] = {
    {"_configure", (void *)configure, SHIM_METH_FASTCALL,
     "_configure(use_tables, memo[, guard_for]): whether foreign exchange tables and the type\n"
     "memo are used (and another guard factory)."},
    {NULL, NULL, 0, NULL},
};

DLPACKSHIM_API void *dlpackshim__py_tensor_class(void *cls) {
  const shim_pyapi *py = shim_py();
  return py != NULL ? shim_tensor_class(py, cls) : NULL;
}

/* ---- binding the package ------------------------------------------------------ */

/* config[key] (borrowed), or NULL with a TypeError naming it. */
static void *config_item(const shim_pyapi *py, void *config, const char *key) {
  void *name = py->PyUnicode_InternFromString(key), *v;
  if (name == NULL) return NULL;
  v = py->PyDict_GetItemWithError(config, name);
  py->Py_DecRef(name);
  if (v == NULL && py->PyErr_Occurred() == NULL)
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "dlpackshim__py_bind: the package gave no %s", key);
  return v;
}

/* Adds the builtins of defs to out under their names, bound to a module
 * named dlpackshim (what makes Python see functions of the module:
 * __qualname__ "from_dlpack", help() without "method of"); -1 with an
 * exception. */
static int add_builtins(const shim_pyapi *py, void *out, shim_method_def *defs) {
  void *name = py->PyUnicode_InternFromString("dlpackshim"), *fn;
  void *module = name != NULL ? py->PyModule_New("dlpackshim") : NULL;
  int st = module != NULL ? 0 : -1;
  for (int i = 0; st == 0 && defs[i].ml_name != NULL; i++) {
    if ((fn = py->PyCFunction_NewEx(&defs[i], module, name)) == NULL) st = -1;
    else {
      st = py->PyDict_SetItemString(out, defs[i].ml_name, fn);
      py->Py_DecRef(fn);
    }
  }
  if (module != NULL) py->Py_DecRef(module);
  if (name != NULL) py->Py_DecRef(name);
  return st;
}

DLPACKSHIM_API void *dlpackshim__py_bind(void *config) {
  const shim_pyapi *py = shim_py();
  void *v, *errors, *out, *cap;
  int i;
  if (py == NULL || shim_py_names(py) != 0 || shim_consume_init(py) != 0) return NULL;
  if (shim_type_of(py, config) != py->PyDict_Type)
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "dlpackshim__py_bind(config: dict)");
  /* The status -> exception table of dlpackshim/_errors.py, its one home. */
  if ((errors = config_item(py, config, "exceptions")) == NULL) return NULL;
  py->Py_IncRef(errors); /* a key's __eq__ may take it out of config */
  for (i = 1; i < SHIM_STATUS_COUNT; i++) {
    void *key = py->PyLong_FromLongLong(-i), *exc;
    exc = key != NULL ? py->PyDict_GetItemWithError(errors, key) : NULL;
    if (key != NULL) py->Py_DecRef(key);
    if (exc == NULL) {
      if (py->PyErr_Occurred() == NULL)
        shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "dlpackshim__py_bind: no exception for status %d", -i);
      py->Py_DecRef(errors);
      return NULL;
    }
    set_field(py, &shim_pkg.exceptions[i], exc);
  }
  py->Py_DecRef(errors);
  if ((v = config_item(py, config, "from_dlpack_doc")) == NULL ||
      keep_text(py, v, &shim_consume_defs[0].ml_doc) != 0 ||
      (v = config_item(py, config, "from_dlpack_many_doc")) == NULL ||
      keep_text(py, v, &shim_consume_defs[1].ml_doc) != 0)
    return NULL;
  if ((v = config_item(py, config, "Tensor")) == NULL) return NULL;
  set_field(py, &shim_pkg.tensor_class, v);
  if ((v = config_item(py, config, "NotArrayLikeError")) == NULL) return NULL;
  set_field(py, &shim_pkg.not_array_like, v);
  if ((v = config_item(py, config, "DeviceType")) == NULL) return NULL;
  set_field(py, &shim_pkg.device_type, v);
  if ((v = config_item(py, config, "guard_for")) == NULL) return NULL;
  set_field(py, &shim_pkg.guard_for, v);
  if ((v = config_item(py, config, "read_meta")) == NULL) return NULL;
  set_field(py, &shim_pkg.read_meta, v);
  if (shim_pkg.max_version == NULL) {
    void *major = py->PyLong_FromLongLong(DLPACK_MAJOR_VERSION), *minor = py->PyLong_FromLongLong(DLPACK_MINOR_VERSION);
    if (major != NULL && minor != NULL) shim_pkg.max_version = py->PyTuple_Pack(2, major, minor);
    if (major != NULL) py->Py_DecRef(major);
    if (minor != NULL) py->Py_DecRef(minor);
    if (shim_pkg.max_version == NULL) return NULL;
  }
  shim_pkg.use_tables = 1;
  shim_memo_reset(py, 0);
  if ((out = py->PyDict_New()) == NULL) return NULL;
  if (add_builtins(py, out, shim_consume_defs) != 0 || add_builtins(py, out, module_defs) != 0 ||
      (cap = shim_exchange_api_capsule(py)) == NULL) {
    py->Py_DecRef(out);
    return NULL;
  }
  i = py->PyDict_SetItemString(out, "exchange_api", cap);
  py->Py_DecRef(cap);
  if (i != 0) {
    py->Py_DecRef(out);
    return NULL;
  }
  return out;
}

/* ---- the way in, for a caller without ctypes ---------------------------------- */

/* ABI-mode cffi, which the package calls the library with, can neither return
 * a Python object nor keep the GIL during a call; ctypes.PyDLL can, but
 * importing ctypes was ~1.5 ms of the package's import. So the package gets
 * the three entry points above as builtins, through one plain C call. */
static void *entry_base(void *self, void *doc) {
  (void)self;
  return dlpackshim__py_base(doc);
}

static void *entry_tensor_class(void *self, void *cls) {
  (void)self;
  return dlpackshim__py_tensor_class(cls);
}

static void *entry_bind(void *self, void *config) {
  (void)self;
  return dlpackshim__py_bind(config);
}

static shim_method_def entry_defs[] = {
    {"base", (void *)entry_base, SHIM_METH_O, "dlpackshim__py_base(doc)"},
    {"tensor_class", (void *)entry_tensor_class, SHIM_METH_O, "dlpackshim__py_tensor_class(cls)"},
    {"bind", (void *)entry_bind, SHIM_METH_O, "dlpackshim__py_bind(config)"},
    {NULL, NULL, 0, NULL},
};

/* Puts the builtins "base", "tensor_class" and "bind" into the dict at out
 * (the package's id() of it), taking the GIL itself. 0, or a negative status
 * with the last error set and no exception left. */
DLPACKSHIM_API int dlpackshim__py_entry_points(void *out) {
  const shim_pyapi *py = shim_py();
  int gil, st;
  if (py == NULL) return DLPACKSHIM_ERR_NO_PYTHON; /* shim_py said why */
  if (out == NULL) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "py_entry_points: out is NULL");
  gil = py->PyGILState_Ensure();
  st = add_builtins(py, out, entry_defs);
  if (st != 0) {
    py->PyErr_Clear();
    st = shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "py_entry_points: the builtins could not be made");
  }
  py->PyGILState_Release(gil);
  return st;
}

DLPACKSHIM_API int dlpackshim__binding_revision(void) { return DLPACKSHIM_BINDING_REVISION; }
