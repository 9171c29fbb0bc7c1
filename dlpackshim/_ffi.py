"""The one binding of libdlpackshim: the cdef text, the loader, and a ctypes twin.

cffi in ABI mode (``ffi.dlopen``) calls every C function except the three
that return a new Python object (a capsule): ABI-mode cffi cannot return a
``PyObject *``, so those go through a ``ctypes.PyDLL`` handle on the same
library, with ``restype = ctypes.py_object``. PyDLL keeps the GIL during the
call and raises the exception the C code set when it returns NULL.

Python objects are passed to C as ``id(obj)`` in an ``intptr_t`` (the
address, in CPython); the caller keeps the object alive for the call.

Search order of :func:`_load` (the first that loads wins):

1. ``$DLPACKSHIM_LIBRARY``, when set: the only candidate, so that a test run
   or a user override never silently picks another copy;
2. the copy bundled inside the package (``dlpackshim/libdlpackshim.so.0``,
   put there by ``setup.py``);
3. the installed library, ``libdlpackshim.so.0``, found by the dynamic
   loader's own search (``LD_LIBRARY_PATH``, ``ld.so.cache``, ...).

If none loads, one :class:`OSError` lists every path tried and why it failed.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Tuple

import cffi

from ._gpu import CDEF as _GPU_CDEF  # devices and streams (no import of _ffi)

CDEF = r"""
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

typedef void (*dlpackshim_release_fn)(void *owner);

const char *dlpackshim_version_string(void);
void dlpackshim_dlpack_version(uint32_t *major, uint32_t *minor);
int dlpackshim_negotiate_version(uint32_t producer_major, uint32_t producer_minor,
                                 uint32_t max_major, uint32_t max_minor,
                                 uint32_t *major_out, uint32_t *minor_out);

const char *dlpackshim_strerror(int status);
const char *dlpackshim_last_error(void);
int dlpackshim_last_status(void);
void dlpackshim_clear_error(void);

DLManagedTensorVersioned *dlpackshim_tensor_new(
    void *data, int32_t device_type, int32_t device_id, int32_t ndim, const int64_t *shape,
    const int64_t *strides, uint8_t dtype_code, uint8_t dtype_bits, uint16_t dtype_lanes,
    uint64_t byte_offset, uint64_t flags, void *owner, dlpackshim_release_fn release);
void dlpackshim_tensor_free(DLManagedTensorVersioned *t);
DLManagedTensorVersioned *dlpackshim_tensor_clone(const DLTensor *src, uint64_t flags);

int dlpackshim_tensor_validate(const DLTensor *t, uint64_t flags);
int64_t dlpackshim_tensor_numel(const DLTensor *t);
int64_t dlpackshim_tensor_itemsize(const DLTensor *t, uint64_t flags);
int64_t dlpackshim_tensor_nbytes(const DLTensor *t, uint64_t flags);
int dlpackshim_tensor_is_contiguous(const DLTensor *t);
int dlpackshim_tensor_byte_span(const DLTensor *t, uint64_t flags, int64_t *lo, int64_t *hi);

int dlpackshim_copy(const DLTensor *dst, const DLTensor *src);

int dlpackshim_python_available(void);
intptr_t dlpackshim_capsule_import(intptr_t capsule);
int dlpackshim_owner_info(intptr_t capsule, uint32_t *major, uint32_t *minor, uint64_t *flags);
intptr_t dlpackshim_owner_tensor(intptr_t capsule);
void dlpackshim_py_retain(intptr_t obj);
void dlpackshim_py_release(void *obj);

int dlpackshim_buffer_address(intptr_t obj, intptr_t *address_out);

DLManagedTensor *dlpackshim_tensor_new_legacy(
    void *data, int32_t device_type, int32_t device_id, int32_t ndim, const int64_t *shape,
    const int64_t *strides, uint8_t dtype_code, uint8_t dtype_bits, uint16_t dtype_lanes,
    uint64_t byte_offset, void *owner, dlpackshim_release_fn release);
typedef struct dlpackshim_counted dlpackshim_counted;
dlpackshim_counted *dlpackshim_counted_attach(void *managed, int versioned);
int64_t dlpackshim_counted_calls(const dlpackshim_counted *c);
void dlpackshim_counted_free(dlpackshim_counted *c);
"""

#: The name of the environment variable that overrides the search.
ENV_VAR = "DLPACKSHIM_LIBRARY"
#: The file name of the bundled and of the installed library (its SONAME).
SONAME = "libdlpackshim.so.0"


def _candidates() -> List[str]:
    """The paths :func:`_load` tries, in order (see the module docstring)."""
    override = os.environ.get(ENV_VAR)
    if override:
        return [override]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, SONAME), SONAME]


def _load() -> Tuple[Any, Any, ctypes.PyDLL, str]:
    """Load libdlpackshim with cffi and ctypes.

    Returns
    -------
    (ffi, lib, pylib, path)
        The cffi FFI, the cffi library, a ``ctypes.PyDLL`` handle on the same
        file (with the capsule-returning functions typed), and the path that
        loaded.

    Raises
    ------
    OSError
        No candidate loaded; the message lists each path and its error.
    """
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.cdef(_GPU_CDEF)
    tried = []
    for path in _candidates():
        try:
            lib = ffi.dlopen(path)
            # The same file again: dlopen hands back the same handle, so both
            # bindings share one copy of the library (and its thread-locals).
            pylib = ctypes.PyDLL(path)
        except OSError as exc:
            tried.append(f"  {path}: {exc}")
            continue
        _type_pylib(pylib)
        return ffi, lib, pylib, path
    raise OSError(
        "dlpackshim: cannot load libdlpackshim; tried, in order:\n"
        + "\n".join(tried)
        + f"\n(set {ENV_VAR} to the library's path, or reinstall dlpackshim)"
    )


def _type_pylib(pylib: ctypes.PyDLL) -> None:
    """Declare the functions that return a new Python reference."""
    f = pylib.dlpackshim_capsule_new
    f.argtypes = (ctypes.c_void_p, ctypes.c_int)
    f.restype = ctypes.py_object
    f = pylib.dlpackshim_capsule_export
    f.argtypes = (ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_uint64, ctypes.c_int)
    f.restype = ctypes.py_object
    f = pylib.dlpackshim_capsule_export_copy
    f.argtypes = (ctypes.c_ssize_t, ctypes.c_uint64, ctypes.c_int)
    f.restype = ctypes.py_object
    f = pylib.dlpackshim__py_builtin
    f.argtypes = (ctypes.c_int, ctypes.py_object)
    f.restype = ctypes.py_object
    f = pylib.dlpackshim__py_tensor_base
    f.argtypes = ()
    f.restype = ctypes.py_object
    f = pylib.dlpackshim__py_from_dlpack
    f.argtypes = (ctypes.py_object, ctypes.py_object)
    f.restype = ctypes.py_object
    f = pylib.dlpackshim_exchange_api_capsule
    f.argtypes = ()
    f.restype = ctypes.py_object
    f = pylib.dlpackshim_exchange_import
    f.argtypes = (ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_ssize_t))
    f.restype = ctypes.py_object


ffi, lib, pylib, library_path = _load()

#: The C base of dlpackshim.Tensor (csrc/pytensor.c): its fields and its
#: __dlpack__. Raises ImportError outside the main interpreter.
TensorBase: type = pylib.dlpackshim__py_tensor_base()

#: Names of the hot-path builtins, in the library's order (csrc/pyfast.c, then
#: csrc/exchange.c): CPython builtins that the library makes at run time,
#: since an ABI-mode cffi or ctypes call costs 150-300 ns, more than NumPy's
#: whole from_dlpack.
BUILTINS = ("_import_tensor", "_export", "_adopt", "_exchange", "_exchange_many",
            "_exchange_probe", "_exchange_register", "_exchange_forget")


def builtins(cls: type) -> Dict[str, Any]:
    """The hot-path builtins bound to `cls` (the package's Tensor class, which
    is the class of the Tensors they build), by name."""
    out = {}
    for i, name in enumerate(BUILTINS):
        fn = pylib.dlpackshim__py_builtin(i, cls)
        if fn.__name__ != name:  # the library and the package disagree
            raise ImportError(f"dlpackshim: builtin {i} is {fn.__name__}, expected {name}")
        out[name] = fn
    return out


capsule_export = pylib.dlpackshim_capsule_export
capsule_export_copy = pylib.dlpackshim_capsule_export_copy
capsule_new = pylib.dlpackshim_capsule_new
NULL = ffi.NULL

# DLManagedTensorVersioned.flags bits (dlpackshim_flag).
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2
FLAG_IS_SUBBYTE_TYPE_PADDED = 4


def library_version() -> str:
    """The C library's version string, e.g. ``"0.1.0"``."""
    return ffi.string(lib.dlpackshim_version_string()).decode("ascii")


def dlpack_version() -> Tuple[int, int]:
    """The DLPack version the C library implements, e.g. ``(1, 3)``."""
    major = ffi.new("uint32_t *")
    minor = ffi.new("uint32_t *")
    lib.dlpackshim_dlpack_version(major, minor)
    return int(major[0]), int(minor[0])
