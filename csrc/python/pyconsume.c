/*
 * pyconsume.c - dlpackshim.from_dlpack's hot path, as one builtin.
 *
 * from_dlpack(x) with no keyword (or only None ones) for a type seen before
 * is the call users make in loops; a Python function around it costs more
 * than NumPy's whole from_dlpack. So the package's from_dlpack *is* this
 * builtin. It reads the package's per-type cache (a dict type -> how) and:
 *   - a DLPack producer: calls x.__dlpack__(max_version=...) (or __dlpack__()
 *     for a legacy one) and consumes the capsule into a Tensor;
 *   - a type with a usable C exchange table: imports through it;
 *   - the buffer protocol and __array_interface__ with an address: builds
 *     the Tensor here (below);
 *   - anything else, any keyword, any error of classification: calls the
 *     package's Python implementation (the slow path), which also fills the
 *     cache. Errors a producer raises propagate unchanged, as there.
 *
 * ctx, given by the package: (cls, how, slow, max_version, codes, stale),
 * codes = (VERSIONED, MV_ONLY, LEGACY, EXCHANGE, BUFFER, ARRAY_IFACE): the
 * values of `how` the package defines (dlpackshim/_consume.py is their one
 * source); stale(x, how) -> bool forgets a cached answer that no longer
 * holds (asked when the call `how` chose raised AttributeError - the
 * __dlpack__ went away - or TypeError - the table did): then the slow path
 * classifies x again, else the error is the producer's and propagates.
 *
 * The builtin's self is a module (made from home_def) whose state holds ctx:
 * a module self is what makes Python see a function of the module
 * (__qualname__ 'from_dlpack', help() without "method of ..."), and its
 * state, unlike a module attribute, cannot be replaced from Python.
 */
#include "binding.h"

#include <stdlib.h>
#include <string.h>

enum { CTX_CLS, CTX_HOW, CTX_SLOW, CTX_MAX_VERSION, CTX_CODES, CTX_STALE, CTX_SIZE };
enum {
  CODE_VERSIONED, CODE_MV_ONLY, CODE_LEGACY, CODE_EXCHANGE, CODE_BUFFER, CODE_ARRAY_IFACE,
  CODE_COUNT
};
enum { SHIM_METH_KEYWORDS = 0x0002 };

static void *kw_max_version; /* ("max_version",): the vectorcall keyword names */

/* The builtin's module state: the ctx tuple (held), its items the hot path
 * reads (borrowed from it: a tuple's items never change), and its codes read
 * once as C longs, so that the hot path compares integers, not Python ints. */
typedef struct {
  void *ctx;
  void *cls, *how, *max_version;
  long codes[CODE_COUNT];
  void *code_objs[CODE_COUNT]; /* the same codes as the package's int objects */
  /* from_dlpack_many's (held; NULL until it is made): the package's Python
   * function for what the builtin does not take, and the dict whose
   * "enabled" says whether the C exchange tables are used. */
  void *slow_many, *switches;
} home_state;

/* The call the fast path does not take: slow(*args, **kwargs). */
static void *call_slow(const shim_pyapi *py, void *ctx, void *const *args, ptrdiff_t nargs,
                       void *kwnames) {
  void *slow = py->PyTuple_GetItem(ctx, CTX_SLOW), *tuple, *kwargs = NULL, *r;
  ptrdiff_t i, nkw = kwnames != NULL ? py->PyTuple_Size(kwnames) : 0;
  tuple = py->PyTuple_New(nargs);
  if (tuple == NULL) return NULL;
  for (i = 0; i < nargs; i++) {
    py->Py_IncRef(args[i]);
    py->PyTuple_SetItem(tuple, i, args[i]);
  }
  if (nkw > 0) {
    kwargs = py->PyDict_New();
    if (kwargs == NULL) {
      py->Py_DecRef(tuple);
      return NULL;
    }
    for (i = 0; i < nkw; i++)
      if (py->PyDict_SetItem(kwargs, py->PyTuple_GetItem(kwnames, i), args[nargs + i]) != 0) {
        py->Py_DecRef(kwargs);
        py->Py_DecRef(tuple);
        return NULL;
      }
  }
  r = py->PyObject_Call(slow, tuple, kwargs);
  py->Py_DecRef(tuple);
  if (kwargs != NULL) py->Py_DecRef(kwargs);
  return r;
}

typedef void *(*fastcall_keywords_fn)(void *self, void *const *args, ptrdiff_t nargs,
                                      void *kwnames);

/* __dlpack__ methods written in C (NumPy's), by type. For a type that is
 * immutable, whose instances have no __dict__ and whose attribute lookup is
 * object's, x.__dlpack__ is the same C function for every instance: it is
 * looked up once, on a first instance, and then called through its
 * METH_FASTCALL | METH_KEYWORDS convention, as CPython itself would call it
 * (no bound method made per call). fn NULL: a type that is not such. */
enum { KNOWN_TYPES = 4, TPFLAGS_IMMUTABLETYPE = 1 << 8, SLOT_TP_GETATTRO = 58 };
static struct {
  void *type; /* strong reference */
  fastcall_keywords_fn fn;
} known[KNOWN_TYPES];
static int known_next;

static fastcall_keywords_fn known_method(const shim_pyapi *py, void *type, int *found) {
  int k;
  for (k = 0; k < KNOWN_TYPES; k++)
    if (known[k].type == type) {
      *found = 1;
      return known[k].fn;
    }
  *found = 0;
  return NULL;
}

/* Remembers what `method` (x.__dlpack__, just looked up) says of type(x).
 * -1 when reading the type raised a BaseException that is not an Exception
 * (an interrupt): it propagates. */
static int learn_method(const shim_pyapi *py, void *x, void *method) {
  void *type = shim_type_of(py, x), *offset, *fn = NULL, *old;
  long dict_offset = -1;
  if ((py->PyType_GetFlags(type) & TPFLAGS_IMMUTABLETYPE) &&
      py->PyType_GetSlot(type, SLOT_TP_GETATTRO) ==
          py->PyType_GetSlot(py->PyBaseObject_Type, SLOT_TP_GETATTRO) &&
      shim_is_exact(py, method, py->PyCFunction_Type) &&
      py->PyCFunction_GetFlags(method) == (SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS) &&
      py->PyCFunction_GetSelf(method) == x) {
    offset = py->PyObject_GetAttrString(type, "__dictoffset__");
    if (offset != NULL) {
      dict_offset = py->PyLong_AsLong(offset);
      py->Py_DecRef(offset);
    }
    if (py->PyErr_Occurred() != NULL) {
      if (!py->PyErr_ExceptionMatches(*py->PyExc_Exception)) return -1;
      py->PyErr_Clear(); /* unknown: not learnt */
    }
    if (dict_offset == 0) fn = py->PyCFunction_GetFunction(method);
  }
  old = known[known_next].type;
  py->Py_IncRef(type);
  known[known_next].type = type;
  memcpy(&known[known_next].fn, &fn, sizeof(fn));
  known_next = (known_next + 1) % KNOWN_TYPES;
  if (old != NULL) py->Py_DecRef(old);
  return 0;
}

static void *checked_result(const shim_pyapi *py, void *r) {
  if (r == NULL && py->PyErr_Occurred() == NULL)
    py->PyErr_SetString(*py->PyExc_SystemError, "__dlpack__ returned NULL without an exception");
  return r;
}

/* x.__dlpack__(max_version=max_version), or x.__dlpack__() when max_version
 * is NULL (type: x's type, borrowed): a known C method directly; else
 * vectorcall where the stable ABI has it (3.12+); else (3.11) the bound
 * method, through its C convention when it has one, else PyObject_Call with
 * a keyword dict of its own. */
static void *call_dlpack(const shim_pyapi *py, void *x, void *type, void *max_version) {
  void *args[2], *method, *empty, *kwargs, *r, *fn;
  fastcall_keywords_fn call;
  int found;
  if (max_version == NULL) return py->PyObject_CallMethodObjArgs(x, shim_py_str(py, SHIM_STR_DLPACK), NULL);
  call = known_method(py, type, &found);
  if (SHIM_LIKELY(call != NULL)) return checked_result(py, call(x, &max_version, 0, kw_max_version));
  if (found && py->PyObject_VectorcallMethod != NULL) {
    args[0] = x;
    args[1] = max_version;
    return py->PyObject_VectorcallMethod(shim_py_str(py, SHIM_STR_DLPACK), args, 1, kw_max_version);
  }
  method = py->PyObject_GetAttr(x, shim_py_str(py, SHIM_STR_DLPACK));
  if (method == NULL) return NULL;
  if (!found && learn_method(py, x, method) != 0) {
    py->Py_DecRef(method);
    return NULL;
  }
  if (shim_is_exact(py, method, py->PyCFunction_Type) &&
      py->PyCFunction_GetFlags(method) == (SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS)) {
    fn = py->PyCFunction_GetFunction(method);
    memcpy(&call, &fn, sizeof(fn));
    r = checked_result(py, call(py->PyCFunction_GetSelf(method), &max_version, 0, kw_max_version));
  } else {
    kwargs = py->PyDict_New();
    empty = py->PyTuple_New(0);
    r = NULL;
    if (kwargs != NULL && empty != NULL &&
        py->PyDict_SetItem(kwargs, shim_py_str(py, SHIM_STR_MAX_VERSION), max_version) == 0)
      r = py->PyObject_Call(method, empty, kwargs);
    if (kwargs != NULL) py->Py_DecRef(kwargs);
    if (empty != NULL) py->Py_DecRef(empty);
  }
  py->Py_DecRef(method);
  return r;
}

/* The cached call raised: when the exception is `kind` and the cached answer
 * turns out stale, forget it and take the slow path; else the exception
 * stands. Always NULL or the slow path's result. */
static void *retry_if_stale(const shim_pyapi *py, void *ctx, void *x, void *how, void *kind) {
  void *type, *value, *tb, *r;
  if (!py->PyErr_ExceptionMatches(kind)) return NULL;
  py->PyErr_Fetch(&type, &value, &tb);
  r = py->PyObject_CallFunctionObjArgs(py->PyTuple_GetItem(ctx, CTX_STALE), x, how, NULL);
  if (r == NULL) { /* the check itself failed: report the original error */
    py->PyErr_Clear();
    py->PyErr_Restore(type, value, tb);
    return NULL;
  }
  py->Py_DecRef(r);
  if (r != py->Py_True) {
    py->PyErr_Restore(type, value, tb);
    return NULL;
  }
  if (type != NULL) py->Py_DecRef(type);
  if (value != NULL) py->Py_DecRef(value);
  if (tb != NULL) py->Py_DecRef(tb);
  return call_slow(py, ctx, &x, 1, NULL);
}

/* Which of the package's codes a value of the type cache stands for: its
 * own int objects are matched by identity (CPython shares small ints), any
 * other int by value. CODE_COUNT for none (a flag added: the slow path's);
 * -1 with an exception for a value that is no int. */
static int code_index(const shim_pyapi *py, const home_state *state, void *how) {
  long v;
  int c;
  for (c = 0; c < CODE_COUNT; c++)
    if (how == state->code_objs[c]) return c;
  v = py->PyLong_AsLong(how);
  if (v == -1 && py->PyErr_Occurred() != NULL) return -1;
  for (c = 0; c < CODE_COUNT; c++)
    if (v == state->codes[c]) return c;
  return CODE_COUNT;
}

static void *from_dlpack(void *home, void *const *args, ptrdiff_t nargs, void *kwnames) {
  const shim_pyapi *py = shim_py_bound();
  const home_state *state = (const home_state *)py->PyModule_GetState(home);
  void *ctx = state->ctx, *cls = state->cls;
  void *x, *type, *how, *cap, *t;
  int code;
  ptrdiff_t i, nkw = kwnames != NULL ? py->PyTuple_Size(kwnames) : 0;
  if (SHIM_UNLIKELY(ctx == NULL)) { /* its module was cleared (a garbage cycle at exit) */
    shim_fail(DLPACKSHIM_ERR_NO_PYTHON, "dlpackshim.from_dlpack: the package is being torn down");
    return shim_py_raise(py, DLPACKSHIM_ERR_NO_PYTHON);
  }
  /* Only device=None, copy=None, stream=None stay here; any other keyword
   * or value (a misspelt name too) is the Python function's to judge. */
  for (i = 0; i < nkw; i++) {
    void *name = py->PyTuple_GetItem(kwnames, i);
    if (args[nargs + i] != py->Py_None ||
        (name != shim_py_str(py, SHIM_STR_DEVICE) && name != shim_py_str(py, SHIM_STR_COPY) &&
         name != shim_py_str(py, SHIM_STR_STREAM)))
      return call_slow(py, ctx, args, nargs, kwnames);
  }
  if (SHIM_UNLIKELY(nargs != 1)) return call_slow(py, ctx, args, nargs, kwnames);
  x = args[0];
  type = shim_type_of(py, x); /* borrowed: x holds it */
  how = py->PyDict_GetItemWithError(state->how, type);
  if (how == NULL) /* a metaclass's __hash__ or __eq__ may raise: as the slow path's would */
    return py->PyErr_Occurred() != NULL ? NULL : call_slow(py, ctx, args, 1, NULL);
  code = code_index(py, state, how);
  if (SHIM_UNLIKELY(code < 0)) return NULL;
  /* From here `how` is the package's own object, which ctx holds: the
   * cache's value (borrowed) may go while the producer's code runs. */
  how = code < CODE_COUNT ? state->code_objs[code] : NULL;
#define IS(c) (code == (c))
  if (IS(CODE_VERSIONED) || IS(CODE_MV_ONLY)) {
    cap = call_dlpack(py, x, type, state->max_version);
  } else if (IS(CODE_LEGACY)) {
    cap = call_dlpack(py, x, type, NULL);
  } else if (IS(CODE_EXCHANGE)) {
    t = shim_exchange_one(py, cls, x);
    return t != NULL ? t : retry_if_stale(py, ctx, x, how, *py->PyExc_TypeError);
  } else if (IS(CODE_BUFFER)) {
    return shim_buffer_tensor(py, cls, x);
  } else if (IS(CODE_ARRAY_IFACE)) {
    return shim_array_interface_tensor(py, cls, x);
  } else {
    return call_slow(py, ctx, args, 1, NULL);
  }
#undef IS
  if (cap == NULL) return retry_if_stale(py, ctx, x, how, *py->PyExc_AttributeError);
  t = shim_import_tensor(py, cls, cap);
  py->Py_DecRef(cap);
  return t;
}

/* PyModuleDef, written from the stable ABI (PyModuleDef_HEAD_INIT: one
 * reference, no type, no m_init, index 0, no m_copy). Its modules' state is
 * one pointer: the ctx tuple, held. */
typedef int (*shim_visitproc)(void *obj, void *arg);
typedef struct {
  ptrdiff_t base_refcnt; /* PyModuleDef_Base (stable ABI): PyObject_HEAD_INIT(NULL) */
  void *base_type;
  void *(*m_init)(void);
  ptrdiff_t m_index;
  void *m_copy;
  const char *m_name, *m_doc;
  ptrdiff_t m_size;
  void *m_methods, *m_slots;
  int (*m_traverse)(void *module, shim_visitproc visit, void *arg);
  int (*m_clear)(void *module);
  void (*m_free)(void *module);
} shim_module_def;
enum { SHIM_PYTHON_ABI_VERSION = 3 };

static int home_traverse(void *home, shim_visitproc visit, void *arg) {
  home_state *state = (home_state *)shim_py_bound()->PyModule_GetState(home);
  int r;
  if (state == NULL) return 0;
  if (state->ctx != NULL && (r = visit(state->ctx, arg)) != 0) return r;
  if (state->slow_many != NULL && (r = visit(state->slow_many, arg)) != 0) return r;
  return state->switches != NULL ? visit(state->switches, arg) : 0;
}

static int home_clear(void *home) {
  const shim_pyapi *py = shim_py_bound();
  home_state *state = (home_state *)py->PyModule_GetState(home);
  void *ctx;
  if (state != NULL && (ctx = state->ctx) != NULL) {
    state->ctx = NULL;
    state->cls = state->how = state->max_version = NULL; /* they were ctx's */
    memset(state->code_objs, 0, sizeof(state->code_objs));
    py->Py_DecRef(ctx);
  }
  if (state != NULL && state->slow_many != NULL) {
    void *slow_many = state->slow_many, *switches = state->switches;
    state->slow_many = state->switches = NULL;
    py->Py_DecRef(slow_many);
    py->Py_DecRef(switches);
  }
  return 0;
}

static void home_free(void *home) { home_clear(home); }

static shim_module_def home_def = {
    1, NULL, NULL, 0, NULL, "dlpackshim", NULL, (ptrdiff_t)sizeof(home_state), NULL, NULL,
    home_traverse, home_clear, home_free};

/* The method tables made so far (GIL held while the list changes). */
struct made_def {
  struct made_def *next;
  shim_method_def def;
  char doc[];
};
static struct made_def *made_defs;

/* A builtin named `name` of module "dlpackshim", self `home`, documented by
 * `doc` (a str, copied); new reference, or NULL with an exception. The
 * method table lives as long as the process: one per package import, never
 * freed (a builtin, which may outlive any module, points at it); the list
 * keeps each one reachable. */
static void *made_builtin(const shim_pyapi *py, const char *name, void *meth, int flags,
                          void *doc, void *home) {
  struct made_def *block;
  void *bytes, *module, *fn;
  const char *text;
  size_t n;
  bytes = py->PyUnicode_AsUTF8String(doc);
  if (bytes == NULL) return NULL;
  text = py->PyBytes_AsString(bytes);
  n = strlen(text);
  block = (struct made_def *)malloc(sizeof(*block) + n + 1);
  if (block == NULL) {
    py->Py_DecRef(bytes);
    shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
    return shim_py_raise(py, DLPACKSHIM_ERR_NO_MEMORY);
  }
  memcpy(block->doc, text, n + 1);
  py->Py_DecRef(bytes);
  block->next = made_defs;
  made_defs = block;
  block->def.ml_name = name;
  block->def.ml_meth = meth;
  block->def.ml_flags = flags;
  block->def.ml_doc = block->doc;
  module = py->PyUnicode_InternFromString("dlpackshim");
  fn = module != NULL ? py->PyCFunction_NewEx(&block->def, home, module) : NULL;
  if (module != NULL) py->Py_DecRef(module);
  return fn;
}

void *shim_from_dlpack_builtin(const shim_pyapi *py, void *ctx, void *doc) {
  void *home, *fn;
  if (!shim_is_exact(py, ctx, py->PyTuple_Type) || py->PyTuple_Size(ctx) != CTX_SIZE ||
      !shim_is_exact(py, py->PyTuple_GetItem(ctx, CTX_HOW), py->PyDict_Type) ||
      py->PyTuple_Size(py->PyTuple_GetItem(ctx, CTX_CODES)) != CODE_COUNT) {
    shim_fail(DLPACKSHIM_ERR_TYPE, "dlpackshim__py_from_dlpack: malformed context");
    return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
  }
  if (kw_max_version == NULL) {
    if (shim_py_strings(py) != 0) return NULL;
    kw_max_version = py->PyTuple_Pack(1, shim_py_str(py, SHIM_STR_MAX_VERSION));
    if (kw_max_version == NULL) return NULL;
  }
  home = py->PyModule_Create2(&home_def, SHIM_PYTHON_ABI_VERSION);
  if (home == NULL) return NULL;
  {
    home_state *state = (home_state *)py->PyModule_GetState(home);
    void *codes = py->PyTuple_GetItem(ctx, CTX_CODES);
    int c;
    for (c = 0; c < CODE_COUNT; c++) {
      state->code_objs[c] = py->PyTuple_GetItem(codes, c); /* borrowed: ctx holds codes */
      state->codes[c] = py->PyLong_AsLong(state->code_objs[c]);
      if (state->codes[c] == -1 && py->PyErr_Occurred() != NULL) {
        py->Py_DecRef(home);
        return NULL;
      }
    }
    py->Py_IncRef(ctx);
    state->ctx = ctx;
    state->cls = py->PyTuple_GetItem(ctx, CTX_CLS);
    state->how = py->PyTuple_GetItem(ctx, CTX_HOW);
    state->max_version = py->PyTuple_GetItem(ctx, CTX_MAX_VERSION);
  }
  fn = made_builtin(py, "from_dlpack", (void *)from_dlpack,
                    SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS, doc, home);
  py->Py_DecRef(home);
  return fn;
}

/* ---- from_dlpack_many --------------------------------------------------- */

/* from_dlpack_many(objs): a list or tuple, with the tables on (the package's
 * switch, read on every call), goes through its items' C exchange tables in
 * one call (shim_exchange_many) and the items without a usable table
 * through from_dlpack above, without a Python frame (a quarter of a batch of
 * 8); anything else is the package's Python function's. */
static void *from_dlpack_many(void *home, void *objs) {
  const shim_pyapi *py = shim_py_bound();
  const home_state *state = (const home_state *)py->PyModule_GetState(home);
  void *tp, *out, *list, *items;
  ptrdiff_t i, n;
  if (SHIM_UNLIKELY(state->ctx == NULL || state->slow_many == NULL)) {
    shim_fail(DLPACKSHIM_ERR_NO_PYTHON,
              "dlpackshim.from_dlpack_many: the package is being torn down");
    return shim_py_raise(py, DLPACKSHIM_ERR_NO_PYTHON);
  }
  tp = shim_type_of(py, objs);
  if ((tp != py->PyList_Type && tp != py->PyTuple_Type) ||
      py->PyDict_GetItem(state->switches, shim_py_str(py, SHIM_STR_ENABLED)) != py->Py_True)
    return py->PyObject_CallFunctionObjArgs(state->slow_many, objs, NULL);
  out = shim_exchange_many(py, state->cls, objs);
  if (out == NULL || shim_type_of(py, out) == py->PyList_Type) return out;
  /* (list, count, items): the items without a table, one by one. */
  list = py->PyTuple_GetItem(out, 0);
  items = py->PyTuple_GetItem(out, 2); /* held by out until the end */
  py->Py_IncRef(list);
  n = py->PyList_Size(list);
  for (i = 0; i < n; i++) {
    void *item, *t;
    if (py->PyList_GetItem(list, i) != py->Py_None) continue;
    item = py->PyTuple_GetItem(items, i);
    t = from_dlpack(home, &item, 1, NULL);
    if (t == NULL) {
      py->Py_DecRef(list);
      py->Py_DecRef(out);
      return NULL;
    }
    py->PyList_SetItem(list, i, t); /* takes t, drops the None */
  }
  py->Py_DecRef(out);
  return list;
}

void *shim_from_dlpack_many_builtin(const shim_pyapi *py, void *from_dlpack_fn, void *ctx_many,
                                    void *doc) {
  home_state *state;
  void *home, *old_slow, *old_switches;
  home = py->PyCFunction_GetSelf(from_dlpack_fn); /* SystemError if not a builtin */
  if (home != NULL && py->PyModule_GetDef(home) != (void *)&home_def) home = NULL;
  py->PyErr_Clear();
  if (home == NULL || (state = (home_state *)py->PyModule_GetState(home)) == NULL ||
      state->ctx == NULL ||
      !shim_is_exact(py, ctx_many, py->PyTuple_Type) || py->PyTuple_Size(ctx_many) != 2 ||
      !shim_is_exact(py, py->PyTuple_GetItem(ctx_many, 1), py->PyDict_Type)) {
    shim_fail(DLPACKSHIM_ERR_TYPE,
              "dlpackshim__py_from_dlpack_many: expects the from_dlpack builtin and "
              "(slow_many, switches dict)");
    return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
  }
  old_slow = state->slow_many;
  old_switches = state->switches;
  state->slow_many = py->PyTuple_GetItem(ctx_many, 0);
  state->switches = py->PyTuple_GetItem(ctx_many, 1);
  py->Py_IncRef(state->slow_many);
  py->Py_IncRef(state->switches);
  if (old_slow != NULL) py->Py_DecRef(old_slow);
  if (old_switches != NULL) py->Py_DecRef(old_switches);
  return made_builtin(py, "from_dlpack_many", (void *)from_dlpack_many, SHIM_METH_O, doc, home);
}
