/*
 * pyfast.c - CPython builtins for the Python package's hot paths.
 *
 * The package calls the library through ABI-mode cffi and ctypes, and each
 * such call costs 150-300 ns in argument conversion and GIL hand-offs: more
 * than NumPy's whole from_dlpack (~200 ns). A builtin function object, made
 * here at run time with PyCFunction_NewEx (no extension module, no
 * Python.h), is called by the interpreter directly with the GIL held, for
 * ~40 ns. The package fetches each builtin once, at import, through ctypes
 * (dlpackshim__py_builtin), bound to its own Tensor class (the builtin's
 * `self`), which is the class of the Tensors the builtin makes.
 *
 *   0  _import_tensor(capsule) -> Tensor
 *       consumes a DLPack capsule into a new Tensor owning it
 *   1  _export(holder, versioned) -> capsule
 *       dlpackshim_capsule_export of the tensor that `holder` (a Tensor's
 *       _owner) holds, with its flags minus IS_COPIED (the export shares
 *       the data, so it is not an exclusive copy)
 *   2  _adopt(managed, keep) -> Tensor
 *       a Tensor owning `managed` (the address of a DLManagedTensorVersioned
 *       the library built, e.g. dlpackshim_tensor_new; 0 raises that call's
 *       error), with `keep` (None or any object) held beside it. The tensor
 *       is taken in every case: freed here on failure, so no Python code
 *       ever owns it (an interrupt cannot free it twice)
 *   3.. the exchange table's builtins (exchange.c)
 */
#include "binding.h"

#include <stddef.h>

void *shim_import_tensor(const shim_pyapi *py, void *cls, void *capsule) {
  if (SHIM_UNLIKELY(shim_import_locked(py, capsule) == NULL)) {
    int st = dlpackshim_last_status();
    return shim_py_raise(py, st != 0 ? st : DLPACKSHIM_ERR_CAPSULE);
  }
  py->Py_IncRef(capsule);
  return shim_tensor_new(py, cls, capsule);
}

static void *import_tensor(void *cls, void *capsule) {
  return shim_import_tensor(shim_py_bound(), cls, capsule);
}

static void *raise_type(const shim_pyapi *py, const char *msg) {
  shim_fail(DLPACKSHIM_ERR_TYPE, "%s", msg);
  return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
}

/* METH_FASTCALL: (holder, versioned). */
static void *export(void *cls, void *const *args, ptrdiff_t nargs) {
  const shim_pyapi *py = shim_py_bound();
  const shim_record *r;
  const DLTensor *src;
  uint64_t flags;
  long versioned;
  (void)cls;
  if (SHIM_UNLIKELY(nargs != 2)) return raise_type(py, "_export(holder, versioned) takes 2 arguments");
  versioned = py->PyLong_AsLong(args[1]);
  if (SHIM_UNLIKELY(versioned == -1 && py->PyErr_Occurred() != NULL)) return NULL;
  /* Only a capsule we consumed (its record) still owns a live tensor: any
   * other used_* capsule may point at freed memory. */
  r = shim_holder_record(py, args[0]);
  if (SHIM_UNLIKELY(r == NULL)) return raise_type(py, "_export: not a dlpackshim Tensor's owner");
  src = shim_record_tensor(r, &flags, NULL, NULL);
  flags &= ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED; /* the export shares the data */
  return shim_export_owned(py, args[0], src, flags, versioned != 0);
}

/* METH_FASTCALL: (managed, keep). */
static void *adopt(void *cls, void *const *args, ptrdiff_t nargs) {
  const shim_pyapi *py = shim_py_bound();
  DLManagedTensorVersioned *m;
  void *cap, *holder;
  long addr;
  if (SHIM_UNLIKELY(nargs != 2)) return raise_type(py, "_adopt(managed, keep) takes 2 arguments");
  addr = py->PyLong_AsLong(args[0]);
  if (SHIM_UNLIKELY(addr == -1 && py->PyErr_Occurred() != NULL)) return NULL;
  m = (DLManagedTensorVersioned *)(intptr_t)addr;
  if (m == NULL) { /* the call that should have built it failed */
    int st = dlpackshim_last_status();
    return shim_py_raise(py, st < 0 ? st : DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  cap = shim_owner_capsule(py, m); /* takes m, also on failure */
  if (SHIM_UNLIKELY(cap == NULL)) return NULL;
  holder = cap;
  if (args[1] != py->Py_None) {
    holder = py->PyTuple_Pack(2, cap, args[1]);
    py->Py_DecRef(cap);
    if (SHIM_UNLIKELY(holder == NULL)) return NULL;
  }
  return shim_tensor_new(py, cls, holder);
}

static const shim_method_def fast_defs[] = {
    {"_import_tensor", (void *)import_tensor, SHIM_METH_O,
     "_import_tensor(capsule) -> Tensor: consume a DLPack capsule into a new Tensor."},
    {"_export", (void *)export, SHIM_METH_FASTCALL,
     "_export(holder, versioned) -> capsule: export the tensor a Tensor's owner holds."},
    {"_adopt", (void *)adopt, SHIM_METH_FASTCALL,
     "_adopt(managed, keep) -> Tensor: a Tensor owning a tensor the library built."},
};

DLPACKSHIM_API void *dlpackshim__py_from_dlpack(void *ctx, void *doc) {
  const shim_pyapi *py = shim_py();
  if (py == NULL) return NULL;
  return shim_from_dlpack_builtin(py, ctx, doc);
}

DLPACKSHIM_API void *dlpackshim__py_builtin(int which, void *cls) {
  const shim_pyapi *py = shim_py();
  const shim_method_def *defs = fast_defs;
  int nfast = (int)(sizeof(fast_defs) / sizeof(fast_defs[0])), nexchange;
  const shim_method_def *exchange = shim_exchange_defs(&nexchange);
  if (py == NULL) return NULL;
  if (which >= nfast) {
    which -= nfast;
    defs = exchange;
    if (which >= nexchange) which = -1;
  }
  if (which < 0) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "dlpackshim__py_builtin: no such builtin");
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  /* PyMethodDef is not const in CPython's signature; it is never written. */
  return py->PyCFunction_NewEx((void *)(uintptr_t)&defs[which], cls, NULL);
}
