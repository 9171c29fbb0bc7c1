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
 *   - the buffer protocol: builds the Tensor here (below);
 *   - anything else, any keyword, any error of classification: calls the
 *     package's Python implementation (the slow path), which also fills the
 *     cache. Errors a producer raises propagate unchanged, as there.
 *
 * ctx, bound by the package: (cls, how, slow, max_version, codes), codes =
 * (VERSIONED, MV_ONLY, LEGACY, EXCHANGE, BUFFER): the values of `how` the
 * package defines (dlpackshim/_consume.py is their one source).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

enum { CTX_CLS, CTX_HOW, CTX_SLOW, CTX_MAX_VERSION, CTX_CODES, CTX_SIZE };
enum { CODE_VERSIONED, CODE_MV_ONLY, CODE_LEGACY, CODE_EXCHANGE, CODE_BUFFER, CODE_COUNT };
enum { SHIM_METH_KEYWORDS = 0x0002 };

static void *name_dlpack, *kw_max_version;

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

/* PEP 3118 format of one native-order scalar -> DLPack code, or -1 for
 * anything the fast path leaves to the slow one (which explains the error).
 * The width comes from the itemsize, as the package does. */
static int format_code(const char *f, ptrdiff_t itemsize) {
  if (f == NULL) return kDLUInt; /* PyBUF_FORMAT not honoured: bytes ("B") */
  if (*f == '@' || *f == '=' || *f == '<') f++; /* native order (little-endian build) */
  if (itemsize <= 0 || itemsize > 16) return -1;
  if (f[0] != '\0' && f[1] == '\0') {
    switch (f[0]) {
      case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': return kDLInt;
      case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': case 'c': return kDLUInt;
      case 'e': case 'f': case 'd': return kDLFloat;
      case '?': return itemsize == 1 ? kDLBool : -1;
      default: return -1;
    }
  }
  if (f[0] == 'Z' && (f[1] == 'f' || f[1] == 'd') && f[2] == '\0') return kDLComplex;
  return -1;
}

enum { FAST_MAX_NDIM = 64 };

/* x through the buffer protocol, as the package's _buffer.from_buffer does:
 * a memoryview (an export: bytearray cannot resize, mmap cannot close under
 * it; the garbage collector sees through it) kept beside the capsule.
 * *handled = 0 when the slow path must do it (no exception then). */
static void *buffer_tensor(const shim_pyapi *py, void *cls, void *x, int *handled) {
  shim_py_buffer view;
  int64_t shape[FAST_MAX_NDIM], strides[FAST_MAX_NDIM];
  DLManagedTensorVersioned *m;
  void *mv, *cap, *holder;
  int code, i;
  *handled = 0;
  mv = py->PyMemoryView_FromObject(x);
  if (mv == NULL) {
    py->PyErr_Clear();
    return NULL;
  }
  if (py->PyObject_GetBuffer(mv, &view, SHIM_PYBUF_STRIDES | SHIM_PYBUF_FORMAT) != 0) {
    py->PyErr_Clear();
    py->Py_DecRef(mv);
    return NULL;
  }
  code = format_code(view.format, view.itemsize);
  if (code < 0 || view.suboffsets != NULL || view.ndim < 0 || view.ndim > FAST_MAX_NDIM) {
    py->PyBuffer_Release(&view);
    py->Py_DecRef(mv);
    return NULL;
  }
  for (i = 0; i < view.ndim; i++) {
    shape[i] = view.shape[i];
    strides[i] = view.strides[i] / view.itemsize;
    if (view.strides[i] % view.itemsize != 0) { /* not whole elements */
      py->PyBuffer_Release(&view);
      py->Py_DecRef(mv);
      return NULL;
    }
  }
  *handled = 1;
  m = dlpackshim_tensor_new(view.buf, kDLCPU, 0, view.ndim, shape, strides, (uint8_t)code,
                            (uint8_t)(view.itemsize * 8), 1, 0,
                            view.readonly ? DLPACKSHIM_FLAG_READ_ONLY : 0, NULL, NULL);
  py->PyBuffer_Release(&view); /* the memoryview keeps its own export */
  if (m == NULL) {
    py->Py_DecRef(mv);
    return shim_py_raise(py, dlpackshim_last_status());
  }
  cap = shim_owner_capsule(py, m); /* takes m */
  if (cap == NULL) {
    py->Py_DecRef(mv);
    return NULL;
  }
  holder = py->PyTuple_Pack(2, cap, mv);
  py->Py_DecRef(cap);
  py->Py_DecRef(mv);
  if (holder == NULL) return NULL;
  return shim_tensor_new(py, cls, holder);
}

static void *from_dlpack(void *ctx, void *const *args, ptrdiff_t nargs, void *kwnames) {
  const shim_pyapi *py = shim_py_bound();
  void *x, *how, *codes, *cap, *t, *margs[2];
  long code;
  ptrdiff_t i, nkw = kwnames != NULL ? py->PyTuple_Size(kwnames) : 0;
  int handled;
  for (i = 0; i < nkw; i++)
    if (args[nargs + i] != py->Py_None) return call_slow(py, ctx, args, nargs, kwnames);
  if (SHIM_UNLIKELY(nargs != 1)) return call_slow(py, ctx, args, nargs, kwnames);
  x = args[0];
  how = py->PyDict_GetItem(py->PyTuple_GetItem(ctx, CTX_HOW), shim_type_of(x));
  if (how == NULL) return call_slow(py, ctx, args, 1, NULL);
  code = py->PyLong_AsLong(how);
  codes = py->PyTuple_GetItem(ctx, CTX_CODES);
#define IS(c) (code == py->PyLong_AsLong(py->PyTuple_GetItem(codes, (c))))
  if (IS(CODE_VERSIONED) || IS(CODE_MV_ONLY)) {
    margs[0] = x;
    margs[1] = py->PyTuple_GetItem(ctx, CTX_MAX_VERSION);
    cap = py->PyObject_VectorcallMethod(name_dlpack, margs, 1, kw_max_version);
  } else if (IS(CODE_LEGACY)) {
    margs[0] = x;
    cap = py->PyObject_VectorcallMethod(name_dlpack, margs, 1, NULL);
  } else if (IS(CODE_EXCHANGE)) {
    return shim_exchange_one(py, py->PyTuple_GetItem(ctx, CTX_CLS), x);
  } else if (IS(CODE_BUFFER)) {
    t = buffer_tensor(py, py->PyTuple_GetItem(ctx, CTX_CLS), x, &handled);
    return handled ? t : call_slow(py, ctx, args, 1, NULL);
  } else {
    return call_slow(py, ctx, args, 1, NULL);
  }
#undef IS
  if (cap == NULL) return NULL; /* the producer's error, unchanged */
  t = shim_import_tensor(py, py->PyTuple_GetItem(ctx, CTX_CLS), cap);
  py->Py_DecRef(cap);
  return t;
}

void *shim_from_dlpack_builtin(const shim_pyapi *py, void *ctx, void *doc) {
  shim_method_def *def;
  void *bytes, *module, *fn;
  const char *text;
  char *copy;
  size_t n;
  if (shim_type_of(ctx) != py->PyTuple_Type || py->PyTuple_Size(ctx) != CTX_SIZE ||
      shim_type_of(py->PyTuple_GetItem(ctx, CTX_HOW)) != py->PyDict_Type ||
      py->PyTuple_Size(py->PyTuple_GetItem(ctx, CTX_CODES)) != CODE_COUNT) {
    shim_fail(DLPACKSHIM_ERR_TYPE, "dlpackshim__py_from_dlpack: malformed context");
    return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
  }
  if (name_dlpack == NULL) {
    void *mv = py->PyUnicode_InternFromString("max_version");
    name_dlpack = py->PyUnicode_InternFromString("__dlpack__");
    if (mv == NULL || name_dlpack == NULL) return NULL;
    kw_max_version = py->PyTuple_Pack(1, mv);
    py->Py_DecRef(mv);
    if (kw_max_version == NULL) return NULL;
  }
  /* The method table lives as long as the function: one per package import,
   * never freed (a builtin keeps a pointer to it). */
  bytes = py->PyUnicode_AsUTF8String(doc);
  if (bytes == NULL) return NULL;
  text = py->PyBytes_AsString(bytes);
  n = strlen(text);
  def = (shim_method_def *)malloc(sizeof(*def) + n + 1);
  if (def == NULL) {
    py->Py_DecRef(bytes);
    shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
    return shim_py_raise(py, DLPACKSHIM_ERR_NO_MEMORY);
  }
  copy = (char *)(def + 1);
  memcpy(copy, text, n + 1);
  py->Py_DecRef(bytes);
  def->ml_name = "from_dlpack";
  def->ml_meth = (void *)from_dlpack;
  def->ml_flags = SHIM_METH_FASTCALL | SHIM_METH_KEYWORDS;
  def->ml_doc = copy;
  module = py->PyUnicode_InternFromString("dlpackshim");
  if (module == NULL) return NULL;
  fn = py->PyCFunction_NewEx(def, ctx, module);
  py->Py_DecRef(module);
  return fn;
}
