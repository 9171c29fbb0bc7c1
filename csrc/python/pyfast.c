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
 *       dlpackshim__capsule_export of the tensor that `holder` (a Tensor's
 *       _owner) holds, with its flags minus IS_COPIED (the export shares
 *       the data, so it is not an exclusive copy)
 *   2  _view(data, device_type, device_id, ndim, shape, strides, code, bits,
 *            lanes, byte_offset, flags, keep) -> Tensor
 *   3  _clone(holder, flags) -> Tensor
 *       a view of memory `keep` keeps alive (validated as by
 *       dlpackshim_tensor_new) / a dlpackshim_tensor_clone, and the Tensor
 *       that owns it, in one call: no Python code ever owns the new tensor,
 *       so an interrupt can neither leak it nor free it twice
 *   4.. the exchange table's builtins (exchange.c), then the imports that
 *       are not DLPack (interfaces.c)
 */
#include "binding.h"

#include <stddef.h>

void *shim_import_tensor(const shim_pyapi *py, void *cls, void *capsule) {
  const shim_record *r = shim_import_locked(py, capsule);
  if (SHIM_UNLIKELY(r == NULL)) {
    int st = dlpackshim_last_status();
    return shim_py_raise(py, st != 0 ? st : DLPACKSHIM_ERR_CAPSULE);
  }
  py->Py_IncRef(capsule);
  return shim_tensor_of_record(py, cls, capsule, r);
}

static void *import_tensor(void *cls, void *capsule) {
  return shim_import_tensor(shim_py_bound(), cls, capsule);
}

static void *raise_type(const shim_pyapi *py, const char *msg) {
  return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s", msg);
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
  return shim_export_owned(py, shim_record_export_holder(py, args[0], r), src, flags,
                           versioned != 0);
}

/* The Tensor owning m, built by a call that returned st (its error raised
 * when it failed). */
static void *adopt(const shim_pyapi *py, void *cls, int st, DLManagedTensorVersioned *m,
                   void *keep) {
  if (st != 0) return shim_py_raise(py, st);
  return shim_tensor_adopt(py, cls, m, keep, 1);
}

/* Reads args[i] as an int64 (or, unsigned, a uint64) into *out; 0 on an
 * error (exception set). */
static int arg_i64(const shim_pyapi *py, void *arg, int64_t *out) {
  *out = (int64_t)py->PyLong_AsLongLong(arg);
  return !(*out == -1 && py->PyErr_Occurred() != NULL);
}

/* METH_FASTCALL: (data, device_type, device_id, ndim, shape, strides, code,
 * bits, lanes, byte_offset, flags, keep): the Tensor viewing that memory
 * (validated as dlpackshim_tensor_new validates), kept alive by keep, in one
 * call; shape and strides are addresses of int64 arrays (0 for NULL) that
 * the caller keeps alive for the call. */
static void *view(void *cls, void *const *args, ptrdiff_t nargs) {
  const shim_pyapi *py = shim_py_bound();
  int64_t v[11];
  uint64_t data;
  int i;
  if (SHIM_UNLIKELY(nargs != 12)) return raise_type(py, "_view takes 12 arguments");
  data = (uint64_t)py->PyLong_AsUnsignedLongLong(args[0]);
  if (data == (uint64_t)-1 && py->PyErr_Occurred() != NULL) return NULL;
  for (i = 1; i < 11; i++)
    if (!arg_i64(py, args[i], &v[i])) return NULL;
  DLTensor t;
  t.data = (void *)(uintptr_t)data;
  t.device.device_type = (DLDeviceType)(int32_t)v[1];
  t.device.device_id = (int32_t)v[2];
  t.ndim = (int32_t)v[3];
  t.shape = (int64_t *)(intptr_t)v[4];
  t.strides = (int64_t *)(intptr_t)v[5];
  t.dtype.code = (uint8_t)v[6];
  t.dtype.bits = (uint8_t)v[7];
  t.dtype.lanes = (uint16_t)v[8];
  t.byte_offset = (uint64_t)v[9];
  return shim_tensor_view(py, cls, &t, (uint64_t)v[10], args[11]);
}

/* METH_FASTCALL: (holder, flags): a compact copy of the tensor a Tensor's
 * holder owns (dlpackshim_tensor_clone with flags), as a new Tensor. */
static void *clone(void *cls, void *const *args, ptrdiff_t nargs) {
  const shim_pyapi *py = shim_py_bound();
  const shim_record *r;
  int64_t flags;
  if (SHIM_UNLIKELY(nargs != 2)) return raise_type(py, "_clone(holder, flags) takes 2 arguments");
  if (!arg_i64(py, args[1], &flags)) return NULL;
  r = shim_holder_record(py, args[0]);
  if (SHIM_UNLIKELY(r == NULL)) return raise_type(py, "_clone: not a dlpackshim Tensor's owner");
  DLManagedTensorVersioned *m = NULL;
  int st = dlpackshim_tensor_clone(shim_record_tensor(r, NULL, NULL, NULL), (uint64_t)flags, &m);
  return adopt(py, cls, st, m, py->Py_None);
}

static const shim_method_def fast_defs[] = {
    {"_import_tensor", (void *)import_tensor, SHIM_METH_O,
     "_import_tensor(capsule) -> Tensor: consume a DLPack capsule into a new Tensor."},
    {"_export", (void *)export, SHIM_METH_FASTCALL,
     "_export(holder, versioned) -> capsule: export the tensor a Tensor's owner holds."},
    {"_view", (void *)view, SHIM_METH_FASTCALL,
     "_view(data, device_type, device_id, ndim, shape, strides, code, bits, lanes, byte_offset,"
     " flags, keep) -> Tensor: a validated view of memory keep keeps alive, in one call."},
    {"_clone", (void *)clone, SHIM_METH_FASTCALL,
     "_clone(holder, flags) -> Tensor: a compact copy (dlpackshim_tensor_clone) as a Tensor."},
};

DLPACKSHIM_API void *dlpackshim__py_from_dlpack(void *ctx, void *doc) {
  const shim_pyapi *py = shim_py();
  if (py == NULL) return NULL;
  return shim_from_dlpack_builtin(py, ctx, doc);
}

DLPACKSHIM_API void *dlpackshim__py_from_dlpack_many(void *from_dlpack_fn, void *ctx_many,
                                                     void *doc) {
  const shim_pyapi *py = shim_py();
  if (py == NULL) return NULL;
  return shim_from_dlpack_many_builtin(py, from_dlpack_fn, ctx_many, doc);
}

DLPACKSHIM_API void *dlpackshim__py_builtin(int which, void *cls) {
  const shim_pyapi *py = shim_py();
  const shim_method_def *groups[3];
  int counts[3], g;
  if (py == NULL) return NULL;
  if (shim_py_strings(py) != 0) return NULL;
  groups[0] = fast_defs;
  counts[0] = (int)(sizeof(fast_defs) / sizeof(fast_defs[0]));
  groups[1] = shim_exchange_defs(&counts[1]);
  groups[2] = shim_interface_defs(&counts[2]);
  for (g = 0; g < 3 && which >= counts[g]; g++) which -= counts[g];
  if (which < 0 || g == 3) {
    shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "dlpackshim__py_builtin: no such builtin");
    return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
  }
  /* PyMethodDef is not const in CPython's signature; it is never written. */
  return py->PyCFunction_NewEx((void *)(uintptr_t)&groups[g][which], cls, NULL);
}
