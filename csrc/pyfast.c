/*
 * pyfast.c - CPython builtins for the Python package's hot paths.
 *
 * The package calls the library through ABI-mode cffi and ctypes, and each
 * such call costs 150-300 ns in argument conversion and GIL hand-offs: more
 * than NumPy's whole from_dlpack (~200 ns). A builtin function object, made
 * here at run time with PyCFunction_NewEx (no extension module, no
 * Python.h), is called by the interpreter directly with the GIL held, for
 * ~40 ns. The package fetches the builtins once, at import, through ctypes
 * (dlpackshim_py_builtin), and keeps the flat functions for everything else.
 *
 *   0  _import_tensor(capsule) -> Tensor
 *       consumes a DLPack capsule into a new Tensor (in exchange.c, which
 *       knows the Tensor's layout)
 *   1  _export(owner, versioned) -> capsule
 *       dlpackshim_capsule_export of the tensor that `owner` (a Tensor's
 *       owner capsule) holds, with its flags minus IS_COPIED (the export
 *       shares the data, so it is not an exclusive copy)
 *   2..6 the exchange table's builtins (exchange.c)
 */
#include "internal.h"

#include <stddef.h>

/* CPython's PyMethodDef, written from its layout (stable ABI). */
typedef struct {
  const char *ml_name;
  void *ml_meth;
  int ml_flags;
  const char *ml_doc;
} shim_method_def;

enum { SHIM_METH_O = 0x0008, SHIM_METH_FASTCALL = 0x0080 };


/* METH_FASTCALL: (owner, versioned). */
static void *fast_export(void *self, void *const *args, ptrdiff_t nargs) {
  const shim_pyapi *py = shim_py();
  void *owner;
  const DLTensor *src;
  uint64_t flags;
  long versioned;
  (void)self;
  if (SHIM_UNLIKELY(py == NULL)) return NULL;
  if (SHIM_UNLIKELY(nargs != 2)) {
    shim_fail(DLPACKSHIM_ERR_TYPE, "_export(owner, versioned) takes 2 arguments");
    return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
  }
  owner = args[0];
  versioned = py->PyLong_AsLong(args[1]);
  if (SHIM_UNLIKELY(versioned == -1 && py->PyErr_Occurred() != NULL)) return NULL;
  /* Only a capsule we consumed (our destructor on it) still owns a live
   * tensor: any other used_* capsule may point at freed memory. */
  src = shim_owned_tensor(py, owner, &flags, NULL);
  if (SHIM_UNLIKELY(src == NULL)) {
    if (py->PyErr_Occurred() != NULL) py->PyErr_Clear();
    shim_fail(DLPACKSHIM_ERR_TYPE, "_export: owner is not a capsule dlpackshim consumed");
    return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
  }
  flags &= ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED; /* the export shares the data */
  return shim_export_owned(py, owner, src, flags, versioned != 0);
}

static shim_method_def fast_defs[] = {
    {"_import_tensor", (void *)shim_builtin_import_tensor, SHIM_METH_O,
     "_import_tensor(capsule) -> Tensor: consume a DLPack capsule into a new Tensor."},
    {"_export", (void *)fast_export, SHIM_METH_FASTCALL,
     "_export(owner, versioned) -> capsule: export the tensor a consumed capsule owns."},
};

DLPACKSHIM_API void *dlpackshim_py_builtin(int which) {
  const shim_pyapi *py = shim_py();
  if (py == NULL) return NULL;
  if (which >= (int)(sizeof(fast_defs) / sizeof(fast_defs[0])))
    return shim_exchange_builtin(py, which - (int)(sizeof(fast_defs) / sizeof(fast_defs[0])));
  if (which < 0) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "dlpackshim_py_builtin: no builtin number %d", which);
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  return py->PyCFunction_NewEx(&fast_defs[which], NULL, NULL);
}
