"""The one binding of libdlpackshim: the loader, cffi over the generated cdef, a ctypes twin.

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

from ._cdef import CDEF  # generated from csrc/dlpackshim.h (csrc/gen_cdef.py)

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

#: The C base of dlpackshim.Tensor (csrc/python/pytensor.c): its fields and its
#: __dlpack__. Raises ImportError outside the main interpreter.
TensorBase: type = pylib.dlpackshim__py_tensor_base()

#: Names of the hot-path builtins, in the library's order (csrc/python/pyfast.c, then
#: csrc/python/exchange.c): CPython builtins that the library makes at run time,
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

# DLManagedTensorVersioned.flags bits (dlpackshim_flag, from the header).
FLAG_READ_ONLY = lib.DLPACKSHIM_FLAG_READ_ONLY
FLAG_IS_COPIED = lib.DLPACKSHIM_FLAG_IS_COPIED
FLAG_IS_SUBBYTE_TYPE_PADDED = lib.DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED


def library_version() -> str:
    """The C library's version string, e.g. ``"0.1.0"``."""
    return ffi.string(lib.dlpackshim_version_string()).decode("ascii")


def dlpack_version() -> Tuple[int, int]:
    """The DLPack version the C library implements, e.g. ``(1, 3)``."""
    major = ffi.new("uint32_t *")
    minor = ffi.new("uint32_t *")
    lib.dlpackshim_dlpack_version(major, minor)
    return int(major[0]), int(minor[0])
